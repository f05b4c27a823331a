/* model_hooks.h — what a cache between sampler steps sees of one transformer forward (the
 * first-block cache and the TaylorSeer forecaster of lib/pipeline/pipeline_cache.h), without
 * naming a family.
 *
 * A family whose forward honours hooks (model_family.block_hooks = 1) calls the hook at three
 * points of model_step.hooks->points, on every rank of the CP group in the same order:
 *
 *   EMBEDDED  after the embeddings, before the first block     h = the residual stream h0
 *   HEAD      after the first block                            h = h1
 *   TAIL      after the last block (only when the blocks ran)  h = hN
 *
 * h is this rank's rows of the residual stream (rows, dim), host fp32, in the hook's own
 * buffer (buffer()). At EMBEDDED and HEAD the hook may set *skip = 1: it has rewritten h
 * (a cached or forecast hN), and the family loads it back and goes straight to its output
 * layer, skipping the remaining blocks. The hook may communicate over the CP group (it
 * decides there, once for all ranks); *skip must come out the same on every rank of it.
 * Rows [probe_start, probe_start + probe_rows) are the sequence tokens the sampler updates
 * (FLUX: the image rows, after the text rows; diffusers' "hidden_states"), whose first-block
 * residual the first-block cache compares. The rows are sharded like the tokens: each rank
 * holds and caches only its own.
 */
#ifndef CPDIT_MODEL_HOOKS_H
#define CPDIT_MODEL_HOOKS_H

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum model_hook_point {
    MODEL_HOOK_EMBEDDED = 0,
    MODEL_HOOK_HEAD = 1,
    MODEL_HOOK_TAIL = 2
} model_hook_point;

#define MODEL_HOOK_BIT(p) (1u << (unsigned)(p))

/* This rank's residual stream at a hook point. */
typedef struct model_hidden {
    float *h;                        /* (rows, dim) host fp32 */
    long long rows;                  /* all rows this rank holds (FLUX: its text + image rows) */
    int dim;                         /* the transformer's width */
    long long probe_start, probe_rows; /* the sampler tokens' rows among them */
} model_hidden;

typedef struct model_block_hooks {
    void *ctx;
    unsigned points; /* MODEL_HOOK_BIT(point) of each point the family must call */
    /* a host buffer of rows x dim floats, kept by the hook between calls; NULL: out of memory
     * (the family fails with a RUNTIME error) */
    float *(*buffer)(void *ctx, long long rows, int dim);
    cpdit_status (*at)(void *ctx, model_hook_point point, model_hidden *hs, int *skip,
                       cpdit_error *err);
} model_block_hooks;

#ifdef __cplusplus
}
#endif
#endif
