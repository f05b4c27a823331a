/* wan_vae_weights.c — AutoencoderKLWan's config (vae/config.json) and the decoder's weights
 * as the backend holds them (see wan_vae.h, wan_vae_internal.h): convolutions packed by
 * be->conv2d_pack_stored from the stored dtype after their temporal taps are moved into the
 * channel axis, the attention's 1x1 convs as be->weight_create matrices, norm gammas and
 * biases fp32 in the backend's memory.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/model_config.h"
#include "lib/io/model_folder.h"
#include "lib/models/wan/wan_vae_internal.h"
#include "lib/weights/weight_loader.h"

typedef struct maker {
    wan_vae *d;
    const cpdit_backend *be; /* NULL: check names, shapes and dtypes only */
    cpdit_error *err;
} maker;

/* Every module's tensors in forward order: made for m->be, or only checked (be NULL). */
static cpdit_status walk(maker *m);

static const float DEFAULT_MEAN[16] = {-0.7571f, -0.7089f, -0.9113f, 0.1075f, -0.1745f, 0.9653f,
                                       -0.1517f, 1.5508f,  0.4134f,  -0.0715f, 0.5517f, -0.3632f,
                                       -0.1922f, -0.9497f, 0.2503f,  -0.2921f};
static const float DEFAULT_STD[16] = {2.8184f, 1.4541f, 2.3275f, 2.6558f, 1.2196f, 1.7708f,
                                      2.6052f, 2.0743f, 3.2687f, 2.1526f, 2.8652f, 1.5579f,
                                      1.6382f, 1.1253f, 2.8251f, 1.9160f};

void wan_vae_config_defaults(wan_vae_config *c)
{
    static const int mult[4] = {1, 2, 4, 4};
    memset(c, 0, sizeof *c);
    c->base_dim = c->decoder_base_dim = 96;
    c->z_dim = 16;
    c->n_levels = 4;
    memcpy(c->dim_mult, mult, sizeof mult);
    c->num_res_blocks = 2;
    c->temperal_downsample[1] = c->temperal_downsample[2] = true;
    c->out_channels = 3;
    memcpy(c->latents_mean, DEFAULT_MEAN, sizeof DEFAULT_MEAN);
    memcpy(c->latents_std, DEFAULT_STD, sizeof DEFAULT_STD);
}

/* A list of z_dim floats (latents_mean / latents_std) into out; missing: the defaults (only
 * for z_dim 16). */
static cpdit_status float_list(const model_config *cfg, const char *key, int z, float *out,
                               cpdit_error *err)
{
    double v[WAN_VAE_MAX_Z];
    int n = 0;
    if (!model_config_has(cfg, key)) {
        if (z != 16)
            return model_config_key_error(cfg, key, err, "missing (needed: z_dim is %d)", z);
        return CPDIT_OK; /* the defaults are already in out */
    }
    cpdit_status st = model_config_get_double_array(cfg, key, v, WAN_VAE_MAX_Z, &n, err);
    if (st != CPDIT_OK)
        return st;
    if (n != z)
        return model_config_key_error(cfg, key, err, "%d values; z_dim is %d", n, z);
    for (int i = 0; i < n; i++)
        out[i] = (float)v[i];
    return CPDIT_OK;
}

static cpdit_status bool_list(const model_config *cfg, const char *key, bool *out, int want,
                              cpdit_error *err)
{
    const json_t *a = json_object_get(cfg->root, key);
    if (!a || json_is_null(a))
        return CPDIT_OK; /* the defaults */
    if (!json_is_array(a) || (int)json_array_size(a) != want)
        return model_config_key_error(cfg, key, err, "expected an array of %d booleans", want);
    for (int i = 0; i < want; i++) {
        const json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_boolean(v))
            return model_config_key_error(cfg, key, err, "element %d is not a boolean", i);
        out[i] = json_is_true(v);
    }
    return CPDIT_OK;
}

static cpdit_status config_from(const model_config *cfg, wan_vae_config *c, cpdit_error *err)
{
    wan_vae_config_defaults(c);
    bool residual = false;
    int dm[WAN_VAE_MAX_LEVELS], n = 0;
    cpdit_status st = model_config_get_int_default(cfg, "base_dim", 96, &c->base_dim, err);
    if (!st)
        st = model_config_get_int_default(cfg, "decoder_base_dim", c->base_dim,
                                          &c->decoder_base_dim, err);
    if (!st)
        st = model_config_get_int_default(cfg, "z_dim", 16, &c->z_dim, err);
    if (!st)
        st = model_config_get_int_default(cfg, "num_res_blocks", 2, &c->num_res_blocks, err);
    if (!st)
        st = model_config_get_int_default(cfg, "out_channels", 3, &c->out_channels, err);
    if (!st)
        st = model_config_get_int_array_default(cfg, "dim_mult", c->dim_mult, 4, dm,
                                                WAN_VAE_MAX_LEVELS, &n, err);
    if (!st)
        st = model_config_get_bool_default(cfg, "is_residual", false, &residual, err);
    if (st)
        return st;
    if (residual)
        return model_config_key_error(cfg, "is_residual", err,
                                      "true (the Wan 2.2 VAE) is not supported yet");
    if (model_config_has(cfg, "patch_size"))
        return model_config_key_error(cfg, "patch_size", err,
                                      "set (the Wan 2.2 VAE) is not supported yet");
    if (c->base_dim < 1 || c->decoder_base_dim < 2 || c->decoder_base_dim % 2)
        return model_config_key_error(cfg, "decoder_base_dim", err,
                                      "%d: must be a positive even number", c->decoder_base_dim);
    if (c->z_dim < 1 || c->z_dim > WAN_VAE_MAX_Z)
        return model_config_key_error(cfg, "z_dim", err, "%d: must be 1..%d", c->z_dim,
                                      WAN_VAE_MAX_Z);
    if (c->num_res_blocks < 0 || c->num_res_blocks + 1 > WAN_VAE_MAX_RES)
        return model_config_key_error(cfg, "num_res_blocks", err, "%d: must be 0..%d",
                                      c->num_res_blocks, WAN_VAE_MAX_RES - 1);
    if (c->out_channels < 1)
        return model_config_key_error(cfg, "out_channels", err, "must be positive");
    if (n < 1)
        return model_config_key_error(cfg, "dim_mult", err, "must not be empty");
    for (int i = 0; i < n; i++)
        if (dm[i] < 1)
            return model_config_key_error(cfg, "dim_mult", err, "entries must be positive");
    if (n != 4) /* the defaults are for 4 levels */
        memset(c->temperal_downsample, 0, sizeof c->temperal_downsample);
    c->n_levels = n;
    memcpy(c->dim_mult, dm, sizeof dm);
    st = bool_list(cfg, "temperal_downsample", c->temperal_downsample, n - 1, err);
    if (!st)
        st = float_list(cfg, "latents_mean", c->z_dim, c->latents_mean, err);
    if (!st)
        st = float_list(cfg, "latents_std", c->z_dim, c->latents_std, err);
    for (int i = 0; !st && i < c->z_dim; i++)
        if (!(c->latents_std[i] != 0.0f) || !isfinite(c->latents_std[i]))
            st = model_config_key_error(cfg, "latents_std", err, "entry %d is not a finite "
                                        "nonzero number", i);
    return st;
}

cpdit_status wan_vae_config_load(const char *model_dir, wan_vae_config *c, cpdit_error *err)
{
    model_folder mf;
    model_config cfg = {0};
    cpdit_status st = model_folder_open(&mf, model_dir, err);
    if (st != CPDIT_OK)
        return st;
    st = model_folder_load_config(&mf, "vae", &cfg, err);
    if (st == CPDIT_OK)
        st = config_from(&cfg, c, err);
    model_config_free(&cfg);
    model_folder_close(&mf);
    return st;
}

int wan_vae_is_wan(const char *model_dir)
{
    model_folder mf;
    model_config cfg = {0};
    cpdit_error err;
    int yes = 0;
    if (model_folder_open(&mf, model_dir, &err) != CPDIT_OK)
        return 0;
    if (model_folder_load_config(&mf, "vae", &cfg, &err) == CPDIT_OK) {
        const char *cls = model_config_class_name(&cfg);
        yes = cls && !strcmp(cls, WAN_VAE_CLASS);
    }
    model_config_free(&cfg);
    model_folder_close(&mf);
    return yes;
}

int wan_vae_frames(const wan_vae_config *c, int T)
{
    int k = 0;
    for (int i = 0; i + 1 < c->n_levels; i++)
        k += c->temperal_downsample[i] ? 1 : 0;
    return T < 1 ? 0 : 1 + (1 << k) * (T - 1);
}

int wan_vae_upscale(const wan_vae_config *c)
{
    return 1 << (c->n_levels - 1);
}

void wan_vae_latents_denormalize(const wan_vae_config *c, float *z, int B, int T, int h, int w)
{
    const size_t plane = (size_t)T * h * w;
    for (int b = 0; b < B; b++)
        for (int ch = 0; ch < c->z_dim; ch++) {
            const float inv = 1.0f / c->latents_std[ch], mean = c->latents_mean[ch];
            float *p = z + ((size_t)b * c->z_dim + ch) * plane;
            for (size_t i = 0; i < plane; i++)
                p[i] = p[i] / inv + mean;
        }
}

/* ------------------------------------------------------------------ the module layout */

static void conv_shape(wv_conv *cv, int cin, int cout, int taps, int k, int *n_win)
{
    memset(cv, 0, sizeof *cv);
    cv->cin = cin;
    cv->cout = cout;
    cv->taps = taps;
    cv->k = k;
    cv->win = taps > 1 ? (*n_win)++ : -1;
}

static void res_shape(wv_res *r, int cin, int cout, int *n_win)
{
    r->cin = cin;
    r->cout = cout;
    conv_shape(&r->c1, cin, cout, WAN_VAE_TAPS, 3, n_win);
    conv_shape(&r->c2, cout, cout, WAN_VAE_TAPS, 3, n_win);
    r->has_sc = cin != cout;
    if (r->has_sc)
        conv_shape(&r->sc, cin, cout, 1, 1, n_win);
}

/* The modules of c without weights (WanDecoder3d.__init__'s channel arithmetic). */
static void layout(wan_vae *d)
{
    const wan_vae_config *c = &d->cfg;
    const int n = c->n_levels, base = c->decoder_base_dim;
    int dims[WAN_VAE_MAX_LEVELS + 1];
    dims[0] = base * c->dim_mult[n - 1];
    for (int i = 0; i < n; i++)
        dims[i + 1] = base * c->dim_mult[n - 1 - i];
    d->n_windows = 0;
    conv_shape(&d->post_quant, c->z_dim, c->z_dim, 1, 1, &d->n_windows);
    conv_shape(&d->conv_in, c->z_dim, dims[0], WAN_VAE_TAPS, 3, &d->n_windows);
    res_shape(&d->mid[0], dims[0], dims[0], &d->n_windows);
    d->attn.c = dims[0];
    res_shape(&d->mid[1], dims[0], dims[0], &d->n_windows);
    d->n_up = n;
    for (int i = 0; i < n; i++) {
        wv_up *u = &d->up[i];
        int in = i > 0 ? dims[i] / 2 : dims[i];
        const int out = dims[i + 1];
        u->n_res = c->num_res_blocks + 1;
        for (int j = 0; j < u->n_res; j++, in = out)
            res_shape(&u->res[j], in, out, &d->n_windows);
        /* temperal_upsample = reversed temperal_downsample */
        u->mode = i == n - 1 ? WV_UP_NONE : c->temperal_downsample[n - 2 - i] ? WV_UP_3D
                                                                             : WV_UP_2D;
        if (u->mode == WV_UP_3D)
            conv_shape(&u->time_conv, out, 2 * out, WAN_VAE_TAPS, 1, &d->n_windows);
        if (u->mode != WV_UP_NONE)
            conv_shape(&u->resample, out, out / 2, 1, 3, &d->n_windows);
    }
    conv_shape(&d->conv_out, dims[n], c->out_channels, WAN_VAE_TAPS, 3, &d->n_windows);
}

int wan_vae_convs(wan_vae *d, wv_conv **list)
{
    int n = 0;
#define ADD(cv) do { if (list) list[n] = (cv); n++; } while (0)
    ADD(&d->post_quant);
    ADD(&d->conv_in);
    for (int m = 0; m < 2; m++) {
        ADD(&d->mid[m].c1);
        ADD(&d->mid[m].c2);
        if (d->mid[m].has_sc)
            ADD(&d->mid[m].sc);
    }
    for (int i = 0; i < d->n_up; i++) {
        wv_up *u = &d->up[i];
        for (int j = 0; j < u->n_res; j++) {
            ADD(&u->res[j].c1);
            ADD(&u->res[j].c2);
            if (u->res[j].has_sc)
                ADD(&u->res[j].sc);
        }
        if (u->mode == WV_UP_3D)
            ADD(&u->time_conv);
        if (u->mode != WV_UP_NONE)
            ADD(&u->resample);
    }
    ADD(&d->conv_out);
#undef ADD
    return n;
}

cpdit_status wan_vae_open(wan_vae **out, const char *model_dir, cpdit_error *err)
{
    *out = NULL;
    model_folder mf;
    wan_vae *d = calloc(1, sizeof *d);
    if (!d)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "wan vae", "out of memory");
    d->format = CPDIT_WEIGHT_F32;
    cpdit_status st = wan_vae_config_load(model_dir, &d->cfg, err);
    if (st == CPDIT_OK && (st = model_folder_open(&mf, model_dir, err)) == CPDIT_OK) {
        st = model_folder_component_dir(&mf, "vae", &d->dir, err);
        model_folder_close(&mf);
    }
    if (st == CPDIT_OK)
        st = safetensors_set_open(&d->set, d->dir, err);
    if (st == CPDIT_OK) { /* every tensor's name, shape and dtype now, the weights later */
        layout(d);
        maker m = {d, NULL, err};
        st = walk(&m);
    }
    if (st != CPDIT_OK) {
        wan_vae_free(d);
        return st;
    }
    *out = d;
    return CPDIT_OK;
}

void wan_vae_free(wan_vae *d)
{
    if (!d)
        return;
    wan_vae_unprepare(d);
    safetensors_set_close(d->set);
    free(d->dir);
    free(d);
}

const wan_vae_config *wan_vae_config_of(const wan_vae *d)
{
    return &d->cfg;
}

void wan_vae_set_backend(wan_vae *d, const cpdit_backend *be)
{
    d->be = be;
}

void wan_vae_set_weight_format(wan_vae *d, cpdit_weight_format format)
{
    d->format = format;
}

/* ------------------------------------------------------------------ making the weights */

/* The float tensor name of shape (ndim dims); a vector may have trailing 1s (gammas are
 * (C, 1, 1, 1) or (C, 1, 1)). */
static cpdit_status find(maker *m, const char *name, int ndim, const int64_t *shape,
                         const safetensors_tensor **out)
{
    const char *where = safetensors_set_path(m->d->set);
    const safetensors_tensor *t = safetensors_set_find(m->d->set, name);
    *out = NULL;
    if (!t)
        return cpdit_error_set(m->err, CPDIT_ERR_INPUT, where, "no tensor \"%s\"", name);
    size_t want = 1;
    for (int i = 0; i < ndim; i++)
        want *= (size_t)shape[i];
    /* the dims must match; a vector (gammas) may carry trailing 1s */
    int ok = cpdit_dtype_is_float(t->dtype) && t->nelem == want &&
             (t->ndim == ndim || (ndim == 1 && t->ndim >= 1));
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        char got[96], exp[96];
        safetensors_shape_text(got, sizeof got, t->shape, t->ndim, "()");
        safetensors_shape_text(exp, sizeof exp, shape, ndim, "()");
        return cpdit_error_set(m->err, CPDIT_ERR_INPUT, where,
                               "tensor \"%s\": %s %s; expected a float tensor of shape %s", name,
                               cpdit_dtype_name(t->dtype), got, exp);
    }
    *out = t;
    return CPDIT_OK;
}

/* n fp32 values of tensor t (elements [first, first + n)) into backend memory. */
static cpdit_status vector_of(maker *m, const safetensors_tensor *t, size_t first, size_t n,
                              float **out)
{
    if (!m->be)
        return CPDIT_OK;
    float *host = malloc(t->nelem * sizeof *host);
    cpdit_status st = host ? safetensors_tensor_read_f32(t, host, t->nelem, m->err)
                           : cpdit_error_set(m->err, CPDIT_ERR_RUNTIME, "wan vae",
                                             "out of memory");
    if (st == CPDIT_OK && !(*out = m->be->alloc(n * sizeof(float))))
        st = cpdit_error_set(m->err, CPDIT_ERR_RUNTIME, "wan vae", "out of memory");
    if (st == CPDIT_OK)
        m->be->upload(*out, host + first, n * sizeof(float));
    free(host);
    return st;
}

static cpdit_status gamma_of(maker *m, const char *prefix, int c, float **out)
{
    char name[WAN_VAE_NAME_MAX];
    const int64_t shape[1] = {c};
    const safetensors_tensor *t;
    snprintf(name, sizeof name, "%s.gamma", prefix);
    cpdit_status st = find(m, name, 1, shape, &t);
    return st ? st : vector_of(m, t, 0, (size_t)c, out);
}

/* A conv's weight (Cout, Cin, taps, K, K) (5D; a 2D conv: (Cout, Cin, K, K)) reordered to
 * (Cout, taps·Cin, K, K) in its stored dtype, then packed; and its bias. */
static cpdit_status conv_of(maker *m, const char *prefix, wv_conv *cv, int is_2d)
{
    char name[WAN_VAE_NAME_MAX];
    const int T = cv->taps, kt_dims = is_2d ? 0 : 1;
    const int64_t kh = cv->k, kw = cv->k, kt = cv->taps;
    /* time_conv is (3, 1, 1): k = 1 spatially */
    int64_t shape[5] = {cv->cout, cv->cin, kt, kh, kw};
    if (is_2d) {
        shape[2] = kh;
        shape[3] = kw;
    }
    const safetensors_tensor *t, *tb;
    snprintf(name, sizeof name, "%s.weight", prefix);
    const int64_t bshape[1] = {cv->cout};
    cpdit_status st = find(m, name, 4 + kt_dims, shape, &t);
    if (st)
        return st;
    if (!m->be) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        return find(m, name, 1, bshape, &tb);
    }
    const size_t es = cpdit_dtype_size(t->dtype), kk = (size_t)cv->k * cv->k;
    unsigned char *re = malloc(t->nbytes);
    if (!re)
        return cpdit_error_set(m->err, CPDIT_ERR_RUNTIME, "wan vae", "out of memory");
    const unsigned char *src = t->data;
    for (int o = 0; o < cv->cout; o++)
        for (int ci = 0; ci < cv->cin; ci++)
            for (int j = 0; j < T; j++) {
                const size_t from = (((size_t)o * cv->cin + ci) * T + j) * kk;
                const size_t to = ((size_t)o * T * cv->cin + (size_t)j * cv->cin + ci) * kk;
                memcpy(re + to * es, src + from * es, kk * es);
            }
    const int cin_all = T * cv->cin;
    float *packed = NULL;
    if (m->be->conv2d_pack_stored) {
        packed = m->be->conv2d_pack_stored(re, t->dtype, cv->cout, cin_all, cv->k,
                                           m->d->format);
    } else {
        float *f = malloc(t->nelem * sizeof *f);
        if (f && cpdit_dtype_to_f32(f, re, t->dtype, t->nelem, m->err) == CPDIT_OK)
            packed = m->be->conv2d_pack(f, cv->cout, cin_all, cv->k);
        free(f);
    }
    free(re);
    weight_drop_pages(t->data, t->nbytes); /* the packed copy is what the decode reads */
    if (!packed)
        return cpdit_error_set(m->err, CPDIT_ERR_RUNTIME, "wan vae",
                               "out of memory packing \"%s\"", name);
    cv->packed = packed;
    snprintf(name, sizeof name, "%s.bias", prefix);
    st = find(m, name, 1, bshape, &tb);
    return st ? st : vector_of(m, tb, 0, (size_t)cv->cout, &cv->b);
}

static cpdit_status res_of(maker *m, const char *prefix, wv_res *r)
{
    char p[WAN_VAE_NAME_MAX];
    snprintf(p, sizeof p, "%s.norm1", prefix);
    cpdit_status st = gamma_of(m, p, r->cin, &r->g1);
    snprintf(p, sizeof p, "%s.conv1", prefix);
    if (!st)
        st = conv_of(m, p, &r->c1, 0);
    snprintf(p, sizeof p, "%s.norm2", prefix);
    if (!st)
        st = gamma_of(m, p, r->cout, &r->g2);
    snprintf(p, sizeof p, "%s.conv2", prefix);
    if (!st)
        st = conv_of(m, p, &r->c2, 0);
    snprintf(p, sizeof p, "%s.conv_shortcut", prefix);
    if (!st && r->has_sc)
        st = conv_of(m, p, &r->sc, 0);
    return st;
}

/* A 1x1 conv's rows [r0, r0 + rows) as a Linear(cols -> rows) weight. */
static cpdit_status matrix_of(maker *m, const safetensors_tensor *t, int r0, int rows, int cols,
                              cpdit_weight **out)
{
    if (!m->be)
        return CPDIT_OK;
    const size_t es = cpdit_dtype_size(t->dtype);
    cpdit_weight_desc desc = {t->dtype, rows, cols,
                              (const unsigned char *)t->data + (size_t)r0 * cols * es, 1,
                              m->d->format, NULL, 0};
    return m->be->weight_create(out, &desc, m->err);
}

static cpdit_status attn_of(maker *m, const char *prefix, wv_attn *a)
{
    char name[WAN_VAE_NAME_MAX];
    const int C = a->c;
    const int64_t qkv[4] = {3 * C, C, 1, 1}, proj[4] = {C, C, 1, 1}, b3[1] = {3 * C},
                  b1[1] = {C};
    const safetensors_tensor *t;
    snprintf(name, sizeof name, "%s.norm", prefix);
    cpdit_status st = gamma_of(m, name, C, &a->g);
    snprintf(name, sizeof name, "%s.to_qkv.weight", prefix);
    if (!st)
        st = find(m, name, 4, qkv, &t);
    for (int j = 0; j < 3 && !st; j++)
        st = matrix_of(m, t, j * C, C, C, &a->w[j]);
    snprintf(name, sizeof name, "%s.to_qkv.bias", prefix);
    if (!st)
        st = find(m, name, 1, b3, &t);
    for (int j = 0; j < 3 && !st; j++)
        st = vector_of(m, t, (size_t)j * C, (size_t)C, &a->b[j]);
    snprintf(name, sizeof name, "%s.proj.weight", prefix);
    if (!st)
        st = find(m, name, 4, proj, &t);
    if (!st)
        st = matrix_of(m, t, 0, C, C, &a->wo);
    snprintf(name, sizeof name, "%s.proj.bias", prefix);
    if (!st)
        st = find(m, name, 1, b1, &t);
    if (!st)
        st = vector_of(m, t, 0, (size_t)C, &a->bo);
    return st;
}

static cpdit_status walk(maker *mk)
{
    wan_vae *d = mk->d;
    maker m = *mk;
    char p[WAN_VAE_NAME_MAX];
    cpdit_status st = conv_of(&m, "post_quant_conv", &d->post_quant, 0);
    if (!st)
        st = conv_of(&m, "decoder.conv_in", &d->conv_in, 0);
    for (int r = 0; r < 2 && !st; r++) {
        snprintf(p, sizeof p, "decoder.mid_block.resnets.%d", r);
        st = res_of(&m, p, &d->mid[r]);
    }
    if (!st)
        st = attn_of(&m, "decoder.mid_block.attentions.0", &d->attn);
    for (int i = 0; i < d->n_up && !st; i++) {
        wv_up *u = &d->up[i];
        for (int j = 0; j < u->n_res && !st; j++) {
            snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%d", i, j);
            st = res_of(&m, p, &u->res[j]);
        }
        snprintf(p, sizeof p, "decoder.up_blocks.%d.upsamplers.0.time_conv", i);
        if (!st && u->mode == WV_UP_3D)
            st = conv_of(&m, p, &u->time_conv, 0);
        snprintf(p, sizeof p, "decoder.up_blocks.%d.upsamplers.0.resample.1", i);
        if (!st && u->mode != WV_UP_NONE)
            st = conv_of(&m, p, &u->resample, 1);
    }
    if (!st)
        st = gamma_of(&m, "decoder.norm_out", d->conv_out.cin, &d->g_out);
    if (!st)
        st = conv_of(&m, "decoder.conv_out", &d->conv_out, 0);
    return st;
}

cpdit_status wan_vae_prepare(wan_vae *d, const cpdit_backend *be, cpdit_error *err)
{
    if (d->made_be == be && d->made_format == d->format)
        return CPDIT_OK;
    wan_vae_unprepare(d);
    maker m = {d, be, err};
    d->made_be = be; /* unprepare frees through it, also after a partial failure */
    cpdit_status st = walk(&m);
    if (st) {
        wan_vae_unprepare(d);
        return st;
    }
    d->made_format = d->format;
    return CPDIT_OK;
}

static void conv_free(const cpdit_backend *be, wv_conv *cv)
{
    be->free((void *)cv->packed);
    be->free(cv->b);
    cv->packed = NULL;
    cv->b = NULL;
}

static void res_free(const cpdit_backend *be, wv_res *r)
{
    be->free(r->g1);
    be->free(r->g2);
    r->g1 = r->g2 = NULL;
    conv_free(be, &r->c1);
    conv_free(be, &r->c2);
    conv_free(be, &r->sc);
}

void wan_vae_unprepare(wan_vae *d)
{
    const cpdit_backend *be = d->made_be;
    if (!be)
        return;
    conv_free(be, &d->post_quant);
    conv_free(be, &d->conv_in);
    for (int r = 0; r < 2; r++)
        res_free(be, &d->mid[r]);
    be->free(d->attn.g);
    d->attn.g = NULL;
    for (int j = 0; j < 3; j++) {
        if (d->attn.w[j])
            be->weight_free(d->attn.w[j]);
        be->free(d->attn.b[j]);
        d->attn.w[j] = NULL;
        d->attn.b[j] = NULL;
    }
    if (d->attn.wo)
        be->weight_free(d->attn.wo);
    be->free(d->attn.bo);
    d->attn.wo = NULL;
    d->attn.bo = NULL;
    for (int i = 0; i < d->n_up; i++) {
        for (int j = 0; j < d->up[i].n_res; j++)
            res_free(be, &d->up[i].res[j]);
        conv_free(be, &d->up[i].time_conv);
        conv_free(be, &d->up[i].resample);
    }
    be->free(d->g_out);
    d->g_out = NULL;
    conv_free(be, &d->conv_out);
    d->made_be = NULL;
}
