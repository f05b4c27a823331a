/* host_runtime.c — the neutral face of the CPU backend's BLAS runtime (see host_runtime.h). */
#include "config.h"

#include "kernels/host_runtime.h"
#include "kernels/cpu/blas_runtime.h"
#include "kernels/cpu/profile_cpu.h"
#include "kernels/cpu/thread_pool.h"

void cpdit_host_runtime_init(int argc, char **argv)
{
    blas_runtime_ensure_best_core(argc, argv);
}

const char *cpdit_host_runtime_describe(char *buf, size_t size)
{
    return blas_runtime_describe(buf, size);
}

int cpdit_host_gemm_threads(void)
{
    return cpu_pool_size();
}

void cpdit_host_set_gemm_threads(int n)
{
    cpu_pool_set_size(n); /* the pool, and OpenBLAS's count with it */
}

double cpdit_host_sgemm_gflops(int n, int reps)
{
    /* the reference rate: OpenBLAS's own threads, as many as the pool has (the kernels run
     * OpenBLAS single-threaded inside the pool's workers) */
    blas_runtime_set_num_threads(cpu_pool_size());
    const double g = blas_sgemm_gflops(n, reps);
    blas_runtime_set_num_threads(1);
    return g;
}

void cpdit_host_profile_report(FILE *out)
{
    cpu_prof_report(out);
}
