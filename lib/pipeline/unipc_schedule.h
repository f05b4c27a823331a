/* unipc_schedule.h — Wan 2.1's sampler: diffusers' UniPCMultistepScheduler with flow sigmas
 * and flow prediction (the B(h) predictor UniP with the corrector UniC), reproduced in the
 * dtypes diffusers computes in.
 *
 * Wan 2.1's scheduler/scheduler_config.json (the -Diffusers repos):
 *   UniPCMultistepScheduler, prediction_type "flow_prediction", use_flow_sigmas true,
 *   flow_shift 3.0 (diffusers' docs: 3.0 for 480p, 5.0 for 720p), solver_order 2,
 *   solver_type "bh2", predict_x0 true, lower_order_final true, final_sigmas_type "zero",
 *   num_train_timesteps 1000, disable_corrector [], timestep_spacing "linspace" (unused with
 *   flow sigmas). WanPipeline calls set_timesteps(N), set_begin_index(0), then step() once per
 *   model call.
 *
 * The schedule (set_timesteps), float64 until the cast, T = num_train_timesteps:
 *   s_i = linspace(1, 1/T, N+1)[i], i < N;   s_i = shift·s_i / (1 + (shift-1)·s_i)
 *   s_0 -= 1e-6 when |s_0 - 1| < 1e-6 (always: it keeps log(1 - s_0) finite)
 *   timesteps_i = (int64) trunc(s_i·T)       (the transformer gets these integers)
 *   sigmas = float32(s_0 .. s_{N-1}, last), last = 0 ("zero") or s_{N-1} ("sigma_min").
 * The step, in float32 (the sample's dtype; diffusers does not upcast in this scheduler), with
 * alpha = 1 - sigma and lambda = log(alpha) - log(sigma) per schedule point:
 *   x0 = x - sigma_i·v                         the model output converted (predict_x0)
 *   corrector UniC (i > 0, not disabled) of the previous step's order, with x0 as the new
 *   model output: x ← x_corrected (x0 itself is kept, computed from the uncorrected x);
 *   predictor UniP of order min(solver_order, N - i [lower_order_final], steps so far + 1).
 * Every scalar coefficient is one float32 rounding per operation in Python's evaluation order
 * (log and expm1 correctly rounded, as torch's are); the 2x2 / 3x3 solve for the corrector's
 * rhos is torch.linalg.solve's: LU with partial pivoting of R^T, then the transposed
 * triangular solves, in float32 (bit-identical to torch for the 2x2 system of order 2).
 * torch's own float32 log is off by an ulp for about 1% of inputs, which moves some samples
 * by about 5e-7 relative (measured; see tests/test_unipc_schedule.c).
 *
 * The step is elementwise: a rank steps only the latent elements it holds, no communication,
 * so it works on CP-sharded tokens (every rank computes the same scalars).
 *
 * Model outputs are float32 here. diffusers with a bf16 transformer rounds sigma·v to bf16 in
 * the x0 conversion; cpdit keeps the float32 product.
 */
#ifndef CPDIT_UNIPC_SCHEDULE_H
#define CPDIT_UNIPC_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "lib/io/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UNIPC_MULTISTEP_CLASS "UniPCMultistepScheduler"
/* solver_order 1..UNIPC_MAX_ORDER (diffusers recommends 2 for guided sampling, 3 otherwise) */
#define UNIPC_MAX_ORDER 3
/* entries of disable_corrector kept */
#define UNIPC_MAX_DISABLED 64

typedef enum unipc_solver_type {
    UNIPC_SOLVER_BH1 = 1, /* B(h) = h */
    UNIPC_SOLVER_BH2 = 2  /* B(h) = e^h - 1 (also what "midpoint"/"heun"/"logrho" mean) */
} unipc_solver_type;

typedef enum unipc_final_sigma {
    UNIPC_FINAL_ZERO = 0,     /* the last sigma is 0: the last step lands on x0 */
    UNIPC_FINAL_SIGMA_MIN = 1 /* the last sigma repeats the smallest one */
} unipc_final_sigma;

/* The scheduler_config.json keys cpdit uses; the rest must have the values flow sampling
 * implies (see unipc_config_from). */
typedef struct unipc_config {
    int num_train_timesteps;         /* default 1000 */
    double flow_shift;               /* default 1.0; Wan 2.1: 3.0 (480p), 5.0 (720p) */
    int solver_order;                /* default 2 */
    unipc_solver_type solver_type;   /* default bh2 */
    bool lower_order_final;          /* default true */
    unipc_final_sigma final_sigmas;  /* default zero */
    int n_disable_corrector;         /* default none */
    int disable_corrector[UNIPC_MAX_DISABLED]; /* step indices whose corrector is skipped */
} unipc_config;

/* The scheduler's __init__ defaults for the keys above (flow_shift 1). */
void unipc_config_defaults(unipc_config *c);
/* Wan 2.1's scheduler_config.json with the given flow_shift. */
void unipc_config_wan(unipc_config *c, double flow_shift);

/* Read a loaded scheduler_config.json. Errors (INPUT, where = the file, naming the key): a
 * "_class_name" other than UniPCMultistepScheduler; prediction_type other than
 * "flow_prediction"; use_flow_sigmas or predict_x0 not true; the options Wan does not use and
 * cpdit does not implement when enabled (thresholding, use_karras_sigmas,
 * use_exponential_sigmas, use_beta_sigmas, use_dynamic_shifting, shift_terminal, solver_p);
 * unknown solver_type / final_sigmas_type / timestep_spacing; bad numbers (see validate). */
cpdit_status unipc_config_from(const model_config *cfg, unipc_config *c, cpdit_error *err);
/* num_train_timesteps >= 1, flow_shift > 0 and finite, 1 <= solver_order <= UNIPC_MAX_ORDER,
 * not bh1 with a final sigma of zero (diffusers' last step is NaN then). */
cpdit_status unipc_config_validate(const unipc_config *c, const char *where, cpdit_error *err);
/* DIR/scheduler/scheduler_config.json for a pipeline root, DIR/scheduler_config.json for the
 * scheduler folder itself. */
cpdit_status unipc_config_load(const char *model_dir, unipc_config *c, cpdit_error *err);

typedef struct unipc_schedule {
    int num_steps;      /* N */
    float *sigmas;      /* N + 1 values, decreasing from 1 - 1e-6 */
    int64_t *timesteps; /* N values: trunc(sigma_i·T) from the float64 sigmas */
    unipc_config config;
} unipc_schedule;

/* The schedule for num_steps >= 1. Errors: INPUT for a bad count or config, RUNTIME for
 * allocation. Free with unipc_schedule_free (also after a failure). */
cpdit_status unipc_schedule_create(unipc_schedule *s, const unipc_config *c, int num_steps,
                                   cpdit_error *err);
void unipc_schedule_free(unipc_schedule *s);

/* One sample's (or one rank's share of a sample's) multistep state. The history lives in a
 * workspace the caller owns: unipc_state_floats(s, n) floats, kept until the last step. */
typedef struct unipc_state {
    const unipc_schedule *sched;
    size_t n;                          /* elements this state steps */
    float *x0[UNIPC_MAX_ORDER];        /* converted model outputs, x0[order-1] the newest */
    float *last_sample;                /* the sample before the last predictor */
    int step_index;                    /* steps done */
    int lower_order_nums;              /* warm-up count, at most solver_order */
    int this_order;                    /* the last predictor's order (the next corrector's) */
} unipc_state;

/* Workspace floats for n elements: (solver_order + 1)·n. */
size_t unipc_state_floats(const unipc_schedule *s, size_t n);

/* Start at step 0. workspace: unipc_state_floats(s, n) floats (contents irrelevant). */
cpdit_status unipc_state_init(unipc_state *st, const unipc_schedule *s, size_t n,
                              float *workspace, cpdit_error *err);

/* One scheduler.step: x (n floats, the sample at sigma[i]) becomes the sample at sigma[i+1]
 * given v (n floats, the model's flow-velocity output for x, same layout). Errors: INPUT when
 * all N steps are done. */
cpdit_status unipc_step(unipc_state *st, float *x, const float *v, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
