/* builtin_weights.c — the parameter tables of a built-in model (diffusers' / transformers'
 * state-dict names and shapes of FluxTransformer2DModel, AutoencoderKL, CLIPTextModel and
 * T5EncoderModel) and their generated values, written as safetensors files.
 *
 * Values: element i of tensor NAME is a function of (seed, NAME, i) alone — a splitmix64
 * hash of the three mapped to a uniform value in (-1, 1) — so a tensor does not depend on
 * which tensors come before it, and the files are the same bytes on every machine (integer
 * arithmetic, then exact float scaling). Scales keep activations near unit size:
 *   weights of linears and convolutions: uniform with std 1/sqrt(fan_in) (fan_in = all
 *     dimensions but the first), times a per-tensor gain (T5's q also 1/sqrt(d_kv), since
 *     T5 does not scale its attention logits);
 *   biases: std BIAS_STD; norm weights: 1 + NORM_JITTER·u (so a swapped or missing norm
 *     weight is noticed by a test, which all-ones weights would hide);
 *   embedding tables: a stated std.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off") /* no fused multiply-add: same bits on every CPU */
#endif
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/builtin/builtin_internal.h"
#include "lib/io/component_config.h"
#include "lib/models/flux/flux_transformer.h"
#include "lib/io/safetensors.h"
#include "lib/vae/vae_decoder.h"

#define WT_NAME_MAX 128
#define WT_MAX_DIMS 4
#define INITIAL_CAP 64

#define BIAS_STD 0.02f         /* std of every bias */
#define NORM_JITTER 0.1f       /* norm weights are 1 ± this */
#define SQRT3 1.7320508075688772f /* a uniform on (-a, a) has std a / sqrt(3) */
#define CLIP_EMBED_STD 0.5f    /* token and position tables of CLIP (summed: std ~0.7) */
#define T5_EMBED_STD 1.0f      /* T5's shared table (T5 does not scale its embeddings) */
#define T5_REL_BIAS_STD 0.5f   /* relative attention bias added to the logits */

#define SPLITMIX_GAMMA 0x9e3779b97f4a7c15ull
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
#define UNIFORM_BITS 24        /* bits of each uniform: exact in a float */

typedef enum init_kind {
    INIT_LINEAR = 0, /* std gain / sqrt(fan_in) */
    INIT_BIAS,       /* std BIAS_STD */
    INIT_NORM,       /* 1 + NORM_JITTER u */
    INIT_EMBED       /* std gain */
} init_kind;

typedef struct wt_entry {
    char name[WT_NAME_MAX];
    int ndim;
    int64_t shape[WT_MAX_DIMS];
    size_t count;
    init_kind kind;
    float gain;
} wt_entry;

typedef struct wt_list {
    wt_entry *t;
    size_t n, cap;
    int oom;
} wt_list;

/* ------------------------------------------------------------------ the generator */

static uint64_t splitmix64_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_key(uint64_t seed, const char *name)
{
    uint64_t h = FNV_OFFSET;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * FNV_PRIME;
    return splitmix64_mix(h ^ splitmix64_mix(seed));
}

/* Element i of the stream `key`: uniform in (-1, 1), symmetric, 24-bit resolution. */
static float uniform_at(uint64_t key, size_t i)
{
    const uint64_t z = splitmix64_mix(key + ((uint64_t)i + 1) * SPLITMIX_GAMMA);
    const int32_t r = (int32_t)(z >> (64 - UNIFORM_BITS));
    const float half = (float)(1 << (UNIFORM_BITS - 1));
    return ((float)(r - (1 << (UNIFORM_BITS - 1))) + 0.5f) / half;
}

/* data[0..e->count) for entry e (see the top of the file). */
static void fill(const wt_entry *e, uint64_t seed, float *data)
{
    const uint64_t key = name_key(seed, e->name);
    float amp = 0;
    switch (e->kind) {
    case INIT_LINEAR: {
        const size_t fan_in = e->shape[0] ? e->count / (size_t)e->shape[0] : 1;
        amp = e->gain * SQRT3 / sqrtf((float)fan_in);
        break;
    }
    case INIT_BIAS:
        amp = BIAS_STD * SQRT3;
        break;
    case INIT_NORM:
        amp = NORM_JITTER;
        break;
    case INIT_EMBED:
        amp = e->gain * SQRT3;
        break;
    }
    const float base = e->kind == INIT_NORM ? 1.0f : 0.0f;
    for (size_t i = 0; i < e->count; i++)
        data[i] = base + amp * uniform_at(key, i);
}

/* ------------------------------------------------------------------ tables */

static void add(wt_list *l, init_kind kind, float gain, int ndim, const int64_t *shape,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void add(wt_list *l, init_kind kind, float gain, int ndim, const int64_t *shape,
                const char *fmt, ...)
{
    if (l->oom)
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : INITIAL_CAP;
        wt_entry *t = realloc(l->t, cap * sizeof *t);
        if (!t) {
            l->oom = 1;
            return;
        }
        l->t = t;
        l->cap = cap;
    }
    wt_entry *e = &l->t[l->n++];
    memset(e, 0, sizeof *e);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    e->kind = kind;
    e->gain = gain;
    e->ndim = ndim;
    e->count = 1;
    for (int i = 0; i < ndim; i++) {
        e->shape[i] = shape[i];
        e->count *= (size_t)shape[i];
    }
}

/* prefix.weight (out, in) and, with bias, prefix.bias (out). */
static void add_linear(wt_list *l, const char *prefix, int out, int in, int bias, float gain)
{
    const int64_t w[2] = {out, in}, b[1] = {out};
    add(l, INIT_LINEAR, gain, 2, w, "%s.weight", prefix);
    if (bias)
        add(l, INIT_BIAS, 0, 1, b, "%s.bias", prefix);
}

/* prefix.weight (n) and, with bias, prefix.bias (n): a LayerNorm / GroupNorm / RMSNorm. */
static void add_norm(wt_list *l, const char *prefix, int n, int bias)
{
    const int64_t s[1] = {n};
    add(l, INIT_NORM, 0, 1, s, "%s.weight", prefix);
    if (bias)
        add(l, INIT_BIAS, 0, 1, s, "%s.bias", prefix);
}

static void add_conv(wt_list *l, const char *prefix, int cout, int cin, int k)
{
    const int64_t w[4] = {cout, cin, k, k}, b[1] = {cout};
    add(l, INIT_LINEAR, 1, 4, w, "%s.weight", prefix);
    add(l, INIT_BIAS, 0, 1, b, "%s.bias", prefix);
}

#define P(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)

/* FluxTransformer2DModel (diffusers names; shapes as lib/models/flux/flux_weights.c binds them). */
static void transformer_table(wt_list *l, const builtin_sizes *s)
{
    const int E = s->heads * s->head_dim, D = s->head_dim, F = FLUX_MLP_RATIO * E;
    const int T = FLUX_TIMESTEP_CHANNELS;
    char n[WT_NAME_MAX];
    add_linear(l, "time_text_embed.timestep_embedder.linear_1", E, T, 1, 1);
    add_linear(l, "time_text_embed.timestep_embedder.linear_2", E, E, 1, 1);
    add_linear(l, "time_text_embed.guidance_embedder.linear_1", E, T, 1, 1);
    add_linear(l, "time_text_embed.guidance_embedder.linear_2", E, E, 1, 1);
    add_linear(l, "time_text_embed.text_embedder.linear_1", E, s->pooled_projection_dim, 1, 1);
    add_linear(l, "time_text_embed.text_embedder.linear_2", E, E, 1, 1);
    add_linear(l, "context_embedder", E, s->joint_attention_dim, 1, 1);
    add_linear(l, "x_embedder", E, s->in_channels, 1, 1);
    for (int i = 0; i < s->num_layers; i++) {
#define B(x) P(n, "transformer_blocks.%d.%s", i, x)
        add_linear(l, B("norm1.linear"), 6 * E, E, 1, 1);
        add_linear(l, B("norm1_context.linear"), 6 * E, E, 1, 1);
        add_linear(l, B("attn.to_q"), E, E, 1, 1);
        add_linear(l, B("attn.to_k"), E, E, 1, 1);
        add_linear(l, B("attn.to_v"), E, E, 1, 1);
        add_linear(l, B("attn.add_q_proj"), E, E, 1, 1);
        add_linear(l, B("attn.add_k_proj"), E, E, 1, 1);
        add_linear(l, B("attn.add_v_proj"), E, E, 1, 1);
        add_norm(l, B("attn.norm_q"), D, 0);
        add_norm(l, B("attn.norm_k"), D, 0);
        add_norm(l, B("attn.norm_added_q"), D, 0);
        add_norm(l, B("attn.norm_added_k"), D, 0);
        add_linear(l, B("attn.to_out.0"), E, E, 1, 1);
        add_linear(l, B("attn.to_add_out"), E, E, 1, 1);
        add_linear(l, B("ff.net.0.proj"), F, E, 1, 1);
        add_linear(l, B("ff.net.2"), E, F, 1, 1);
        add_linear(l, B("ff_context.net.0.proj"), F, E, 1, 1);
        add_linear(l, B("ff_context.net.2"), E, F, 1, 1);
#undef B
    }
    for (int i = 0; i < s->num_single_layers; i++) {
#define B(x) P(n, "single_transformer_blocks.%d.%s", i, x)
        add_linear(l, B("norm.linear"), 3 * E, E, 1, 1);
        add_linear(l, B("attn.to_q"), E, E, 1, 1);
        add_linear(l, B("attn.to_k"), E, E, 1, 1);
        add_linear(l, B("attn.to_v"), E, E, 1, 1);
        add_norm(l, B("attn.norm_q"), D, 0);
        add_norm(l, B("attn.norm_k"), D, 0);
        add_linear(l, B("proj_mlp"), F, E, 1, 1);
        add_linear(l, B("proj_out"), E, E + F, 1, 1);
#undef B
    }
    add_linear(l, "norm_out.linear", 2 * E, E, 1, 1);
    add_linear(l, "proj_out", s->in_channels, E, 1, 1); /* patch_size 1, out = in channels */
}

/* diffusers' ResnetBlock2D without time embedding. */
static void resnet_table(wt_list *l, const char *prefix, int cin, int cout)
{
    char n[WT_NAME_MAX];
    add_norm(l, P(n, "%s.norm1", prefix), cin, 1);
    add_conv(l, P(n, "%s.conv1", prefix), cout, cin, 3);
    add_norm(l, P(n, "%s.norm2", prefix), cout, 1);
    add_conv(l, P(n, "%s.conv2", prefix), cout, cout, 3);
    if (cin != cout)
        add_conv(l, P(n, "%s.conv_shortcut", prefix), cout, cin, 1);
}

/* AutoencoderKL's Encoder (DownEncoderBlock2D × n, mid block with attention, double_z). */
static void vae_encoder_table(wt_list *l, const builtin_sizes *s)
{
    char n[WT_NAME_MAX];
    const int *ch = s->block_out_channels, nb = s->n_vae_blocks, top = ch[nb - 1];
    add_conv(l, "encoder.conv_in", ch[0], s->image_channels, 3);
    int prev = ch[0];
    for (int i = 0; i < nb; i++) {
        for (int j = 0; j < s->layers_per_block; j++)
            resnet_table(l, P(n, "encoder.down_blocks.%d.resnets.%d", i, j), j ? ch[i] : prev,
                         ch[i]);
        if (i != nb - 1)
            add_conv(l, P(n, "encoder.down_blocks.%d.downsamplers.0.conv", i), ch[i], ch[i], 3);
        prev = ch[i];
    }
    resnet_table(l, "encoder.mid_block.resnets.0", top, top);
    add_norm(l, "encoder.mid_block.attentions.0.group_norm", top, 1);
    add_linear(l, "encoder.mid_block.attentions.0.to_q", top, top, 1, 1);
    add_linear(l, "encoder.mid_block.attentions.0.to_k", top, top, 1, 1);
    add_linear(l, "encoder.mid_block.attentions.0.to_v", top, top, 1, 1);
    add_linear(l, "encoder.mid_block.attentions.0.to_out.0", top, top, 1, 1);
    resnet_table(l, "encoder.mid_block.resnets.1", top, top);
    add_norm(l, "encoder.conv_norm_out", top, 1);
    add_conv(l, "encoder.conv_out", 2 * s->latent_channels, top, 3);
}

/* The decoder's table comes from the decoder itself (vae_decoder_param_at), so the names
 * and shapes are those cpdit loads. */
static cpdit_status vae_decoder_table(wt_list *l, const builtin_sizes *s, cpdit_error *err)
{
    autoencoder_kl_config c;
    autoencoder_kl_config_defaults(&c);
    c.in_channels = c.out_channels = s->image_channels;
    c.latent_channels = s->latent_channels;
    c.n_blocks = s->n_vae_blocks;
    for (int i = 0; i < s->n_vae_blocks; i++)
        c.block_out_channels[i] = s->block_out_channels[i];
    c.layers_per_block = s->layers_per_block;
    c.norm_num_groups = s->norm_num_groups;
    c.use_quant_conv = c.use_post_quant_conv = false;
    c.mid_block_add_attention = true;
    vae_decoder *d;
    cpdit_status st = vae_decoder_create(&d, &c, err);
    if (st != CPDIT_OK)
        return st;
    vae_param_info info;
    for (size_t i = 0; vae_decoder_param_at(d, i, &info) == 0; i++) {
        const size_t len = strlen(info.name);
        const int is_bias = len > 5 && strcmp(info.name + len - 5, ".bias") == 0;
        const init_kind kind = info.ndim > 1 ? INIT_LINEAR : is_bias ? INIT_BIAS : INIT_NORM;
        add(l, kind, 1, info.ndim, info.shape, "%s", info.name);
    }
    vae_decoder_free(d);
    return CPDIT_OK;
}

/* CLIPTextModel (no text_projection: FLUX uses the pooled hidden state). */
static void clip_table(wt_list *l, const builtin_sizes *s)
{
    char n[WT_NAME_MAX];
    const int H = s->clip_hidden;
    const int64_t tok[2] = {s->clip_vocab, H}, pos[2] = {s->clip_positions, H};
    add(l, INIT_EMBED, CLIP_EMBED_STD, 2, tok, "text_model.embeddings.token_embedding.weight");
    add(l, INIT_EMBED, CLIP_EMBED_STD, 2, pos, "text_model.embeddings.position_embedding.weight");
    for (int i = 0; i < s->clip_layers; i++) {
#define B(x) P(n, "text_model.encoder.layers.%d.%s", i, x)
        add_norm(l, B("layer_norm1"), H, 1);
        add_linear(l, B("self_attn.q_proj"), H, H, 1, 1);
        add_linear(l, B("self_attn.k_proj"), H, H, 1, 1);
        add_linear(l, B("self_attn.v_proj"), H, H, 1, 1);
        add_linear(l, B("self_attn.out_proj"), H, H, 1, 1);
        add_norm(l, B("layer_norm2"), H, 1);
        add_linear(l, B("mlp.fc1"), s->clip_intermediate, H, 1, 1);
        add_linear(l, B("mlp.fc2"), H, s->clip_intermediate, 1, 1);
#undef B
    }
    add_norm(l, "text_model.final_layer_norm", H, 1);
}

/* T5EncoderModel with gated-gelu feed-forward; shared.weight only (transformers ties
 * encoder.embed_tokens.weight to it and save_pretrained keeps just shared.weight). */
static void t5_table(wt_list *l, const builtin_sizes *s)
{
    char n[WT_NAME_MAX];
    const int M = s->t5_d_model, I = s->t5_heads * s->t5_d_kv;
    const int64_t shared[2] = {s->t5_vocab, M}, rel[2] = {s->t5_buckets, s->t5_heads};
    add(l, INIT_EMBED, T5_EMBED_STD, 2, shared, "shared.weight");
    for (int i = 0; i < s->t5_layers; i++) {
#define B(x) P(n, "encoder.block.%d.layer.%s", i, x)
        add_linear(l, B("0.SelfAttention.q"), I, M, 0, 1.0f / sqrtf((float)s->t5_d_kv));
        add_linear(l, B("0.SelfAttention.k"), I, M, 0, 1);
        add_linear(l, B("0.SelfAttention.v"), I, M, 0, 1);
        add_linear(l, B("0.SelfAttention.o"), M, I, 0, 1);
        if (i == 0)
            add(l, INIT_EMBED, T5_REL_BIAS_STD, 2, rel,
                "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
        add_norm(l, B("0.layer_norm"), M, 0);
        add_linear(l, B("1.DenseReluDense.wi_0"), s->t5_d_ff, M, 0, 1);
        add_linear(l, B("1.DenseReluDense.wi_1"), s->t5_d_ff, M, 0, 1);
        add_linear(l, B("1.DenseReluDense.wo"), M, s->t5_d_ff, 0, 1);
        add_norm(l, B("1.layer_norm"), M, 0);
#undef B
    }
    add_norm(l, "encoder.final_layer_norm", M, 0);
}

/* ------------------------------------------------------------------ writing */

/* Generate every tensor of l and write them to dir/rel as dtype (from fp32). */
static cpdit_status write_list(wt_list *l, const char *dir, const char *rel, cpdit_dtype dtype,
                               uint64_t seed, size_t *n_params, cpdit_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    if (l->oom)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    size_t total = 0;
    for (size_t i = 0; i < l->n; i++)
        total += l->t[i].count;
    float *data = malloc((total ? total : 1) * sizeof *data);
    safetensors_write_tensor *wt = calloc(l->n ? l->n : 1, sizeof *wt);
    if (!data || !wt) {
        free(data);
        free(wt);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    size_t off = 0;
    for (size_t i = 0; i < l->n; i++) {
        const wt_entry *e = &l->t[i];
        fill(e, seed, data + off);
        wt[i].name = e->name;
        wt[i].dtype = dtype;
        wt[i].ndim = e->ndim;
        wt[i].shape = e->shape;
        wt[i].data = data + off;
        wt[i].src_dtype = CPDIT_DTYPE_F32;
        off += e->count;
    }
    /* transformers refuses safetensors files without format metadata */
    const safetensors_kv meta[1] = {{"format", "pt"}};
    cpdit_status st = safetensors_write(path, wt, l->n, meta, 1, err);
    free(data);
    free(wt);
    if (st == CPDIT_OK && n_params)
        *n_params = total;
    return st;
}

static void list_free(wt_list *l)
{
    free(l->t);
    memset(l, 0, sizeof *l);
}

cpdit_status builtin_write_transformer_weights(const char *dir, const builtin_sizes *s,
                                               size_t *n_params, cpdit_error *err)
{
    wt_list l = {0};
    transformer_table(&l, s);
    cpdit_status st = write_list(&l, dir, "transformer/diffusion_pytorch_model.safetensors",
                                 CPDIT_DTYPE_BF16, s->seed, n_params, err);
    list_free(&l);
    return st;
}

cpdit_status builtin_write_vae_weights(const char *dir, const builtin_sizes *s,
                                       size_t *n_params, cpdit_error *err)
{
    wt_list l = {0};
    vae_encoder_table(&l, s);
    cpdit_status st = vae_decoder_table(&l, s, err);
    if (st == CPDIT_OK)
        st = write_list(&l, dir, "vae/diffusion_pytorch_model.safetensors", CPDIT_DTYPE_F32,
                        s->seed, n_params, err);
    list_free(&l);
    return st;
}

cpdit_status builtin_write_clip_weights(const char *dir, const builtin_sizes *s,
                                        size_t *n_params, cpdit_error *err)
{
    wt_list l = {0};
    clip_table(&l, s);
    cpdit_status st = write_list(&l, dir, "text_encoder/model.safetensors", CPDIT_DTYPE_F32,
                                 s->seed, n_params, err);
    list_free(&l);
    return st;
}

cpdit_status builtin_write_t5_weights(const char *dir, const builtin_sizes *s,
                                      size_t *n_params, cpdit_error *err)
{
    wt_list l = {0};
    t5_table(&l, s);
    cpdit_status st = write_list(&l, dir, "text_encoder_2/model.safetensors", CPDIT_DTYPE_F32,
                                 s->seed, n_params, err);
    list_free(&l);
    return st;
}
