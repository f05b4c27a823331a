/* cuda_bench.c — GPU rates that set the floors of the device checks: the cuBLASLt bf16 linear at
 * FLUX.1-dev shapes and the flash attention kernel at FLUX.1-dev's joint sequence
 * (4096 image + 512 text tokens, 24 heads x 128), then the same through both CUDA tables
 * ("cuda": bf16 activations, "cuda-fp32"). Prints one table row per case:
 *   case, shape, ms (min of iterations after warm-up), TFLOP/s.
 * Not a test (prints, never fails on speed); exits 77 without a GPU.
 */
#include "config.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cuda/attention_flash_cuda.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_runtime_info.h"
#include "kernels/cuda/gemm_lt_cuda.h"

enum { WARMUP = 3, ITERS = 10 };

static float time_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms;
}

/* Value i of the benchmark inputs, in [-1, 1): tensor cores draw less power (and clock
 * higher) on all-zero operands, so rates timed on zeros overstate what real weights get. */
static float bench_value(size_t i)
{
    return (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
}

static uint16_t bf16_bits(float f) /* truncation is fine for benchmark data */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* n elements of es bytes (2: bf16, 4: fp32) of bench values in device memory. */
static void *dev_filled(size_t n, size_t es)
{
    const size_t bytes = n ? n * es : es;
    void *p = NULL, *h = malloc(bytes);
    if (!h || cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "cuda_bench: allocating %zu bytes failed\n", n * es);
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        if (es == 2)
            ((uint16_t *)h)[i] = bf16_bits(bench_value(i));
        else
            ((float *)h)[i] = bench_value(i);
    cudaMemcpy(p, h, n * es, cudaMemcpyHostToDevice);
    free(h);
    return p;
}

static void bench_linear(cpdit_gemm_lt *g, int M, int K, int N)
{
    void *x = dev_filled((size_t)M * K, 2), *w = dev_filled((size_t)N * K, 2),
         *y = dev_filled((size_t)M * N, 2), *b = dev_filled((size_t)N, 2);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    char msg[256];
    for (int it = 0; it < WARMUP + ITERS; it++) {
        cudaEventRecord(e0, NULL);
        if (cpdit_gemm_lt_linear(g, CPDIT_CUDA_BF16, y, x, w, b, M, K, N, CPDIT_GEMM_PLAIN, NULL,
                                 msg, sizeof msg)) {
            fprintf(stderr, "cuda_bench: %s\n", msg);
            exit(1);
        }
        cudaEventRecord(e1, NULL);
        cudaEventSynchronize(e1);
        if (it >= WARMUP && time_ms(e0, e1) < best)
            best = time_ms(e0, e1);
    }
    double flop = 2.0 * M * K * N;
    printf("%-22s %-24s %10.3f %10.1f\n", "linear bf16", "", best, flop / (best * 1e-3) / 1e12);
    printf("  (M %d, K %d, N %d)\n", M, K, N);
    cudaFree(x), cudaFree(w), cudaFree(y), cudaFree(b);
}

static void bench_attention(cpdit_cuda_dtype t, int S, int H, int D)
{
    size_t es = t == CPDIT_CUDA_BF16 ? 2 : 4, n = (size_t)S * H * D;
    void *q = dev_filled(n, es), *k = dev_filled(n, es), *v = dev_filled(n, es),
         *o = dev_filled(n, es);
    float *lse = dev_filled((size_t)S * H, 4);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int it = 0; it < WARMUP + ITERS; it++) {
        cudaEventRecord(e0, NULL);
        if (cpdit_cuda_attention_flash(t, q, k, v, o, lse, 1, S, S, H, D, 0.088f, NULL)) {
            fprintf(stderr, "cuda_bench: attention launch failed\n");
            exit(1);
        }
        cudaEventRecord(e1, NULL);
        cudaEventSynchronize(e1);
        if (it >= WARMUP && time_ms(e0, e1) < best)
            best = time_ms(e0, e1);
    }
    double flop = 4.0 * S * S * H * D;
    printf("%-22s S %-5d H %-3d D %-8d %10.3f %10.1f\n",
           t == CPDIT_CUDA_BF16 ? "attention flash bf16" : "attention flash f32", S, H, D, best,
           flop / (best * 1e-3) / 1e12);
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(lse);
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A (M, K) x (N, K)^T linear through table be: bf16 weight, x (activations) and bias (fp32) of
 * bench values in device memory. */
typedef struct table_linear {
    const cpdit_backend *be;
    cpdit_weight *w;
    cpdit_buf *x, *y;
    float *b;
} table_linear;

static table_linear table_linear_make(const cpdit_backend *be, int M, int K, int N,
                                      const char *what)
{
    table_linear t = {be, NULL, NULL, NULL, NULL};
    uint16_t *wh = malloc((size_t)N * K * sizeof *wh);
    const size_t nz = (size_t)M * K > (size_t)N ? (size_t)M * K : (size_t)N;
    float *zeros = malloc(nz * sizeof *zeros); /* bench values, not zeros (see bench_value) */
    for (size_t i = 0; wh && i < (size_t)N * K; i++)
        wh[i] = bf16_bits(bench_value(i) * 0.05f);
    for (size_t i = 0; zeros && i < nz; i++)
        zeros[i] = bench_value(i + 7);
    t.x = cpdit_act_alloc(be, (size_t)M * K), t.y = cpdit_act_alloc(be, (size_t)M * N);
    t.b = be->alloc((size_t)N * 4);
    cpdit_weight_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = CPDIT_DTYPE_BF16;
    d.rows = N;
    d.cols = K;
    d.data = wh;
    d.format = CPDIT_WEIGHT_NATIVE;
    cpdit_error err;
    cpdit_error_clear(&err);
    if (!wh || !zeros || !t.x || !t.y || !t.b || be->weight_create(&t.w, &d, &err)) {
        fprintf(stderr, "cuda_bench: %s setup: %s\n", what, err.what);
        exit(1);
    }
    be->upload_act(t.x, zeros, (size_t)M * K);
    be->upload(t.b, zeros, (size_t)N * 4);
    free(wh), free(zeros);
    return t;
}

static void table_linear_free(table_linear *t)
{
    t->be->weight_free(t->w);
    t->be->free(t->x), t->be->free(t->y), t->be->free(t->b);
}

/* A table's linear (cuda: bf16 x and y straight into cuBLASLt; cuda-fp32: fp32 x cast to bf16,
 * fp32 y; bf16 weight, fp32 bias fused): what the models get, next to the raw bf16 GEMM above. */
static void bench_table_linear(const cpdit_backend *be, int M, int K, int N)
{
    table_linear tl = table_linear_make(be, M, K, N, "table linear");
    cpdit_weight *w = tl.w;
    cpdit_buf *x = tl.x, *y = tl.y;
    float *b = tl.b;
    cpdit_error err;
    cpdit_error_clear(&err);
    double best = 1e30;
    for (int it = 0; it < WARMUP + ITERS; it++) {
        be->sync(NULL);
        const double t0 = wall_s();
        if (be->linear(y, N, x, K, w, b, M, K, N, 0, &err)) {
            fprintf(stderr, "cuda_bench: table linear: %s\n", err.what);
            exit(1);
        }
        if (be->sync(&err)) {
            fprintf(stderr, "cuda_bench: table linear: %s\n", err.what);
            exit(1);
        }
        const double t = wall_s() - t0;
        if (it >= WARMUP && t < best)
            best = t;
    }
    printf("%-22s %-24s %10.3f %10.1f\n", be->name, "linear", best * 1e3,
           2.0 * M * K * N / best / 1e12);
    printf("  (M %d, K %d, N %d; activations %s)\n", M, K, N,
           be->act_dtype == CPDIT_DTYPE_BF16 ? "bf16 in and out" : "fp32, x cast to bf16");
    table_linear_free(&tl);
}

/* The name of attention kernel base ("cuda-flash", "cuda-reference", "cudnn", "auto") in table
 * be: cuda-fp32's kernels are named "cuda-fp32-flash", ... (names are unique over backends). */
static const char *kernel_name(const cpdit_backend *be, const char *base, char *buf, size_t size)
{
    if (be->act_dtype == CPDIT_DTYPE_BF16 || strcmp(base, "auto") == 0)
        return base;
    snprintf(buf, size, "cuda-fp32-%s", strncmp(base, "cuda-", 5) == 0 ? base + 5 : base);
    return buf;
}

/* One attention kernel of table be at FLUX.1-dev's joint attention (the table's activations in
 * and out, as the models call it; on cuda-fp32 cudnn includes its bf16 casts). */
static void bench_table_attention(const cpdit_backend *be, const char *kname, int B, int Sq,
                                  int Skv, int H, int D)
{
    const cpdit_attention_kernel *k = NULL;
    cpdit_error err;
    cpdit_error_clear(&err);
    char kbuf[64];
    kname = kernel_name(be, kname, kbuf, sizeof kbuf);
    if (cpdit_attention_kernel_find(be, kname, &k, &err)) {
        fprintf(stderr, "cuda_bench: %s\n", err.what);
        exit(1);
    }
    const size_t nq = (size_t)B * Sq * H * D, nk = (size_t)B * Skv * H * D;
    cpdit_buf *q = cpdit_act_alloc(be, nq), *kk = cpdit_act_alloc(be, nk),
              *v = cpdit_act_alloc(be, nk), *o = cpdit_act_alloc(be, nq);
    float *l = be->alloc((size_t)B * Sq * H * 4);
    float *h = malloc((nq > nk ? nq : nk) * 4);
    for (size_t i = 0; i < (nq > nk ? nq : nk); i++)
        h[i] = bench_value(i);
    be->upload_act(q, h, nq);
    be->upload_act(kk, h, nk);
    be->upload_act(v, h, nk);
    const cpdit_attention_args a = {.B = B, .Sq = Sq, .Skv = Skv, .H = H, .D = D,
                                    .scale = 1.0f / sqrtf((float)D)};
    double best = 1e30;
    for (int it = 0; it < WARMUP + ITERS; it++) {
        be->sync(NULL);
        const double t0 = wall_s();
        if (k->forward(o, l, q, kk, v, &a, &err) || be->sync(&err)) {
            fprintf(stderr, "cuda_bench: attention %s: %s\n", kname, err.what);
            exit(1);
        }
        const double t = wall_s() - t0;
        if (it >= WARMUP && t < best)
            best = t;
    }
    const double flop = 4.0 * B * H * (double)Sq * Skv * D;
    char label[80]; /* kernel names are unique; auto's says which table */
    snprintf(label, sizeof label, "%.30s%s%.30s", strcmp(kname, "auto") ? "" : be->name,
             strcmp(kname, "auto") ? "" : " ", kname);
    printf("%-22s Sq %-5d Skv %-5d H %d D %d %8.3f %10.1f\n", label, Sq, Skv, H, D, best * 1e3,
           flop / best / 1e12);
    be->free(q), be->free(kk), be->free(v), be->free(o), be->free(l);
    free(h);
}

/* linear + gelu-tanh through the table: fused (linear_act, cuBLASLt GELU_BIAS) vs the two ops. */
static void bench_table_linear_act(const cpdit_backend *be, int M, int K, int N)
{
    table_linear tl = table_linear_make(be, M, K, N, "linear_act");
    cpdit_weight *w = tl.w;
    cpdit_buf *x = tl.x, *y = tl.y;
    float *b = tl.b;
    cpdit_error err;
    cpdit_error_clear(&err);
    double best[2] = {1e30, 1e30};
    for (int fused = 0; fused < 2; fused++)
        for (int it = 0; it < WARMUP + ITERS; it++) {
            be->sync(NULL);
            const double t0 = wall_s();
            cpdit_status st;
            if (fused) {
                st = be->linear_act(y, N, x, K, w, b, M, K, N, CPDIT_ACT_GELU_TANH, &err);
            } else {
                st = be->linear(y, N, x, K, w, b, M, K, N, 0, &err);
                be->act(CPDIT_ACT_GELU_TANH, y, y, (size_t)M * N);
            }
            if (st || be->sync(&err)) {
                fprintf(stderr, "cuda_bench: linear_act: %s\n", err.what);
                exit(1);
            }
            const double t = wall_s() - t0;
            if (it >= WARMUP && t < best[fused])
                best[fused] = t;
        }
    printf("%-22s %-24s %10.3f %10.1f\n", be->name, "linear+gelu", best[0] * 1e3,
           2.0 * M * K * N / best[0] / 1e12);
    printf("%-22s %-24s %10.3f %10.1f\n", be->name, "linear_act (fused)", best[1] * 1e3,
           2.0 * M * K * N / best[1] / 1e12);
    printf("  (M %d, K %d, N %d; fused/unfused time ratio %.3f)\n", M, K, N, best[1] / best[0]);
    table_linear_free(&tl);
}

int main(void)
{
    if (cpdit_cuda_device_count() == 0) {
        fprintf(stderr, "cuda_bench: no CUDA device\n");
        return 77;
    }
    char desc[512];
    cpdit_cuda_describe(desc, sizeof desc);
    printf("# %s\n", desc);
    printf("%-22s %-24s %10s %10s\n", "case", "shape", "ms", "TFLOP/s");
    char msg[256];
    cpdit_gemm_lt *g = cpdit_gemm_lt_create(0, msg, sizeof msg);
    if (!g) {
        fprintf(stderr, "cuda_bench: %s\n", msg);
        return 1;
    }
    bench_linear(g, 4608, 3072, 3072);      /* attention projections */
    bench_linear(g, 4608, 3072, 12288);     /* MLP up */
    bench_linear(g, 4608, 12288, 3072);     /* MLP down */
    bench_linear(g, 4608, 3072, 3 * 3072 + 12288); /* single block fused in */
    cpdit_gemm_lt_destroy(g);
    bench_attention(CPDIT_CUDA_BF16, 4608, 24, 128);
    bench_attention(CPDIT_CUDA_F32, 4608, 24, 128);
    const cpdit_backend *tables[] = {cpdit_backend_cuda(), cpdit_backend_cuda_fp32()};
    for (int ti = 0; ti < 2; ti++) {
        const cpdit_backend *be = tables[ti];
        printf("# table %s: linear, linear + gelu-tanh, attention kernels (FLUX.1-dev joint "
               "attention and a ring block)\n", be->name);
        bench_table_linear(be, 4608, 3072, 3072);
        bench_table_linear(be, 4608, 3072, 12288);
        bench_table_linear_act(be, 4608, 3072, 12288); /* FLUX MLP up + gelu-tanh */
        bench_table_attention(be, "cuda-flash", 1, 4608, 4608, 24, 128);
        bench_table_attention(be, "cudnn", 1, 4608, 4608, 24, 128);
        bench_table_attention(be, "auto", 1, 4608, 4608, 24, 128);
        bench_table_attention(be, "cuda-flash", 1, 1152, 1152, 24, 128);
        bench_table_attention(be, "cudnn", 1, 1152, 1152, 24, 128);
    }
    return 0;
}
