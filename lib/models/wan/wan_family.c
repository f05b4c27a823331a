/* wan_family.c — Wan 2.1 behind the model-family interface (lib/models/model.h): the
 * transformer (wan_transformer.h), its latent geometry (wan_latents.h: patches 1x2x2 of the
 * VAE's latents, 4x in time and 8x in space), the video tokens sharded over the CP group with
 * the text on every rank (cross-attention is local), and the planner's shape (wan_plan.h).
 *
 * The transformer-only ops run today (`cpdit tune`, the probe, the planner). The pipeline's
 * components are not in this build yet: encode_text (UMT5, lib/text), schedule_open (UniPC,
 * lib/pipeline) and the decoder (AutoencoderKLWan, issue 25) answer with a clear INPUT error,
 * and so does open with the pipeline's components; wiring them in is this file's job only.
 */
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm.h"
#include "lib/models/model.h"
#include "lib/models/wan/wan_latents.h"
#include "lib/models/wan/wan_transformer.h"
#include "lib/models/wan_plan.h"
#include "lib/weights/weight_loader.h"

/* WanPipeline's defaults: steps, prompt tokens (UMT5, zero-padded after the true length). */
#define WAN_DEFAULT_STEPS 50
#define WAN_TEXT_LEN WAN_PLAN_TEXT_LEN
/* AutoencoderKLWan's compression: time (frames 4k + 1 -> k + 1 latent frames), space. */
#define WAN_VAE_TEMPORAL WAN_PLAN_VAE_TEMPORAL
#define WAN_VAE_SPATIAL WAN_PLAN_VAE_SPATIAL
#define WAN_DECODER_CLASS "AutoencoderKLWan"
#define WAN_WHERE "wan"

typedef struct wan_model {
    wan_transformer *tr;
    cp_attention_ws attn_ws; /* CP attention's workspace, kept between calls */
} wan_model;

/* One prompt: UMT5's tokens (no pooled vector). */
struct model_text {
    int len, dim;
    float *tokens; /* (len, text_dim) */
};

/* One item on this rank: its video tokens' positions; the text stays whole. */
struct model_shard {
    wan_model *wm;
    const model_text *const *texts;
    int n_texts;
    cp_seq_layout layout;
    int have_layout;
    wan_cp cp;
    int start, len, patch_dim, out_dim, C, K; /* K = pt·ph·pw */
    float *positions;                         /* (len, 3) */
    float *out;                               /* (len, out_dim) the forward's order */
};

static wan_model *wm_of(const cpdit_model *m)
{
    return (wan_model *)m->impl;
}

static const wan_transformer_config *wc_of(const cpdit_model *m)
{
    return wan_transformer_config_of(wm_of(m)->tr);
}

/* ------------------------------------------------------------------ open */

static void wan_close(cpdit_model *m)
{
    wan_model *wm = wm_of(m);
    if (!wm)
        return;
    wan_transformer_close(wm->tr);
    cp_attention_ws_release(&wm->attn_ws);
    free(wm);
    m->impl = NULL;
}

static cpdit_status wan_open(cpdit_model *m, const char *dir, const model_open_options *o,
                             cpdit_error *err)
{
    if (o->text_encoders)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                               "the Wan text-to-video pipeline (UMT5, UniPC, the Wan VAE) is "
                               "not in this build yet; cpdit forward, plan and tune run it");
    wan_model *wm = calloc(1, sizeof *wm);
    if (!wm)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory");
    m->impl = wm;
    cpdit_status st = wan_transformer_open(&wm->tr, dir, err);
    if (st)
        return st;
    wan_transformer_set_weight_cache(wm->tr, o->budget ? o->budget : weight_budget_default(1));
    wan_transformer_set_weight_format(wm->tr, o->format);
    if (o->no_prefetch)
        wan_transformer_set_weight_prefetch(wm->tr, 0);
    if (o->arena)
        wan_transformer_set_weight_arena(wm->tr, o->arena);
    if ((st = wan_transformer_set_backend(wm->tr, m->be, err)))
        return st;
    return wan_transformer_load_weights(wm->tr, err);
}

static void wan_weight_stats(const cpdit_model *m, model_weight_stats *s)
{
    memset(s, 0, sizeof *s);
    s->resident = wan_transformer_weights_resident(wm_of(m)->tr);
    s->matrix_bytes = wan_transformer_weight_bytes(wm_of(m)->tr);
    s->stream_sharers = 1;
}

static size_t wan_params(const cpdit_model *m)
{
    return wan_transformer_param_count(wm_of(m)->tr);
}

static void wan_text_stats(const cpdit_model *m, text_weight_stats *a, text_weight_stats *b)
{
    (void)m;
    memset(a, 0, sizeof *a);
    memset(b, 0, sizeof *b);
}

static int wan_default_steps(const cpdit_model *m)
{
    (void)m;
    return WAN_DEFAULT_STEPS;
}

static int wan_distilled(const cpdit_model *m)
{
    (void)m;
    return 0;
}

/* ------------------------------------------------------------------ one item */

/* The patch grid of g (from its latent shape). */
static cpdit_status grid_of(const cpdit_model *m, const model_geometry *g, int *pf, int *ph,
                            int *pw, cpdit_error *err)
{
    return wan_token_grid(wc_of(m), g->latent_frames, g->latent_h, g->latent_w, pf, ph, pw,
                          err);
}

/* frames N = 4k + 1 (0 or 1: one frame) -> k + 1 latent frames; H, W multiples of 16
 * (8x VAE, 2x2 patches) -> H/8 x W/8; S = F'/pt x H/16 x W/16 tokens of C·pt·ph·pw. */
static cpdit_status wan_geometry(const cpdit_model *m, int width, int height, int frames,
                                 int text_tokens, model_geometry *g, cpdit_error *err)
{
    memset(g, 0, sizeof *g);
    const wan_transformer_config *c = wc_of(m);
    const int N = frames > 1 ? frames : 1;
    if (frames < 0 || (N - 1) % WAN_VAE_TEMPORAL)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "frames",
                               "%d: Wan takes 4k + 1 frames (1, 5, ..., 81)", frames);
    const int unit = WAN_VAE_SPATIAL * c->patch_size[1];
    if (height < unit || height % unit || width < unit || width % unit)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, height % unit || height < unit ? "height"
                                                                                   : "width",
                               "%d is not a positive multiple of %d",
                               height % unit || height < unit ? height : width, unit);
    const int L = text_tokens > 0 ? text_tokens : WAN_TEXT_LEN;
    if (L > WAN_TEXT_LEN)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "max_sequence_length",
                               "%d is out of range [1, %d]", L, WAN_TEXT_LEN);
    if (c->out_dim != c->patch_dim) /* the sampler adds v to the latents */
        return cpdit_error_set(err, CPDIT_ERR_INPUT, m->dir,
                               "transformer out_channels %d != in_channels %d: the sampler "
                               "needs a velocity of the latents' shape", c->out_channels,
                               c->in_channels);
    g->width = width;
    g->height = height;
    g->frames = N;
    g->latent_channels = c->in_channels;
    g->latent_frames = 1 + (N - 1) / WAN_VAE_TEMPORAL;
    g->latent_h = height / WAN_VAE_SPATIAL;
    g->latent_w = width / WAN_VAE_SPATIAL;
    int pf, ph, pw;
    cpdit_status st = grid_of(m, g, &pf, &ph, &pw, err);
    if (st)
        return st;
    g->patch_t = c->patch_size[0];
    g->patch_h = c->patch_size[1];
    g->patch_w = c->patch_size[2];
    g->tokens = (long long)pf * ph * pw;
    g->token_dim = c->patch_dim;
    g->text_tokens = L;
    return CPDIT_OK;
}

static cpdit_status wan_encode_text(cpdit_model *m, const char *prompt, int L,
                                    model_text **out, cpdit_error *err)
{
    (void)prompt;
    (void)L;
    *out = NULL;
    return cpdit_error_set(err, CPDIT_ERR_INPUT, m->dir,
                           "the UMT5 text encoder of the Wan family is not in this build yet");
}

static void wan_text_free(model_text *t)
{
    if (!t)
        return;
    free(t->tokens);
    free(t);
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

static cpdit_status wan_text_synthetic(const cpdit_model *m, int L, unsigned seed,
                                       model_text **out, cpdit_error *err)
{
    model_text *t = calloc(1, sizeof *t);
    if (t) {
        t->len = L;
        t->dim = wc_of(m)->text_dim;
        t->tokens = malloc(((size_t)L * t->dim + 1) * sizeof(float));
    }
    if (!t || !t->tokens) {
        wan_text_free(t);
        *out = NULL;
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory");
    }
    fill_hash(t->tokens, (size_t)L * t->dim, seed);
    *out = t;
    return CPDIT_OK;
}

/* Per token: src (c, k) order -> dst (k, c) order (k_to_c = 0), or src (k, c) -> dst (c, k)
 * (k_to_c = 1); n tokens of C·K floats. The model takes patches in Conv3d's (c, kt, kh, kw) order and gives
 * its output in proj_out's (kt, kh, kw, c) order; the sampler's tokens use the former. */
static void reorder(float *dst, const float *src, size_t n, int C, int K, int k_to_c)
{
    const size_t P = (size_t)C * K;
    for (size_t t = 0; t < n; t++)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < K; k++) {
                const size_t ck = (size_t)c * K + k, kc = (size_t)k * C + c;
                dst[t * P + (k_to_c ? ck : kc)] = src[t * P + (k_to_c ? kc : ck)];
            }
}

static void wan_pack(const model_geometry *g, const float *latents, float *tokens)
{
    wan_patchify(tokens, latents, 1, g->latent_channels, g->latent_frames, g->latent_h,
                 g->latent_w, g->patch_t, g->patch_h, g->patch_w);
}

/* The exact inverse of wan_patchify: token t = (f·PH + h)·PW + w holds, at (c, kt, kh, kw),
 * latents[c, f·pt + kt, h·ph + kh, w·pw + kw]. */
static void wan_unpack(const model_geometry *g, const float *tokens, float *latents)
{
    const int pt = g->patch_t, ph = g->patch_h, pw = g->patch_w, C = g->latent_channels;
    const int F = g->latent_frames, H = g->latent_h, W = g->latent_w;
    const int PF = F / pt, PH = H / ph, PW = W / pw, K = pt * ph * pw;
    for (int f = 0; f < PF; f++)
        for (int h = 0; h < PH; h++)
            for (int w = 0; w < PW; w++) {
                const float *tok = tokens + (((size_t)f * PH + h) * PW + w) * C * K;
                for (int c = 0; c < C; c++)
                    for (int kt = 0; kt < pt; kt++)
                        for (int kh = 0; kh < ph; kh++)
                            for (int kw = 0; kw < pw; kw++)
                                latents[(((size_t)c * F + f * pt + kt) * H + h * ph + kh) * W +
                                        w * pw + kw] =
                                    tok[(size_t)c * K + (kt * ph + kh) * pw + kw];
            }
}

static cpdit_status wan_schedule(const cpdit_model *m, const model_geometry *g, int steps,
                                 model_schedule **out, cpdit_error *err)
{
    (void)g;
    (void)steps;
    *out = NULL;
    return cpdit_error_set(err, CPDIT_ERR_INPUT, m->dir,
                           "the UniPC scheduler of the Wan family is not in this build yet");
}

/* ------------------------------------------------------------------ the sharded forward */

static void wan_shard_close(model_shard *s)
{
    if (!s)
        return;
    free(s->positions);
    free(s->out);
    if (s->have_layout)
        cp_seq_layout_free(&s->layout);
    free(s);
}

/* The layout over the group (video only), and the attention mode that runs it: the strict
 * one when it can, else anything (12 heads on Ulysses 8, 1560 tokens on 7 ranks). */
static cpdit_status shard_layout(cpdit_model *m, model_shard *s, const model_geometry *g,
                                 const cp_grid *grid, const cp_attention_config *attn,
                                 cpdit_error *err)
{
    const wan_transformer_config *c = wc_of(m);
    cpdit_status st = cp_seq_layout_joint(&s->layout, grid ? grid->cp_size : 1, 0,
                                          (int)g->tokens, err);
    if (st)
        return st;
    s->have_layout = 1;
    wan_cp cp = {grid, *attn, &s->layout, &s->wm->attn_ws};
    cp.attn.backend = m->be;
    cp.attn.kernel = m->attn_kernel;
    if (grid && cp_attention_validate(&cp.attn, grid->ring, grid->ulysses, &s->layout, 1,
                                      c->num_attention_heads, c->attention_head_dim, err)) {
        cp.attn.anything = 1;
        cpdit_error_clear(err);
        if ((st = cp_attention_validate(&cp.attn, grid->ring, grid->ulysses, &s->layout, 1,
                                        c->num_attention_heads, c->attention_head_dim, err)))
            return st;
    }
    s->cp = cp;
    return CPDIT_OK;
}

static cpdit_status wan_shard_open(cpdit_model *m, const model_geometry *g, const cp_grid *grid,
                                   const cp_attention_config *attn,
                                   const model_text *const *texts, int n_texts,
                                   model_shard **out, cpdit_error *err)
{
    *out = NULL;
    model_shard *s = calloc(1, sizeof *s);
    if (!s)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory");
    const wan_transformer_config *c = wc_of(m);
    s->wm = wm_of(m);
    s->texts = texts;
    s->n_texts = n_texts;
    s->patch_dim = c->patch_dim;
    s->out_dim = c->out_dim;
    s->C = c->in_channels;
    s->K = c->patch_dim / c->in_channels;
    int pf, ph, pw;
    cpdit_status st = grid_of(m, g, &pf, &ph, &pw, err);
    if (!st)
        st = shard_layout(m, s, g, grid, attn, err);
    if (st) {
        wan_shard_close(s);
        return st;
    }
    const int r = grid ? grid->cp_rank : 0;
    s->start = s->layout.img_start[r];
    s->len = s->layout.img_len[r];
    float *all = malloc(((size_t)g->tokens * 3 + 1) * sizeof(float));
    s->positions = malloc(((size_t)s->len * 3 + 1) * sizeof(float));
    s->out = malloc(((size_t)s->len * s->out_dim + 1) * sizeof(float));
    if (!all || !s->positions || !s->out) {
        free(all);
        wan_shard_close(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory");
    }
    wan_token_positions(all, pf, ph, pw);
    memcpy(s->positions, all + (size_t)s->start * 3, (size_t)s->len * 3 * sizeof(float));
    free(all);
    *out = s;
    return CPDIT_OK;
}

static void wan_shard_range(const model_shard *s, long long *start, long long *len)
{
    *start = s->start;
    *len = s->len;
}

/* v (len, patch_dim) in the tokens' (c, k) order; timestep in diffusers' units (0..1000). */
static cpdit_status wan_forward(cpdit_model *m, model_shard *s, int text, const float *x,
                                const model_step *step, float *v, cpdit_error *err)
{
    if (text < 0 || text >= s->n_texts)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, WAN_WHERE, "no prompt %d", text);
    const wan_inputs in = {.batch = 1, .vid_len = s->len, .hidden_states = x,
                           .positions = s->positions, .timestep = &step->timestep,
                           .text_len = s->texts[text]->len,
                           .encoder_hidden_states = s->texts[text]->tokens};
    cpdit_status st = wan_transformer_forward(s->wm->tr, m->be, &s->cp, &in, s->out, err);
    if (!st)
        reorder(v, s->out, (size_t)s->len, s->C, s->K, 1);
    return st;
}

static cpdit_status wan_gather(model_shard *s, const float *x, float *tokens, cpdit_error *err)
{
    const size_t W = (size_t)s->patch_dim;
    if (!s->cp.grid) {
        memcpy(tokens, x, (size_t)s->len * W * sizeof(float));
        return CPDIT_OK;
    }
    const int n = s->layout.nranks;
    size_t *counts = calloc(2 * (size_t)n, sizeof *counts);
    if (!counts)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory");
    size_t *displs = counts + n;
    for (int k = 0; k < n; k++) { /* rank k's tokens are [img_start[k], + img_len[k]) */
        counts[k] = (size_t)s->layout.img_len[k] * W;
        displs[k] = (size_t)s->layout.img_start[k] * W;
    }
    cpdit_status st = cpdit_comm_allgatherv(s->cp.grid->cp, CPDIT_COMM_FLOAT, x,
                                            counts[s->cp.grid->cp_rank], tokens, counts, displs,
                                            err);
    free(counts);
    return st;
}

const model_family wan_family = {
    .name = "wan",
    .transformer_class = WAN_TRANSFORMER_CLASS,
    .decoder_class = WAN_DECODER_CLASS,
    .output = MODEL_OUTPUT_VIDEO,
    .single_file = 0,
    .open = wan_open,
    .close = wan_close,
    .weight_stats = wan_weight_stats,
    .param_count = wan_params,
    .text_weight_stats = wan_text_stats,
    .default_steps = wan_default_steps,
    .guidance_distilled = wan_distilled,
    .geometry = wan_geometry,
    .encode_text = wan_encode_text,
    .text_synthetic = wan_text_synthetic,
    .text_free = wan_text_free,
    .pack = wan_pack,
    .unpack = wan_unpack,
    .schedule_open = wan_schedule,
    .shard_open = wan_shard_open,
    .shard_range = wan_shard_range,
    .forward = wan_forward,
    .gather = wan_gather,
    .shard_close = wan_shard_close,
    .forward_file = NULL, /* bin/cmd_forward_wan.c (cmd_forward.c's component table) */
    .plan_shape = wan_plan_shape_load,
};
