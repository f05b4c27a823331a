/* flow_schedule.h — the flow-matching sampler schedule: FlowMatchEulerDiscreteScheduler as FluxPipeline
 * drives it, reproduced in the same float32/float64 steps as diffusers + numpy, and the Euler
 * update.
 *
 * FluxPipeline.__call__ (diffusers) does, for N = num_inference_steps and L = image_seq_len
 * (packed latent tokens = (H/16)·(W/16)):
 *   sigmas = np.linspace(1.0, 1/N, N)                                  float64
 *   mu     = L·m + b, m = (max_shift - base_shift)/(max_seq - base_seq),
 *            b = base_shift - m·base_seq                                float64 (calculate_shift)
 * and the scheduler's set_timesteps(sigmas=…, mu=…):
 *   sigmas = sigmas.astype(float32)
 *   use_dynamic_shifting (FLUX.1-dev):  σ' = e^mu / (e^mu + (1/σ - 1))  (time_shift_type
 *       "exponential", the default; "linear": mu / (mu + (1/σ - 1))), in float32 with e^mu
 *       (resp. mu) rounded to float32 first;
 *   else (FLUX.1-schnell, shift 1):     σ' = shift·σ / (1 + (shift - 1)·σ), float32;
 *   timesteps = σ'·num_train_timesteps (float32);  sigmas = σ' + [0].
 * Euler step (scheduler.step): x ← x + (σ_next - σ)·v in float32, the difference rounded to
 * float32 first, then one product and one sum per element, each rounded (no fused multiply-add).
 *
 * Older diffusers releases applied the shift to the float64 sigmas and rounded afterwards; their
 * sigmas differ from these by a few float32 ulp at most (2 in the tested cases).
 */
#ifndef CPDIT_FLOW_SCHEDULE_H
#define CPDIT_FLOW_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/core/cpdit_error.h"
#include "lib/io/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLOW_MATCH_EULER_CLASS "FlowMatchEulerDiscreteScheduler"

typedef enum flow_time_shift_type {
    FLOW_TIME_SHIFT_EXPONENTIAL = 0, /* e^mu / (e^mu + (1/t - 1)) — FLUX */
    FLOW_TIME_SHIFT_LINEAR = 1       /* mu / (mu + (1/t - 1)) */
} flow_time_shift_type;

/* scheduler/scheduler_config.json; defaults are those of the scheduler's __init__. */
typedef struct flow_schedule_config {
    int num_train_timesteps;     /* default 1000 */
    double shift;                /* default 1.0 (FLUX.1-dev's file says 3.0, unused there) */
    bool use_dynamic_shifting;   /* default false (FLUX.1-dev: true) */
    double base_shift;           /* default 0.5 */
    double max_shift;            /* default 1.15 */
    int base_image_seq_len;      /* default 256 */
    int max_image_seq_len;       /* default 4096 */
    flow_time_shift_type time_shift_type; /* default exponential */
} flow_schedule_config;

/* The scheduler's defaults. */
void flow_schedule_config_defaults(flow_schedule_config *c);
/* FLUX.1's presets (scheduler_config.json of dev and schnell) are the FLUX family's
 * (lib/models/flux/). */

/* Read a loaded scheduler_config.json (defaults for missing keys) and validate it. Errors
 * (INPUT, where = the file): a "_class_name" other than FlowMatchEulerDiscreteScheduler,
 * wrong JSON types, num_train_timesteps < 1, shift <= 0, max_image_seq_len ==
 * base_image_seq_len, an unknown time_shift_type, and the options FLUX does not use and cpdit
 * does not implement when enabled (invert_sigmas, shift_terminal, use_karras_sigmas,
 * use_exponential_sigmas, use_beta_sigmas, stochastic_sampling). */
cpdit_status flow_schedule_config_from(const model_config *cfg, flow_schedule_config *c,
                                       cpdit_error *err);
cpdit_status flow_schedule_config_validate(const flow_schedule_config *c, const char *where,
                                           cpdit_error *err);

/* Load the scheduler config of a model folder: DIR/scheduler/scheduler_config.json for a
 * pipeline root, DIR/scheduler_config.json for the scheduler folder itself. */
cpdit_status flow_schedule_config_load(const char *model_dir, flow_schedule_config *c,
                                       cpdit_error *err);

/* calculate_shift: mu for image_seq_len packed tokens (float64, as Python computes it). */
double flow_calculate_shift(const flow_schedule_config *c, int image_seq_len);

/* image_seq_len of a height x width image (pixels; both multiples of 16): (h/16)·(w/16). */
int flow_image_seq_len(int height, int width);

typedef struct flow_schedule {
    int num_steps;    /* N */
    double mu;        /* the shift parameter used; 0 when use_dynamic_shifting is false */
    float *sigmas;    /* N + 1 values, decreasing from 1.0, the last one 0 */
    float *timesteps; /* N values: sigmas[i] · num_train_timesteps */
} flow_schedule;

/* The schedule for num_steps >= 1 steps at image_seq_len >= 1 tokens. Errors: INPUT for bad
 * counts, RUNTIME for allocation. Free with flow_schedule_free (also after a failure). */
cpdit_status flow_schedule_create(flow_schedule *s, const flow_schedule_config *c, int num_steps,
                                  int image_seq_len, cpdit_error *err);
void flow_schedule_free(flow_schedule *s);

/* The scheduler's own schedule with a static shift, as WanPipeline drives its
 * FlowMatchEulerDiscreteScheduler fallback (set_timesteps(num_steps), no sigmas, no mu):
 *   __init__ (float32):  s = (T..1)/T, s = shift·s/(1 + (shift-1)·s); sigma_max = s[0] (= 1),
 *                        sigma_min = s[T-1];
 *   set_timesteps (float64 until the cast): t = linspace(sigma_max·T, sigma_min·T, N),
 *                        s = t/T shifted again by shift·s/(1 + (shift-1)·s) (diffusers shifts
 *                        twice here), sigmas = float32(s) + [0], timesteps = sigmas·T (float32).
 * mu is 0. Errors: INPUT for num_steps < 1 or use_dynamic_shifting (it needs mu), RUNTIME for
 * allocation. Free with flow_schedule_free. FLUX does not use this. */
cpdit_status flow_schedule_create_static(flow_schedule *s, const flow_schedule_config *c,
                                         int num_steps, cpdit_error *err);

/* {"sigmas": [...], "timesteps": [...]} as a new string (free()), the --dump schedule.json;
 * each float printed with enough digits to read back the same float32. */
cpdit_status flow_schedule_to_json(const flow_schedule *s, char **text, cpdit_error *err);

/* One Euler step in place: x[i] = x[i] + (sigma_next - sigma)·v[i], i < n, rounding as
 * diffusers does in float32 (see above). x, v: n floats (the packed latents and the model's
 * velocity prediction, any layout as long as both share it). */
void flow_euler_step(float *x, const float *v, size_t n, float sigma, float sigma_next);

#ifdef __cplusplus
}
#endif
#endif
