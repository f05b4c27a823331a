/* attention_bench.c — the kernel table of `cpdit bench attention`: the fast CPU attention
 * kernel's time and FLOP rate next to the SGEMM rate of the same machine and thread count.
 * Columns and units in attention_bench.h.
 */
#include "kernels/cpu/attention_bench.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/attention_softmax_cpu.h"
#include "kernels/cpu/blas_runtime.h"

#define BENCH_DEFAULT_B 1
#define BENCH_DEFAULT_H 24
#define BENCH_DEFAULT_REPS 3
#define BENCH_SGEMM_N 2048 /* square SGEMM size for the reference rate */
#define BENCH_SGEMM_REPS 3
#define BENCH_CHECK_ROWS 8 /* query rows checked against the reference */

static double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* n values uniform in [-1, 1) from an LCG seeded with seed. */
static void bench_fill(float *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((int64_t)(seed >> 40) - (1 << 23)) / (float)(1 << 23);
    }
}

/* The first rows query rows of batch 0 (all heads) against the reference. out: the fast
 * kernel's (B, S, H, D) output. Returns max |diff| / max |ref|, or -1 on failure. */
static double bench_check(const float *out, const float *q, const float *k, const float *v, int S,
                          int H, int D, float scale)
{
    const int rows = S < BENCH_CHECK_ROWS ? S : BENCH_CHECK_ROWS;
    const size_t n = (size_t)rows * H * D;
    float *ref = malloc(n * sizeof *ref), *lse = malloc((size_t)rows * H * sizeof *lse);
    cpdit_error err;
    double num = 0, den = 0;
    if (!ref || !lse ||
        attention_cpu_reference(ref, lse, q, k, v, 1, rows, S, H, D, scale, &err) != CPDIT_OK) {
        free(ref);
        free(lse);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)out[i] - ref[i]);
        num = d > num ? d : num;
        den = fabs((double)ref[i]) > den ? fabs((double)ref[i]) : den;
    }
    free(ref);
    free(lse);
    return den > 0 ? num / den : num;
}

/* SGEMM GFLOP/s with as many BLAS threads as the attention kernel has workers, measured
 * next to each attention timing so that both see the same machine load. */
static double bench_sgemm(int threads)
{
    const int blas_threads = blas_runtime_get_num_threads();
    blas_runtime_set_num_threads(threads);
    const double g = blas_sgemm_gflops(BENCH_SGEMM_N, BENCH_SGEMM_REPS);
    blas_runtime_set_num_threads(blas_threads);
    return g;
}

int attention_kernel_bench(FILE *out, int B, int H, const int *head_dims, int n_head_dims,
                           const int *seq_lens, int n_seq_lens, int reps)
{
    static const int default_dims[] = {64, 128};
    static const int default_seqs[] = {1024, 4096};
    if (!head_dims || n_head_dims <= 0)
        head_dims = default_dims, n_head_dims = 2;
    if (!seq_lens || n_seq_lens <= 0)
        seq_lens = default_seqs, n_seq_lens = 2;
    B = B > 0 ? B : BENCH_DEFAULT_B;
    H = H > 0 ? H : BENCH_DEFAULT_H;
    reps = reps > 0 ? reps : BENCH_DEFAULT_REPS;

    const int threads = attention_cpu_get_num_threads();
    char blas[512];
    blas_runtime_describe(blas, sizeof blas);
    fprintf(out, "# local attention kernel (attention_cpu_forward), fp32, Sq = Skv = S\n");
    fprintf(out, "# BLAS: %s\n", blas);
    fprintf(out, "# softmax rows: %s; threads: %d; sgemm: %dx%d SGEMM GFLOP/s after each row\n",
            attention_softmax_isa(), threads, BENCH_SGEMM_N, BENCH_SGEMM_N);
    fprintf(out, "# GFLOP/s counts 4*B*H*S*S*D; err = max|fast-ref|/max|ref| on %d query rows\n",
            BENCH_CHECK_ROWS);
    fprintf(out, "%3s %7s %4s %4s %7s %10s %10s %9s %9s %7s %9s\n", "B", "S", "H", "D", "threads",
            "best_ms", "avg_ms", "GFLOP/s", "sgemm", "%sgemm", "err");

    int rc = 0;
    for (int si = 0; si < n_seq_lens && rc == 0; si++) {
        for (int di = 0; di < n_head_dims && rc == 0; di++) {
            const int S = seq_lens[si], D = head_dims[di];
            const size_t n = (size_t)B * S * H * D;
            float *q = malloc(n * sizeof *q), *k = malloc(n * sizeof *k);
            float *v = malloc(n * sizeof *v), *o = malloc(n * sizeof *o);
            float *lse = malloc((size_t)B * S * H * sizeof *lse);
            if (!q || !k || !v || !o || !lse) {
                fprintf(out, "# S=%d D=%d: out of memory\n", S, D);
                rc = 1;
            } else {
                bench_fill(q, n, 1), bench_fill(k, n, 2), bench_fill(v, n, 3);
                const float scale = 1.0f / sqrtf((float)D);
                cpdit_error err;
                double best = 1e300, total = 0;
                /* one untimed warm-up call, then reps timed calls */
                for (int r = -1; r < reps && rc == 0; r++) {
                    const double t0 = bench_now();
                    if (attention_cpu_forward(o, lse, q, k, v, B, S, S, H, D, scale, &err) !=
                        CPDIT_OK) {
                        fprintf(out, "# S=%d D=%d: %s\n", S, D, err.what);
                        rc = 1;
                    }
                    const double dt = bench_now() - t0;
                    if (r >= 0) {
                        total += dt;
                        best = dt < best ? dt : best;
                    }
                }
                if (rc == 0) {
                    const double sgemm = bench_sgemm(threads);
                    const double flops = 4.0 * B * H * (double)S * (double)S * D;
                    const double gf = flops / best * 1e-9;
                    const double e = bench_check(o, q, k, v, S, H, D, scale);
                    fprintf(out, "%3d %7d %4d %4d %7d %10.2f %10.2f %9.1f %9.1f %6.0f%% %9.2g\n", B,
                            S, H, D, threads, best * 1e3, total / reps * 1e3, gf, sgemm,
                            sgemm > 0 ? 100.0 * gf / sgemm : 0.0, e);
                    fflush(out);
                }
            }
            free(q), free(k), free(v), free(o), free(lse);
        }
    }
    return rc;
}
