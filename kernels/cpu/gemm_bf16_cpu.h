/* gemm_bf16_cpu.h — linear layers computed from bf16 weights as stored: y += x W^T with W
 * (N, K) packed once (at load) into panels, x and y fp32, fp32 accumulation.
 *
 * Packed layout: W's N rows (output features) in panels of GEMM_BF16_NR; inside a panel, for
 * each pair of inputs (k, k+1), the NR columns' two bf16 values side by side:
 *   packed[p][kk][c][0..1] = W[p*NR + c][2kk .. 2kk+1]      (zero past N or K)
 * i.e. one 32-bit lane per output column holding a bf16 pair — the operand layout of
 * AVX512-BF16's vdpbf16ps, and cheap to widen to two fp32 vectors (shift / mask) elsewhere.
 *
 * Kernels (chosen once from the CPU's features, overridable for tests and benchmarks):
 *   "avx512bf16"  x rounded to bf16 (round to nearest even) and multiplied with vdpbf16ps:
 *                 the products are exact, so the error is x's rounding (relative 2^-9 per
 *                 element, ~1e-3 of |x||w| normalised on a dot product);
 *   "generic"     x stays fp32, W widened to fp32 in registers, fp32 FMA (target_clones for
 *                 AVX-512 / AVX2): the fp32 path's result up to summation order.
 * Threads: the rank's pool (kernels/cpu/thread_pool.h), tiles of rows x panels handed out
 * through an atomic counter. Each output element is computed by one thread, its k slices in
 * the same order whatever the tiling, so the result is bitwise the same for any thread count.
 */
#ifndef CPDIT_GEMM_BF16_CPU_H
#define CPDIT_GEMM_BF16_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "lib/core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Output columns per packed panel (two AVX-512 vectors of fp32). */
#define GEMM_BF16_NR 32

/* Bytes of the packed form of a (N, K) weight. */
size_t cpu_bf16_packed_bytes(int N, int K);

/* Pack rows [r0, r1) of W (N, K) — src row-major in dtype (bf16, or an fp8 / fp32 converted
 * to bf16: fp8 exactly, fp32 rounded to nearest even) — into dst (cpu_bf16_packed_bytes). Rows
 * are packed independently, so threads may pack disjoint ranges. src may have any alignment. */
void cpu_bf16_pack_rows(uint16_t *dst, const void *src, cpdit_dtype dtype, int N, int K, int r0,
                        int r1);

/* Whole weight, on the pool (each panel written by the thread that packs it; no clearing). */
void cpu_bf16_pack(uint16_t *dst, const void *src, cpdit_dtype dtype, int N, int K);

/* y (M, N; ldy) += x (M, K; ldx) W^T with W packed (N, K). Errors: out of memory for the bf16
 * copy of x (RUNTIME). */
cpdit_status cpu_gemm_bf16(float *y, int ldy, const float *x, int ldx, const uint16_t *wp,
                           int M, int K, int N, cpdit_error *err);

/* y (M, N; ldy) = x (M, K; ldx) W^T: y need not be initialised (no memset first). */
cpdit_status cpu_gemm_bf16_set(float *y, int ldy, const float *x, int ldx, const uint16_t *wp,
                               int M, int K, int N, cpdit_error *err);

/* The kernel in use: "avx512bf16" or "generic". */
const char *cpu_gemm_bf16_kernel(void);
/* Select a kernel by name ("auto", "avx512bf16", "generic"); returns 0 on success, -1 when the
 * name is unknown or the CPU lacks it. */
int cpu_gemm_bf16_set_kernel(const char *name);

#ifdef __cplusplus
}
#endif
#endif
