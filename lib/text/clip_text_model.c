/* clip_text_model.c — CLIPTextModel: config, weights, forward (see clip_text_model.h).
 */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text/clip_text_model.h"

/* CLIPTextConfig's defaults (transformers), used for keys config.json leaves out. */
#define CLIP_DEFAULT_VOCAB 49408
#define CLIP_DEFAULT_HIDDEN 512
#define CLIP_DEFAULT_INTERMEDIATE 2048
#define CLIP_DEFAULT_LAYERS 12
#define CLIP_DEFAULT_HEADS 8
#define CLIP_DEFAULT_MAX_POSITIONS 77
#define CLIP_DEFAULT_EOS 49407
#define CLIP_DEFAULT_EPS 1e-5
#define CLIP_DEFAULT_ACT "quick_gelu"
/* Upper bounds that keep every size product inside int and size_t arithmetic. */
#define CLIP_MAX_DIM (1 << 16)
#define CLIP_MAX_VOCAB (1 << 24)
#define CLIP_MAX_LAYERS 1024

#define P_EMB "text_model.embeddings."
#define P_LAYER "text_model.encoder.layers."
#define P_FINAL "text_model.final_layer_norm."

typedef struct clip_linear {
    text_param w, b;
} clip_linear;

typedef struct clip_layer {
    text_param ln1_w, ln1_b, ln2_w, ln2_b;
    clip_linear q, k, v, o, fc1, fc2;
} clip_layer;

struct clip_text_model {
    clip_text_config cfg;
    const cpdit_backend *be;
    const cpdit_attention_kernel *attn; /* the backend's local attention kernel */
    text_weights tw;
    text_param tok_emb, pos_emb;
    text_param final_w, final_b;
    clip_layer *layers;
};

/* ------------------------------------------------------------------ config */

cpdit_status clip_text_config_read(const model_config *file_cfg, clip_text_config *c,
                                   cpdit_error *err)
{
    static const char *const types[] = {"clip_text_model", "clip"};
    model_config sub;
    const model_config *cfg = file_cfg;
    json_t *tc = json_object_get(file_cfg->root, "text_config");
    if (json_is_object(tc)) { /* a whole CLIPModel: its text tower's settings */
        sub.root = tc;
        sub.path = file_cfg->path;
        cfg = &sub;
    }
    cpdit_status st;
    memset(c, 0, sizeof *c);
    if ((st = text_config_check_type(file_cfg, types, 2, err)) ||
        (st = text_config_int(cfg, "vocab_size", CLIP_DEFAULT_VOCAB, 1, CLIP_MAX_VOCAB,
                              &c->vocab_size, err)) ||
        (st = text_config_int(cfg, "hidden_size", CLIP_DEFAULT_HIDDEN, 1, CLIP_MAX_DIM,
                              &c->hidden_size, err)) ||
        (st = text_config_int(cfg, "intermediate_size", CLIP_DEFAULT_INTERMEDIATE, 1,
                              4 * CLIP_MAX_DIM, &c->intermediate_size, err)) ||
        (st = text_config_int(cfg, "num_hidden_layers", CLIP_DEFAULT_LAYERS, 0, CLIP_MAX_LAYERS,
                              &c->num_hidden_layers, err)) ||
        (st = text_config_int(cfg, "num_attention_heads", CLIP_DEFAULT_HEADS, 1, CLIP_MAX_DIM,
                              &c->num_attention_heads, err)) ||
        (st = text_config_int(cfg, "max_position_embeddings", CLIP_DEFAULT_MAX_POSITIONS, 1,
                              CLIP_MAX_DIM, &c->max_position_embeddings, err)) ||
        (st = text_config_int(cfg, "eos_token_id", CLIP_DEFAULT_EOS, 0, CLIP_MAX_VOCAB,
                              &c->eos_token_id, err)) ||
        (st = text_config_eps(cfg, "layer_norm_eps", CLIP_DEFAULT_EPS, &c->layer_norm_eps, err)))
        return st;
    if (c->hidden_size % c->num_attention_heads)
        return model_config_key_error(cfg, "num_attention_heads", err,
                                      "hidden_size %d is not a multiple of %d heads",
                                      c->hidden_size, c->num_attention_heads);
    const char *act = NULL;
    if ((st = model_config_get_string_default(cfg, "hidden_act", CLIP_DEFAULT_ACT, &act, err)))
        return st;
    c->hidden_act = text_act_from_name(act);
    if (c->hidden_act == TEXT_ACT_INVALID)
        return model_config_key_error(cfg, "hidden_act", err,
                                      "\"%s\" is not supported (quick_gelu, gelu, gelu_new, "
                                      "gelu_pytorch_tanh, relu, silu)",
                                      act);
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ weights */

/* A linear layer of encoder layer `layer` (its streaming unit). */
static cpdit_status add_linear(text_weights *tw, clip_linear *l, int layer, const char *prefix,
                               int out, int in, cpdit_error *err)
{
    char name[256];
    cpdit_status st;
    snprintf(name, sizeof name, "%s.weight", prefix);
    if ((st = text_weights_add(tw, &l->w, layer, name, TEXT_PARAM_MATRIX, out, in, err)))
        return st;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return text_weights_add(tw, &l->b, layer, name, TEXT_PARAM_SMALL, out, 0, err);
}

static cpdit_status add_norm(text_weights *tw, text_param *w, text_param *b, int layer,
                             const char *prefix, int dim, cpdit_error *err)
{
    char name[256];
    cpdit_status st;
    snprintf(name, sizeof name, "%sweight", prefix);
    if ((st = text_weights_add(tw, w, layer, name, TEXT_PARAM_SMALL, dim, 0, err)))
        return st;
    snprintf(name, sizeof name, "%sbias", prefix);
    return text_weights_add(tw, b, layer, name, TEXT_PARAM_SMALL, dim, 0, err);
}

static cpdit_status register_weights(clip_text_model *m, cpdit_error *err)
{
    const clip_text_config *c = &m->cfg;
    text_weights *tw = &m->tw;
    const int D = c->hidden_size, I = c->intermediate_size;
    cpdit_status st;
    if ((st = text_weights_add(tw, &m->tok_emb, 0, P_EMB "token_embedding.weight", TEXT_PARAM_ROWS,
                               c->vocab_size, D, err)) ||
        (st = text_weights_add(tw, &m->pos_emb, 0, P_EMB "position_embedding.weight",
                               TEXT_PARAM_ROWS, c->max_position_embeddings, D, err)))
        return st;
    for (int i = 0; i < c->num_hidden_layers; i++) {
        clip_layer *L = &m->layers[i];
        char p[128], q[160];
        snprintf(p, sizeof p, P_LAYER "%d.", i);
        snprintf(q, sizeof q, "%slayer_norm1.", p);
        if ((st = add_norm(tw, &L->ln1_w, &L->ln1_b, i, q, D, err)))
            return st;
        snprintf(q, sizeof q, "%slayer_norm2.", p);
        if ((st = add_norm(tw, &L->ln2_w, &L->ln2_b, i, q, D, err)))
            return st;
        static const char *const proj[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
        clip_linear *lin[4] = {&L->q, &L->k, &L->v, &L->o};
        for (int j = 0; j < 4; j++) {
            snprintf(q, sizeof q, "%sself_attn.%s", p, proj[j]);
            if ((st = add_linear(tw, lin[j], i, q, D, D, err)))
                return st;
        }
        snprintf(q, sizeof q, "%smlp.fc1", p);
        if ((st = add_linear(tw, &L->fc1, i, q, I, D, err)))
            return st;
        snprintf(q, sizeof q, "%smlp.fc2", p);
        if ((st = add_linear(tw, &L->fc2, i, q, D, I, err)))
            return st;
    }
    return add_norm(tw, &m->final_w, &m->final_b, 0, P_FINAL, D, err);
}

/* text_model_parts callbacks: the config and one slot per layer; the weights */
static cpdit_status clip_read_config(void *model, const model_config *cfg, cpdit_error *err)
{
    clip_text_model *m = model;
    cpdit_status st = clip_text_config_read(cfg, &m->cfg, err);
    if (!st && !(m->layers = calloc((size_t)m->cfg.num_hidden_layers + 1, sizeof *m->layers)))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "CLIP text model", "out of memory");
    return st;
}

static cpdit_status clip_register_weights(void *model, cpdit_error *err)
{
    return register_weights(model, err);
}

cpdit_status clip_text_model_load(const char *dir, const text_encoder_options *opt,
                                  clip_text_model **out, cpdit_error *err)
{
    /* buffers, heads and towers of related checkpoints that CLIPTextModel does not use */
    static const char *const ignore[] = {P_EMB "position_ids", "text_projection", "logit_scale",
                                         "vision_model.", "visual_projection"};
    static const text_model_parts parts = {clip_read_config, clip_register_weights, ignore,
                                           (int)(sizeof ignore / sizeof ignore[0])};
    *out = NULL;
    clip_text_model *m = calloc(1, sizeof *m);
    if (!m)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    cpdit_status st = text_model_load(dir, opt, &parts, m, &m->be, &m->attn, &m->tw, err);
    if (st) {
        clip_text_model_free(m);
        return st;
    }
    *out = m;
    return CPDIT_OK;
}

void clip_text_model_free(clip_text_model *m)
{
    if (!m)
        return;
    text_weights_close(&m->tw);
    free(m->layers);
    free(m);
}

const clip_text_config *clip_text_model_config(const clip_text_model *m)
{
    return &m->cfg;
}

size_t clip_text_model_param_count(const clip_text_model *m)
{
    return m->tw.n_params;
}

void clip_text_model_weight_stats(const clip_text_model *m, text_weight_stats *out)
{
    text_weights_stats(&m->tw, out);
}

int clip_text_pool_index(const clip_text_config *cfg, const int32_t *ids, int S)
{
    int best = 0;
    if (cfg->eos_token_id == CLIP_LEGACY_EOS_TOKEN_ID) {
        for (int s = 1; s < S; s++)
            if (ids[s] > ids[best])
                best = s;
        return best;
    }
    for (int s = 0; s < S; s++)
        if (ids[s] == cfg->eos_token_id)
            return s;
    return 0;
}

/* ------------------------------------------------------------------ forward */

typedef struct clip_work {
    cpdit_buf *x;    /* (B*S, D) residual stream */
    cpdit_buf *h;    /* (B*S, D) normed input of a sub-block */
    cpdit_buf *qkv;  /* (B*S, 3D): q | k | v per token */
    cpdit_buf *attn; /* (B*S, D) attention output, heads concatenated */
    cpdit_buf *mlp;  /* (B*S, I) */
    float *host;     /* (B*S, D) host fp32 staging: embeddings in, hidden states out */
    int32_t *pos;    /* (S) position ids (host) */
} clip_work;

/* y (M, N) (+)= x (M, K) W^T + b for a clip_linear (W of the layer in use); activations with
 * row strides ldy, ldx in elements. */
static cpdit_status run_linear(const clip_text_model *m, const clip_linear *l, cpdit_buf *y,
                               int ldy, const cpdit_buf *x, int ldx, int M, int K, int N,
                               int accumulate, cpdit_error *err)
{
    const cpdit_weight *w = text_param_weight(&m->tw, &l->w, err);
    if (!w)
        return CPDIT_ERR_RUNTIME;
    return m->be->linear(y, ldy, x, ldx, w, l->b.f32, M, K, N, accumulate, err);
}

static cpdit_status layer_forward(const clip_text_model *m, const clip_layer *L, clip_work *w,
                                  int B, int S, cpdit_error *err)
{
    const cpdit_backend *be = m->be;
    const clip_text_config *c = &m->cfg;
    const int D = c->hidden_size, I = c->intermediate_size, H = c->num_attention_heads;
    const int Dh = D / H, M = B * S;
    const float scale = 1.0f / sqrtf((float)Dh);
    cpdit_status st;

    be->layer_norm(w->h, w->x, L->ln1_w.f32, L->ln1_b.f32, (size_t)M, D, c->layer_norm_eps);
    /* q, k, v: column blocks 0, D, 2D of the fused (B*S, 3D) buffer */
    const clip_linear *qkv[3] = {&L->q, &L->k, &L->v};
    for (int j = 0; j < 3; j++)
        if ((st = run_linear(m, qkv[j], cpdit_buf_at(be, w->qkv, (ptrdiff_t)j * D), 3 * D, w->h,
                             D, M, D, D, 0, err)))
            return st;
    const cpdit_attention_args aa = {.B = B, .Sq = S, .Skv = S, .H = H, .D = Dh,
                                     .ld_q = 3 * D, .ld_kv = 3 * D, .ld_out = D,
                                     .scale = scale, .causal = 1};
    if ((st = m->attn->forward(w->attn, NULL, w->qkv, cpdit_buf_at(be, w->qkv, D),
                               cpdit_buf_at(be, w->qkv, 2 * (ptrdiff_t)D), &aa, err)))
        return st;
    if ((st = run_linear(m, &L->o, w->x, D, w->attn, D, M, D, D, 1, err)))
        return st;

    be->layer_norm(w->h, w->x, L->ln2_w.f32, L->ln2_b.f32, (size_t)M, D, c->layer_norm_eps);
    if ((st = run_linear(m, &L->fc1, w->mlp, I, w->h, D, M, D, I, 0, err)))
        return st;
    text_act_apply(be, c->hidden_act, w->mlp, w->mlp, (size_t)M * I);
    return run_linear(m, &L->fc2, w->x, D, w->mlp, I, M, I, D, 1, err);
}

static void work_free(const cpdit_backend *be, clip_work *w)
{
    be->free(w->x);
    be->free(w->h);
    be->free(w->qkv);
    be->free(w->attn);
    be->free(w->mlp);
    free(w->host);
    free(w->pos);
}

cpdit_status clip_text_model_forward(const clip_text_model *m, const int32_t *ids, int B, int S,
                                     float *last_hidden, float *pooled, cpdit_error *err)
{
    const clip_text_config *c = &m->cfg;
    const char *where = m->tw.where;
    if (B < 1 || S < 1 || S > c->max_position_embeddings)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "input_ids of shape (%d, %d): need B >= 1 and 1 <= S <= %d "
                               "(max_position_embeddings)",
                               B, S, c->max_position_embeddings);
    for (size_t i = 0; i < (size_t)B * S; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "token id %d at (%zu, %zu) is outside the vocabulary "
                                   "[0, %d)",
                                   (int)ids[i], i / (size_t)S, i % (size_t)S, c->vocab_size);
    const size_t D = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t M = (size_t)B * (size_t)S;
    const cpdit_backend *be = m->be;
    clip_work w = {0};
    w.x = cpdit_act_alloc(be, M * D);
    w.h = cpdit_act_alloc(be, M * D);
    w.qkv = cpdit_act_alloc(be, M * 3 * D);
    w.attn = cpdit_act_alloc(be, M * D);
    w.mlp = cpdit_act_alloc(be, M * I);
    w.host = malloc(M * D * sizeof(float));
    w.pos = malloc((size_t)S * sizeof(int32_t));
    if (!w.x || !w.h || !w.qkv || !w.attn || !w.mlp || !w.host || !w.pos) {
        work_free(be, &w);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    }

    /* embeddings: token rows + position rows 0..S-1 (gathered and converted to fp32 on the
     * host, then stored as activations) */
    for (int s = 0; s < S; s++)
        w.pos[s] = s;
    cpdit_status st = text_param_gather_rows(&m->tok_emb, ids, M, w.host, err);
    if (!st)
        be->upload_act(w.x, w.host, M * D);
    if (!st)
        st = text_param_gather_rows(&m->pos_emb, w.pos, (size_t)S, w.host, err);
    if (!st)
        be->upload_act(w.h, w.host, (size_t)S * D);
    for (int b = 0; b < B && !st; b++) {
        cpdit_buf *xb = cpdit_buf_at(be, w.x, (ptrdiff_t)((size_t)b * S * D));
        be->add(xb, xb, w.h, (size_t)S * D);
    }

    /* streaming: layer i + 1 is made while layer i computes (text_weights.h) */
    text_weights_begin(&m->tw);
    for (int i = 0; i < c->num_hidden_layers && !st; i++) {
        st = text_weights_use_layer(&m->tw, i, err);
        if (!st)
            st = layer_forward(m, &m->layers[i], &w, B, S, err);
    }
    text_weights_end(&m->tw);

    if (!st) {
        be->layer_norm(w.h, w.x, m->final_w.f32, m->final_b.f32, M, (int)D, c->layer_norm_eps);
        be->download_act(w.host, w.h, M * D);
        st = be->sync(err); /* a device op that failed since the last status says so here */
        if (last_hidden)
            memcpy(last_hidden, w.host, M * D * sizeof(float));
        for (int b = 0; b < B && pooled; b++) {
            const int s = clip_text_pool_index(c, ids + (size_t)b * S, S);
            memcpy(pooled + (size_t)b * D, w.host + ((size_t)b * S + (size_t)s) * D,
                   D * sizeof(float));
        }
    }
    work_free(be, &w);
    return st;
}
