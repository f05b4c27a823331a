/* flux_family.c — FLUX.1 behind the model-family interface (lib/models/model.h): the
 * transformer (flux_transformer.h), CLIP-L + T5 text encoders (lib/text), the 2x2 latent
 * packing and ids (flux_latents.h), flow-match Euler (flux_scheduler.h), text and image tokens
 * sharded separately over the CP group (flux_shard.h), and AutoencoderKL as the decoder.
 * `cpdit forward` on FLUX inputs files is flux_forward_file.c.
 */
#include "lib/models/flux/flux_family.h"

#include <stdlib.h>
#include <string.h>

#include "lib/io/component_config.h"
#include "lib/models/flux/flux_latents.h"
#include "lib/models/flux/flux_scheduler.h"
#include "lib/models/flux/flux_shard.h"
#include "lib/models/flux/flux_transformer.h"
#include "lib/models/flux_plan.h"
#include "lib/text/text_encode.h"
#include "lib/vae/vae_decoder.h"
#include "lib/weights/weight_loader.h"

/* FluxPipeline's default T5 lengths, and diffusers' limit. */
#define T5_LEN_DEV 512
#define T5_LEN_SCHNELL 256
/* FluxPipeline's default steps for a folder: dev (guidance-distilled) and schnell. */
#define STEPS_DEV 28
#define STEPS_SCHNELL 4
/* The seeds of the synthetic text embeddings (tune): tokens, pooled. */
#define SYNTH_POOLED_SEED 7u

typedef struct flux_model {
    flux_transformer *tr;
    text_encoders *text;        /* NULL: transformer only */
    flow_schedule_config sched;
    int have_sched;             /* opened with the pipeline's components */
    int latent_channels;        /* in_channels / 4 */
    cp_attention_ws attn_ws;    /* CP attention's workspace, kept between steps and items */
} flux_model;

/* One prompt: CLIP's pooled vector and the T5 tokens. */
struct model_text {
    int len, dim, pooled_dim;
    float *pooled; /* (pooled_dim) */
    float *tokens; /* (len, dim) */
};

/* One item on this rank: its text and image tokens and their ids. */
struct model_shard {
    flux_model *fm;
    const model_text *const *texts;
    int n_texts;
    cp_seq_layout layout;
    int have_layout;
    flux_cp cp;
    int tlen, ilen, istart, token_dim;
    float *txt_local[2];        /* (tlen, dim) per text */
    float *txt_ids, *img_ids;   /* (tlen, 3), (ilen, 3) */
};

static flux_model *fm_of(const cpdit_model *m)
{
    return (flux_model *)m->impl;
}

static const flux_transformer_config *tc_of(const cpdit_model *m)
{
    return flux_transformer_config_of(fm_of(m)->tr);
}

static float *alloc_floats(size_t n)
{
    return malloc((n ? n : 1) * sizeof(float));
}

/* ------------------------------------------------------------------ open */

/* The transformer: weight budget, format, arena, backend; made now (every rank together). */
static cpdit_status open_transformer(cpdit_model *m, flux_model *fm, const char *dir,
                                     const model_open_options *o, cpdit_error *err)
{
    cpdit_status st = flux_transformer_open(&fm->tr, dir, err);
    if (st)
        return st;
    flux_transformer_set_weight_cache(fm->tr, o->budget ? o->budget : weight_budget_default(1));
    flux_transformer_set_weight_format(fm->tr, o->format);
    if (o->no_prefetch)
        flux_transformer_set_weight_prefetch(fm->tr, 0);
    if (o->arena)
        flux_transformer_set_weight_arena(fm->tr, o->arena);
    if ((st = flux_transformer_set_backend(fm->tr, m->be, err)) ||
        (st = flux_transformer_load_weights(fm->tr, err)))
        return st;
    const flux_transformer_config *tc = flux_transformer_config_of(fm->tr);
    fm->latent_channels = tc->in_channels / (FLUX_PACK * FLUX_PACK);
    return CPDIT_OK;
}

/* The pipeline's checks: 2x2-packed latents, a velocity of their shape, an AutoencoderKL of
 * those channels with FLUX's 8x upscale and RGB out, the scheduler config. */
static cpdit_status check_packing(const flux_transformer_config *tc, const char *dir,
                                  cpdit_error *err)
{
    if (tc->in_channels % (FLUX_PACK * FLUX_PACK) || tc->patch_size != 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                               "transformer in_channels %d / patch_size %d: the FLUX pipeline "
                               "needs patch_size 1 and 2x2-packed latents (in_channels = 4 x "
                               "latent channels)", tc->in_channels, tc->patch_size);
    if (tc->out_channels != tc->in_channels) /* the sampler adds v to the latents */
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                               "transformer out_channels %d != in_channels %d: the FLUX "
                               "pipeline needs a velocity of the latents' shape",
                               tc->out_channels, tc->in_channels);
    return CPDIT_OK;
}

static cpdit_status check_pipeline(flux_model *fm, const char *dir, cpdit_error *err)
{
    cpdit_status st = check_packing(flux_transformer_config_of(fm->tr), dir, err);
    if (st)
        return st;
    /* The VAE's config is checked now, on every rank (not after the sampler): channels, and
     * the 8x upscale that image sizes (multiples of 16) and latent sizes (H/8) assume. */
    autoencoder_kl_config vc;
    if ((st = vae_config_load(dir, &vc, err)))
        return st;
    const int upscale = 1 << (vc.n_blocks - 1);
    if (vc.latent_channels != fm->latent_channels || upscale != FLUX_VAE_SCALE ||
        vc.out_channels != 3)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                               "vae: latent_channels %d (transformer latents: %d), upscale %d "
                               "(FLUX: %d), out_channels %d (RGB: 3)", vc.latent_channels,
                               fm->latent_channels, upscale, FLUX_VAE_SCALE, vc.out_channels);
    cpdit_status sst = flow_schedule_config_load(dir, &fm->sched, err);
    fm->have_sched = !sst;
    return sst;
}

/* CLIP-L and T5 in what the budget leaves after the transformer's weights: its resident
 * matrices, or (streaming) its two block slots; resident when that holds them (T5-XXL: 9.5 GB
 * in bf16), else streamed per layer. With an arena, one copy per node; without one and
 * without an explicit budget, the encoders' own default (several unshared ranks would each
 * take the free memory otherwise). */
static cpdit_status open_text(cpdit_model *m, flux_model *fm, const char *dir,
                              const model_open_options *o, cpdit_error *err)
{
    text_encoder_options topt = text_encoder_options_default();
    topt.backend = m->be;
    topt.attention_kernel = m->attn_kernel ? m->attn_kernel->name : NULL;
    topt.weight_format = o->format;
    if (o->arena)
        topt.arena = o->arena;
    if (o->arena || o->budget) {
        flux_weight_stats ws;
        flux_transformer_weight_stats(fm->tr, &ws);
        size_t tbytes = flux_transformer_weight_bytes(fm->tr);
        if (!ws.resident)
            tbytes += 2 * ws.largest_group_bytes;
        const size_t budget = o->budget ? o->budget : weight_budget_default(1);
        const size_t left = budget > tbytes ? budget - tbytes : 0;
        if (left > topt.cache_bytes)
            topt.cache_bytes = left;
    }
    cpdit_status st = text_encoders_load(dir, &topt, &fm->text, err);
    if (st)
        return st;
    const flux_transformer_config *tc = flux_transformer_config_of(fm->tr);
    if (text_encoders_pooled_dim(fm->text) != tc->pooled_projection_dim ||
        text_encoders_t5_dim(fm->text) != tc->joint_attention_dim)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                               "text encoders give pooled %d / tokens %d wide, the transformer "
                               "wants pooled_projection_dim %d / joint_attention_dim %d",
                               text_encoders_pooled_dim(fm->text),
                               text_encoders_t5_dim(fm->text), tc->pooled_projection_dim,
                               tc->joint_attention_dim);
    return CPDIT_OK;
}

static void flux_close(cpdit_model *m)
{
    flux_model *fm = fm_of(m);
    if (!fm)
        return;
    flux_transformer_close(fm->tr);
    text_encoders_free(fm->text);
    cp_attention_ws_release(&fm->attn_ws);
    free(fm);
    m->impl = NULL;
}

static cpdit_status flux_open(cpdit_model *m, const char *dir, const model_open_options *o,
                              cpdit_error *err)
{
    flux_model *fm = calloc(1, sizeof *fm);
    if (!fm)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "model", "out of memory");
    m->impl = fm;
    cpdit_status st = open_transformer(m, fm, dir, o, err);
    if (!st && o->text_encoders && !(st = check_pipeline(fm, dir, err)))
        st = open_text(m, fm, dir, o, err);
    return st;
}

static void flux_weight_stats_of(const cpdit_model *m, model_weight_stats *s)
{
    flux_weight_stats_to_model(s, fm_of(m)->tr);
}

void flux_weight_stats_to_model(model_weight_stats *s, const flux_transformer *tr)
{
    flux_weight_stats w;
    flux_transformer_weight_stats(tr, &w);
    memset(s, 0, sizeof *s);
    s->resident = w.resident;
    s->shared = w.shared;
    s->matrix_bytes = w.matrix_bytes;
    s->largest_group_bytes = w.largest_group_bytes;
    s->create_seconds = w.create_seconds;
    s->stall_seconds = w.stall_seconds;
    s->prefetched_groups = w.prefetched_groups;
    s->bytes_read = w.bytes_read;
    s->peer_groups = w.peer_groups;
    s->stream_sharers = w.stream_sharers;
}

static size_t flux_params(const cpdit_model *m)
{
    return flux_transformer_param_count(fm_of(m)->tr);
}

static void flux_text_stats(const cpdit_model *m, text_weight_stats *clip, text_weight_stats *t5)
{
    const flux_model *fm = fm_of(m);
    memset(clip, 0, sizeof *clip);
    memset(t5, 0, sizeof *t5);
    if (!fm->text)
        return;
    clip_text_model_weight_stats(text_encoders_clip(fm->text), clip);
    t5_encoder_weight_stats(text_encoders_t5(fm->text), t5);
}

static int flux_distilled(const cpdit_model *m)
{
    return tc_of(m)->guidance_embeds ? 1 : 0;
}

static int flux_default_steps(const cpdit_model *m)
{
    return flux_distilled(m) ? STEPS_DEV : STEPS_SCHNELL;
}

/* ------------------------------------------------------------------ one item */

/* (H/8, W/8) latents of 16 channels (4 x the packed tokens' in_channels / 4), packed 2x2 into
 * S = (H/16)(W/16) tokens of in_channels; L T5 tokens (default 512 dev / 256 schnell). */
static cpdit_status flux_geometry(const cpdit_model *m, int width, int height, int frames,
                                  int text_tokens, model_geometry *g, cpdit_error *err)
{
    memset(g, 0, sizeof *g);
    if (frames > 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "frames",
                               "%d: FLUX makes images (0 or 1 frames)", frames);
    int lh, lw;
    cpdit_status st = check_packing(tc_of(m), m->dir, err);
    if (!st)
        st = flux_latent_dims(height, width, &lh, &lw, err);
    if (st)
        return st;
    const int L = text_tokens > 0 ? text_tokens
                                  : flux_distilled(m) ? T5_LEN_DEV : T5_LEN_SCHNELL;
    if (L < 1 || L > T5_LEN_DEV)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "max_sequence_length",
                               "%d is out of range [1, %d] (diffusers' limit)", L, T5_LEN_DEV);
    g->width = width;
    g->height = height;
    g->latent_channels = fm_of(m)->latent_channels;
    g->latent_h = lh;
    g->latent_w = lw;
    g->patch_t = 1;
    g->patch_h = g->patch_w = FLUX_PACK;
    g->tokens = (long long)(lh / FLUX_PACK) * (lw / FLUX_PACK);
    g->token_dim = tc_of(m)->in_channels;
    g->text_tokens = L;
    return CPDIT_OK;
}

static void flux_text_free(model_text *t)
{
    if (!t)
        return;
    free(t->pooled);
    free(t->tokens);
    free(t);
}

static cpdit_status text_alloc(const cpdit_model *m, int L, model_text **out, cpdit_error *err)
{
    const flux_transformer_config *tc = tc_of(m);
    model_text *t = calloc(1, sizeof *t);
    if (t) {
        t->len = L;
        t->dim = tc->joint_attention_dim;
        t->pooled_dim = tc->pooled_projection_dim;
        t->pooled = alloc_floats((size_t)t->pooled_dim);
        t->tokens = alloc_floats((size_t)L * t->dim);
    }
    if (!t || !t->pooled || !t->tokens) {
        flux_text_free(t);
        *out = NULL;
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    }
    *out = t;
    return CPDIT_OK;
}

/* CLIP pooled + T5 tokens of one prompt, as FluxPipeline.encode_prompt. */
static cpdit_status flux_encode_text(cpdit_model *m, const char *prompt, int L, model_text **out,
                                     cpdit_error *err)
{
    cpdit_status st = text_alloc(m, L, out, err);
    if (!st && (st = text_encode(fm_of(m)->text, &prompt, NULL, 1, L, (*out)->pooled,
                                 (*out)->tokens, NULL, err))) {
        flux_text_free(*out);
        *out = NULL;
    }
    return st;
}

/* Fixed values in [-1, 1): a small integer hash, the same on every run. */
static void fill_hash(float *p, size_t n, unsigned seed)
{
    unsigned x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (float)(x >> 8) / (float)(1u << 23) - 1.0f;
    }
}

static cpdit_status flux_text_synthetic(const cpdit_model *m, int L, unsigned seed, model_text **out,
                                        cpdit_error *err)
{
    cpdit_status st = text_alloc(m, L, out, err);
    if (!st) {
        fill_hash((*out)->tokens, (size_t)L * (*out)->dim, seed);
        fill_hash((*out)->pooled, (size_t)(*out)->pooled_dim, SYNTH_POOLED_SEED);
    }
    return st;
}

static void flux_pack(const model_geometry *g, const float *latents, float *tokens)
{
    flux_pack_latents(tokens, latents, 1, g->latent_channels, g->latent_h, g->latent_w);
}

static void flux_unpack(const model_geometry *g, const float *tokens, float *latents)
{
    flux_unpack_latents(latents, tokens, 1, g->latent_channels, g->latent_h, g->latent_w);
}

static cpdit_status flux_schedule(const cpdit_model *m, const model_geometry *g, int steps,
                                  model_schedule **out, cpdit_error *err)
{
    if (!fm_of(m)->have_sched) {
        *out = NULL;
        return cpdit_error_set(err, CPDIT_ERR_INPUT, m->dir,
                               "opened without the pipeline's components: no scheduler");
    }
    return flux_schedule_open(out, &fm_of(m)->sched, steps, g->tokens, err);
}

/* ------------------------------------------------------------------ the sharded forward */

static void flux_shard_close(model_shard *s)
{
    if (!s)
        return;
    for (int k = 0; k < 2; k++)
        free(s->txt_local[k]);
    free(s->txt_ids);
    free(s->img_ids);
    if (s->have_layout)
        cp_seq_layout_free(&s->layout);
    free(s);
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

/* This rank's ids: zeros for text, [0, i, j] for its image tokens. */
static cpdit_status take_ids(model_shard *s, const model_geometry *g, int tstart, int L)
{
    const int S = (int)g->tokens;
    float *txt = alloc_floats((size_t)L * FLUX_ID_AXES);
    float *img = alloc_floats((size_t)S * FLUX_ID_AXES);
    s->txt_ids = alloc_floats((size_t)s->tlen * FLUX_ID_AXES);
    s->img_ids = alloc_floats((size_t)s->ilen * FLUX_ID_AXES);
    cpdit_status st = CPDIT_ERR_RUNTIME;
    if (txt && img && s->txt_ids && s->img_ids) {
        flux_text_ids(txt, L);
        flux_latent_image_ids(img, g->latent_h, g->latent_w);
        flux_shard_take(s->txt_ids, txt, 1, L, tstart, s->tlen, FLUX_ID_AXES);
        flux_shard_take(s->img_ids, img, 1, S, s->istart, s->ilen, FLUX_ID_AXES);
        st = CPDIT_OK;
    }
    free(txt);
    free(img);
    return st;
}

static cpdit_status flux_shard_open(cpdit_model *m, const model_geometry *g, const cp_grid *grid,
                                    const cp_attention_config *attn,
                                    const model_text *const *texts, int n_texts,
                                    model_shard **out, cpdit_error *err)
{
    *out = NULL;
    if (n_texts < 1 || n_texts > 2)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "pipeline", "%d prompts (1 or 2)", n_texts);
    model_shard *s = calloc(1, sizeof *s);
    if (!s)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    s->fm = fm_of(m);
    s->texts = texts;
    s->n_texts = n_texts;
    s->token_dim = g->token_dim;
    const int cp_size = grid ? grid->cp_size : 1, cp_rank = grid ? grid->cp_rank : 0;
    const int L = g->text_tokens, dim = texts[0]->dim;
    cpdit_status st = flux_shard_layout(&s->layout, cp_size, L, (int)g->tokens, err);
    if (st) {
        flux_shard_close(s);
        return st;
    }
    s->have_layout = 1;
    const int tstart = s->layout.txt_start[cp_rank];
    s->tlen = s->layout.txt_len[cp_rank];
    s->ilen = s->layout.img_len[cp_rank];
    s->istart = s->layout.img_start[cp_rank];
    for (int k = 0; k < n_texts; k++)
        if (!(s->txt_local[k] = alloc_floats((size_t)s->tlen * dim)))
            st = CPDIT_ERR_RUNTIME;
    if (!st)
        st = take_ids(s, g, tstart, L);
    if (st) {
        flux_shard_close(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    }
    for (int k = 0; k < n_texts; k++)
        flux_shard_take(s->txt_local[k], texts[k]->tokens, 1, L, tstart, s->tlen, (size_t)dim);
    flux_cp cp = {grid, *attn, &s->layout, &s->fm->attn_ws};
    cp.attn.backend = m->be;
    cp.attn.kernel = m->attn_kernel;
    if (grid && !cp.attn.anything &&
        needs_anything(&s->layout, grid, tc_of(m)->num_attention_heads))
        cp.attn.anything = 1; /* e.g. 169 image tokens on 4 ranks: uneven shares */
    s->cp = cp;
    *out = s;
    return CPDIT_OK;
}

static void flux_shard_range(const model_shard *s, long long *start, long long *len)
{
    *start = s->istart;
    *len = s->ilen;
}

static cpdit_status flux_forward(cpdit_model *m, model_shard *s, int text, const float *x,
                                 const model_step *step, float *v, cpdit_error *err)
{
    if (text < 0 || text >= s->n_texts)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "pipeline", "no prompt %d", text);
    const float guidance = step->guidance;
    flux_inputs in = {1, s->tlen, s->ilen, x, s->txt_local[text], s->texts[text]->pooled,
                      &step->timestep, tc_of(m)->guidance_embeds ? &guidance : NULL,
                      s->txt_ids, s->img_ids};
    return flux_transformer_forward(s->fm->tr, m->be, &s->cp, &in, v, err);
}

static cpdit_status flux_gather(model_shard *s, const float *x, float *tokens, cpdit_error *err)
{
    if (s->cp.grid)
        return flux_shard_gather_image(tokens, x, &s->layout, s->cp.grid->cp, 1,
                                       (size_t)s->token_dim, err);
    memcpy(tokens, x, (size_t)s->ilen * s->token_dim * sizeof(float));
    return CPDIT_OK;
}

const model_family flux_family = {
    .name = "flux",
    .transformer_class = FLUX_TRANSFORMER_CLASS,
    .decoder_class = AUTOENCODER_KL_CLASS,
    .output = MODEL_OUTPUT_IMAGE,
    .single_file = 1,
    .open = flux_open,
    .close = flux_close,
    .weight_stats = flux_weight_stats_of,
    .param_count = flux_params,
    .text_weight_stats = flux_text_stats,
    .default_steps = flux_default_steps,
    .guidance_distilled = flux_distilled,
    .geometry = flux_geometry,
    .encode_text = flux_encode_text,
    .text_synthetic = flux_text_synthetic,
    .text_free = flux_text_free,
    .pack = flux_pack,
    .unpack = flux_unpack,
    .schedule_open = flux_schedule,
    .shard_open = flux_shard_open,
    .shard_range = flux_shard_range,
    .forward = flux_forward,
    .gather = flux_gather,
    .shard_close = flux_shard_close,
    .forward_file = flux_forward_file,
    .plan_shape = flux_plan_shape_load,
};
