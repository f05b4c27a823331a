/* parallel_ops_cpu.h — the "cpu" table's element-wise ops, norms, RoPE and GroupNorm apply on
 * the rank's pool (kernels/cpu/thread_pool.h) when large; the same bits for any thread count
 * (see parallel_ops_cpu.c). Shapes and aliasing as the serial kernels (backend_cpu.h,
 * vae_ops_cpu.h) they split by rows.
 */
#ifndef CPDIT_PARALLEL_OPS_CPU_H
#define CPDIT_PARALLEL_OPS_CPU_H

#include <stddef.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void cpu_par_add(float *y, const float *a, const float *b, size_t n);
void cpu_par_mul(float *y, const float *a, const float *b, size_t n);
void cpu_par_act(cpdit_act kind, float *y, const float *x, size_t n);
void cpu_par_modulate(float *y, const float *x, const float *shift, const float *scale,
                      size_t rows, int dim);
void cpu_par_gated_residual(float *h, int ldh, const float *x, int ldx, const float *gate,
                            size_t rows, int dim);
void cpu_par_layer_norm(float *y, const float *x, const float *gamma, const float *beta,
                        size_t rows, int dim, float eps);
void cpu_par_rms_norm(float *y, const float *x, const float *weight, size_t rows, int dim,
                      float eps);
void cpu_par_rope(float *x, const float *cos, const float *sin, int S, int H, int D);
/* C (M, N; ldc) = alpha A (M, K) op(B) + beta C, row-major, op(B) = B (K, N) or B^T (trans_b,
 * B (N, K)); rows of C split over the pool, single-threaded OpenBLAS in each part. */
void cpu_par_sgemm(int trans_b, int M, int N, int K, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc);
void cpu_par_group_norm_apply(float *y, const float *x, size_t pixels, int C, int G,
                              const double *mean, const double *rstd, const float *gamma,
                              const float *beta, cpdit_activation act);

#ifdef __cplusplus
}
#endif
#endif
