/* contact_sheet.h — one PNG grid of the images of an output folder, with their prompts in a
 * sidecar text file, and builtin:shapes' colour check of each image (shapes_grammar.h).
 *
 * Reads DIR/index.jsonl (written by `cpdit run`; for each item index the last line with
 * status "ok" counts), places the images in item order, `cols` per row (cells the size of
 * the largest image, black around smaller ones), and writes
 *   DIR/contact-sheet.png   the grid
 *   DIR/contact-sheet.txt   one line per cell: "ROW COL FILE: PROMPT", then, for prompts of
 *                           the shapes grammar, "| shape COLOUR (want C) background COLOUR
 *                           (want C) right|wrong"; last line "checked: R/N right".
 */
#ifndef CPDIT_CONTACT_SHEET_H
#define CPDIT_CONTACT_SHEET_H

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct contact_sheet_result {
    int images;   /* cells */
    int checked;  /* images whose prompt names a full shapes scene */
    int right;    /* of those, the ones whose two colours are right */
} contact_sheet_result;

/* Errors: no index or no image (INPUT), unreadable PNGs / I/O (RUNTIME). cols >= 1. */
cpdit_status contact_sheet_write(const char *dir, int cols, contact_sheet_result *res,
                                 cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
