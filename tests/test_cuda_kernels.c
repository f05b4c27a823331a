/* test_cuda_kernels.c — the CUDA attention (flash, with LSE), the LSE merge, the cuBLASLt
 * linear, the small ops and the VAE ops against plain double-precision loops on the host, for
 * both activation element types of the CUDA tables (fp32: "cuda-fp32", bf16: "cuda").
 * Tolerances: fp32 ≤ 1e-5 normalised error (1e-6 for add/mul/modulate/residual, 0 for copies);
 * bf16 ≤ 1e-2 (the reference sees the same bf16-rounded inputs, so only the one bf16 rounding
 * of the output, about 2^-9 relative, and fp32 accumulation order remain; copies exact).
 * Skips (77) without a GPU.
 */
#include "config.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/alloc_cuda.h"
#include "kernels/cuda/attention_flash_cuda.h"
#include "kernels/cuda/cuda_runtime_info.h"
#include "kernels/cuda/gemm_lt_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/vae_ops_cuda.h"
#include "tests/attention_ref.h"
#include "tests/test_util.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float urand(void) /* in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static uint16_t to_bf16(float f) /* round to nearest even */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Device copy of n floats as dtype; with bf16 the host values are rounded in place so the
 * reference sees what the GPU sees. */
static void *upload(float *h, size_t n, cpdit_cuda_dtype t)
{
    void *d = NULL;
    size_t es = t == CPDIT_CUDA_BF16 ? 2 : 4;
    CHECK(cudaMalloc(&d, (n ? n : 1) * es) == cudaSuccess);
    if (t == CPDIT_CUDA_BF16) {
        uint16_t *b = malloc((n ? n : 1) * 2);
        for (size_t i = 0; i < n; i++) {
            b[i] = to_bf16(h[i]);
            h[i] = from_bf16(b[i]);
        }
        cudaMemcpy(d, b, n * 2, cudaMemcpyHostToDevice);
        free(b);
    } else {
        cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice);
    }
    return d;
}

/* p + n elements of type t. */
static void *at(const void *p, size_t n, cpdit_cuda_dtype t)
{
    return (char *)(uintptr_t)p + n * cpdit_cuda_dtype_size(t);
}

static const char *tname(cpdit_cuda_dtype t)
{
    return t == CPDIT_CUDA_BF16 ? "bf16" : "f32";
}

static void download(float *h, const void *d, size_t n, cpdit_cuda_dtype t)
{
    if (t == CPDIT_CUDA_BF16) {
        uint16_t *b = malloc((n ? n : 1) * 2);
        cudaMemcpy(b, d, n * 2, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < n; i++)
            h[i] = from_bf16(b[i]);
        free(b);
    } else {
        cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost);
    }
}

/* max |a - b| / max |b| */
static double norm_err(const float *a, const double *b, size_t n)
{
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return num / den;
}

static void test_attention(cpdit_cuda_dtype t, int B, int Sq, int Sk, int H, int D, double tol)
{
    size_t nq = (size_t)B * Sq * H * D, nk = (size_t)B * Sk * H * D, nl = (size_t)B * Sq * H;
    float *q = malloc((nq + 1) * 4), *k = malloc((nk + 1) * 4), *v = malloc((nk + 1) * 4);
    float *o = malloc((nq + 1) * 4), *l = malloc((nl + 1) * 4);
    double *ro = malloc((nq + 1) * 8), *rl = malloc((nl + 1) * 8);
    for (size_t i = 0; i < nq; i++)
        q[i] = 2.0f * urand();
    for (size_t i = 0; i < nk; i++) {
        k[i] = 2.0f * urand();
        v[i] = urand();
    }
    void *dq = upload(q, nq, t), *dk = upload(k, nk, t), *dv = upload(v, nk, t);
    void *dout = NULL;
    float *dlse = NULL;
    CHECK(cudaMalloc(&dout, (nq + 1) * 4) == cudaSuccess);
    CHECK(cudaMalloc((void **)&dlse, (nl + 1) * 4) == cudaSuccess);
    float scale = 1.0f / sqrtf((float)D);
    CHECK(cpdit_cuda_attention_flash(t, dq, dk, dv, dout, dlse, B, Sq, Sk, H, D, scale, NULL) == 0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    download(o, dout, nq, t);
    cudaMemcpy(l, dlse, nl * 4, cudaMemcpyDeviceToHost);
    attention_ref(q, H * D, k, v, H * D, ro, rl, B, Sq, Sk, H, D, scale, NULL, 0);
    double eo = norm_err(o, ro, nq), el = 0;
    for (size_t i = 0; i < nl; i++)
        el = Sk ? fmax(el, fabs(l[i] - rl[i]) / fmax(1.0, fabs(rl[i]))) : (isinf(l[i]) ? 0 : 1);
    printf("attention %s B%d Sq%d Sk%d H%d D%d: out err %.2e, lse err %.2e\n",
           t == CPDIT_CUDA_BF16 ? "bf16" : "f32", B, Sq, Sk, H, D, eo, el);
    CHECK(eo <= tol);
    CHECK(el <= tol);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dlse);
    free(q), free(k), free(v), free(o), free(l), free(ro), free(rl);
}

/* Split the keys in two blocks, attend to each, merge by LSE: equals attending to all. */
static void test_merge(cpdit_cuda_dtype t, int Sq, int Sk1, int Sk2, int H, int D, double tol)
{
    int Sk = Sk1 + Sk2;
    size_t nq = (size_t)Sq * H * D, nk = (size_t)Sk * H * D, nl = (size_t)Sq * H;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *o = malloc(nq * 4);
    double *ro = malloc(nq * 8), *rl = malloc(nl * 8);
    for (size_t i = 0; i < nq; i++)
        q[i] = urand();
    for (size_t i = 0; i < nk; i++)
        k[i] = urand(), v[i] = urand();
    void *dq = upload(q, nq, t), *dk = upload(k, nk, t), *dv = upload(v, nk, t);
    void *o1, *o2;
    float *l1, *l2;
    cudaMalloc(&o1, nq * 4), cudaMalloc(&o2, nq * 4);
    cudaMalloc((void **)&l1, nl * 4), cudaMalloc((void **)&l2, nl * 4);
    float scale = 1.0f / sqrtf((float)D);
    size_t off = (size_t)Sk1 * H * D;
    CHECK(cpdit_cuda_attention_flash(t, dq, dk, dv, o1, l1, 1, Sq, Sk1, H, D, scale, NULL) == 0);
    CHECK(cpdit_cuda_attention_flash(t, dq, at(dk, off, t), at(dv, off, t), o2, l2, 1, Sq, Sk2,
                                     H, D, scale, NULL) == 0);
    CHECK(cpdit_cuda_lse_merge(t, o1, l1, o2, l2, Sq, H, D, NULL) == 0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    download(o, o1, nq, t);
    attention_ref(q, H * D, k, v, H * D, ro, rl, 1, Sq, Sk, H, D, scale, NULL, 0);
    double e = norm_err(o, ro, nq);
    printf("lse merge %s Sq%d Sk%d+%d: err %.2e\n", tname(t), Sq, Sk1, Sk2, e);
    CHECK(e <= tol);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(o1), cudaFree(o2), cudaFree(l1),
        cudaFree(l2);
    free(q), free(k), free(v), free(o), free(ro), free(rl);
}

static void test_linear(cpdit_gemm_lt *g, cpdit_cuda_dtype t, int M, int K, int N, int bias,
                        cpdit_gemm_epilogue epi, double tol)
{
    size_t nx = (size_t)M * K, nw = (size_t)N * K, ny = (size_t)M * N;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)N * 4), *y = malloc(ny * 4);
    double *r = malloc(ny * 8);
    for (size_t i = 0; i < nx; i++)
        x[i] = urand();
    for (size_t i = 0; i < nw; i++)
        w[i] = urand() / sqrtf((float)K);
    for (int i = 0; i < N; i++)
        b[i] = urand();
    void *dx = upload(x, nx, t), *dw = upload(w, nw, t), *db = bias ? upload(b, N, t) : NULL;
    void *dy = NULL;
    cudaMalloc(&dy, ny * 4);
    char msg[256] = "";
    int rc = cpdit_gemm_lt_linear(g, t, dy, dx, dw, db, M, K, N, epi, NULL, msg, sizeof msg);
    if (rc)
        fprintf(stderr, "%s\n", msg);
    CHECK(rc == 0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    download(y, dy, ny, t);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = bias ? b[j] : 0.0;
            for (int kk = 0; kk < K; kk++)
                acc += (double)x[(size_t)i * K + kk] * w[(size_t)j * K + kk];
            if (epi == CPDIT_GEMM_GELU_TANH)
                acc = 0.5 * acc * (1.0 + tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
            r[(size_t)i * N + j] = acc;
        }
    double e = norm_err(y, r, ny);
    printf("linear %s M%d K%d N%d bias %d gelu %d: err %.2e\n",
           t == CPDIT_CUDA_BF16 ? "bf16" : "f32", M, K, N, bias, epi == CPDIT_GEMM_GELU_TANH, e);
    CHECK(e <= tol);
    cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dy);
    free(x), free(w), free(b), free(y), free(r);
}

/* The "cuda" table's linear: y (M, N) bf16 with row stride ldy = [y +] x (M, K) bf16 with row
 * stride ldx · W^T + b (fp32), one cuBLASLt call (bf16 in and out, fp32 accumulate and bias);
 * against double loops on the bf16-rounded x, W and initial y; ≤ 1e-2. */
static void test_linear_bf16_out(cpdit_gemm_lt *g, int M, int K, int N, int ldx, int ldy,
                                 int accumulate, int bias, cpdit_gemm_epilogue epi)
{
    size_t nx = (size_t)M * ldx, nw = (size_t)N * K, ny = (size_t)M * ldy;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)N * 4),
          *y = malloc(ny * 4), *y0 = malloc(ny * 4);
    double *r = malloc(ny * 8);
    for (size_t i = 0; i < nx; i++)
        x[i] = urand();
    for (size_t i = 0; i < nw; i++)
        w[i] = urand() / sqrtf((float)K);
    for (int i = 0; i < N; i++)
        b[i] = urand(); /* fp32, not rounded: the bias is an fp32 parameter */
    for (size_t i = 0; i < ny; i++)
        y0[i] = urand();
    void *dx = upload(x, nx, CPDIT_CUDA_BF16), *dw = upload(w, nw, CPDIT_CUDA_BF16),
         *dy = upload(y0, ny, CPDIT_CUDA_BF16);
    float *db = bias ? upload(b, N, CPDIT_CUDA_F32) : NULL;
    char msg[256] = "";
    int rc = cpdit_gemm_lt_linear_typed(g, CPDIT_CUDA_BF16, CPDIT_CUDA_BF16, dy, ldy, dx, ldx, dw,
                                        db, M, K, N, accumulate, epi, NULL, msg, sizeof msg);
    if (rc)
        fprintf(stderr, "%s\n", msg);
    CHECK(rc == 0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    download(y, dy, ny, CPDIT_CUDA_BF16);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldy; j++) {
            double acc = bias ? b[j < N ? j : 0] : 0.0;
            for (int kk = 0; kk < K && j < N; kk++)
                acc += (double)x[(size_t)i * ldx + kk] * w[(size_t)j * K + kk];
            if (epi == CPDIT_GEMM_GELU_TANH)
                acc = 0.5 * acc *
                      (1.0 + tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
            /* columns past N are not written */
            r[(size_t)i * ldy + j] = j >= N ? y0[(size_t)i * ldy + j]
                                            : acc + (accumulate ? y0[(size_t)i * ldy + j] : 0.0);
        }
    double e = norm_err(y, r, ny);
    printf("linear bf16 -> bf16 M%d K%d N%d ldx %d ldy %d acc %d bias %d gelu %d: err %.2e\n", M,
           K, N, ldx, ldy, accumulate, bias, epi == CPDIT_GEMM_GELU_TANH, e);
    CHECK(e <= 1e-2);
    cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dy);
    free(x), free(w), free(b), free(y), free(y0), free(r);
}

/* Strided q/k/v (column blocks of one fused qkv buffer), a T5-style bias, CLIP's causal mask. */
static void test_attention_options(int B, int S, int H, int D, int with_bias, int causal)
{
    int ld = 3 * H * D; /* fused (B, S, 3, H, D) */
    size_t nqkv = (size_t)B * S * ld, n = (size_t)B * S * H * D, nl = (size_t)B * S * H;
    float *qkv = malloc(nqkv * 4), *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4);
    float *bias = with_bias ? malloc((size_t)H * S * S * 4) : NULL, *o = malloc(n * 4);
    double *ro = malloc(n * 8), *rl = malloc(nl * 8);
    for (size_t i = 0; i < nqkv; i++)
        qkv[i] = urand();
    for (size_t t = 0; t < (size_t)B * S; t++)
        for (int c = 0; c < H * D; c++) {
            q[t * H * D + c] = qkv[t * ld + c];
            k[t * H * D + c] = qkv[t * ld + H * D + c];
            v[t * H * D + c] = qkv[t * ld + 2 * H * D + c];
        }
    if (bias)
        for (size_t i = 0; i < (size_t)H * S * S; i++)
            bias[i] = 3.0f * urand();
    float *dqkv = upload(qkv, nqkv, CPDIT_CUDA_F32), *dbias = bias ? upload(bias, (size_t)H * S * S, CPDIT_CUDA_F32) : NULL;
    float *dout, *dlse;
    cudaMalloc((void **)&dout, n * 4), cudaMalloc((void **)&dlse, nl * 4);
    cpdit_cuda_attention a = {B, S, S, H, D, ld, ld, 0, 1.0f / sqrtf((float)D), dbias, causal};
    CHECK(cpdit_cuda_attention_flash_ex(CPDIT_CUDA_F32, dqkv, dqkv + H * D, dqkv + 2 * H * D, dout,
                                        dlse, &a, NULL) == 0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(o, dout, n * 4, cudaMemcpyDeviceToHost);
    attention_ref(q, H * D, k, v, H * D, ro, rl, B, S, S, H, D, a.scale, bias, causal);
    double e = norm_err(o, ro, n);
    printf("attention strided bias %d causal %d B%d S%d H%d D%d: err %.2e\n", with_bias, causal, B,
           S, H, D, e);
    CHECK(e <= 1e-5);
    cudaFree(dqkv), cudaFree(dbias), cudaFree(dout), cudaFree(dlse);
    free(qkv), free(q), free(k), free(v), free(bias), free(o), free(ro), free(rl);
}

/* The small ops of activation type t against host loops (fp32: ≤ 1e-5 normalised, expf/tanhf
 * ulps; bf16: ≤ 1e-2, one rounding of the output). Parameters (gamma, beta, RoPE tables, the
 * embedding table) are fp32; shift, scale and gate are activations of t. */
static void test_small_ops(cpdit_cuda_dtype t)
{
    enum { ROWS = 37, DIM = 300, S = 11, H = 3, D = 64, VOCAB = 50 };
    const double tol = t == CPDIT_CUDA_BF16 ? 1e-2 : 1e-5;
    const double tol_sum = t == CPDIT_CUDA_BF16 ? 1e-2 : 1e-6;
    size_t n = (size_t)ROWS * DIM;
    float *x = malloc(n * 4), *x2 = malloc(n * 4), *g = malloc(DIM * 4), *b = malloc(DIM * 4),
          *y = malloc(n * 4);
    double *r = malloc(n * 8);
    for (size_t i = 0; i < n; i++)
        x[i] = 3.0f * urand(), x2[i] = urand();
    for (int i = 0; i < DIM; i++)
        g[i] = urand(), b[i] = urand();
    /* g, b rounded first when t is bf16, so their fp32 and activation copies agree */
    void *dga = upload(g, DIM, t), *dba = upload(b, DIM, t);
    void *dx = upload(x, n, t), *dx2 = upload(x2, n, t), *dy;
    float *dg = upload(g, DIM, CPDIT_CUDA_F32), *db = upload(b, DIM, CPDIT_CUDA_F32);
    cudaMalloc(&dy, n * 4);
    /* layer norm */
    CHECK(cpdit_cuda_layer_norm(t, dy, dx, dg, db, ROWS, DIM, 1e-6f, NULL) == 0);
    download(y, dy, n, t);
    for (int rr = 0; rr < ROWS; rr++) {
        double m = 0, var = 0;
        for (int i = 0; i < DIM; i++)
            m += x[rr * DIM + i];
        m /= DIM;
        for (int i = 0; i < DIM; i++)
            var += (x[rr * DIM + i] - m) * (x[rr * DIM + i] - m);
        var /= DIM;
        for (int i = 0; i < DIM; i++)
            r[rr * DIM + i] = (x[rr * DIM + i] - m) / sqrt(var + 1e-6) * g[i] + b[i];
    }
    printf("layer norm %s: err %.2e\n", tname(t), norm_err(y, r, n));
    CHECK(norm_err(y, r, n) <= tol);
    /* rms norm */
    CHECK(cpdit_cuda_rms_norm(t, dy, dx, dg, ROWS, DIM, 1e-6f, NULL) == 0);
    download(y, dy, n, t);
    for (int rr = 0; rr < ROWS; rr++) {
        double ms = 0;
        for (int i = 0; i < DIM; i++)
            ms += (double)x[rr * DIM + i] * x[rr * DIM + i];
        ms /= DIM;
        for (int i = 0; i < DIM; i++)
            r[rr * DIM + i] = x[rr * DIM + i] / sqrt(ms + 1e-6) * g[i];
    }
    CHECK(norm_err(y, r, n) <= tol);
    /* activations */
    for (int kind = 0; kind <= CPDIT_CUDA_ACT_RELU; kind++) {
        CHECK(cpdit_cuda_act(t, kind, dy, dx, n, NULL) == 0);
        download(y, dy, n, t);
        for (size_t i = 0; i < n; i++) {
            double u = x[i];
            r[i] = kind == CPDIT_CUDA_ACT_GELU_TANH
                       ? 0.5 * u * (1 + tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)))
                   : kind == CPDIT_CUDA_ACT_GELU_ERF   ? 0.5 * u * (1 + erf(u / sqrt(2.0)))
                   : kind == CPDIT_CUDA_ACT_QUICK_GELU ? u / (1 + exp(-1.702 * u))
                   : kind == CPDIT_CUDA_ACT_SILU       ? u / (1 + exp(-u))
                                                       : (u > 0 ? u : 0);
        }
        double e = norm_err(y, r, n);
        printf("act %s %d: err %.2e\n", tname(t), kind, e);
        CHECK(e <= tol);
    }
    /* add, mul (in place on a copy); with bf16 the sum is rounded before the product */
    CHECK(cpdit_cuda_add(t, dy, dx, dx2, n, NULL) == 0);
    download(y, dy, n, t);
    for (size_t i = 0; i < n; i++)
        r[i] = (double)x[i] + x2[i];
    CHECK(norm_err(y, r, n) <= tol_sum);
    float *sum = malloc(n * 4);
    memcpy(sum, y, n * 4);
    CHECK(cpdit_cuda_mul(t, dy, dy, dx2, n, NULL) == 0);
    download(y, dy, n, t);
    for (size_t i = 0; i < n; i++)
        r[i] = (double)sum[i] * x2[i];
    CHECK(norm_err(y, r, n) <= tol_sum);
    free(sum);
    /* modulate with shift g, scale b */
    CHECK(cpdit_cuda_modulate(t, dy, dx, dga, dba, ROWS, DIM, NULL) == 0);
    download(y, dy, n, t);
    for (size_t i = 0; i < n; i++)
        r[i] = (double)x[i] * (1 + b[i % DIM]) + g[i % DIM];
    CHECK(norm_err(y, r, n) <= tol_sum);
    /* gated residual over the first DIM/2 columns with strides */
    cudaMemcpy(dy, dx2, n * cpdit_cuda_dtype_size(t), cudaMemcpyDeviceToDevice);
    CHECK(cpdit_cuda_gated_residual(t, dy, DIM, dx, DIM, dga, ROWS, DIM / 2, NULL) == 0);
    download(y, dy, n, t);
    for (size_t i = 0; i < n; i++)
        r[i] = (i % DIM) < DIM / 2 ? (double)x2[i] + (double)g[i % DIM] * x[i] : x2[i];
    CHECK(norm_err(y, r, n) <= tol_sum);
    /* copy rows: a (ROWS, 10) block from column 5 of x into column 7 of y */
    cudaMemset(dy, 0, n * 4);
    CHECK(cpdit_cuda_copy_rows(t, at(dy, 7, t), DIM, at(dx, 5, t), DIM, ROWS, 10, NULL) == 0);
    download(y, dy, n, t);
    for (size_t i = 0; i < n; i++) {
        size_t c = i % DIM;
        r[i] = (c >= 7 && c < 17) ? x[i - 7 + 5] : 0.0;
    }
    CHECK(norm_err(y, r, n) <= 0);
    /* rope on (S, H, D) with a (S, D) table */
    {
        size_t nx = (size_t)S * H * D;
        float *xr = malloc(nx * 4), *c = malloc((size_t)S * D * 4), *sn = malloc((size_t)S * D * 4);
        for (size_t i = 0; i < nx; i++)
            xr[i] = urand();
        for (int s2 = 0; s2 < S; s2++)
            for (int i = 0; i < D / 2; i++) {
                double ang = s2 * pow(10000.0, -2.0 * i / D);
                c[s2 * D + 2 * i] = c[s2 * D + 2 * i + 1] = (float)cos(ang);
                sn[s2 * D + 2 * i] = sn[s2 * D + 2 * i + 1] = (float)sin(ang);
            }
        void *dt = upload(xr, nx, t);
        float *dc = upload(c, (size_t)S * D, CPDIT_CUDA_F32),
              *ds = upload(sn, (size_t)S * D, CPDIT_CUDA_F32);
        CHECK(cpdit_cuda_rope(t, dt, dc, ds, S, H, D, NULL) == 0);
        download(y, dt, nx, t);
        for (int s2 = 0; s2 < S; s2++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < D / 2; i++) {
                    size_t o = ((size_t)s2 * H + h) * D + 2 * i;
                    double a0 = xr[o], b0 = xr[o + 1];
                    r[o] = a0 * c[s2 * D + 2 * i] - b0 * sn[s2 * D + 2 * i];
                    r[o + 1] = b0 * c[s2 * D + 2 * i + 1] + a0 * sn[s2 * D + 2 * i + 1];
                }
        CHECK(norm_err(y, r, nx) <= (t == CPDIT_CUDA_BF16 ? 1e-2 : 1e-6));
        cudaFree(dt), cudaFree(dc), cudaFree(ds);
        free(xr), free(c), free(sn);
    }
    /* embedding gather from an fp32 table (unrounded values: bf16 rounds them once) */
    {
        int32_t ids[5] = {3, 0, 49, 3, 17};
        int32_t *dids;
        float *tab = malloc(VOCAB * 6 * 4);
        for (int i = 0; i < VOCAB * 6; i++)
            tab[i] = urand();
        float *dtab = upload(tab, VOCAB * 6, CPDIT_CUDA_F32);
        cudaMalloc((void **)&dids, sizeof ids);
        cudaMemcpy(dids, ids, sizeof ids, cudaMemcpyHostToDevice);
        CHECK(cpdit_cuda_embedding(t, dy, dtab, dids, 5, 6, NULL) == 0);
        download(y, dy, 30, t);
        for (int i = 0; i < 5; i++)
            for (int c = 0; c < 6; c++)
                r[i * 6 + c] = tab[ids[i] * 6 + c];
        CHECK(norm_err(y, r, 30) <= (t == CPDIT_CUDA_BF16 ? 1.0 / 256 : 0));
        cudaFree(dids), cudaFree(dtab);
        free(tab);
    }
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaFree(dx), cudaFree(dx2), cudaFree(dg), cudaFree(db), cudaFree(dy);
    cudaFree(dga), cudaFree(dba);
    free(x), free(x2), free(g), free(b), free(y), free(r);
}

/* A sampler-step-like pattern twice: the second pass is served from the cache. */
static void test_allocator(void)
{
    CHECK(cpdit_cuda_alloc_class(1) == 512 && cpdit_cuda_alloc_class(513) == 1024);
    CHECK(cpdit_cuda_alloc_class((1 << 20) + 1) == 2u << 20);
    CHECK(cpdit_cuda_alloc_class((size_t)65 << 20) == (size_t)72 << 20);
    size_t sizes[] = {100, 4096, 3 << 20, 100, 70u << 20, 0, 12345};
    enum { N = sizeof sizes / sizeof sizes[0] };
    cpdit_cuda_alloc_stats a, b;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            cpdit_cuda_alloc_get_stats(&a);
        void *p[N];
        for (int i = 0; i < N; i++) {
            p[i] = cpdit_cuda_alloc(sizes[i]);
            CHECK(p[i] != NULL && ((uintptr_t)p[i] & 255) == 0);
            CHECK(cudaMemset(p[i], 0, sizes[i]) == cudaSuccess);
        }
        for (int i = 0; i < N; i++)
            for (int j = 0; j < i; j++)
                CHECK(p[i] != p[j]);
        for (int i = N - 1; i >= 0; i--)
            cpdit_cuda_free(p[i]);
    }
    cpdit_cuda_alloc_get_stats(&b);
    printf("allocator: %zu cudaMalloc, %zu hits, peak %zu bytes\n", b.device_allocs, b.cache_hits,
           b.peak_bytes);
    CHECK(b.device_allocs == a.device_allocs); /* no cudaMalloc in the second pass */
    CHECK(b.cache_hits >= a.cache_hits + N);
    CHECK(b.bytes_in_use == 0);
    cpdit_cuda_alloc_trim();
    cpdit_cuda_alloc_get_stats(&b);
    CHECK(b.bytes_cached == 0);
}

/* VAE ops on activations of type t: a 3x3 and a 1x1 convolution over a band of rows with
 * halos (fp32 weights: the exact convolution, rounded once for bf16; with bf16 activations
 * also bf16 weights through cuDNN's bf16 convolution), GroupNorm + SiLU from moments in
 * double, nearest 2x upsampling and a transpose, against host loops. */
static void test_vae_ops(cpdit_cuda_dtype t)
{
    enum { ROWS = 9, W = 13, CIN = 24, COUT = 20, G = 4 };
    const double tol = t == CPDIT_CUDA_BF16 ? 1e-2 : 1e-5;
    size_t nx = (size_t)(ROWS + 2) * W * CIN, ny = (size_t)ROWS * W * COUT;
    float *x = malloc(nx * 4), *w3 = malloc((size_t)COUT * CIN * 9 * 4),
          *w1 = malloc((size_t)COUT * CIN * 4), *b = malloc(COUT * 4), *y = malloc(ny * 4);
    double *r = malloc((ny > nx ? ny : nx) * 4 * 8);
    for (size_t i = 0; i < nx; i++)
        x[i] = urand();
    for (int rr = 0; rr < W * CIN; rr++) /* the top and bottom halo rows are zero (image edges) */
        x[rr] = x[nx - 1 - rr] = 0.0f;
    for (int i = 0; i < COUT * CIN * 9; i++)
        w3[i] = urand() / 10;
    for (int i = 0; i < COUT * CIN; i++)
        w1[i] = urand() / 5;
    for (int i = 0; i < COUT; i++)
        b[i] = urand();
    void *dx = upload(x, nx, t), *dy;
    float *p3 = cpdit_cuda_conv2d_pack(w3, COUT, CIN, 3),
          *p1 = cpdit_cuda_conv2d_pack(w1, COUT, CIN, 1), *db = upload(b, COUT, CPDIT_CUDA_F32);
    CHECK(p3 && p1);
    cudaMalloc(&dy, ny * 4);
    cudaMemset(dy, 0, ny * 4);
    const void *x0 = at(dx, (size_t)W * CIN, t); /* row 0 of the band; row -1 is the zero halo */
    /* two calls: rows [0, 4) and [4, ROWS), as a caller overlapping halos would split it */
    CHECK(cpdit_cuda_conv2d(t, dy, x0, p3, CPDIT_CUDA_F32, db, W, CIN, COUT, 3, 0, 4, NULL) == 0);
    CHECK(cpdit_cuda_conv2d(t, dy, x0, p3, CPDIT_CUDA_F32, db, W, CIN, COUT, 3, 4, ROWS, NULL) ==
          0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    download(y, dy, ny, t);
    for (int rr = 0; rr < ROWS; rr++)
        for (int i = 0; i < W; i++)
            for (int co = 0; co < COUT; co++) {
                double acc = b[co];
                for (int ky = 0; ky < 3; ky++)
                    for (int kx = 0; kx < 3; kx++) {
                        int xr = rr + ky - 1, xc = i + kx - 1;
                        if (xc < 0 || xc >= W)
                            continue;
                        for (int ci = 0; ci < CIN; ci++)
                            acc += (double)x[((size_t)(xr + 1) * W + xc) * CIN + ci] *
                                   w3[((co * CIN + ci) * 3 + ky) * 3 + kx];
                    }
                r[((size_t)rr * W + i) * COUT + co] = acc;
            }
    double e = norm_err(y, r, ny);
    printf("conv2d %s 3x3 NHWC (two bands): err %.2e\n", tname(t), e);
    CHECK(e <= tol);
    if (t == CPDIT_CUDA_BF16) { /* bf16 weights: x and w bf16, fp32 sums; w rounded as packed */
        float *w3b = malloc((size_t)COUT * CIN * 9 * 4);
        void *scratch = upload(memcpy(w3b, w3, (size_t)COUT * CIN * 9 * 4), (size_t)COUT * CIN * 9,
                               CPDIT_CUDA_BF16); /* rounds w3b on the host */
        void *p3b = cpdit_cuda_conv2d_pack_bf16(w3b, COUT, CIN, 3);
        CHECK(p3b != NULL);
        CHECK(cpdit_cuda_conv2d(t, dy, x0, p3b, CPDIT_CUDA_BF16, db, W, CIN, COUT, 3, 0, ROWS,
                                NULL) == 0);
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        download(y, dy, ny, t);
        for (int rr = 0; rr < ROWS; rr++)
            for (int i = 0; i < W; i++)
                for (int co = 0; co < COUT; co++) {
                    double acc = b[co];
                    for (int ky = 0; ky < 3; ky++)
                        for (int kx = 0; kx < 3; kx++) {
                            int xr = rr + ky - 1, xc = i + kx - 1;
                            if (xc < 0 || xc >= W)
                                continue;
                            for (int ci = 0; ci < CIN; ci++)
                                acc += (double)x[((size_t)(xr + 1) * W + xc) * CIN + ci] *
                                       w3b[((co * CIN + ci) * 3 + ky) * 3 + kx];
                        }
                    r[((size_t)rr * W + i) * COUT + co] = acc;
                }
        e = norm_err(y, r, ny);
        printf("conv2d bf16 weights 3x3: err %.2e\n", e);
        CHECK(e <= 1e-2);
        cpdit_cuda_free(p3b);
        cudaFree(scratch);
        free(w3b);
    }
    CHECK(cpdit_cuda_conv2d(t, dy, x0, p1, CPDIT_CUDA_F32, NULL, W, CIN, COUT, 1, 0, ROWS, NULL) ==
          0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    download(y, dy, ny, t);
    for (size_t px = 0; px < (size_t)ROWS * W; px++)
        for (int co = 0; co < COUT; co++) {
            double acc = 0;
            for (int ci = 0; ci < CIN; ci++)
                acc += (double)x[(px + W) * CIN + ci] * w1[co * CIN + ci];
            r[px * COUT + co] = acc;
        }
    e = norm_err(y, r, ny);
    printf("conv2d %s 1x1: err %.2e\n", tname(t), e);
    CHECK(e <= tol);
    /* GroupNorm + SiLU over the band (pixels = ROWS*W, C = CIN) */
    size_t pixels = (size_t)ROWS * W, nb = pixels * CIN;
    double *dacc, *dmean, *drstd, mean[G], var[G], rstd[G];
    cudaMalloc((void **)&dacc, G * 8), cudaMalloc((void **)&dmean, G * 8);
    cudaMalloc((void **)&drstd, G * 8);
    cudaMemset(dacc, 0, G * 8);
    CHECK(cpdit_cuda_group_moments(t, dacc, x0, pixels, CIN, G, NULL, NULL) == 0);
    cudaMemcpy(mean, dacc, G * 8, cudaMemcpyDeviceToHost);
    for (int g = 0; g < G; g++)
        mean[g] /= (double)pixels * (CIN / G);
    cudaMemcpy(dmean, mean, G * 8, cudaMemcpyHostToDevice);
    cudaMemset(dacc, 0, G * 8);
    CHECK(cpdit_cuda_group_moments(t, dacc, x0, pixels, CIN, G, dmean, NULL) == 0);
    cudaMemcpy(var, dacc, G * 8, cudaMemcpyDeviceToHost);
    for (int g = 0; g < G; g++) {
        double hm = 0, hv = 0;
        for (size_t px = 0; px < pixels; px++)
            for (int c = g * (CIN / G); c < (g + 1) * (CIN / G); c++)
                hm += x[(px + W) * CIN + c];
        hm /= (double)pixels * (CIN / G);
        for (size_t px = 0; px < pixels; px++)
            for (int c = g * (CIN / G); c < (g + 1) * (CIN / G); c++)
                hv += (x[(px + W) * CIN + c] - hm) * (x[(px + W) * CIN + c] - hm);
        CHECK(fabs(mean[g] - hm) <= 1e-12 && fabs(var[g] - hv) <= 1e-9 * fmax(1, hv));
        rstd[g] = 1.0 / sqrt(var[g] / ((double)pixels * (CIN / G)) + 1e-6);
    }
    cudaMemcpy(drstd, rstd, G * 8, cudaMemcpyHostToDevice);
    float *dgam = upload(w1, CIN, CPDIT_CUDA_F32), *dbet = upload(b, CIN < COUT ? CIN : COUT, CPDIT_CUDA_F32);
    void *dn;
    cudaMalloc(&dn, nb * 4);
    CHECK(cpdit_cuda_group_norm_apply(t, dn, x0, pixels, CIN, G, dmean, drstd, dgam, NULL,
                                      CPDIT_CUDA_VAE_ACT_SILU, NULL) == 0);
    float *hn = malloc(nb * 4);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    download(hn, dn, nb, t);
    for (size_t i = 0; i < nb; i++) {
        int c = (int)(i % CIN), g = c / (CIN / G);
        double v = (x[i + (size_t)W * CIN] - mean[g]) * rstd[g] * w1[c];
        r[i] = v / (1 + exp(-v));
    }
    e = norm_err(hn, r, nb);
    printf("group norm + silu %s: err %.2e\n", tname(t), e);
    CHECK(e <= tol);
    /* upsample 2x of the band, and transpose of (pixels, CIN): elements moved exactly */
    void *du;
    float *hu = malloc(nb * 4 * 4);
    cudaMalloc(&du, nb * 4 * 4);
    CHECK(cpdit_cuda_upsample2x(t, du, x0, ROWS, W, CIN, NULL) == 0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    download(hu, du, nb * 4, t);
    for (int rr = 0; rr < 2 * ROWS; rr++)
        for (int i = 0; i < 2 * W; i++)
            for (int c = 0; c < CIN; c++)
                r[((size_t)rr * 2 * W + i) * CIN + c] = x[((size_t)(rr / 2 + 1) * W + i / 2) * CIN + c];
    CHECK(norm_err(hu, r, nb * 4) <= 0);
    CHECK(cpdit_cuda_transpose(t, du, x0, pixels, CIN, NULL) == 0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    download(hu, du, nb, t);
    for (size_t px = 0; px < pixels; px++)
        for (int c = 0; c < CIN; c++)
            r[(size_t)c * pixels + px] = x[(px + W) * CIN + c];
    CHECK(norm_err(hu, r, nb) <= 0);
    cpdit_cuda_free(p3), cpdit_cuda_free(p1);
    cudaFree(dx), cudaFree(dy), cudaFree(db), cudaFree(dacc), cudaFree(dmean), cudaFree(drstd);
    cudaFree(dgam), cudaFree(dbet), cudaFree(dn), cudaFree(du);
    free(x), free(w3), free(w1), free(b), free(y), free(r), free(hn), free(hu);
}

int main(void)
{
    if (cpdit_cuda_device_count() == 0)
        TEST_SKIP("no CUDA device");
    /* odd sizes, a partial last key tile, Sk = 0, every supported head dim class */
    test_attention(CPDIT_CUDA_F32, 1, 1, 1, 1, 32, 1e-5);
    test_attention(CPDIT_CUDA_F32, 2, 37, 53, 3, 64, 1e-5);
    test_attention(CPDIT_CUDA_F32, 1, 5, 0, 2, 32, 1e-5);
    test_attention(CPDIT_CUDA_F32, 1, 129, 300, 2, 128, 1e-5);
    test_attention(CPDIT_CUDA_F32, 1, 17, 40, 1, 256, 1e-5);
    test_attention(CPDIT_CUDA_BF16, 1, 200, 333, 4, 128, 1e-2);
    test_attention(CPDIT_CUDA_BF16, 2, 37, 53, 3, 64, 1e-2);
    test_attention(CPDIT_CUDA_BF16, 1, 5, 0, 2, 32, 1e-2);
    CHECK(cpdit_cuda_attention_flash(CPDIT_CUDA_F32, NULL, NULL, NULL, NULL, NULL, 1, 1, 1, 1, 48,
                                     1.0f, NULL) != 0); /* D not a multiple of 32 */
    test_attention_options(2, 45, 3, 64, 1, 0); /* T5: bias */
    test_attention_options(1, 77, 2, 64, 0, 1); /* CLIP: causal */
    test_attention_options(1, 70, 2, 32, 1, 1);
    test_small_ops(CPDIT_CUDA_F32);
    test_small_ops(CPDIT_CUDA_BF16);
    test_allocator();
    test_vae_ops(CPDIT_CUDA_F32);
    test_vae_ops(CPDIT_CUDA_BF16);
    test_merge(CPDIT_CUDA_F32, 33, 40, 1, 2, 64, 1e-5);
    test_merge(CPDIT_CUDA_F32, 64, 100, 77, 3, 128, 1e-5);
    test_merge(CPDIT_CUDA_BF16, 64, 100, 77, 3, 128, 1e-2);
    char msg[256] = "";
    cpdit_gemm_lt *g = cpdit_gemm_lt_create(0, msg, sizeof msg);
    if (!g)
        fprintf(stderr, "%s\n", msg);
    CHECK(g != NULL);
    if (g) {
        test_linear(g, CPDIT_CUDA_F32, 7, 64, 40, 1, CPDIT_GEMM_PLAIN, 1e-5);
        test_linear(g, CPDIT_CUDA_F32, 128, 256, 96, 0, CPDIT_GEMM_PLAIN, 1e-5);
        test_linear(g, CPDIT_CUDA_BF16, 256, 512, 384, 1, CPDIT_GEMM_PLAIN, 1e-2);
        test_linear(g, CPDIT_CUDA_BF16, 64, 128, 512, 1, CPDIT_GEMM_GELU_TANH, 1e-2);
        test_linear(g, CPDIT_CUDA_BF16, 256, 512, 384, 1, CPDIT_GEMM_PLAIN, 1e-2); /* cached */
        CHECK(cpdit_gemm_lt_cached_shapes(g) == 4);
        /* the bf16 table's forms: plain, strided column blocks with accumulate, GELU epilogue */
        test_linear_bf16_out(g, 77, 256, 96, 256, 96, 0, 1, CPDIT_GEMM_PLAIN);
        test_linear_bf16_out(g, 64, 128, 64, 3 * 128, 2 * 64, 1, 1, CPDIT_GEMM_PLAIN);
        test_linear_bf16_out(g, 64, 128, 512, 128, 512, 0, 1, CPDIT_GEMM_GELU_TANH);
        test_linear_bf16_out(g, 33, 64, 40, 64, 40, 1, 0, CPDIT_GEMM_PLAIN);
        /* which bias form cuBLASLt took with a bf16 output (both are correct; for the record) */
        printf("RESULT: linear bf16 -> bf16: fp32 bias %s (%ld bf16 bias copies)\n",
               cpdit_gemm_lt_bias_copies(g) ? "refused, bf16 copy used" : "taken as fp32",
               cpdit_gemm_lt_bias_copies(g));
        cpdit_gemm_lt_destroy(g);
    }
    TEST_MAIN_END();
}
