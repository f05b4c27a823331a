/* tune_run.c — timed transformer steps of candidate grids (tune_run.h). */
#include "topology/tune_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/job_run.h"
#include "lib/cp/grid.h"
#include "lib/models/model.h"

#define TUNE_WEIGHT_CACHE_BYTES ((size_t)1 << 30) /* as the pipeline keeps (pipeline.c) */
#define TUNE_SIGMA 0.5f
#define TUNE_GUIDANCE 3.5f
#define TUNE_TEXT_SEED 1000u

/* One candidate's grid and this rank's share of the item (the family's layout). */
typedef struct tune_slot {
    cp_grid *g;
    cp_attention_config attn;
    model_shard *shard;
    float *x, *out;    /* (len, token_dim) */
} tune_slot;

static void slot_free(const cpdit_model *m, tune_slot *s)
{
    free(s->x);
    free(s->out);
    if (s->shard)
        m->family->shard_close(s->shard);
}

/* Fixed inputs in [-1, 1): a small integer hash, the same on every run. */
static void fill(float *p, size_t n, unsigned seed)
{
    unsigned x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (float)(x >> 8) / (float)(1u << 23) - 1.0f;
    }
}

static cpdit_status slot_setup(tune_slot *s, const tune_candidate *c, cpdit_model *m,
                               const model_geometry *geo, const model_text *const *text,
                               cpdit_error *err)
{
    cpdit_status st = cm_variant_parse(c->pred.variant, &s->attn, err);
    if (!st)
        st = m->family->shard_open(m, geo, s->g, &s->attn, text, 1, &s->shard, err);
    if (st)
        return st;
    long long start, len;
    m->family->shard_range(s->shard, &start, &len);
    const size_t n = (size_t)len * geo->token_dim;
    s->x = malloc((n + 1) * sizeof(float));
    s->out = malloc((n + 1) * sizeof(float));
    if (!s->x || !s->out)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "tune", "out of memory for inputs");
    fill(s->x, n, 1u + (unsigned)s->g->cp_rank);
    return CPDIT_OK;
}

/* "where: what" of e into dst, cut to n bytes. */
static void note_error(char *dst, size_t n, const cpdit_error *e)
{
    char buf[CPDIT_ERROR_WHERE_MAX + CPDIT_ERROR_WHAT_MAX + 8];
    snprintf(buf, sizeof buf, "%s: %s", e->where, e->what);
    snprintf(dst, n, "%.*s", (int)(n - 1), buf);
}

static double now_s(void)
{
    return MPI_Wtime();
}

/* One timed forward of candidate i on every rank; the slowest rank's seconds. Collective. */
static cpdit_status one_step(MPI_Comm world, cpdit_model *m, tune_slot *s, double *seconds,
                             cpdit_error *err)
{
    const model_step step = {0, TUNE_SIGMA, TUNE_SIGMA, TUNE_GUIDANCE, NULL};
    MPI_Barrier(world);
    const double t0 = now_s();
    cpdit_status st = m->family->forward(m, s->shard, 0, s->x, &step, s->out, err);
    double dt = now_s() - t0;
    st = job_agree_status(world, st, err);
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, world);
    *seconds = dt;
    return st;
}

/* After a counted round: which candidates still need samples (the same answer on every
 * rank: the samples are the world's maxima; the budget is rank 0's clock). Returns how
 * many still do. */
static int still_open(MPI_Comm world, tune_candidate *c, int n, const tune_budget *b,
                      int round, double t0)
{
    int over = now_s() - t0 >= b->budget_s || round >= TUNE_MAX_ROUNDS - 1;
    MPI_Bcast(&over, 1, MPI_INT, 0, world);
    int open = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].failed || c[i].tight)
            continue;
        tune_stats_of(c[i].samples, c[i].n_samples, &c[i].stats);
        if (round >= b->min_rounds && tune_stats_tight(&c[i].stats, b->rel))
            c[i].tight = 1;
        else if (round < b->min_rounds || !over)
            open++;
    }
    return open;
}

cpdit_status tune_measure(MPI_Comm world, const char *model_dir, const model_plan_shape *sh,
                          tune_candidate *c, int n, const tune_budget *b, FILE *log,
                          cpdit_error *err)
{
    int rank;
    MPI_Comm_rank(world, &rank);
    cpdit_model *m = NULL;
    model_open_options mo;
    memset(&mo, 0, sizeof mo);
    mo.budget = TUNE_WEIGHT_CACHE_BYTES;
    cpdit_status st = model_open(&m, model_dir, &mo, err);
    model_geometry geo;
    model_text *text = NULL;
    if (!st)
        st = m->family->geometry(m, sh->width, sh->height, sh->frames, (int)sh->text_tokens,
                                 &geo, err);
    if (!st)
        st = m->family->text_synthetic(m, geo.text_tokens, TUNE_TEXT_SEED, &text, err);
    if ((st = job_agree_status(world, st, err))) {
        if (m)
            m->family->text_free(text);
        model_close(m);
        return st;
    }
    const model_text *const texts[1] = {text};
    tune_slot *slots = calloc((size_t)n, sizeof *slots);
    st = job_agree_status(world, slots ? CPDIT_OK
                                 : cpdit_error_set(err, CPDIT_ERR_RUNTIME, "tune", "out of memory"),
                          err);
    for (int i = 0; !st && i < n; i++) {
        cpdit_error e;
        cpdit_error_clear(&e);
        const cm_config *g = &c[i].pred.cfg;
        c[i].failed = 0;
        c[i].tight = 0;
        c[i].n_samples = 0;
        cpdit_status cs = cp_grid_create(world, g->dp, g->ring, g->ulysses, &slots[i].g, &e);
        cs = job_agree_status(world, cs, &e);
        if (!cs)
            cs = job_agree_status(world, slot_setup(&slots[i], &c[i], m, &geo, texts, &e), &e);
        if (cs) {
            c[i].failed = 1;
            note_error(c[i].error, sizeof c[i].error, &e);
        }
    }
    const double t0 = now_s();
    for (int round = 0, open = n; !st && open > 0; round++) {
        for (int k = 0; k < n; k++) {
            const int i = (k + round) % n;
            if (c[i].failed || c[i].tight)
                continue;
            cpdit_error e;
            cpdit_error_clear(&e);
            double dt = 0;
            if (one_step(world, m, &slots[i], &dt, &e)) {
                c[i].failed = 1;
                note_error(c[i].error, sizeof c[i].error, &e);
                continue;
            }
            if (round > 0)
                c[i].samples[c[i].n_samples++] = dt;
            if (log && rank == 0)
                fprintf(log, "[tune] round %d  dp %d ring %d ulysses %d %-22s %.4f s%s\n",
                        round, c[i].pred.cfg.dp, c[i].pred.cfg.ring, c[i].pred.cfg.ulysses,
                        c[i].pred.variant, dt, round == 0 ? " (warm-up)" : "");
        }
        if (round > 0)
            open = still_open(world, c, n, b, round, t0);
    }
    for (int i = 0; i < n; i++) {
        if (!c[i].failed && c[i].n_samples > 0)
            tune_stats_of(c[i].samples, c[i].n_samples, &c[i].stats);
        c[i].measured_s = !c[i].failed && c[i].n_samples > 0 ? c[i].stats.median : 0;
        if (slots) {
            cp_grid_destroy(slots[i].g);
            slot_free(m, &slots[i]);
        }
    }
    free(slots);
    m->family->text_free(text);
    model_close(m);
    return st;
}
