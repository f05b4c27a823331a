/* wan_family_schedule.c — the Wan family's sampler (wan_family_internal.h): diffusers'
 * UniPCMultistepScheduler from scheduler/scheduler_config.json (lib/pipeline/unipc_schedule.h),
 * flow_shift from the request when given. The forward gets diffusers' integer timesteps
 * (trunc(sigma·1000) of the float64 sigmas) as floats; the update is elementwise, so each rank
 * steps its own tokens with its own multistep history (made at the first step, for the n
 * elements it holds). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/models/wan/wan_family_internal.h"

/* The JSON of one value: "%.9g" keeps a float32 exactly. */
#define JSON_FLOAT_CHARS 24

typedef struct wan_unipc {
    unipc_schedule us;
    unipc_state state;
    float *workspace;   /* unipc_state_floats(n) */
    size_t n;           /* elements the state steps (0: not started) */
    float *timesteps;   /* steps: the integer timesteps as floats */
} wan_unipc;

static void unipc_free_impl(model_schedule *s)
{
    wan_unipc *u = s->impl;
    if (u) {
        unipc_schedule_free(&u->us);
        free(u->workspace);
        free(u->timesteps);
        free(u);
    }
    free(s);
}

/* x <- UniPC step i with the velocity v (n floats). The history starts at step 0. The step
 * returns no status: when it cannot run (no memory for the history, a step out of order) x
 * becomes NaN, which the pipeline's finite check after sampling reports, never a clip. */
static void unipc_model_step(model_schedule *s, int i, float *x, const float *v, size_t n)
{
    wan_unipc *u = s->impl;
    cpdit_error e;
    cpdit_error_clear(&e);
    int ok = 1;
    if (i == 0 || u->n != n) {
        free(u->workspace);
        u->workspace = malloc((unipc_state_floats(&u->us, n) + 1) * sizeof(float));
        u->n = u->workspace ? n : 0;
        ok = u->workspace && !unipc_state_init(&u->state, &u->us, n, u->workspace, &e);
    }
    ok = ok && u->state.step_index == i && !unipc_step(&u->state, x, v, &e);
    if (!ok)
        for (size_t k = 0; k < n; k++)
            x[k] = NAN;
}

static cpdit_status unipc_to_json(const model_schedule *s, char **json, cpdit_error *err)
{
    const size_t cap = 64 + (size_t)(2 * s->steps + 1) * JSON_FLOAT_CHARS;
    char *b = malloc(cap);
    if (!b)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory");
    size_t k = (size_t)snprintf(b, cap, "{\"sigmas\": [");
    for (int i = 0; i <= s->steps; i++)
        k += (size_t)snprintf(b + k, cap - k, "%s%.9g", i ? ", " : "", s->sigmas[i]);
    k += (size_t)snprintf(b + k, cap - k, "], \"timesteps\": [");
    for (int i = 0; i < s->steps; i++)
        k += (size_t)snprintf(b + k, cap - k, "%s%.9g", i ? ", " : "", s->timesteps[i]);
    snprintf(b + k, cap - k, "]}\n");
    *json = b;
    return CPDIT_OK;
}

cpdit_status wan_schedule_open(const cpdit_model *m, const model_geometry *g, int steps,
                               double flow_shift, model_schedule **out, cpdit_error *err)
{
    (void)g;
    *out = NULL;
    const wan_model *wm = wan_model_of(m);
    if (!wm->have_sched)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, m->dir,
                               "opened without the pipeline's components: no scheduler");
    unipc_config c = wm->sched;
    if (flow_shift > 0.0)
        c.flow_shift = flow_shift;
    cpdit_status st = unipc_config_validate(&c, "flow_shift", err);
    if (st)
        return st;
    model_schedule *s = calloc(1, sizeof *s);
    wan_unipc *u = calloc(1, sizeof *u);
    if (!s || !u) {
        free(s);
        free(u);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory");
    }
    s->impl = u;
    s->free = unipc_free_impl;
    s->step = unipc_model_step;
    s->to_json = unipc_to_json;
    if ((st = unipc_schedule_create(&u->us, &c, steps, err))) {
        unipc_free_impl(s);
        return st;
    }
    if (!(u->timesteps = malloc((size_t)steps * sizeof(float)))) {
        unipc_free_impl(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory");
    }
    for (int i = 0; i < steps; i++)
        u->timesteps[i] = (float)u->us.timesteps[i];
    s->steps = steps;
    s->sigmas = u->us.sigmas;
    s->timesteps = u->timesteps;
    *out = s;
    return CPDIT_OK;
}
