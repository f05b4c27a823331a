/* test_flow_schedule.c — FLUX sigma schedules against diffusers' formula, the Euler step, the
 * scheduler_config.json reader and the schedule.json writer.
 *
 * tests/data/flow_schedule_expected.txt comes from tests/reference/flow_schedule_reference.py,
 * which follows FluxPipeline + FlowMatchEulerDiscreteScheduler with numpy in diffusers' dtypes.
 * Tolerances: sigmas and timesteps bit-exact (0 ulp), mu within 1e-15 relative (it is printed
 * with 17 digits; the C computation is the same float64 expression).
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/pipeline/flow_schedule.h"
#include "lib/models/flux/flux_scheduler.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"

#define MAX_STEPS 64
#define MU_REL_TOL 1e-15

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int config_by_name(const char *name, flow_schedule_config *c)
{
    if (strcmp(name, "dev") == 0) {
        flow_schedule_config_flux_dev(c);
    } else if (strcmp(name, "schnell") == 0) {
        flow_schedule_config_flux_schnell(c);
    } else if (strcmp(name, "shift3") == 0) {
        flow_schedule_config_defaults(c);
        c->shift = 3.0;
    } else if (strcmp(name, "devlinear") == 0) {
        flow_schedule_config_flux_dev(c);
        c->time_shift_type = FLOW_TIME_SHIFT_LINEAR;
    } else {
        return 0;
    }
    return 1;
}

static int run_line(char *line, int lineno)
{
    char name[32];
    int steps, h, w, used;
    double mu;
    if (line[0] == '#' || line[0] == '\n')
        return 0;
    if (sscanf(line, "%31s %d %d %d %lf%n", name, &steps, &h, &w, &mu, &used) != 5 ||
        steps < 1 || steps > MAX_STEPS) {
        CHECK_MSG(0, "line %d: cannot parse", lineno);
        return 0;
    }
    flow_schedule_config c;
    CHECK_MSG(config_by_name(name, &c), "line %d: unknown config %s", lineno, name);
    uint32_t sig[MAX_STEPS + 1], ts[MAX_STEPS];
    const char *p = line + used;
    int adv, ok = 1;
    for (int i = 0; i <= steps && ok; i++, p += adv)
        ok = sscanf(p, "%" SCNx32 "%n", &sig[i], &adv) == 1;
    ok = ok && sscanf(p, " |%n", &adv) == 0;
    p += adv;
    for (int i = 0; i < steps && ok; i++, p += adv)
        ok = sscanf(p, "%" SCNx32 "%n", &ts[i], &adv) == 1;
    CHECK_MSG(ok, "line %d: short value lists", lineno);
    if (!ok)
        return 0;

    flow_schedule s;
    cpdit_error err;
    int seq = flow_image_seq_len(h, w);
    CHECK(flow_schedule_create(&s, &c, steps, seq, &err) == CPDIT_OK);
    CHECK_MSG(fabs(s.mu - mu) <= MU_REL_TOL * fmax(1.0, fabs(mu)),
              "line %d: mu %.17g, expected %.17g", lineno, s.mu, mu);
    int bad = 0;
    for (int i = 0; i <= steps; i++)
        if (bits(s.sigmas[i]) != sig[i] && bad++ < 3)
            fprintf(stderr, "line %d (%s %d steps %dx%d): sigma[%d] = %08x (%.9g), want %08x\n",
                    lineno, name, steps, h, w, i, bits(s.sigmas[i]), s.sigmas[i], sig[i]);
    for (int i = 0; i < steps; i++)
        if (bits(s.timesteps[i]) != ts[i] && bad++ < 3)
            fprintf(stderr, "line %d: timestep[%d] = %08x, want %08x\n", lineno, i,
                    bits(s.timesteps[i]), ts[i]);
    CHECK_MSG(bad == 0, "line %d: %d values differ", lineno, bad);
    flow_schedule_free(&s);
    return 1;
}

static void test_expected(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    char line[16384];
    int lineno = 0, cases = 0;
    while (fgets(line, sizeof line, f))
        cases += run_line(line, ++lineno);
    fclose(f);
    fprintf(stderr, "%d schedules checked\n", cases);
    CHECK(cases >= 40);
}

static void test_shape_of_schedule(void)
{
    flow_schedule_config c;
    flow_schedule s;
    cpdit_error err;
    /* schnell, 4 steps: exactly linspace(1, 0.25, 4) and 0 */
    flow_schedule_config_flux_schnell(&c);
    CHECK(flow_schedule_create(&s, &c, 4, 4096, &err) == CPDIT_OK);
    CHECK(s.sigmas[0] == 1.0f && s.sigmas[1] == 0.75f && s.sigmas[2] == 0.5f &&
          s.sigmas[3] == 0.25f && s.sigmas[4] == 0.0f);
    CHECK(s.timesteps[0] == 1000.0f && s.timesteps[3] == 250.0f);
    CHECK(s.mu == 0.0);
    flow_schedule_free(&s);
    /* dev: mu = 0.5 at 256 tokens, 1.15 at 4096 (1024x1024), decreasing sigmas from 1 */
    flow_schedule_config_flux_dev(&c);
    CHECK_NEAR(flow_calculate_shift(&c, 256), 0.5, 1e-15);
    CHECK_NEAR(flow_calculate_shift(&c, flow_image_seq_len(1024, 1024)), 1.15, 1e-14);
    CHECK(flow_schedule_create(&s, &c, 28, 4096, &err) == CPDIT_OK);
    CHECK(s.sigmas[0] == 1.0f && s.sigmas[28] == 0.0f);
    int decreasing = 1;
    for (int i = 0; i < 28; i++)
        decreasing &= s.sigmas[i + 1] < s.sigmas[i];
    CHECK(decreasing);
    /* the shifted last sigma: e^1.15 / (e^1.15 + 27) */
    CHECK_NEAR(s.sigmas[27], exp(1.15) / (exp(1.15) + 27.0), 1e-6);
    /* schedule.json */
    char *text = NULL;
    CHECK(flow_schedule_to_json(&s, &text, &err) == CPDIT_OK);
    json_error_t jerr;
    json_t *root = text ? json_loads(text, 0, &jerr) : NULL;
    CHECK(root && json_array_size(json_object_get(root, "sigmas")) == 29 &&
          json_array_size(json_object_get(root, "timesteps")) == 28);
    int same = root != NULL;
    for (int i = 0; same && i < 28; i++) {
        same &= (float)json_real_value(json_array_get(json_object_get(root, "sigmas"), i)) ==
                s.sigmas[i];
        same &= (float)json_real_value(json_array_get(json_object_get(root, "timesteps"), i)) ==
                s.timesteps[i];
    }
    CHECK_MSG(same, "schedule.json does not read back to the same float32 values");
    json_decref(root);
    free(text);
    flow_schedule_free(&s);
    /* errors */
    CHECK(flow_schedule_create(&s, &c, 0, 4096, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "at least 1");
    CHECK(flow_schedule_create(&s, &c, 4, 0, &err) == CPDIT_ERR_INPUT);
    flow_schedule_free(&s);
}

static void test_euler(void)
{
    /* x + (σn - σ)·v with the difference rounded first and no fused multiply-add */
    float x[3] = {1.0f, -2.0f, 0.1f}, v[3] = {0.5f, 3.0f, 1.0f / 3.0f};
    const float sigma = 0.7f, sigma_next = 0.3f;
    float expect[3];
    const float dt = sigma_next - sigma;
    for (int i = 0; i < 3; i++) {
        volatile float prod = dt * v[i];
        expect[i] = x[i] + prod;
    }
    flow_euler_step(x, v, 3, sigma, sigma_next);
    for (int i = 0; i < 3; i++)
        CHECK(bits(x[i]) == bits(expect[i]));
    /* the last step to sigma 0 lands on x - σ·v */
    float y[1] = {2.0f}, w[1] = {4.0f};
    flow_euler_step(y, w, 1, 0.25f, 0.0f);
    CHECK(y[0] == 1.0f);
}

static int same_config(const flow_schedule_config *a, const flow_schedule_config *b)
{
    return a->num_train_timesteps == b->num_train_timesteps && a->shift == b->shift &&
           a->use_dynamic_shifting == b->use_dynamic_shifting &&
           a->base_shift == b->base_shift && a->max_shift == b->max_shift &&
           a->base_image_seq_len == b->base_image_seq_len &&
           a->max_image_seq_len == b->max_image_seq_len &&
           a->time_shift_type == b->time_shift_type;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_config_files(void)
{
    char *dir = tmpdir_make("flowsched"), sub[4096], path[4200];
    CHECK(dir != NULL);
    if (!dir)
        return;
    snprintf(sub, sizeof sub, "%s/scheduler", dir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(path, sizeof path, "%s/scheduler_config.json", sub);
    /* FLUX.1-dev's file */
    write_file(path, "{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"_diffusers_version\":"
                     " \"0.30.0.dev0\", \"base_image_seq_len\": 256, \"base_shift\": 0.5, "
                     "\"max_image_seq_len\": 4096, \"max_shift\": 1.15, \"num_train_timesteps\":"
                     " 1000, \"shift\": 3.0, \"use_dynamic_shifting\": true}");
    flow_schedule_config c, dev;
    cpdit_error err;
    flow_schedule_config_flux_dev(&dev);
    CHECK(flow_schedule_config_load(dir, &c, &err) == CPDIT_OK);
    CHECK(same_config(&c, &dev));
    CHECK(flow_schedule_config_load(sub, &c, &err) == CPDIT_OK); /* the folder itself */
    /* defaults for missing keys: {} is the scheduler's __init__ defaults */
    write_file(path, "{}");
    flow_schedule_config def;
    flow_schedule_config_defaults(&def);
    CHECK(flow_schedule_config_load(dir, &c, &err) == CPDIT_OK && same_config(&c, &def));
    /* errors name the file and key */
    write_file(path, "{\"_class_name\": \"EulerDiscreteScheduler\"}");
    CHECK(flow_schedule_config_load(dir, &c, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "FlowMatchEulerDiscreteScheduler");
    CHECK_STR_CONTAINS(err.where, "scheduler_config.json");
    write_file(path, "{\"use_karras_sigmas\": true}");
    CHECK(flow_schedule_config_load(dir, &c, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "use_karras_sigmas");
    write_file(path, "{\"shift\": \"3\"}");
    CHECK(flow_schedule_config_load(dir, &c, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "shift");
    write_file(path, "{\"time_shift_type\": \"cosine\"}");
    CHECK(flow_schedule_config_load(dir, &c, &err) == CPDIT_ERR_INPUT);
    write_file(path, "{\"shift_terminal\": 0.1}");
    CHECK(flow_schedule_config_load(dir, &c, &err) == CPDIT_ERR_INPUT);
    write_file(path, "{\"base_image_seq_len\": 4096}");
    CHECK(flow_schedule_config_load(dir, &c, &err) == CPDIT_ERR_INPUT);
    write_file(path, "{\"shift_terminal\": null, \"time_shift_type\": \"linear\"}");
    CHECK(flow_schedule_config_load(dir, &c, &err) == CPDIT_OK &&
          c.time_shift_type == FLOW_TIME_SHIFT_LINEAR);
    remove(path);
    CHECK(flow_schedule_config_load(dir, &c, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "scheduler_config.json");
    tmpdir_remove(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    const char *srcdir = getenv("top_srcdir");
    char path[4096];
    if (argc > 1)
        snprintf(path, sizeof path, "%s", argv[1]);
    else
        snprintf(path, sizeof path, "%s/tests/data/flow_schedule_expected.txt",
                 srcdir ? srcdir : ".");
    test_expected(path);
    test_shape_of_schedule();
    test_euler();
    test_config_files();
    TEST_MAIN_END();
}
