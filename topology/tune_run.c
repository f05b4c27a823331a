/* tune_run.c — timed transformer steps of candidate grids (tune_run.h). */
#include "topology/tune_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/job_run.h"
#include "lib/cp/grid.h"
#include "lib/flux/flux_shard.h"
#include "lib/flux/flux_transformer.h"
#include "lib/models/flux_plan.h"

#define TUNE_WEIGHT_CACHE_BYTES ((size_t)1 << 30) /* as the pipeline keeps (pipeline.c) */
#define TUNE_SIGMA 0.5f
#define TUNE_GUIDANCE 3.5f

/* One candidate's grid and this rank's inputs. */
typedef struct tune_slot {
    cp_grid *g;
    cp_seq_layout layout;
    int have_layout;
    cp_attention_config attn;
    float *x, *txt, *pooled, *txt_ids, *img_ids, *out;
    int tlen, ilen;
} tune_slot;

static void slot_free(tune_slot *s)
{
    free(s->x);
    free(s->txt);
    free(s->pooled);
    free(s->txt_ids);
    free(s->img_ids);
    free(s->out);
    if (s->have_layout)
        cp_seq_layout_free(&s->layout);
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

static cpdit_status slot_setup(tune_slot *s, const tune_candidate *c, const model_plan_shape *sh,
                               const flux_transformer_config *tc, cpdit_error *err)
{
    cpdit_status st = cm_variant_parse(c->pred.variant, &s->attn, err);
    if (st)
        return st;
    const int cp = s->g->cp_size, r = s->g->cp_rank;
    if ((st = flux_shard_layout(&s->layout, cp, (int)sh->text_tokens, (int)sh->image_tokens,
                                err)))
        return st;
    s->have_layout = 1;
    s->tlen = s->layout.txt_len[r];
    s->ilen = s->layout.img_len[r];
    const size_t out_w = (size_t)tc->patch_size * tc->patch_size * tc->out_channels;
    s->x = malloc(((size_t)s->ilen * tc->in_channels + 1) * sizeof(float));
    s->txt = malloc(((size_t)s->tlen * tc->joint_attention_dim + 1) * sizeof(float));
    s->pooled = malloc((size_t)tc->pooled_projection_dim * sizeof(float));
    s->txt_ids = calloc((size_t)s->tlen * tc->n_axes + 1, sizeof(float));
    s->img_ids = calloc((size_t)s->ilen * tc->n_axes + 1, sizeof(float));
    s->out = malloc(((size_t)s->ilen * out_w + 1) * sizeof(float));
    if (!s->x || !s->txt || !s->pooled || !s->txt_ids || !s->img_ids || !s->out)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "tune", "out of memory for inputs");
    fill(s->x, (size_t)s->ilen * tc->in_channels, 1u + (unsigned)r);
    fill(s->txt, (size_t)s->tlen * tc->joint_attention_dim, 1000u + (unsigned)r);
    fill(s->pooled, (size_t)tc->pooled_projection_dim, 7u);
    /* RoPE positions of the image tokens: row, column of the packed latent grid */
    const int cols = sh->width / FLUX_PLAN_PIXELS_PER_TOKEN;
    for (int i = 0; i < s->ilen && tc->n_axes >= 3; i++) {
        const int gi = s->layout.img_start[r] + i;
        s->img_ids[(size_t)i * tc->n_axes + 1] = (float)(gi / cols);
        s->img_ids[(size_t)i * tc->n_axes + 2] = (float)(gi % cols);
    }
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
static cpdit_status one_step(MPI_Comm world, flux_transformer *m, tune_slot *s,
                             const flux_transformer_config *tc, double *seconds,
                             cpdit_error *err)
{
    const float sigma = TUNE_SIGMA, guidance = TUNE_GUIDANCE;
    flux_cp cp = {s->g, s->attn, &s->layout, NULL}; /* workspace per call */
    flux_inputs in = {1, s->tlen, s->ilen, s->x, s->txt, s->pooled, &sigma,
                      tc->guidance_embeds ? &guidance : NULL, s->txt_ids, s->img_ids};
    MPI_Barrier(world);
    const double t0 = now_s();
    cpdit_status st = flux_transformer_forward(m, NULL, &cp, &in, s->out, err);
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
    flux_transformer *m = NULL;
    cpdit_status st = flux_transformer_open(&m, model_dir, err);
    if ((st = job_agree_status(world, st, err))) {
        flux_transformer_close(m);
        return st;
    }
    flux_transformer_set_weight_cache(m, TUNE_WEIGHT_CACHE_BYTES);
    const flux_transformer_config *tc = flux_transformer_config_of(m);
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
            cs = job_agree_status(world, slot_setup(&slots[i], &c[i], sh, tc, &e), &e);
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
            if (one_step(world, m, &slots[i], tc, &dt, &e)) {
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
            slot_free(&slots[i]);
        }
    }
    free(slots);
    flux_transformer_close(m);
    return st;
}
