/* test_tokenizer_umt5.c — the T5 tokenizer on a UMT5-shaped tokenizer.json (google/umt5-xxl as
 * Wan 2.1's tokenizer/ ships it: T5TokenizerFast, a Unigram model of 256000 SentencePiece
 * pieces with the 256 <0xNN> byte pieces and byte_fallback, then 300 sentinels
 * <extra_id_299> .. <extra_id_0> at ids 256000 .. 256299 (vocab 256300; the encoder's
 * embedding has 256384 rows), the Precompiled / Strip / Replace normalizer, Metaspace
 * "always", and the "$A </s>" post-processor).
 *
 * The vocabulary is synthetic (the real one is 16 MB and not in the tree): a few real-looking
 * pieces, filler pieces up to 256000, one high-id piece that must win. The expected ids
 * follow the tokenizers library's rules worked by hand (Viterbi scores in the comments):
 * </s> appended, no padding unless asked, truncation keeping </s>, sentinels cut out of the
 * raw text, unknown characters as their UTF-8 byte pieces (byte_fallback) or one <unk>.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h> /* the load time is printed, never asserted */

#include "lib/text/prompt_clean.h"
#include "lib/text/tokenizer_t5.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"

#define UMT5_SPM_PIECES 256000
#define UMT5_EXTRA_IDS 300
#define UMT5_VOCAB (UMT5_SPM_PIECES + UMT5_EXTRA_IDS)
#define BYTE_BASE 3       /* <0x00> is id 3, as in byte-fallback SentencePiece models */
#define ID_SPACE 259      /* ▁ */
#define ID_A 260
#define ID_B 261
#define ID_C 262
#define ID_SPACE_AB 263   /* ▁ab */
#define ID_AB 264
#define FIRST_FILLER 265
#define ID_SPACE_ZZ (UMT5_SPM_PIECES - 1) /* ▁zz: the last SentencePiece piece */
#define ID_EXTRA_0 (UMT5_VOCAB - 1)
#define ID_EXTRA_299 UMT5_SPM_PIECES

/* Appends to a growing buffer; aborts the test on allocation failure. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void put(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 1 << 20;
        char *q = realloc(b->p, cap);
        if (!q) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        b->p = q;
        b->cap = cap;
    }
}

/* The tokenizer.json text; byte_fallback "true" or "false". */
static char *umt5_json(const char *byte_fallback, size_t *len)
{
    sbuf b = {0};
    put(&b, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [");
    put(&b, "{\"id\": 0, \"content\": \"<pad>\", \"single_word\": false, \"lstrip\": false, "
            "\"rstrip\": false, \"normalized\": false, \"special\": true}, "
            "{\"id\": 1, \"content\": \"</s>\", \"normalized\": false, \"special\": true}, "
            "{\"id\": 2, \"content\": \"<unk>\", \"normalized\": false, \"special\": true}");
    for (int e = UMT5_EXTRA_IDS - 1; e >= 0; e--)
        put(&b, ", {\"id\": %d, \"content\": \"<extra_id_%d>\", \"single_word\": false, "
                "\"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}",
            ID_EXTRA_0 - e, e);
    put(&b, "], \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": ["
            "{\"type\": \"Strip\", \"strip_left\": false, \"strip_right\": true}, "
            "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" {2,}\"}, \"content\": "
            "\"\\u2581\"}]}, "
            "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
            "\"prepend_scheme\": \"always\", \"split\": true}, "
            "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": "
            "{\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": "
            "0}}], \"pair\": [], \"special_tokens\": {\"</s>\": {\"id\": \"</s>\", \"ids\": [1], "
            "\"tokens\": [\"</s>\"]}}}, "
            "\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
            "\"prepend_scheme\": \"always\", \"split\": true}, "
            "\"model\": {\"type\": \"Unigram\", \"unk_id\": 2, \"byte_fallback\": %s, \"vocab\": "
            "[[\"<pad>\", 0.0], [\"</s>\", 0.0], [\"<unk>\", 0.0]",
        byte_fallback);
    for (int v = 0; v < 256; v++)
        put(&b, ", [\"<0x%02X>\", 0.0]", v);
    put(&b, ", [\"\\u2581\", -2.0], [\"a\", -3.0], [\"b\", -3.0], [\"c\", -3.0], "
            "[\"\\u2581ab\", -4.5], [\"ab\", -4.0]");
    for (int i = FIRST_FILLER; i < ID_SPACE_ZZ; i++) /* fillers: ▁w<i>, never in the tests */
        put(&b, ", [\"\\u2581w%d\", %.6f]", i, -12.0 - 1e-5 * i);
    put(&b, ", [\"\\u2581zz\", -1.0]");
    for (int e = UMT5_EXTRA_IDS - 1; e >= 0; e--)
        put(&b, ", [\"<extra_id_%d>\", 0.0]", e);
    put(&b, "]}}");
    *len = b.n;
    return b.p;
}

static void check_ids(const t5_tokenizer *t, const char *text, size_t max_len,
                      const int32_t *want, size_t n_want, int want_cut)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int cut = -1;
    cpdit_error err;
    CHECK_MSG(t5_tokenizer_encode(t, text, strlen(text), max_len, &ids, &n, &cut, &err) ==
              CPDIT_OK, "\"%s\": %s", text, err.what);
    int same = n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!same) {
        fprintf(stderr, "\"%s\": got", text);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", (int)ids[i]);
        fprintf(stderr, "\n");
    }
    CHECK_MSG(same, "ids of \"%s\"", text);
    CHECK_MSG(cut == want_cut, "\"%s\": truncated %d", text, cut);
    free(ids);
}

#define IDS(text, max_len, cut, ...)                                                         \
    do {                                                                                     \
        const int32_t w_[] = {__VA_ARGS__};                                                  \
        check_ids(t, text, max_len, w_, sizeof w_ / sizeof w_[0], cut);                      \
    } while (0)

static void test_umt5_ids(const t5_tokenizer *t)
{
    CHECK(t5_tokenizer_vocab_size(t) == UMT5_VOCAB);
    CHECK(t5_tokenizer_eos_id(t) == 1 && t5_tokenizer_pad_id(t) == 0);
    IDS("ab", 0, 0, ID_SPACE_AB, 1);                  /* ▁ab -4.5 beats ▁ + ab -6 */
    IDS("zz ab", 0, 0, ID_SPACE_ZZ, ID_SPACE_AB, 1);  /* the id-255999 piece */
    IDS("c", 0, 0, ID_SPACE, ID_C, 1);
    IDS("", 0, 0, 1);                                 /* an empty prompt is just </s> */
    /* sentinels are cut out of the raw text; "always" prepends ▁ to each text piece */
    IDS("a<extra_id_0>b", 0, 0, ID_SPACE, ID_A, ID_EXTRA_0, ID_SPACE, ID_B, 1);
    IDS("<extra_id_299>", 0, 0, ID_EXTRA_299, 1);
    /* no such sentinel: text; the characters without a piece become their bytes, runs of
     * them fused first (the "a" piece -3 beats the unknown node, min score - 10) */
    IDS("<extra_id_300>", 0, 0, ID_SPACE, BYTE_BASE + '<', BYTE_BASE + 'e', BYTE_BASE + 'x',
        BYTE_BASE + 't', BYTE_BASE + 'r', ID_A, BYTE_BASE + '_', BYTE_BASE + 'i',
        BYTE_BASE + 'd', BYTE_BASE + '_', BYTE_BASE + '3', BYTE_BASE + '0', BYTE_BASE + '0',
        BYTE_BASE + '>', 1);
    /* byte fallback: é (C3 A9) has no piece */
    IDS("\xc3\xa9", 0, 0, ID_SPACE, BYTE_BASE + 0xC3, BYTE_BASE + 0xA9, 1);
    IDS("ab   ", 0, 0, ID_SPACE_AB, 1);               /* trailing spaces stripped */
    /* truncation keeps </s>; no padding */
    IDS("ab ab ab ab", 3, 1, ID_SPACE_AB, ID_SPACE_AB, 1);
    IDS("ab ab", 3, 0, ID_SPACE_AB, ID_SPACE_AB, 1);
    int32_t padded[6];
    size_t n_real = 0;
    int cut = -1;
    cpdit_error err;
    CHECK(t5_tokenizer_encode_padded(t, "ab", 2, 6, padded, &n_real, &cut, &err) == CPDIT_OK);
    CHECK(n_real == 2 && cut == 0 && padded[0] == ID_SPACE_AB && padded[1] == 1 &&
          padded[2] == 0 && padded[5] == 0);
}

/* WanPipeline's whitespace_clean: re.sub(r"\s+", " ", text).strip() (results from Python). */
static void test_prompt_clean(void)
{
    static const struct { const char *in, *out; } cases[] = {
        {"a photo of a cat", "a photo of a cat"},
        {"  a \t\n photo  ", "a photo"},
        {"\x1c" "a" "\x1f" "b\x0b\x0c" "c", "a b c"},          /* \s includes U+001C..1F */
        {"a\xe3\x80\x80\xe3\x80\x80" "b", "a b"},             /* U+3000 */
        {"a\xc2\xa0" "b\xc2\x85" "c\xe2\x80\xa8" "d", "a b c d"}, /* NBSP, NEL, U+2028 */
        {"a\xe2\x80\x8b" "b", "a\xe2\x80\x8b" "b"},           /* U+200B is not \s */
        {"\xe6\x9d\xb1\xe4\xba\xac  caf\xc3\xa9", "\xe6\x9d\xb1\xe4\xba\xac caf\xc3\xa9"},
        {" \t\n ", ""},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        size_t n = 0;
        cpdit_error err;
        CHECK(prompt_whitespace_clean(cases[i].in, strlen(cases[i].in), &out, &n, &err) ==
              CPDIT_OK);
        CHECK_MSG(out && n == strlen(cases[i].out) && strcmp(out, cases[i].out) == 0,
                  "case %zu: \"%s\"", i, out ? out : "(null)");
        free(out);
    }
    CHECK(prompt_has_html_entity("a &amp; b", 9) && prompt_has_html_entity("&#39;", 5));
    CHECK(!prompt_has_html_entity("a & b", 5) && !prompt_has_html_entity("a&", 2));
}

int main(void)
{
    test_prompt_clean();
    size_t len = 0;
    char *json = umt5_json("true", &len);
    t5_tokenizer *t = NULL;
    cpdit_error err;
    clock_t t0 = clock();
    CHECK_MSG(t5_tokenizer_from_json(json, len, "umt5-toy", &t, &err) == CPDIT_OK, "%s",
              err.what);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    fprintf(stderr, "UMT5-sized tokenizer.json (%zu bytes, %d pieces) loaded in %.2f s CPU\n",
            len, UMT5_VOCAB, secs);
    if (t)
        test_umt5_ids(t);
    t5_tokenizer_free(t);
    /* the same from a tokenizer/ folder */
    char *dir = tmpdir_make("umt5tok"), path[4200];
    CHECK(dir != NULL);
    if (dir) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(json, 1, len, f) == len);
        if (f)
            fclose(f);
        t = NULL;
        CHECK(t5_tokenizer_load(dir, &t, &err) == CPDIT_OK);
        if (t)
            IDS("zz ab", 0, 0, ID_SPACE_ZZ, ID_SPACE_AB, 1);
        t5_tokenizer_free(t);
        tmpdir_remove(dir);
        free(dir);
    }
    free(json);
    /* without byte_fallback (T5TokenizerFast converted from spiece.model): one <unk> */
    json = umt5_json("false", &len);
    t = NULL;
    CHECK(t5_tokenizer_from_json(json, len, "umt5-toy", &t, &err) == CPDIT_OK);
    if (t)
        IDS("\xc3\xa9", 0, 0, ID_SPACE, 2, 1);
    t5_tokenizer_free(t);
    free(json);
    TEST_MAIN_END();
}
