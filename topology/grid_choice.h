/* grid_choice.h — the grid of a run that does not name one: `parallel: auto` in a manifest,
 * `cpdit run --model ...` without --ring/--ulysses. The same choice as `cpdit plan`
 * (cost_model.h), with the order of sources of topology/COST-MODEL.md:
 *   1. the topology file: the path given (--topology), else $CPDIT_TOPOLOGY: measured winners
 *      of `cpdit tune` for this model, size and rank count, else the cost model's best;
 *   2. else the documented default: every rank data-parallel for a batch (dp = N), one
 *      Ulysses group of all ranks for a single image — and the reason says that no topology
 *      file was found, so an admin knows to run `cpdit probe`.
 * Runs on one rank (no MPI); the caller broadcasts the answer.
 */
#ifndef CPDIT_GRID_CHOICE_H
#define CPDIT_GRID_CHOICE_H

#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GRID_CHOICE_REASON_MAX 512

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
} grid_choice_request;

/* Errors: INPUT for a topology file that cannot be read or is of another format, a model
 * whose config cannot be read, sizes not multiples of 16. */
cpdit_status grid_choice_auto(const grid_choice_request *rq, grid_choice *out,
                              cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
