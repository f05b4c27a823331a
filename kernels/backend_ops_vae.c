/* backend_ops_vae.c — the op cases of the kernel table's VAE section (see backend_ops.h):
 * convolutions, GroupNorm (+ SiLU), nearest 2x upsampling, transpose. Images are NHWC.
 *
 * Input layouts (host floats, in this order; parts: a = activation, p = fp32 parameter,
 * h = host only) and outputs, per case:
 *   conv2d-3x3      x a (rows+2, W, Cin): the halo row above, the rows, the halo row below |
 *                   w h (Cout, Cin, 3, 3) PyTorch's layout | b p (Cout) -> y a (rows, W, Cout)
 *   conv2d-1x1      x a (rows, W, Cin) | w h (Cout, Cin) | b p (Cout)   -> y a (rows, W, Cout)
 *   group_norm      x a (pixels, C) | gamma p (C) | beta p (C), G groups -> y a (pixels, C),
 *                   eps 1e-6, the moments through group_moments (host doubles) as lib/vae does
 *   group_norm-silu the same, SiLU fused into group_norm_apply
 *   upsample2x      x a (rows, W, C)                                    -> y a (2 rows, 2 W, C)
 *   transpose       x a (rows, cols)                                    -> y a (cols, rows)
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend_ops.h"

#define VAE_OPS_WHERE "backend ops (vae)"
#define F 4.0          /* bytes per float */
#define GN_EPS 1e-6    /* the VAE's GroupNorm eps */
#define CONV3 3

/* ------------------------------------------------------------------ convolutions */

typedef struct conv_ctx {
    float *packed; /* backend memory */
    void *ws;      /* backend memory, or NULL */
} conv_ctx;

static void conv_layout(const int *d, int K, backend_op_parts *in, backend_op_parts *out)
{
    const size_t rows = (size_t)d[0], W = (size_t)d[1], Cin = (size_t)d[2], Cout = (size_t)d[3];
    const size_t halo = K == CONV3 ? 1 : 0;
    in->count[0] = (rows + 2 * halo) * W * Cin;
    in->kind[0] = BACKEND_OP_ACT;
    in->count[1] = Cout * Cin * (size_t)K * K;
    in->kind[1] = BACKEND_OP_HOST;
    in->count[2] = Cout;
    in->kind[2] = BACKEND_OP_F32;
    in->n = 3;
    out->count[0] = rows * W * Cout;
    out->kind[0] = BACKEND_OP_ACT;
    out->from[0] = -1;
    out->n = 1;
}
static void conv3_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    conv_layout(d, CONV3, in, out);
}
static void conv1_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    conv_layout(d, 1, in, out);
}

static cpdit_status conv_setup(const cpdit_backend *be, const int *d, const float *host_in,
                               int K, void **ctx, cpdit_error *err)
{
    const int rows = d[0], W = d[1], Cin = d[2], Cout = d[3];
    const size_t x_floats = (size_t)(rows + (K == CONV3 ? 2 : 0)) * W * Cin;
    conv_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, VAE_OPS_WHERE, "out of memory");
    c->packed = be->conv2d_pack(host_in + x_floats, Cout, Cin, K);
    const size_t ws = be->conv2d_workspace_bytes(W, Cin, K);
    c->ws = ws ? be->alloc(ws) : NULL;
    if (!c->packed || (ws && !c->ws)) {
        be->free(c->packed);
        be->free(c->ws);
        free(c);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, VAE_OPS_WHERE,
                               "out of backend memory for packed convolution weights");
    }
    *ctx = c;
    return CPDIT_OK;
}
static cpdit_status conv3_setup(const cpdit_backend *be, const int *d, const float *host_in,
                                void **ctx, cpdit_error *err)
{
    return conv_setup(be, d, host_in, CONV3, ctx, err);
}
static cpdit_status conv1_setup(const cpdit_backend *be, const int *d, const float *host_in,
                                void **ctx, cpdit_error *err)
{
    return conv_setup(be, d, host_in, 1, ctx, err);
}
static void conv_teardown(const cpdit_backend *be, void *ctx)
{
    conv_ctx *c = ctx;
    be->free(c->packed);
    be->free(c->ws);
    free(c);
}

static cpdit_status conv_run(const cpdit_backend *be, int K, void *ctx, const int *d,
                             const backend_op_io *io, cpdit_error *err)
{
    const conv_ctx *c = ctx;
    const int rows = d[0], W = d[1], Cin = d[2], Cout = d[3];
    const ptrdiff_t halo = K == CONV3 ? 1 : 0;
    const cpdit_buf *x0 = cpdit_buf_at(be, io->act_in[0], halo * W * Cin); /* band's row 0 */
    return be->conv2d(io->act_out[0], x0, c->packed, io->f32_in[2], W, Cin, Cout, K, 0, rows,
                      c->ws, err);
}
static cpdit_status conv3_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                              void *ctx, const int *d, const backend_op_io *io,
                              cpdit_error *err)
{
    (void)k;
    return conv_run(be, CONV3, ctx, d, io, err);
}
static cpdit_status conv1_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                              void *ctx, const int *d, const backend_op_io *io,
                              cpdit_error *err)
{
    (void)k;
    return conv_run(be, 1, ctx, d, io, err);
}
static double conv3_flops(const int *d)
{
    return 2.0 * d[0] * d[1] * d[2] * d[3] * CONV3 * CONV3;
}
static double conv1_flops(const int *d)
{
    return 2.0 * d[0] * d[1] * d[2] * d[3];
}
static double conv3_bytes(const int *d)
{
    return F * ((double)(d[0] + 2) * d[1] * d[2] + (double)d[3] * d[2] * CONV3 * CONV3 + d[3] +
                (double)d[0] * d[1] * d[3]);
}
static double conv1_bytes(const int *d)
{
    return F * ((double)d[0] * d[1] * d[2] + (double)d[3] * d[2] + d[3] +
                (double)d[0] * d[1] * d[3]);
}

/* ------------------------------------------------------------------ GroupNorm */

static void gn_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    in->count[0] = (size_t)d[0] * d[1];
    in->kind[0] = BACKEND_OP_ACT;
    in->count[1] = in->count[2] = (size_t)d[1];
    in->kind[1] = in->kind[2] = BACKEND_OP_F32;
    in->n = 3;
    out->count[0] = (size_t)d[0] * d[1];
    out->kind[0] = BACKEND_OP_ACT;
    out->from[0] = -1;
    out->n = 1;
}

/* Moments as lib/vae computes them: sums, mean, squared deviations, rstd (host doubles). */
static cpdit_status gn_run_act(const cpdit_backend *be, const int *d, const backend_op_io *io,
                               cpdit_activation act, cpdit_error *err)
{
    const size_t P = (size_t)d[0];
    const int C = d[1], G = d[2];
    double *mom = calloc(3 * (size_t)G, sizeof *mom);
    if (!mom)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, VAE_OPS_WHERE, "out of memory");
    double *mean = mom, *dev = mom + G, *rstd = mom + 2 * G;
    const double count = (double)P * (C / G);
    const cpdit_buf *x = io->act_in[0];
    be->group_moments(mean, x, P, C, G, NULL);
    for (int g = 0; g < G; g++)
        mean[g] /= count;
    be->group_moments(dev, x, P, C, G, mean);
    for (int g = 0; g < G; g++)
        rstd[g] = 1.0 / sqrt(dev[g] / count + GN_EPS);
    be->group_norm_apply(io->act_out[0], x, P, C, G, mean, rstd, io->f32_in[1], io->f32_in[2],
                         act);
    free(mom);
    return CPDIT_OK;
}
static cpdit_status gn_run(const cpdit_backend *be, const cpdit_attention_kernel *k, void *ctx,
                           const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k;
    (void)ctx;
    return gn_run_act(be, d, io, CPDIT_ACT_NONE, err);
}
static cpdit_status gn_silu_run(const cpdit_backend *be, const cpdit_attention_kernel *k,
                                void *ctx, const int *d, const backend_op_io *io,
                                cpdit_error *err)
{
    (void)k;
    (void)ctx;
    return gn_run_act(be, d, io, CPDIT_ACT_SILU, err);
}
static double gn_flops(const int *d)
{
    return 8.0 * d[0] * d[1]; /* two moment passes, normalise, affine */
}
static double gn_bytes(const int *d)
{
    return F * 4.0 * d[0] * d[1]; /* x read three times, y written */
}

/* ------------------------------------------------------------------ upsample, transpose */

/* one activation in (n values), one out (m values) */
static void act1_layout(size_t n, size_t m, backend_op_parts *in, backend_op_parts *out)
{
    in->count[0] = n;
    in->kind[0] = BACKEND_OP_ACT;
    in->n = 1;
    out->count[0] = m;
    out->kind[0] = BACKEND_OP_ACT;
    out->from[0] = -1;
    out->n = 1;
}
static void up_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    const size_t n = (size_t)d[0] * d[1] * d[2];
    act1_layout(n, 4 * n, in, out);
}
static cpdit_status up_run(const cpdit_backend *be, const cpdit_attention_kernel *k, void *ctx,
                           const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k;
    (void)ctx;
    (void)err;
    be->upsample2x(io->act_out[0], io->act_in[0], d[0], d[1], d[2]);
    return CPDIT_OK;
}
static double zero_flops(const int *d)
{
    (void)d;
    return 0.0;
}
static double up_bytes(const int *d)
{
    return F * 5.0 * d[0] * d[1] * d[2];
}

static void tr_layout(const int *d, backend_op_parts *in, backend_op_parts *out)
{
    act1_layout((size_t)d[0] * d[1], (size_t)d[0] * d[1], in, out);
}
static cpdit_status tr_run(const cpdit_backend *be, const cpdit_attention_kernel *k, void *ctx,
                           const int *d, const backend_op_io *io, cpdit_error *err)
{
    (void)k;
    (void)ctx;
    (void)err;
    be->transpose(io->act_out[0], io->act_in[0], (size_t)d[0], (size_t)d[1]);
    return CPDIT_OK;
}
static double tr_bytes(const int *d)
{
    return F * 2.0 * d[0] * d[1];
}

/* ------------------------------------------------------------------ the cases */

#define S(...) {{__VA_ARGS__}}
#define CASE(nm, dm, tl, ...) .name = nm, .dims = dm, .tol = tl, __VA_ARGS__
#define SHAPES(n, ...) .nshapes = n, .shapes = {__VA_ARGS__}
#define GN_SHAPES SHAPES(5, S(1, 1, 1), S(3, 4, 2), S(17, 12, 3), S(257, 64, 32), S(4096, 128, 32))

static const backend_op_case vae_cases[] = {
    {CASE("conv2d-3x3", "rows W Cin Cout", 1e-5, .layout = conv3_layout, .setup = conv3_setup,
          .teardown = conv_teardown, .run = conv3_run, .flops = conv3_flops,
          .bytes = conv3_bytes),
     SHAPES(6, S(1, 1, 1, 1), S(1, 3, 2, 5), S(3, 7, 5, 3), S(5, 17, 13, 8), S(2, 31, 32, 64),
            S(16, 128, 64, 128))},
    {CASE("conv2d-1x1", "rows W Cin Cout", 1e-5, .layout = conv1_layout, .setup = conv1_setup,
          .teardown = conv_teardown, .run = conv1_run, .flops = conv1_flops,
          .bytes = conv1_bytes),
     SHAPES(4, S(1, 1, 1, 1), S(3, 7, 5, 3), S(7, 13, 17, 11), S(16, 128, 128, 64))},
    {CASE("group_norm", "pixels C G", 1e-5, .layout = gn_layout, .run = gn_run,
          .flops = gn_flops, .bytes = gn_bytes),
     GN_SHAPES},
    {CASE("group_norm-silu", "pixels C G", 1e-5, .layout = gn_layout, .run = gn_silu_run,
          .flops = gn_flops, .bytes = gn_bytes),
     GN_SHAPES},
    {CASE("upsample2x", "rows W C", 0.0, .layout = up_layout, .run = up_run,
          .flops = zero_flops, .bytes = up_bytes),
     SHAPES(4, S(1, 1, 1), S(2, 3, 5), S(7, 13, 4), S(64, 128, 128))},
    {CASE("transpose", "rows cols", 0.0, .layout = tr_layout, .run = tr_run, .flops = zero_flops,
          .bytes = tr_bytes),
     SHAPES(5, S(1, 1), S(1, 7), S(5, 3), S(37, 129), S(512, 4096))},
};
#undef S

const backend_op_case *backend_ops_vae_cases(size_t *n)
{
    *n = sizeof vae_cases / sizeof vae_cases[0];
    return vae_cases;
}
