/* flux_scheduler.c — FLUX's scheduler behind model_schedule, and FLUX.1's scheduler presets
 * (see flux_scheduler.h). */
#include "lib/models/flux/flux_scheduler.h"

#include <stdlib.h>

#include "lib/models/model.h"

/* FLUX.1-dev's scheduler_config.json says shift 3.0 (unused with dynamic shifting). */
#define FLUX_DEV_SHIFT 3.0

void flow_schedule_config_flux_dev(flow_schedule_config *c)
{
    flow_schedule_config_defaults(c);
    c->shift = FLUX_DEV_SHIFT;
    c->use_dynamic_shifting = true;
}

void flow_schedule_config_flux_schnell(flow_schedule_config *c)
{
    flow_schedule_config_defaults(c);
}

typedef struct flux_schedule {
    model_schedule base;
    flow_schedule fs;
} flux_schedule;

/* Euler: x += (sigma_{i+1} - sigma_i) v, rounded as diffusers does (flow_euler_step). */
static void flux_schedule_step(model_schedule *s, int i, float *x, const float *v, size_t n)
{
    flow_euler_step(x, v, n, s->sigmas[i], s->sigmas[i + 1]);
}

static cpdit_status flux_schedule_json(const model_schedule *s, char **json, cpdit_error *err)
{
    return flow_schedule_to_json(&((const flux_schedule *)s->impl)->fs, json, err);
}

static void flux_schedule_free(model_schedule *s)
{
    flux_schedule *f = s->impl;
    flow_schedule_free(&f->fs);
    free(f);
}

cpdit_status flux_schedule_open(model_schedule **out, const flow_schedule_config *c, int steps,
                                long long image_tokens, cpdit_error *err)
{
    *out = NULL;
    flux_schedule *f = calloc(1, sizeof *f);
    if (!f)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "scheduler", "out of memory");
    cpdit_status st = flow_schedule_create(&f->fs, c, steps, (int)image_tokens, err);
    if (st) {
        flow_schedule_free(&f->fs);
        free(f);
        return st;
    }
    f->base.steps = steps;
    f->base.sigmas = f->fs.sigmas;
    /* FluxPipeline hands the transformer timestep / 1000 = sigma */
    f->base.timesteps = f->fs.sigmas;
    f->base.impl = f;
    f->base.step = flux_schedule_step;
    f->base.to_json = flux_schedule_json;
    f->base.free = flux_schedule_free;
    *out = &f->base;
    return CPDIT_OK;
}
