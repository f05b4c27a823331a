/* png_reader.h — read a PNG file into 8-bit RGB pixels plus its text chunks.
 *
 * Meant for tests and checks (round trips, comparing cpdit's images with reference images
 * saved by diffusers/PIL). Any PNG is accepted and converted to (H, W, 3) uint8: palette
 * and grey are expanded to RGB, 16-bit samples are scaled to 8 bits, alpha is dropped
 * (not composited), interlacing is undone. Text from tEXt, zTXt and iTXt chunks before
 * and after the image data is returned as UTF-8 (tEXt/zTXt are Latin-1 and converted).
 * libpng errors (truncated file, bad CRC in a critical chunk, ...) become a cpdit_error.
 */
#ifndef CPDIT_PNG_READER_H
#define CPDIT_PNG_READER_H

#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpdit_png_text_kind {
    CPDIT_PNG_TEXT_TEXT = 0, /* tEXt: Latin-1, uncompressed */
    CPDIT_PNG_TEXT_ZTXT = 1, /* zTXt: Latin-1, compressed */
    CPDIT_PNG_TEXT_ITXT = 2  /* iTXt: UTF-8 */
} cpdit_png_text_kind;

typedef struct cpdit_png_text_chunk {
    char *key;   /* UTF-8 */
    char *value; /* UTF-8 */
    cpdit_png_text_kind kind;
} cpdit_png_text_chunk;

typedef struct cpdit_png_image {
    int width, height;
    uint8_t *rgb; /* (height, width, 3), row-major */
    int n_text;
    cpdit_png_text_chunk *text; /* in file order */
} cpdit_png_image;

/* Read path into img (which is overwritten; free it with cpdit_png_image_free).
 * Errors: CPDIT_ERR_INPUT for a file that is not a PNG or is damaged, CPDIT_ERR_RUNTIME
 * when it cannot be opened or memory runs out. On error img is empty. */
cpdit_status cpdit_png_read_rgb8(const char *path, cpdit_png_image *img, cpdit_error *err);

/* The first text chunk whose key equals key, or NULL. kind may be NULL. */
const char *cpdit_png_image_text(const cpdit_png_image *img, const char *key,
                                 cpdit_png_text_kind *kind);

void cpdit_png_image_free(cpdit_png_image *img);

#ifdef __cplusplus
}
#endif
#endif
