/* test_tokenizers.c — the tokenizer machinery on toy data built here, so it runs everywhere:
 *   - UTF-8 decoding of valid and invalid bytes (U+FFFD per maximal invalid subpart);
 *   - Python str.lower() (final sigma, U+0130), NFC, grapheme clusters, properties;
 *   - the O(n log n) BPE merge against the quadratic reference loop on random merge tables
 *     (ranks in any order, different pairs merging into the same symbol);
 *   - CLIP BPE on a six-merge vocabulary: merge order, </w>, lower-casing, dropped control /
 *     zero-width / invalid bytes, CJK split, special tokens, truncation and padding;
 *   - T5 Unigram on a dozen pieces: Viterbi choice, <unk> fusing, byte fallback, space
 *     handling, Metaspace prepend schemes, added tokens, truncation and padding, the
 *     precompiled charsmap (shortest match per short grapheme cluster);
 *   - a T5 tokenizer built from a hand-made SentencePiece model (protobuf);
 *   - clear errors for bad files; long and hostile input never crashes.
 * Expected ids are worked out by hand in the comments. */
#include <stdlib.h>
#include <string.h>

#include "lib/text/bpe_merge.h"
#include "lib/text/spm_charsmap.h"
#include "tests/test_util.h"
#include "lib/text/tokenizer_clip.h"
#include "lib/text/tokenizer_t5.h"
#include "lib/text/unicode_text.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define LONG_INPUT_BYTES 200000

/* ids of text == want[0..n)? Prints both on mismatch. */
static int same_ids(const char *what, const int32_t *got, size_t n_got, const int32_t *want,
                    size_t n_want)
{
    int ok = n_got == n_want && memcmp(got, want, n_want * sizeof *want) == 0;
    if (!ok) {
        fprintf(stderr, "%s: got", what);
        for (size_t i = 0; i < n_got; i++)
            fprintf(stderr, " %d", (int)got[i]);
        fprintf(stderr, ", expected");
        for (size_t i = 0; i < n_want; i++)
            fprintf(stderr, " %d", (int)want[i]);
        fputc('\n', stderr);
    }
    return ok;
}

/* ---------------------------------------------------------------- unicode */

static void test_utf8(void)
{
    struct {
        const char *bytes;
        size_t len;
        uint32_t cps[8];
        size_t n;
    } cases[] = {
        {"a\xc3\xa9\xe6\x9d\xb1\xf0\x9f\x90\xb1", 10, {'a', 0xE9, 0x6771, 0x1F431}, 4},
        {"\xff", 1, {0xFFFD}, 1},
        {"\xc3(", 2, {0xFFFD, '('}, 2},           /* truncated 2-byte sequence */
        {"\xe2\x82", 2, {0xFFFD}, 1},             /* one maximal subpart */
        {"\xe2\x82x", 3, {0xFFFD, 'x'}, 2},
        {"\xc0\x80", 2, {0xFFFD, 0xFFFD}, 2},     /* overlong NUL: two errors */
        {"\xe0\x80\x80", 3, {0xFFFD, 0xFFFD, 0xFFFD}, 3},
        {"\xed\xa0\x80", 3, {0xFFFD, 0xFFFD, 0xFFFD}, 3}, /* surrogate */
        {"\xf4\x90\x80\x80", 4, {0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD}, 4}, /* > U+10FFFF */
        {"\xf0\x9f\x90", 3, {0xFFFD}, 1},
        {"", 0, {0}, 0},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        uint32_t *cps;
        size_t n;
        cpdit_error err;
        CHECK(utf8_decode(cases[c].bytes, cases[c].len, &cps, &n, &err) == CPDIT_OK);
        CHECK_MSG(n == cases[c].n, "case %zu: %zu code points", c, n);
        for (size_t i = 0; i < n && i < cases[c].n; i++)
            CHECK_MSG(cps[i] == cases[c].cps[i], "case %zu cp %zu: %X", c, i, cps[i]);
        free(cps);
    }
    char *s;
    size_t n;
    cpdit_error err;
    CHECK(utf8_sanitize("a\xffz\xe2\x82", 5, &s, &n, &err) == CPDIT_OK);
    CHECK(n == 8 && strcmp(s, "a\xef\xbf\xbdz\xef\xbf\xbd") == 0);
    free(s);
    char buf[UTF8_MAX_BYTES];
    CHECK(utf8_encode(0x10FFFF, buf) == 4 && utf8_encode(0xD800, buf) == 3 &&
          memcmp(buf, "\xef\xbf\xbd", 3) == 0);
}

static void test_unicode_transforms(void)
{
    /* "ΟΔΟΣ ΣΑ" lowered word by word: final sigma only at a word end */
    const uint32_t word[] = {0x39F, 0x394, 0x39F, 0x3A3};
    uint32_t out[16];
    size_t n = uni_py_lower(word, 4, out);
    CHECK(n == 4 && out[0] == 0x3BF && out[3] == 0x3C2);
    const uint32_t sa[] = {0x3A3, 0x391};
    n = uni_py_lower(sa, 2, out);
    CHECK(n == 2 && out[0] == 0x3C3 && out[1] == 0x3B1);
    const uint32_t idot[] = {0x130, 'X'};
    n = uni_py_lower(idot, 2, out);
    CHECK(n == 3 && out[0] == 'i' && out[1] == 0x307 && out[2] == 'x');

    struct {
        uint32_t in[4], want[4];
        size_t n_in, n_want;
    } nfc[] = {
        {{'e', 0x301}, {0xE9}, 2, 1},
        {{0x1100, 0x1161, 0x11A8}, {0xAC01}, 3, 1},          /* Hangul L V T */
        {{0x1E0B, 0x323}, {0x1E0D, 0x307}, 2, 2},            /* reorder, then compose */
        {{0x301, 'e'}, {0x301, 'e'}, 2, 2},                  /* a leading mark stays */
        {{0x958}, {0x915, 0x93C}, 1, 2},                     /* composition exclusion */
    };
    for (size_t c = 0; c < ARRAY_LEN(nfc); c++) {
        uint32_t *o;
        size_t m;
        cpdit_error err;
        CHECK(uni_nfc(nfc[c].in, nfc[c].n_in, &o, &m, &err) == CPDIT_OK);
        CHECK_MSG(m == nfc[c].n_want && memcmp(o, nfc[c].want, m * sizeof *o) == 0,
                  "nfc case %zu", c);
        free(o);
    }

    /* grapheme clusters: e+acute | CR LF | flag pair | flag | man ZWJ rocket | x */
    const uint32_t g[] = {'e', 0x301, '\r', '\n', 0x1F1EF, 0x1F1F5, 0x1F1FA,
                          0x1F468, 0x200D, 0x1F680, 'x'};
    const size_t ends[] = {2, 4, 6, 7, 10, 11};
    size_t at = 0;
    for (size_t k = 0; k < ARRAY_LEN(ends); k++) {
        at = uni_grapheme_end(g, ARRAY_LEN(g), at);
        CHECK_MSG(at == ends[k], "grapheme %zu ends at %zu, expected %zu", k, at, ends[k]);
    }

    CHECK(uni_is_letter('a') && uni_is_letter(0x6771) && !uni_is_letter('1'));
    CHECK(uni_is_number('7') && uni_is_number(0xBD) && !uni_is_number('x'));
    CHECK(uni_is_py_control(0x200B) && uni_is_py_control(0x7F) && !uni_is_py_control('a'));
    CHECK(uni_is_zs(0x3000) && uni_is_py_space(0x2028) && !uni_is_zs('\t'));
    CHECK(uni_is_cjk_ideograph(0x6771) && !uni_is_cjk_ideograph(0x30BF));
    CHECK(uni_is_clip_unmatched(0x345) && !uni_is_clip_unmatched('!'));
    CHECK(uni_is_white_space(0x85) && !uni_is_white_space(0x200B));
}

/* ---------------------------------------------------------------- BPE merge */

#define RAND_SYMBOLS 12 /* symbols 0..11; pairs of them may merge into any symbol */
#define RAND_TABLES 200
#define RAND_SEQS 50
#define RAND_MAX_LEN 40

typedef struct rand_table {
    int32_t rank[RAND_SYMBOLS][RAND_SYMBOLS], merged[RAND_SYMBOLS][RAND_SYMBOLS];
} rand_table;

static int32_t rand_rank(const void *ctx, int32_t a, int32_t b, int32_t *merged)
{
    const rand_table *t = ctx;
    *merged = t->merged[a][b];
    return t->rank[a][b];
}

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 16;
}

static void test_bpe_merge(void)
{
    unsigned seed = 99;
    size_t mismatches = 0, total = 0;
    for (int tb = 0; tb < RAND_TABLES; tb++) {
        rand_table t;
        int32_t next_rank = 0;
        for (int a = 0; a < RAND_SYMBOLS; a++)
            for (int b = 0; b < RAND_SYMBOLS; b++) {
                int has = next_rand(&seed) % 3 == 0;
                t.rank[a][b] = has ? next_rank++ : -1;
                t.merged[a][b] = (int32_t)(next_rand(&seed) % RAND_SYMBOLS);
            }
        for (int a = 0; a < RAND_SYMBOLS; a++) /* shuffle the ranks: any order */
            for (int b = 0; b < RAND_SYMBOLS; b++) {
                int c = (int)(next_rand(&seed) % RAND_SYMBOLS);
                int d = (int)(next_rand(&seed) % RAND_SYMBOLS);
                int32_t x = t.rank[a][b];
                if (x >= 0 && t.rank[c][d] >= 0) {
                    t.rank[a][b] = t.rank[c][d];
                    t.rank[c][d] = x;
                }
            }
        for (int sq = 0; sq < RAND_SEQS; sq++) {
            int32_t fast[RAND_MAX_LEN], ref[RAND_MAX_LEN];
            size_t n = 1 + next_rand(&seed) % RAND_MAX_LEN;
            for (size_t i = 0; i < n; i++)
                fast[i] = ref[i] = (int32_t)(next_rand(&seed) % (RAND_SYMBOLS / 3));
            size_t nf = bpe_merge(fast, n, rand_rank, &t);
            size_t nr = bpe_merge_reference(ref, n, rand_rank, &t);
            total++;
            if (nf != nr || memcmp(fast, ref, nr * sizeof *ref) != 0)
                mismatches++;
        }
    }
    CHECK_MSG(mismatches == 0, "bpe_merge differs from the reference on %zu of %zu sequences",
              mismatches, total);
}

/* ---------------------------------------------------------------- CLIP */

static const char TOY_VOCAB[] =
    "{\"a\": 0, \"b\": 1, \"c\": 2, \"a</w>\": 3, \"b</w>\": 4, \"c</w>\": 5, \"ab\": 6,"
    " \"ab</w>\": 7, \"abc</w>\": 8, \"bc</w>\": 9, \"<|startoftext|>\": 10,"
    " \"<|endoftext|>\": 11}";
/* ranks: (a,b) 0, (ab,c</w>) 1, (b,c</w>) 2, (a,b</w>) 3; a malformed line is never used */
static const char TOY_MERGES[] = "#version: 0.2\na b\nab c</w>\nb c</w>\na b</w>\nbad line here\n";
enum { T_BOS = 10, T_EOS = 11 };

static void clip_case(const clip_tokenizer *t, const char *text, size_t max_len,
                      const int32_t *want, size_t n_want, int want_cut)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int cut = -1;
    cpdit_error err;
    CHECK(clip_tokenizer_encode(t, text, strlen(text), max_len, &ids, &n, &cut, &err) ==
          CPDIT_OK);
    CHECK_MSG(same_ids(text, ids, n, want, n_want), "clip \"%s\"", text);
    CHECK_MSG(cut == want_cut, "clip \"%s\": truncated %d", text, cut);
    free(ids);
}

#define CLIP_CASE(text, max_len, cut, ...)                                                   \
    do {                                                                                     \
        const int32_t w_[] = {__VA_ARGS__};                                                  \
        clip_case(t, text, max_len, w_, ARRAY_LEN(w_), cut);                                 \
    } while (0)

static void test_clip_toy(void)
{
    clip_tokenizer *t = NULL;
    cpdit_error err;
    CHECK(clip_tokenizer_from_data(TOY_VOCAB, strlen(TOY_VOCAB), TOY_MERGES, strlen(TOY_MERGES),
                                   "toy", &t, &err) == CPDIT_OK);
    if (!t)
        return;
    CHECK(clip_tokenizer_vocab_size(t) == 12);
    CHECK(clip_tokenizer_bos_id(t) == T_BOS && clip_tokenizer_eos_id(t) == T_EOS);
    CLIP_CASE("abc", 0, 0, T_BOS, 8, T_EOS);       /* a b c</w> -> ab c</w> -> abc</w> */
    CLIP_CASE("ABC", 0, 0, T_BOS, 8, T_EOS);       /* lower-cased first */
    CLIP_CASE("ab", 0, 0, T_BOS, 7, T_EOS);        /* a b</w> -> ab</w> */
    CLIP_CASE("bc", 0, 0, T_BOS, 9, T_EOS);
    CLIP_CASE("cab", 0, 0, T_BOS, 2, 7, T_EOS);    /* c ab</w>: (a,b</w>) merges */
    CLIP_CASE("x", 0, 0, T_BOS, T_EOS, T_EOS);     /* "x</w>" unknown -> <|endoftext|> */
    CLIP_CASE("abc,ab", 0, 0, T_BOS, 8, T_EOS, 7, T_EOS); /* ",</w>" unknown */
    CLIP_CASE("  ab \t\n ab  ", 0, 0, T_BOS, 7, 7, T_EOS);
    CLIP_CASE("a\x01" "b", 0, 0, T_BOS, 7, T_EOS);          /* control char dropped */
    CLIP_CASE("a\xe2\x80\x8b" "b", 0, 0, T_BOS, 7, T_EOS);  /* zero-width space dropped */
    CLIP_CASE("a\xff" "b", 0, 0, T_BOS, 7, T_EOS);          /* invalid byte -> U+FFFD dropped */
    /* CJK ideograph split off: a | three byte symbols of U+6771 (unknown) | b */
    CLIP_CASE("a\xe6\x9d\xb1" "b", 0, 0, T_BOS, 3, T_EOS, T_EOS, T_EOS, 4, T_EOS);
    CLIP_CASE("a<|endoftext|>b", 0, 0, T_BOS, 3, T_EOS, 4, T_EOS);
    CLIP_CASE("<|startoftext|>", 0, 0, T_BOS, T_BOS, T_EOS);
    CLIP_CASE("<|ENDOFTEXT|>", 0, 0, T_BOS, T_EOS, T_EOS); /* lowered, then the pattern */
    CLIP_CASE("", 0, 0, T_BOS, T_EOS);
    CLIP_CASE("ab ab ab ab", 4, 1, T_BOS, 7, 7, T_EOS);
    CLIP_CASE("ab ab", 4, 0, T_BOS, 7, 7, T_EOS);
    CLIP_CASE("ab ab<|endoftext|>ab", 4, 1, T_BOS, 7, 7, T_EOS);

    int32_t padded[8];
    size_t n_real = 0;
    int cut = -1;
    CHECK(clip_tokenizer_encode_padded(t, "ab", 2, 8, padded, &n_real, &cut, &err) == CPDIT_OK);
    const int32_t want_pad[] = {T_BOS, 7, T_EOS, T_EOS, T_EOS, T_EOS, T_EOS, T_EOS};
    CHECK(n_real == 3 && cut == 0 && memcmp(padded, want_pad, sizeof want_pad) == 0);
    int32_t *ids;
    size_t n;
    CHECK(clip_tokenizer_encode(t, "ab", 2, 1, &ids, &n, NULL, &err) == CPDIT_ERR_INPUT);

    /* hostile input: long random bytes and one long word, truncated and not */
    char *big = malloc(LONG_INPUT_BYTES);
    unsigned seed = 12345;
    for (size_t i = 0; i < LONG_INPUT_BYTES; i++) {
        seed = seed * 1103515245u + 12345u;
        big[i] = (char)(seed >> 16);
    }
    CHECK(clip_tokenizer_encode(t, big, LONG_INPUT_BYTES, 0, &ids, &n, NULL, &err) == CPDIT_OK);
    CHECK(n > 2 && ids[0] == T_BOS && ids[n - 1] == T_EOS);
    free(ids);
    memset(big, 'a', LONG_INPUT_BYTES);
    CHECK(clip_tokenizer_encode(t, big, LONG_INPUT_BYTES, CLIP_MAX_LENGTH, &ids, &n, &cut,
                                &err) == CPDIT_OK);
    CHECK(n == CLIP_MAX_LENGTH && cut == 1); /* one word, no (a, a) merge: a a ... a</w> */
    free(ids);
    free(big);
    clip_tokenizer_free(t);

    /* errors name the problem */
    CHECK(clip_tokenizer_from_data("[1]", 3, "", 0, "toy", &t, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "not a JSON object");
    CHECK(clip_tokenizer_from_data("{\"a\": 1}", 8, "", 0, "toy", &t, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "<|startoftext|>");
    CHECK(clip_tokenizer_from_data("{\"a\": \"x\"}", 10, "", 0, "toy", &t, &err) ==
          CPDIT_ERR_INPUT);
    CHECK(clip_tokenizer_load("/nonexistent-cpdit-dir", &t, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.where, "/nonexistent-cpdit-dir/vocab.json");
}

/* ---------------------------------------------------------------- T5 */

#define TOY_ADDED                                                                            \
    "\"added_tokens\": [{\"id\": 0, \"content\": \"<pad>\", \"normalized\": false},"         \
    " {\"id\": 1, \"content\": \"</s>\", \"normalized\": false},"                            \
    " {\"id\": 2, \"content\": \"<unk>\", \"normalized\": false}],"
#define TOY_POST                                                                             \
    "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\":"     \
    " {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\":"  \
    " 0}}], \"special_tokens\": {\"</s>\": {\"id\": \"</s>\", \"ids\": [1], \"tokens\":"     \
    " [\"</s>\"]}}},"
/* ids: 0 <pad> 1 </s> 2 <unk> 3 ▁ 4 a 5 b 6 c 7 ab 8 ▁ab 9 abc 10 ▁c 11 bc 12 <0x78> */
#define TOY_MODEL                                                                            \
    "\"model\": {\"type\": \"Unigram\", \"unk_id\": 2, \"byte_fallback\": %s, \"vocab\":"    \
    " [[\"<pad>\", 0], [\"</s>\", 0], [\"<unk>\", 0], [\"\\u2581\", -2], [\"a\", -3],"       \
    " [\"b\", -3], [\"c\", -3], [\"ab\", -4], [\"\\u2581ab\", -4.5], [\"abc\", -10],"        \
    " [\"\\u2581c\", -3.5], [\"bc\", -5], [\"<0x78>\", -9]]}"

static t5_tokenizer *toy_t5(const char *scheme, const char *byte_fallback, const char *charsmap)
{
    char json[16384];
    char norm[12288];
    snprintf(norm, sizeof norm,
             "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [%s%s%s"
             "{\"type\": \"Strip\", \"strip_left\": false, \"strip_right\": true},"
             " {\"type\": \"Replace\", \"pattern\": {\"Regex\": \" {2,}\"},"
             " \"content\": \"\\u2581\"}]},",
             charsmap ? "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"" : "",
             charsmap ? charsmap : "", charsmap ? "\"}, " : "");
    int k = snprintf(json, sizeof json,
                     "{" TOY_ADDED "%s \"pre_tokenizer\": {\"type\": \"Metaspace\","
                     " \"replacement\": \"\\u2581\", \"prepend_scheme\": \"%s\", \"split\":"
                     " true}," TOY_POST,
                     norm, scheme);
    snprintf(json + k, sizeof json - (size_t)k, TOY_MODEL "}", byte_fallback);
    t5_tokenizer *t = NULL;
    cpdit_error err;
    cpdit_status st = t5_tokenizer_from_json(json, strlen(json), "toy", &t, &err);
    CHECK_MSG(st == CPDIT_OK, "toy t5: %s", err.what);
    return t;
}

static void t5_case(const t5_tokenizer *t, const char *text, size_t max_len,
                    const int32_t *want, size_t n_want, int want_cut)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int cut = -1;
    cpdit_error err;
    CHECK(t5_tokenizer_encode(t, text, strlen(text), max_len, &ids, &n, &cut, &err) ==
          CPDIT_OK);
    CHECK_MSG(same_ids(text, ids, n, want, n_want), "t5 \"%s\"", text);
    CHECK_MSG(cut == want_cut, "t5 \"%s\": truncated %d", text, cut);
    free(ids);
}

#define T5_CASE(text, max_len, cut, ...)                                                     \
    do {                                                                                     \
        const int32_t w_[] = {__VA_ARGS__};                                                  \
        t5_case(t, text, max_len, w_, ARRAY_LEN(w_), cut);                                   \
    } while (0)

/* A darts-clone charsmap of single-byte keys: keys[i] -> values[i]. The root's offset is 256,
 * so key b sits at unit 256^b; that unit's offset 512 puts its value unit at 768+b. Returns
 * the blob length. */
#define DARTS_UNITS 1024
#define DARTS_ROOT_OFFSET 256u
#define DARTS_VALUE_OFFSET 512u
static size_t toy_charsmap(unsigned char *blob, const char *keys, const char *const *values)
{
    uint32_t units[DARTS_UNITS] = {0};
    char vals[64];
    size_t vlen = 0;
    units[0] = DARTS_ROOT_OFFSET << 10;
    for (size_t i = 0; keys[i]; i++) {
        unsigned b = (unsigned char)keys[i], at = DARTS_ROOT_OFFSET ^ b;
        units[at] = DARTS_VALUE_OFFSET << 10 | 1u << 8 | b; /* has_leaf, label b */
        units[at ^ DARTS_VALUE_OFFSET] = (1u << 31) | (uint32_t)vlen;
        size_t l = strlen(values[i]) + 1;
        memcpy(vals + vlen, values[i], l);
        vlen += l;
    }
    uint32_t size = DARTS_UNITS * 4;
    memcpy(blob, &size, 4); /* little-endian hosts only, like the tests' other binary data */
    memcpy(blob + 4, units, sizeof units);
    memcpy(blob + 4 + sizeof units, vals, vlen);
    return 4 + sizeof units + vlen;
}

static void base64(const unsigned char *in, size_t n, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        out[k++] = a[v >> 18];
        out[k++] = a[(v >> 12) & 63];
        out[k++] = i + 1 < n ? a[(v >> 6) & 63] : '=';
        out[k++] = i + 2 < n ? a[v & 63] : '=';
    }
    out[k] = '\0';
}

static void test_t5_toy(void)
{
    t5_tokenizer *t = toy_t5("always", "false", NULL);
    if (!t)
        return;
    CHECK(t5_tokenizer_eos_id(t) == 1 && t5_tokenizer_pad_id(t) == 0);
    CHECK(t5_tokenizer_vocab_size(t) == 13);
    T5_CASE("ab", 0, 0, 8, 1);           /* ▁ab -4.5 beats ▁ + ab -6 */
    T5_CASE("abc", 0, 0, 8, 6, 1);       /* ▁ab c -7.5 beats ▁ a bc -10, ▁ abc -12 */
    T5_CASE("c", 0, 0, 10, 1);           /* ▁c -3.5 beats ▁ c -5 */
    T5_CASE("xa", 0, 0, 3, 2, 4, 1);     /* x has no piece: <unk> scores -10 - 10 */
    T5_CASE("xyz", 0, 0, 3, 2, 1);       /* adjacent unknowns fuse into one <unk> */
    T5_CASE("a  b", 0, 0, 3, 4, 3, 5, 1); /* two spaces -> one ▁ */
    T5_CASE("ab   ", 0, 0, 8, 1);        /* trailing spaces stripped */
    T5_CASE("  ab", 0, 0, 8, 1);         /* leading run -> ▁, no second ▁ prepended */
    T5_CASE("", 0, 0, 1);
    T5_CASE("   ", 0, 0, 1);
    T5_CASE("ab</s>ab", 0, 0, 8, 1, 8, 1); /* "always": each piece gets its ▁ */
    T5_CASE("<pad><unk>", 0, 0, 0, 2, 1);
    T5_CASE("ab ab ab", 3, 1, 8, 8, 1);
    T5_CASE("ab ab", 3, 0, 8, 8, 1);
    T5_CASE("ab ab", 1, 1, 1);
    T5_CASE("a\xff", 0, 0, 3, 4, 2, 1); /* invalid byte -> U+FFFD -> <unk> */
    int32_t padded[6];
    size_t n_real = 0;
    cpdit_error err;
    CHECK(t5_tokenizer_encode_padded(t, "ab", 2, 6, padded, &n_real, NULL, &err) == CPDIT_OK);
    const int32_t want_pad[] = {8, 1, 0, 0, 0, 0};
    CHECK(n_real == 2 && memcmp(padded, want_pad, sizeof want_pad) == 0);
    int32_t *ids;
    size_t n;
    char *big = malloc(LONG_INPUT_BYTES);
    unsigned seed = 777;
    for (size_t i = 0; i < LONG_INPUT_BYTES; i++) {
        seed = seed * 1103515245u + 12345u;
        big[i] = (char)(seed >> 16);
    }
    CHECK(t5_tokenizer_encode(t, big, LONG_INPUT_BYTES, 0, &ids, &n, NULL, &err) == CPDIT_OK);
    CHECK(n > 1 && ids[n - 1] == 1);
    free(ids);
    int cut = 0;
    CHECK(t5_tokenizer_encode(t, big, LONG_INPUT_BYTES, T5_MAX_LENGTH_DEV, &ids, &n, &cut,
                              &err) == CPDIT_OK);
    CHECK(n == T5_MAX_LENGTH_DEV && cut == 1 && ids[n - 1] == 1);
    free(ids);
    free(big);
    t5_tokenizer_free(t);

    t = toy_t5("first", "false", NULL);
    if (t) {
        T5_CASE("ab</s>ab", 0, 0, 8, 1, 7, 1); /* no ▁ after the special token */
        T5_CASE("</s>ab", 0, 0, 1, 7, 1);
        t5_tokenizer_free(t);
    }
    t = toy_t5("never", "true", NULL);
    if (t) {
        T5_CASE("ab c", 0, 0, 7, 10, 1);       /* ab | ▁c */
        T5_CASE("xa", 0, 0, 12, 4, 1);         /* byte fallback: x -> <0x78> */
        T5_CASE("ya", 0, 0, 2, 4, 1);          /* no <0x79>: <unk> */
        t5_tokenizer_free(t);
    }

    /* charsmap: 'A' -> "a", 'e' -> "b", 0x01 -> "" */
    const char *values[] = {"a", "b", ""};
    unsigned char blob[4 + DARTS_UNITS * 4 + 64];
    size_t blen = toy_charsmap(blob, "Ae\x01", values);
    spm_charsmap map;
    CHECK(spm_charsmap_parse(&map, blob, blen, "toy", &err) == CPDIT_OK);
    char *out;
    size_t olen;
    struct {
        const char *in, *want;
    } norm[] = {
        {"AxA", "axa"},
        {"e\xcc\x81x", "bx"},                             /* e + U+0301 < 6 bytes: "b" only */
        {"e\xcc\x81\xcc\x81\xcc\x81", "b\xcc\x81\xcc\x81\xcc\x81"}, /* 7 bytes: per char */
        {"\x01" "c", "c"},
    };
    for (size_t c = 0; c < ARRAY_LEN(norm); c++) {
        CHECK(spm_charsmap_normalize(&map, norm[c].in, strlen(norm[c].in), &out, &olen, &err) ==
              CPDIT_OK);
        CHECK_MSG(strcmp(out, norm[c].want) == 0, "charsmap \"%s\" -> \"%s\"", norm[c].in, out);
        free(out);
    }
    spm_charsmap_free(&map);
    char b64[4 * (sizeof blob / 3 + 2)];
    base64(blob, blen, b64);
    t = toy_t5("always", "false", b64);
    if (t) {
        T5_CASE("AB", 0, 0, 3, 4, 2, 1);     /* A -> a; B unknown */
        T5_CASE("e", 0, 0, 3, 5, 1);         /* e -> b */
        t5_tokenizer_free(t);
    }

    /* errors name the problem */
    const char *bad_model = "{\"model\": {\"type\": \"BPE\", \"vocab\": {}}}";
    CHECK(t5_tokenizer_from_json(bad_model, strlen(bad_model), "toy", &t, &err) ==
          CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "BPE");
    const char *bad_norm = "{\"normalizer\": {\"type\": \"NFKC\"}, \"model\": {\"type\":"
                           " \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0]]}}";
    CHECK(t5_tokenizer_from_json(bad_norm, strlen(bad_norm), "toy", &t, &err) ==
          CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "NFKC");
    CHECK(t5_tokenizer_from_json("{", 1, "toy", &t, &err) == CPDIT_ERR_INPUT);
    CHECK(t5_tokenizer_load("/nonexistent-cpdit-dir", &t, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.where, "/nonexistent-cpdit-dir/tokenizer.json");
}

/* ---------------------------------------------------------------- T5 from a .model */

typedef struct pbuf {
    unsigned char b[512];
    size_t n;
} pbuf;

static void pb_varint(pbuf *p, uint64_t v)
{
    do {
        p->b[p->n++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static void pb_bytes(pbuf *p, unsigned field, const void *data, size_t len)
{
    pb_varint(p, field << 3 | 2);
    pb_varint(p, len);
    memcpy(p->b + p->n, data, len);
    p->n += len;
}

static void pb_piece(pbuf *model, const char *text, float score, unsigned type)
{
    pbuf m = {.n = 0};
    uint32_t bits;
    memcpy(&bits, &score, 4);
    pb_bytes(&m, 1, text, strlen(text));
    pb_varint(&m, 2 << 3 | 5);
    for (int i = 0; i < 4; i++)
        m.b[m.n++] = (unsigned char)(bits >> (8 * i));
    pb_varint(&m, 3 << 3 | 0);
    pb_varint(&m, type);
    pb_bytes(model, 1, m.b, m.n);
}

static void test_t5_spm(void)
{
    /* ids: 0 <pad> 1 </s> 2 <unk> 3 ▁ 4 a 5 ▁a, then 6 <extra_id_1> 7 <extra_id_0> */
    pbuf model = {.n = 0}, trainer = {.n = 0};
    pb_piece(&model, "<pad>", 0, 3);
    pb_piece(&model, "</s>", 0, 3);
    pb_piece(&model, "<unk>", 0, 2);
    pb_piece(&model, "\xe2\x96\x81", -2, 1);
    pb_piece(&model, "a", -3, 1);
    pb_piece(&model, "\xe2\x96\x81" "a", -1, 1);
    pb_varint(&trainer, 3 << 3 | 0); /* model_type UNIGRAM */
    pb_varint(&trainer, 1);
    pb_varint(&trainer, 40 << 3 | 0); /* unk_id */
    pb_varint(&trainer, 2);
    pb_bytes(&model, 2, trainer.b, trainer.n);
    t5_tokenizer *t = NULL;
    cpdit_error err;
    CHECK(t5_tokenizer_from_spm(model.b, model.n, 2, 1, "toy.model", &t, &err) == CPDIT_OK);
    if (t) {
        CHECK(t5_tokenizer_vocab_size(t) == 8 && t5_tokenizer_eos_id(t) == 1);
        T5_CASE("a", 0, 0, 5, 1);
        T5_CASE("a  a ", 0, 0, 5, 5, 1);
        T5_CASE("a<extra_id_0>a</s>", 0, 0, 5, 7, 5, 1, 1);
        T5_CASE("b", 0, 0, 3, 2, 1);
        t5_tokenizer_free(t);
    }
    CHECK(t5_tokenizer_from_spm(model.b, model.n, 2, 0, "toy.model", &t, &err) == CPDIT_OK);
    if (t) {
        T5_CASE("<extra_id_1>a", 0, 0, 6, 4, 1); /* legacy false: no ▁ after a special */
        t5_tokenizer_free(t);
    }
    const unsigned char junk[] = {0x0A, 0x7F, 0x01};
    CHECK(t5_tokenizer_from_spm(junk, sizeof junk, 2, 1, "junk.model", &t, &err) ==
          CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "protobuf");
}

int main(void)
{
    test_utf8();
    test_unicode_transforms();
    test_bpe_merge();
    test_clip_toy();
    test_t5_toy();
    test_t5_spm();
    TEST_MAIN_END();
}
