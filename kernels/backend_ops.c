/* backend_ops.c — the op cases of the kernel table (see backend_ops.h); running them on a
 * backend and `cpdit bench ops` are backend_ops_run.c.
 *
 * Input layouts (host floats, in this order; parts: a = activation, p = fp32 parameter,
 * h = host only) and outputs, per case:
 *   linear             x a (M,K) | W h (N,K) | b p (N)              -> y a (M,N), W as fp32
 *   linear-bf16        the same, W's values bf16-exact, made a native (bf16) weight
 *   linear-acc-strided x a (M,K+3) | W h (N,K) | y0 a (M,N+2)       -> y0 + x W^T (ldy N+2)
 *   layer_norm         x a (R,C) | gamma p (C) | beta p (C)         -> y a (R,C), eps 1e-6
 *   layer_norm-plain   x a (R,C)                                    -> y a (R,C), no affine
 *   rms_norm           x a (R,C) | weight p (C)                     -> y a (R,C), eps 1e-6
 *   rope               x a (S,H,D) | cos p (S,D) | sin p (S,D)      -> x rotated (a)
 *   act-KIND           x a (n), uniform [-8, 8]                     -> act(x) (a)
 *   add, mul           a a (n) | b a (n)                            -> a + b, a * b (a)
 *   embedding          table p (V,C) | ids h (n, integers as floats) -> y a (n,C)
 *   modulate           x a (R,C) | shift a (C) | scale a (C)        -> x (1 + scale) + shift
 *   gated_residual     h0 a (R,C+1) | x a (R,C+3) | gate a (C)      -> h0 + gate x (ldh C+1)
 *   copy_rows          dst0 a (R,C+1) | src a (R,C+2)               -> dst0 with src's C cols
 *   lse_merge          oa a (R,D) | la p (R) | ob a (R,D) | lb p (R) -> merged oa a | la p
 *   lse_merge_f32      oa p (R,D) | la p (R) | ob a (R,D) | lb p (R) -> merged oa p | la p
 *                      (tables with an fp32 accumulator only: cpdit_backend_f32_accumulator)
 *   attention          q a (B,Sq,H,D) | k, v a (B,Skv,H,D)          -> out a | lse p (B,Sq,H)
 *   attention-causal   qkv a (B,S,3,H,D) fused (CLIP's layout)      -> out a (B,S,H,D) | lse p
 *   attention-bias     q | k | v as attention | bias p (H,Sq,Skv)   -> out a | lse p
 * Outputs that an op updates in place (rope, linear-acc-strided, gated_residual, copy_rows,
 * lse_merge, lse_merge_f32) start from the input part named first.
 * The lse_merge inputs include empty parts (lse -inf) in rows 0 and 1 when there are rows.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend_ops.h"

#define OPS_WHERE "backend ops"
#define NORM_EPS 1e-6f
#define ACT_RANGE 8.0f  /* activations are checked on [-ACT_RANGE, ACT_RANGE] */
#define BIAS_RANGE 2.0f /* attention bias values */
#define LSE_RANGE 5.0f  /* lse_merge log-sum-exps */
#define F 4.0           /* bytes per float */

/* ------------------------------------------------------------------ helpers */

void backend_op_fill_uniform(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

static size_t prod(const int *d, int n)
{
    size_t p = 1;
    for (int i = 0; i < n; i++)
        p *= (size_t)d[i];
    return p;
}

/* Append a part of count values of kind to p, starting from input part `from` (or -1). */
static void part_from(backend_op_parts *p, size_t count, backend_op_kind kind, int from)
{
    p->count[p->n] = count;
    p->kind[p->n] = kind;
    p->from[p->n] = from;
    p->n++;
}
static void part(backend_op_parts *p, size_t count, backend_op_kind kind)
{
    part_from(p, count, kind, -1);
}
#define ACT BACKEND_OP_ACT
#define P32 BACKEND_OP_F32
#define HOST BACKEND_OP_HOST

void backend_op_layout(const backend_op_case *c, const int *d, backend_op_parts *in,
                       backend_op_parts *out)
{
    memset(in, 0, sizeof *in);
    memset(out, 0, sizeof *out);
    for (int i = 0; i < BACKEND_OP_MAX_PARTS; i++)
        out->from[i] = -1;
    c->layout(d, in, out);
}

void backend_op_sizes(const backend_op_case *c, const int *d, size_t *n_in, size_t *n_out)
{
    backend_op_parts in, out;
    backend_op_layout(c, d, &in, &out);
    *n_in = *n_out = 0;
    for (int i = 0; i < in.n; i++)
        *n_in += in.count[i];
    for (int i = 0; i < out.n; i++)
        *n_out += out.count[i];
}

/* ------------------------------------------------------------------ linear */

static void linear_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    part(in, (size_t)d[0] * d[1], ACT);
    part(in, (size_t)d[2] * d[1], HOST);
    part(in, (size_t)d[2], P32);
    part(out, (size_t)d[0] * d[2], ACT);
}
/* The weight W (N, K) of a linear case, made by the backend from host data: fp32 (the
 * reference form) or, for linear-bf16, the values given as bf16 (the fill rounds them so that
 * they are exact in bf16) in the backend's native form. */
static cpdit_status weight_setup(const cpdit_backend *be, const int *d, size_t w_off,
                                 const float *host_in, int bf16, void **ctx, cpdit_error *err)
{
    const int K = d[1], N = d[2];
    const float *w = host_in + w_off;
    uint16_t *wb = NULL;
    if (bf16) {
        if (!(wb = malloc(((size_t)N * K + 1) * sizeof *wb)))
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, OPS_WHERE, "out of memory");
        for (size_t i = 0; i < (size_t)N * K; i++) {
            uint32_t bits;
            memcpy(&bits, &w[i], sizeof bits);
            wb[i] = (uint16_t)(bits >> 16); /* exact: the fill made the low half zero */
        }
    }
    cpdit_weight_desc desc = {.dtype = bf16 ? CPDIT_DTYPE_BF16 : CPDIT_DTYPE_F32, .rows = N,
                              .cols = K, .data = bf16 ? (const void *)wb : (const void *)w,
                              .format = bf16 ? CPDIT_WEIGHT_NATIVE : CPDIT_WEIGHT_F32};
    cpdit_status st = be->weight_create((cpdit_weight **)ctx, &desc, err);
    free(wb);
    return st;
}
static void weight_teardown(const cpdit_backend *be, void *ctx)
{
    be->weight_free(ctx);
}
static cpdit_status linear_setup(const cpdit_backend *be, const int *d, const float *host_in,
                                 void **ctx, cpdit_error *err)
{
    return weight_setup(be, d, (size_t)d[0] * d[1], host_in, 0, ctx, err);
}
static cpdit_status linear_bf16_setup(const cpdit_backend *be, const int *d,
                                      const float *host_in, void **ctx, cpdit_error *err)
{
    return weight_setup(be, d, (size_t)d[0] * d[1], host_in, 1, ctx, err);
}
/* W's values rounded to bf16 (round to nearest even), so that bf16 holds them exactly. */
static void linear_bf16_fill(const int *d, float *in, size_t n, uint64_t seed)
{
    backend_op_fill_uniform(in, n, seed);
    float *w = in + (size_t)d[0] * d[1];
    for (size_t i = 0; i < (size_t)d[2] * d[1]; i++) {
        uint32_t bits;
        memcpy(&bits, &w[i], sizeof bits);
        bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
        memcpy(&w[i], &bits, sizeof bits);
    }
}
static cpdit_status linear_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                               void *ctx, const int *d, const backend_op_io *io,
                               cpdit_error *err)
{
    (void)k;
    const int M = d[0], K = d[1], N = d[2];
    return be->linear(io->act_out[0], N, io->act_in[0], K, ctx, io->f32_in[2], M, K, N, 0,
                      err);
}
/* linear then gelu-tanh in one table call (cpdit_linear_act: fused where the backend can) */
static cpdit_status linear_act_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                                   void *ctx, const int *d, const backend_op_io *io,
                                   cpdit_error *err)
{
    (void)k;
    const int M = d[0], K = d[1], N = d[2];
    return cpdit_linear_act(be, io->act_out[0], N, io->act_in[0], K, ctx, io->f32_in[2], M, K,
                            N, CPDIT_ACT_GELU_TANH, err);
}
static double linear_flops(const int *d)
{
    return 2.0 * d[0] * d[1] * d[2];
}
static double linear_bytes(const int *d)
{
    return F * ((double)d[0] * d[1] + (double)d[2] * d[1] + d[2] + (double)d[0] * d[2]);
}

static void linacc_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    part(in, (size_t)d[0] * (d[1] + 3), ACT);
    part(in, (size_t)d[2] * d[1], HOST);
    part(in, (size_t)d[0] * (d[2] + 2), ACT);
    part_from(out, (size_t)d[0] * (d[2] + 2), ACT, 2);
}
static cpdit_status linacc_setup(const cpdit_backend *be, const int *d, const float *host_in,
                                 void **ctx, cpdit_error *err)
{
    return weight_setup(be, d, (size_t)d[0] * (d[1] + 3), host_in, 0, ctx, err);
}
static cpdit_status linacc_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                               void *ctx, const int *d, const backend_op_io *io,
                               cpdit_error *err)
{
    (void)k;
    const int M = d[0], K = d[1], N = d[2];
    return be->linear(io->act_out[0], N + 2, io->act_in[0], K + 3, ctx, NULL, M, K, N, 1, err);
}

/* ------------------------------------------------------------------ norms */

/* x a (R,C) | nvec vectors (C) of kind vec -> y a (R,C) */
static void rows_layout(const int *d, int nvec, backend_op_kind vec, backend_op_parts *in,
                        backend_op_parts *out)
{
    part(in, (size_t)d[0] * d[1], ACT);
    for (int i = 0; i < nvec; i++)
        part(in, (size_t)d[1], vec);
    part(out, (size_t)d[0] * d[1], ACT);
}
static void rows3_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    rows_layout(d, 2, P32, in, out); /* gamma, beta */
}
static void rows2_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    rows_layout(d, 1, P32, in, out); /* weight */
}
static void rows1_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    rows_layout(d, 0, P32, in, out);
}
static void rows3_act_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    rows_layout(d, 2, ACT, in, out); /* modulate's shift, scale */
}
static cpdit_status ln_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                           void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    be->layer_norm(io->act_out[0], io->act_in[0], io->f32_in[1], io->f32_in[2], (size_t)d[0],
                   d[1], NORM_EPS);
    return CPDIT_OK;
}
static cpdit_status ln_plain_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                                 void *ctx, const int *d, const backend_op_io *io,
                                 cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    be->layer_norm(io->act_out[0], io->act_in[0], NULL, NULL, (size_t)d[0], d[1], NORM_EPS);
    return CPDIT_OK;
}
static cpdit_status rms_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                            void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    be->rms_norm(io->act_out[0], io->act_in[0], io->f32_in[1], (size_t)d[0], d[1], NORM_EPS);
    return CPDIT_OK;
}
static double rows_flops(const int *d) /* a few operations per element */
{
    return 5.0 * d[0] * d[1];
}
static double rows_bytes(const int *d)
{
    return F * (2.0 * d[0] * d[1] + 2.0 * d[1]);
}

/* ------------------------------------------------------------------ rope */

static void rope_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    part(in, prod(d, 3), ACT);
    part(in, (size_t)d[0] * d[2], P32);
    part(in, (size_t)d[0] * d[2], P32);
    part_from(out, prod(d, 3), ACT, 0);
}
static cpdit_status rope_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                             void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    be->rope(io->act_out[0], io->f32_in[1], io->f32_in[2], d[0], d[1], d[2]);
    return CPDIT_OK;
}
static double rope_flops(const int *d)
{
    return 3.0 * prod(d, 3);
}
static double rope_bytes(const int *d)
{
    return F * (2.0 * prod(d, 3) + 2.0 * d[0] * d[2]);
}

/* ------------------------------------------------------------------ elementwise */

static void n1_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    part(in, (size_t)d[0], ACT);
    part(out, (size_t)d[0], ACT);
}
static void n2_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    part(in, (size_t)d[0], ACT);
    part(in, (size_t)d[0], ACT);
    part(out, (size_t)d[0], ACT);
}
static void act_fill(const int *d, float *in, size_t n, uint64_t seed)
{
    (void)d;
    backend_op_fill_uniform(in, n, seed);
    for (size_t i = 0; i < n; i++)
        in[i] *= ACT_RANGE;
}
#define ACT_RUN(fn, kind)                                                                    \
    static cpdit_status fn(const cpdit_backend *be, const cpdit_attention_kernel *k,         \
                           void *ctx, const int *d, const backend_op_io *io,                 \
                           cpdit_error *err)                                                 \
    {                                                                                        \
        (void)k, (void)ctx, (void)err;                                                       \
        be->act(kind, io->act_out[0], io->act_in[0], (size_t)d[0]);                          \
        return CPDIT_OK;                                                                     \
    }
ACT_RUN(act_gelu_tanh_run, CPDIT_ACT_GELU_TANH)
ACT_RUN(act_gelu_erf_run, CPDIT_ACT_GELU_ERF)
ACT_RUN(act_quick_gelu_run, CPDIT_ACT_QUICK_GELU)
ACT_RUN(act_silu_run, CPDIT_ACT_SILU)
ACT_RUN(act_relu_run, CPDIT_ACT_RELU)
static double n_flops(const int *d)
{
    return (double)d[0];
}
static double act_flops(const int *d) /* an exp and a division, counted as 10 */
{
    return 10.0 * d[0];
}
static double n1_bytes(const int *d)
{
    return F * 2.0 * d[0];
}
static double n2_bytes(const int *d)
{
    return F * 3.0 * d[0];
}
static cpdit_status add_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                            void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    be->add(io->act_out[0], io->act_in[0], io->act_in[1], (size_t)d[0]);
    return CPDIT_OK;
}
static cpdit_status mul_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                            void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    be->mul(io->act_out[0], io->act_in[0], io->act_in[1], (size_t)d[0]);
    return CPDIT_OK;
}

/* embedding: d = V C n */
static void emb_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    part(in, (size_t)d[0] * d[1], P32);
    part(in, (size_t)d[2], HOST);
    part(out, (size_t)d[2] * d[1], ACT);
}
static void emb_fill(const int *d, float *in, size_t n, uint64_t seed)
{
    backend_op_fill_uniform(in, n, seed);
    float *ids = in + (size_t)d[0] * d[1];
    for (int i = 0; i < d[2]; i++) /* ids spread over the table, last row included */
        ids[i] = (float)(i == d[2] - 1 ? d[0] - 1 : (int)((ids[i] + 1.0f) * 0.5f * d[0]) % d[0]);
}
static cpdit_status emb_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                            void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k, (void)ctx;
    const int C = d[1], n = d[2];
    int32_t *ids = malloc(((size_t)n + 1) * sizeof(int32_t));
    if (!ids)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, OPS_WHERE, "out of memory");
    for (int i = 0; i < n; i++) /* ids are host data */
        ids[i] = (int32_t)io->host_in[1][i];
    be->embedding(io->act_out[0], io->f32_in[0], ids, (size_t)n, C);
    free(ids);
    return CPDIT_OK;
}
static double emb_bytes(const int *d)
{
    return F * 2.0 * d[2] * d[1];
}
static double zero_flops(const int *d)
{
    (void)d;
    return 0.0;
}

static cpdit_status modulate_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                                 void *ctx, const int *d, const backend_op_io *io,
                                 cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    be->modulate(io->act_out[0], io->act_in[0], io->act_in[1], io->act_in[2], (size_t)d[0],
                 d[1]);
    return CPDIT_OK;
}

static void gres_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    part(in, (size_t)d[0] * (d[1] + 1), ACT);
    part(in, (size_t)d[0] * (d[1] + 3), ACT);
    part(in, (size_t)d[1], ACT);
    part_from(out, (size_t)d[0] * (d[1] + 1), ACT, 0);
}
static cpdit_status gres_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                             void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    const int R = d[0], C = d[1];
    be->gated_residual(io->act_out[0], C + 1, io->act_in[1], C + 3, io->act_in[2], (size_t)R,
                       C);
    return CPDIT_OK;
}
static double gres_bytes(const int *d)
{
    return F * 3.0 * d[0] * d[1];
}

static void copy_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    part(in, (size_t)d[0] * (d[1] + 1), ACT);
    part(in, (size_t)d[0] * (d[1] + 2), ACT);
    part_from(out, (size_t)d[0] * (d[1] + 1), ACT, 0);
}
static cpdit_status copy_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                             void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    const int R = d[0], C = d[1];
    be->copy_rows(io->act_out[0], C + 1, io->act_in[1], C + 2, (size_t)R, C);
    return CPDIT_OK;
}
static double copy_bytes(const int *d)
{
    return F * 2.0 * d[0] * d[1];
}

/* ------------------------------------------------------------------ lse merge: d = R D */

static void merge_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    const size_t R = (size_t)d[0], D = (size_t)d[1];
    part(in, R * D, ACT);
    part(in, R, P32);
    part(in, R * D, ACT);
    part(in, R, P32);
    part_from(out, R * D, ACT, 0);
    part_from(out, R, P32, 1);
}
static void merge_fill(const int *d, float *in, size_t n, uint64_t seed)
{
    const size_t R = (size_t)d[0], D = (size_t)d[1];
    backend_op_fill_uniform(in, n, seed);
    float *la = in + R * D, *lb = la + R + R * D;
    for (size_t r = 0; r < R; r++) {
        la[r] *= LSE_RANGE;
        lb[r] *= LSE_RANGE;
    }
    if (R > 1) {
        lb[0] = -INFINITY; /* an empty part b: a unchanged */
        la[1] = -INFINITY; /* an empty part a: b copied */
    }
}
static cpdit_status merge_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                              void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    be->lse_merge(io->act_out[0], io->f32_out[1], io->act_in[2], io->f32_in[3], (size_t)d[0],
                  d[1]);
    return CPDIT_OK;
}
/* lse_merge_f32: the running output oa is fp32 (parameter memory), ob an activation block. */
static void merge_f32_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    const size_t R = (size_t)d[0], D = (size_t)d[1];
    part(in, R * D, P32);
    part(in, R, P32);
    part(in, R * D, ACT);
    part(in, R, P32);
    part_from(out, R * D, P32, 0);
    part_from(out, R, P32, 1);
}
static cpdit_status merge_f32_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                                  void *ctx, const int *d, const backend_op_io *io,
                                  cpdit_error *err)
{
    (void)k, (void)ctx, (void)err;
    be->lse_merge_f32(io->f32_out[0], io->f32_out[1], io->act_in[2], io->f32_in[3],
                      (size_t)d[0], d[1]);
    return CPDIT_OK;
}
static int merge_f32_supported(const cpdit_backend *be)
{
    return cpdit_backend_f32_accumulator(be);
}
static double merge_flops(const int *d)
{
    return 3.0 * d[0] * d[1];
}
static double merge_bytes(const int *d)
{
    return F * 3.0 * d[0] * (d[1] + 1);
}

/* ------------------------------------------------------------------ attention: B Sq Skv H D */

static void attn_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    const size_t B = (size_t)d[0], Sq = (size_t)d[1], Skv = (size_t)d[2], H = (size_t)d[3],
                 D = (size_t)d[4];
    part(in, B * Sq * H * D, ACT);
    part(in, B * Skv * H * D, ACT);
    part(in, B * Skv * H * D, ACT);
    part(out, B * Sq * H * D, ACT);
    part(out, B * Sq * H, P32);
}
static cpdit_status attn_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                             void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)be, (void)ctx;
    const cpdit_attention_args a = {.B = d[0], .Sq = d[1], .Skv = d[2], .H = d[3], .D = d[4],
                                    .scale = 1.0f / sqrtf((float)d[4])};
    return k->forward(io->act_out[0], io->f32_out[1], io->act_in[0], io->act_in[1],
                      io->act_in[2], &a, err);
}
static double attn_flops(const int *d)
{
    return 4.0 * d[0] * (double)d[1] * d[2] * d[3] * d[4];
}
static double attn_bytes(const int *d)
{
    return F * ((double)d[0] * d[3] * d[4] * (2.0 * d[1] + 2.0 * d[2]) + (double)d[0] * d[1] * d[3]);
}

/* causal, fused qkv: d = B S H D */
static void causal_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    const size_t n = prod(d, 4);
    part(in, 3 * n, ACT);
    part(out, n, ACT);
    part(out, (size_t)d[0] * d[1] * d[2], P32);
}
static cpdit_status causal_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                               void *ctx, const int *d, const backend_op_io *io,
                               cpdit_error *err)
{
    (void)ctx;
    const int row = d[2] * d[3];
    const cpdit_attention_args a = {.B = d[0], .Sq = d[1], .Skv = d[1], .H = d[2], .D = d[3],
                                    .ld_q = 3 * row, .ld_kv = 3 * row, .ld_out = row,
                                    .scale = 1.0f / sqrtf((float)d[3]), .causal = 1};
    const cpdit_buf *qkv = io->act_in[0];
    return k->forward(io->act_out[0], io->f32_out[1], qkv, cpdit_buf_at(be, qkv, row),
                      cpdit_buf_at(be, qkv, 2 * row), &a, err);
}
static double causal_flops(const int *d)
{
    return 2.0 * d[0] * (double)d[1] * d[1] * d[2] * d[3];
}
static double causal_bytes(const int *d)
{
    return F * (4.0 * prod(d, 4) + (double)d[0] * d[1] * d[2]);
}

/* additive bias (H, Sq, Skv): d = B Sq Skv H D */
static void bias_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    attn_layout(d, in, out);
    part(in, (size_t)d[3] * d[1] * d[2], P32);
}
static void bias_fill(const int *d, float *in, size_t n, uint64_t seed)
{
    const size_t nb = (size_t)d[3] * d[1] * d[2];
    backend_op_fill_uniform(in, n, seed);
    for (size_t i = n - nb; i < n; i++)
        in[i] *= BIAS_RANGE;
}
static cpdit_status bias_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                             void *ctx, const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)be, (void)ctx;
    const cpdit_attention_args a = {.B = d[0], .Sq = d[1], .Skv = d[2], .H = d[3], .D = d[4],
                                    .scale = 1.0f / sqrtf((float)d[4]), .bias = io->f32_in[3]};
    return k->forward(io->act_out[0], io->f32_out[1], io->act_in[0], io->act_in[1],
                      io->act_in[2], &a, err);
}

/* ------------------------------------------------------------------ the table */

#define S(...) {{__VA_ARGS__}}
/* Shapes: 1, odd sizes, primes, a vector-lane multiple plus a tail, and a large one (last). */

/* One case: name, dims, shape grid, tolerance, then its functions. */
#define CASE(nm, dm, tl, ...) .name = nm, .dims = dm, .tol = tl, __VA_ARGS__
#define SHAPES(n, ...) .nshapes = n, .shapes = {__VA_ARGS__}
#define N_SHAPES SHAPES(6, S(1), S(7), S(31), S(257), S(4099), S(1 << 20))
#define RC_SHAPES SHAPES(6, S(1, 1), S(1, 17), S(3, 5), S(13, 64), S(37, 3072), S(4096, 768))
#define LINEAR_FNS .layout = linear_layout, .run = linear_run, .flops = linear_flops, \
                   .bytes = linear_bytes, .teardown = weight_teardown
#define ACT_FNS(r) .layout = n1_layout, .fill = act_fill, .run = r, .flops = act_flops, \
                   .bytes = n1_bytes
#define ROWS_FNS(sz, r) .layout = sz, .run = r, .flops = rows_flops, .bytes = rows_bytes

static const backend_op_case cases[] = {
    {CASE("linear", "M K N", 1e-5, LINEAR_FNS, .setup = linear_setup),
     SHAPES(6, S(1, 1, 1), S(3, 5, 7), S(17, 31, 13), S(64, 257, 129), S(1, 3072, 768),
            S(512, 1024, 768))},
    {CASE("linear-bf16", "M K N", 5e-3, LINEAR_FNS, .setup = linear_bf16_setup,
          .fill = linear_bf16_fill),
     SHAPES(5, S(1, 1, 1), S(3, 5, 7), S(17, 33, 13), S(64, 257, 129), S(512, 1024, 768))},
    {CASE("linear-act-gelu-tanh", "M K N", 5e-3, .layout = linear_layout, .run = linear_act_run,
          .flops = linear_flops, .bytes = linear_bytes, .setup = linear_bf16_setup,
          .teardown = weight_teardown, .fill = linear_bf16_fill),
     SHAPES(5, S(1, 1, 1), S(3, 5, 7), S(17, 33, 13), S(64, 257, 129), S(512, 1024, 768))},
    {CASE("linear-acc-strided", "M K N", 1e-5, .layout = linacc_layout, .setup = linacc_setup,
          .teardown = weight_teardown, .run = linacc_run, .flops = linear_flops,
          .bytes = linear_bytes),
     SHAPES(4, S(1, 1, 1), S(5, 3, 7), S(19, 67, 41), S(256, 512, 384))},
    {CASE("layer_norm", "rows cols", 1e-5, ROWS_FNS(rows3_layout, ln_run)), RC_SHAPES},
    {CASE("layer_norm-plain", "rows cols", 1e-5, ROWS_FNS(rows1_layout, ln_plain_run)),
     RC_SHAPES},
    {CASE("rms_norm", "rows cols", 1e-5, ROWS_FNS(rows2_layout, rms_run)), RC_SHAPES},
    {CASE("rope", "S H D", 1e-5, .layout = rope_layout, .run = rope_run, .flops = rope_flops,
          .bytes = rope_bytes),
     SHAPES(5, S(1, 1, 2), S(3, 5, 6), S(17, 3, 32), S(61, 7, 128), S(4096, 24, 128))},
    {CASE("act-gelu-tanh", "n", 1e-5, ACT_FNS(act_gelu_tanh_run)), N_SHAPES},
    {CASE("act-gelu-erf", "n", 1e-5, ACT_FNS(act_gelu_erf_run)), N_SHAPES},
    {CASE("act-quick-gelu", "n", 1e-5, ACT_FNS(act_quick_gelu_run)), N_SHAPES},
    {CASE("act-silu", "n", 1e-5, ACT_FNS(act_silu_run)), N_SHAPES},
    {CASE("act-relu", "n", 0.0, .layout = n1_layout, .fill = act_fill, .run = act_relu_run,
          .flops = n_flops, .bytes = n1_bytes),
     N_SHAPES},
    {CASE("add", "n", 1e-7, .layout = n2_layout, .run = add_run, .flops = n_flops,
          .bytes = n2_bytes),
     N_SHAPES},
    {CASE("mul", "n", 1e-7, .layout = n2_layout, .run = mul_run, .flops = n_flops,
          .bytes = n2_bytes),
     N_SHAPES},
    {CASE("embedding", "vocab cols n", 0.0, .layout = emb_layout, .fill = emb_fill,
          .run = emb_run, .flops = zero_flops, .bytes = emb_bytes),
     SHAPES(5, S(1, 1, 1), S(7, 5, 3), S(101, 64, 77), S(997, 13, 512), S(32128, 768, 512))},
    {CASE("modulate", "rows cols", 1e-6, ROWS_FNS(rows3_act_layout, modulate_run)), RC_SHAPES},
    {CASE("gated_residual", "rows cols", 1e-6, .layout = gres_layout, .run = gres_run,
          .flops = rows_flops, .bytes = gres_bytes),
     RC_SHAPES},
    {CASE("copy_rows", "rows cols", 0.0, .layout = copy_layout, .run = copy_run,
          .flops = zero_flops, .bytes = copy_bytes),
     RC_SHAPES},
    {CASE("lse_merge", "rows D", 1e-6, .layout = merge_layout, .fill = merge_fill,
          .run = merge_run, .flops = merge_flops, .bytes = merge_bytes),
     SHAPES(5, S(1, 1), S(2, 3), S(7, 17), S(131, 64), S(24576, 128))},
    {CASE("lse_merge_f32", "rows D", 1e-6, .layout = merge_f32_layout, .fill = merge_fill,
          .run = merge_f32_run, .flops = merge_flops, .bytes = merge_bytes,
          .supported = merge_f32_supported, .f32_out = 1),
     SHAPES(5, S(1, 1), S(2, 3), S(7, 17), S(131, 64), S(24576, 128))},
    {CASE("attention", "B Sq Skv H D", 1e-5, .per_kernel = 1, .layout = attn_layout,
          .run = attn_run, .flops = attn_flops, .bytes = attn_bytes),
     SHAPES(7, S(1, 1, 1, 1, 1), S(1, 3, 0, 2, 4), S(2, 7, 13, 3, 5), S(1, 31, 17, 2, 64),
            S(1, 61, 600, 3, 128), S(1, 600, 700, 1, 32), S(1, 1024, 1024, 4, 128))},
    {CASE("attention-causal", "B S H D", 1e-5, .per_kernel = 1, .layout = causal_layout,
          .run = causal_run, .flops = causal_flops, .bytes = causal_bytes),
     SHAPES(5, S(1, 1, 1, 1), S(2, 7, 3, 5), S(1, 77, 12, 64), S(3, 31, 2, 17),
            S(1, 512, 8, 64))},
    {CASE("attention-bias", "B Sq Skv H D", 1e-5, .per_kernel = 1, .layout = bias_layout,
          .fill = bias_fill, .run = bias_run, .flops = attn_flops, .bytes = attn_bytes),
     SHAPES(5, S(1, 1, 1, 1, 1), S(2, 7, 7, 3, 5), S(1, 13, 29, 2, 16), S(2, 77, 77, 4, 64),
            S(1, 512, 512, 8, 64))},
};
#undef S

/* Room for the VAE section's cases (backend_ops_vae.c). */
#define VAE_CASES_MAX 16

const backend_op_case *const *backend_op_cases(void)
{
    static const backend_op_case *list[sizeof cases / sizeof cases[0] + VAE_CASES_MAX + 1];
    if (!list[0]) {
        size_t n = 0, n_vae = 0;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            list[n++] = &cases[i];
        const backend_op_case *vae = backend_ops_vae_cases(&n_vae);
        for (size_t i = 0; i < n_vae && i < VAE_CASES_MAX; i++)
            list[n++] = &vae[i];
        list[n] = NULL;
    }
    return list;
}

const char *backend_op_shape_text(const backend_op_case *c, const int *d, char *buf,
                                  size_t size)
{
    size_t used = 0;
    const char *p = c->dims;
    buf[0] = '\0';
    for (int i = 0; *p && used < size; i++) {
        const size_t len = strcspn(p, " ");
        used += (size_t)snprintf(buf + used, size - used, "%s%.*s %d", i ? " " : "", (int)len,
                                 p, d[i]);
        p += len;
        p += *p == ' ';
    }
    return buf;
}
