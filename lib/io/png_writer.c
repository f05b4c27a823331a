/* png_writer.c — RGB8 PNG files with tEXt/iTXt metadata through libpng (see png_writer.h). */
#include "lib/io/png_writer.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/core/utf8.h"
#include "lib/io/atomic_file.h"

/* PNG keywords are 1 to 79 bytes long (PNG spec, tEXt chunk). */
#define PNG_KEYWORD_MAX 79
#define RGB_CHANNELS 3
#define BITS_PER_CHANNEL 8

static int is_ascii(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p >= 0x80)
            return 0;
    return 1;
}

cpdit_status cpdit_png_check_text(const cpdit_png_text *t, const char *where, cpdit_error *err)
{
    if (!t->key || !t->key[0])
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "PNG text key is empty");
    size_t n = strlen(t->key);
    if (n > PNG_KEYWORD_MAX)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "PNG text key \"%.20s...\" is %zu bytes long; at most %d allowed",
                               t->key, n, PNG_KEYWORD_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t->key[i];
        if (c < 32 || c > 126)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "PNG text key \"%s\": byte %zu (0x%02x) is not printable "
                                   "ASCII",
                                   t->key, i, c);
        if (c == ' ' && (i == 0 || i == n - 1 || t->key[i + 1] == ' '))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "PNG text key \"%s\": leading, trailing or doubled spaces "
                                   "are not allowed",
                                   t->key);
    }
    if (!t->value)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "PNG text key \"%s\": value is NULL",
                               t->key);
    if (!cpdit_utf8_valid(t->value))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "PNG text key \"%s\": value is not valid UTF-8", t->key);
    return CPDIT_OK;
}

/* Where libpng's error callback leaves its message before longjmp-ing back. */
typedef struct png_error_ctx {
    char message[256];
} png_error_ctx;

static void on_png_error(png_structp png, png_const_charp msg)
{
    png_error_ctx *ctx = (png_error_ctx *)png_get_error_ptr(png);
    snprintf(ctx->message, sizeof ctx->message, "%s", msg ? msg : "unknown error");
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg; /* warnings (e.g. about ignored ancillary data) do not stop the write */
}

/* Encode the image into fp. texts: prepared png_text entries. Returns CPDIT_OK or a
 * runtime error with libpng's message. No local that is changed after setjmp is read
 * after a longjmp, so none needs to be volatile. */
static cpdit_status encode_png(FILE *fp, const char *where, const uint8_t *rgb, int width,
                               int height, png_text *texts, int n_text, cpdit_error *err)
{
    png_error_ctx ctx;
    ctx.message[0] = '\0';
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, &ctx, on_png_error, on_png_warning);
    if (!png)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "libpng: cannot create writer");
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "libpng: out of memory");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "libpng: %s", ctx.message);
    }
    png_init_io(png, fp);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, BITS_PER_CHANNEL,
                 PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (n_text > 0)
        png_set_text(png, info, texts, n_text);
    png_write_info(png, info);
    size_t row_bytes = (size_t)width * RGB_CHANNELS;
    for (int y = 0; y < height; y++)
        png_write_row(png, rgb + (size_t)y * row_bytes);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return CPDIT_OK;
}

cpdit_status cpdit_png_write_rgb8(const char *path, const uint8_t *rgb, int width, int height,
                                  const cpdit_png_text *text, int n_text, cpdit_error *err)
{
    const char *where = path ? path : "";
    if (width <= 0 || height <= 0 || width > CPDIT_PNG_MAX_SIDE || height > CPDIT_PNG_MAX_SIDE)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "image size %dx%d: width and height must be in 1..%d", width,
                               height, CPDIT_PNG_MAX_SIDE);
    if (!rgb)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "no pixel data");
    if (n_text < 0 || (n_text > 0 && !text))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "bad text entry list");
    for (int i = 0; i < n_text; i++) {
        cpdit_status st = cpdit_png_check_text(&text[i], where, err);
        if (st)
            return st;
    }
    png_text *texts = NULL;
    if (n_text > 0) {
        texts = calloc((size_t)n_text, sizeof *texts);
        if (!texts)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    }
    for (int i = 0; i < n_text; i++) {
        /* libpng copies these strings in png_set_text and never writes through them. */
        texts[i].key = (png_charp)text[i].key;
        texts[i].text = (png_charp)text[i].value;
        if (is_ascii(text[i].value)) {
            texts[i].compression = PNG_TEXT_COMPRESSION_NONE; /* tEXt */
            texts[i].text_length = strlen(text[i].value);
        } else {
            texts[i].compression = PNG_ITXT_COMPRESSION_NONE; /* iTXt, UTF-8 */
            texts[i].itxt_length = strlen(text[i].value);
            texts[i].lang = (png_charp) "";
            texts[i].lang_key = (png_charp) "";
        }
    }

    atomic_file af;
    cpdit_status st = atomic_file_begin(&af, path, err);
    if (st) {
        free(texts);
        return st;
    }
    st = encode_png(af.fp, where, rgb, width, height, texts, n_text, err);
    free(texts);
    if (st) {
        /* If the stream failed (e.g. no space), report the I/O reason rather than libpng's
         * generic "Write Error": commit sees the stream error, reports the errno the
         * atomic_file kept, and removes the temporary file. */
        if (ferror(af.fp)) {
            cpdit_error io;
            if (atomic_file_commit(&af, &io) != CPDIT_OK && err)
                *err = io;
            return CPDIT_ERR_RUNTIME;
        }
        atomic_file_abort(&af);
        return st;
    }
    return atomic_file_commit(&af, err);
}
