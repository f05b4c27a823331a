/* cost_model.h — predicted step time and memory of every dp x ring x ulysses grid for a
 * model (lib/models/model_plan.h: any family), a requested size (image or video) and a
 * measured machine (topo_file.h); the planner's ranking.
 *
 * For N ranks every factorisation N = dp * R * U is a candidate, with the attention variant
 * the grid needs: R = U = 1 "local" (no split), U > 1 = R "ulysses", U = 1 < R "ring" and
 * "ring-allgather", both > 1 "unified" and "unified-allgather"; "+anything" is appended when
 * the sharded tokens (FLUX: text + image; Wan: video) do not divide R*U or the heads do not
 * divide U (uneven splits, lib/cp/cp_attention.h). Ranks are laid out as the grid does (rank = dp*R*U + r*U + u), so
 * a Ulysses group is U neighbouring ranks and a ring strides by U; the link class of a group
 * is the widest pair class in it (topo_group_class) and its alpha-beta fit prices the
 * transfers. Each attention kind of the model is priced on its own: self-attention over the
 * sharded sequence with the variant's communication, local cross-attention (queries sharded,
 * the text's K/V on every rank) as compute only. The formulas are in topology/COST-MODEL.md.
 *
 * Objective: the time to render `images` images (or videos), ceil(images / dp) * steps *
 * forwards_per_step * step_s (every group runs its own image at the same time); with true CFG
 * (forwards_per_step 2) on an even dp, pairs of groups share an image (cpdit run's CFG pairs):
 * ceil(images / (dp / 2)) * steps * step_s. images = 1 is latency; images >= N ranks is
 * throughput (images per hour).
 */
#ifndef CPDIT_COST_MODEL_H
#define CPDIT_COST_MODEL_H

#include <stdio.h>

#include "lib/core/cpdit_error.h"
#include "lib/cp/cp_attention.h"
#include "lib/models/model_plan.h"
#include "topology/topo_file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fraction of a ring block's transfer that can hide behind the block's computation:
 * shared-memory copies inside a node run on the same CPU cores as the kernel, network and
 * GPU copies run on their own engines. */
#define CM_OVERLAP_SHM 0.5
#define CM_OVERLAP_DMA 0.9
/* fp32 weights the CPU pipeline keeps converted between steps (lib/pipeline/pipeline.c). */
#define CM_CPU_WEIGHT_CACHE_BYTES (1024.0 * 1024.0 * 1024.0)
/* Bytes per parameter as loaded (bf16). */
#define CM_WEIGHT_BYTES_PER_PARAM 2.0

typedef struct cm_config {
    int dp, ring, ulysses;
    cp_ring_mode ring_mode; /* for ring > 1 */
    int anything;           /* uneven tokens or heads */
} cm_config;

typedef struct cm_prediction {
    cm_config cfg;
    char variant[40];        /* "unified", "ring-allgather+anything", ... */
    double step_s;           /* one transformer step of one image (every group busy) */
    double compute_s;        /* linear layers + attention kernel */
    double comm_s;           /* exposed communication: all-to-alls, ring transfers not
                              * hidden, all-gathers, the small agreement all-reduces */
    double hidden_s;         /* ring transfer hidden behind the kernel */
    double linear_s, attn_s; /* parts of compute_s */
    double mem_weights, mem_acts, mem_attn, mem_total; /* bytes per rank */
    int fits;                /* memory fits the rank's GPU / its share of the host */
    int ulysses_class, ring_class; /* topo_class of the groups, -1 when degree 1 */
    double latency_s;        /* steps * step_s: one image */
    double images_per_hour;  /* dp * 3600 / latency_s */
    double score_s;          /* the objective: ceil(images / dp) * latency_s */
    double measured_s;       /* step_s measured by cpdit tune (tuned section), 0 if none */
    int at_shapes;           /* compute from times measured at the model's own shapes */
    int cfg_pairs;           /* 1: true CFG on an even dp: pairs of groups share each item
                                (latency_s one forward per step, dp / 2 items in flight) */
} cm_prediction;

typedef struct cm_options {
    int ranks;  /* N; 0 = the topology's ranks */
    int steps;  /* sampler steps per image (>= 1) */
    int images; /* images the job renders (>= 1): 1 = latency */
    int threads; /* threads (cores) per rank, for core-hours; 0 = 1 */
    int gpus;    /* 1: every rank drives a GPU (the cost is GPU-hours, not core-hours) */
} cm_options;

/* What 1000 images (or videos) cost on grid p's whole allocation: ranks x threads core-hours,
 * or ranks GPU-hours with o->gpus; the unit's name ("core-h", "GPU-h") in *unit. */
double cm_cost_per_1000(const cm_prediction *p, const cm_options *o, const char **unit);

/* "local", "ulysses", "unified+anything", ... into buf (the spelling cm_variant_parse takes). */
const char *cm_variant_name(const cm_config *c, char *buf, size_t n);
/* Parse a variant spelling into an attention config (variant, ring mode, anything); "local"
 * parses as unified. INPUT error naming the spellings otherwise. */
cpdit_status cm_variant_parse(const char *name, cp_attention_config *cfg, cpdit_error *err);

/* Predict one grid. */
void cm_predict(const topology *t, const model_plan_shape *s, const cm_options *o,
                const cm_config *c, cm_prediction *p);

/* Every candidate for o->ranks ranks, ranked best first (memory misfits last). tuned (may be
 * NULL) fills measured_s; when any candidate was measured, the measured ones rank first by
 * their measured objective. *out is malloc'd. INPUT error for ranks < 1. */
cpdit_status cm_rank(const topology *t, const model_plan_shape *s, const cm_options *o,
                     const topo_tuned *tuned, cm_prediction **out, int *n, cpdit_error *err);

/* One line (no newline) saying why out[0] was chosen, into buf (s names the item: image or
 * video; may be NULL). */
const char *cm_reason(const cm_prediction *best, const cm_options *o, const model_plan_shape *s,
                      const char *source, char *buf, size_t n);

/* The ranked table (plan's output) and the closing "chosen: dp D ring R ulysses U VARIANT". */
void cm_print_table(FILE *f, const cm_prediction *p, int n, const cm_options *o,
                    const model_plan_shape *s);
/* The same as JSON ({"model":..., "candidates": [...], "chosen": {...}}), one document. */
void cm_print_json(FILE *f, const cm_prediction *p, int n, const cm_options *o,
                   const model_plan_shape *s, const char *reason);

#ifdef __cplusplus
}
#endif
#endif
