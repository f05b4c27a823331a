/* attention_softmax_cpu.h — the row operations of the online softmax in attention_cpu.c:
 * a row maximum, an in-place exp(x - m) that returns the row sum, and a row scale. Vectorised for
 * AVX-512 and AVX2+FMA (chosen at run time from the CPU), plain C otherwise.
 *
 * The vector exp is a Cody-Waite range reduction (x = n ln2 + r, |r| <= ln2/2) with a degree-6
 * polynomial for e^r, then a scale by 2^n through the exponent bits: at most 2 ulp from the
 * correctly rounded expf for x in [-87, 0] (measured by tests/test_attention_cpu). Inputs below
 * ATTN_EXP_MIN_ARG give 0 (their weight next to the row maximum's e^0 = 1 is below fp32
 * resolution anyway).
 */
#ifndef CPDIT_ATTENTION_SOFTMAX_CPU_H
#define CPDIT_ATTENTION_SOFTMAX_CPU_H

#ifdef __cplusplus
extern "C" {
#endif

/* Arguments of exp below this give exactly 0 (e^-87.3 is the smallest normal float). */
#define ATTN_EXP_MIN_ARG (-87.0f)

/* max of x[0..n-1], n >= 1. */
float attention_row_max(const float *x, int n);

/* x[i] = exp(x[i] - m) for i in 0..n-1, in place; returns the sum of the new x (summed in
 * fp32 lanes). Meant for x[i] <= m (softmax), any finite x works. */
float attention_row_exp_sum(float *x, int n, float m);

/* x[i] *= a for i in 0..n-1 (rescaling an output row, normalising by 1/l). */
void attention_row_scale(float *x, int n, float a);

/* Scalar version of the vector exp, for tests: same algorithm, one value. */
float attention_fast_expf(float x);

/* Which implementation the two row functions use on this CPU: "avx512", "avx2" or "scalar". */
const char *attention_softmax_isa(void);

/* Use a given implementation ("scalar", "avx2", "avx512"; "auto" or NULL = the best this CPU
 * has), for tests and benchmarks. Returns -1 (and keeps the automatic choice) when the CPU lacks
 * it or the name is unknown. Not thread-safe against running kernels. */
int attention_softmax_set_isa(const char *name);

#ifdef __cplusplus
}
#endif
#endif
