/* thread_pool.h — the one persistent worker pool of a rank (process): every parallel CPU
 * kernel (bf16 GEMM and its packing, attention, the large element-wise ops, norms, the VAE
 * convolutions) runs on it; no thread is created per call.
 *
 * Size (threads, the calling thread included), first match wins:
 *   1. cpu_pool_set_size(n) (tests, benchmarks)
 *   2. CPDIT_THREADS=N (what `cpdit --threads N` sets)
 *   3. SLURM_CPUS_PER_TASK (the cores Slurm gave each task: srun -c N / --cpus-per-task)
 *   4. OMP_NUM_THREADS, then OPENBLAS_NUM_THREADS (the conventional per-process settings)
 *   5. the CPUs of the rank's affinity mask (sched_getaffinity), divided among the ranks
 *      sharing this node when the mask is the whole machine (OMPI_COMM_WORLD_LOCAL_SIZE,
 *      MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE: mpirun --bind-to none), at least 1.
 * Threads are pinned to the mask's CPUs (worker i to its i-th CPU) when the pool has exactly
 * as many threads as the mask has CPUs and the rank owns the mask (it is narrower than the
 * machine, or the rank is alone on the node); CPDIT_PIN=0 never pins, CPDIT_PIN=1 always does
 * (round robin over the mask); the calling thread is not pinned (helper threads it starts
 * later keep the whole mask). OpenBLAS's own thread count is set to 1: its SGEMMs run inside
 * the pool's workers (kernels/cpu/parallel_ops_cpu.h cpu_par_sgemm splits C's rows), so two
 * pools never compete for the cores.
 * When a rank's mask leaves cores of the node unused (its ranks times the mask's CPUs fewer
 * than the node's, e.g. Open MPI's default bind-to-core with np <= 2) rank 0 of the node says
 * so once on stderr with the fix (CPDIT_QUIET_BINDING=1 silences it).
 *
 * Runs: cpu_pool_run(n, fn, ctx) calls fn(ctx, w, n) for w = 0..n-1 on n threads (the caller
 * is worker 0) and returns when all have returned. A run started from inside a pool task, or
 * from any thread but the one that made the pool (the loader's prefetch helper packing the
 * next block while the forward computes), runs inline on the calling thread alone
 * (fn(ctx, 0, 1)): kernels must be correct for any worker count.
 */
#ifndef CPDIT_THREAD_POOL_H
#define CPDIT_THREAD_POOL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most threads of a pool. */
#define CPU_POOL_MAX_THREADS 256

/* fn(ctx, worker, workers): one worker's share of a run. */
typedef void (*cpu_pool_fn)(void *ctx, int worker, int workers);
/* fn(ctx, i0, i1): the items [i0, i1) of a cpu_pool_for. */
typedef void (*cpu_pool_range_fn)(void *ctx, size_t i0, size_t i1);

/* The pool's thread count (the pool is made on the first call). */
int cpu_pool_size(void);
/* Resize the pool to n threads (n <= 0: back to the environment's choice). Not while a run
 * is in progress. */
void cpu_pool_set_size(int n);
/* Run fn on min(workers, size) threads (workers <= 0: all). */
void cpu_pool_run(int workers, cpu_pool_fn fn, void *ctx);
/* Split [0, n) into one contiguous range per worker (each at least grain items, so small n
 * runs inline) and call fn on each. The split depends on the worker count: use it for work
 * whose items are computed independently (element-wise, per row). */
void cpu_pool_for(size_t n, size_t grain, cpu_pool_range_fn fn, void *ctx);
/* Whether a run from the calling thread would run inline: it is running a pool task, or it is
 * not the thread that made the pool. */
int cpu_pool_in_task(void);
/* One line: "2 threads (affinity mask 2 CPUs of 2, pinned)". */
const char *cpu_pool_describe(char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
