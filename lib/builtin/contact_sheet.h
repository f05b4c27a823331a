/* contact_sheet.h — one PNG grid of the images or clips of an output folder, with their
 * prompts in a sidecar text file, and builtin:shapes' colour check of each image
 * (shapes_grammar.h).
 *
 * Reads DIR/index.jsonl (written by `cpdit run`; for each item index the last line with
 * status "ok" counts). An image is one tile; a clip (its index line has "frames": mp4, webp
 * or png-frames, read back with video_reader.h) is three tiles side by side, 2 pixels
 * apart: its first, middle ((frames - 1) / 2) and last frame. Cells go in item order, `cols`
 * per row (<= 0: 4 for images, 1 when the folder holds clips), 6 pixels of dark grey
 * between them and around the sheet (tiles with the same background do not merge); tiles
 * are the size of the largest, black around smaller ones. Writes
 *   DIR/contact-sheet.png   the grid
 *   DIR/contact-sheet.txt   one line per cell: "ROW COL FILE: PROMPT" (a clip: "ROW COL FILE
 *                           (frames 0, M, L of N): PROMPT"), then, for prompts of the shapes
 *                           grammar, "| shape COLOUR (want C) background COLOUR (want C)
 *                           right|wrong" (a clip: "| frame K: ..." for each tile, right when
 *                           all three are); last line "checked: R/N right".
 */
#ifndef CPDIT_CONTACT_SHEET_H
#define CPDIT_CONTACT_SHEET_H

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct contact_sheet_result {
    int images;   /* cells (images and clips) */
    int clips;    /* of those, clips */
    int checked;  /* images whose prompt names a full shapes scene */
    int right;    /* of those, the ones whose two colours are right */
} contact_sheet_result;

/* Errors: no index or no image, a clip whose frame count is not its index line's, a clip
 * format this build cannot read (INPUT); unreadable files / I/O (RUNTIME). */
cpdit_status contact_sheet_write(const char *dir, int cols, contact_sheet_result *res,
                                 cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
