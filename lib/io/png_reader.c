/* png_reader.c — PNG file to RGB8 pixels + UTF-8 text through libpng (see png_reader.h). */
#include "lib/io/png_reader.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PNG_SIGNATURE_BYTES 8
#define RGB_CHANNELS 3

/* State the longjmp handler needs; members changed after setjmp are volatile. */
typedef struct png_read_ctx {
    char message[256];
    png_bytep *volatile rows;
} png_read_ctx;

static void on_png_error(png_structp png, png_const_charp msg)
{
    png_read_ctx *ctx = (png_read_ctx *)png_get_error_ptr(png);
    snprintf(ctx->message, sizeof ctx->message, "%s", msg ? msg : "unknown error");
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* Latin-1 bytes (n of them) to a new NUL-terminated UTF-8 string. */
static char *latin1_to_utf8(const char *s, size_t n)
{
    char *out = malloc(2 * n + 1);
    if (!out)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            out[j++] = (char)c;
        } else {
            out[j++] = (char)(0xC0 | (c >> 6));
            out[j++] = (char)(0x80 | (c & 0x3F));
        }
    }
    out[j] = '\0';
    return out;
}

static void free_text(cpdit_png_image *img)
{
    for (int i = 0; i < img->n_text; i++) {
        free(img->text[i].key);
        free(img->text[i].value);
    }
    free(img->text);
    img->text = NULL;
    img->n_text = 0;
}

void cpdit_png_image_free(cpdit_png_image *img)
{
    if (!img)
        return;
    free(img->rgb);
    img->rgb = NULL;
    free_text(img);
    img->width = img->height = 0;
}

/* Copy libpng's text entries into img as UTF-8. Returns 0 or -1 (out of memory). */
static int copy_text(cpdit_png_image *img, const png_text *t, int n)
{
    if (n <= 0)
        return 0;
    img->text = calloc((size_t)n, sizeof *img->text);
    if (!img->text)
        return -1;
    for (int i = 0; i < n; i++) {
        cpdit_png_text_chunk *c = &img->text[img->n_text++];
        c->key = latin1_to_utf8(t[i].key, strlen(t[i].key));
        if (t[i].compression == PNG_ITXT_COMPRESSION_NONE ||
            t[i].compression == PNG_ITXT_COMPRESSION_zTXt) {
            c->kind = CPDIT_PNG_TEXT_ITXT;
            c->value = strndup(t[i].text ? t[i].text : "", t[i].itxt_length);
        } else {
            c->kind = t[i].compression == PNG_TEXT_COMPRESSION_zTXt ? CPDIT_PNG_TEXT_ZTXT
                                                                    : CPDIT_PNG_TEXT_TEXT;
            c->value = latin1_to_utf8(t[i].text ? t[i].text : "", t[i].text_length);
        }
        if (!c->key || !c->value)
            return -1;
    }
    return 0;
}

cpdit_status cpdit_png_read_rgb8(const char *path, cpdit_png_image *img, cpdit_error *err)
{
    memset(img, 0, sizeof *img);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot open: %s", strerror(errno));
    unsigned char sig[PNG_SIGNATURE_BYTES];
    if (fread(sig, 1, sizeof sig, fp) != sizeof sig || png_sig_cmp(sig, 0, sizeof sig) != 0) {
        fclose(fp);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "not a PNG file (bad signature)");
    }
    png_read_ctx ctx;
    ctx.message[0] = '\0';
    ctx.rows = NULL;
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, on_png_error, on_png_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        if (png)
            png_destroy_read_struct(&png, NULL, NULL);
        fclose(fp);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "libpng: out of memory");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        fclose(fp);
        free(ctx.rows);
        cpdit_png_image_free(img);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "cannot read PNG: %s", ctx.message);
    }
    png_init_io(png, fp);
    png_set_sig_bytes(png, PNG_SIGNATURE_BYTES);
    png_read_info(png, info);

    png_uint_32 w = png_get_image_width(png, info);
    png_uint_32 h = png_get_image_height(png, info);
    int color = png_get_color_type(png, info);
    int depth = png_get_bit_depth(png, info);
    if (color == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16)
        png_set_scale_16(png);
    if (color & PNG_COLOR_MASK_ALPHA)
        png_set_strip_alpha(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);

    size_t row_bytes = (size_t)w * RGB_CHANNELS;
    if (png_get_rowbytes(png, info) != row_bytes)
        png_error(png, "unexpected row size after conversion to RGB8");
    img->width = (int)w;
    img->height = (int)h;
    img->rgb = malloc(row_bytes * h);
    ctx.rows = malloc(sizeof(png_bytep) * h);
    if (!img->rgb || !ctx.rows)
        png_error(png, "out of memory for the image");
    for (png_uint_32 y = 0; y < h; y++)
        ctx.rows[y] = img->rgb + (size_t)y * row_bytes;
    png_read_image(png, ctx.rows);
    png_read_end(png, info); /* also collects text chunks that follow the image data */

    png_textp t = NULL;
    int n = png_get_text(png, info, &t, NULL);
    if (copy_text(img, t, n) != 0)
        png_error(png, "out of memory for text chunks");

    free(ctx.rows);
    ctx.rows = NULL;
    png_destroy_read_struct(&png, &info, NULL);
    fclose(fp);
    return CPDIT_OK;
}

const char *cpdit_png_image_text(const cpdit_png_image *img, const char *key,
                                 cpdit_png_text_kind *kind)
{
    for (int i = 0; i < img->n_text; i++) {
        if (strcmp(img->text[i].key, key) == 0) {
            if (kind)
                *kind = img->text[i].kind;
            return img->text[i].value;
        }
    }
    return NULL;
}
