/* plan_request.h — what `cpdit plan` and `cpdit tune` plan for, with the defaults `cpdit run`
 * uses: the manifest's settings when one is given (--manifest FILE or the positional
 * argument: model, width x height or its first size, max_sequence_length, steps, true CFG
 * with a negative prompt, the item count), else the model's run defaults (a built-in
 * model's lib/builtin run defaults; a folder: FLUX.1's 1024 x 1024, 28 steps, its pipeline's
 * T5 tokens, no CFG); options given on the command line win over both. */
#ifndef CPDIT_PLAN_REQUEST_H
#define CPDIT_PLAN_REQUEST_H

#include "lib/models/model_plan.h"

/* What the command line gave: 0 (cfg, objective: -1) = not given. */
typedef struct plan_given {
    const char *manifest, *model;
    int width, height, frames, text_tokens, steps, images;
    int cfg;       /* --cfg 1, --no-cfg 0 */
    int objective; /* PLAN_OBJECTIVE_* */
} plan_given;
#define PLAN_GIVEN_NONE {NULL, NULL, 0, 0, 0, 0, 0, 0, -1, -1}

enum { PLAN_OBJECTIVE_LATENCY = 0, PLAN_OBJECTIVE_THROUGHPUT = 1 };
#define PLAN_FOLDER_STEPS 28 /* FLUX.1-dev's sampler steps: a folder model without a manifest */

typedef struct plan_request {
    char model[MODEL_PLAN_KEY_MAX];
    model_request req; /* width, height, frames, text_tokens (0: family default), cfg, steps */
    int steps;         /* sampler steps (>= 1) */
    int images;        /* images of the job: 1 for latency, K (or the manifest's items, else the
                          ranks) for throughput */
    int objective;     /* PLAN_OBJECTIVE_* */
    char source[160];  /* "manifest m.yaml" / "the run defaults of builtin:shapes" */
} plan_request;

/* "--objective latency|throughput": the PLAN_OBJECTIVE_* value, or -1 (usage error printed
 * for sub). */
int plan_parse_objective(const char *sub, const char *text);

/* Resolve g into out for `ranks` ranks (0: not known yet; then a throughput job without
 * --images or manifest items gets images 0, for the caller to set to the world size). Returns a CLI exit code (0, or 2 with the message
 * printed: a manifest that cannot be read, no model). */
int plan_request_resolve(const char *sub, const plan_given *g, int ranks, plan_request *out);

#endif
