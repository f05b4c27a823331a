/* backend_cpu.h — the CPU kernels behind the kernel table (kernels/backend.h).
 *
 * Shapes, units and aliasing rules are those of the matching cpdit_backend field; the
 * functions are exported so that tests can compare each one with a plain loop.
 *
 * Split by job:
 *   backend_cpu.c      the table, memory, elementwise ops
 *   linear_cpu.c       weights (fp32, or bf16 packed) and linear (cblas_sgemm / bf16 GEMM)
 *   gemm_bf16_cpu.c    the bf16 GEMM and its packing
 *   norms_cpu.c        layer_norm, rms_norm
 *   rope_cpu.c         rotary embedding (pairwise-interleaved)
 *   activations_cpu.c  gelu (tanh approximation), silu, and the vector exp they use
 * The activation and norm loops are written so that GCC vectorises them; they are compiled
 * for AVX-512 and AVX2 as well as baseline x86-64 (target_clones, chosen at load time from
 * the CPU's features).
 */
#ifndef CPDIT_BACKEND_CPU_H
#define CPDIT_BACKEND_CPU_H

#include <stddef.h>

#include "kernels/backend.h"
#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Loop kernels work on blocks of CPU_LANES floats with a fixed-size inner loop (which GCC turns
 * into vector code at -O2 without -ffast-math), then a scalar tail. */
#define CPU_LANES 16

/* Compile a loop kernel for AVX-512, AVX2+FMA and baseline x86-64, picked at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define CPU_KERNEL_CLONES \
    __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define CPU_KERNEL_CLONES
#endif

/* Alignment of cpu_alloc blocks, in bytes (one cache line, also the AVX-512 width). */
#define CPU_ALLOC_ALIGN 64

void *cpu_alloc(size_t bytes);
void cpu_free(void *p);
void cpu_copy_bytes(void *dst, const void *src, size_t bytes);

size_t cpu_weight_bytes(const cpdit_weight_desc *d);
cpdit_status cpu_weight_create(cpdit_weight **out, const cpdit_weight_desc *d, cpdit_error *err);
void cpu_weight_free(cpdit_weight *w);
cpdit_status cpu_linear(float *y, int ldy, const float *x, int ldx, const cpdit_weight *w,
                        const float *b, int M, int K, int N, int accumulate, cpdit_error *err);

void cpu_layer_norm(float *y, const float *x, const float *gamma, const float *beta,
                    size_t rows, int dim, float eps);
void cpu_rms_norm(float *y, const float *x, const float *weight, size_t rows, int dim,
                  float eps);

void cpu_rope(float *x, const float *cos, const float *sin, int S, int H, int D);

void cpu_gelu_tanh(float *y, const float *x, size_t n);
void cpu_silu(float *y, const float *x, size_t n);
/* The vectorisable exp behind gelu and silu: within a few ulp of expf on [-87.3, 88.3];
 * arguments outside are clamped to that range (results about 1e-38 and 2e38). */
float cpu_fast_expf(float x);

void cpu_add(float *y, const float *a, const float *b, size_t n);
void cpu_modulate(float *y, const float *x, const float *shift, const float *scale, size_t rows,
                  int dim);
void cpu_gated_residual(float *h, int ldh, const float *x, int ldx, const float *gate,
                        size_t rows, int dim);
void cpu_copy_rows(float *dst, int ldd, const float *src, int lds, size_t rows, int dim);

#ifdef __cplusplus
}
#endif
#endif
