/* host_runtime.h — what callers outside the CPU backend may ask of the host's math runtime,
 * without reaching into kernels/cpu/ (the BLAS is the CPU backend's business):
 * pinning the BLAS to the best kernels for this CPU at start-up, its description, its thread
 * count and a measured SGEMM rate (benchmarks and the probe report them beside their results).
 * kernels/host_runtime.c forwards to kernels/cpu/blas_runtime.c.
 */
#ifndef CPDIT_KERNELS_HOST_RUNTIME_H
#define CPDIT_KERNELS_HOST_RUNTIME_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* First thing in main() (argv as main's): may re-execute the program once so that the BLAS
 * runs its best kernels for this CPU (see kernels/cpu/blas_runtime.h). */
void cpdit_host_runtime_init(int argc, char **argv);

/* "OpenBLAS 0.3.26, core SkylakeX (...), 16 threads" into buf; returns buf. */
const char *cpdit_host_runtime_describe(char *buf, size_t size);

/* The BLAS's own thread count (1 without such a control), and setting it (process-wide). */
int cpdit_host_gemm_threads(void);
void cpdit_host_set_gemm_threads(int n);

/* Measured fp32 GEMM rate, GFLOP/s, of square n x n products (best of reps). */
double cpdit_host_sgemm_gflops(int n, int reps);

/* With `cpdit --profile` (CPDIT_PROFILE=1): the CPU kernels' time, GFLOP/s (and % of the run's
 * bf16 linear rate), page faults and bytes read per op class, as a table on out; else nothing. */
void cpdit_host_profile_report(FILE *out);

#ifdef __cplusplus
}
#endif
#endif
