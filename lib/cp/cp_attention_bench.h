/* cp_attention_bench.h — the context-parallel attention benchmark (`cpdit bench attention`).
 *
 * Run under mpirun on N ranks. Prints (on world rank 0) a header — build, BLAS core, problem —
 * the single-rank kernel time T1 with its FLOP rate next to the BLAS SGEMM rate, then one row
 * per variant and grid:
 *   variant, grid RxU, time per call min/avg/max over ranks (ms), GFLOP/s (whole problem /
 *   max time), MB sent per rank per call (max over ranks),
 *   ratio    = max time / (T1 / (R*U))  — the ideal 1.00 needs a core per rank;
 *   vs_local = max time / Tloc, where Tloc is the slowest rank's own share of the kernel work
 *              (its local queries against the whole sequence) run by all ranks at once: the
 *              ideal on this machine whatever its core count; the excess is the CP overhead
 *              (communication, merges, copies);
 *   kernel%  = share of the call spent in the local kernel (average over ranks).
 * Warm-up calls first, then timed calls; every call starts after a barrier.
 */
#ifndef CPDIT_CP_ATTENTION_BENCH_H
#define CPDIT_CP_ATTENTION_BENCH_H

#include <mpi.h>
#include <stdio.h>
#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_attention_bench_opts {
    int batch;    /* B */
    int txt;      /* text tokens of the joint sequence (split separately) */
    int img;      /* image tokens */
    int heads;    /* H */
    int head_dim; /* D */
    int warmup;   /* untimed calls per row */
    int iters;    /* timed calls per row */
    int anything; /* allow uneven lengths / head shares */
    /* comma-separated variant names (cp_attention_config_parse); NULL or "" = all of
     * ring, ring-allgather, ulysses, unified, unified-allgather */
    const char *variants;
    /* 0 and 0: every grid ring x ulysses = N (ring variants on N x 1, ulysses on 1 x N,
     * unified on the 2D grids); otherwise only this grid (dp = the rest) and every variant */
    int ring, ulysses;
    int sgemm_n;  /* size of the square SGEMM for the reference rate; 0 = skip */
    /* whose kernels, activation dtype and memory the runs use (grids from cp_grid_create_for:
     * MPI for host memory); NULL = the "cpu" table */
    const struct cpdit_backend *backend;
    /* the build's one-line description for the table's first line (the program's
     * cpdit_build_info_line, bin/build_info.h); NULL = no such line */
    const char *build_line;
} cp_attention_bench_opts;

/* FLUX.1 at 512x512 on one rank's worth of heads: B 1, text 512, image 1024, H 24, D 128,
 * 1 warm-up, 3 timed calls, anything on, all variants, all grids, SGEMM 1024, "cpu" table. */
void cp_attention_bench_defaults(cp_attention_bench_opts *o);

/* Collective over world. out is written on world rank 0 only (may be NULL elsewhere).
 * Returns CPDIT_OK, or an error (bad options: CPDIT_ERR_INPUT) on every rank. */
cpdit_status cp_attention_bench(FILE *out, MPI_Comm world, const cp_attention_bench_opts *o,
                                cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
