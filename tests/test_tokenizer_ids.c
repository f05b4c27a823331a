/* test_tokenizer_ids.c — the CLIP and T5 tokenizers on FLUX.1's real tokenizer files against
 * the ids the reference tokenizers give (tests/data/tokenizers/expected_ids.jsonl, written by
 * tests/reference/make_tokenizer_ids.py) for a fixed list of tricky prompts: punctuation,
 * numbers, apostrophes, accents, CJK, emoji, whitespace, zero-width and control characters,
 * special-token strings, invalid UTF-8, empty and over-long prompts.
 *
 * Every id must match exactly: untruncated, truncated to 77 (CLIP) and to 256 / 512 / 8
 * (T5), and padded as FluxPipeline pads; the T5 tokenizer built from spiece.model (the
 * fallback when a folder has no tokenizer.json) must give the same ids as tokenizer.json.
 * Needs the tokenizer files (4.8 MB, not in the repository): $CPDIT_TOKENIZER_DATA, else
 * $top_srcdir/../shared/data/tokenizers; skips (77) without them. Prints one timing line
 * (microseconds per prompt) as a benchmark.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/test_util.h"
#include "lib/text/tokenizer_clip.h"
#include "lib/text/tokenizer_common.h"
#include "lib/text/tokenizer_t5.h"

#define EXPECTED_FILE "tests/data/tokenizers/expected_ids.jsonl"
#define CLIP_SUBDIR "clip-vit-large-patch14"
#define T5_SUBDIR "t5-v1_1-xxl"
#define T5_SMALL_LIMIT 8 /* a limit most prompts exceed */
#define PATH_MAX_LEN 4096
#define BENCH_ROUNDS 20

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int hex_digit(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The prompt bytes of a record ("prompt", or "prompt_hex"); a new buffer. */
static char *record_prompt(json_t *rec, size_t *len)
{
    json_t *p = json_object_get(rec, "prompt");
    if (json_is_string(p)) {
        *len = json_string_length(p);
        char *s = malloc(*len + 1);
        memcpy(s, json_string_value(p), *len + 1);
        return s;
    }
    const char *hex = json_string_value(json_object_get(rec, "prompt_hex"));
    size_t n = hex ? strlen(hex) / 2 : 0;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        s[i] = (char)(hex_digit(hex[2 * i]) << 4 | hex_digit(hex[2 * i + 1]));
    s[n] = '\0';
    *len = n;
    return s;
}

/* Compare got[0..n) with the first `take` ids of want plus, when cut, the final id `last`. */
static void check_ids(const char *name, const char *what, const int32_t *got, size_t n,
                      json_t *want, size_t limit)
{
    size_t full = json_array_size(want);
    size_t expect_n = limit && full > limit ? limit : full;
    CHECK_MSG(n == expect_n, "%s %s: %zu ids, expected %zu", name, what, n, expect_n);
    for (size_t i = 0; i < n && i < expect_n; i++) {
        /* a cut sequence keeps the reference's last (end) token */
        size_t src = limit && full > limit && i == expect_n - 1 ? full - 1 : i;
        int32_t w = (int32_t)json_integer_value(json_array_get(want, src));
        if (got[i] != w) {
            CHECK_MSG(got[i] == w, "%s %s: id[%zu] = %d, expected %d", name, what, i,
                      (int)got[i], (int)w);
            return;
        }
    }
}

int main(void)
{
    const char *top = getenv("top_srcdir");
    const char *data = getenv("CPDIT_TOKENIZER_DATA");
    char data_dir[PATH_MAX_LEN], path[PATH_MAX_LEN];
    if (!top)
        top = ".";
    if (data)
        snprintf(data_dir, sizeof data_dir, "%s", data);
    else
        snprintf(data_dir, sizeof data_dir, "%s/../shared/data/tokenizers", top);
    char clip_dir[PATH_MAX_LEN + 32], t5_dir[PATH_MAX_LEN + 32];
    snprintf(clip_dir, sizeof clip_dir, "%s/" CLIP_SUBDIR, data_dir);
    snprintf(t5_dir, sizeof t5_dir, "%s/" T5_SUBDIR, data_dir);
    if (!is_dir(clip_dir) || !is_dir(t5_dir))
        TEST_SKIP("no tokenizer files in %s (set CPDIT_TOKENIZER_DATA)", data_dir);

    cpdit_error err;
    clip_tokenizer *clip = NULL;
    t5_tokenizer *t5 = NULL;
    CHECK(clip_tokenizer_load(clip_dir, &clip, &err) == CPDIT_OK);
    CHECK(t5_tokenizer_load(t5_dir, &t5, &err) == CPDIT_OK);
    if (!clip || !t5) {
        fprintf(stderr, "%s: %s\n", err.where, err.what);
        TEST_MAIN_END();
    }
    CHECK(clip_tokenizer_vocab_size(clip) == 49408);
    CHECK(clip_tokenizer_bos_id(clip) == 49406 && clip_tokenizer_eos_id(clip) == 49407);
    CHECK(t5_tokenizer_vocab_size(t5) == 32100);
    CHECK(t5_tokenizer_eos_id(t5) == 1 && t5_tokenizer_pad_id(t5) == 0);
    char *spm_data = NULL;
    size_t spm_len = 0;
    t5_tokenizer *t5_spm = NULL;
    CHECK(tokenizer_read_file(t5_dir, "spiece.model", &spm_data, &spm_len, &err) == CPDIT_OK);
    if (spm_data)
        CHECK(t5_tokenizer_from_spm((const unsigned char *)spm_data, spm_len,
                                    T5_DEFAULT_EXTRA_IDS, 1, "spiece.model", &t5_spm,
                                    &err) == CPDIT_OK);
    free(spm_data);
    CHECK(t5_spm && t5_tokenizer_vocab_size(t5_spm) == 32100 &&
          t5_tokenizer_eos_id(t5_spm) == 1 && t5_tokenizer_pad_id(t5_spm) == 0);

    snprintf(path, sizeof path, "%s/" EXPECTED_FILE, top);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f)
        TEST_MAIN_END();
    char *line = NULL;
    size_t cap = 0, n_records = 0;
    double bench_us = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *rec = json_loads(line, 0, &jerr);
        CHECK_MSG(rec != NULL, "%s: line %zu: %s", path, n_records + 1, jerr.text);
        if (!rec)
            continue;
        n_records++;
        const char *name = json_string_value(json_object_get(rec, "name"));
        json_t *want_clip = json_object_get(rec, "clip"), *want_t5 = json_object_get(rec, "t5");
        size_t len;
        char *prompt = record_prompt(rec, &len);
        int32_t *ids = NULL, padded[T5_MAX_LENGTH_DEV];
        size_t n = 0, n_real = 0;
        int cut = -1;

        CHECK(clip_tokenizer_encode(clip, prompt, len, 0, &ids, &n, &cut, &err) == CPDIT_OK);
        check_ids(name, "clip full", ids, n, want_clip, 0);
        CHECK(cut == 0);
        free(ids);
        CHECK(clip_tokenizer_encode(clip, prompt, len, CLIP_MAX_LENGTH, &ids, &n, &cut, &err) ==
              CPDIT_OK);
        check_ids(name, "clip 77", ids, n, want_clip, CLIP_MAX_LENGTH);
        CHECK(cut == (json_array_size(want_clip) > CLIP_MAX_LENGTH));
        free(ids);
        CHECK(clip_tokenizer_encode_padded(clip, prompt, len, CLIP_MAX_LENGTH, padded, &n_real,
                                           NULL, &err) == CPDIT_OK);
        check_ids(name, "clip padded", padded, n_real, want_clip, CLIP_MAX_LENGTH);
        for (size_t i = n_real; i < CLIP_MAX_LENGTH; i++)
            CHECK_MSG(padded[i] == 49407, "%s: clip pad[%zu] = %d", name, i, (int)padded[i]);

        CHECK(t5_tokenizer_encode(t5, prompt, len, 0, &ids, &n, &cut, &err) == CPDIT_OK);
        check_ids(name, "t5 full", ids, n, want_t5, 0);
        free(ids);
        if (t5_spm) {
            CHECK(t5_tokenizer_encode(t5_spm, prompt, len, T5_MAX_LENGTH_DEV, &ids, &n, &cut,
                                      &err) == CPDIT_OK);
            check_ids(name, "t5 from spiece.model", ids, n, want_t5, T5_MAX_LENGTH_DEV);
            free(ids);
        }
        const size_t limits[] = {T5_MAX_LENGTH_DEV, T5_MAX_LENGTH_SCHNELL, T5_SMALL_LIMIT};
        for (size_t k = 0; k < sizeof limits / sizeof *limits; k++) {
            char what[32];
            snprintf(what, sizeof what, "t5 %zu", limits[k]);
            CHECK(t5_tokenizer_encode(t5, prompt, len, limits[k], &ids, &n, &cut, &err) ==
                  CPDIT_OK);
            check_ids(name, what, ids, n, want_t5, limits[k]);
            CHECK(cut == (json_array_size(want_t5) > limits[k]));
            free(ids);
        }
        CHECK(t5_tokenizer_encode_padded(t5, prompt, len, T5_MAX_LENGTH_DEV, padded, &n_real,
                                         NULL, &err) == CPDIT_OK);
        check_ids(name, "t5 padded", padded, n_real, want_t5, T5_MAX_LENGTH_DEV);
        for (size_t i = n_real; i < T5_MAX_LENGTH_DEV; i++)
            CHECK_MSG(padded[i] == 0, "%s: t5 pad[%zu] = %d", name, i, (int)padded[i]);

        if (strcmp(name, "sign") == 0) { /* benchmark: one ordinary prompt, both tokenizers */
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            for (int r = 0; r < BENCH_ROUNDS; r++) {
                clip_tokenizer_encode_padded(clip, prompt, len, CLIP_MAX_LENGTH, padded, NULL,
                                             NULL, &err);
                t5_tokenizer_encode_padded(t5, prompt, len, T5_MAX_LENGTH_DEV, padded, NULL,
                                           NULL, &err);
            }
            clock_gettime(CLOCK_MONOTONIC, &b);
            bench_us = ((double)(b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3) /
                       BENCH_ROUNDS;
        }
        free(prompt);
        json_decref(rec);
    }
    free(line);
    fclose(f);
    CHECK_MSG(n_records >= 30, "only %zu records in %s", n_records, path);
    fprintf(stderr, "%zu prompts checked\n", n_records);
    fprintf(stderr, "bench: tokenize one prompt (CLIP 77 + T5 512, padded): %.1f us\n", bench_us);
    clip_tokenizer_free(clip);
    t5_tokenizer_free(t5);
    t5_tokenizer_free(t5_spm);
    TEST_MAIN_END();
}
