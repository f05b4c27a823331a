/* probe_compute.c — this rank's compute rates for the topology file (see probe.h). */
#include "topology/probe.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/host_runtime.h"

#define WHERE_COMPUTE "probe: compute"
#define SGEMM_N 1024
#define SGEMM_N_QUICK 512
#define SGEMM_REPS 3
#define ATTN_S 1024
#define ATTN_S_QUICK 512
#define ATTN_H 8
#define ATTN_D 128 /* FLUX's head dimension */
#define ATTN_REPS 2

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* n values in [-1, 1) from an LCG. */
static void fill(float *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((int64_t)(seed >> 40) - (1 << 23)) / (float)(1 << 23);
    }
}

cpdit_status probe_compute_rates(int quick, double *sgemm_flops, double *attention_flops,
                                 cpdit_error *err)
{
    const int n = quick ? SGEMM_N_QUICK : SGEMM_N, S = quick ? ATTN_S_QUICK : ATTN_S;
    const double g = cpdit_host_sgemm_gflops(n, SGEMM_REPS);
    if (g < 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_COMPUTE,
                               "SGEMM %dx%d failed (out of memory)", n, n);
    *sgemm_flops = g * 1e9;

    const size_t elems = (size_t)S * ATTN_H * ATTN_D;
    float *q = malloc(4 * elems * sizeof *q), *lse = malloc((size_t)S * ATTN_H * sizeof *lse);
    if (!q || !lse) {
        free(q);
        free(lse);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_COMPUTE, "out of memory");
    }
    float *k = q + elems, *v = k + elems, *out = v + elems;
    fill(q, 3 * elems, 12345);
    const float scale = 1.0f / sqrtf((float)ATTN_D);
    double best = 1e300;
    cpdit_status st = CPDIT_OK;
    /* one warm-up call, then the best of ATTN_REPS */
    for (int r = 0; r <= ATTN_REPS && st == CPDIT_OK; r++) {
        const double t0 = now_s();
        st = attention_cpu_forward(out, lse, q, k, v, 1, S, S, ATTN_H, ATTN_D, scale, err);
        const double t = now_s() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    free(q);
    free(lse);
    if (st != CPDIT_OK)
        return st;
    *attention_flops = 4.0 * S * (double)S * ATTN_D * ATTN_H / best;
    return CPDIT_OK;
}
