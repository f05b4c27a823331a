/* pipeline_sample.c — the sampler stages of one item (pipeline_internal.h), through the cpdit_model
 * family's interface (lib/models/model.h), which this file never looks past:
 *
 *   prepare  text embeddings (both prompts with true CFG), torch-compatible noise of the
 *            family's latent shape, packed into the S sampler tokens, the schedule, --dump
 *   shard    this rank's share of the tokens on the CP group (the family's layout)
 *   step     the velocity of one step (CFG as a strategy: none, sequential, CFG-parallel over
 *            two groups), then the scheduler's update of this rank's tokens (no communication)
 *   gather   every rank's tokens in order, on every rank of the group
 */
#include "lib/pipeline/pipeline_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm.h"
#include "lib/io/atomic_file.h"
#include "lib/io/safetensors.h"
#include "lib/pipeline/disk_reads.h"
#include "lib/pipeline/torch_rng.h"

/* Tests only (tests/pipeline_broken.sh): CP rank N of every group fails its first forward
 * with a runtime error, as a rank that runs out of memory there would. */
#define TEST_FAIL_FORWARD_ENV "CPDIT_TEST_FAIL_FORWARD"
/* Message tag of the CFG-parallel velocity swap. */
#define CFG_TAG 77
/* Latent tensor ranks in --dump: (1, C, H', W') for an image, (1, C, F', H', W') for video. */
#define DUMP_RANK_IMAGE 4
#define DUMP_RANK_VIDEO 5

static float *alloc_floats(size_t n)
{
    return malloc((n ? n : 1) * sizeof(float));
}

size_t pipeline_latent_count(const model_geometry *g)
{
    const size_t f = g->latent_frames > 0 ? (size_t)g->latent_frames : 1;
    return (size_t)g->latent_channels * f * g->latent_h * g->latent_w;
}

void pipeline_item_free(pipeline_item *it)
{
    float *all[] = {it->latents, it->tokens, it->x, it->v, it->v_neg, it->image};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    if (it->family) {
        it->family->shard_close(it->shard);
        for (int k = 0; k < 2; k++)
            it->family->text_free(it->texts[k]);
    }
    model_schedule_free(it->sched);
    memset(it, 0, sizeof *it);
}

/* --dump: DIR/noise.safetensors (tensor `latents`, the initial noise in the family's latent
 * shape, f32) and DIR/schedule.json. */
static cpdit_status dump_inputs(const char *dir, const pipeline_item *it, cpdit_error *err)
{
    cpdit_status st = pipeline_make_dirs(dir, err);
    if (st)
        return st;
    const model_geometry *g = &it->geo;
    char path[4096];
    int64_t shape[DUMP_RANK_VIDEO] = {1, g->latent_channels};
    int rank = DUMP_RANK_IMAGE, k = 2;
    if (g->latent_frames > 0) {
        rank = DUMP_RANK_VIDEO;
        shape[k++] = g->latent_frames;
    }
    shape[k++] = g->latent_h;
    shape[k] = g->latent_w;
    safetensors_write_tensor t = {"latents", CPDIT_DTYPE_F32, rank, shape, it->latents,
                                  CPDIT_DTYPE_F32};
    snprintf(path, sizeof path, "%s/noise.safetensors", dir);
    if ((st = safetensors_write(path, &t, 1, NULL, 0, err)))
        return st;
    char *json = NULL;
    if ((st = it->sched->to_json(it->sched, &json, err)))
        return st;
    snprintf(path, sizeof path, "%s/schedule.json", dir);
    st = atomic_write_buffer(path, json, strlen(json), err);
    free(json);
    return st;
}

cpdit_status pipeline_prepare(pipeline *p, pipeline_item *it, cpdit_error *err)
{
    const model_family *f = p->m->family;
    const pipeline_params *prm = it->prm;
    const model_geometry *g = &it->geo;
    /* 1. text, replicated on every rank of the group */
    cpdit_status st = f->encode_text(p->m, prm->prompt, g->text_tokens, &it->texts[0], err);
    if (!st && it->cfg != PIPELINE_CFG_NONE)
        st = f->encode_text(p->m, prm->negative_prompt, g->text_tokens, &it->texts[1], err);
    if (st)
        return st;
    /* 2. noise, the same on every rank: torch.randn((1, C, [F',] H', W'), generator(seed)) */
    const size_t n_noise = pipeline_latent_count(g);
    it->latents = alloc_floats(n_noise);
    it->tokens = alloc_floats((size_t)g->tokens * g->token_dim);
    if (!it->latents || !it->tokens)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    if ((st = torch_randn_seeded(prm->seed, it->latents, n_noise, TORCH_NORMAL_AVX2, err)))
        return st;
    f->pack(g, it->latents, it->tokens);
    if ((st = f->schedule_open(p->m, g, prm->steps, &it->sched, err)))
        return st;
    if (it->run->dump_dir && it->cp_rank == 0)
        return dump_inputs(it->run->dump_dir, it, err);
    return CPDIT_OK;
}

cpdit_status pipeline_shard(pipeline *p, pipeline_item *it, cpdit_error *err)
{
    const model_family *f = p->m->family;
    const int n_texts = it->cfg != PIPELINE_CFG_NONE ? 2 : 1;
    cpdit_status st = f->shard_open(p->m, &it->geo, it->run->grid, &it->run->attn,
                                    (const model_text *const *)it->texts, n_texts, &it->shard,
                                    err);
    if (st)
        return st;
    f->shard_range(it->shard, &it->start, &it->len);
    const size_t n = (size_t)it->len * it->geo.token_dim;
    it->x = alloc_floats(n);
    it->v = alloc_floats(n);
    it->v_neg = n_texts > 1 ? alloc_floats(n) : NULL;
    if (!it->x || !it->v || (n_texts > 1 && !it->v_neg))
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    memcpy(it->x, it->tokens + (size_t)it->start * it->geo.token_dim, n * sizeof(float));
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ CFG strategies */

/* v = v_neg + true_cfg · (v - v_neg), element by element (n floats). */
static void cfg_combine(float *v, const float *v_neg, size_t n, float true_cfg)
{
    for (size_t k = 0; k < n; k++)
        v[k] = v_neg[k] + true_cfg * (v[k] - v_neg[k]);
}

/* One forward on the prompt. */
static cpdit_status velocity_plain(pipeline *p, pipeline_item *it, const model_step *step,
                                   cpdit_error *err)
{
    return p->m->family->forward(p->m, it->shard, 0, it->x, step, it->v, err);
}

/* Two forwards on this group: the prompt, then the negative prompt; combined. */
static cpdit_status velocity_sequential(pipeline *p, pipeline_item *it, const model_step *step,
                                        cpdit_error *err)
{
    const model_family *f = p->m->family;
    cpdit_status st = f->forward(p->m, it->shard, 0, it->x, step, it->v, err);
    if (!st)
        st = f->forward(p->m, it->shard, 1, it->x, step, it->v_neg, err);
    if (!st)
        cfg_combine(it->v, it->v_neg, (size_t)it->len * it->geo.token_dim, it->prm->true_cfg);
    return st;
}

/* This group computes one branch, the partner group (same CP coordinates) the other; they
 * swap the host fp32 velocities and both combine, so both hold the same latents. */
static cpdit_status velocity_parallel(pipeline *p, pipeline_item *it, const model_step *step,
                                      cpdit_error *err)
{
    cpdit_comm *pair = it->run->cfg_comm;
    const size_t nv = (size_t)it->len * it->geo.token_dim;
    float *mine = it->cfg_rank == 0 ? it->v : it->v_neg;
    float *theirs = it->cfg_rank == 0 ? it->v_neg : it->v;
    cpdit_status st = p->m->family->forward(p->m, it->shard, it->cfg_rank, it->x, step, mine,
                                            err);
    if (st)
        return st;
    cpdit_comm_request rq[2] = {CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT};
    const int peer = 1 - it->cfg_rank;
    if ((st = cpdit_comm_irecv(pair, CPDIT_COMM_FLOAT, theirs, nv, peer, CFG_TAG, &rq[0],
                               err)) ||
        (st = cpdit_comm_isend(pair, CPDIT_COMM_FLOAT, mine, nv, peer, CFG_TAG, &rq[1], err)) ||
        (st = cpdit_comm_wait(pair, &rq[0], err)) || (st = cpdit_comm_wait(pair, &rq[1], err)))
        return st;
    cfg_combine(it->v, it->v_neg, nv, it->prm->true_cfg);
    return CPDIT_OK;
}

typedef cpdit_status (*cfg_strategy)(pipeline *p, pipeline_item *it, const model_step *step,
                                     cpdit_error *err);
static const cfg_strategy cfg_strategies[PIPELINE_CFG_MODES] = {
    [PIPELINE_CFG_NONE] = velocity_plain,
    [PIPELINE_CFG_SEQUENTIAL] = velocity_sequential,
    [PIPELINE_CFG_PARALLEL] = velocity_parallel,
};

/* ------------------------------------------------------------------ the sampler */

/* Is this the forward TEST_FAIL_FORWARD_ENV makes fail? */
static int test_fails_here(const pipeline_item *it, int step)
{
    const char *e = getenv(TEST_FAIL_FORWARD_ENV);
    return e && *e && step == 0 && atoi(e) == it->cp_rank;
}

/* Step i's time and storage reads into the item's timings; progress on the group leader. */
static void step_done(pipeline_item *it, int i, double t_step, long long read)
{
    pipeline_timings *tm = it->tm;
    if (i == 0)
        tm->read_step1_bytes = read;
    else if (read >= 0)
        tm->read_later_bytes = (tm->read_later_bytes > 0 ? tm->read_later_bytes : 0) + read;
    tm->sample_s += t_step;
    if (tm->steps == 0 || t_step < tm->step_min_s)
        tm->step_min_s = t_step;
    if (t_step > tm->step_max_s)
        tm->step_max_s = t_step;
    tm->steps++;
    const pipeline_run *run = it->run;
    if (run->progress && it->cp_rank == 0 && it->cfg_rank == 0)
        run->progress(i + 1, it->prm->steps, t_step, read, run->ctx);
}

cpdit_status pipeline_sample(pipeline *p, pipeline_item *it, cpdit_error *err)
{
    const pipeline_run *run = it->run;
    const cp_grid *g = run->grid;
    const size_t n = (size_t)it->len * it->geo.token_dim;
    for (int i = 0; i < it->prm->steps; i++) {
        const double t0 = pipeline_now_seconds();
        const long long read0 = disk_read_bytes();
        if (run->should_stop && run->should_stop(run->ctx))
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "stopped");
        const model_step step = {i, it->sched->sigmas[i], it->sched->timesteps[i],
                                 it->prm->guidance};
        cpdit_status st = test_fails_here(it, i)
                              ? cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline",
                                                "forward failed (%s)", TEST_FAIL_FORWARD_ENV)
                              : cfg_strategies[it->cfg](p, it, &step, err);
        if (st) {
            /* Bad inputs fail identically on every rank (the forward agrees on shapes before
             * its first collective); a runtime failure (memory, communication) on one rank
             * leaves the others inside a collective: the job must end, not hang. */
            if (st == CPDIT_ERR_RUNTIME &&
                ((g && g->cp_size > 1) || it->cfg == PIPELINE_CFG_PARALLEL))
                st = pipeline_broken(err, it->cp_rank, "transformer forward");
            return st;
        }
        it->sched->step(it->sched, i, it->x, it->v, n);
        const long long read1 = disk_read_bytes();
        step_done(it, i, pipeline_now_seconds() - t0,
                  read0 >= 0 && read1 >= read0 ? read1 - read0 : -1);
    }
    return CPDIT_OK;
}

cpdit_status pipeline_gather(pipeline *p, pipeline_item *it, cpdit_error *err)
{
    return p->m->family->gather(it->shard, it->x, it->tokens, err);
}
