/* unipc_schedule.c — UniPCMultistepScheduler's config and flow-sigma schedule (see
 * unipc_schedule.h); the multistep update is in unipc_step.c.
 *
 * The schedule is float64 arithmetic as numpy does it, one rounding per operation, so the
 * compiler must not fuse a multiply and an add: */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "lib/pipeline/unipc_schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* set_timesteps lowers a first sigma of 1 by this (diffusers' eps). */
#define UNIPC_FIRST_SIGMA_EPS 1e-6

void unipc_config_defaults(unipc_config *c)
{
    memset(c, 0, sizeof *c);
    c->num_train_timesteps = 1000;
    c->flow_shift = 1.0;
    c->solver_order = 2;
    c->solver_type = UNIPC_SOLVER_BH2;
    c->lower_order_final = true;
    c->final_sigmas = UNIPC_FINAL_ZERO;
    c->n_disable_corrector = 0;
}

void unipc_config_wan(unipc_config *c, double flow_shift)
{
    unipc_config_defaults(c);
    c->flow_shift = flow_shift;
}

cpdit_status unipc_config_validate(const unipc_config *c, const char *where, cpdit_error *err)
{
    if (c->num_train_timesteps < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"num_train_timesteps\": must be at least 1, got %d",
                               c->num_train_timesteps);
    if (!(c->flow_shift > 0.0) || !isfinite(c->flow_shift))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"flow_shift\": must be a positive number, got %g",
                               c->flow_shift);
    if (c->solver_order < 1 || c->solver_order > UNIPC_MAX_ORDER)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"solver_order\": %d is not supported (1 to %d)",
                               c->solver_order, UNIPC_MAX_ORDER);
    if (c->solver_type == UNIPC_SOLVER_BH1 && c->final_sigmas == UNIPC_FINAL_ZERO)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "keys \"solver_type\" \"bh1\" and \"final_sigmas_type\" "
                               "\"zero\": diffusers' last step is NaN there (B(h) = h = -inf "
                               "times 0); use bh2 or sigma_min");
    if (c->n_disable_corrector < 0 || c->n_disable_corrector > UNIPC_MAX_DISABLED)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"disable_corrector\": at most %d entries",
                               UNIPC_MAX_DISABLED);
    return CPDIT_OK;
}

/* A boolean key that must have the value `want` (cpdit implements only that case). */
static cpdit_status require_bool(const model_config *cfg, const char *key, bool def, bool want,
                                 cpdit_error *err)
{
    bool on = def;
    cpdit_status st = model_config_get_bool_default(cfg, key, def, &on, err);
    if (st != CPDIT_OK)
        return st;
    if (on != want)
        return model_config_key_error(cfg, key, err,
                                      "%s is not supported (Wan's flow sampling needs %s)",
                                      on ? "true" : "false", want ? "true" : "false");
    return CPDIT_OK;
}

/* A string key whose value must be one of names[0..n); its index in *which. */
static cpdit_status pick_string(const model_config *cfg, const char *key, const char *def,
                                const char *const *names, int n, int *which, cpdit_error *err)
{
    const char *v = NULL;
    cpdit_status st = model_config_get_string_default(cfg, key, def, &v, err);
    if (st != CPDIT_OK)
        return st;
    for (int i = 0; i < n; i++)
        if (strcmp(v, names[i]) == 0) {
            *which = i;
            return CPDIT_OK;
        }
    return model_config_key_error(cfg, key, err, "\"%s\" is not supported", v);
}

/* The keys whose values fix the algorithm: prediction type, flow sigmas, the options off. */
static cpdit_status check_fixed_keys(const model_config *cfg, cpdit_error *err)
{
    static const char *const flow[] = {"flow_prediction"};
    static const char *const spacing[] = {"linspace", "leading", "trailing"};
    int which = 0;
    cpdit_status st;
    if ((st = pick_string(cfg, "prediction_type", "epsilon", flow, 1, &which, err)) ||
        (st = pick_string(cfg, "timestep_spacing", "linspace", spacing, 3, &which, err)) ||
        (st = require_bool(cfg, "use_flow_sigmas", false, true, err)) ||
        (st = require_bool(cfg, "predict_x0", true, true, err)))
        return st;
    static const char *const off[] = {"thresholding", "use_karras_sigmas",
                                      "use_exponential_sigmas", "use_beta_sigmas",
                                      "use_dynamic_shifting"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if ((st = require_bool(cfg, off[i], false, false, err)) != CPDIT_OK)
            return st;
    if (model_config_has(cfg, "solver_p"))
        return model_config_key_error(cfg, "solver_p", err,
                                      "a predictor scheduler is not supported (null only)");
    if (model_config_has(cfg, "shift_terminal")) {
        double term = 0.0;
        if ((st = model_config_get_double(cfg, "shift_terminal", &term, err)) != CPDIT_OK)
            return st;
        if (term != 0.0) /* diffusers tests `if shift_terminal:` */
            return model_config_key_error(cfg, "shift_terminal", err,
                                          "%g is not supported", term);
    }
    return CPDIT_OK;
}

cpdit_status unipc_config_from(const model_config *cfg, unipc_config *c, cpdit_error *err)
{
    const char *where = cfg->path ? cfg->path : "scheduler_config.json";
    const char *cls = model_config_class_name(cfg);
    if (cls && strcmp(cls, UNIPC_MULTISTEP_CLASS) != 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "\"_class_name\" is \"%s\", not %s", cls, UNIPC_MULTISTEP_CLASS);
    cpdit_status st = check_fixed_keys(cfg, err);
    if (st != CPDIT_OK)
        return st;
    unipc_config d;
    unipc_config_defaults(&d);
    *c = d;
    static const char *const solvers[] = {"bh1", "bh2", "midpoint", "heun", "logrho"};
    static const char *const finals[] = {"zero", "sigma_min"};
    int solver = 1, final = 0;
    if ((st = model_config_get_int_default(cfg, "num_train_timesteps", d.num_train_timesteps,
                                           &c->num_train_timesteps, err)) ||
        (st = model_config_get_double_default(cfg, "flow_shift", d.flow_shift, &c->flow_shift,
                                              err)) ||
        (st = model_config_get_int_default(cfg, "solver_order", d.solver_order,
                                           &c->solver_order, err)) ||
        (st = model_config_get_bool_default(cfg, "lower_order_final", d.lower_order_final,
                                            &c->lower_order_final, err)) ||
        (st = pick_string(cfg, "solver_type", "bh2", solvers, 5, &solver, err)) ||
        (st = pick_string(cfg, "final_sigmas_type", "zero", finals, 2, &final, err)) ||
        (st = model_config_get_int_array_default(cfg, "disable_corrector", NULL, 0,
                                                 c->disable_corrector, UNIPC_MAX_DISABLED,
                                                 &c->n_disable_corrector, err)))
        return st;
    c->solver_type = solver == 0 ? UNIPC_SOLVER_BH1 : UNIPC_SOLVER_BH2; /* diffusers maps the
                                                                          * old names to bh2 */
    c->final_sigmas = final == 0 ? UNIPC_FINAL_ZERO : UNIPC_FINAL_SIGMA_MIN;
    return unipc_config_validate(c, where, err);
}

static int is_regular_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

cpdit_status unipc_config_load(const char *model_dir, unipc_config *c, cpdit_error *err)
{
    static const char *const candidates[] = {"scheduler/scheduler_config.json",
                                             "scheduler_config.json"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char path[4096];
        int len = snprintf(path, sizeof path, "%s/%s", model_dir, candidates[i]);
        if (len < 0 || (size_t)len >= sizeof path)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, model_dir, "path too long");
        if (!is_regular_file(path))
            continue;
        model_config cfg;
        cpdit_status st = model_config_load_file(&cfg, path, err);
        if (st != CPDIT_OK)
            return st;
        st = unipc_config_from(&cfg, c, err);
        model_config_free(&cfg);
        return st;
    }
    return cpdit_error_set(err, CPDIT_ERR_INPUT, model_dir,
                           "no scheduler/scheduler_config.json (nor scheduler_config.json)");
}

void unipc_schedule_free(unipc_schedule *s)
{
    if (!s)
        return;
    free(s->sigmas);
    free(s->timesteps);
    s->sigmas = NULL;
    s->timesteps = NULL;
    s->num_steps = 0;
}

/* np.linspace(start, stop, count)[i], i < count - 1: i·step + start, two roundings. */
static double linspace_at(double start, double stop, int count, int i)
{
    const double step = (stop - start) / (double)(count - 1);
    return (double)i * step + start;
}

cpdit_status unipc_schedule_create(unipc_schedule *s, const unipc_config *c, int num_steps,
                                   cpdit_error *err)
{
    memset(s, 0, sizeof *s);
    if (num_steps < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "steps",
                               "the number of steps must be at least 1, got %d", num_steps);
    cpdit_status st = unipc_config_validate(c, "scheduler", err);
    if (st != CPDIT_OK)
        return st;
    s->config = *c;
    s->sigmas = malloc(((size_t)num_steps + 1) * sizeof *s->sigmas);
    s->timesteps = malloc((size_t)num_steps * sizeof *s->timesteps);
    if (!s->sigmas || !s->timesteps) {
        unipc_schedule_free(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "schedule", "out of memory");
    }
    s->num_steps = num_steps;
    const double train = (double)c->num_train_timesteps, shift = c->flow_shift;
    double last = 0.0;
    for (int i = 0; i < num_steps; i++) {
        /* linspace(1, 1/T, N + 1) without its last point */
        const double sigma = linspace_at(1.0, 1.0 / train, num_steps + 1, i);
        double shifted = shift * sigma / (1.0 + (shift - 1.0) * sigma);
        if (i == 0 && fabs(shifted - 1.0) < UNIPC_FIRST_SIGMA_EPS)
            shifted -= UNIPC_FIRST_SIGMA_EPS;
        s->timesteps[i] = (int64_t)(shifted * train); /* C's conversion truncates, as torch's */
        s->sigmas[i] = (float)shifted;
        last = shifted;
    }
    s->sigmas[num_steps] = c->final_sigmas == UNIPC_FINAL_ZERO ? 0.0f : (float)last;
    return CPDIT_OK;
}
