/* test_png.c — PNG round trip with tEXt/iTXt metadata, libpng errors as cpdit_error, and
 * diffusers' float -> uint8 conversion (exact byte values, half-to-even rounding). */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lib/pipeline/image_postprocess.h"
#include "lib/io/png_reader.h"
#include "lib/io/png_writer.h"
#include "lib/core/utf8.h"
#include "tests/test_util.h"
#include "tests/test_tmpdir.h"

#define TEST_W 37 /* odd sizes catch row-stride mistakes */
#define TEST_H 23
#define CJK_PROMPT "一只戴着帽子的猫 — café, 東京の夜 🌃"
#define LATIN1_PROMPT "crème brûlée"
#define PNG_SIGNATURE "\x89PNG\r\n\x1a\n"

/* Deterministic bytes (xorshift32). */
static uint32_t rng_state = 0x12345678u;
static uint8_t next_byte(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return (uint8_t)(rng_state >> 24);
}

static void test_round_trip(const char *dir)
{
    size_t n = (size_t)TEST_W * TEST_H * 3;
    uint8_t *rgb = malloc(n);
    for (size_t i = 0; i < n; i++)
        rgb[i] = next_byte();
    rgb[0] = 0, rgb[1] = 255; /* the extremes are in there */
    const cpdit_png_text text[] = {
        {"prompt", "a photo of a cat, 4k"},
        {"seed", "42"},
        {"steps", "28"},
        {"model", "black-forest-labs/FLUX.1-dev"},
        {"prompt_cjk", CJK_PROMPT},
        {"prompt_latin1", LATIN1_PROMPT},
        {"multi line", "line one\nline two"},
        {"empty", ""},
    };
    const int n_text = (int)(sizeof text / sizeof text[0]);
    char *path = tmp_path(dir, "img.png");
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(cpdit_png_write_rgb8(path, rgb, TEST_W, TEST_H, text, n_text, &err) == CPDIT_OK);
    CHECK(tmp_count_temp_files(dir) == 0);

    size_t len = 0;
    char *bytes = tmp_read(path, &len);
    CHECK(bytes && len > 8 && memcmp(bytes, PNG_SIGNATURE, 8) == 0);
    /* tEXt for ASCII values, iTXt for the others; metadata before the image data. */
    char *idat = bytes ? memmem(bytes, len, "IDAT", 4) : NULL;
    char *itxt = bytes ? memmem(bytes, len, "iTXt", 4) : NULL;
    char *textc = bytes ? memmem(bytes, len, "tEXt", 4) : NULL;
    CHECK(idat && itxt && textc && itxt < idat && textc < idat);
    CHECK(bytes && memmem(bytes, len, "tIME", 4) == NULL);

    /* Same input, same bytes: no timestamps or other varying data. */
    char *path2 = tmp_path(dir, "img2.png");
    CHECK(cpdit_png_write_rgb8(path2, rgb, TEST_W, TEST_H, text, n_text, &err) == CPDIT_OK);
    size_t len2 = 0;
    char *bytes2 = tmp_read(path2, &len2);
    CHECK(bytes2 && len2 == len && memcmp(bytes, bytes2, len) == 0);
    free(bytes);
    free(bytes2);
    unlink(path2);
    free(path2);

    cpdit_png_image img;
    CHECK(cpdit_png_read_rgb8(path, &img, &err) == CPDIT_OK);
    CHECK(img.width == TEST_W && img.height == TEST_H);
    int diff = 0;
    for (size_t i = 0; img.rgb && i < n; i++)
        diff += img.rgb[i] != rgb[i];
    CHECK_MSG(img.rgb && diff == 0, "%d of %zu bytes differ", diff, n);
    CHECK(img.n_text == n_text);
    for (int i = 0; i < n_text; i++) {
        cpdit_png_text_kind kind;
        const char *v = cpdit_png_image_text(&img, text[i].key, &kind);
        CHECK_MSG(v && strcmp(v, text[i].value) == 0, "key %s: got \"%s\"", text[i].key,
                  v ? v : "(missing)");
        int ascii = 1;
        for (const char *p = text[i].value; *p; p++)
            ascii &= (unsigned char)*p < 0x80;
        CHECK_MSG(kind == (ascii ? CPDIT_PNG_TEXT_TEXT : CPDIT_PNG_TEXT_ITXT), "key %s kind %d",
                  text[i].key, (int)kind);
    }
    CHECK(cpdit_png_image_text(&img, "nope", NULL) == NULL);
    cpdit_png_image_free(&img);
    CHECK(img.rgb == NULL && img.text == NULL);

    /* A 1x1 image without text. */
    CHECK(cpdit_png_write_rgb8(path, rgb, 1, 1, NULL, 0, &err) == CPDIT_OK);
    CHECK(cpdit_png_read_rgb8(path, &img, &err) == CPDIT_OK);
    CHECK(img.width == 1 && img.height == 1 && img.n_text == 0 && img.rgb &&
          memcmp(img.rgb, rgb, 3) == 0);
    cpdit_png_image_free(&img);
    unlink(path);
    free(path);
    free(rgb);
}

static void test_bad_input(const char *dir)
{
    uint8_t px[3 * 4] = {0};
    char *path = tmp_path(dir, "bad.png");
    cpdit_error err;
    char long_key[100];
    memset(long_key, 'k', 80);
    long_key[80] = '\0';
    const cpdit_png_text bad[][1] = {
        {{"", "v"}},       {{long_key, "v"}},          {{" lead", "v"}},
        {{"trail ", "v"}}, {{"two  spaces", "v"}},      {{"tab\tkey", "v"}},
        {{"k", "\xff"}},   {{"k", "\xc3"}},             {{"k", "\xed\xa0\x80"}},
        {{"k", "\xc0\xaf"}}, {{"k", NULL}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cpdit_error_clear(&err);
        CHECK_MSG(cpdit_png_write_rgb8(path, px, 2, 2, bad[i], 1, &err) == CPDIT_ERR_INPUT,
                  "bad text entry %zu accepted", i);
        CHECK(err.what[0] != '\0');
    }
    CHECK_STR_CONTAINS(err.what, "NULL");
    CHECK(cpdit_png_write_rgb8(path, px, 0, 2, NULL, 0, &err) == CPDIT_ERR_INPUT);
    CHECK(cpdit_png_write_rgb8(path, px, 2, -1, NULL, 0, &err) == CPDIT_ERR_INPUT);
    CHECK(cpdit_png_write_rgb8(path, NULL, 2, 2, NULL, 0, &err) == CPDIT_ERR_INPUT);
    CHECK(tmp_count_entries(dir) == 0); /* nothing written for bad input */

    /* A good key with a good 79-byte key and a missing folder. */
    long_key[79] = '\0';
    const cpdit_png_text ok = {long_key, "v"};
    CHECK(cpdit_png_check_text(&ok, "x", &err) == CPDIT_OK);
    char *missing = tmp_path(dir, "missing/out.png");
    CHECK(cpdit_png_write_rgb8(missing, px, 2, 2, &ok, 1, &err) == CPDIT_ERR_RUNTIME);
    CHECK(strcmp(err.where, missing) == 0);
    CHECK_STR_CONTAINS(err.what, "does not exist");
    free(missing);
    free(path);
}

/* libpng errors longjmp; they must come back as cpdit_error, not abort the process. */
static void test_libpng_errors(const char *dir)
{
    cpdit_error err;
    cpdit_png_image img;
    char *path = tmp_path(dir, "t.png");

    CHECK(tmp_write(dir, "t.png", "this is not a png file at all") == 0);
    CHECK(cpdit_png_read_rgb8(path, &img, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "not a PNG");
    CHECK(strcmp(err.where, path) == 0);

    char *none = tmp_path(dir, "none.png");
    CHECK(cpdit_png_read_rgb8(none, &img, &err) == CPDIT_ERR_RUNTIME);
    free(none);

    /* Truncated and corrupted files: the reader's longjmp path. */
    enum { W = 64, H = 64 };
    uint8_t *rgb = malloc(W * H * 3);
    for (int i = 0; i < W * H * 3; i++)
        rgb[i] = next_byte();
    CHECK(cpdit_png_write_rgb8(path, rgb, W, H, NULL, 0, &err) == CPDIT_OK);
    size_t len = 0;
    char *bytes = tmp_read(path, &len);
    CHECK(bytes && len > 200);
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, len / 2, f);
    fclose(f);
    cpdit_error_clear(&err);
    CHECK(cpdit_png_read_rgb8(path, &img, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "cannot read PNG");
    CHECK(img.rgb == NULL && img.n_text == 0);
    fprintf(stderr, "truncated PNG -> %s: %s\n", err.where, err.what);

    char *idat = memmem(bytes, len, "IDAT", 4);
    CHECK(idat != NULL);
    if (idat) {
        idat[20] ^= 0x5a; /* inside the compressed data: CRC mismatch on a critical chunk */
        f = fopen(path, "wb");
        fwrite(bytes, 1, len, f);
        fclose(f);
        CHECK(cpdit_png_read_rgb8(path, &img, &err) == CPDIT_ERR_INPUT);
        fprintf(stderr, "corrupted PNG -> %s\n", err.what);
    }
    free(bytes);

    /* The writer's longjmp path: libpng's write fails (file size limit) half way. */
    struct rlimit saved, small;
    CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    small = saved;
    small.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    char *big = tmp_path(dir, "big.png");
    cpdit_error_clear(&err);
    CHECK(cpdit_png_write_rgb8(big, rgb, W, H, NULL, 0, &err) == CPDIT_ERR_RUNTIME);
    CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0);
    signal(SIGXFSZ, SIG_DFL);
    CHECK(strcmp(err.where, big) == 0);
    CHECK(err.what[0] != '\0');
    fprintf(stderr, "write past file size limit -> %s\n", err.what);
    CHECK(!tmp_exists(big));
    CHECK(tmp_count_temp_files(dir) == 0);
    free(big);
    free(rgb);
    unlink(path);
    free(path);
}

/* Float [-1, 1] -> uint8 as diffusers: clamp(x/2 + 0.5, 0, 1) * 255, numpy round (half to
 * even), all float32. */
static void test_float_to_u8(void)
{
    CHECK(image_value_to_u8(-1.0f) == 0);
    CHECK(image_value_to_u8(0.0f) == 128);  /* 127.5 -> 128 (half to even) */
    CHECK(image_value_to_u8(1.0f) == 255);
    CHECK(image_value_to_u8(-3.0f) == 0);   /* out of range: clamped */
    CHECK(image_value_to_u8(7.5f) == 255);
    CHECK(image_value_to_u8(-INFINITY) == 0);
    CHECK(image_value_to_u8(INFINITY) == 255);
    CHECK(image_value_to_u8(NAN) == 0);
    CHECK(image_value_to_u8(-0.0f) == 128);
    /* Near the ends: 1/255 of the range is one level. */
    CHECK(image_value_to_u8(-1.0f + 2.0f / 255.0f) == 1);
    CHECK(image_value_to_u8(1.0f - 2.0f / 255.0f) == 254);

    /* Halves round to even: find floats x whose float32 (x/2+0.5)*255 is exactly k + 0.5
     * and check the result is the even neighbour (round-half-away would give k+1 for even
     * k). The search runs over the floats next to the ideal x for every k. */
    int found_even = 0, found_odd = 0;
    for (int k = 0; k < 255; k++) {
        float x = (float)((2.0 * (k + 0.5)) / 255.0 - 1.0);
        for (int step = 0; step < 64; step++) {
            float t = x / 2.0f + 0.5f;
            float u = t * 255.0f;
            if (u == (float)k + 0.5f) {
                uint8_t want = (uint8_t)(k % 2 == 0 ? k : k + 1);
                CHECK_MSG(image_value_to_u8(x) == want, "x=%.9g (u=%.9g) -> %d, want %d",
                          (double)x, (double)u, image_value_to_u8(x), want);
                found_even += k % 2 == 0;
                found_odd += k % 2 == 1;
                break;
            }
            x = nextafterf(x, u < (float)k + 0.5f ? 2.0f : -2.0f);
        }
    }
    fprintf(stderr, "exact halves found: %d with even k, %d with odd k\n", found_even, found_odd);
    CHECK(found_even >= 10 && found_odd >= 10);

    /* One known case spelled out: u = 126.5 exactly -> 126 (numpy), not 127. */
    float x126 = (float)(2.0 * 126.5 / 255.0 - 1.0);
    while ((x126 / 2.0f + 0.5f) * 255.0f < 126.5f)
        x126 = nextafterf(x126, 2.0f);
    while ((x126 / 2.0f + 0.5f) * 255.0f > 126.5f)
        x126 = nextafterf(x126, -2.0f);
    if ((x126 / 2.0f + 0.5f) * 255.0f == 126.5f)
        CHECK(image_value_to_u8(x126) == 126);

    /* Every level is reachable and the map is monotone over a fine sweep. */
    int seen[256] = {0}, prev = 0, monotone = 1;
    for (int i = 0; i <= 100000; i++) {
        float x = -1.0f + 2.0f * (float)i / 100000.0f;
        int v = image_value_to_u8(x);
        monotone &= v >= prev;
        prev = v;
        seen[v] = 1;
    }
    int levels = 0;
    for (int i = 0; i < 256; i++)
        levels += seen[i];
    CHECK(monotone);
    CHECK(levels == 256);

    /* Layout: (C,H,W) float -> (H,W,3) bytes; 1 channel is copied to R, G, B. */
    enum { H = 2, W = 3 };
    float chw[3 * H * W];
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < H * W; i++)
            chw[c * H * W + i] = c == 0 ? -1.0f : c == 1 ? 0.0f : 1.0f;
    chw[1 * H * W + 4] = 1.0f; /* G of pixel (1,1) */
    uint8_t rgb[H * W * 3];
    cpdit_error err;
    CHECK(image_chw_to_rgb8(chw, 3, H, W, rgb, &err) == CPDIT_OK);
    CHECK(rgb[0] == 0 && rgb[1] == 128 && rgb[2] == 255);
    CHECK(rgb[4 * 3 + 0] == 0 && rgb[4 * 3 + 1] == 255 && rgb[4 * 3 + 2] == 255);
    CHECK(image_chw_to_rgb8(chw, 1, H, W, rgb, &err) == CPDIT_OK);
    CHECK(rgb[0] == 0 && rgb[1] == 0 && rgb[2] == 0);
    CHECK(image_chw_to_rgb8(chw, 4, H, W, rgb, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "4 channels");
    CHECK(image_chw_to_rgb8(chw, 3, 0, W, rgb, &err) == CPDIT_ERR_INPUT);
}

static void test_utf8(void)
{
    CHECK(cpdit_utf8_valid(""));
    CHECK(cpdit_utf8_valid("plain"));
    CHECK(cpdit_utf8_valid(CJK_PROMPT));
    CHECK(cpdit_utf8_valid("\xf4\x8f\xbf\xbf"));   /* U+10FFFF */
    CHECK(!cpdit_utf8_valid("\xf4\x90\x80\x80"));  /* above U+10FFFF */
    CHECK(!cpdit_utf8_valid("\xe0\x80\xaf"));      /* overlong */
    CHECK(!cpdit_utf8_valid("abc\xe4\xb8"));       /* truncated */
}

int main(void)
{
    char *dir = tmpdir_make("png");
    if (!dir)
        TEST_SKIP("cannot create a scratch folder");
    test_round_trip(dir);
    test_bad_input(dir);
    test_libpng_errors(dir);
    test_float_to_u8();
    test_utf8();
    tmpdir_remove(dir);
    free(dir);
    TEST_MAIN_END();
}
