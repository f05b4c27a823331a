/* text_weights.c — parameters of the text encoders through the weight loader, with the
 * resident / streaming policy of text_weights.h; activation names; config helpers.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text/text_weights.h"


text_encoder_options text_encoder_options_default(void)
{
    text_encoder_options o;
    o.backend = NULL;
    o.attention_kernel = NULL;
    o.cache_bytes = TEXT_ENCODER_DEFAULT_CACHE_BYTES;
    o.weight_format = CPDIT_WEIGHT_NATIVE;
    o.arena = NULL;
    return o;
}

/* ------------------------------------------------------------------ activations */

static const struct {
    const char *name;
    text_act act;
} ACT_NAMES[] = {
    {"relu", TEXT_ACT_RELU},
    {"gelu", TEXT_ACT_GELU_ERF},
    {"gelu_new", TEXT_ACT_GELU_TANH},
    {"gelu_pytorch_tanh", TEXT_ACT_GELU_TANH},
    {"quick_gelu", TEXT_ACT_QUICK_GELU},
    {"silu", TEXT_ACT_SILU},
    {"swish", TEXT_ACT_SILU},
};

text_act text_act_from_name(const char *name)
{
    if (!name)
        return TEXT_ACT_INVALID;
    for (size_t i = 0; i < sizeof ACT_NAMES / sizeof ACT_NAMES[0]; i++)
        if (!strcmp(name, ACT_NAMES[i].name))
            return ACT_NAMES[i].act;
    return TEXT_ACT_INVALID;
}

const char *text_act_name(text_act act)
{
    for (size_t i = 0; i < sizeof ACT_NAMES / sizeof ACT_NAMES[0]; i++)
        if (ACT_NAMES[i].act == act)
            return ACT_NAMES[i].name;
    return "invalid";
}

void text_act_apply(const cpdit_backend *be, text_act act, cpdit_buf *y, const cpdit_buf *x,
                    size_t n)
{
    static const cpdit_act kinds[] = {
        [TEXT_ACT_RELU] = CPDIT_ACT_RELU,
        [TEXT_ACT_GELU_ERF] = CPDIT_ACT_GELU_ERF,
        [TEXT_ACT_GELU_TANH] = CPDIT_ACT_GELU_TANH,
        [TEXT_ACT_QUICK_GELU] = CPDIT_ACT_QUICK_GELU,
        [TEXT_ACT_SILU] = CPDIT_ACT_SILU,
    };
    if (act > TEXT_ACT_INVALID && act <= TEXT_ACT_SILU)
        be->act(kinds[act], y, x, n);
}

cpdit_status text_backend_resolve(const text_encoder_options *opt, const cpdit_backend **be,
                                  const cpdit_attention_kernel **attn, cpdit_error *err)
{
    const cpdit_backend *b = opt && opt->backend ? opt->backend : cpdit_backend_default();
    cpdit_status st = cpdit_attention_kernel_find(b, opt ? opt->attention_kernel : NULL, attn,
                                                  err);
    if (!st)
        *be = b;
    return st;
}

cpdit_status text_config_load(const char *dir, model_config *cfg, cpdit_error *err)
{
    char *path = NULL;
    if (asprintf(&path, "%s/config.json", dir) < 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    cpdit_status st = model_config_load_file(cfg, path, err);
    free(path);
    return st;
}

/* ------------------------------------------------------------------ open / close */

cpdit_status text_weights_open(text_weights *tw, const char *dir, const cpdit_backend *be,
                               cpdit_error *err)
{
    memset(tw, 0, sizeof *tw);
    tw->where = strdup(dir);
    if (!tw->where)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    if (pthread_mutex_init(&tw->lock, NULL)) {
        text_weights_close(tw);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot make a lock");
    }
    tw->lock_made = 1;
    cpdit_status st = safetensors_set_open(&tw->set, dir, err);
    if (!st)
        st = weight_loader_open(&tw->wl, tw->set, dir, be, err);
    if (st) {
        text_weights_close(tw);
        return st;
    }
    tw->wl_open = 1;
    return CPDIT_OK;
}

void text_weights_close(text_weights *tw)
{
    if (!tw)
        return;
    if (tw->wl_open) /* joins a prefetch still running */
        weight_loader_close(&tw->wl);
    if (tw->lock_made)
        pthread_mutex_destroy(&tw->lock);
    safetensors_set_close(tw->set);
    free(tw->where);
    memset(tw, 0, sizeof *tw);
}

const safetensors_tensor *text_weights_find_any(const text_weights *tw, const char *const *names,
                                                int n)
{
    for (int i = 0; i < n; i++) {
        const safetensors_tensor *t = safetensors_set_find(tw->set, names[i]);
        if (t)
            return t;
    }
    return NULL;
}

/* ------------------------------------------------------------------ registration */

cpdit_status text_weights_add(text_weights *tw, text_param *p, int layer, const char *name,
                              text_param_kind kind, int64_t rows, int64_t cols,
                              cpdit_error *err)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    const weight_kind wk = kind == TEXT_PARAM_MATRIX  ? WEIGHT_MATRIX
                           : kind == TEXT_PARAM_ROWS  ? WEIGHT_ROWS
                           : kind == TEXT_PARAM_HOST  ? WEIGHT_HOST_VECTOR
                                                      : WEIGHT_VECTOR;
    void *dst = kind == TEXT_PARAM_MATRIX                            ? (void *)&p->w
                : kind == TEXT_PARAM_SMALL || kind == TEXT_PARAM_HOST ? (void *)&p->f32
                                                                     : NULL;
    /* a SMALL table (T5's relative bias) is a vector of all its values */
    cpdit_status st = weight_loader_add(&tw->wl, layer, wk, name, name, rows, 0, rows, cols, 0,
                                        dst, "config.json implies", "", &p->wp, err);
    if (st)
        return st;
    tw->n_params += p->wp->nelem;
    return CPDIT_OK;
}

cpdit_status text_model_load(const char *dir, const text_encoder_options *opt,
                             const text_model_parts *parts, void *model,
                             const cpdit_backend **be, const cpdit_attention_kernel **attn,
                             text_weights *tw, cpdit_error *err)
{
    const text_encoder_options defaults = text_encoder_options_default();
    if (!opt)
        opt = &defaults;
    model_config cfg = {0};
    cpdit_status st = text_backend_resolve(opt, be, attn, err);
    if (!st)
        st = text_config_load(dir, &cfg, err);
    if (!st)
        st = parts->read_config(model, &cfg, err);
    model_config_free(&cfg);
    if (!st)
        st = text_weights_open(tw, dir, *be, err);
    if (!st)
        st = parts->register_weights(model, err);
    if (!st)
        st = text_weights_finish(tw, opt, parts->ignore, parts->n_ignore, err);
    return st;
}

cpdit_status text_weights_finish(text_weights *tw, const text_encoder_options *opt,
                                 const char *const *ignore, int n_ignore, cpdit_error *err)
{
    const char *unused = weight_loader_first_unused(&tw->wl, ignore, n_ignore);
    if (unused)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, tw->where,
                               "unexpected tensor '%s': config.json and the checkpoint "
                               "disagree",
                               unused);
    const size_t budget = opt ? opt->cache_bytes : TEXT_ENCODER_DEFAULT_CACHE_BYTES;
    const cpdit_weight_format fmt = opt ? opt->weight_format : CPDIT_WEIGHT_NATIVE;
    if (opt && opt->arena)
        weight_loader_set_arena(&tw->wl, opt->arena);
    cpdit_status st = weight_loader_prepare(&tw->wl, budget, fmt, err);
    if (st)
        return st;
    tw->streaming = !tw->wl.resident && tw->wl.matrix_bytes > 0;
    /* streaming: layer i + 1 is read and packed on a helper thread while layer i computes
     * (two slots of the largest layer) */
    weight_loader_set_prefetch(&tw->wl, tw->streaming);
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ use */

/* The loader's state changes while streaming: forwards hold the lock, so the const model
 * handed to them is changed only by one at a time. */
static text_weights *mutable_weights(const text_weights *tw)
{
    return (text_weights *)tw;
}

void text_weights_begin(const text_weights *tw)
{
    if (tw->streaming)
        pthread_mutex_lock(&mutable_weights(tw)->lock);
}

void text_weights_end(const text_weights *tw)
{
    if (tw->streaming)
        pthread_mutex_unlock(&mutable_weights(tw)->lock);
}

cpdit_status text_weights_use_layer(const text_weights *tw, int layer, cpdit_error *err)
{
    if (!tw->streaming)
        return CPDIT_OK;
    return weight_loader_acquire(&mutable_weights(tw)->wl, layer, err);
}

const cpdit_weight *text_param_weight(const text_weights *tw, const text_param *p,
                                      cpdit_error *err)
{
    if (!p->w)
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, tw->where,
                        "weight '%s' used outside its layer (layer %d is not in use)",
                        p->wp->name, p->wp->group);
    return p->w;
}

void text_weights_stats(const text_weights *tw, text_weight_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!tw->wl_open)
        return;
    out->streaming = tw->streaming;
    out->prefetch = tw->wl.prefetch;
    out->bytes = weight_loader_bytes(&tw->wl);
    out->create_s = tw->wl.create_seconds;
    out->stall_s = tw->wl.stall_seconds;
    out->bytes_read = tw->wl.bytes_read;
    out->prefetched = tw->wl.prefetched_groups;
}

cpdit_status text_param_gather_rows(const text_param *p, const int32_t *ids, size_t n,
                                    float *dst, cpdit_error *err)
{
    return weight_loader_gather_rows(p->wp, ids, n, dst, err);
}

/* ------------------------------------------------------------------ config helpers */

cpdit_status text_config_int(const model_config *cfg, const char *key, int def, int lo, int hi,
                             int *out, cpdit_error *err)
{
    cpdit_status st = model_config_get_int_default(cfg, key, def, out, err);
    if (st)
        return st;
    if (*out < lo || *out > hi)
        return model_config_key_error(cfg, key, err, "%d is out of range [%d, %d]", *out, lo,
                                      hi);
    return CPDIT_OK;
}

cpdit_status text_config_eps(const model_config *cfg, const char *key, double def, float *out,
                             cpdit_error *err)
{
    double v;
    cpdit_status st = model_config_get_double_default(cfg, key, def, &v, err);
    if (st)
        return st;
    if (!(v > 0.0 && v < 1.0))
        return model_config_key_error(cfg, key, err, "%g is not an epsilon in (0, 1)", v);
    *out = (float)v;
    return CPDIT_OK;
}

cpdit_status text_config_check_type(const model_config *cfg, const char *const *accepted,
                                    int n, cpdit_error *err)
{
    const char *type = NULL;
    cpdit_status st = model_config_get_string_default(cfg, "model_type", NULL, &type, err);
    if (st || !type)
        return st;
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(type, accepted[i]))
            return CPDIT_OK;
        if (used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s\"%s\"", i ? ", " : "",
                                     accepted[i]);
    }
    return model_config_key_error(cfg, "model_type", err, "\"%s\" is not supported here "
                                  "(expected %s)", type, list);
}
