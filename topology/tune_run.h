/* tune_run.h — `cpdit tune`'s measurement: real transformer steps of candidate grids, timed
 * fairly on a noisy machine.
 *
 * Every candidate's grid is built over the world (cp_grid_create) and its ranks hold their
 * share of one item's tokens (the model family's shard_open, lib/models/model.h) with fixed
 * pseudo-random inputs. A round
 * runs one forward of every candidate, in an order rotated by one each round (so no grid
 * always runs first or last); round 0 is a warm-up (weights converted, workspaces grown)
 * and is not counted. One forward is timed from a world barrier to the slowest rank's end
 * (every dp group busy with its own image, as in a batch). After the minimum rounds, a
 * candidate keeps being measured until the 95 % interval of its median is tight
 * (tune_stats.h) or the time budget is spent; its time is the median of its rounds, with
 * min, max, n and the interval in c[i].stats.
 *
 * Failures never hang: every forward's status is agreed over the world, a failing candidate
 * is marked (with the first failing rank's message) and left out of later rounds; a failure
 * before the rounds (model missing on one rank) fails every rank with that message.
 */
#ifndef CPDIT_TUNE_RUN_H
#define CPDIT_TUNE_RUN_H

#include <mpi.h>
#include <stdio.h>

#include "lib/core/cpdit_error.h"
#include "topology/cost_model.h"
#include "topology/tune_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TUNE_MAX_ROUNDS 128

typedef struct tune_candidate {
    cm_prediction pred;    /* the grid and its prediction */
    char why[48];          /* "predicted #2", "baseline: all data-parallel", ... */
    double samples[TUNE_MAX_ROUNDS]; /* seconds per step, counted rounds */
    int n_samples;
    double measured_s;     /* median of samples; 0 when failed */
    tune_stats stats;      /* of samples: median, min, max, n, 95 % interval */
    int tight;             /* 1: stopped because the interval was tight (else: budget) */
    /* filled by the choice (cmd_tune.c): the objective (seconds for the job's images:
     * ceil(images / dp) x steps x forwards per step x step) from the median and from the
     * interval's ends; tied: its interval overlaps the best one's */
    double objective_s, objective_lo, objective_hi;
    int tied;
    int failed;
    char error[256];
} tune_candidate;

/* How long to measure: at least min_rounds counted rounds of every candidate; then only the
 * candidates whose interval is not yet within rel of their mean, until budget_s seconds of
 * measuring have passed (rank 0's clock decides for all) or TUNE_MAX_ROUNDS - 1 rounds. */
typedef struct tune_budget {
    int min_rounds; /* >= 1 */
    double budget_s;
    double rel;     /* TUNE_STATS_REL_HALF_WIDTH */
} tune_budget;

/* Collective over world: every rank passes the same candidates (same order) and model
 * folder (already resolved: builtin models written). log: rank 0's progress, may be NULL.
 * Returns an error only for failures that stop the whole tune (the model cannot be opened
 * on some rank); per-candidate failures are in c[i].failed. */
cpdit_status tune_measure(MPI_Comm world, const char *model_dir, const model_plan_shape *s,
                          tune_candidate *c, int n, const tune_budget *b, FILE *log,
                          cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
