/* attention_cpu.h — local (single-rank) scaled-dot-product attention on the CPU.
 *
 * Layout (DESIGN.md): q is (B, Sq, H, D), k and v are (B, Skv, H, D), out is (B, Sq, H, D),
 * all fp32 row-major and contiguous; lse is (B, Sq, H) fp32, the natural-log log-sum-exp of
 * the scaled scores of each query row:  lse = log(sum_j exp(scale * q.k_j)).
 * No mask (FLUX joint attention is unmasked). scale is usually 1/sqrt(D).
 * Skv may be 0: then out = 0 and lse = -INFINITY (an empty block; merging it changes nothing).
 *
 * attention_cpu_reference  — the plain three-loop definition, kept for tests; with _args it
 *                            takes every cpdit_attention_args (the "cpu-reference" kernel).
 * attention_cpu_forward    — the fast blocked online-softmax (flash-attention style) kernel,
 *                            block products through BLAS, fp32 accumulation; attention_cpu_flash
 *                            is the same with row strides and lse NULL allowed (no mask/bias).
 * attention_cpu_dense      — masked or biased attention (text encoders) over the whole score
 *                            matrix of one head at a time (attention_dense_cpu.c).
 * attention_cpu_kernels    — the table's kernels: "cpu-flash" (flash, or dense when there is a
 *                            mask or a bias) and "cpu-reference" (attention_cpu_kernels.c).
 * attention_lse_merge      — merge a partial result (out_b, lse_b) into (out_a, lse_a) in place:
 *                            lse = log(e^a + e^b), out = out_a e^(a-lse) + out_b e^(b-lse).
 *                            rows = B*Sq*H rows of D values each.
 * Both attention functions return CPDIT_OK, CPDIT_ERR_INPUT (negative sizes, D < 1) or
 * CPDIT_ERR_RUNTIME (allocation failure), err filled. out must not alias q, k or v.
 *
 * attention_cpu_forward runs on attention_cpu_get_num_threads() threads: the number given to
 * attention_cpu_set_num_threads() (at most the pool's size), or with 0 (the default) the
 * rank's pool size (kernels/cpu/thread_pool.h: --threads / CPDIT_THREADS, SLURM_CPUS_PER_TASK,
 * OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, the affinity mask). While it runs, OpenBLAS is switched to one
 * thread per call and restored afterwards (a process-global setting): do not call BLAS from
 * another thread at the same time.
 */
#ifndef CPDIT_ATTENTION_CPU_H
#define CPDIT_ATTENTION_CPU_H

#include <stddef.h>
#include "kernels/backend.h"
#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

cpdit_status attention_cpu_reference(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int B, int Sq, int Skv, int H, int D,
                                     float scale, cpdit_error *err);

cpdit_status attention_cpu_forward(float *out, float *lse, const float *q, const float *k,
                                   const float *v, int B, int Sq, int Skv, int H, int D,
                                   float scale, cpdit_error *err);

cpdit_status attention_cpu_reference_args(float *out, float *lse, const float *q,
                                          const float *k, const float *v,
                                          const cpdit_attention_args *a, cpdit_error *err);
cpdit_status attention_cpu_flash(float *out, float *lse, const float *q, const float *k,
                                 const float *v, const cpdit_attention_args *a, cpdit_error *err);
cpdit_status attention_cpu_dense(float *out, float *lse, const float *q, const float *k,
                                 const float *v, const cpdit_attention_args *a, cpdit_error *err);
/* What the "cpu-flash" kernel runs on fp32 host arrays: attention_cpu_dense with a mask or a
 * bias, else attention_cpu_flash (also behind "cpu-bf16-flash"). */
cpdit_status attention_cpu_flash_or_dense(float *out, float *lse, const float *q,
                                          const float *k, const float *v,
                                          const cpdit_attention_args *a, cpdit_error *err);

/* The CPU table's attention kernels, NULL-terminated, default first. */
extern const cpdit_attention_kernel *const attention_cpu_kernels[];

/* Worker threads for attention_cpu_forward; n <= 0 means "the pool's size". */
void attention_cpu_set_num_threads(int n);
int attention_cpu_get_num_threads(void);

void attention_lse_merge(float *out_a, float *lse_a, const float *out_b, const float *lse_b,
                         size_t rows, int D);

#ifdef __cplusplus
}
#endif
#endif
