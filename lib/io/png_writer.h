/* png_writer.h — write 8-bit RGB images as PNG files with text metadata, atomically.
 *
 * Pixels are (H, W, 3) uint8, row-major, R G B per pixel (what image_postprocess.h makes
 * from the VAE output). Text entries become tEXt chunks when the value is plain ASCII and
 * iTXt chunks (UTF-8, uncompressed, empty language tag) otherwise: PNG requires tEXt to be
 * Latin-1, and storing the UTF-8 bytes verbatim in iTXt means a prompt such as
 * "一只猫 café" reads back byte for byte. Text chunks are written before the image data,
 * where metadata readers look first. No time chunk is written, so the same pixels and text
 * give the same bytes (useful for resume checks and tests).
 *
 * The file is written through atomic_file: it appears complete or not at all. libpng
 * reports errors by longjmp; those become a cpdit_error naming the path.
 */
#ifndef CPDIT_PNG_WRITER_H
#define CPDIT_PNG_WRITER_H

#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One text entry. key: 1-79 printable ASCII characters (32..126), no leading, trailing or
 * doubled spaces (the PNG keyword rules). value: NUL-terminated UTF-8 text. */
typedef struct cpdit_png_text {
    const char *key;
    const char *value;
} cpdit_png_text;

/* Largest width or height accepted, libpng's default user limit (PNG_USER_WIDTH_MAX). */
#define CPDIT_PNG_MAX_SIDE 1000000

/* Write rgb (height x width x 3 uint8, row-major) to path with n_text text entries.
 * Errors: CPDIT_ERR_INPUT for a bad size, keyword or non-UTF-8 value (nothing is written);
 * CPDIT_ERR_RUNTIME for I/O failures (no space, permission, missing folder) and libpng
 * errors (no file, or the previous file, is left at path). */
cpdit_status cpdit_png_write_rgb8(const char *path, const uint8_t *rgb, int width, int height,
                                  const cpdit_png_text *text, int n_text, cpdit_error *err);

/* Check one text entry as cpdit_png_write_rgb8 does. Returns CPDIT_OK or
 * CPDIT_ERR_INPUT with a message naming the key. where: for the message. */
cpdit_status cpdit_png_check_text(const cpdit_png_text *t, const char *where, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
