/* flow_schedule.c — the flow-matching sigma schedule and Euler step (see flow_schedule.h).
 *
 * Every operation is one IEEE rounding in the type diffusers/numpy use (float64 for linspace
 * and calculate_shift, float32 after the cast), so the C compiler must not fuse a multiply and
 * an add into one rounding: */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "lib/pipeline/flow_schedule.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Pixels per packed latent token along each axis: the VAE's 8x times the 2x2 packing. */
#define FLUX_PIXELS_PER_TOKEN 16
/* Significant digits that read back to the same float32. */
#define FLOAT32_ROUNDTRIP_DIGITS 9

void flow_schedule_config_defaults(flow_schedule_config *c)
{
    c->num_train_timesteps = 1000;
    c->shift = 1.0;
    c->use_dynamic_shifting = false;
    c->base_shift = 0.5;
    c->max_shift = 1.15;
    c->base_image_seq_len = 256;
    c->max_image_seq_len = 4096;
    c->time_shift_type = FLOW_TIME_SHIFT_EXPONENTIAL;
}

cpdit_status flow_schedule_config_validate(const flow_schedule_config *c, const char *where,
                                           cpdit_error *err)
{
    if (c->num_train_timesteps < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"num_train_timesteps\": must be at least 1, got %d",
                               c->num_train_timesteps);
    if (!(c->shift > 0.0) || !isfinite(c->shift))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"shift\": must be a positive number, got %g", c->shift);
    if (c->max_image_seq_len == c->base_image_seq_len)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "keys \"base_image_seq_len\" and \"max_image_seq_len\" are both "
                               "%d: the shift's slope is undefined", c->max_image_seq_len);
    if (!isfinite(c->base_shift) || !isfinite(c->max_shift))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "keys \"base_shift\"/\"max_shift\" must be finite");
    return CPDIT_OK;
}

/* A boolean option that cpdit does not implement: an error when present and true. */
static cpdit_status refuse_bool(const model_config *cfg, const char *key, cpdit_error *err)
{
    bool on = false;
    cpdit_status st = model_config_get_bool_default(cfg, key, false, &on, err);
    if (st != CPDIT_OK)
        return st;
    if (on)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, cfg->path,
                               "key \"%s\": true is not supported (FLUX schedules do not use it)",
                               key);
    return CPDIT_OK;
}

cpdit_status flow_schedule_config_from(const model_config *cfg, flow_schedule_config *c,
                                       cpdit_error *err)
{
    const char *where = cfg->path ? cfg->path : "scheduler_config.json";
    const char *cls = model_config_class_name(cfg);
    if (cls && strcmp(cls, FLOW_MATCH_EULER_CLASS) != 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "\"_class_name\" is \"%s\"; cpdit samples with %s only", cls,
                               FLOW_MATCH_EULER_CLASS);
    flow_schedule_config d;
    flow_schedule_config_defaults(&d);
    const char *shift_type = NULL;
    cpdit_status st;
    if ((st = model_config_get_int_default(cfg, "num_train_timesteps", d.num_train_timesteps,
                                           &c->num_train_timesteps, err)) ||
        (st = model_config_get_double_default(cfg, "shift", d.shift, &c->shift, err)) ||
        (st = model_config_get_bool_default(cfg, "use_dynamic_shifting", d.use_dynamic_shifting,
                                            &c->use_dynamic_shifting, err)) ||
        (st = model_config_get_double_default(cfg, "base_shift", d.base_shift, &c->base_shift,
                                              err)) ||
        (st = model_config_get_double_default(cfg, "max_shift", d.max_shift, &c->max_shift,
                                              err)) ||
        (st = model_config_get_int_default(cfg, "base_image_seq_len", d.base_image_seq_len,
                                           &c->base_image_seq_len, err)) ||
        (st = model_config_get_int_default(cfg, "max_image_seq_len", d.max_image_seq_len,
                                           &c->max_image_seq_len, err)) ||
        (st = model_config_get_string_default(cfg, "time_shift_type", "exponential",
                                              &shift_type, err)))
        return st;
    if (strcmp(shift_type, "exponential") == 0)
        c->time_shift_type = FLOW_TIME_SHIFT_EXPONENTIAL;
    else if (strcmp(shift_type, "linear") == 0)
        c->time_shift_type = FLOW_TIME_SHIFT_LINEAR;
    else
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"time_shift_type\": \"%s\" is not \"exponential\" or "
                               "\"linear\"", shift_type);

    static const char *const unsupported[] = {"invert_sigmas",      "use_karras_sigmas",
                                              "use_exponential_sigmas", "use_beta_sigmas",
                                              "stochastic_sampling", "use_flow_sigmas"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if ((st = refuse_bool(cfg, unsupported[i], err)) != CPDIT_OK)
            return st;
    if (model_config_has(cfg, "shift_terminal")) {
        double term = 0.0;
        if ((st = model_config_get_double(cfg, "shift_terminal", &term, err)) != CPDIT_OK)
            return st;
        if (term != 0.0) /* diffusers tests `if shift_terminal:` */
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "key \"shift_terminal\": %g is not supported (FLUX "
                                   "schedules do not use it)", term);
    }
    return flow_schedule_config_validate(c, where, err);
}

static int is_regular_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

cpdit_status flow_schedule_config_load(const char *model_dir, flow_schedule_config *c,
                                       cpdit_error *err)
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
        st = flow_schedule_config_from(&cfg, c, err);
        model_config_free(&cfg);
        return st;
    }
    return cpdit_error_set(err, CPDIT_ERR_INPUT, model_dir,
                           "no scheduler/scheduler_config.json (nor scheduler_config.json)");
}

double flow_calculate_shift(const flow_schedule_config *c, int image_seq_len)
{
    const double m = (c->max_shift - c->base_shift) /
                     (double)(c->max_image_seq_len - c->base_image_seq_len);
    const double b = c->base_shift - m * (double)c->base_image_seq_len;
    return (double)image_seq_len * m + b;
}

int flow_image_seq_len(int height, int width)
{
    return (height / FLUX_PIXELS_PER_TOKEN) * (width / FLUX_PIXELS_PER_TOKEN);
}

/* np.linspace(start, stop, n)[i] for n >= 1: i·step + start (two roundings), the last point
 * set to stop exactly. */
static double linspace_at(double start, double stop, int n, int i)
{
    if (n == 1)
        return start;
    if (i == n - 1)
        return stop;
    const double step = (stop - start) / (double)(n - 1);
    return (double)i * step + start;
}

void flow_schedule_free(flow_schedule *s)
{
    if (!s)
        return;
    free(s->sigmas);
    free(s->timesteps);
    s->sigmas = s->timesteps = NULL;
    s->num_steps = 0;
}

cpdit_status flow_schedule_create(flow_schedule *s, const flow_schedule_config *c, int num_steps,
                                  int image_seq_len, cpdit_error *err)
{
    memset(s, 0, sizeof *s);
    if (num_steps < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "steps",
                               "the number of steps must be at least 1, got %d", num_steps);
    if (image_seq_len < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "schedule",
                               "image_seq_len must be at least 1, got %d", image_seq_len);
    s->sigmas = malloc(((size_t)num_steps + 1) * sizeof *s->sigmas);
    s->timesteps = malloc((size_t)num_steps * sizeof *s->timesteps);
    if (!s->sigmas || !s->timesteps) {
        flow_schedule_free(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "schedule", "out of memory");
    }
    s->num_steps = num_steps;
    s->mu = c->use_dynamic_shifting ? flow_calculate_shift(c, image_seq_len) : 0.0;

    /* numpy scalars meeting float32 arrays become float32 (value-based casting / NEP 50) */
    const float shift_num = c->time_shift_type == FLOW_TIME_SHIFT_LINEAR ? (float)s->mu
                                                                          : (float)exp(s->mu);
    const float shift = (float)c->shift;
    const float shift_minus_one = (float)(c->shift - 1.0);
    const float train_steps = (float)c->num_train_timesteps;
    for (int i = 0; i < num_steps; i++) {
        const float sigma = (float)linspace_at(1.0, 1.0 / (double)num_steps, num_steps, i);
        float shifted;
        if (c->use_dynamic_shifting) {
            const float odds = 1.0f / sigma - 1.0f; /* (1/t - 1) ** 1.0 is exact */
            shifted = shift_num / (shift_num + odds);
        } else {
            shifted = shift * sigma / (1.0f + shift_minus_one * sigma);
        }
        s->sigmas[i] = shifted;
        s->timesteps[i] = shifted * train_steps;
    }
    s->sigmas[num_steps] = 0.0f;
    return CPDIT_OK;
}

/* float32 shift·s / (1 + (shift - 1)·s), the training sigmas' shift in __init__ */
static float static_shift32(const flow_schedule_config *c, float sigma)
{
    const float shift = (float)c->shift, shift_minus_one = (float)(c->shift - 1.0);
    return shift * sigma / (1.0f + shift_minus_one * sigma);
}

cpdit_status flow_schedule_create_static(flow_schedule *s, const flow_schedule_config *c,
                                         int num_steps, cpdit_error *err)
{
    memset(s, 0, sizeof *s);
    if (num_steps < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "steps",
                               "the number of steps must be at least 1, got %d", num_steps);
    if (c->use_dynamic_shifting)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "scheduler_config.json",
                               "key \"use_dynamic_shifting\": true needs a resolution-dependent "
                               "mu; the static-shift schedule has none");
    s->sigmas = malloc(((size_t)num_steps + 1) * sizeof *s->sigmas);
    s->timesteps = malloc((size_t)num_steps * sizeof *s->timesteps);
    if (!s->sigmas || !s->timesteps) {
        flow_schedule_free(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "schedule", "out of memory");
    }
    s->num_steps = num_steps;
    const float train_steps = (float)c->num_train_timesteps;
    const double train = (double)c->num_train_timesteps, shift = c->shift;
    /* __init__: the training timesteps T .. 1 over T in float32, shifted */
    const double sigma_max = (double)static_shift32(c, train_steps / train_steps);
    const double sigma_min = (double)static_shift32(c, 1.0f / train_steps);
    for (int i = 0; i < num_steps; i++) {
        const double t = linspace_at(sigma_max * train, sigma_min * train, num_steps, i);
        const double sigma = t / train;
        const float shifted = (float)(shift * sigma / (1.0 + (shift - 1.0) * sigma));
        s->sigmas[i] = shifted;
        s->timesteps[i] = shifted * train_steps;
    }
    s->sigmas[num_steps] = 0.0f;
    return CPDIT_OK;
}

static json_t *float_array(const float *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        if (json_array_append_new(a, json_real((double)v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

cpdit_status flow_schedule_to_json(const flow_schedule *s, char **text, cpdit_error *err)
{
    *text = NULL;
    json_t *root = json_object();
    json_t *sig = float_array(s->sigmas, s->num_steps + 1);
    json_t *ts = float_array(s->timesteps, s->num_steps);
    int bad = !root || !sig || !ts;
    if (!bad) {
        bad = json_object_set_new(root, "sigmas", sig) != 0;
        sig = NULL;
        bad = bad || json_object_set_new(root, "timesteps", ts) != 0;
        ts = NULL;
    }
    if (!bad)
        *text = json_dumps(root, JSON_REAL_PRECISION(FLOAT32_ROUNDTRIP_DIGITS) |
                                     JSON_PRESERVE_ORDER);
    json_decref(sig);
    json_decref(ts);
    json_decref(root);
    if (!*text)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "schedule.json", "out of memory");
    return CPDIT_OK;
}

void flow_euler_step(float *x, const float *v, size_t n, float sigma, float sigma_next)
{
    const float dt = sigma_next - sigma;
    for (size_t i = 0; i < n; i++) {
        const float dv = dt * v[i];
        x[i] = x[i] + dv;
    }
}
