/* vae_decoder.c — the AutoencoderKL decoder's parameters: the table of diffusers' tensor names
 * and shapes, registered with the models' weight loader (lib/weights/weight_loader.h) over a
 * checkpoint or over host fp32 values, and made by the backend at the first decode; the
 * model-folder entry point (see vae_decoder.h; the math is in vae_decode.c). */
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

/* Append a parameter (name printf-style) that the loader makes as kind and publishes in dst. On
 * failure records it in tb. */
static void add_param(table_builder *tb, weight_kind kind, void *dst, const int64_t *shape,
                      int ndim, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void add_param(table_builder *tb, weight_kind kind, void *dst, const int64_t *shape,
                      int ndim, const char *fmt, ...)
{
    vae_decoder *d = tb->d;
    if (tb->status != CPDIT_OK)
        return;
    if (d->n_params == d->cap_params) {
        size_t cap = d->cap_params ? 2 * d->cap_params : INITIAL_TABLE_CAP;
        vae_param_entry *t = realloc(d->table, cap * sizeof *t);
        if (!t) {
            tb->status = cpdit_error_set(tb->err, CPDIT_ERR_RUNTIME, "vae", "out of memory");
            return;
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
    e->kind = kind;
    e->dst = dst;
    e->ndim = ndim;
    e->count = 1;
    for (int i = 0; i < ndim; i++) {
        e->shape[i] = shape[i];
        e->count *= (size_t)shape[i];
    }
    e->offset = d->n_floats;
    d->n_floats += e->count;
}

static void add_norm(table_builder *tb, vae_norm_p *n, int c, const char *prefix)
{
    const int64_t shape[1] = {c};
    add_param(tb, WEIGHT_VECTOR, &n->w, shape, 1, "%s.weight", prefix);
    add_param(tb, WEIGHT_VECTOR, &n->b, shape, 1, "%s.bias", prefix);
}

static void add_conv(table_builder *tb, vae_conv_p *cv, int cin, int cout, int k,
                     const char *prefix)
{
    const int64_t wshape[4] = {cout, cin, k, k}, bshape[1] = {cout};
    cv->cin = cin;
    cv->cout = cout;
    cv->k = k;
    add_param(tb, WEIGHT_CONV, &cv->packed, wshape, 4, "%s.weight", prefix);
    add_param(tb, WEIGHT_VECTOR, &cv->b, bshape, 1, "%s.bias", prefix);
}

static void add_resnet(table_builder *tb, vae_resnet_p *r, int cin, int cout, const char *prefix)
{
    char name[VAE_PARAM_NAME_MAX];
    memset(r, 0, sizeof *r);
    r->cin = cin;
    r->cout = cout;
    snprintf(name, sizeof name, "%s.norm1", prefix);
    add_norm(tb, &r->norm1, cin, name);
    snprintf(name, sizeof name, "%s.conv1", prefix);
    add_conv(tb, &r->conv1, cin, cout, CONV3, name);
    snprintf(name, sizeof name, "%s.norm2", prefix);
    add_norm(tb, &r->norm2, cout, name);
    snprintf(name, sizeof name, "%s.conv2", prefix);
    add_conv(tb, &r->conv2, cout, cout, CONV3, name);
    r->has_shortcut = cin != cout;
    if (r->has_shortcut) {
        snprintf(name, sizeof name, "%s.conv_shortcut", prefix);
        add_conv(tb, &r->shortcut, cin, cout, CONV1, name);
    }
}

/* One Linear(C, C) of the attention with its deprecated name. */
static void add_linear(table_builder *tb, int c, const char *prefix, const char *name,
                       const char *old_name, const cpdit_weight **w, const float **b)
{
    const int64_t wshape[2] = {c, c}, bshape[1] = {c};
    add_param(tb, WEIGHT_MATRIX, w, wshape, 2, "%s.%s.weight", prefix, name);
    if (tb->status == CPDIT_OK)
        snprintf(tb->d->table[tb->d->n_params - 1].alt_name, VAE_PARAM_NAME_MAX, "%s.%s.weight",
                 prefix, old_name);
    add_param(tb, WEIGHT_VECTOR, b, bshape, 1, "%s.%s.bias", prefix, name);
    if (tb->status == CPDIT_OK)
        snprintf(tb->d->table[tb->d->n_params - 1].alt_name, VAE_PARAM_NAME_MAX, "%s.%s.bias",
                 prefix, old_name);
}

static void add_attention(table_builder *tb, vae_attn_p *a, int c, const char *prefix)
{
    char name[VAE_PARAM_NAME_MAX];
    memset(a, 0, sizeof *a);
    a->c = c;
    snprintf(name, sizeof name, "%s.group_norm", prefix);
    add_norm(tb, &a->norm, c, name);
    add_linear(tb, c, prefix, "to_q", "query", &a->wq, &a->q_b);
    add_linear(tb, c, prefix, "to_k", "key", &a->wk, &a->k_b);
    add_linear(tb, c, prefix, "to_v", "value", &a->wv, &a->v_b);
    add_linear(tb, c, prefix, "to_out.0", "proj_attn", &a->wo, &a->o_b);
}

static void build_table(table_builder *tb)
{
    vae_decoder *d = tb->d;
    const autoencoder_kl_config *c = &d->config;
    const int top = c->block_out_channels[c->n_blocks - 1];
    char name[VAE_PARAM_NAME_MAX];
    d->has_post_quant = c->use_post_quant_conv;
    if (d->has_post_quant)
        add_conv(tb, &d->post_quant, c->latent_channels, c->latent_channels, CONV1,
                 "post_quant_conv");
    add_conv(tb, &d->conv_in, c->latent_channels, top, CONV3, "decoder.conv_in");
    add_resnet(tb, &d->mid_res[0], top, top, "decoder.mid_block.resnets.0");
    d->has_mid_attn = c->mid_block_add_attention;
    if (d->has_mid_attn)
        add_attention(tb, &d->mid_attn, top, "decoder.mid_block.attentions.0");
    add_resnet(tb, &d->mid_res[1], top, top, "decoder.mid_block.resnets.1");
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
            add_resnet(tb, &u->resnets[j], j == 0 ? prev : ch, ch, name);
        }
        u->has_upsample = i != c->n_blocks - 1;
        if (u->has_upsample) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.upsamplers.0.conv", i);
            add_conv(tb, &u->upsample, ch, ch, CONV3, name);
        }
        prev = ch;
    }
    add_norm(tb, &d->norm_out, c->block_out_channels[0], "decoder.conv_norm_out");
    add_conv(tb, &d->conv_out, c->block_out_channels[0], c->out_channels, CONV3,
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
        vae_decoder_unpack(d); /* made again for the new format by the next decode */
    d->format = format;
}

/* ---------------------------------------------------------------- the weights */

/* The host tensor named name (the loader's source for a created decoder). */
static const safetensors_tensor *find_host(void *ctx, const char *name)
{
    const vae_decoder *d = ctx;
    for (size_t i = 0; i < d->n_params; i++)
        if (strcmp(d->host[i].name, name) == 0)
            return &d->host[i];
    return NULL;
}

/* Open the loader on d's source for be and register every parameter (the checks of names,
 * shapes and dtypes: their errors name the file). */
static cpdit_status register_weights(vae_decoder *d, const cpdit_backend *be, cpdit_error *err)
{
    cpdit_status st = d->set ? weight_loader_open(&d->wl, d->set, safetensors_set_path(d->set),
                                                  be, err)
                             : weight_loader_open_tensors(&d->wl, find_host, d, "vae", be, err);
    if (st != CPDIT_OK)
        return st;
    d->wl_open = 1;
    for (size_t i = 0; i < d->n_params && st == CPDIT_OK; i++) {
        const vae_param_entry *e = &d->table[i];
        const char *disk = e->name; /* else the deprecated name, when the file has that one */
        if (d->set && e->alt_name[0] && !safetensors_set_find(d->set, e->name) &&
            safetensors_set_find(d->set, e->alt_name))
            disk = e->alt_name;
        if (e->kind == WEIGHT_CONV)
            st = weight_loader_add_conv(&d->wl, e->name, disk, (int)e->shape[0],
                                        (int)e->shape[1], (int)e->shape[2], e->dst,
                                        "this config needs", NULL, err);
        else
            st = weight_loader_add(&d->wl, 0, e->kind, e->name, disk, e->shape[0], 0,
                                   e->shape[0], e->ndim > 1 ? e->shape[1] : 0, 0, e->dst,
                                   "this config needs", "", NULL, err);
    }
    if (st != CPDIT_OK)
        vae_decoder_unpack(d);
    return st;
}

cpdit_status vae_decoder_prepare(vae_decoder *d, const cpdit_backend *be, cpdit_error *err)
{
    if (d->wl_open && d->wl.prepared && (d->wl.be != be || d->wl.format != d->format))
        vae_decoder_unpack(d); /* made for another backend or format */
    cpdit_status st = CPDIT_OK;
    if (!d->wl_open)
        st = register_weights(d, be, err);
    else
        st = weight_loader_set_backend(&d->wl, be, err);
    /* all resident: the decoder's weights are small next to its activations */
    if (st == CPDIT_OK)
        st = weight_loader_prepare(&d->wl, SIZE_MAX, d->format, err);
    if (st != CPDIT_OK)
        vae_decoder_unpack(d);
    return st;
}

void vae_decoder_unpack(vae_decoder *d)
{
    if (d->wl_open)
        weight_loader_close(&d->wl);
    d->wl_open = 0;
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

/* Drop the host params (the weights come from a checkpoint now). */
static void free_host(vae_decoder *d)
{
    free(d->params);
    free(d->host);
    d->params = NULL;
    d->host = NULL;
}

void vae_decoder_free(vae_decoder *d)
{
    if (!d)
        return;
    vae_decoder_unpack(d);
    safetensors_set_close(d->set);
    for (int i = 0; i < VAE_MAX_BLOCKS; i++)
        free(d->up[i].resnets);
    free(d->table);
    free_host(d);
    free(d);
}

/* A decoder with the table of config c and no weights yet. */
static cpdit_status decoder_new(vae_decoder **out, const autoencoder_kl_config *c,
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
    if (tb.status != CPDIT_OK) {
        vae_decoder_free(d);
        return tb.status;
    }
    *out = d;
    return CPDIT_OK;
}

cpdit_status vae_decoder_create(vae_decoder **out, const autoencoder_kl_config *c,
                                cpdit_error *err)
{
    vae_decoder *d;
    cpdit_status st = decoder_new(&d, c, err);
    if (st != CPDIT_OK)
        return st;
    /* host fp32 values, seen by the loader as tensors of a checkpoint */
    d->params = calloc(d->n_floats ? d->n_floats : 1, sizeof *d->params);
    d->host = calloc(d->n_params ? d->n_params : 1, sizeof *d->host);
    if (!d->params || !d->host) {
        vae_decoder_free(d);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae", "out of memory for %zu parameters",
                               d->n_floats);
    }
    for (size_t i = 0; i < d->n_params; i++) {
        const vae_param_entry *e = &d->table[i];
        safetensors_tensor *t = &d->host[i];
        t->name = e->name;
        t->file = "vae";
        t->dtype = CPDIT_DTYPE_F32;
        t->ndim = e->ndim;
        memcpy(t->shape, e->shape, sizeof e->shape);
        t->nelem = e->count;
        t->data = d->params + e->offset;
        t->nbytes = e->count * sizeof(float);
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
    const vae_param_entry *e = &d->table[i];
    info->name = e->name;
    info->ndim = e->ndim;
    memcpy(info->shape, e->shape, sizeof info->shape);
    info->data = d->params ? d->params + e->offset : NULL;
    info->count = e->count;
    if (d->params) /* the caller may write the weights: made again on the next decode */
        vae_decoder_unpack(d);
    return 0;
}

/* ---------------------------------------------------------------- loading */

cpdit_status vae_decoder_load_weights(vae_decoder *d, safetensors_set *s, cpdit_error *err)
{
    vae_decoder_unpack(d);
    safetensors_set_close(d->set);
    d->set = s;
    free_host(d);
    /* names, shapes and dtypes checked now; the weights are made at the first decode */
    return register_weights(d, d->be ? d->be : cpdit_backend_default(), err);
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
        st = decoder_new(&d, &c, err);
    if (st == CPDIT_OK) {
        st = vae_decoder_load_weights(d, s, err); /* d holds s now */
        s = NULL;
    }
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
    if (!d->params) /* a loaded decoder: its weights are the checkpoint's */
        return;
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
