/* test_cuda_cudnn_attention.c — the cuDNN fused attention ("cudnn" kernel), the `auto` kernel
 * and the fused linear + GELU-tanh (linear_act) of the CUDA tables ("cuda": bf16 activations;
 * "cuda-fp32": fp32), against double-precision loops on the host. Inputs go in through
 * upload_act, so on "cuda" the references see them rounded to bf16 as the device does.
 *
 * Without a GPU: builds and finalises the cuDNN graph's tensor and operation descriptors for
 * FLUX-sized and odd shapes (no handle or device needed for that), then skips (77).
 * With a GPU:
 *   - cuDNN must offer an engine (a plan finalises) for FLUX.1-dev's joint attention
 *     (B 1, S 4608, H 24, D 128), a ring block (Sq 512, Skv 4096) and an odd shape: a silent
 *     fallback to cuda-flash would otherwise hide a broken graph;
 *   - cudnn and auto vs the reference: out max|err| / max|ref| <= 2e-2 (bf16 Q, K, V, P, O),
 *     LSE |err| <= 2e-2 max(1, |lse|) (checks the stats convention: natural log of the scaled
 *     scores' sum of exponentials, max + log sum); q, k, v as column blocks of one fused qkv
 *     buffer (row strides); bias / causal (cuda-flash route) <= 1e-5 on cuda-fp32, <= 1e-2 on
 *     cuda (out rounded to bf16 once); Skv = 0: out 0, lse -inf;
 *   - linear_act (bf16 weights: cuBLASLt GELU_BIAS epilogue) vs linear then act on the table:
 *     <= 1e-3 on cuda-fp32, <= 1e-2 on cuda (there linear + act rounds twice, the fused form
 *     once); vs the double reference on the bf16-rounded operands: <= 5e-3 / 1e-2; output row
 *     stride > N (FLUX's single block writes into [attn | mlp]);
 *   - the VAE's convolution with NATIVE (bf16) packed weights vs F32 ones through the table:
 *     <= 1e-2 (max-norm), and different (the bf16 path ran).
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_runtime_info.h"
#include "kernels/cuda/sdpa_cudnn.h"
#include "tests/attention_ref.h"
#include "tests/test_util.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
/* worst errors of the bf16 (cuDNN) attention cases and of the fused linear, for the summary */
static double worst_out, worst_lse, worst_linact, worst_conv;
static float urand(void) /* in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* ------------------------------------------------------------------ descriptors (no GPU) */

static void check_descriptors(void)
{
    static const int shapes[][5] = {
        {1, 4608, 4608, 24, 128}, {1, 512, 4096, 24, 128}, {2, 77, 133, 3, 64}, {1, 1, 1, 1, 8}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *s = shapes[i];
        char msg[512] = "";
        const int rc = cpdit_cudnn_sdpa_check_ops(s[0], s[1], s[2], s[3], s[4], msg, sizeof msg);
        CHECK_MSG(rc == 0, "cuDNN graph descriptors for B %d Sq %d Skv %d H %d D %d: %s", s[0],
                  s[1], s[2], s[3], s[4], msg);
    }
    printf("cuDNN graph descriptors: %zu shapes finalised\n", sizeof shapes / sizeof shapes[0]);
}

/* ------------------------------------------------------------------ attention */

/* The name of attention kernel base ("cuda-flash", "cuda-reference", "cudnn", "auto") in table
 * be: cuda-fp32's kernels are named "cuda-fp32-flash", ... (names are unique over backends). */
static const char *kernel_name(const cpdit_backend *be, const char *base, char *buf, size_t size)
{
    if (be->act_dtype == CPDIT_DTYPE_BF16 || strcmp(base, "auto") == 0)
        return base;
    snprintf(buf, size, "cuda-fp32-%s", strncmp(base, "cuda-", 5) == 0 ? base + 5 : base);
    return buf;
}

/* 1 when be stores activations in bf16 (the host copies are then rounded as upload_act does). */
static int is_bf16(const cpdit_backend *be)
{
    return be->act_dtype == CPDIT_DTYPE_BF16;
}

static void round_like(const cpdit_backend *be, float *x, size_t n)
{
    for (size_t i = 0; is_bf16(be) && i < n; i++)
        x[i] = bf16_round(x[i]);
}

/* One problem through kernel kname of table be. fused: q, k, v are column blocks of one
 * (tokens, 3 H D) buffer (Sq == Skv). tol: for "cuda-fp32"; "cuda" adds its output rounding
 * (at least 1e-2). */
static void run_attention(const cpdit_backend *be, const char *kname, int B, int Sq, int Sk,
                          int H, int D, int fused, int with_bias, int causal, double tol)
{
    if (is_bf16(be) && tol < 1e-2)
        tol = 1e-2;
    const cpdit_attention_kernel *kern = NULL;
    cpdit_error err;
    cpdit_error_clear(&err);
    char kbuf[64];
    kname = kernel_name(be, kname, kbuf, sizeof kbuf);
    CHECK(cpdit_attention_kernel_find(be, kname, &kern, &err) == CPDIT_OK);
    if (!kern)
        return;
    const int HD = H * D, ldq = fused ? 3 * HD : HD, ldkv = fused ? 3 * HD : HD;
    const size_t nq = (size_t)B * Sq * ldq, nk = (size_t)B * Sk * ldkv;
    const size_t no = (size_t)B * Sq * HD, nl = (size_t)B * Sq * H;
    float *q = malloc((nq + 1) * 4), *k = fused ? q : malloc((nk + 1) * 4),
          *v = fused ? q : malloc((nk + 1) * 4), *o = malloc((no + 1) * 4),
          *l = malloc((nl + 1) * 4);
    float *bias = with_bias ? malloc((size_t)H * Sq * Sk * 4 + 4) : NULL;
    double *ro = malloc((no + 1) * 8), *rl = malloc((nl + 1) * 8);
    for (size_t i = 0; i < nq; i++)
        q[i] = 2.0f * urand();
    if (!fused)
        for (size_t i = 0; i < nk; i++) {
            k[i] = 2.0f * urand();
            v[i] = urand();
        }
    for (size_t i = 0; bias && i < (size_t)H * Sq * Sk; i++)
        bias[i] = urand();
    round_like(be, q, nq);
    if (!fused)
        round_like(be, k, nk), round_like(be, v, nk);
    const float *hk = fused ? q + HD : k, *hv = fused ? q + 2 * HD : v;
    cpdit_buf *dq = cpdit_act_alloc(be, nq + 1), *dk = fused ? dq : cpdit_act_alloc(be, nk + 1),
              *dv = fused ? dq : cpdit_act_alloc(be, nk + 1), *dout = cpdit_act_alloc(be, no + 1);
    float *dl = be->alloc((nl + 1) * 4), *dbias = bias ? be->alloc((size_t)H * Sq * Sk * 4) : NULL;
    be->upload_act(dq, q, nq);
    if (!fused) {
        be->upload_act(dk, k, nk);
        be->upload_act(dv, v, nk);
    }
    if (bias)
        be->upload(dbias, bias, (size_t)H * Sq * Sk * 4);
    const float scale = 1.0f / sqrtf((float)D);
    cpdit_attention_args a = {.B = B, .Sq = Sq, .Skv = Sk, .H = H, .D = D, .ld_q = ldq,
                              .ld_kv = ldkv, .ld_out = HD, .scale = scale, .bias = dbias,
                              .causal = causal};
    const cpdit_buf *qk = fused ? cpdit_buf_at(be, dq, HD) : dk,
                    *qv = fused ? cpdit_buf_at(be, dq, 2 * HD) : dv;
    cpdit_status st = kern->forward(dout, dl, dq, qk, qv, &a, &err);
    if (!st)
        st = be->sync(&err);
    CHECK_MSG(st == CPDIT_OK, "%s %s: %s", be->name, kname, err.what);
    be->download_act(o, dout, no);
    be->download(l, dl, nl * 4);
    attention_ref(q, ldq, hk, hv, ldkv, ro, rl, B, Sq, Sk, H, D, scale, bias, causal);
    double num = 0, den = 1e-30, el = 0;
    for (size_t i = 0; i < no; i++) {
        num = fmax(num, fabs(o[i] - ro[i]));
        den = fmax(den, fabs(ro[i]));
    }
    for (size_t i = 0; i < nl; i++)
        el = Sk ? fmax(el, fabs(l[i] - rl[i]) / fmax(1.0, fabs(rl[i])))
                : fmax(el, isinf(l[i]) && l[i] < 0 ? 0.0 : 1.0);
    const double eo = Sk ? num / den : num;
    printf("RESULT-ATTN %s %s B%d Sq%d Skv%d H%d D%d%s%s%s: out err %.2e, lse err %.2e (tol "
           "%.0e)\n",
           be->name, kname, B, Sq, Sk, H, D, fused ? " fused-qkv" : "", with_bias ? " bias" : "",
           causal ? " causal" : "", eo, el, tol);
    if (tol > 1e-4) {
        worst_out = fmax(worst_out, eo);
        worst_lse = fmax(worst_lse, el);
    }
    CHECK_MSG(eo <= tol && el <= tol, "%s %s B%d Sq%d Skv%d H%d D%d: out %.3g lse %.3g > %.3g",
              be->name, kname, B, Sq, Sk, H, D, eo, el, tol);
    be->free(dq);
    if (!fused)
        be->free(dk), be->free(dv);
    be->free(dout), be->free(dl), be->free(dbias);
    free(q);
    if (!fused)
        free(k), free(v);
    free(o), free(l), free(bias), free(ro), free(rl);
}

static void check_engines(void)
{
    char msg[512] = "";
    cpdit_cudnn_sdpa *s = cpdit_cudnn_sdpa_create(msg, sizeof msg);
    CHECK_MSG(s != NULL, "cpdit_cudnn_sdpa_create: %s", msg);
    if (!s)
        return;
    static const int shapes[][5] = {
        {1, 4608, 4608, 24, 128}, {1, 512, 4096, 24, 128}, {2, 77, 133, 3, 64}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *d = shapes[i];
        msg[0] = '\0';
        const int rc = cpdit_cudnn_sdpa_prepare(s, d[0], d[1], d[2], d[3], d[4], msg, sizeof msg);
        printf("cuDNN engine for B %d Sq %d Skv %d H %d D %d: %s\n", d[0], d[1], d[2], d[3], d[4],
               rc ? msg : "plan built");
        CHECK_MSG(rc == 0, "%s", msg);
    }
    /* the second request of a shape is a cache hit */
    CHECK(cpdit_cudnn_sdpa_prepare(s, 2, 77, 133, 3, 64, msg, sizeof msg) == 0);
    CHECK(cpdit_cudnn_sdpa_cached_shapes(s) == 3);
    /* a head dim cuDNN cannot take is refused (cached), not an error */
    CHECK(cpdit_cudnn_sdpa_prepare(s, 1, 16, 16, 2, 12, msg, sizeof msg) ==
          CPDIT_CUDNN_SDPA_UNSUPPORTED);
    cpdit_cudnn_sdpa_destroy(s);
}

/* ------------------------------------------------------------------ linear + gelu-tanh */

static void run_linear_act(const cpdit_backend *be, int M, int K, int N, int ldy)
{
    const double tol_pair = is_bf16(be) ? 1e-2 : 1e-3, tol_ref = is_bf16(be) ? 1e-2 : 5e-3;
    float *x = malloc((size_t)M * K * 4), *w = malloc((size_t)N * K * 4), *b = malloc(N * 4);
    float *y1 = malloc((size_t)M * ldy * 4), *y2 = malloc((size_t)M * ldy * 4);
    double *ref = malloc((size_t)M * N * 8);
    for (size_t i = 0; i < (size_t)M * K; i++)
        x[i] = urand();
    for (size_t i = 0; i < (size_t)N * K; i++)
        w[i] = bf16_round(urand() * 0.1f);
    for (int i = 0; i < N; i++)
        b[i] = urand();
    cpdit_weight_desc desc = {.dtype = CPDIT_DTYPE_F32, .rows = N, .cols = K, .data = w,
                              .format = CPDIT_WEIGHT_NATIVE};
    cpdit_weight *wt = NULL;
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(be->weight_create(&wt, &desc, &err) == CPDIT_OK);
    round_like(be, x, (size_t)M * K); /* the reference below rounds x to bf16 anyway */
    cpdit_buf *dx = cpdit_act_alloc(be, (size_t)M * K), *dy = cpdit_act_alloc(be, (size_t)M * ldy);
    float *db = be->alloc(N * 4);
    be->upload_act(dx, x, (size_t)M * K);
    be->upload(db, b, (size_t)N * 4);
    /* fused (table entry) */
    cpdit_status st = be->linear_act(dy, ldy, dx, K, wt, db, M, K, N, CPDIT_ACT_GELU_TANH, &err);
    if (!st)
        st = be->sync(&err);
    CHECK_MSG(st == CPDIT_OK, "linear_act: %s", err.what);
    be->download_act(y1, dy, (size_t)M * ldy);
    /* the two ops */
    st = be->linear(dy, ldy, dx, K, wt, db, M, K, N, 0, &err);
    for (int r = 0; !st && r < M; r++)
        be->act(CPDIT_ACT_GELU_TANH, cpdit_buf_at(be, dy, (ptrdiff_t)r * ldy),
                cpdit_buf_at(be, dy, (ptrdiff_t)r * ldy), (size_t)N);
    if (!st)
        st = be->sync(&err);
    CHECK_MSG(st == CPDIT_OK, "linear + act: %s", err.what);
    be->download_act(y2, dy, (size_t)M * ldy);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = b[j];
            for (int kk = 0; kk < K; kk++)
                s += (double)bf16_round(x[(size_t)i * K + kk]) * w[(size_t)j * K + kk];
            ref[(size_t)i * N + j] =
                0.5 * s * (1.0 + tanh(sqrt(2.0 / M_PI) * (s + 0.044715 * s * s * s)));
        }
    double d12 = 0, dref = 0, mx = 1e-30;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const size_t t = (size_t)i * ldy + j;
            d12 = fmax(d12, fabs(y1[t] - y2[t]));
            dref = fmax(dref, fabs(y1[t] - ref[(size_t)i * N + j]));
            mx = fmax(mx, fabs(ref[(size_t)i * N + j]));
        }
    printf("RESULT-LINACT %s M%d K%d N%d ldy%d: fused vs linear+act %.2e, vs reference %.2e\n",
           be->name, M, K, N, ldy, d12 / mx, dref / mx);
    worst_linact = fmax(worst_linact, dref / mx);
    CHECK(d12 / mx <= tol_pair);
    CHECK(dref / mx <= tol_ref);
    be->weight_free(wt);
    be->free(dx), be->free(db), be->free(dy);
    free(x), free(w), free(b), free(y1), free(y2), free(ref);
}

/* ------------------------------------------------------------------ bf16 convolution */

/* The table's conv2d with NATIVE (bf16, cuDNN tensor cores) vs F32 (exact) packed weights on a
 * band of rows with halo rows: the bf16 result within 1e-2 of the fp32 one (max-norm), and not
 * equal to it (the bf16 path really ran). */
static void run_conv_bf16(const cpdit_backend *be, int rows, int W, int Cin, int Cout, int K)
{
    const size_t nx = (size_t)(rows + 2) * W * Cin, nw = (size_t)Cout * Cin * K * K,
                 ny = (size_t)rows * W * Cout;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(Cout * 4), *y32 = malloc(ny * 4),
          *y16 = malloc(ny * 4);
    for (size_t i = 0; i < nx; i++)
        x[i] = urand();
    for (size_t i = 0; i < nw; i++)
        w[i] = urand() * 0.1f;
    for (int i = 0; i < Cout; i++)
        b[i] = urand();
    cpdit_buf *dx = cpdit_act_alloc(be, nx), *dy = cpdit_act_alloc(be, ny);
    float *db = be->alloc(Cout * 4);
    be->upload_act(dx, x, nx);
    be->upload(db, b, Cout * 4);
    /* the weights as a bf16 checkpoint stores them (NATIVE packs those in bf16) */
    uint16_t *wb = malloc(nw * 2);
    for (size_t i = 0; i < nw; i++) {
        w[i] = bf16_round(w[i]);
        uint32_t u;
        memcpy(&u, &w[i], 4);
        wb[i] = (uint16_t)(u >> 16);
    }
    float *p32 = be->conv2d_pack_stored(wb, CPDIT_DTYPE_BF16, Cout, Cin, K, CPDIT_WEIGHT_F32);
    float *p16 = be->conv2d_pack_stored(wb, CPDIT_DTYPE_BF16, Cout, Cin, K, CPDIT_WEIGHT_NATIVE);
    free(wb);
    CHECK(p32 && p16);
    cpdit_error err;
    cpdit_error_clear(&err);
    const cpdit_buf *x0 = cpdit_buf_at(be, dx, (ptrdiff_t)W * Cin); /* row 0; rows -1 and
                                                                         `rows` are the halo */
    cpdit_status st = be->conv2d(dy, x0, p32, db, W, Cin, Cout, K, 0, rows, NULL, &err);
    if (!st)
        st = be->sync(&err);
    CHECK_MSG(st == CPDIT_OK, "conv2d fp32: %s", err.what);
    be->download_act(y32, dy, ny);
    st = be->conv2d(dy, x0, p16, db, W, Cin, Cout, K, 0, rows, NULL, &err);
    if (!st)
        st = be->sync(&err);
    CHECK_MSG(st == CPDIT_OK, "conv2d bf16: %s", err.what);
    be->download_act(y16, dy, ny);
    double d = 0, mx = 1e-30;
    for (size_t i = 0; i < ny; i++) {
        d = fmax(d, fabs(y16[i] - y32[i]));
        mx = fmax(mx, fabs(y32[i]));
    }
    printf("RESULT-CONV %s bf16 vs fp32 weights rows %d W %d Cin %d Cout %d K %d: %.2e\n",
           be->name, rows, W, Cin, Cout, K, d / mx);
    worst_conv = fmax(worst_conv, d / mx);
    CHECK(d / mx <= 1e-2);
    CHECK(d > 0); /* the bf16 convolution ran, not the fp32 one */
    be->free(p32), be->free(p16), be->free(dx), be->free(db), be->free(dy);
    free(x), free(w), free(b), free(y32), free(y16);
}

int main(void)
{
    check_descriptors();
    if (test_failures)
        TEST_MAIN_END();
    if (cpdit_cuda_device_count() == 0)
        TEST_SKIP("no CUDA device (descriptor checks passed)");
    check_engines();
    const cpdit_backend *tables[] = {cpdit_backend_cuda(), cpdit_backend_cuda_fp32()};
    for (int ti = 0; ti < 2; ti++) {
        const cpdit_backend *be = tables[ti];
        run_attention(be, "cudnn", 2, 77, 133, 3, 64, 0, 0, 0, 2e-2);
        run_attention(be, "cudnn", 1, 300, 300, 4, 128, 1, 0, 0, 2e-2); /* fused qkv strides */
        run_attention(be, "cudnn", 1, 600, 700, 2, 128, 0, 0, 0, 2e-2);
        run_attention(be, "cudnn", 1, 5, 0, 2, 64, 0, 0, 0, 2e-2);      /* empty key block */
        run_attention(be, "cudnn", 1, 45, 45, 3, 64, 0, 1, 0, 1e-5);    /* bias: cuda-flash */
        run_attention(be, "cudnn", 1, 77, 77, 2, 64, 0, 0, 1, 1e-5);    /* causal: cuda-flash */
        run_attention(be, "auto", 1, 600, 700, 2, 128, 0, 0, 0, 2e-2);  /* times both */
        run_attention(be, "auto", 1, 600, 700, 2, 128, 0, 0, 0, 2e-2);  /* the kept choice */
        run_attention(be, "auto", 1, 77, 77, 2, 64, 0, 0, 1, 1e-5);     /* causal: cuda-flash */
        run_attention(be, "cuda-flash", 1, 300, 300, 4, 128, 1, 0, 0, 1e-5); /* fused qkv */
        run_attention(be, "cuda-reference", 1, 40, 50, 2, 512, 0, 0, 0, 1e-5); /* VAE's D */
        run_linear_act(be, 64, 128, 512, 512);
        run_linear_act(be, 300, 3072, 1024, 1024 + 3072); /* strided output, FLUX-like K */
        run_linear_act(be, 1, 33, 17, 17);
        run_conv_bf16(be, 7, 33, 64, 32, 3);
        run_conv_bf16(be, 16, 64, 128, 128, 3);
        run_conv_bf16(be, 5, 17, 32, 16, 1);
    }
    printf("RESULT: cudnn/auto vs fp64: out %.2e, lse %.2e (tol 2e-2); linear_act vs fp64 %.2e "
           "(tol 5e-3); bf16 conv vs fp32 %.2e (tol 1e-2)\n", worst_out, worst_lse, worst_linact,
           worst_conv);
    TEST_MAIN_END();
}
