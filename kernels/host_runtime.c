/* host_runtime.c — the neutral face of the CPU backend's BLAS runtime (see host_runtime.h). */
#include "config.h"

#include "kernels/host_runtime.h"
#include "kernels/cpu/blas_runtime.h"

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
    return blas_runtime_get_num_threads();
}

void cpdit_host_set_gemm_threads(int n)
{
    blas_runtime_set_num_threads(n);
}

double cpdit_host_sgemm_gflops(int n, int reps)
{
    return blas_sgemm_gflops(n, reps);
}
