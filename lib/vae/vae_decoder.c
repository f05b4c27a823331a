/* vae_decoder.c — the AutoencoderKL decoder's parameters: the table of diffusers' tensor names
 * and shapes laid out in one allocation, loading them from safetensors, the model-folder entry
 * point (see vae_decoder.h; the math is in vae_decode.c). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off") /* vae_latents_denormalize rounds twice, as torch */
#endif

#include "lib/vae/vae_decoder.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/model_folder.h"
#include "lib/vae/vae_decoder_internal.h"

#define CONV3 3 /* the decoder's 3x3 convolutions */
#define CONV1 1
#define INITIAL_TABLE_CAP 64
#define RANDOM_BIAS_SCALE 0.1f /* vae_decoder_fill_random: biases and norm offsets */

/* ---------------------------------------------------------------- building the table */

typedef struct table_builder {
    vae_decoder *d;
    cpdit_status status;
    cpdit_error *err;
} table_builder;

/* Append a parameter (name printf-style); returns its offset. On failure records it in tb. */
static size_t add_param(table_builder *tb, const int64_t *shape, int ndim, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static size_t add_param(table_builder *tb, const int64_t *shape, int ndim, const char *fmt, ...)
{
    vae_decoder *d = tb->d;
    if (tb->status != CPDIT_OK)
        return 0;
    if (d->n_params == d->cap_params) {
        size_t cap = d->cap_params ? 2 * d->cap_params : INITIAL_TABLE_CAP;
        vae_param_entry *t = realloc(d->table, cap * sizeof *t);
        if (!t) {
            tb->status = cpdit_error_set(tb->err, CPDIT_ERR_RUNTIME, "vae", "out of memory");
            return 0;
        }
        d->table = t;
        d->cap_params = cap;
    }
    vae_param_entry *e = &d->table[d->n_params++];
    memset(e, 0, sizeof *e);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    e->ndim = ndim;
    e->count = 1;
    for (int i = 0; i < ndim; i++) {
        e->shape[i] = shape[i];
        e->count *= (size_t)shape[i];
    }
    e->offset = d->n_floats;
    d->n_floats += e->count;
    return e->offset;
}

static vae_norm_p add_norm(table_builder *tb, int c, const char *prefix)
{
    const int64_t shape[1] = {c};
    vae_norm_p n;
    n.w = add_param(tb, shape, 1, "%s.weight", prefix);
    n.b = add_param(tb, shape, 1, "%s.bias", prefix);
    return n;
}

static vae_conv_p add_conv(table_builder *tb, int cin, int cout, int k, const char *prefix)
{
    const int64_t wshape[4] = {cout, cin, k, k}, bshape[1] = {cout};
    vae_conv_p cv = {0, 0, cin, cout, k, NULL};
    cv.w = add_param(tb, wshape, 4, "%s.weight", prefix);
    cv.b = add_param(tb, bshape, 1, "%s.bias", prefix);
    return cv;
}

static vae_resnet_p add_resnet(table_builder *tb, int cin, int cout, const char *prefix)
{
    char name[VAE_PARAM_NAME_MAX];
    vae_resnet_p r;
    memset(&r, 0, sizeof r);
    r.cin = cin;
    r.cout = cout;
    snprintf(name, sizeof name, "%s.norm1", prefix);
    r.norm1 = add_norm(tb, cin, name);
    snprintf(name, sizeof name, "%s.conv1", prefix);
    r.conv1 = add_conv(tb, cin, cout, CONV3, name);
    snprintf(name, sizeof name, "%s.norm2", prefix);
    r.norm2 = add_norm(tb, cout, name);
    snprintf(name, sizeof name, "%s.conv2", prefix);
    r.conv2 = add_conv(tb, cout, cout, CONV3, name);
    r.has_shortcut = cin != cout;
    if (r.has_shortcut) {
        snprintf(name, sizeof name, "%s.conv_shortcut", prefix);
        r.shortcut = add_conv(tb, cin, cout, CONV1, name);
    }
    return r;
}

/* One Linear(C, C) of the attention with its deprecated name. */
static void add_linear(table_builder *tb, int c, const char *prefix, const char *name,
                       const char *old_name, size_t *w, size_t *b)
{
    const int64_t wshape[2] = {c, c}, bshape[1] = {c};
    *w = add_param(tb, wshape, 2, "%s.%s.weight", prefix, name);
    if (tb->status == CPDIT_OK)
        snprintf(tb->d->table[tb->d->n_params - 1].alt_name, VAE_PARAM_NAME_MAX, "%s.%s.weight",
                 prefix, old_name);
    *b = add_param(tb, bshape, 1, "%s.%s.bias", prefix, name);
    if (tb->status == CPDIT_OK)
        snprintf(tb->d->table[tb->d->n_params - 1].alt_name, VAE_PARAM_NAME_MAX, "%s.%s.bias",
                 prefix, old_name);
}

static vae_attn_p add_attention(table_builder *tb, int c, const char *prefix)
{
    char name[VAE_PARAM_NAME_MAX];
    vae_attn_p a;
    memset(&a, 0, sizeof a);
    a.c = c;
    snprintf(name, sizeof name, "%s.group_norm", prefix);
    a.norm = add_norm(tb, c, name);
    add_linear(tb, c, prefix, "to_q", "query", &a.q_w, &a.q_b);
    add_linear(tb, c, prefix, "to_k", "key", &a.k_w, &a.k_b);
    add_linear(tb, c, prefix, "to_v", "value", &a.v_w, &a.v_b);
    add_linear(tb, c, prefix, "to_out.0", "proj_attn", &a.o_w, &a.o_b);
    return a;
}

static void build_table(table_builder *tb)
{
    vae_decoder *d = tb->d;
    const autoencoder_kl_config *c = &d->config;
    const int top = c->block_out_channels[c->n_blocks - 1];
    char name[VAE_PARAM_NAME_MAX];
    d->has_post_quant = c->use_post_quant_conv;
    if (d->has_post_quant)
        d->post_quant = add_conv(tb, c->latent_channels, c->latent_channels, CONV1,
                                 "post_quant_conv");
    d->conv_in = add_conv(tb, c->latent_channels, top, CONV3, "decoder.conv_in");
    d->mid_res[0] = add_resnet(tb, top, top, "decoder.mid_block.resnets.0");
    d->has_mid_attn = c->mid_block_add_attention;
    if (d->has_mid_attn)
        d->mid_attn = add_attention(tb, top, "decoder.mid_block.attentions.0");
    d->mid_res[1] = add_resnet(tb, top, top, "decoder.mid_block.resnets.1");
    d->n_up = c->n_blocks;
    int prev = top;
    for (int i = 0; i < c->n_blocks; i++) {
        const int ch = c->block_out_channels[c->n_blocks - 1 - i];
        vae_up_p *u = &d->up[i];
        u->n_resnets = c->layers_per_block + 1;
        u->resnets = calloc((size_t)u->n_resnets, sizeof *u->resnets);
        if (!u->resnets) {
            tb->status = cpdit_error_set(tb->err, CPDIT_ERR_RUNTIME, "vae", "out of memory");
            return;
        }
        for (int j = 0; j < u->n_resnets; j++) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.resnets.%d", i, j);
            u->resnets[j] = add_resnet(tb, j == 0 ? prev : ch, ch, name);
        }
        u->has_upsample = i != c->n_blocks - 1;
        if (u->has_upsample) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.upsamplers.0.conv", i);
            u->upsample = add_conv(tb, ch, ch, CONV3, name);
        }
        prev = ch;
    }
    d->norm_out = add_norm(tb, c->block_out_channels[0], "decoder.conv_norm_out");
    d->conv_out = add_conv(tb, c->block_out_channels[0], c->out_channels, CONV3,
                           "decoder.conv_out");
}

int vae_decoder_convs(vae_decoder *d, vae_conv_p **list)
{
    int n = 0;
#define PUSH(cv)             \
    do {                     \
        if (list)            \
            list[n] = (cv);  \
        n++;                 \
    } while (0)
    if (d->has_post_quant)
        PUSH(&d->post_quant);
    PUSH(&d->conv_in);
    for (int m = 0; m < 2; m++) {
        PUSH(&d->mid_res[m].conv1);
        PUSH(&d->mid_res[m].conv2);
        if (d->mid_res[m].has_shortcut)
            PUSH(&d->mid_res[m].shortcut);
    }
    for (int i = 0; i < d->n_up; i++) {
        vae_up_p *u = &d->up[i];
        for (int j = 0; u->resnets && j < u->n_resnets; j++) {
            PUSH(&u->resnets[j].conv1);
            PUSH(&u->resnets[j].conv2);
            if (u->resnets[j].has_shortcut)
                PUSH(&u->resnets[j].shortcut);
        }
        if (u->has_upsample)
            PUSH(&u->upsample);
    }
    PUSH(&d->conv_out);
#undef PUSH
    return n;
}

void vae_decoder_set_weight_format(vae_decoder *d, cpdit_weight_format format)
{
    if (d->format != format)
        vae_decoder_unpack(d);
    d->format = format;
}

void vae_decoder_unpack(vae_decoder *d)
{
    if (!d->packed_be)
        return;
    cpdit_weight **aw[4] = {&d->mid_attn.wq, &d->mid_attn.wk, &d->mid_attn.wv, &d->mid_attn.wo};
    for (int i = 0; i < 4; i++) {
        if (*aw[i])
            d->packed_be->weight_free(*aw[i]);
        *aw[i] = NULL;
    }
    d->packed_be->free(d->be_params);
    d->be_params = NULL;
    const int n = vae_decoder_convs(d, NULL);
    vae_conv_p **list = malloc((size_t)n * sizeof *list);
    if (list) {
        vae_decoder_convs(d, list);
        for (int i = 0; i < n; i++) {
            d->packed_be->free(list[i]->packed);
            list[i]->packed = NULL;
        }
    }
    free(list);
    d->packed_be = NULL;
}

/* diffusers' get_activation names -> cpdit_activation, or -1. */
static int activation_from_name(const char *name)
{
    if (strcmp(name, "silu") == 0 || strcmp(name, "swish") == 0)
        return CPDIT_ACT_SILU;
    if (strcmp(name, "gelu") == 0)
        return CPDIT_ACT_GELU;
    if (strcmp(name, "relu") == 0)
        return CPDIT_ACT_RELU;
    if (strcmp(name, "mish") == 0)
        return CPDIT_ACT_MISH;
    return -1;
}

void vae_decoder_free(vae_decoder *d)
{
    if (!d)
        return;
    vae_decoder_unpack(d);
    for (int i = 0; i < VAE_MAX_BLOCKS; i++)
        free(d->up[i].resnets);
    free(d->table);
    free(d->params);
    free(d);
}

cpdit_status vae_decoder_create(vae_decoder **out, const autoencoder_kl_config *c,
                                cpdit_error *err)
{
    *out = NULL;
    cpdit_status st = autoencoder_kl_config_validate(c, "vae config", err);
    if (st != CPDIT_OK)
        return st;
    int act = activation_from_name(c->act_fn);
    if (act < 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "vae config",
                               "key \"act_fn\": \"%s\" is not supported (silu, swish, gelu, relu, mish)", c->act_fn);
    vae_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae", "out of memory");
    d->config = *c;
    d->format = CPDIT_WEIGHT_F32;
    d->act = (cpdit_activation)act;
    table_builder tb = {d, CPDIT_OK, err};
    build_table(&tb);
    if (tb.status == CPDIT_OK) {
        d->params = calloc(d->n_floats ? d->n_floats : 1, sizeof *d->params);
        if (!d->params)
            tb.status = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae",
                                        "out of memory for %zu parameters", d->n_floats);
    }
    if (tb.status != CPDIT_OK) {
        vae_decoder_free(d);
        return tb.status;
    }
    *out = d;
    return CPDIT_OK;
}

void vae_decoder_set_backend(vae_decoder *d, const cpdit_backend *be)
{
    d->be = be;
}

const autoencoder_kl_config *vae_decoder_config(const vae_decoder *d)
{
    return &d->config;
}

int vae_decoder_upscale(const vae_decoder *d)
{
    return 1 << (d->config.n_blocks - 1);
}

size_t vae_decoder_param_count(const vae_decoder *d)
{
    return d->n_params;
}

int vae_decoder_param_at(vae_decoder *d, size_t i, vae_param_info *info)
{
    if (i >= d->n_params)
        return -1;
    vae_decoder_unpack(d); /* the caller may write the weights: pack again on the next decode */
    const vae_param_entry *e = &d->table[i];
    info->name = e->name;
    info->ndim = e->ndim;
    memcpy(info->shape, e->shape, sizeof info->shape);
    info->data = d->params + e->offset;
    info->count = e->count;
    return 0;
}

/* ---------------------------------------------------------------- loading */

static int shape_equals(const safetensors_tensor *t, const int64_t *shape, int ndim)
{
    if (t->ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i])
            return 0;
    return 1;
}

cpdit_status vae_decoder_load_weights(vae_decoder *d, const safetensors_set *s, cpdit_error *err)
{
    const char *file = safetensors_set_path(s);
    for (size_t i = 0; i < d->n_params; i++) {
        const vae_param_entry *e = &d->table[i];
        const safetensors_tensor *t = safetensors_set_find(s, e->name);
        int legacy = 0;
        if (!t && e->alt_name[0]) {
            t = safetensors_set_find(s, e->alt_name);
            legacy = t != NULL;
        }
        if (!t)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, file, "missing tensor \"%s\"", e->name);
        /* deprecated attention projections may be stored as 1x1 convolutions */
        const int64_t conv_shape[4] = {e->shape[0], e->ndim > 1 ? e->shape[1] : 0, 1, 1};
        const int ok = shape_equals(t, e->shape, e->ndim) ||
                       (legacy && e->ndim == 2 && shape_equals(t, conv_shape, 4));
        if (!ok) {
            char want[96], got[96];
            safetensors_shape_text(want, sizeof want, e->shape, e->ndim, "()");
            safetensors_shape_text(got, sizeof got, t->shape, t->ndim, "()");
            return cpdit_error_set(err, CPDIT_ERR_INPUT, t->file,
                                   "tensor \"%s\" has shape %s, expected %s for this config",
                                   t->name, got, want);
        }
        vae_decoder_unpack(d);
        if (e->ndim == 4 && t->dtype == CPDIT_DTYPE_F32) /* fp32 on disk: native is fp32 */
            d->stored_f32 = 1;
        cpdit_status st = safetensors_tensor_read_f32(t, d->params + e->offset, e->count, err);
        if (st != CPDIT_OK)
            return st;
    }
    return CPDIT_OK;
}

cpdit_status vae_config_load(const char *model_dir, autoencoder_kl_config *c, cpdit_error *err)
{
    model_folder mf;
    model_config cfg = {0};
    cpdit_status st = model_folder_open(&mf, model_dir, err);
    if (st != CPDIT_OK)
        return st;
    st = model_folder_load_config(&mf, "vae", &cfg, err);
    if (st == CPDIT_OK)
        st = autoencoder_kl_config_from(&cfg, c, err); /* validates too */
    model_config_free(&cfg);
    model_folder_close(&mf);
    return st;
}

cpdit_status vae_decoder_load(vae_decoder **out, const char *model_dir, cpdit_error *err)
{
    *out = NULL;
    model_folder mf;
    autoencoder_kl_config c;
    char *dir = NULL;
    safetensors_set *s = NULL;
    vae_decoder *d = NULL;
    cpdit_status st = vae_config_load(model_dir, &c, err);
    if (st != CPDIT_OK)
        return st;
    if ((st = model_folder_open(&mf, model_dir, err)) != CPDIT_OK)
        return st;
    st = model_folder_component_dir(&mf, "vae", &dir, err);
    if (st == CPDIT_OK)
        st = safetensors_set_open(&s, dir, err);
    if (st == CPDIT_OK)
        st = vae_decoder_create(&d, &c, err);
    if (st == CPDIT_OK)
        st = vae_decoder_load_weights(d, s, err);
    safetensors_set_close(s);
    free(dir);
    model_folder_close(&mf);
    if (st != CPDIT_OK) {
        vae_decoder_free(d);
        return st;
    }
    *out = d;
    return CPDIT_OK;
}

void vae_latents_denormalize(const autoencoder_kl_config *c, float *z, size_t n)
{
    const float scale = (float)c->scaling_factor;
    const float shift = c->has_shift_factor ? (float)c->shift_factor : 0.0f;
    for (size_t i = 0; i < n; i++) {
        const float q = z[i] / scale;
        z[i] = q + shift;
    }
}

/* ---------------------------------------------------------------- test and benchmark helpers */

void vae_config_flux(autoencoder_kl_config *c)
{
    static const int ch[4] = {128, 256, 512, 512};
    autoencoder_kl_config_defaults(c);
    c->latent_channels = 16;
    c->n_blocks = 4;
    memcpy(c->block_out_channels, ch, sizeof ch);
    c->layers_per_block = 2;
    c->norm_num_groups = 32;
    c->sample_size = 1024;
    c->scaling_factor = 0.3611;
    c->has_shift_factor = true;
    c->shift_factor = 0.1159;
    c->use_quant_conv = c->use_post_quant_conv = false;
}

void vae_decoder_fill_random(vae_decoder *d, uint64_t seed)
{
    uint64_t s = seed;
    vae_decoder_unpack(d);
    for (size_t i = 0; i < d->n_params; i++) {
        const vae_param_entry *e = &d->table[i];
        const int is_norm_weight = strstr(e->name, "norm") && e->ndim == 1 &&
                                   strstr(e->name, ".weight");
        double fan_in = 1;
        for (int k = 1; k < e->ndim; k++)
            fan_in *= (double)e->shape[k];
        const float scale = e->ndim > 1 ? (float)sqrt(3.0 / fan_in) : RANDOM_BIAS_SCALE;
        float *p = d->params + e->offset;
        for (size_t k = 0; k < e->count; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const float u = (float)((s >> 40) & 0xffffff) / 8388608.0f - 1.0f; /* [-1, 1) */
            p[k] = (is_norm_weight ? 1.0f : 0.0f) + scale * u;
        }
    }
}
