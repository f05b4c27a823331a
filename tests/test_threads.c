/* test_threads.c — the rank's thread pool (kernels/cpu/thread_pool.h) and the claim that the
 * CPU kernels give the same bits for any thread count.
 *
 * Pool: a run calls every worker index exactly once; cpu_pool_for covers [0, n) exactly once;
 * a run from inside a task runs inline (no deadlock); resizing works.
 * Bits: each op below runs with pools of 1, 2 and 3 threads on the same inputs, sized so that
 * the work really is split (rows past the per-worker minimum, conv blocks past the
 * block-parallel threshold); the outputs must be equal bit for bit (memcmp):
 *   bf16 GEMM (set, +bias, accumulate), fp32 SGEMM linear (row split), flash attention (query
 *   blocks), dense causal attention (heads), layer/RMS norm, add, mul, gelu, modulate, gated
 *   residual, RoPE, GroupNorm apply, 3x3 convolution (fp32 and bf16 weights, block-parallel)
 *   and bf16 weight packing.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/gemm_bf16_cpu.h"
#include "kernels/cpu/parallel_ops_cpu.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vae_ops_cpu.h"
#include "tests/test_util.h"

/* Thread counts compared (the first is the reference). */
static const int thread_counts[] = {1, 2, 3};
#define N_COUNTS 3

/* shapes: big enough to split over 3 threads */
#define LIN_M 300
#define LIN_K 320
#define LIN_N 224
#define ROWS 512
#define DIM 384
#define ATT_S 700
#define ATT_H 3
#define ATT_D 64
#define DEN_S 96
#define DEN_H 6
#define CONV_W 128
#define CONV_ROWS 120
#define CONV_CIN 64
#define CONV_COUT 32
#define GN_GROUPS 8

static uint32_t rng_state = 12345u;
static float frand(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static float *randv(size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++)
        p[i] = frand();
    return p;
}

/* ------------------------------------------------------------------ pool behaviour */

static int hits[CPU_POOL_MAX_THREADS];
static void count_worker(void *ctx, int w, int n)
{
    (void)ctx;
    if (w >= 0 && w < n && n <= CPU_POOL_MAX_THREADS)
        __atomic_add_fetch(&hits[w], 1, __ATOMIC_RELAXED);
}

static void nested_worker(void *ctx, int w, int n)
{
    (void)w;
    (void)n;
    int *inline_ok = ctx;
    cpu_pool_run(0, count_worker, NULL); /* inline: worker 0 of 1 */
    __atomic_add_fetch(inline_ok, cpu_pool_in_task(), __ATOMIC_RELAXED);
}

static unsigned char covered[10007];
static void cover_range(void *ctx, size_t i0, size_t i1)
{
    (void)ctx;
    for (size_t i = i0; i < i1; i++)
        covered[i]++;
}

static void test_pool(void)
{
    cpu_pool_set_size(3);
    CHECK(cpu_pool_size() == 3);
    for (int rep = 0; rep < 200; rep++) { /* many runs: a lost wake-up would hang here */
        memset(hits, 0, sizeof hits);
        cpu_pool_run(rep % 3 + 1, count_worker, NULL);
        int ok = 1;
        for (int w = 0; w < CPU_POOL_MAX_THREADS; w++)
            ok &= hits[w] == (w < rep % 3 + 1);
        CHECK_MSG(ok, "run %d on %d workers: some index not called exactly once", rep,
                  rep % 3 + 1);
    }
    int nested = 0;
    memset(hits, 0, sizeof hits);
    cpu_pool_run(0, nested_worker, &nested);
    CHECK_MSG(nested == 3, "a run inside a task: %d of 3 tasks saw themselves in a task", nested);
    CHECK_MSG(hits[0] == 3 && hits[1] == 0, "nested runs ran inline (worker 0): %d, %d", hits[0],
              hits[1]);
    memset(covered, 0, sizeof covered);
    cpu_pool_for(sizeof covered, 100, cover_range, NULL);
    int once = 1;
    for (size_t i = 0; i < sizeof covered; i++)
        once &= covered[i] == 1;
    CHECK_MSG(once, "cpu_pool_for: an item not covered exactly once");
    cpu_pool_set_size(1);
    CHECK(cpu_pool_size() == 1);
}

/* ------------------------------------------------------------------ the ops */

typedef struct inputs {
    float *x, *w, *bias, *y0;             /* linear */
    uint16_t *wb;                         /* W packed bf16 */
    float *a, *b, *gamma, *beta, *shift;  /* rows x dim, dim vectors */
    float *q, *k, *v, *cos, *sin;         /* attention, rope */
    float *cx, *cw, *cb;                  /* conv: x with halo rows, w (Cout, Cin, 3, 3), bias */
    double mean[GN_GROUPS], rstd[GN_GROUPS];
} inputs;

static int garbage = 0xab;

/* The next n floats of out (NULL when only counting). */
static float *slot(float *out, size_t *at, size_t n)
{
    float *p = out ? out + *at : NULL;
    *at += n;
    return p;
}

/* All outputs of one thread count, concatenated; returns the float count (out NULL: just count). */
static size_t run_ops(const inputs *in, float *out)
{
    size_t at = 0;
    cpdit_error err;
    /* bf16 GEMM: y = x W^T; y = bias + x W^T; y += x W^T */
    float *y = slot(out, &at, (size_t)LIN_M * LIN_N);
    if (y) {
        CHECK(cpu_gemm_bf16_set(y, LIN_N, in->x, LIN_K, in->wb, LIN_M, LIN_K, LIN_N, &err) ==
              CPDIT_OK);
        /* accumulate a second product into the same result */
        CHECK(cpu_gemm_bf16(y, LIN_N, in->x, LIN_K, in->wb, LIN_M, LIN_K, LIN_N, &err) ==
              CPDIT_OK);
    }
    float *yl = slot(out, &at, (size_t)LIN_M * LIN_N);
    if (yl) { /* the fp32 linear with bias (row-split SGEMM) */
        cpdit_weight_desc d = {.dtype = CPDIT_DTYPE_F32, .rows = LIN_N, .cols = LIN_K,
                               .data = in->w, .data_persists = 1, .format = CPDIT_WEIGHT_F32};
        cpdit_weight *w = NULL;
        CHECK(cpu_weight_create(&w, &d, &err) == CPDIT_OK);
        if (w) {
            CHECK(cpu_linear(yl, LIN_N, in->x, LIN_K, w, in->bias, LIN_M, LIN_K, LIN_N, 0,
                             &err) == CPDIT_OK);
            cpu_weight_free(w);
        }
    }
    const size_t att = (size_t)ATT_S * ATT_H * ATT_D;
    float *o = slot(out, &at, att);
    float *lse = slot(out, &at, (size_t)ATT_S * ATT_H);
    if (o)
        CHECK(attention_cpu_forward(o, lse, in->q, in->k, in->v, 1, ATT_S, ATT_S, ATT_H, ATT_D,
                                    0.125f, &err) == CPDIT_OK);
    const size_t den = (size_t)2 * DEN_S * DEN_H * ATT_D;
    float *od = slot(out, &at, den);
    if (od) {
        const cpdit_attention_args a = {.B = 2, .Sq = DEN_S, .Skv = DEN_S, .H = DEN_H,
                                        .D = ATT_D, .scale = 0.125f, .causal = 1};
        CHECK(attention_cpu_dense(od, NULL, in->q, in->k, in->v, &a, &err) == CPDIT_OK);
    }
    const size_t rd = (size_t)ROWS * DIM;
    float *t;
    if ((t = slot(out, &at, rd)))
        cpu_par_layer_norm(t, in->a, in->gamma, in->beta, ROWS, DIM, 1e-6f);
    if ((t = slot(out, &at, rd)))
        cpu_par_rms_norm(t, in->a, in->gamma, ROWS, DIM, 1e-6f);
    if ((t = slot(out, &at, rd)))
        cpu_par_add(t, in->a, in->b, rd);
    if ((t = slot(out, &at, rd)))
        cpu_par_mul(t, in->a, in->b, rd);
    if ((t = slot(out, &at, rd)))
        cpu_par_act(CPDIT_ACT_GELU_TANH, t, in->a, rd);
    if ((t = slot(out, &at, rd)))
        cpu_par_modulate(t, in->a, in->shift, in->gamma, ROWS, DIM);
    if ((t = slot(out, &at, rd))) {
        memcpy(t, in->b, rd * sizeof *t);
        cpu_par_gated_residual(t, DIM, in->a, DIM, in->gamma, ROWS, DIM);
    }
    if ((t = slot(out, &at, rd))) { /* RoPE: (S = ROWS, H = DIM / ATT_D, D = ATT_D) */
        memcpy(t, in->a, rd * sizeof *t);
        cpu_par_rope(t, in->cos, in->sin, ROWS, DIM / ATT_D, ATT_D);
    }
    if ((t = slot(out, &at, rd)))
        cpu_par_group_norm_apply(t, in->a, ROWS, DIM, GN_GROUPS, in->mean, in->rstd, in->gamma,
                                 in->beta, CPDIT_ACT_SILU);
    /* 3x3 convolutions, fp32 and bf16 weights */
    const size_t cy = (size_t)CONV_ROWS * CONV_W * CONV_COUT;
    for (int form = 0; form < 2; form++) {
        if (!(t = slot(out, &at, cy)))
            continue;
        float *pk = cpu_conv2d_pack_stored(in->cw, CPDIT_DTYPE_F32, CONV_COUT, CONV_CIN, 3,
                                           form ? CPDIT_WEIGHT_NATIVE : CPDIT_WEIGHT_F32);
        const size_t wsb = cpu_conv2d_workspace_bytes(CONV_W, CONV_CIN, 3);
        void *ws = cpu_alloc(wsb ? wsb : 1);
        CHECK(pk && ws);
        if (pk && ws)
            CHECK(cpu_conv2d(t, in->cx + (size_t)CONV_W * CONV_CIN, pk, in->cb, CONV_W,
                             CONV_CIN, CONV_COUT, 3, 0, CONV_ROWS, ws, &err) == CPDIT_OK);
        cpu_free(pk);
        cpu_free(ws);
    }
    /* packing: the packed bytes as floats */
    const size_t pb = cpu_bf16_packed_bytes(LIN_N, LIN_K + 1); /* odd K: a padded pair */
    if ((t = slot(out, &at, (pb + sizeof(float) - 1) / sizeof(float)))) {
        memset(t, garbage, pb); /* other garbage per run: the packing must write every byte */
        cpu_bf16_pack((uint16_t *)t, in->w, CPDIT_DTYPE_F32, LIN_N - 5, LIN_K + 1);
    }
    return at;
}

static const char *const op_names[] = {
    "bf16 GEMM", "fp32 linear", "flash attention", "attention lse", "dense causal attention",
    "layer_norm", "rms_norm", "add", "mul", "gelu", "modulate", "gated_residual", "rope",
    "group_norm_apply", "conv2d 3x3 fp32", "conv2d 3x3 bf16", "bf16 pack"};

int main(void)
{
    test_pool();

    inputs in;
    memset(&in, 0, sizeof in);
    in.x = randv((size_t)LIN_M * LIN_K);
    in.w = randv((size_t)LIN_N * (LIN_K + 1));
    in.bias = randv(LIN_N);
    in.wb = cpu_alloc(cpu_bf16_packed_bytes(LIN_N, LIN_K));
    in.a = randv((size_t)ROWS * DIM);
    in.b = randv((size_t)ROWS * DIM);
    in.gamma = randv(DIM);
    in.beta = randv(DIM);
    in.shift = randv(DIM);
    in.q = randv((size_t)ATT_S * ATT_H * ATT_D + (size_t)2 * DEN_S * DEN_H * ATT_D);
    in.k = randv((size_t)ATT_S * ATT_H * ATT_D + (size_t)2 * DEN_S * DEN_H * ATT_D);
    in.v = randv((size_t)ATT_S * ATT_H * ATT_D + (size_t)2 * DEN_S * DEN_H * ATT_D);
    in.cos = randv((size_t)ROWS * ATT_D);
    in.sin = randv((size_t)ROWS * ATT_D);
    in.cx = randv((size_t)(CONV_ROWS + 2) * CONV_W * CONV_CIN);
    in.cw = randv((size_t)CONV_COUT * CONV_CIN * 9);
    in.cb = randv(CONV_COUT);
    for (int g = 0; g < GN_GROUPS; g++) {
        in.mean[g] = 0.1 * g;
        in.rstd[g] = 1.0 + 0.2 * g;
    }
    CHECK(in.x && in.w && in.wb && in.a && in.q && in.cx);
    cpu_bf16_pack(in.wb, in.w, CPDIT_DTYPE_F32, LIN_N, LIN_K); /* (LIN_N, LIN_K) view of w */

    const size_t total = run_ops(&in, NULL);
    float *res[N_COUNTS];
    for (int c = 0; c < N_COUNTS; c++) {
        cpu_pool_set_size(thread_counts[c]);
        CHECK(cpu_pool_size() == thread_counts[c]);
        res[c] = malloc(total * sizeof(float));
        CHECK(res[c] != NULL);
        if (!res[c])
            TEST_MAIN_END();
        memset(res[c], 0, total * sizeof(float));
        garbage = 0xab + 17 * c;
        run_ops(&in, res[c]);
    }
    /* op by op: the same slots as run_ops */
    const size_t rd = (size_t)ROWS * DIM, cy = (size_t)CONV_ROWS * CONV_W * CONV_COUT;
    const size_t pbf = (cpu_bf16_packed_bytes(LIN_N, LIN_K + 1) + sizeof(float) - 1) /
                       sizeof(float);
    const size_t sizes[] = {(size_t)LIN_M * LIN_N, (size_t)LIN_M * LIN_N,
                            (size_t)ATT_S * ATT_H * ATT_D, (size_t)ATT_S * ATT_H,
                            (size_t)2 * DEN_S * DEN_H * ATT_D,
                            rd, rd, rd, rd, rd, rd, rd, rd, rd, cy, cy, pbf};
    size_t at = 0;
    for (size_t op = 0; op < sizeof sizes / sizeof sizes[0]; op++) {
        int finite = 1, nonzero = 0;
        const int is_pack = op + 1 == sizeof sizes / sizeof sizes[0]; /* raw bits, not floats */
        for (size_t i = 0; i < sizes[op] && !is_pack; i++) {
            finite &= isfinite(res[0][at + i]) != 0;
            nonzero |= res[0][at + i] != 0.0f;
        }
        CHECK_MSG(is_pack || (finite && nonzero), "%s: 1 thread gave a non-finite or zero result",
                  op_names[op]);
        for (int c = 1; c < N_COUNTS; c++)
            CHECK_MSG(memcmp(res[0] + at, res[c] + at, sizes[op] * sizeof(float)) == 0,
                      "%s: %d threads differ from 1 thread", op_names[op], thread_counts[c]);
        at += sizes[op];
    }
    CHECK(at == total);
    fprintf(stderr, "%zu ops, bitwise equal on 1, 2 and 3 threads where no failure is shown\n",
            sizeof sizes / sizeof sizes[0]);
    TEST_MAIN_END();
}
