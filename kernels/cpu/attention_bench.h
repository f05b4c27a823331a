/* attention_bench.h — time the local CPU attention kernel against the machine's SGEMM rate.
 *
 * attention_kernel_bench prints one table row per (S, D): Sq = Skv = S, the given B and H,
 * scale 1/sqrt(D), inputs uniform in [-1, 1]. Columns:
 *   B S H D      shape
 *   threads      attention_cpu_get_num_threads()
 *   best_ms avg_ms   wall time of one attention_cpu_forward call, best and mean of reps
 *   GFLOP/s      4 B H S^2 D / best time (two matrix products per score, softmax not counted)
 *   sgemm        SGEMM GFLOP/s on square 2048 x 2048 matrices with the same thread count,
 *                measured right after the row's attention timing (same machine load)
 *   %sgemm       GFLOP/s / sgemm
 *   err          max |fast - reference| / max |reference| over the first BENCH_CHECK_ROWS query
 *                rows of batch 0 (all heads), checked once per row of the table
 * A header names the BLAS and its core, the softmax ISA and the thread count.
 * Returns 0, or 1 when memory runs out or a kernel call fails (message on out).
 */
#ifndef CPDIT_ATTENTION_BENCH_H
#define CPDIT_ATTENTION_BENCH_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* head_dims / seq_lens may be NULL (then D = 64, 128 and S = 1024, 4096); B, H, reps <= 0
 * take the defaults 1, 24 and 3. */
int attention_kernel_bench(FILE *out, int B, int H, const int *head_dims, int n_head_dims,
                           const int *seq_lens, int n_seq_lens, int reps);

#ifdef __cplusplus
}
#endif
#endif
