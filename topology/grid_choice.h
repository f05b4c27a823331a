/* grid_choice.h — the grid of a run that does not name one: `parallel: auto` in a manifest,
 * `cpdit run --model ...` without --ring/--ulysses. The same choice as `cpdit plan`
 * (cost_model.h), with the order of sources of topology/COST-MODEL.md:
 *   1. the topology file: the path given (--topology), else $CPDIT_TOPOLOGY: measured winners
 *      of `cpdit tune` for this step's whole key (topology/tuned_key.h: model, size, frames,
 *      text tokens, CFG, ranks, threads, backend, dtype), else the cost model's best;
 *   2. else (grid_choice_world only) the probe's quick mode run at job start over every rank
 *      (a few seconds), and the cost model on what it measured; the probe is kept in the
 *      output folder (topology/probe_cache.h) and reused, without probing, by the later runs
 *      on the same hosts, hardware and rank layout (requeues);
 *   3. when that probe fails: every rank data-parallel, and the reason says why.
 * grid_choice_auto is step 1 on one rank (without a file: the documented default, all ranks
 * data-parallel or one Ulysses group for one image); grid_choice_world is the collective
 * whole that `cpdit run` calls.
 */
#ifndef CPDIT_GRID_CHOICE_H
#define CPDIT_GRID_CHOICE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GRID_CHOICE_REASON_MAX 512
/* The job-start probe: the quick sweep (probe.h) with 2 timed trials of ~20 ms each. */
#define GRID_CHOICE_PROBE_TRIALS 2
#define GRID_CHOICE_PROBE_TARGET_S 0.02

typedef struct grid_choice {
    int dp, ring, ulysses;
    char variant[40];                     /* cm_variant_parse spelling: "unified+anything" */
    char reason[GRID_CHOICE_REASON_MAX];  /* one line for the summary and the index */
    int planned;                          /* 1: from a topology file; 0: the default */
} grid_choice;

typedef struct grid_choice_request {
    const char *topology; /* NULL or "": $CPDIT_TOPOLOGY, else the default */
    const char *model;    /* folder or builtin:NAME */
    int width, height, max_seq_len, steps;
    uint64_t images;      /* items the job renders (1 for a single image) */
    int ranks;            /* world size */
    int frames;           /* video frames (0/1: an image) */
    int cfg;              /* 1: true CFG (two forwards per step) */
    const char *backend;  /* --backend (NULL: the default) */
    int threads;          /* threads per rank (0: this process's GEMM threads) */
    const char *probe_cache; /* the folder of the job-start probe's cache (probe_cache.h: the
                                output folder), NULL: only $CPDIT_PROBE_CACHE */
} grid_choice_request;

/* Errors: INPUT for a topology file that cannot be read or is of another format, a model
 * whose config cannot be read or whose family is unknown, sizes the family cannot make
 * (lib/models/model_plan.h). */
cpdit_status grid_choice_auto(const grid_choice_request *rq, grid_choice *out,
                              cpdit_error *err);

/* Collective over comm (rq->ranks is taken from comm): rank 0's --topology / $CPDIT_TOPOLOGY
 * decides; with a file, grid_choice_auto on rank 0, the answer broadcast. Without one (and
 * more than one rank) the quick probe (grid_choice_probe_options) runs on every rank and
 * rank 0 plans on its document. A failing probe (agreed by every rank) is not an error: the
 * answer is every rank data-parallel with the probe's message in the reason. Every rank
 * returns the same status and *out. Errors: INPUT as grid_choice_auto (bad file, model,
 * sizes), checked before any probe. */
struct cpdit_probe_options;
cpdit_status grid_choice_world(MPI_Comm comm, const grid_choice_request *rq, grid_choice *out,
                               cpdit_error *err);

/* The options of the job-start probe: the quick sweep, shorter timings, no log. */
void grid_choice_probe_options(struct cpdit_probe_options *o);

/* "dp D ring R ulysses U VARIANT (reason)" — the summary's and index's line — into buf; just
 * the reason when the grid was given (dp 0). */
const char *grid_choice_line(const grid_choice *gc, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
