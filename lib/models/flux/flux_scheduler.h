/* flux_scheduler.h — the scheduler of the FLUX family: FlowMatchEulerDiscreteScheduler
 * (lib/pipeline/flow_schedule.h) as FluxPipeline drives it, its mu taken from the packed image
 * tokens, behind the family interface's model_schedule (lib/models/model.h); and the two
 * scheduler_config.json presets of FLUX.1.
 */
#ifndef CPDIT_FLUX_SCHEDULER_H
#define CPDIT_FLUX_SCHEDULER_H

#include "lib/core/cpdit_error.h"
#include "lib/pipeline/flow_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

struct model_schedule;

/* The scheduler_config.json files of FLUX.1-dev (dynamic shifting) and FLUX.1-schnell. */
void flow_schedule_config_flux_dev(flow_schedule_config *c);
void flow_schedule_config_flux_schnell(flow_schedule_config *c);

/* FluxPipeline's schedule for steps >= 1 over image_tokens packed tokens as a model_schedule:
 * sigmas (steps + 1), the forward's timestep = sigma (FluxPipeline passes t / 1000), the Euler
 * update. Free with model_schedule_free. Errors: as flow_schedule_create's. */
cpdit_status flux_schedule_open(struct model_schedule **out, const flow_schedule_config *c,
                                int steps, long long image_tokens, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
