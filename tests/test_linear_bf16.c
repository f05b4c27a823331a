/* test_linear_bf16.c — the CPU backend's weights and linear layers against a double-precision
 * loop over the same (bf16-valued) weights, for every weight form and bf16 kernel:
 *
 *   fp32 form (SGEMM) and the generic bf16 kernel (x fp32, W widened): fp32 accuracy,
 *       |y - ref| <= (K + 4) * 2^-24 * sum_k |x_k w_k| + 1e-6  (summation-order bound);
 *   AVX512-BF16 kernel (x rounded to bf16, products exact): x's rounding dominates,
 *       |y - ref| <= 2^-8 * sum_k |x_k w_k| + (K + 4) * 2^-24 * sum_k |x_k w_k| + 1e-6.
 * Shapes cover 1, odd and prime sizes, partial panels (N not a multiple of 32), odd K (a
 * padded pair), row strides larger than the width, accumulate and bias. Also: fp8 weights are
 * widened exactly, fp16 kept fp32, fp32 used in place, and a shape mismatch is an INPUT error.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16_cpu.h"
#include "lib/core/dtype.h"
#include "tests/test_util.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

typedef struct shape {
    int M, K, N;
} shape;

/* One case: W (N, K) bf16, x (M, K; ldx), y (M, N; ldy) with bias and accumulate as given,
 * computed with format / kernel, checked against the double loop. Returns the largest
 * error relative to sum |x w| seen. */
static double run_case(const cpdit_backend *be, shape s, cpdit_weight_format fmt, int bf16_kernel,
                       int with_bias, int accumulate)
{
    const int ldx = s.K + 3, ldy = s.N + 5;
    uint16_t *wb = malloc((size_t)s.N * s.K * 2);
    float *x = malloc((size_t)s.M * ldx * sizeof(float));
    float *y = malloc((size_t)s.M * ldy * sizeof(float));
    float *b = malloc((size_t)s.N * sizeof(float));
    for (size_t i = 0; i < (size_t)s.N * s.K; i++)
        wb[i] = cpdit_f32_to_bf16(frand());
    for (size_t i = 0; i < (size_t)s.M * ldx; i++)
        x[i] = frand() * 3.0f;
    for (int i = 0; i < s.N; i++)
        b[i] = frand();
    for (size_t i = 0; i < (size_t)s.M * ldy; i++)
        y[i] = frand();
    float *y0 = malloc((size_t)s.M * ldy * sizeof(float));
    memcpy(y0, y, (size_t)s.M * ldy * sizeof(float));

    cpdit_weight_desc d = {.dtype = CPDIT_DTYPE_BF16, .rows = s.N, .cols = s.K, .data = wb,
                           .format = fmt};
    cpdit_weight *w = NULL;
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(be->weight_create(&w, &d, &err) == CPDIT_OK);
    CHECK(be->linear(cpdit_host_buf(y), ldy, cpdit_host_buf(x), ldx, w, with_bias ? b : NULL, s.M,
                     s.K, s.N, accumulate, &err) == CPDIT_OK);
    be->weight_free(w);

    double worst = 0;
    const double eps32 = ldexp(1.0, -24);
    const double tol_rel = (bf16_kernel == 2 ? ldexp(1.0, -8) : 0.0) + (s.K + 4) * eps32;
    int bad = 0;
    for (int r = 0; r < s.M; r++) {
        for (int n = 0; n < s.N; n++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < s.K; k++) {
                const double p = (double)x[(size_t)r * ldx + k] * cpdit_bf16_to_f32(wb[(size_t)n * s.K + k]);
                ref += p;
                mag += fabs(p);
            }
            if (with_bias)
                ref += b[n];
            if (accumulate)
                ref += y0[(size_t)r * ldy + n];
            const double e = fabs(y[(size_t)r * ldy + n] - ref);
            if (mag > 0 && e / mag > worst)
                worst = e / mag;
            if (!(e <= tol_rel * mag + 1e-6) && bad++ < 3)
                fprintf(stderr, "M %d K %d N %d fmt %d kernel %d: y[%d,%d] = %.8g, ref %.8g\n",
                        s.M, s.K, s.N, fmt, bf16_kernel, r, n, y[(size_t)r * ldy + n], ref);
        }
        /* padding columns of y past N untouched */
        for (int n = s.N; n < ldy; n++)
            if (y[(size_t)r * ldy + n] != y0[(size_t)r * ldy + n] && bad++ < 3)
                fprintf(stderr, "M %d K %d N %d: padding y[%d,%d] written\n", s.M, s.K, s.N, r,
                        n);
    }
    CHECK_MSG(bad == 0, "%d wrong outputs (M %d K %d N %d, format %d, kernel %d)", bad, s.M, s.K,
              s.N, fmt, bf16_kernel);
    free(wb);
    free(x);
    free(y);
    free(y0);
    free(b);
    return worst;
}

static void check_dtypes(const cpdit_backend *be)
{
    /* fp8 (e4m3) widened exactly: the bf16 GEMM over fp8 data equals the fp32 SGEMM over the
     * same values up to summation order and x's rounding. fp16 is kept fp32 (bytes = 4/elem). */
    const int N = 37, K = 45;
    uint8_t f8[N * K];
    uint16_t f16[N * K];
    float f32[N * K];
    for (int i = 0; i < N * K; i++) {
        f8[i] = cpdit_f32_to_f8e4m3(frand() * 4.0f);
        f16[i] = cpdit_f32_to_f16(frand());
        f32[i] = frand();
    }
    cpdit_weight_desc d = {.dtype = CPDIT_DTYPE_F8_E4M3, .rows = N, .cols = K, .data = f8};
    CHECK(be->weight_bytes(&d) == cpu_bf16_packed_bytes(N, K));
    d.dtype = CPDIT_DTYPE_F16;
    d.data = f16;
    CHECK(be->weight_bytes(&d) == (size_t)N * K * sizeof(float));
    d.dtype = CPDIT_DTYPE_F32;
    d.data = f32;
    d.data_persists = 1;
    CHECK(be->weight_bytes(&d) == 0); /* used in place */
    d.data_persists = 0;
    CHECK(be->weight_bytes(&d) == (size_t)N * K * sizeof(float));

    float x[3 * K], y8[3 * N], yref[3 * N], wf[N * K];
    for (int i = 0; i < 3 * K; i++)
        x[i] = frand();
    for (int i = 0; i < N * K; i++)
        wf[i] = cpdit_f8e4m3_to_f32(f8[i]);
    cpdit_error err;
    cpdit_error_clear(&err);
    cpdit_weight *w8 = NULL, *wr = NULL;
    d = (cpdit_weight_desc){.dtype = CPDIT_DTYPE_F8_E4M3, .rows = N, .cols = K, .data = f8};
    CHECK(be->weight_create(&w8, &d, &err) == CPDIT_OK);
    d = (cpdit_weight_desc){.dtype = CPDIT_DTYPE_F32, .rows = N, .cols = K, .data = wf,
                            .data_persists = 1};
    CHECK(be->weight_create(&wr, &d, &err) == CPDIT_OK);
    CHECK(be->linear(cpdit_host_buf(y8), N, cpdit_host_buf(x), K, w8, NULL, 3, K, N, 0, &err) ==
          CPDIT_OK);
    CHECK(be->linear(cpdit_host_buf(yref), N, cpdit_host_buf(x), K, wr, NULL, 3, K, N, 0, &err) ==
          CPDIT_OK);
    for (int i = 0; i < 3 * N; i++) {
        double mag = 0;
        for (int k = 0; k < K; k++)
            mag += fabs((double)x[(i / N) * K + k] * wf[(i % N) * K + k]);
        CHECK_NEAR(y8[i], yref[i], ldexp(1.0, -8) * mag + 1e-6);
    }
    /* shape mismatch */
    CHECK(be->linear(cpdit_host_buf(y8), N, cpdit_host_buf(x), K, w8, NULL, 3, K - 1, N, 0,
                     &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "weight is (37, 45)");
    be->weight_free(w8);
    be->weight_free(wr);
    /* not a weight dtype */
    d = (cpdit_weight_desc){.dtype = CPDIT_DTYPE_I32, .rows = 1, .cols = 1, .data = f32};
    cpdit_weight *wi = NULL;
    CHECK(be->weight_create(&wi, &d, &err) == CPDIT_ERR_INPUT && wi == NULL);
}

int main(void)
{
    /* the "cpu" table: activations are host fp32 arrays (cpdit_host_buf) */
    const cpdit_backend *be = cpdit_backend_cpu();
    CHECK(cpdit_backend_host_f32(be));
    static const shape shapes[] = {{1, 1, 1},     {1, 7, 33},    {5, 2, 32},   {13, 64, 17},
                                   {3, 515, 100}, {97, 129, 64}, {130, 96, 97}, {12, 600, 31},
                                   {200, 31, 300}};
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    double worst[3] = {0, 0, 0};
    /* kernel 0: fp32 form (SGEMM); 1: bf16 generic; 2: bf16 AVX512-BF16 */
    for (int kernel = 0; kernel < 3; kernel++) {
        if (kernel == 1)
            CHECK(cpu_gemm_bf16_set_kernel("generic") == 0);
        if (kernel == 2 && cpu_gemm_bf16_set_kernel("avx512bf16") != 0) {
            fprintf(stderr, "no AVX512-BF16 on this CPU: that kernel is not tested\n");
            break;
        }
        const cpdit_weight_format fmt = kernel ? CPDIT_WEIGHT_NATIVE : CPDIT_WEIGHT_F32;
        for (int i = 0; i < n_shapes; i++)
            for (int v = 0; v < 3; v++) {
                const double e = run_case(be, shapes[i], fmt, kernel, v >= 1, v == 2);
                if (e > worst[kernel])
                    worst[kernel] = e;
            }
    }
    cpu_gemm_bf16_set_kernel("auto");
    printf("largest |y - ref| / sum|x w|: fp32 SGEMM %.3g, bf16 generic %.3g, bf16 "
           "avx512bf16 %.3g\n",
           worst[0], worst[1], worst[2]);
    check_dtypes(be);
    TEST_MAIN_END();
}
