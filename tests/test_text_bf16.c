/* test_text_bf16.c — the text encoders with bf16 activation storage: CLIP (last hidden states
 * and pooled output) and T5 on the "cpu-bf16" table (kernels/backend.h: the "cpu" kernels over
 * bf16 activations, rounded once per op) against the same checkpoint and ids on the "cpu" fp32
 * table:
 *   - within BF16_CLIP_TOL / BF16_T5_TOL, as max |bf16 - fp32| / max |fp32|;
 *   - not bitwise equal (bf16 storage really ran);
 *   - streamed per layer equals resident, bit for bit, on "cpu-bf16" too.
 * Models: the tiny random fixtures (tests/text_encoder_fixtures.h) in bf16, 2 layers, batch 2 of
 * 77 tokens.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "lib/text/clip_text_model.h"
#include "lib/text/t5_encoder.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"
#include "tests/text_encoder_fixtures.h"

/* max |bf16 - fp32| / max |fp32| on these fixtures. Measured (this file's fixtures and seeds):
 * CLIP hidden 8.5e-3, pooled 7.3e-3; T5 1.34e-2 (no 1/sqrt(d) on T5's scores: the bf16
 * rounding of q and k moves large logits). One bf16 rounding is 2^-9 = 2e-3 relative. */
#define BF16_CLIP_TOL 2e-2
#define BF16_T5_TOL 2e-2

enum { B = 2, S = 77 };

static char *g_tmp;

static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs((double)b[i]));
    }
    return mr > 0 ? md / mr : md;
}

/* ids (B, S) in [lo, hi), eos from column eos_at + b on (eos_at >= 0). */
static void make_ids(int32_t *ids, int lo, int hi, int eos, int eos_at, unsigned seed)
{
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            seed = seed * 1664525u + 1013904223u;
            int32_t id = lo + (int32_t)((seed >> 8) % (unsigned)(hi - lo));
            if (eos_at >= 0 && s >= eos_at + b)
                id = eos;
            ids[b * S + s] = id;
        }
}

/* The three options: "cpu" resident, "cpu-bf16" resident, "cpu-bf16" streamed per layer. */
static void options(text_encoder_options o[3])
{
    o[0] = o[1] = o[2] = text_encoder_options_default();
    o[0].backend = cpdit_backend_cpu();
    o[1].backend = o[2].backend = cpdit_backend_cpu_bf16();
    o[2].cache_bytes = 0;
}

static void test_clip_bf16(void)
{
    cpdit_error err;
    clip_fixture cf = clip_fixture_tiny();
    char *dir = tmp_path(g_tmp, "clip");
    CHECK(fixture_write_clip(dir, &cf, CPDIT_DTYPE_BF16, 21, &err) == 0);
    int32_t ids[B * S];
    make_ids(ids, 0, 998, cf.eos_token_id, 9, 13);
    text_encoder_options o[3];
    options(o);
    const size_t n = (size_t)B * S * cf.hidden, np = (size_t)B * cf.hidden;
    float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
    float *again = malloc(n * sizeof *again);
    float *pref = malloc(np * sizeof *pref), *pgot = malloc(np * sizeof *pgot);
    clip_text_model *m[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++)
        CHECK_MSG(clip_text_model_load(dir, &o[k], &m[k], &err) == CPDIT_OK, "%s", err.what);
    if (m[0] && m[1] && m[2] && ref && got && again && pref && pgot) {
        CHECK(clip_text_model_forward(m[0], ids, B, S, ref, pref, &err) == CPDIT_OK);
        CHECK(clip_text_model_forward(m[1], ids, B, S, got, pgot, &err) == CPDIT_OK);
        const double e = max_rel_diff(got, ref, n), ep = max_rel_diff(pgot, pref, np);
        fprintf(stderr, "CLIP bf16 vs fp32: hidden %.3g, pooled %.3g (tolerance %g)\n", e, ep,
                BF16_CLIP_TOL);
        CHECK_MSG(e <= BF16_CLIP_TOL && ep <= BF16_CLIP_TOL, "CLIP bf16: %g, pooled %g", e, ep);
        CHECK_MSG(memcmp(got, ref, n * sizeof *got) != 0, "CLIP bf16 == fp32 bitwise");
        CHECK(clip_text_model_forward(m[2], ids, B, S, again, NULL, &err) == CPDIT_OK);
        CHECK_MSG(memcmp(again, got, n * sizeof *got) == 0, "CLIP bf16: streamed != resident");
    }
    for (int k = 0; k < 3; k++)
        clip_text_model_free(m[k]);
    free(ref), free(got), free(again), free(pref), free(pgot);
    free(dir);
}

static void test_t5_bf16(void)
{
    cpdit_error err;
    t5_fixture tf = t5_fixture_tiny();
    char *dir = tmp_path(g_tmp, "t5");
    CHECK(fixture_write_t5(dir, &tf, CPDIT_DTYPE_BF16, 22, &err) == 0);
    int32_t ids[B * S];
    make_ids(ids, 2, 1000, 1, 30, 14);
    text_encoder_options o[3];
    options(o);
    const size_t n = (size_t)B * S * tf.d_model;
    float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
    float *again = malloc(n * sizeof *again);
    t5_encoder *m[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++)
        CHECK_MSG(t5_encoder_load(dir, &o[k], &m[k], &err) == CPDIT_OK, "%s", err.what);
    if (m[0] && m[1] && m[2] && ref && got && again) {
        CHECK(t5_encoder_streaming(m[2]));
        CHECK(t5_encoder_forward(m[0], ids, B, S, ref, &err) == CPDIT_OK);
        CHECK(t5_encoder_forward(m[1], ids, B, S, got, &err) == CPDIT_OK);
        const double e = max_rel_diff(got, ref, n);
        fprintf(stderr, "T5 bf16 vs fp32: %.3g (tolerance %g)\n", e, BF16_T5_TOL);
        CHECK_MSG(e <= BF16_T5_TOL, "T5 bf16: %g", e);
        CHECK_MSG(memcmp(got, ref, n * sizeof *got) != 0, "T5 bf16 == fp32 bitwise");
        CHECK(t5_encoder_forward(m[2], ids, B, S, again, &err) == CPDIT_OK);
        CHECK_MSG(memcmp(again, got, n * sizeof *got) == 0, "T5 bf16: streamed != resident");
    }
    for (int k = 0; k < 3; k++)
        t5_encoder_free(m[k]);
    free(ref), free(got), free(again);
    free(dir);
}

int main(void)
{
    g_tmp = tmpdir_make("text-bf16");
    if (!g_tmp) {
        fprintf(stderr, "cannot create a temporary folder\n");
        return 1;
    }
    CHECK(cpdit_backend_cpu()->act_dtype == CPDIT_DTYPE_F32);
    CHECK(cpdit_backend_cpu_bf16()->act_dtype == CPDIT_DTYPE_BF16);
    test_clip_bf16();
    test_t5_bf16();
    tmpdir_remove(g_tmp);
    free(g_tmp);
    TEST_MAIN_END();
}
