/* t5_encoder.c — T5EncoderModel and UMT5EncoderModel: config, weights, forward (see
 * t5_encoder.h).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text/t5_encoder.h"

#define T5_TYPE "t5"
#define UMT5_TYPE "umt5"

/* The defaults of T5Config and UMT5Config (transformers), used for keys config.json leaves
 * out; the bucket count, max distance and epsilon are the same for both. */
typedef struct t5_defaults {
    int vocab, d_model, d_kv, d_ff, layers, heads;
    const char *ff_proj;
} t5_defaults;
static const t5_defaults T5_DEFAULTS = {32128, 512, 64, 2048, 6, 8, "relu"};
static const t5_defaults UMT5_DEFAULTS = {250112, 512, 64, 1024, 8, 6, "gated-gelu"};
#define T5_DEFAULT_BUCKETS 32
#define T5_DEFAULT_MAX_DISTANCE 128
#define T5_DEFAULT_EPS 1e-6
#define T5_GATED_PREFIX "gated-"
/* Bounds that keep size products inside int / size_t arithmetic. */
#define T5_MAX_DIM (1 << 17)
#define T5_MAX_VOCAB (1 << 24)
#define T5_MAX_LAYERS 1024
#define T5_MIN_BUCKETS 4 /* bidirectional halves with at least one exact bucket each */
#define T5_NO_SCALE 1.0f /* T5 does not scale q·k */

#define P_BLOCK "encoder.block."

typedef struct t5_block {
    text_param rel_bias; /* (num_buckets, H): block 0's (T5), every block's (UMT5) */
    text_param ln_attn, q, k, v, o;
    text_param ln_ff, wi0, wi1, wo; /* wi1 unused unless gated; wi0 is "wi" when not gated */
} t5_block;

struct t5_encoder {
    t5_encoder_config cfg;
    const cpdit_backend *be;
    const cpdit_attention_kernel *attn; /* the backend's local attention kernel */
    text_weights tw;
    text_param embed, final_ln;
    t5_block *blocks;
};

/* ------------------------------------------------------------------ config */

static cpdit_status read_ff_proj(const model_config *cfg, const char *def_proj,
                                 t5_encoder_config *c, cpdit_error *err)
{
    const char *proj = NULL, *act_name;
    cpdit_status st =
        model_config_get_string_default(cfg, "feed_forward_proj", def_proj, &proj, err);
    if (st)
        return st;
    c->is_gated_act = !strncmp(proj, T5_GATED_PREFIX, strlen(T5_GATED_PREFIX));
    act_name = c->is_gated_act ? proj + strlen(T5_GATED_PREFIX) : proj;
    if (strchr(act_name, '-'))
        return model_config_key_error(cfg, "feed_forward_proj", err,
                                      "\"%s\" is not \"ACT\" or \"gated-ACT\"", proj);
    if (!strcmp(proj, "gated-gelu")) /* T5Config's special case: T5 v1.1 uses gelu_new */
        act_name = "gelu_new";
    c->dense_act = text_act_from_name(act_name);
    const char *override = NULL;
    if ((st = model_config_get_string_default(cfg, "dense_act_fn", NULL, &override, err)))
        return st;
    if (override) {
        c->dense_act = text_act_from_name(override);
        if (c->dense_act == TEXT_ACT_INVALID)
            return model_config_key_error(cfg, "dense_act_fn", err,
                                          "\"%s\" is not supported (relu, gelu, gelu_new, "
                                          "gelu_pytorch_tanh, quick_gelu, silu)",
                                          override);
    }
    if (c->dense_act == TEXT_ACT_INVALID)
        return model_config_key_error(cfg, "feed_forward_proj", err,
                                      "activation \"%s\" is not supported (relu, gelu, "
                                      "gelu_new, gelu_pytorch_tanh, quick_gelu, silu)",
                                      act_name);
    return CPDIT_OK;
}

cpdit_status t5_encoder_config_read(const model_config *cfg, t5_encoder_config *c,
                                    cpdit_error *err)
{
    static const char *const types[] = {T5_TYPE, UMT5_TYPE};
    const char *type = NULL;
    cpdit_status st;
    memset(c, 0, sizeof *c);
    if ((st = text_config_check_type(cfg, types, 2, err)) ||
        (st = model_config_get_string_default(cfg, "model_type", T5_TYPE, &type, err)))
        return st;
    c->per_layer_bias = !strcmp(type, UMT5_TYPE);
    const t5_defaults *d = c->per_layer_bias ? &UMT5_DEFAULTS : &T5_DEFAULTS;
    if ((st = text_config_int(cfg, "vocab_size", d->vocab, 1, T5_MAX_VOCAB, &c->vocab_size,
                              err)) ||
        (st = text_config_int(cfg, "d_model", d->d_model, 1, T5_MAX_DIM, &c->d_model, err)) ||
        (st = text_config_int(cfg, "d_kv", d->d_kv, 1, T5_MAX_DIM, &c->d_kv, err)) ||
        (st = text_config_int(cfg, "d_ff", d->d_ff, 1, T5_MAX_DIM, &c->d_ff, err)) ||
        (st = text_config_int(cfg, "num_layers", d->layers, 0, T5_MAX_LAYERS, &c->num_layers,
                              err)) ||
        (st = text_config_int(cfg, "num_heads", d->heads, 1, T5_MAX_DIM, &c->num_heads, err)) ||
        (st = text_config_int(cfg, "relative_attention_num_buckets", T5_DEFAULT_BUCKETS,
                              T5_MIN_BUCKETS, T5_MAX_DIM, &c->relative_attention_num_buckets,
                              err)) ||
        (st = text_config_int(cfg, "relative_attention_max_distance", T5_DEFAULT_MAX_DISTANCE, 1,
                              T5_MAX_DIM, &c->relative_attention_max_distance, err)) ||
        (st = text_config_eps(cfg, "layer_norm_epsilon", T5_DEFAULT_EPS, &c->layer_norm_epsilon,
                              err)) ||
        (st = read_ff_proj(cfg, d->ff_proj, c, err)))
        return st;
    if ((long)c->num_heads * c->d_kv > T5_MAX_DIM)
        return model_config_key_error(cfg, "num_heads", err, "num_heads x d_kv = %ld is too big",
                                      (long)c->num_heads * c->d_kv);
    const int max_exact = c->relative_attention_num_buckets / 2 / 2;
    if (c->relative_attention_max_distance <= max_exact)
        return model_config_key_error(cfg, "relative_attention_max_distance", err,
                                      "%d must exceed the %d exact buckets of %d buckets",
                                      c->relative_attention_max_distance, max_exact,
                                      c->relative_attention_num_buckets);
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ weights */

/* Register encoder.block.<i>.layer.<suffix>.weight. */
static cpdit_status add_block(text_weights *tw, text_param *p, int i, const char *suffix,
                              text_param_kind kind, int64_t rows, int64_t cols, cpdit_error *err)
{
    char name[192];
    snprintf(name, sizeof name, P_BLOCK "%d.layer.%s.weight", i, suffix);
    return text_weights_add(tw, p, i, name, kind, rows, cols, err);
}

static cpdit_status register_weights(t5_encoder *m, cpdit_error *err)
{
    const t5_encoder_config *c = &m->cfg;
    text_weights *tw = &m->tw;
    const int D = c->d_model, inner = c->num_heads * c->d_kv, F = c->d_ff;
    static const char *const embed_names[] = {"encoder.embed_tokens.weight", "shared.weight"};
    const safetensors_tensor *e = text_weights_find_any(tw, embed_names, 2);
    cpdit_status st;
    if ((st = text_weights_add(tw, &m->embed, 0, e ? e->name : "shared.weight", TEXT_PARAM_ROWS,
                               c->vocab_size, D, err)))
        return st;
    for (int i = 0; i < c->num_layers; i++) {
        t5_block *b = &m->blocks[i];
        const int gated = c->is_gated_act;
        if ((st = add_block(tw, &b->ln_attn, i, "0.layer_norm", TEXT_PARAM_SMALL, D, 0, err)) ||
            (st = add_block(tw, &b->q, i, "0.SelfAttention.q", TEXT_PARAM_MATRIX, inner, D,
                            err)) ||
            (st = add_block(tw, &b->k, i, "0.SelfAttention.k", TEXT_PARAM_MATRIX, inner, D,
                            err)) ||
            (st = add_block(tw, &b->v, i, "0.SelfAttention.v", TEXT_PARAM_MATRIX, inner, D,
                            err)) ||
            (st = add_block(tw, &b->o, i, "0.SelfAttention.o", TEXT_PARAM_MATRIX, D, inner,
                            err)) ||
            (st = add_block(tw, &b->ln_ff, i, "1.layer_norm", TEXT_PARAM_SMALL, D, 0, err)) ||
            (st = add_block(tw, &b->wi0, i,
                            gated ? "1.DenseReluDense.wi_0" : "1.DenseReluDense.wi",
                            TEXT_PARAM_MATRIX, F, D, err)) ||
            (gated && (st = add_block(tw, &b->wi1, i, "1.DenseReluDense.wi_1",
                                      TEXT_PARAM_MATRIX, F, D, err))) ||
            (st = add_block(tw, &b->wo, i, "1.DenseReluDense.wo", TEXT_PARAM_MATRIX, D, F,
                            err)))
            return st;
    }
    /* T5: block 0's table serves every block; UMT5: each block has its own */
    for (int i = 0; i < (c->per_layer_bias ? c->num_layers : c->num_layers > 0); i++)
        if ((st = add_block(tw, &m->blocks[i].rel_bias, i,
                            "0.SelfAttention.relative_attention_bias", TEXT_PARAM_HOST,
                            c->relative_attention_num_buckets, c->num_heads, err)))
            return st;
    return text_weights_add(tw, &m->final_ln, 0, "encoder.final_layer_norm.weight",
                            TEXT_PARAM_SMALL, D, 0, err);
}

/* text_model_parts callbacks: the config and one slot per block; the weights */
static cpdit_status t5_read_config(void *model, const model_config *cfg, cpdit_error *err)
{
    t5_encoder *m = model;
    cpdit_status st = t5_encoder_config_read(cfg, &m->cfg, err);
    if (!st && !(m->blocks = calloc((size_t)m->cfg.num_layers + 1, sizeof *m->blocks)))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "T5 encoder", "out of memory");
    return st;
}

static cpdit_status t5_register_weights(void *model, cpdit_error *err)
{
    return register_weights(model, err);
}

cpdit_status t5_encoder_load(const char *dir, const text_encoder_options *opt, t5_encoder **out,
                             cpdit_error *err)
{
    /* the other half of a T5ForConditionalGeneration checkpoint, and the tied embedding */
    static const char *const ignore[] = {"decoder.", "lm_head.", "shared.weight",
                                         "encoder.embed_tokens.weight"};
    static const text_model_parts parts = {t5_read_config, t5_register_weights, ignore,
                                           (int)(sizeof ignore / sizeof ignore[0])};
    *out = NULL;
    t5_encoder *m = calloc(1, sizeof *m);
    if (!m)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    cpdit_status st = text_model_load(dir, opt, &parts, m, &m->be, &m->attn, &m->tw, err);
    if (st) {
        t5_encoder_free(m);
        return st;
    }
    *out = m;
    return CPDIT_OK;
}

void t5_encoder_free(t5_encoder *m)
{
    if (!m)
        return;
    text_weights_close(&m->tw);
    free(m->blocks);
    free(m);
}

const t5_encoder_config *t5_encoder_get_config(const t5_encoder *m)
{
    return &m->cfg;
}

size_t t5_encoder_param_count(const t5_encoder *m)
{
    return m->tw.n_params;
}

int t5_encoder_streaming(const t5_encoder *m)
{
    return m->tw.streaming;
}

void t5_encoder_weight_stats(const t5_encoder *m, text_weight_stats *out)
{
    text_weights_stats(&m->tw, out);
}

/* ------------------------------------------------------------------ forward */

typedef struct t5_work {
    cpdit_buf *x;    /* (B*S, D) residual stream */
    cpdit_buf *h;    /* (B*S, D) normed input of a sub-block */
    cpdit_buf *qkv;  /* (B*S, 3 inner): q | k | v per token */
    cpdit_buf *attn; /* (B*S, inner) */
    cpdit_buf *ff0;  /* (B*S, F) */
    cpdit_buf *ff1;  /* (B*S, F), gated only */
    float *bias;     /* (H, S, S) relative position bias (+ mask): fp32 in the backend's memory */
    float *host;     /* host fp32 staging: embeddings, the bias */
    /* the attention mask: items [run_start[r], run_start[r + 1]) have equal mask rows and
     * share one attention call (one run of all B items without a mask) */
    const int32_t *mask; /* (B, S) or NULL */
    float *key_add;      /* (S) host: the extended mask of the run being built */
    int *run_start;      /* n_runs + 1 */
    int n_runs;
    int bias_table, bias_run; /* what `bias` holds: (block of the table, run); -1: nothing */
} t5_work;

/* y (M, N) (+)= x (M, K) W^T (W of the layer in use); activations with row strides ldy, ldx
 * in elements. */
static cpdit_status run_linear(const t5_encoder *m, const text_param *w, cpdit_buf *y, int ldy,
                               const cpdit_buf *x, int ldx, int M, int K, int N, int accumulate,
                               cpdit_error *err)
{
    const cpdit_weight *wt = text_param_weight(&m->tw, w, err);
    if (!wt)
        return CPDIT_ERR_RUNTIME;
    return m->be->linear(y, ldy, x, ldx, wt, NULL, M, K, N, accumulate, err);
}

/* Make w->bias (H, S, S) the bias of block `table`'s table for run r (with its mask), unless it
 * already is: built on the host (in place for a host-memory backend), else uploaded (the upload
 * is ordered after the attention calls queued before it). */
static void prepare_bias(const t5_encoder *m, t5_work *w, int table, int r, int S)
{
    const t5_encoder_config *c = &m->cfg;
    if (w->bias_table == table && w->bias_run == r)
        return;
    const size_t H = (size_t)c->num_heads;
    /* a host-memory backend's buffer is written in place */
    float *dst = m->be->host_memory ? w->bias : w->host;
    if (w->mask)
        t5_mask_to_bias(w->key_add, w->mask + (size_t)w->run_start[r] * S, S);
    t5_position_bias_masked(dst, m->blocks[table].rel_bias.f32,
                            c->relative_attention_num_buckets,
                            c->relative_attention_max_distance, (int)H, S, S,
                            w->mask ? w->key_add : NULL);
    if (dst != w->bias)
        m->be->upload(w->bias, w->host, H * S * S * sizeof(float));
    w->bias_table = table;
    w->bias_run = r;
}

/* Self-attention of block `layer` over w->qkv into w->attn, one call per run of items with
 * equal mask rows. */
static cpdit_status attention_runs(const t5_encoder *m, int layer, t5_work *w, int S,
                                   cpdit_error *err)
{
    const cpdit_backend *be = m->be;
    const t5_encoder_config *c = &m->cfg;
    const int H = c->num_heads, Dh = c->d_kv, inner = H * Dh;
    const int table = c->per_layer_bias ? layer : 0;
    for (int r = 0; r < w->n_runs; r++) {
        const int b0 = w->run_start[r];
        prepare_bias(m, w, table, r, S);
        const cpdit_attention_args aa = {.B = w->run_start[r + 1] - b0, .Sq = S, .Skv = S,
                                         .H = H, .D = Dh, .ld_q = 3 * inner,
                                         .ld_kv = 3 * inner, .ld_out = inner,
                                         .scale = T5_NO_SCALE, .bias = w->bias};
        const ptrdiff_t tok = (ptrdiff_t)b0 * S;
        const cpdit_buf *q = cpdit_buf_at(be, w->qkv, tok * 3 * inner);
        cpdit_status st = m->attn->forward(cpdit_buf_at(be, w->attn, tok * inner), NULL, q,
                                           cpdit_buf_at(be, q, inner),
                                           cpdit_buf_at(be, q, 2 * (ptrdiff_t)inner), &aa, err);
        if (st)
            return st;
    }
    return CPDIT_OK;
}

static cpdit_status block_forward(const t5_encoder *m, int layer, t5_work *w, int B, int S,
                                  cpdit_error *err)
{
    const cpdit_backend *be = m->be;
    const t5_encoder_config *c = &m->cfg;
    const t5_block *b = &m->blocks[layer];
    const int D = c->d_model, H = c->num_heads, Dh = c->d_kv, inner = H * Dh, F = c->d_ff;
    const int M = B * S;
    const float eps = c->layer_norm_epsilon;
    cpdit_status st;

    be->rms_norm(w->h, w->x, b->ln_attn.f32, (size_t)M, D, eps);
    /* q, k, v: column blocks 0, inner, 2 inner of the fused (B*S, 3 inner) buffer */
    const text_param *qkv[3] = {&b->q, &b->k, &b->v};
    for (int j = 0; j < 3; j++)
        if ((st = run_linear(m, qkv[j], cpdit_buf_at(be, w->qkv, (ptrdiff_t)j * inner),
                             3 * inner, w->h, D, M, D, inner, 0, err)))
            return st;
    if ((st = attention_runs(m, layer, w, S, err)))
        return st;
    if ((st = run_linear(m, &b->o, w->x, D, w->attn, inner, M, inner, D, 1, err)))
        return st;

    be->rms_norm(w->h, w->x, b->ln_ff.f32, (size_t)M, D, eps);
    if ((st = run_linear(m, &b->wi0, w->ff0, F, w->h, D, M, D, F, 0, err)))
        return st;
    text_act_apply(be, c->dense_act, w->ff0, w->ff0, (size_t)M * F);
    if (c->is_gated_act) {
        if ((st = run_linear(m, &b->wi1, w->ff1, F, w->h, D, M, D, F, 0, err)))
            return st;
        be->mul(w->ff0, w->ff0, w->ff1, (size_t)M * F);
    }
    return run_linear(m, &b->wo, w->x, D, w->ff0, F, M, F, D, 1, err);
}

static void work_free(const cpdit_backend *be, t5_work *w)
{
    be->free(w->x);
    be->free(w->h);
    be->free(w->qkv);
    be->free(w->attn);
    be->free(w->ff0);
    be->free(w->ff1);
    be->free(w->bias);
    free(w->host);
    free(w->key_add);
    free(w->run_start);
}

/* ids in the vocabulary, mask values 0 / 1, sizes in range. */
static cpdit_status check_inputs(const t5_encoder *m, const int32_t *ids, const int32_t *mask,
                                 int B, int S, cpdit_error *err)
{
    const char *where = m->tw.where;
    /* the (H, S, S) bias and (S, S) scores must stay addressable */
    if (B < 1 || S < 1 || (size_t)S > (size_t)T5_MAX_DIM)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "input_ids of shape (%d, %d): need B >= 1 and 1 <= S <= %d", B,
                               S, T5_MAX_DIM);
    for (size_t i = 0; i < (size_t)B * S; i++) {
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "token id %d at (%zu, %zu) is outside the vocabulary "
                                   "[0, %d)",
                                   (int)ids[i], i / (size_t)S, i % (size_t)S,
                                   m->cfg.vocab_size);
        if (mask && mask[i] != 0 && mask[i] != 1)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "attention_mask value %d at (%zu, %zu): expected 0 or 1",
                                   (int)mask[i], i / (size_t)S, i % (size_t)S);
    }
    return CPDIT_OK;
}

/* Group consecutive items with equal mask rows: w->run_start, w->n_runs. */
static void make_runs(t5_work *w, int B, int S)
{
    w->n_runs = 0;
    w->run_start[w->n_runs++] = 0;
    for (int b = 1; b < B; b++)
        if (w->mask && memcmp(w->mask + (size_t)b * S, w->mask + (size_t)(b - 1) * S,
                              (size_t)S * sizeof *w->mask))
            w->run_start[w->n_runs++] = b;
    w->run_start[w->n_runs] = B;
}

cpdit_status t5_encoder_forward(const t5_encoder *m, const int32_t *ids, int B, int S,
                                float *last_hidden, cpdit_error *err)
{
    return t5_encoder_forward_masked(m, ids, NULL, B, S, last_hidden, err);
}

cpdit_status t5_encoder_forward_masked(const t5_encoder *m, const int32_t *ids,
                                       const int32_t *mask, int B, int S, float *last_hidden,
                                       cpdit_error *err)
{
    const t5_encoder_config *c = &m->cfg;
    cpdit_status st = check_inputs(m, ids, mask, B, S, err);
    if (st)
        return st;
    const size_t D = (size_t)c->d_model, inner = (size_t)c->num_heads * c->d_kv;
    const size_t F = (size_t)c->d_ff, M = (size_t)B * S, H = (size_t)c->num_heads;
    const cpdit_backend *be = m->be;
    const size_t host_floats = M * D > H * S * S ? M * D : H * S * S;
    t5_work w = {0};
    w.x = cpdit_act_alloc(be, M * D);
    w.h = cpdit_act_alloc(be, M * D);
    w.qkv = cpdit_act_alloc(be, M * 3 * inner);
    w.attn = cpdit_act_alloc(be, M * inner);
    w.ff0 = cpdit_act_alloc(be, M * F);
    if (c->is_gated_act)
        w.ff1 = cpdit_act_alloc(be, M * F);
    w.bias = be->alloc(H * S * S * sizeof(float));
    w.host = malloc(host_floats * sizeof(float));
    w.key_add = malloc((size_t)S * sizeof(float));
    w.run_start = malloc(((size_t)B + 1) * sizeof *w.run_start);
    if (!w.x || !w.h || !w.qkv || !w.attn || !w.ff0 || (c->is_gated_act && !w.ff1) ||
        !w.bias || !w.host || !w.key_add || !w.run_start) {
        work_free(be, &w);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, m->tw.where, "out of memory");
    }
    w.mask = mask;
    w.bias_table = w.bias_run = -1;
    make_runs(&w, B, S);

    /* embedding rows (stored as activations) are gathered on the host, then uploaded; the
     * position bias (fp32) is built at its first use (T5 without a mask: once) */
    st = text_param_gather_rows(&m->embed, ids, M, w.host, err);
    if (!st)
        be->upload_act(w.x, w.host, M * D);
    /* streaming: layer i + 1 is made while layer i computes (text_weights.h) */
    text_weights_begin(&m->tw);
    for (int i = 0; i < c->num_layers && !st; i++) {
        st = text_weights_use_layer(&m->tw, i, err);
        if (!st)
            st = block_forward(m, i, &w, B, S, err);
    }
    text_weights_end(&m->tw);
    if (!st) {
        be->rms_norm(w.h, w.x, m->final_ln.f32, M, (int)D, c->layer_norm_epsilon);
        be->download_act(last_hidden, w.h, M * D);
        st = be->sync(err); /* a device op that failed since the last status says so here */
    }
    work_free(be, &w);
    return st;
}
