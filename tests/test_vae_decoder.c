/* test_vae_decoder.c — the VAE decoder's kernels and plumbing, and (with --reference DIR) the
 * whole decoder against tests/reference/vae_reference.py.
 *
 * Without arguments (no Python needed):
 *   - the backend table's VAE ops (NHWC): conv2d 3x3 / 1x1 (packed weights, partial row ranges,
 *     halo rows, several im2col blocks) vs conv2d_cpu_reference: <= 1e-5 · max|ref|;
 *     group_moments + group_norm_apply (+ SiLU) vs group_norm_cpu: <= 1e-5 absolute;
 *     upsample2x vs upsample_nearest2x_cpu and transpose: exact;
 *   - conv2d_cpu (3x3 and 1x1, with and without bias, several row bands) vs the direct loops:
 *     max |diff| <= 1e-5 · max|ref| (fp32 GEMM vs double accumulation);
 *   - group_norm_cpu (+ SiLU) vs a plain float64 computation: <= 1e-5 absolute;
 *   - nearest 2x upsampling: exact;
 *   - vae_latents_denormalize: z / 0.3611 + 0.1159 rounded twice, bit-exact;
 *   - the parameter table: names, shapes, count for a FLUX-sized config; load errors;
 *   - one set of weights from host memory, fp32 / bf16 / deprecated-name checkpoints: the same
 *     bits in the fp32 format; bf16 native within 2e-2 relative (bf16 convolutions used).
 * (bf16 activation storage: tests/test_vae_bf16.c.)
 * With --reference DIR (DIR/cases.txt, DIR/<case>/{model/, inputs.safetensors,
 * expected.safetensors}): vae_decode on each case; relative error
 * max |out - ref| / max |ref| <= 1e-4 (reference computed in float64).
 * With --compare OUT EXPECTED: the same check on two files' "sample" tensors (the reference
 * script runs `cpdit forward` split over ranks and checks its output this way).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/cpu/conv2d_dnnl_cpu.h"
#include "kernels/cpu/conv2d_cpu.h"
#include "kernels/cpu/gemm_bf16_cpu.h"
#include "kernels/cpu/group_norm_cpu.h"
#include "kernels/backend.h"
#include "lib/io/safetensors.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"
#include "lib/vae/vae_decoder.h"

#define CONV_REL_TOL 1e-5
#define NORM_ABS_TOL 1e-5
#define VAE_REL_TOL 1e-4

static unsigned long long lcg_state = 12345;

static float frand(void) /* uniform in [-1, 1) */
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((lcg_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static float *rand_buf(size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++)
        p[i] = frand();
    return p;
}

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* vae.decode of tensor "latent_sample" in inputs_path with the VAE of model_dir, written as
 * "sample" (float32) to output_path: what `cpdit forward --component vae` does on one rank. */
static cpdit_status decode_file(const char *model_dir, const char *inputs_path,
                                const char *output_path, int tiled, cpdit_error *err)
{
    vae_decoder *d = NULL;
    safetensors_file *in = NULL;
    const safetensors_tensor *t = NULL;
    float *z = NULL, *img = NULL;
    cpdit_status st = vae_decoder_load(&d, model_dir, err);
    if (st == CPDIT_OK)
        st = safetensors_open(&in, inputs_path, err);
    if (st == CPDIT_OK && (!(t = safetensors_find(in, "latent_sample")) || t->ndim != 4))
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, inputs_path, "no 4-d latent_sample");
    int64_t shape[4] = {0};
    if (st == CPDIT_OK) {
        const int f = vae_decoder_upscale(d);
        shape[0] = t->shape[0];
        shape[1] = vae_decoder_config(d)->out_channels;
        shape[2] = t->shape[2] * f;
        shape[3] = t->shape[3] * f;
        z = malloc(t->nelem * sizeof *z);
        img = malloc((size_t)(shape[0] * shape[1] * shape[2] * shape[3]) * sizeof *img);
        st = z && img ? safetensors_tensor_read_f32(t, z, t->nelem, err) : CPDIT_ERR_RUNTIME;
    }
    if (st == CPDIT_OK)
        st = (tiled ? vae_decode_tiled : vae_decode)(d, z, (int)t->shape[0], (int)t->shape[2],
                                                     (int)t->shape[3], img, err);
    if (st == CPDIT_OK) {
        safetensors_write_tensor wt = {"sample", CPDIT_DTYPE_F32, 4, shape, img,
                                       CPDIT_DTYPE_F32};
        st = safetensors_write(output_path, &wt, 1, NULL, 0, err);
    }
    free(z);
    free(img);
    safetensors_close(in);
    vae_decoder_free(d);
    return st;
}

static void test_conv_case(int B, int Cin, int Cout, int H, int W, int K, int with_bias,
                           size_t col_bytes)
{
    const size_t nin = (size_t)B * Cin * H * W, nout = (size_t)B * Cout * H * W;
    float *in = rand_buf(nin), *wt = rand_buf((size_t)Cout * Cin * K * K),
          *bias = rand_buf((size_t)Cout), *out = malloc(nout * sizeof *out),
          *ref = malloc(nout * sizeof *ref);
    cpdit_error err;
    CHECK(in && wt && bias && out && ref);
    if (in && wt && bias && out && ref) {
        CHECK(conv2d_cpu_banded(out, in, wt, with_bias ? bias : NULL, B, Cin, Cout, H, W, K,
                                col_bytes, NULL, &err) == CPDIT_OK);
        CHECK(conv2d_cpu_reference(ref, in, wt, with_bias ? bias : NULL, B, Cin, Cout, H, W, K,
                                   &err) == CPDIT_OK);
        const double d = max_diff(out, ref, nout), m = max_abs(ref, nout);
        CHECK_MSG(d <= CONV_REL_TOL * m, "conv B%d %d->%d %dx%d k%d bias%d bands %zu: "
                  "max diff %.3g (max %.3g)", B, Cin, Cout, H, W, K, with_bias, col_bytes, d, m);
    }
    free(in), free(wt), free(bias), free(out), free(ref);
}

/* The table's conv2d (NHWC, halo rows zero, rows computed in two ranges) vs the NCHW
 * reference. */
static void test_nhwc_conv_case(int Cin, int Cout, int H, int W, int K, int with_bias)
{
    const cpdit_backend *be = cpdit_backend_cpu();
    const size_t row_in = (size_t)W * Cin, nin = (size_t)H * row_in, nout = (size_t)Cout * H * W;
    float *in = rand_buf(nin), *wt = rand_buf((size_t)Cout * Cin * K * K),
          *bias = rand_buf((size_t)Cout), *ref = malloc(nout * sizeof *ref),
          *xh = calloc(nin + 2 * row_in, sizeof *xh), *y = malloc(nout * sizeof *y),
          *yt = malloc(nout * sizeof *yt);
    float *wp = wt ? be->conv2d_pack(wt, Cout, Cin, K) : NULL;
    const size_t wsb = be->conv2d_workspace_bytes(W, Cin, K);
    void *ws = wsb ? be->alloc(wsb) : NULL;
    cpdit_error err;
    CHECK(in && wt && bias && ref && xh && y && yt && wp && (!wsb || ws));
    if (in && wt && bias && ref && xh && y && yt && wp && (!wsb || ws)) {
        const float *b = with_bias ? bias : NULL;
        CHECK(conv2d_cpu_reference(ref, in, wt, b, 1, Cin, Cout, H, W, K, &err) == CPDIT_OK);
        /* NHWC, halos zero; host fp32 arrays are the "cpu" table's activations */
        be->transpose(cpdit_host_buf(xh + row_in), cpdit_host_buf(in), (size_t)Cin,
                      (size_t)H * W);
        const int split = H / 3;
        cpdit_buf *yb = cpdit_host_buf(y), *xb = cpdit_host_buf(xh + row_in);
        CHECK(be->conv2d(yb, xb, wp, b, W, Cin, Cout, K, split, H, ws, &err) == CPDIT_OK);
        CHECK(be->conv2d(yb, xb, wp, b, W, Cin, Cout, K, 0, split, ws, &err) == CPDIT_OK);
        be->transpose(cpdit_host_buf(yt), yb, (size_t)H * W, (size_t)Cout);
        const double d = max_diff(yt, ref, nout), m = max_abs(ref, nout);
        CHECK_MSG(d <= CONV_REL_TOL * m, "nhwc conv %d->%d %dx%d k%d bias%d: max diff %.3g "
                  "(max %.3g)", Cin, Cout, H, W, K, with_bias, d, m);
    }
    be->free(wp);
    be->free(ws);
    free(in), free(wt), free(bias), free(ref), free(xh), free(y), free(yt);
}

/* The native (bf16) 3x3 convolution through oneDNN vs our own bf16 kernel (same rounding of
 * inputs and weights, fp32 sums in another order: within NATIVE_ENGINES_TOL), and computed in
 * bands (first row, interior, last row; what a row split over ranks does) bitwise equal to one
 * call. Skipped (nothing checked) in builds without oneDNN or on CPUs without AVX512-BF16. */
#define NATIVE_ENGINES_TOL 1e-5
static void test_native_engines_case(int Cin, int Cout, int H, int W)
{
    const cpdit_backend *be = cpdit_backend_cpu();
    const size_t row_in = (size_t)W * Cin, nin = (size_t)H * row_in, nout = (size_t)Cout * H * W;
    float *wt = rand_buf((size_t)Cout * Cin * 9), *bias = rand_buf((size_t)Cout),
          *xh = calloc(nin + 2 * row_in, sizeof *xh), *yb = malloc(nout * sizeof *yb),
          *yd = malloc(nout * sizeof *yd), *yd2 = malloc(nout * sizeof *yd2);
    float *in = rand_buf(nin);
    CHECK(wt && bias && xh && yb && yd && yd2 && in);
    if (!(wt && bias && xh && yb && yd && yd2 && in))
        goto out;
    memcpy(xh + row_in, in, nin * sizeof *xh);
    const size_t nw = (size_t)Cout * Cin * 9;
    uint16_t *w16 = malloc(nw * sizeof *w16); /* the weights as a bf16 checkpoint stores them */
    CHECK(w16 && cpdit_dtype_from_f32(w16, CPDIT_DTYPE_BF16, wt, nw, NULL) == CPDIT_OK);
    CHECK(cpu_conv2d_set_engine("builtin") == 0);
    float *wb = w16 ? be->conv2d_pack_stored(w16, CPDIT_DTYPE_BF16, Cout, Cin, 3,
                                             CPDIT_WEIGHT_NATIVE) : NULL;
    CHECK(cpu_conv2d_set_engine("dnnl") == 0);
    float *wd = w16 ? be->conv2d_pack_stored(w16, CPDIT_DTYPE_BF16, Cout, Cin, 3,
                                             CPDIT_WEIGHT_NATIVE) : NULL;
    free(w16);
    cpu_conv2d_set_engine("auto");
    const size_t wsb = be->conv2d_workspace_bytes(W, Cin, 3);
    void *ws = be->alloc(wsb);
    cpdit_error err;
    CHECK(wb && wd && ws);
    if (wb && wd && ws) {
        const cpdit_buf *x = cpdit_host_buf(xh + row_in); /* "cpu": host fp32 activations */
        cpdit_buf *ob = cpdit_host_buf(yb), *od = cpdit_host_buf(yd), *od2 = cpdit_host_buf(yd2);
        CHECK(be->conv2d(ob, x, wb, bias, W, Cin, Cout, 3, 0, H, ws, &err) == CPDIT_OK);
        CHECK(be->conv2d(od, x, wd, bias, W, Cin, Cout, 3, 0, H, ws, &err) == CPDIT_OK);
        CHECK(be->conv2d(od2, x, wd, bias, W, Cin, Cout, 3, 0, 1, ws, &err) == CPDIT_OK);
        if (H > 1) {
            CHECK(be->conv2d(od2, x, wd, bias, W, Cin, Cout, 3, 1, H - 1, ws, &err) == CPDIT_OK);
            CHECK(be->conv2d(od2, x, wd, bias, W, Cin, Cout, 3, H - 1, H, ws, &err) == CPDIT_OK);
        }
        const double d = max_diff(yd, yb, nout), m = max_abs(yb, nout);
        CHECK_MSG(d <= NATIVE_ENGINES_TOL * m, "native conv %d->%d %dx%d: oneDNN vs ours max "
                  "diff %.3g (max %.3g)", Cin, Cout, H, W, d, m);
        CHECK_MSG(memcmp(yd, yd2, nout * sizeof *yd) == 0, "native conv %d->%d %dx%d: oneDNN "
                  "in bands differs from one call (max diff %.3g)", Cin, Cout, H, W,
                  max_diff(yd, yd2, nout));
    }
    be->free(wb);
    be->free(wd);
    be->free(ws);
out:
    free(wt), free(bias), free(xh), free(yb), free(yd), free(yd2), free(in);
}

static void test_native_engines(void)
{
    if (cpu_conv2d_set_engine("dnnl") != 0) {
        printf("native conv engines: oneDNN not in this build or no AVX512-BF16: skipped\n");
        return;
    }
    cpu_conv2d_set_engine("auto");
    test_native_engines_case(32, 64, 9, 12);
    test_native_engines_case(128, 128, 10, 16);
    test_native_engines_case(256, 128, 7, 8); /* oneDNN's reference kernel at this width */
    test_native_engines_case(128, 3, 6, 20);  /* conv_out */
    test_native_engines_case(16, 64, 1, 5);   /* one row */
    test_native_engines_case(512, 16, 70, 128); /* 70 rows: two sub-bands of the workspace */
}

static void test_nhwc_ops(void)
{
    const cpdit_backend *be = cpdit_backend_cpu();
    test_nhwc_conv_case(3, 5, 7, 9, 3, 1);
    test_nhwc_conv_case(4, 3, 1, 1, 3, 0);    /* one pixel: padding only */
    test_nhwc_conv_case(6, 4, 5, 7, 1, 1);    /* 1x1 */
    test_nhwc_conv_case(300, 8, 30, 40, 3, 1); /* 1200 pixels: two im2col blocks */
    cpdit_error err;
    float x[4] = {0};
    CHECK(be->conv2d(cpdit_host_buf(x), cpdit_host_buf(x), x, NULL, 1, 1, 1, 2, 0, 1, NULL,
                     &err) == CPDIT_ERR_INPUT);
    /* GroupNorm in pieces + SiLU vs group_norm_cpu; NHWC */
    const int C = 12, G = 3, S = 37;
    float *xn = rand_buf((size_t)C * S), *g = rand_buf(C), *bt = rand_buf(C),
          *ref = malloc((size_t)C * S * sizeof *ref), *xh = malloc((size_t)C * S * sizeof *xh),
          *yh = malloc((size_t)C * S * sizeof *yh), *yt = malloc((size_t)C * S * sizeof *yt);
    CHECK(xn && g && bt && ref && xh && yh && yt);
    if (xn && g && bt && ref && xh && yh && yt) {
        for (int i = 0; i < C * S; i++)
            xn[i] = xn[i] * 2.0f - 0.7f;
        group_norm_cpu(ref, xn, g, bt, 1, C, (size_t)S, G, 1e-6f, CPU_ACT_SILU);
        /* host fp32 arrays as the "cpu" table's activations */
        cpdit_buf *xb = cpdit_host_buf(xh), *yb = cpdit_host_buf(yh);
        be->transpose(xb, cpdit_host_buf(xn), (size_t)C, (size_t)S);
        double mean[3] = {0}, dev[3] = {0}, rstd[3];
        be->group_moments(mean, xb, (size_t)S, C, G, NULL);
        for (int k = 0; k < G; k++)
            mean[k] /= (double)S * (C / G);
        be->group_moments(dev, xb, (size_t)S, C, G, mean);
        for (int k = 0; k < G; k++)
            rstd[k] = 1.0 / sqrt(dev[k] / ((double)S * (C / G)) + 1e-6);
        be->group_norm_apply(yb, xb, (size_t)S, C, G, mean, rstd, g, bt, CPDIT_ACT_SILU);
        be->transpose(cpdit_host_buf(yt), yb, (size_t)S, (size_t)C);
        CHECK_MSG(max_diff(yt, ref, (size_t)C * S) <= NORM_ABS_TOL, "nhwc group norm: %.3g",
                  max_diff(yt, ref, (size_t)C * S));
        /* upsample: (2 rows, 3 cols, C) NHWC vs the NCHW kernel */
        float *u = malloc((size_t)C * 24 * sizeof *u), *un = malloc((size_t)C * 24 * sizeof *un),
              *ut = malloc((size_t)C * 24 * sizeof *ut);
        CHECK(u && un && ut);
        if (u && un && ut) {
            /* the first 6 pixels of each channel as a (C, 2, 3) image */
            be->transpose(xb, cpdit_host_buf(xn), (size_t)C, 6);
            float *xc = malloc((size_t)C * 6 * sizeof *xc);
            for (int c = 0; xc && c < C; c++)
                memcpy(xc + c * 6, xn + (size_t)c * S, 6 * sizeof *xc);
            be->transpose(xb, cpdit_host_buf(xc ? xc : xn), (size_t)C, 6);
            be->upsample2x(cpdit_host_buf(u), xb, 2, 3, C);
            upsample_nearest2x_cpu(un, xc ? xc : xn, (size_t)C, 2, 3);
            be->transpose(cpdit_host_buf(ut), cpdit_host_buf(u), 24, (size_t)C);
            CHECK(xc && memcmp(ut, un, (size_t)C * 24 * sizeof *ut) == 0);
            free(xc);
        }
        free(u), free(un), free(ut);
    }
    free(xn), free(g), free(bt), free(ref), free(xh), free(yh), free(yt);
}

static void test_conv(void)
{
    test_conv_case(1, 3, 5, 7, 9, 3, 1, CONV2D_COL_BYTES_MAX);
    test_conv_case(2, 4, 3, 6, 5, 3, 0, CONV2D_COL_BYTES_MAX);
    test_conv_case(2, 8, 6, 11, 13, 3, 1, 1);          /* one row per band */
    test_conv_case(1, 8, 6, 11, 13, 3, 1, 8 * 9 * 13 * 4 * 4); /* 4-row bands, last partial */
    test_conv_case(1, 6, 4, 5, 7, 1, 1, CONV2D_COL_BYTES_MAX);
    test_conv_case(1, 2, 2, 1, 1, 3, 1, CONV2D_COL_BYTES_MAX); /* 1x1 image: padding only */
    test_conv_case(1, 3, 2, 9, 2, 5, 1, CONV2D_COL_BYTES_MAX); /* kernel wider than image */
    cpdit_error err;
    float x[4] = {0};
    CHECK(conv2d_cpu(x, x, x, NULL, 1, 1, 1, 2, 2, 2, NULL, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "even");
    CHECK(conv2d_cpu(x, x, x, NULL, 0, 1, 1, 2, 2, 3, NULL, &err) == CPDIT_ERR_INPUT);
}

static void test_group_norm(void)
{
    const int B = 2, C = 6, G = 3;
    const size_t S = 10;
    float *x = rand_buf((size_t)B * C * S), *g = rand_buf(C), *b = rand_buf(C),
          *y = malloc((size_t)B * C * S * sizeof *y);
    CHECK(x && g && b && y);
    if (!(x && g && b && y))
        return;
    for (size_t i = 0; i < (size_t)B * C * S; i++)
        x[i] = x[i] * 3.0f + 1.5f; /* a mean far from 0 */
    group_norm_cpu(y, x, g, b, B, C, S, G, 1e-6f, CPU_ACT_SILU);
    double worst = 0;
    const int cpg = C / G;
    for (int bb = 0; bb < B; bb++)
        for (int gg = 0; gg < G; gg++) {
            const float *xs = x + ((size_t)bb * C + gg * cpg) * S;
            double mean = 0, var = 0;
            for (size_t i = 0; i < cpg * S; i++)
                mean += xs[i];
            mean /= cpg * S;
            for (size_t i = 0; i < cpg * S; i++)
                var += (xs[i] - mean) * (xs[i] - mean);
            var /= cpg * S;
            for (int k = 0; k < cpg; k++)
                for (size_t i = 0; i < S; i++) {
                    const int c = gg * cpg + k;
                    double v = (xs[k * S + i] - mean) / sqrt(var + 1e-6) * g[c] + b[c];
                    v = v / (1.0 + exp(-v));
                    worst = fmax(worst, fabs(v - y[((size_t)bb * C + c) * S + i]));
                }
        }
    CHECK_MSG(worst <= NORM_ABS_TOL, "group norm max diff %.3g", worst);
    /* in place gives the same */
    float *z = malloc((size_t)B * C * S * sizeof *z);
    if (z) {
        memcpy(z, x, (size_t)B * C * S * sizeof *z);
        group_norm_cpu(z, z, g, b, B, C, S, G, 1e-6f, CPU_ACT_SILU);
        CHECK(memcmp(z, y, (size_t)B * C * S * sizeof *z) == 0);
    }
    CHECK(cpu_activation_from_name("swish") == CPU_ACT_SILU);
    CHECK(cpu_activation_from_name("tanh") == -1);
    float a[3] = {-1.0f, 0.0f, 2.0f};
    activation_cpu(a, 3, CPU_ACT_RELU);
    CHECK(a[0] == 0.0f && a[2] == 2.0f);
    free(x), free(g), free(b), free(y), free(z);
}

static void test_upsample(void)
{
    const float in[2 * 2 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    float out[2 * 4 * 6];
    upsample_nearest2x_cpu(out, in, 2, 2, 3);
    int ok = 1;
    for (int n = 0; n < 2; n++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 6; x++)
                ok &= out[(n * 4 + y) * 6 + x] == in[(n * 2 + y / 2) * 3 + x / 2];
    CHECK(ok);
}

static void test_denormalize(void)
{
    autoencoder_kl_config c;
    autoencoder_kl_config_defaults(&c);
    c.scaling_factor = 0.3611;
    c.has_shift_factor = true;
    c.shift_factor = 0.1159;
    float z[3] = {1.0f, -0.7f, 2.5f};
    float e[3];
    for (int i = 0; i < 3; i++) {
        volatile float q = z[i] / 0.3611f;
        e[i] = q + 0.1159f;
    }
    vae_latents_denormalize(&c, z, 3);
    CHECK(memcmp(z, e, sizeof z) == 0);
    c.has_shift_factor = false;
    float w[1] = {0.18215f};
    c.scaling_factor = 0.18215;
    vae_latents_denormalize(&c, w, 1);
    CHECK(w[0] == 1.0f);
}

static void test_param_table(void)
{
    /* FLUX.1's VAE: 4 levels (128, 256, 512, 512), 2 layers per block, 16 latent channels,
     * no post_quant_conv. diffusers' decoder has 138 tensors for it (8 + 2·10 + attention 10
     * + up blocks: 3 resnets each, conv_shortcut in two of them, 3 upsamplers, + 4 out). */
    autoencoder_kl_config c;
    autoencoder_kl_config_defaults(&c);
    c.latent_channels = 16;
    c.n_blocks = 4;
    const int ch[4] = {128, 256, 512, 512};
    memcpy(c.block_out_channels, ch, sizeof ch);
    c.layers_per_block = 2;
    c.use_post_quant_conv = false;
    vae_decoder *d = NULL;
    cpdit_error err;
    CHECK(vae_decoder_create(&d, &c, &err) == CPDIT_OK);
    if (!d)
        return;
    CHECK(vae_decoder_upscale(d) == 8);
    const size_t n = vae_decoder_param_count(d);
    /* conv_in 2, mid: 2 resnets · 8 + attention 10, up: 12 resnets · 8 + 2 shortcuts · 2,
     * 3 upsamplers · 2, norm_out 2, conv_out 2 */
    CHECK_MSG(n == 2 + 16 + 10 + 96 + 4 + 6 + 2 + 2, "param count %zu", n);
    vae_param_info info;
    size_t total = 0;
    int found_shortcut = 0, found_attn = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(vae_decoder_param_at(d, i, &info) == 0);
        total += info.count;
        if (strcmp(info.name, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight") == 0)
            found_shortcut = info.ndim == 4 && info.shape[0] == 256 && info.shape[1] == 512 &&
                             info.shape[2] == 1;
        if (strcmp(info.name, "decoder.mid_block.attentions.0.to_out.0.weight") == 0)
            found_attn = info.ndim == 2 && info.shape[0] == 512 && info.shape[1] == 512;
    }
    CHECK(found_shortcut && found_attn);
    /* diffusers' FLUX VAE decoder has 49,545,475 parameters */
    CHECK_MSG(total == 49545475, "total parameters %zu", total);
    CHECK(vae_decoder_param_at(d, n, &info) == -1);
    vae_decoder_param_at(d, 0, &info);
    CHECK(strcmp(info.name, "decoder.conv_in.weight") == 0);
    /* decode errors */
    float z[16];
    CHECK(vae_decode(d, z, 1, 0, 1, z, &err) == CPDIT_ERR_INPUT);
    vae_decoder_free(d);
    /* an unknown activation is refused */
    snprintf(c.act_fn, sizeof c.act_fn, "tanh");
    CHECK(vae_decoder_create(&d, &c, &err) == CPDIT_ERR_INPUT);
}

static void test_load_errors(void)
{
    char *dir = tmpdir_make("vae");
    CHECK(dir != NULL);
    if (!dir)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("{\"_class_name\": \"AutoencoderKL\", \"block_out_channels\": [8, 8], "
              "\"norm_num_groups\": 4, \"latent_channels\": 4, \"layers_per_block\": 1}", f);
        fclose(f);
    }
    /* weights file holding only conv_in: the first missing tensor is named */
    const int64_t shape[4] = {4, 4, 1, 1};
    float w[16] = {0};
    safetensors_write_tensor t = {"post_quant_conv.weight", CPDIT_DTYPE_F32, 4, shape, w,
                                  CPDIT_DTYPE_F32};
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    cpdit_error err;
    CHECK(safetensors_write(path, &t, 1, NULL, 0, &err) == CPDIT_OK);
    vae_decoder *d = NULL;
    CHECK(vae_decoder_load(&d, dir, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "post_quant_conv.bias");
    /* a wrong shape is reported with both shapes */
    const int64_t bad[2] = {4, 4};
    t.shape = bad;
    t.ndim = 2;
    CHECK(safetensors_write(path, &t, 1, NULL, 0, &err) == CPDIT_OK);
    CHECK(vae_decoder_load(&d, dir, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "[4, 4, 1, 1]");
    /* forward: missing input tensor */
    char in[4200], out[4200];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    const int64_t zs[4] = {1, 4, 2, 2};
    safetensors_write_tensor zt = {"latents", CPDIT_DTYPE_F32, 4, zs, w, CPDIT_DTYPE_F32};
    CHECK(safetensors_write(in, &zt, 1, NULL, 0, &err) == CPDIT_OK);
    CHECK(decode_file(dir, in, out, 0, &err) == CPDIT_ERR_INPUT); /* weights fail first */
    tmpdir_remove(dir);
    free(dir);
}

/* ---------------------------------------------------------------- checkpoints and dtypes */

#define CK_LAT 4     /* latent rows and columns of the checkpoint test */
#define BF16_REL_TOL 2e-2 /* bf16 convolutions vs fp32, relative to max |out| */

/* Write d's parameters (host values) into dir/diffusion_pytorch_model.safetensors as dtype;
 * legacy: the attention projections under their deprecated names, as (C, C, 1, 1). */
static cpdit_status write_checkpoint(vae_decoder *d, const char *dir, cpdit_dtype dtype,
                                     int legacy, cpdit_error *err)
{
    static const char *const now[4] = {"to_q.", "to_k.", "to_v.", "to_out.0."};
    static const char *const old[4] = {"query.", "key.", "value.", "proj_attn."};
    const size_t n = vae_decoder_param_count(d);
    safetensors_write_tensor *t = calloc(n, sizeof *t);
    int64_t(*shapes)[4] = calloc(n, sizeof *shapes);
    char(*names)[VAE_PARAM_NAME_MAX] = calloc(n, sizeof *names);
    cpdit_status st = t && shapes && names ? CPDIT_OK : CPDIT_ERR_RUNTIME;
    for (size_t i = 0; st == CPDIT_OK && i < n; i++) {
        vae_param_info info;
        vae_decoder_param_at(d, i, &info);
        snprintf(names[i], sizeof names[i], "%s", info.name);
        memcpy(shapes[i], info.shape, sizeof shapes[i]);
        t[i].ndim = info.ndim;
        for (int k = 0; legacy && k < 4; k++) {
            char *at = strstr(names[i], now[k]);
            if (!at)
                continue;
            char rest[VAE_PARAM_NAME_MAX];
            snprintf(rest, sizeof rest, "%s", at + strlen(now[k]));
            snprintf(at, sizeof names[i] - (size_t)(at - names[i]), "%s%s", old[k], rest);
            if (info.ndim == 2) { /* a 1x1 convolution's weight */
                shapes[i][2] = shapes[i][3] = 1;
                t[i].ndim = 4;
            }
        }
        t[i].name = names[i];
        t[i].dtype = dtype;
        t[i].shape = shapes[i];
        t[i].data = info.data;
        t[i].src_dtype = CPDIT_DTYPE_F32;
    }
    char path[4400];
    if (snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir) >=
        (int)sizeof path)
        st = CPDIT_ERR_RUNTIME;
    if (st == CPDIT_OK)
        st = safetensors_write(path, t, n, NULL, 0, err);
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        st = CPDIT_ERR_RUNTIME;
    FILE *f = st == CPDIT_OK ? fopen(path, "w") : NULL;
    if (f) {
        fputs("{\"_class_name\": \"AutoencoderKL\", \"block_out_channels\": [8, 16], "
              "\"norm_num_groups\": 4, \"latent_channels\": 4, \"layers_per_block\": 1, "
              "\"use_post_quant_conv\": true}", f);
        fclose(f);
    } else {
        st = CPDIT_ERR_RUNTIME;
    }
    free(t);
    free(shapes);
    free(names);
    return st;
}

/* Decode z (1, 4, CK_LAT, CK_LAT) with the checkpoint in dir in format wf into out. */
static cpdit_status decode_checkpoint(const char *dir, cpdit_weight_format wf, const float *z,
                                      float *out, cpdit_error *err)
{
    vae_decoder *d = NULL;
    cpdit_status st = vae_decoder_load(&d, dir, err);
    if (st == CPDIT_OK) {
        vae_param_info info;
        CHECK(vae_decoder_param_at(d, 0, &info) == 0 && info.data == NULL && info.count > 0);
        vae_decoder_set_weight_format(d, wf);
        st = vae_decode(d, z, 1, CK_LAT, CK_LAT, out, err);
    }
    vae_decoder_free(d);
    return st;
}

/* The same weights from host memory, an fp32 checkpoint, a bf16 one and an fp32 one under the
 * deprecated attention names (C, C, 1, 1) decode to the same bits in the fp32 format: every
 * source and dtype goes through the one loader to the same fp32 weights. In the native format
 * the fp32 checkpoint stays fp32 (same bits) and the bf16 one computes in bf16 (close, and
 * different when the CPU has the bf16 GEMM for convolutions). */
static void test_checkpoint_dtypes(void)
{
    autoencoder_kl_config c;
    autoencoder_kl_config_defaults(&c);
    c.latent_channels = 4;
    c.n_blocks = 2;
    c.block_out_channels[0] = 8;
    c.block_out_channels[1] = 16;
    c.layers_per_block = 1;
    c.norm_num_groups = 4;
    c.use_post_quant_conv = true;
    vae_decoder *d = NULL;
    cpdit_error err;
    CHECK(vae_decoder_create(&d, &c, &err) == CPDIT_OK);
    char *root = tmpdir_make("vae-ckpt");
    if (!d || !root) {
        vae_decoder_free(d);
        free(root);
        return;
    }
    vae_decoder_fill_random(d, 5);
    vae_param_info info;
    for (size_t i = 0; vae_decoder_param_at(d, i, &info) == 0; i++) { /* bf16 values */
        uint16_t h;
        for (size_t k = 0; k < info.count; k++)
            if (cpdit_dtype_from_f32(&h, CPDIT_DTYPE_BF16, &info.data[k], 1, &err) ||
                cpdit_dtype_to_f32(&info.data[k], &h, CPDIT_DTYPE_BF16, 1, &err))
                CHECK(0);
    }
    const size_t nz = 4 * CK_LAT * CK_LAT, no = 3 * (size_t)(2 * CK_LAT) * (2 * CK_LAT);
    float *z = rand_buf(nz), *ref = calloc(no, sizeof *ref), *out = calloc(no, sizeof *out);
    CHECK(z && ref && out);
    CHECK(vae_decode(d, z, 1, CK_LAT, CK_LAT, ref, &err) == CPDIT_OK);
    const char *names[3] = {"f32", "bf16", "legacy"};
    char dirs[3][4200];
    for (int k = 0; k < 3; k++) {
        snprintf(dirs[k], sizeof dirs[k], "%s/%s", root, names[k]);
        CHECK(mkdir(dirs[k], 0700) == 0);
        CHECK(write_checkpoint(d, dirs[k], k == 1 ? CPDIT_DTYPE_BF16 : CPDIT_DTYPE_F32, k == 2,
                               &err) == CPDIT_OK);
    }
    vae_decoder_free(d);
    for (int k = 0; k < 3 && z && ref && out; k++) {
        CHECK_MSG(decode_checkpoint(dirs[k], CPDIT_WEIGHT_F32, z, out, &err) == CPDIT_OK,
                  "%s: %s", dirs[k], err.what);
        CHECK_MSG(memcmp(out, ref, no * sizeof *out) == 0, "%s checkpoint, fp32 format: not "
                  "the host weights' bits (max |diff| %.3g)", names[k], max_diff(out, ref, no));
    }
    if (z && ref && out) {
        CHECK(decode_checkpoint(dirs[0], CPDIT_WEIGHT_NATIVE, z, out, &err) == CPDIT_OK);
        CHECK_MSG(memcmp(out, ref, no * sizeof *out) == 0, "fp32 checkpoint, native: not fp32");
        CHECK(decode_checkpoint(dirs[1], CPDIT_WEIGHT_NATIVE, z, out, &err) == CPDIT_OK);
        const double rel = max_diff(out, ref, no) / max_abs(ref, no);
        fprintf(stderr, "bf16 checkpoint, native vs fp32: relative %.3g\n", rel);
        CHECK_MSG(rel <= BF16_REL_TOL, "bf16 native relative %.3g > %.0e", rel, BF16_REL_TOL);
        if (strcmp(cpu_gemm_bf16_kernel(), "avx512bf16") == 0)
            CHECK_MSG(rel > 0, "bf16 checkpoint, native: the bf16 convolutions were not used");
    }
    free(z);
    free(ref);
    free(out);
    tmpdir_remove(root);
    free(root);
}

/* ---------------------------------------------------------------- against PyTorch */

/* Compare tensor "sample" of two files: max |out - ref| <= VAE_REL_TOL · max |ref|. */
static void compare_files(const char *name, const char *out, const char *expected)
{
    cpdit_error err;
    safetensors_file *fo = NULL, *fe = NULL;
    CHECK(safetensors_open(&fo, out, &err) == CPDIT_OK);
    CHECK(safetensors_open(&fe, expected, &err) == CPDIT_OK);
    const safetensors_tensor *to = fo ? safetensors_find(fo, "sample") : NULL;
    const safetensors_tensor *te = fe ? safetensors_find(fe, "sample") : NULL;
    CHECK(to && te && to->dtype == CPDIT_DTYPE_F32 && to->ndim == 4 && te->ndim == 4);
    if (to && te && to->ndim == 4 && te->ndim == 4) {
        CHECK_MSG(memcmp(to->shape, te->shape, 4 * sizeof to->shape[0]) == 0,
                  "%s: shape differs", name);
        float *a = malloc(to->nelem * sizeof *a), *b = malloc(te->nelem * sizeof *b);
        if (a && b && to->nelem == te->nelem &&
            safetensors_tensor_read_f32(to, a, to->nelem, &err) == CPDIT_OK &&
            safetensors_tensor_read_f32(te, b, te->nelem, &err) == CPDIT_OK) {
            const double d = max_diff(a, b, te->nelem), m = max_abs(b, te->nelem);
            fprintf(stderr, "%s: output (%lld, %lld, %lld, %lld), max |ref| %.4g, "
                    "max |diff| %.3g, relative %.3g\n", name, (long long)te->shape[0],
                    (long long)te->shape[1], (long long)te->shape[2], (long long)te->shape[3],
                    m, d, d / m);
            CHECK_MSG(d <= VAE_REL_TOL * m, "%s: relative error %.3g > %.0e", name, d / m,
                      VAE_REL_TOL);
        } else {
            CHECK_MSG(0, "%s: cannot read the outputs", name);
        }
        free(a), free(b);
    }
    safetensors_close(fo);
    safetensors_close(fe);
}

static int compare_case(const char *root, const char *name)
{
    char model[4096], in[4096], expected[4096], out[4096];
    snprintf(model, sizeof model, "%s/%s/model", root, name);
    snprintf(in, sizeof in, "%s/%s/inputs.safetensors", root, name);
    snprintf(expected, sizeof expected, "%s/%s/expected.safetensors", root, name);
    snprintf(out, sizeof out, "%s/%s/out.safetensors", root, name);
    cpdit_error err;
    /* case "tiled": the reference is diffusers' tiled_decode */
    cpdit_status st = decode_file(model, in, out, strncmp(name, "tiled", 5) == 0, &err);
    CHECK_MSG(st == CPDIT_OK, "%s: %s: %s", name, err.where, err.what);
    if (st != CPDIT_OK)
        return 0;
    compare_files(name, out, expected);
    return 1;
}

static void test_reference(const char *root)
{
    char path[4096], name[256];
    snprintf(path, sizeof path, "%s/cases.txt", root);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "no %s", path);
    if (!f)
        return;
    int n = 0;
    while (fscanf(f, "%255s", name) == 1)
        n += compare_case(root, name);
    fclose(f);
    CHECK_MSG(n >= 3, "only %d reference cases", n);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--reference") == 0) {
        test_reference(argv[2]);
        TEST_MAIN_END();
    }
    if (argc == 4 && strcmp(argv[1], "--compare") == 0) { /* OUT EXPECTED */
        compare_files(argv[2], argv[2], argv[3]);
        TEST_MAIN_END();
    }
    test_conv();
    test_nhwc_ops();
    test_native_engines();
    test_group_norm();
    test_upsample();
    test_denormalize();
    test_param_table();
    test_load_errors();
    test_checkpoint_dtypes();
    TEST_MAIN_END();
}
