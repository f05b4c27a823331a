/* pipeline.c — FLUX.1 text-to-image on one CP group (see pipeline.h for the data flow). */
#include "lib/pipeline/pipeline.h"
#include "lib/pipeline/pipeline_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "lib/io/atomic_file.h"
#include "lib/builtin/builtin_model.h"
#include "lib/io/component_config.h"
#include "lib/pipeline/disk_reads.h"
#include "lib/pipeline/flow_schedule.h"
#include "lib/models/flux/flux_shard.h"
#include "lib/models/flux/flux_transformer.h"
#include "lib/pipeline/image_postprocess.h"
#include "lib/models/flux/flux_latents.h"
#include "lib/text/text_encode.h"
#include "lib/io/safetensors.h"
#include "lib/pipeline/torch_rng.h"
#include "lib/weights/weight_loader.h"
#include "lib/vae/vae_decoder.h"

/* FLUX latents: 16 channels, packed 2x2 into 64-wide tokens. */
#define FLUX_PACK 2
/* Pixels per latent: the VAE's upscale (2^(levels-1) = 8 for FLUX). */
#define FLUX_VAE_SCALE 8
/* Largest image side the pipeline accepts (pixels). */
#define PIPELINE_MAX_SIDE 16384
/* Message tag of the CFG-parallel velocity swap. */
#define CFG_TAG 77
/* FluxPipeline's default T5 lengths. */
#define T5_LEN_DEV 512
#define T5_LEN_SCHNELL 256


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
    const pipeline_options *opt = wo;
    pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    char dir[4096];
    cpdit_status st = cpdit_backend_resolve(opt ? opt->backend : NULL, &p->be, err);
    if (!st)
        st = cpdit_attention_kernel_find(p->be, opt ? opt->attention_kernel : NULL,
                                         &p->attn_kernel, err);
    if (!st)
        st = builtin_model_resolve(model, dir, sizeof dir, err);
    if (st)
        goto fail;
    p->model_dir = strdup(dir);
    if (!p->model_dir) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
        goto fail;
    }
    if ((st = flux_transformer_open(&p->transformer, dir, err)))
        goto fail;
    /* made once, kept for every step when they fit the budget */
    flux_transformer_set_weight_cache(p->transformer,
                                      wo->budget ? wo->budget : weight_budget_default(1));
    flux_transformer_set_weight_format(p->transformer, wo->format);
    p->weight_format = wo->format;
    if (wo->arena)
        flux_transformer_set_weight_arena(p->transformer, wo->arena);
    /* made now, by every rank together (sharing ranks meet in the loader), by the backend */
    if ((st = flux_transformer_set_backend(p->transformer, p->be, err)) ||
        (st = flux_transformer_load_weights(p->transformer, err)))
        goto fail;
    const flux_transformer_config *tc = flux_transformer_config_of(p->transformer);
    if (tc->in_channels % (FLUX_PACK * FLUX_PACK) || tc->patch_size != 1) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                             "transformer in_channels %d / patch_size %d: the FLUX pipeline "
                             "needs patch_size 1 and 2x2-packed latents (in_channels = 4 x latent "
                             "channels)", tc->in_channels, tc->patch_size);
        goto fail;
    }
    if (tc->out_channels != tc->in_channels) { /* the sampler adds v to the latents */
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                             "transformer out_channels %d != in_channels %d: the FLUX pipeline "
                             "needs a velocity of the latents' shape", tc->out_channels,
                             tc->in_channels);
        goto fail;
    }
    p->latent_channels = tc->in_channels / (FLUX_PACK * FLUX_PACK);
    /* The VAE's config is checked now, on every rank (not after the sampler): channels, and
     * the 8x upscale that image sizes (multiples of 16) and latent sizes (H/8) assume. Its
     * weights are loaded only by the ranks that decode, on their first image. */
    if ((st = vae_config_load(dir, &p->vae_cfg, err)))
        goto fail;
    const autoencoder_kl_config *vc = &p->vae_cfg;
    const int upscale = 1 << (vc->n_blocks - 1);
    if (vc->latent_channels != p->latent_channels || upscale != FLUX_VAE_SCALE ||
        vc->out_channels != 3) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                             "vae: latent_channels %d (transformer latents: %d), upscale %d "
                             "(FLUX: %d), out_channels %d (RGB: 3)", vc->latent_channels,
                             p->latent_channels, upscale, FLUX_VAE_SCALE, vc->out_channels);
        goto fail;
    }
    if ((st = flow_schedule_config_load(dir, &p->sched, err)))
        goto fail;
    text_encoder_options topt = text_encoder_options_default();
    topt.backend = p->be;
    topt.attention_kernel = p->attn_kernel->name;
    topt.weight_format = wo->format;
    /* The text encoders get what the budget leaves after the transformer's weights: its
     * resident matrices, or (streaming) its two block slots; they stay resident when that
     * holds them (T5-XXL: 9.5 GB in bf16), else they stream per layer (two layer slots, the
     * next layer read and packed while the current one computes). With an arena, one
     * copy per node; without one and without an explicit budget, the encoders' own default
     * (several unshared ranks would each take the free memory otherwise). */
    if (wo->arena)
        topt.arena = wo->arena;
    if (wo->arena || wo->budget) {
        flux_weight_stats ws;
        flux_transformer_weight_stats(p->transformer, &ws);
        size_t tbytes = flux_transformer_weight_bytes(p->transformer);
        if (!ws.resident)
            tbytes += 2 * ws.largest_group_bytes;
        const size_t budget = wo->budget ? wo->budget : weight_budget_default(1);
        const size_t left = budget > tbytes ? budget - tbytes : 0;
        if (left > topt.cache_bytes)
            topt.cache_bytes = left;
    }
    if ((st = text_encoders_load(dir, &topt, &p->text, err)))
        goto fail;
    if (text_encoders_pooled_dim(p->text) != tc->pooled_projection_dim ||
        text_encoders_t5_dim(p->text) != tc->joint_attention_dim) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                             "text encoders give pooled %d / tokens %d wide, the transformer "
                             "wants pooled_projection_dim %d / joint_attention_dim %d",
                             text_encoders_pooled_dim(p->text), text_encoders_t5_dim(p->text),
                             tc->pooled_projection_dim, tc->joint_attention_dim);
        goto fail;
    }
    *out = p;
    return CPDIT_OK;
fail:
    pipeline_close(p);
    return st;
}

const cpdit_backend *pipeline_backend(const pipeline *p)
{
    return p ? p->be : NULL;
}

void pipeline_weight_stats(const pipeline *p, flux_weight_stats *s)
{
    flux_transformer_weight_stats(p->transformer, s);
}

void pipeline_close(pipeline *p)
{
    if (!p)
        return;
    flux_transformer_close(p->transformer);
    vae_decoder_free(p->vae);
    text_encoders_free(p->text);
    cp_attention_ws_release(&p->attn_ws);
    free(p->model_dir);
    free(p);
}

double pipeline_decode_seconds(const pipeline *p, long *count)
{
    if (count)
        *count = p->decodes;
    return p->decode_seconds;
}

const char *pipeline_model_dir(const pipeline *p)
{
    return p->model_dir;
}

void pipeline_text_weight_stats(const pipeline *p, text_weight_stats *clip,
                                text_weight_stats *t5)
{
    clip_text_model_weight_stats(text_encoders_clip(p->text), clip);
    t5_encoder_weight_stats(text_encoders_t5(p->text), t5);
}

int pipeline_is_guidance_distilled(const pipeline *p)
{
    return flux_transformer_config_of(p->transformer)->guidance_embeds ? 1 : 0;
}

static int t5_length(const pipeline *p, const pipeline_params *prm)
{
    if (prm->max_sequence_length > 0)
        return prm->max_sequence_length;
    return pipeline_is_guidance_distilled(p) ? T5_LEN_DEV : T5_LEN_SCHNELL;
}

cpdit_status pipeline_check_params(const pipeline *p, const pipeline_params *prm,
                                   cpdit_error *err)
{
    int lh, lw;
    cpdit_status st = flux_latent_dims(prm->height, prm->width, &lh, &lw, err);
    if (st)
        return st;
    if (prm->width > PIPELINE_MAX_SIDE || prm->height > PIPELINE_MAX_SIDE)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, prm->width > PIPELINE_MAX_SIDE ? "width" : "height",
                               "%d is larger than %d", prm->width > PIPELINE_MAX_SIDE ? prm->width
                               : prm->height, PIPELINE_MAX_SIDE);
    if (prm->max_sequence_length < 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "max_sequence_length", "%d is negative",
                               prm->max_sequence_length);
    if (prm->steps < 1 || prm->steps > 10000)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "steps", "%d is out of range [1, 10000]",
                               prm->steps);
    if (!prm->prompt)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "prompt", "missing");
    int L = t5_length(p, prm);
    if (L < 1 || L > T5_LEN_DEV)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "max_sequence_length",
                               "%d is out of range [1, %d] (diffusers' limit)", L, T5_LEN_DEV);
    if (!(prm->guidance >= 0.0f) || !(prm->true_cfg >= 0.0f))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, prm->guidance >= 0.0f ? "true_cfg" : "guidance",
                               "must be a number >= 0");
    return CPDIT_OK;
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

/* --dump: DIR/noise.safetensors (tensor `latents`, (1, C, H', W') f32) and
 * DIR/schedule.json. */
static cpdit_status dump_inputs(const char *dir, const float *noise, int C, int lh, int lw,
                                const flow_schedule *s, cpdit_error *err)
{
    cpdit_status st = pipeline_make_dirs(dir, err);
    if (st)
        return st;
    char path[4096];
    int64_t shape[4] = {1, C, lh, lw};
    safetensors_write_tensor t = {"latents", CPDIT_DTYPE_F32, 4, shape, noise, CPDIT_DTYPE_F32};
    snprintf(path, sizeof path, "%s/noise.safetensors", dir);
    if ((st = safetensors_write(path, &t, 1, NULL, 0, err)))
        return st;
    char *json = NULL;
    if ((st = flow_schedule_to_json(s, &json, err)))
        return st;
    snprintf(path, sizeof path, "%s/schedule.json", dir);
    st = atomic_write_buffer(path, json, strlen(json), err);
    free(json);
    return st;
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

/* Everything one generate call allocates, freed in one place. */
typedef struct gen_buffers {
    float *pooled, *pooled_neg;   /* (pooled_dim) */
    float *t5, *t5_neg;           /* (L, t5_dim) full text tokens */
    float *txt_local, *txt_local_neg; /* (txt_len, t5_dim) this rank's text tokens */
    float *noise;                 /* (C, lh, lw) */
    float *packed;                /* (S, 64) all image tokens */
    float *img_ids, *txt_ids;     /* (S, 3), (L, 3) */
    float *img_ids_local, *txt_ids_local;
    float *x, *v, *v_neg;         /* (img_len, 64) this rank's image tokens */
    float *image;                 /* (3, H, W) */
    cp_seq_layout layout;
    flow_schedule sched;
} gen_buffers;

static void gen_buffers_free(gen_buffers *b)
{
    float *all[] = {b->pooled, b->pooled_neg, b->t5, b->t5_neg, b->txt_local, b->txt_local_neg,
                    b->noise, b->packed, b->img_ids, b->txt_ids, b->img_ids_local,
                    b->txt_ids_local, b->x, b->v, b->v_neg, b->image};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    cp_seq_layout_free(&b->layout);
    flow_schedule_free(&b->sched);
}

static float *alloc_floats(size_t n)
{
    return malloc((n ? n : 1) * sizeof(float));
}

/* cpdit_comm_agree over the CP group, then over the CFG pair (when CFG-parallel), so that
 * one rank's failure (e.g. the dump on CP rank 0) never leaves the others waiting. */
static cpdit_status group_agree(const cp_grid *g, cpdit_comm *cfg_comm, cpdit_status st,
                                cpdit_error *err)
{
    st = cpdit_comm_agree(g ? g->cp : NULL, st, err);
    return cpdit_comm_agree(cfg_comm, st, err);
}

/* Is the layout uneven, or do the heads not divide the Ulysses degree? Then the strict
 * attention modes cannot run it and the "anything" modes are switched on. */
static int needs_anything(const cp_seq_layout *l, const cp_grid *g, int heads)
{
    for (int r = 1; r < l->nranks; r++)
        if (l->len[r] != l->len[0])
            return 1;
    return g && heads % g->ulysses != 0;
}

/* Stages 1-2 on every rank: text embeddings, noise, packed latents, ids, schedule, and the
 * --dump files (CP rank 0). */
static cpdit_status prepare_item(pipeline *p, const pipeline_params *prm, const pipeline_run *run,
                                 int cfg, int L, int lh, int lw, int S, gen_buffers *b,
                                 cpdit_error *err)
{
    const flux_transformer_config *tc = flux_transformer_config_of(p->transformer);
    const int C = p->latent_channels, W64 = tc->in_channels;
    const int pooled_dim = tc->pooled_projection_dim, t5_dim = tc->joint_attention_dim;
    const int cp_rank = run->grid ? run->grid->cp_rank : 0;
    cpdit_status st;
    /* 1. text, replicated on every rank of the group */
    b->pooled = alloc_floats((size_t)pooled_dim);
    b->t5 = alloc_floats((size_t)L * t5_dim);
    if (cfg) {
        b->pooled_neg = alloc_floats((size_t)pooled_dim);
        b->t5_neg = alloc_floats((size_t)L * t5_dim);
    }
    if (!b->pooled || !b->t5 || (cfg && (!b->pooled_neg || !b->t5_neg)))
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    if ((st = text_encode(p->text, &prm->prompt, NULL, 1, L, b->pooled, b->t5, NULL, err)))
        return st;
    if (cfg && (st = text_encode(p->text, &prm->negative_prompt, NULL, 1, L, b->pooled_neg,
                                 b->t5_neg, NULL, err)))
        return st;

    /* 2. noise, the same on every rank: torch.randn((1, C, H/8, W/8), generator(seed)) */
    const size_t n_noise = (size_t)C * lh * lw;
    b->noise = alloc_floats(n_noise);
    b->packed = alloc_floats((size_t)S * W64);
    b->img_ids = alloc_floats((size_t)S * 3);
    b->txt_ids = alloc_floats((size_t)L * 3);
    if (!b->noise || !b->packed || !b->img_ids || !b->txt_ids)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    if ((st = torch_randn_seeded(prm->seed, b->noise, n_noise, TORCH_NORMAL_AVX2, err)))
        return st;
    flux_pack_latents(b->packed, b->noise, 1, C, lh, lw);
    flux_latent_image_ids(b->img_ids, lh, lw);
    flux_text_ids(b->txt_ids, L);
    if ((st = flow_schedule_create(&b->sched, &p->sched, prm->steps, S, err)))
        return st;
    if (run->dump_dir && cp_rank == 0)
        return dump_inputs(run->dump_dir, b->noise, C, lh, lw, &b->sched, err);
    return CPDIT_OK;

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

/* pipeline_generate without the world round's guarantee: *joined = 1 once this rank has taken
 * part in run->vae_world's decode round (pipeline_generate joins it otherwise). */
static cpdit_status generate(pipeline *p, const pipeline_params *prm, const pipeline_run *run,
                             uint8_t **rgb, int *joined, cpdit_error *err)
{
    *rgb = NULL;
    cpdit_status st = pipeline_check_params(p, prm, err);
    if (st)
        return st;
    const flux_transformer_config *tc = flux_transformer_config_of(p->transformer);
    const cp_grid *g = run->grid;
    const int cp_size = g ? g->cp_size : 1, cp_rank = g ? g->cp_rank : 0;
    const int C = p->latent_channels, W64 = tc->in_channels;
    const int L = t5_length(p, prm);
    const int t5_dim = tc->joint_attention_dim;
    int lh, lw;
    flux_latent_dims(prm->height, prm->width, &lh, &lw, NULL);
    const int S = (lh / FLUX_PACK) * (lw / FLUX_PACK);
    const int cfg = prm->true_cfg > 1.0f && prm->negative_prompt; /* "" too, as diffusers */
    const int cfg_par = cfg && run->cfg_comm && run->cfg_comm->size == 2;
    const int cfg_rank = cfg_par ? run->cfg_comm->rank : 0;

    pipeline_timings tm_local, *tm = run->timings ? run->timings : &tm_local;
    memset(tm, 0, sizeof *tm);
    tm->read_step1_bytes = tm->read_later_bytes = -1;
    gen_buffers b;
    memset(&b, 0, sizeof b);
    double t_phase = pipeline_now_seconds();
    st = prepare_item(p, prm, run, cfg, L, lh, lw, S, &b, err);
    tm->text_s = pipeline_now_seconds() - t_phase;
    if ((st = group_agree(g, cfg_par ? run->cfg_comm : NULL, st, err)))
        goto done;
    const size_t n_noise = (size_t)C * lh * lw;

    /* 3. shard text and image tokens over the group */
    if ((st = flux_shard_layout(&b.layout, cp_size, L, S, err)))
        goto done;
    const int tlen = b.layout.txt_len[cp_rank], tstart = b.layout.txt_start[cp_rank];
    const int ilen = b.layout.img_len[cp_rank], istart = b.layout.img_start[cp_rank];
    b.txt_local = alloc_floats((size_t)tlen * t5_dim);
    b.txt_local_neg = cfg ? alloc_floats((size_t)tlen * t5_dim) : NULL;
    b.txt_ids_local = alloc_floats((size_t)tlen * 3);
    b.img_ids_local = alloc_floats((size_t)ilen * 3);
    b.x = alloc_floats((size_t)ilen * W64);
    b.v = alloc_floats((size_t)ilen * W64);
    b.v_neg = cfg ? alloc_floats((size_t)ilen * W64) : NULL;
    if (!b.txt_local || !b.txt_ids_local || !b.img_ids_local || !b.x || !b.v ||
        (cfg && (!b.txt_local_neg || !b.v_neg)))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    if ((st = group_agree(g, cfg_par ? run->cfg_comm : NULL, st, err)))
        goto done;
    flux_shard_take(b.txt_local, b.t5, 1, L, tstart, tlen, (size_t)t5_dim);
    if (cfg)
        flux_shard_take(b.txt_local_neg, b.t5_neg, 1, L, tstart, tlen, (size_t)t5_dim);
    flux_shard_take(b.txt_ids_local, b.txt_ids, 1, L, tstart, tlen, 3);
    flux_shard_take(b.img_ids_local, b.img_ids, 1, S, istart, ilen, 3);
    flux_shard_take(b.x, b.packed, 1, S, istart, ilen, (size_t)W64);

    flux_cp cp = {g, run->attn, &b.layout, &p->attn_ws};
    cp.attn.backend = p->be;
    cp.attn.kernel = p->attn_kernel;
    if (g && !cp.attn.anything && needs_anything(&b.layout, g, tc->num_attention_heads))
        cp.attn.anything = 1; /* e.g. 169 image tokens on 4 ranks: uneven shares */
    const float guidance = prm->guidance;
    flux_inputs in = {1, tlen, ilen, b.x, b.txt_local, b.pooled, NULL,
                      tc->guidance_embeds ? &guidance : NULL, b.txt_ids_local, b.img_ids_local};

    /* 4. sampler: Euler over FLUX's sigmas; each rank updates its own image tokens */
    for (int i = 0; i < prm->steps; i++) {
        const double t0 = pipeline_now_seconds();
        const long long read0 = disk_read_bytes();
        if (run->should_stop && run->should_stop(run->ctx)) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "stopped");
            goto done;
        }
        const float sigma = b.sched.sigmas[i], sigma_next = b.sched.sigmas[i + 1];
        in.timestep = &sigma; /* FluxPipeline passes timestep / 1000 = sigma */
        const size_t nv = (size_t)ilen * W64;
        if (cfg && cfg_par) {
            /* this group computes one branch; the partner the other; swap and combine */
            float *mine = cfg_rank == 0 ? b.v : b.v_neg, *theirs = cfg_rank == 0 ? b.v_neg : b.v;
            in.encoder_hidden_states = cfg_rank == 0 ? b.txt_local : b.txt_local_neg;
            in.pooled_projections = cfg_rank == 0 ? b.pooled : b.pooled_neg;
            if ((st = flux_transformer_forward(p->transformer, p->be, &cp, &in, mine, err)))
                goto forward_failed;
            cpdit_comm_request rq[2] = {CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT};
            const int peer = 1 - cfg_rank;
            /* host fp32 velocities (the forward's output), not activations */
            if ((st = cpdit_comm_irecv(run->cfg_comm, CPDIT_COMM_FLOAT, theirs, nv, peer,
                                       CFG_TAG, &rq[0], err)) ||
                (st = cpdit_comm_isend(run->cfg_comm, CPDIT_COMM_FLOAT, mine, nv, peer, CFG_TAG,
                                       &rq[1], err)) ||
                (st = cpdit_comm_wait(run->cfg_comm, &rq[0], err)) ||
                (st = cpdit_comm_wait(run->cfg_comm, &rq[1], err)))
                goto forward_failed;
            for (size_t k = 0; k < nv; k++) /* neg + true_cfg * (pos - neg), same on both */
                b.v[k] = b.v_neg[k] + prm->true_cfg * (b.v[k] - b.v_neg[k]);
        } else {
        in.encoder_hidden_states = b.txt_local;
        in.pooled_projections = b.pooled;
        if ((st = flux_transformer_forward(p->transformer, p->be, &cp, &in, b.v, err)))
            goto forward_failed;
        if (cfg) {
            in.encoder_hidden_states = b.txt_local_neg;
            in.pooled_projections = b.pooled_neg;
            if ((st = flux_transformer_forward(p->transformer, p->be, &cp, &in, b.v_neg, err)))
                goto forward_failed;
            for (size_t k = 0; k < nv; k++) /* neg + true_cfg * (pos - neg) */
                b.v[k] = b.v_neg[k] + prm->true_cfg * (b.v[k] - b.v_neg[k]);
        }
        }
        flow_euler_step(b.x, b.v, (size_t)ilen * W64, sigma, sigma_next);
        const double t_step = pipeline_now_seconds() - t0;
        const long long read1 = disk_read_bytes();
        const long long read = read0 >= 0 && read1 >= read0 ? read1 - read0 : -1;
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
        if (run->progress && cp_rank == 0 && cfg_rank == 0)
            run->progress(i + 1, prm->steps, t_step, read, run->ctx);
    }
    t_phase = pipeline_now_seconds();

    /* 5. gather the image tokens in order, decode on CP rank 0 */
    if (g) {
        if ((st = flux_shard_gather_image(b.packed, b.x, &b.layout, g->cp, 1, (size_t)W64, err)))
            goto done;
    } else {
        memcpy(b.packed, b.x, (size_t)S * W64 * sizeof(float));
    }
    if (cfg_rank != 0)
        goto done;
    if (run->vae_world) { /* 6'. one round over every rank of the job; the leader owns it */
        float *z = NULL;
        if (cp_rank == 0 &&
            !(st = pipeline_check_finite(b.packed, (size_t)S * W64, "latents after sampling",
                                         err))) {
            flux_unpack_latents(b.noise, b.packed, 1, C, lh, lw);
            z = b.noise;
        }
        *joined = 1;
        uint8_t *pix = NULL;
        cpdit_error werr;
        cpdit_error_clear(&werr);
        cpdit_status wst = pipeline_vae_world_round(p, run, z, lh, lw, z ? &pix : NULL,
                                                    &tm->vae_load_s, z ? err : &werr);
        if (!z && wst == CPDIT_ERR_BROKEN) /* no item of its own, but the job must end */
            *err = werr;
        if (z || wst == CPDIT_ERR_BROKEN)
            st = wst;
        *rgb = pix;
        goto done;
    }
    /* 6. VAE decode: split by rows over the CP group (every rank holds the latents now), or on
     * CP rank 0 alone (run->vae_single_rank, --vae-parallel off; or tiled) */
    const int vae_par = g && g->cp_size > 1 && !run->vae_single_rank && !run->vae_tiling;
    if (!vae_par && cp_rank != 0)
        goto done;
    if ((st = pipeline_check_finite(b.packed, (size_t)S * W64, "latents after sampling", err)))
        goto done;
    flux_unpack_latents(b.noise, b.packed, 1, C, lh, lw); /* noise buffer reused for z */
    st = pipeline_load_vae(p, &tm->vae_load_s, err);
    if (vae_par) /* a rank that cannot load the VAE must not leave the others waiting */
        st = cpdit_comm_agree(g->cp, st, err);
    if (st)
        goto done;
    const autoencoder_kl_config *vc = vae_decoder_config(p->vae);
    vae_latents_denormalize(vc, b.noise, n_noise);
    const int f = vae_decoder_upscale(p->vae);
    const int H = lh * f, W = lw * f;
    uint8_t *pix = NULL;
    if (cp_rank == 0) {
        b.image = alloc_floats((size_t)vc->out_channels * H * W);
        pix = malloc((size_t)H * W * 3);
        if (!b.image || !pix) /* before the collective decode: abort rather than hang */
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    }
    const double t_dec = pipeline_now_seconds();
    if (!st) {
        if (run->vae_tiling)
            st = vae_decode_tiled(p->vae, b.noise, 1, lh, lw, b.image, err);
        else
            st = vae_decode_group(p->vae, vae_par ? g : NULL, b.noise, 1, lh, lw, b.image, err);
    }
    if (st == CPDIT_ERR_RUNTIME && vae_par)
        st = pipeline_broken(err, cp_rank, "VAE decode");
    if (cp_rank == 0) {
        p->decode_seconds += pipeline_now_seconds() - t_dec;
        p->decodes++;
    }
    if (!st && cp_rank == 0 &&
        !(st = pipeline_check_finite(b.image, (size_t)vc->out_channels * H * W, "decoded image", err)))
        st = image_chw_to_rgb8(b.image, vc->out_channels, H, W, pix, err);
    if (!st && cp_rank == 0 && run->dump_dir)
        st = pipeline_dump_image(run->dump_dir, b.image, vc->out_channels, H, W, err);
    if (st || cp_rank != 0) {
        free(pix);
        goto done;
    }
    *rgb = pix;
done:
    if (t_phase > 0.0 && tm->steps == prm->steps && !tm->vae_s)
        tm->vae_s = pipeline_now_seconds() - t_phase - tm->vae_load_s;
    gen_buffers_free(&b);
    return st;
forward_failed:
    /* Bad inputs fail identically on every rank (the forward agrees on shapes before its
     * first collective); a runtime failure (memory, communication) on one rank would leave
     * the others inside a collective: end the job rather than hang. */
    if (st == CPDIT_ERR_RUNTIME && ((g && g->cp_size > 1) || cfg_par))
        st = pipeline_broken(err, cp_rank, "transformer forward");
    goto done;
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
    return pipeline_vae_world_round(p, run, NULL, 0, 0, NULL, NULL, err ? err : &local);
}
