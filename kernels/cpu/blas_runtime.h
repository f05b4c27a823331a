/* blas_runtime.h — make the BLAS run its fastest correct kernels on this CPU, and say which.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's libopenblas0-*) picks its kernel set ("core") once,
 * in its library constructor, before main(). Version 0.3.21 does not know recent CPUs (AMD
 * family 0x1A / Zen 5, some hypervisors' CPUID) and falls back to an older core (Haswell, even
 * Prescott), running SGEMM at half or a fifth of the speed the CPU allows. The only supported way
 * to choose the core is the environment variable OPENBLAS_CORETYPE, read in that constructor.
 *
 * blas_runtime_ensure_best_core() therefore, first thing in main():
 *   1. leaves everything alone when the BLAS is not OpenBLAS, or when OpenBLAS's core
 *      (detected, or named by the user's OPENBLAS_CORETYPE) is already as good as the CPU
 *      supports;
 *   2. otherwise sets OPENBLAS_CORETYPE to the best core for the CPU's features (from cpuid and
 *      xgetbv: the OS must save the wider registers) and re-executes the program
 *      (/proc/self/exe, same argv, same pid — fine under mpirun/srun before MPI_Init), with the
 *      marker variable CPDIT_BLAS_CORE_FORCED so that it happens at most once.
 * OpenBLAS built for a single target (no DYNAMIC_ARCH in openblas_get_config()) ignores
 * OPENBLAS_CORETYPE, so then nothing is re-executed; the description says what the CPU offers.
 * If the re-exec fails, the program continues with the detected core (never aborts).
 * A user's OPENBLAS_CORETYPE that names an older core than the CPU supports is replaced too
 * (sites pin old cores in login environments and forget them; cpdit's job is the fastest
 * correct kernels). The environment variable CPDIT_BLAS_CORE changes the policy:
 * "keep" = keep a user's OPENBLAS_CORETYPE whatever it names (the description says what the
 * CPU could do); "off" = never touch the core; unset or "auto" = the default above.
 *
 * Core tiers (OpenBLAS 0.3.21 names):
 *   0 SSE only: Prescott, Core2, Nehalem, Barcelona, Atom, ... ("Unknown" too)
 *   1 AVX:      Sandybridge, Bulldozer, Piledriver, Steamroller, Excavator
 *   2 AVX2+FMA: Haswell, Zen
 *   3 AVX-512 (F, BW, DQ, VL): SkylakeX, Cooperlake, SapphireRapids
 * The best core for a CPU is SkylakeX for tier 3 (Cooperlake/SapphireRapids only add bf16/fp16
 * GEMMs that cpdit does not call, with the same SGEMM kernels, and stock 0.3.21's
 * force_coretype() does not accept "Cooperlake"), Zen (AMD/Hygon) or Haswell for tier 2,
 * Sandybridge for tier 1. A detected name the table does not know (a newer OpenBLAS) is left
 * alone.
 */
#ifndef CPDIT_BLAS_RUNTIME_H
#define CPDIT_BLAS_RUNTIME_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The name of the environment variable that marks a process already re-executed. */
#define BLAS_RUNTIME_MARKER_ENV "CPDIT_BLAS_CORE_FORCED"
/* The policy variable: unset/"auto", "keep" or "off" (see above). */
#define BLAS_RUNTIME_POLICY_ENV "CPDIT_BLAS_CORE"

/* What the CPU and OS offer for SIMD (each field 0 or 1, except vendor/family/model). */
typedef struct blas_cpu_features {
    char vendor[13];   /* "GenuineIntel", "AuthenticAMD", ... */
    int family, model; /* display family and model (base + extended) */
    int sse3, avx, fma, avx2;
    int avx512f, avx512bw, avx512dq, avx512vl, avx512_bf16;
    int os_ymm; /* XCR0 has SSE+AVX state: the OS saves ymm registers */
    int os_zmm; /* XCR0 has opmask+zmm state: the OS saves zmm registers */
} blas_cpu_features;

/* Fill f from cpuid/xgetbv of the running CPU (all zero on non-x86 builds). */
void blas_cpu_features_detect(blas_cpu_features *f);

/* The SIMD tier (0..3, table above) of an OpenBLAS core name, case-insensitive;
 * -1 when the name is not in the table. */
int blas_core_tier(const char *core_name);

/* Pure decision: the core name to force given the CPU's features and the core OpenBLAS
 * detected, or NULL to leave the detection alone (it is as good as the CPU supports, or the
 * name is unknown). When a name is returned and why/why_n are given, why receives the
 * features that justify it, e.g. "avx512f avx512bw avx512dq avx512vl". */
const char *blas_runtime_choose_core(const blas_cpu_features *f, const char *detected, char *why,
                                     size_t why_n);

/* See the comment at the top. argv must be main()'s argv (argv[argc] == NULL). Call before
 * creating threads or initialising MPI. Returns normally unless it re-executes; calls after
 * the first do nothing. */
void blas_runtime_ensure_best_core(int argc, char **argv);

/* The step after the checks of ensure_best_core(), with the detected core name given (tests
 * pass a fake one): when blas_runtime_choose_core() names a better core, set OPENBLAS_CORETYPE
 * and the marker and re-execute /proc/self/exe with argv (does not return on success).
 * Returns 0 when nothing needed doing, -1 when the re-exec was impossible (then the
 * environment is restored and the description says why). Call ensure_best_core() first in a
 * re-executed process (it consumes the marker); calling this one there would loop. */
int blas_runtime_reexec_for(const char *detected, int argc, char **argv);

/* A one-line description of the BLAS and its core, e.g.
 * "OpenBLAS 0.3.21 core SkylakeX (forced from Haswell via cpuid: avx512f avx512bw ...)".
 * Writes into buf (size n) and returns buf. */
const char *blas_runtime_describe(char *buf, size_t n);

/* The core OpenBLAS is running ("SkylakeX"), or "n/a" for another BLAS. */
const char *blas_runtime_core_name(void);

/* BLAS thread count (OpenBLAS's own pool); 1 when the BLAS has no such control. */
int blas_runtime_get_num_threads(void);
/* Set the BLAS thread count (no-op without OpenBLAS). Global to the process. */
void blas_runtime_set_num_threads(int n);

/* Measured SGEMM rate in GFLOP/s (2 n^3 flops per call) for square n x n row-major
 * matrices, best of reps timed calls after one warm-up, with the current thread count.
 * Returns a negative value when n < 1, reps < 1 or memory runs out. */
double blas_sgemm_gflops(int n, int reps);

#ifdef __cplusplus
}
#endif
#endif
