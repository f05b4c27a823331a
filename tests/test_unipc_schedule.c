/* test_unipc_schedule.c — Wan 2.1's samplers against diffusers' definitions: the UniPC flow
 * sigma schedule and multistep updates, the static-shift flow-match Euler schedule, the
 * scheduler_config.json reader, and the elementwise (CP-shardable) stepping.
 *
 * tests/data/unipc_expected.txt comes from tests/reference/unipc_reference.py (numpy, written
 * from diffusers' UniPCMultistepScheduler / FlowMatchEulerDiscreteScheduler). Tolerances:
 * sigmas within 1e-6 absolute, UniPC timesteps (integers) exact, Euler timesteps within 1e-6
 * relative; the sample after every step within 1e-5 relative (|c - r| <= 1e-5·max(|r|, 1)).
 * Measured: the C equals the reference bit for bit; the reference equals diffusers' own
 * scheduler (torch 1.13, run once by hand) bit for bit on the Wan cases except where torch's
 * float32 log is an ulp off (about 1% of inputs: 5.0/50 steps from step 33 on, order 3), at
 * most 4.8e-7 relative. A sample split into shards must step bit-identically to the whole.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/pipeline/flow_schedule.h"
#include "lib/pipeline/unipc_schedule.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"

#define MAX_STEPS 64
#define NELEM 13                 /* the reference's sample size */
#define SEED 20250301u           /* the reference's LCG seed */
#define LCG_MUL 1664525u
#define LCG_ADD 1013904223u
#define SIGMA_TOL 1e-6
#define SAMPLE_REL_TOL 1e-5
#define EULER_TS_REL_TOL 1e-6
#define MIN_UNIPC_CASES 22
#define MIN_EULER_CASES 15

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The reference's generator: k·2^-23 - 1 for the top 24 bits k of a 32-bit LCG. */
static void lcg_floats(uint32_t *state, float *out, int n)
{
    for (int i = 0; i < n; i++) {
        *state = *state * LCG_MUL + LCG_ADD;
        out[i] = (float)((double)(*state >> 8) * ldexp(1.0, -23) - 1.0);
    }
}

static int config_by_name(const char *name, double shift, unipc_config *c)
{
    unipc_config_wan(c, shift);
    if (strcmp(name, "wan") == 0)
        return 1;
    if (strcmp(name, "bh1") == 0) {
        c->solver_type = UNIPC_SOLVER_BH1;
        c->final_sigmas = UNIPC_FINAL_SIGMA_MIN;
    }
    else if (strcmp(name, "order1") == 0)
        c->solver_order = 1;
    else if (strcmp(name, "order3") == 0)
        c->solver_order = 3;
    else if (strcmp(name, "sigmamin") == 0)
        c->final_sigmas = UNIPC_FINAL_SIGMA_MIN;
    else if (strcmp(name, "nocorr") == 0) {
        c->n_disable_corrector = 2;
        c->disable_corrector[0] = 0;
        c->disable_corrector[1] = 2;
    } else if (strcmp(name, "nolof") == 0) {
        c->lower_order_final = false;
        c->final_sigmas = UNIPC_FINAL_SIGMA_MIN;
    } else
        return 0;
    return 1;
}

/* Parse "<count hex floats> |" or the last list; returns the position after them or NULL. */
static const char *read_hex(const char *p, float *out, int count)
{
    for (int i = 0; i < count; i++) {
        uint32_t u;
        int adv;
        if (sscanf(p, "%" SCNx32 "%n", &u, &adv) != 1)
            return NULL;
        out[i] = from_bits(u);
        p += adv;
    }
    return p;
}

static double max_sample_err = 0.0;
static long samples_checked = 0, samples_bit_equal = 0;

/* The fake model of the reference: v = 0.5·x + r, r the next NELEM draws. */
static void fake_model(uint32_t *state, const float *x, float *v)
{
    float r[NELEM];
    lcg_floats(state, r, NELEM);
    for (int j = 0; j < NELEM; j++) {
        const float half = 0.5f * x[j];
        v[j] = half + r[j];
    }
}

/* Step the sample whole and in three shards (5, 4, 4 elements); compare each step with the
 * expected "x" lines that follow in f. */
static void run_updates(FILE *f, int *lineno, const char *name, double shift,
                        const unipc_schedule *s)
{
    static const size_t shard_len[3] = {5, 4, 4};
    const int p = s->config.solver_order;
    float ws[(UNIPC_MAX_ORDER + 1) * NELEM], sws[3][(UNIPC_MAX_ORDER + 1) * NELEM];
    unipc_state st, sst[3];
    cpdit_error err;
    CHECK(unipc_state_floats(s, NELEM) == (size_t)(p + 1) * NELEM);
    CHECK(unipc_state_init(&st, s, NELEM, ws, &err) == CPDIT_OK);
    for (int k = 0; k < 3; k++)
        CHECK(unipc_state_init(&sst[k], s, shard_len[k], sws[k], &err) == CPDIT_OK);
    unipc_state empty; /* a rank that holds no elements: no workspace, steps all the same */
    CHECK(unipc_state_init(&empty, s, 0, NULL, &err) == CPDIT_OK);
    float x[NELEM], xs[NELEM], v[NELEM];
    uint32_t rng = SEED;
    lcg_floats(&rng, x, NELEM);
    memcpy(xs, x, sizeof x);
    int sharded_same = 1;
    for (int step = 1; step <= s->num_steps; step++) {
        char line[4096], lname[32];
        double lshift;
        int lsteps, lk, used;
        CHECK_MSG(fgets(line, sizeof line, f) != NULL, "%s %g %d: missing step %d", name, shift,
                  s->num_steps, step);
        ++*lineno;
        int ok = sscanf(line, "x %31s %lf %d %d%n", lname, &lshift, &lsteps, &lk, &used) == 4 &&
                 strcmp(lname, name) == 0 && lshift == shift && lsteps == s->num_steps &&
                 lk == step;
        float want[NELEM];
        ok = ok && read_hex(line + used, want, NELEM) != NULL;
        CHECK_MSG(ok, "line %d: expected step %d of %s %g %d", *lineno, step, name, shift,
                  s->num_steps);
        if (!ok)
            return;
        fake_model(&rng, x, v);
        CHECK(unipc_step(&st, x, v, &err) == CPDIT_OK);
        size_t off = 0;
        for (int k = 0; k < 3; k++) {
            CHECK(unipc_step(&sst[k], xs + off, v + off, &err) == CPDIT_OK);
            off += shard_len[k];
        }
        CHECK(unipc_step(&empty, NULL, NULL, &err) == CPDIT_OK);
        int bad = 0;
        for (int j = 0; j < NELEM; j++) {
            const double e = fabs((double)x[j] - (double)want[j]) / fmax(fabs(want[j]), 1.0);
            if (!(e <= SAMPLE_REL_TOL) && bad++ < 3)
                fprintf(stderr, "line %d (%s shift %g, %d steps): step %d x[%d] = %.9g, want "
                        "%.9g\n", *lineno, name, shift, s->num_steps, step, j, x[j], want[j]);
            if (e > max_sample_err || isnan(e))
                max_sample_err = isnan(e) ? INFINITY : e;
            samples_bit_equal += bits(x[j]) == bits(want[j]);
            sharded_same &= bits(x[j]) == bits(xs[j]);
        }
        samples_checked += NELEM;
        CHECK_MSG(bad == 0, "line %d: %d elements off", *lineno, bad);
    }
    CHECK_MSG(sharded_same, "%s %g %d: the sharded run differs from the whole", name, shift,
              s->num_steps);
    CHECK(empty.step_index == s->num_steps && empty.this_order == st.this_order);
    CHECK(unipc_step(&st, x, v, &err) == CPDIT_ERR_INPUT); /* past the last step */
    CHECK_STR_CONTAINS(err.what, "steps are done");
}

static int run_unipc_line(FILE *f, char *line, int *lineno)
{
    char name[32];
    double shift;
    int steps, used;
    if (sscanf(line, "unipc %31s %lf %d%n", name, &shift, &steps, &used) != 3 || steps < 1 ||
        steps > MAX_STEPS) {
        CHECK_MSG(0, "line %d: cannot parse", *lineno);
        return 0;
    }
    unipc_config c;
    CHECK_MSG(config_by_name(name, shift, &c), "line %d: unknown config %s", *lineno, name);
    float sig[MAX_STEPS + 1];
    const char *p = read_hex(line + used, sig, steps + 1);
    int adv = 0;
    int ok = p && sscanf(p, " |%n", &adv) == 0 && adv > 0;
    int64_t ts[MAX_STEPS];
    for (int i = 0; ok && i < steps; i++) {
        p += adv;
        ok = sscanf(p, "%" SCNd64 "%n", &ts[i], &adv) == 1;
    }
    CHECK_MSG(ok, "line %d: short value lists", *lineno);
    if (!ok)
        return 0;
    unipc_schedule s;
    cpdit_error err;
    CHECK(unipc_schedule_create(&s, &c, steps, &err) == CPDIT_OK);
    int bad = 0;
    for (int i = 0; i <= steps; i++)
        if (!(fabs((double)s.sigmas[i] - sig[i]) <= SIGMA_TOL) && bad++ < 3)
            fprintf(stderr, "line %d: sigma[%d] = %.9g, want %.9g\n", *lineno, i, s.sigmas[i],
                    sig[i]);
    for (int i = 0; i < steps; i++)
        if (s.timesteps[i] != ts[i] && bad++ < 3)
            fprintf(stderr, "line %d: timestep[%d] = %" PRId64 ", want %" PRId64 "\n", *lineno,
                    i, s.timesteps[i], ts[i]);
    CHECK_MSG(bad == 0, "line %d: %d schedule values differ", *lineno, bad);
    run_updates(f, lineno, name, shift, &s);
    unipc_schedule_free(&s);
    return 1;
}

static int run_euler_line(char *line, int lineno)
{
    double shift;
    int steps, used, adv = 0;
    if (sscanf(line, "euler %lf %d%n", &shift, &steps, &used) != 2 || steps < 1 ||
        steps > MAX_STEPS) {
        CHECK_MSG(0, "line %d: cannot parse", lineno);
        return 0;
    }
    float sig[MAX_STEPS + 1], ts[MAX_STEPS];
    const char *p = read_hex(line + used, sig, steps + 1);
    int ok = p && sscanf(p, " |%n", &adv) == 0 && adv > 0 && read_hex(p + adv, ts, steps);
    CHECK_MSG(ok, "line %d: short value lists", lineno);
    if (!ok)
        return 0;
    flow_schedule_config c;
    flow_schedule_config_defaults(&c);
    c.shift = shift;
    flow_schedule s;
    cpdit_error err;
    CHECK(flow_schedule_create_static(&s, &c, steps, &err) == CPDIT_OK);
    int bad = 0;
    for (int i = 0; i <= steps; i++)
        if (!(fabs((double)s.sigmas[i] - sig[i]) <= SIGMA_TOL) && bad++ < 3)
            fprintf(stderr, "line %d: euler sigma[%d] = %.9g, want %.9g\n", lineno, i,
                    s.sigmas[i], sig[i]);
    for (int i = 0; i < steps; i++)
        if (!(fabs((double)s.timesteps[i] - ts[i]) <= EULER_TS_REL_TOL * fabs(ts[i])) &&
            bad++ < 3)
            fprintf(stderr, "line %d: euler timestep[%d] = %.9g, want %.9g\n", lineno, i,
                    s.timesteps[i], ts[i]);
    CHECK_MSG(bad == 0, "line %d: %d values differ", lineno, bad);
    CHECK(s.mu == 0.0);
    flow_schedule_free(&s);
    return 1;
}

static void test_expected(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    char line[8192];
    int lineno = 0, unipc_cases = 0, euler_cases = 0;
    while (fgets(line, sizeof line, f)) {
        ++lineno;
        if (strncmp(line, "unipc ", 6) == 0)
            unipc_cases += run_unipc_line(f, line, &lineno);
        else if (strncmp(line, "euler ", 6) == 0)
            euler_cases += run_euler_line(line, lineno);
        else
            CHECK_MSG(line[0] == '#' || line[0] == '\n', "line %d: unexpected", lineno);
    }
    fclose(f);
    fprintf(stderr, "%d UniPC cases (%ld sample values: max rel error %.3g, %ld bit-equal), "
            "%d Euler schedules checked\n", unipc_cases, samples_checked, max_sample_err,
            samples_bit_equal, euler_cases);
    CHECK(unipc_cases >= MIN_UNIPC_CASES && euler_cases >= MIN_EULER_CASES);
}

/* Closed forms: the first sigma, the integer timesteps, and the last step to sigma 0 landing
 * exactly on the predicted x0 = x - sigma·v (order 1 there: lower_order_final). */
static void test_closed_forms(void)
{
    unipc_config c;
    unipc_schedule s;
    cpdit_error err;
    unipc_config_wan(&c, 5.0);
    CHECK(unipc_schedule_create(&s, &c, 50, &err) == CPDIT_OK);
    CHECK(s.sigmas[0] == (float)(1.0 - 1e-6) && s.sigmas[50] == 0.0f);
    CHECK(s.timesteps[0] == 999);
    int decreasing = 1;
    for (int i = 0; i < 50; i++)
        decreasing &= s.sigmas[i + 1] < s.sigmas[i];
    CHECK(decreasing);
    /* sigma_49 = 5·0.02998 / (1 + 4·0.02998), linspace(1, 0.001, 51)[49] = 0.02998 */
    const double lin = 1.0 + 49.0 * ((0.001 - 1.0) / 50.0);
    CHECK_NEAR(s.sigmas[49], 5.0 * lin / (1.0 + 4.0 * lin), 1e-7);
    CHECK(s.timesteps[49] == (int64_t)(5.0 * lin / (1.0 + 4.0 * lin) * 1000.0));
    float ws[3 * NELEM], x[NELEM], v[NELEM], x0[NELEM];
    unipc_state st;
    CHECK(unipc_state_init(&st, &s, NELEM, ws, &err) == CPDIT_OK);
    uint32_t rng = SEED;
    lcg_floats(&rng, x, NELEM);
    for (int i = 0; i < 50; i++) {
        fake_model(&rng, x, v);
        for (int j = 0; j < NELEM; j++) {
            const float sv = s.sigmas[i] * v[j];
            x0[j] = x[j] - sv;
        }
        CHECK(unipc_step(&st, x, v, &err) == CPDIT_OK);
        CHECK(st.this_order == (i == 0 || i == 49 ? 1 : 2));
    }
    int lands = 1;
    for (int j = 0; j < NELEM; j++)
        lands &= bits(x[j]) == bits(x0[j]);
    CHECK_MSG(lands, "the last step does not land on x - sigma·v");
    unipc_schedule_free(&s);
    CHECK(unipc_schedule_create(&s, &c, 0, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "at least 1");
    c.solver_order = 4;
    CHECK(unipc_schedule_create(&s, &c, 4, &err) == CPDIT_ERR_INPUT);
    c.solver_order = 2;
    c.solver_type = UNIPC_SOLVER_BH1; /* with the final sigma 0: NaN in diffusers, refused */
    CHECK(unipc_schedule_create(&s, &c, 4, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "bh1");
    unipc_schedule_free(&s);
    /* the static-shift Euler: shift 1 is linspace(1, 1/1000, N) itself */
    flow_schedule_config fc;
    flow_schedule fs;
    flow_schedule_config_defaults(&fc);
    CHECK(flow_schedule_create_static(&fs, &fc, 2, &err) == CPDIT_OK);
    CHECK(fs.sigmas[0] == 1.0f && fs.sigmas[1] == 0.001f && fs.sigmas[2] == 0.0f);
    flow_schedule_free(&fs);
    fc.use_dynamic_shifting = true;
    CHECK(flow_schedule_create_static(&fs, &fc, 2, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "use_dynamic_shifting");
    flow_schedule_free(&fs);
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

/* Wan2.1-T2V-*-Diffusers' scheduler/scheduler_config.json */
static const char WAN_SCHEDULER_JSON[] =
    "{\"_class_name\": \"UniPCMultistepScheduler\", \"_diffusers_version\": \"0.33.0.dev0\", "
    "\"beta_end\": 0.02, \"beta_schedule\": \"linear\", \"beta_start\": 0.0001, "
    "\"disable_corrector\": [], \"dynamic_thresholding_ratio\": 0.995, "
    "\"final_sigmas_type\": \"zero\", \"flow_shift\": 3.0, \"lower_order_final\": true, "
    "\"num_train_timesteps\": 1000, \"predict_x0\": true, \"prediction_type\": "
    "\"flow_prediction\", \"rescale_betas_zero_snr\": false, \"sample_max_value\": 1.0, "
    "\"solver_order\": 2, \"solver_p\": null, \"solver_type\": \"bh2\", \"steps_offset\": 0, "
    "\"thresholding\": false, \"timestep_spacing\": \"linspace\", \"trained_betas\": null, "
    "\"use_beta_sigmas\": false, \"use_exponential_sigmas\": false, \"use_flow_sigmas\": true, "
    "\"use_karras_sigmas\": false}";

static int same_config(const unipc_config *a, const unipc_config *b)
{
    int same = a->num_train_timesteps == b->num_train_timesteps &&
               a->flow_shift == b->flow_shift && a->solver_order == b->solver_order &&
               a->solver_type == b->solver_type && a->lower_order_final == b->lower_order_final &&
               a->final_sigmas == b->final_sigmas &&
               a->n_disable_corrector == b->n_disable_corrector;
    for (int i = 0; same && i < a->n_disable_corrector; i++)
        same = a->disable_corrector[i] == b->disable_corrector[i];
    return same;
}

/* path gets {"prediction_type": "flow_prediction", "use_flow_sigmas": true, EXTRA} */
static cpdit_status load_with(const char *dir, const char *path, const char *extra,
                              unipc_config *c, cpdit_error *err)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"prediction_type\": \"flow_prediction\", \"use_flow_sigmas\": true%s%s}",
             extra[0] ? ", " : "", extra);
    write_file(path, text);
    return unipc_config_load(dir, c, err);
}

static void test_config_files(void)
{
    char *dir = tmpdir_make("unipcsched"), sub[4096], path[4200];
    CHECK(dir != NULL);
    if (!dir)
        return;
    snprintf(sub, sizeof sub, "%s/scheduler", dir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(path, sizeof path, "%s/scheduler_config.json", sub);
    write_file(path, WAN_SCHEDULER_JSON);
    unipc_config c, want;
    cpdit_error err;
    unipc_config_wan(&want, 3.0);
    CHECK(unipc_config_load(dir, &c, &err) == CPDIT_OK && same_config(&c, &want));
    CHECK(unipc_config_load(sub, &c, &err) == CPDIT_OK); /* the scheduler folder itself */
    /* from_config(..., flow_shift=5.0) and the other keys read */
    CHECK(load_with(dir, path, "\"flow_shift\": 5, \"solver_type\": \"bh1\", \"solver_order\": "
                    "3, \"lower_order_final\": false, \"final_sigmas_type\": \"sigma_min\", "
                    "\"disable_corrector\": [0, 4]", &c, &err) == CPDIT_OK);
    CHECK(c.flow_shift == 5.0 && c.solver_type == UNIPC_SOLVER_BH1 && c.solver_order == 3 &&
          !c.lower_order_final && c.final_sigmas == UNIPC_FINAL_SIGMA_MIN &&
          c.n_disable_corrector == 2 && c.disable_corrector[1] == 4);
    CHECK(load_with(dir, path, "\"solver_type\": \"midpoint\"", &c, &err) == CPDIT_OK &&
          c.solver_type == UNIPC_SOLVER_BH2);
    /* refused: each names the key */
    static const struct { const char *extra, *key; } bad[] = {
        {"\"prediction_type\": \"epsilon\"", "prediction_type"},
        {"\"use_flow_sigmas\": false", "use_flow_sigmas"},
        {"\"predict_x0\": false", "predict_x0"},
        {"\"thresholding\": true", "thresholding"},
        {"\"use_karras_sigmas\": true", "use_karras_sigmas"},
        {"\"use_dynamic_shifting\": true", "use_dynamic_shifting"},
        {"\"shift_terminal\": 0.1", "shift_terminal"},
        {"\"solver_p\": {}", "solver_p"},
        {"\"solver_type\": \"bh3\"", "solver_type"},
        {"\"solver_type\": \"bh1\"", "bh1"}, /* with the default final sigma zero */
        {"\"final_sigmas_type\": \"one\"", "final_sigmas_type"},
        {"\"timestep_spacing\": \"cosine\"", "timestep_spacing"},
        {"\"solver_order\": 4", "solver_order"},
        {"\"flow_shift\": -1", "flow_shift"},
        {"\"flow_shift\": \"3\"", "flow_shift"},
        {"\"num_train_timesteps\": 0", "num_train_timesteps"},
        {"\"disable_corrector\": [\"a\"]", "disable_corrector"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(load_with(dir, path, bad[i].extra, &c, &err) == CPDIT_ERR_INPUT, "%s accepted",
                  bad[i].extra);
        CHECK_STR_CONTAINS(err.what, bad[i].key);
        CHECK_STR_CONTAINS(err.where, "scheduler_config.json");
    }
    write_file(path, "{}"); /* the defaults: epsilon prediction, no flow sigmas */
    CHECK(unipc_config_load(dir, &c, &err) == CPDIT_ERR_INPUT);
    write_file(path, "{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\"}");
    CHECK(unipc_config_load(dir, &c, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, UNIPC_MULTISTEP_CLASS);
    remove(path);
    CHECK(unipc_config_load(dir, &c, &err) == CPDIT_ERR_INPUT);
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
        snprintf(path, sizeof path, "%s/tests/data/unipc_expected.txt", srcdir ? srcdir : ".");
    test_expected(path);
    test_closed_forms();
    test_config_files();
    TEST_MAIN_END();
}
