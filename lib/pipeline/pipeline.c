/* pipeline.c — text-to-image for one item on one CP group (see pipeline.h for the data flow):
 * opening the model through its family (lib/models/model.h), the parameters, and the item's
 * stages prepare -> shard -> step -> gather -> decode (pipeline_sample.c, pipeline_decode.c),
 * each returning a status, agreed over the group where a later stage is collective. */
#include "lib/pipeline/pipeline.h"
#include "lib/pipeline/pipeline_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "lib/builtin/builtin_model.h"
#include "lib/cp/comm.h"
#include "lib/io/safetensors.h"
#include "lib/vae/vae_decoder.h"

/* Largest image side the pipeline accepts (pixels). */
#define PIPELINE_MAX_SIDE 16384
/* Most sampler steps. */
#define PIPELINE_MAX_STEPS 10000

double pipeline_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

cpdit_status pipeline_open(pipeline **out, const char *model, cpdit_error *err)
{
    return pipeline_open_with(out, model, NULL, err);
}

cpdit_status pipeline_open_with(pipeline **out, const char *model, const pipeline_options *wo,
                                cpdit_error *err)
{
    *out = NULL;
    pipeline_options wdef;
    memset(&wdef, 0, sizeof wdef);
    if (!wo)
        wo = &wdef;
    pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    char dir[4096];
    cpdit_status st = cpdit_backend_resolve(wo->backend, &p->be, err);
    if (!st)
        st = cpdit_attention_kernel_find(p->be, wo->attention_kernel, &p->attn_kernel, err);
    if (!st)
        st = builtin_model_resolve(model, dir, sizeof dir, err);
    if (!st && !(p->model_dir = strdup(dir)))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    p->weight_format = wo->format;
    /* the transformer's weights made now, by every rank together (sharing ranks meet in the
     * loader), kept for every step when they fit the budget; the text encoders in what it
     * leaves; the scheduler's and the decoder's configs checked now, on every rank (the
     * decoder's weights are loaded only by the ranks that decode, on their first image) */
    const model_open_options mo = {.backend = p->be, .attention_kernel = p->attn_kernel,
                                   .format = wo->format, .budget = wo->budget,
                                   .arena = wo->arena, .text_encoders = 1};
    if (!st)
        st = model_open(&p->m, dir, &mo, err);
    if (st) {
        pipeline_close(p);
        return st;
    }
    *out = p;
    return CPDIT_OK;
}

const cpdit_backend *pipeline_backend(const pipeline *p)
{
    return p ? p->be : NULL;
}

void pipeline_weight_stats(const pipeline *p, model_weight_stats *s)
{
    p->m->family->weight_stats(p->m, s);
}

void pipeline_close(pipeline *p)
{
    if (!p)
        return;
    model_close(p->m);
    vae_decoder_free(p->vae);
    free(p->model_dir);
    free(p);
}

double pipeline_decode_seconds(const pipeline *p, long *count)
{
    if (count)
        *count = p->decodes;
    return p->decode_seconds;
}

long pipeline_decode_shares(const pipeline *p)
{
    return p->decode_shares;
}

const char *pipeline_model_dir(const pipeline *p)
{
    return p->model_dir;
}

void pipeline_text_weight_stats(const pipeline *p, text_weight_stats *clip,
                                text_weight_stats *t5)
{
    p->m->family->text_weight_stats(p->m, clip, t5);
}

int pipeline_is_guidance_distilled(const pipeline *p)
{
    return p->m->family->guidance_distilled(p->m);
}

int pipeline_default_steps(const pipeline *p)
{
    return p->m->family->default_steps(p->m);
}

/* The item's geometry (the family's checks: sizes, text tokens) after the pipeline's own. */
static cpdit_status check_params(const pipeline *p, const pipeline_params *prm,
                                 model_geometry *g, cpdit_error *err)
{
    if (prm->max_sequence_length < 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "max_sequence_length", "%d is negative",
                               prm->max_sequence_length);
    cpdit_status st = p->m->family->geometry(p->m, prm->width, prm->height, prm->frames,
                                             prm->max_sequence_length, g, err);
    if (st)
        return st;
    if (prm->width > PIPELINE_MAX_SIDE || prm->height > PIPELINE_MAX_SIDE)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, prm->width > PIPELINE_MAX_SIDE ? "width" : "height",
                               "%d is larger than %d", prm->width > PIPELINE_MAX_SIDE ? prm->width
                               : prm->height, PIPELINE_MAX_SIDE);
    if (prm->steps < 1 || prm->steps > PIPELINE_MAX_STEPS)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "steps", "%d is out of range [1, %d]",
                               prm->steps, PIPELINE_MAX_STEPS);
    if (!prm->prompt)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "prompt", "missing");
    if (!(prm->flow_shift >= 0.0) || !isfinite(prm->flow_shift))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "flow_shift", "must be a number >= 0");
    if (!(prm->guidance >= 0.0f) || !(prm->true_cfg >= 0.0f))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, prm->guidance >= 0.0f ? "true_cfg" : "guidance",
                               "must be a number >= 0");
    return CPDIT_OK;
}

cpdit_status pipeline_check_params(const pipeline *p, const pipeline_params *prm,
                                   cpdit_error *err)
{
    model_geometry g;
    return check_params(p, prm, &g, err);
}

cpdit_status pipeline_make_dirs(const char *dir, cpdit_error *err)
{
    char tmp[4096];
    if (!dir || !dir[0])
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "output", "empty folder name");
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir, "path too long");
    for (char *q = tmp + 1; ; q++) {
        if (*q == '/' || *q == '\0') {
            char c = *q;
            *q = '\0';
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
                return cpdit_error_set(err, CPDIT_ERR_RUNTIME, tmp, "cannot create folder: %s",
                                       strerror(errno));
            *q = c;
            if (!c)
                break;
        }
    }
    return CPDIT_OK;
}

cpdit_status pipeline_dump_image(const char *dir, const float *image, int C, int H, int W,
                                 cpdit_error *err)
{
    char path[4096];
    int64_t shape[4] = {1, C, H, W};
    safetensors_write_tensor t = {"image", CPDIT_DTYPE_F32, 4, shape, image, CPDIT_DTYPE_F32};
    snprintf(path, sizeof path, "%s/image.safetensors", dir);
    return safetensors_write(path, &t, 1, NULL, 0, err);
}

/* Values of x[0..n) that are NaN or +-Inf. One pass, far cheaper than a transformer step. */
static size_t count_nonfinite(const float *x, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !isfinite(x[i]);
    return bad;
}

/* NaN/Inf in the sampled latents or the decoded image (broken weights, overflow) would be
 * written as a black or garbage PNG: fail the item instead, saying where they appeared. */
cpdit_status pipeline_check_finite(const float *x, size_t n, const char *what, cpdit_error *err)
{
    size_t bad = count_nonfinite(x, n);
    if (!bad)
        return CPDIT_OK;
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline",
                           "%s: %zu of %zu values are not finite (NaN or Inf); the model's "
                           "weights or its numerics are broken; no image written", what, bad, n);
}

cpdit_status pipeline_broken(cpdit_error *err, int rank, const char *what)
{
    if (err) {
        char msg[CPDIT_ERROR_WHAT_MAX];
        snprintf(msg, sizeof msg, "%s", err->what);
        cpdit_error_set(err, CPDIT_ERR_BROKEN, err->where, "%s (rank %d of the group, %s)", msg,
                        rank, what);
    }
    return CPDIT_ERR_BROKEN;
}

/* cpdit_comm_agree over the CP group, then over the CFG pair (when CFG-parallel), so that
 * one rank's failure (e.g. the dump on CP rank 0) never leaves the others waiting. */
static cpdit_status group_agree(const cp_grid *g, cpdit_comm *cfg_comm, cpdit_status st,
                                cpdit_error *err)
{
    st = cpdit_comm_agree(g ? g->cp : NULL, st, err);
    return cpdit_comm_agree(cfg_comm, st, err);
}

cpdit_status pipeline_load_vae(pipeline *p, double *load_s, cpdit_error *err)
{
    cpdit_status st = CPDIT_OK;
    if (!p->vae) {
        const double t_load = pipeline_now_seconds();
        st = vae_decoder_load(&p->vae, p->model_dir, err);
        if (!st) /* bf16 convolutions by default, fp32 with --weight-format fp32 */
            vae_decoder_set_weight_format(p->vae, p->weight_format);
        if (load_s)
            *load_s += pipeline_now_seconds() - t_load;
    }
    if (!st)
        vae_decoder_set_backend(p->vae, p->be);
    return st;
}

/* The item's CFG strategy: true CFG with a negative prompt ("" too, as diffusers), on this
 * group alone or over the CFG pair. */
static void choose_cfg(pipeline_item *it)
{
    const pipeline_params *prm = it->prm;
    const int cfg = prm->true_cfg > 1.0f && prm->negative_prompt;
    const int par = cfg && it->run->cfg_comm && it->run->cfg_comm->size == 2;
    it->cfg = !cfg ? PIPELINE_CFG_NONE : par ? PIPELINE_CFG_PARALLEL : PIPELINE_CFG_SEQUENTIAL;
    it->cfg_rank = par ? it->run->cfg_comm->rank : 0;
}

/* pipeline_generate without the world round's guarantee: *joined = 1 once this rank has taken
 * part in run->vae_world's decode round (pipeline_generate joins it otherwise). */
static cpdit_status generate(pipeline *p, const pipeline_params *prm, const pipeline_run *run,
                             uint8_t **rgb, int *joined, cpdit_error *err)
{
    *rgb = NULL;
    pipeline_item it;
    memset(&it, 0, sizeof it);
    cpdit_status st = check_params(p, prm, &it.geo, err);
    if (st)
        return st;
    it.family = p->m->family;
    it.prm = prm;
    it.run = run;
    it.cp_rank = run->grid ? run->grid->cp_rank : 0;
    choose_cfg(&it);
    pipeline_timings tm_local;
    it.tm = run->timings ? run->timings : &tm_local;
    memset(it.tm, 0, sizeof *it.tm);
    it.tm->read_step1_bytes = it.tm->read_later_bytes = -1;
    cpdit_comm *pair = it.cfg == PIPELINE_CFG_PARALLEL ? run->cfg_comm : NULL;

    double t_phase = pipeline_now_seconds();
    st = pipeline_prepare(p, &it, err);
    it.tm->text_s = pipeline_now_seconds() - t_phase;
    st = group_agree(run->grid, pair, st, err);
    if (!st)
        st = group_agree(run->grid, pair, pipeline_shard(p, &it, err), err);
    if (!st)
        st = pipeline_sample(p, &it, err);
    t_phase = pipeline_now_seconds();
    if (!st)
        st = pipeline_gather(p, &it, err);
    if (!st)
        st = pipeline_decode(p, &it, rgb, joined, err);
    if (it.tm->steps == prm->steps && !it.tm->vae_s)
        it.tm->vae_s = pipeline_now_seconds() - t_phase - it.tm->vae_load_s;
    pipeline_item_free(&it);
    return st;
}

cpdit_status pipeline_generate(pipeline *p, const pipeline_params *prm, const pipeline_run *run,
                               uint8_t **rgb, cpdit_error *err)
{
    int joined = 0;
    cpdit_status st = generate(p, prm, run, rgb, &joined, err);
    if (run->vae_world && !joined && st != CPDIT_ERR_BROKEN) {
        /* failed, stopped, CFG's second branch: join with nothing */
        cpdit_error werr;
        cpdit_error_clear(&werr);
        if (pipeline_vae_world_idle(p, run, &werr) == CPDIT_ERR_BROKEN) {
            if (err)
                *err = werr;
            st = CPDIT_ERR_BROKEN;
        }
    }
    return st;
}

cpdit_status pipeline_vae_world_idle(pipeline *p, const pipeline_run *run, cpdit_error *err)
{
    cpdit_error local;
    cpdit_error_clear(&local);
    if (!run->vae_world)
        return CPDIT_OK;
    return pipeline_vae_world_round(p, run, NULL, NULL, NULL, NULL, err ? err : &local);
}
