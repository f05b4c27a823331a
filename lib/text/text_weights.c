/* text_weights.c — parameters of the text encoders from a safetensors set, with the cache /
 * streaming policy of text_weights.h; activation names; config helpers.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lib/text/text_weights.h"

/* Cache blocks are aligned like the CPU backend's activations (one cache line). */
#define TEXT_CACHE_ALIGN 64

text_encoder_options text_encoder_options_default(void)
{
    text_encoder_options o;
    o.backend = NULL;
    o.attention_kernel = NULL;
    o.cache_bytes = TEXT_ENCODER_DEFAULT_CACHE_BYTES;
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

void text_act_apply(const cpdit_backend *be, text_act act, float *y, const float *x, size_t n)
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

cpdit_status text_weights_open(text_weights *tw, const char *dir, cpdit_error *err)
{
    memset(tw, 0, sizeof *tw);
    tw->where = strdup(dir);
    if (!tw->where)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    cpdit_status st = safetensors_set_open(&tw->set, dir, err);
    if (st) {
        free(tw->where);
        tw->where = NULL;
        return st;
    }
    tw->used = calloc(safetensors_set_count(tw->set) + 1, 1);
    if (!tw->used) {
        text_weights_close(tw);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    }
    return CPDIT_OK;
}

void text_weights_close(text_weights *tw)
{
    if (!tw)
        return;
    safetensors_set_close(tw->set);
    free(tw->where);
    free(tw->used);
    free(tw->cache);
    free(tw->pending);
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

static void shape_text(char *buf, size_t n, const safetensors_tensor *t)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "",
                                 (long long)t->shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
}

cpdit_status text_weights_add(text_weights *tw, text_param *p, const char *name,
                              text_param_kind kind, int64_t rows, int64_t cols,
                              cpdit_error *err)
{
    memset(p, 0, sizeof *p);
    const safetensors_tensor *t = safetensors_set_find(tw->set, name);
    if (!t)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, tw->where, "missing tensor '%s'", name);
    const int want_ndim = cols ? 2 : 1;
    if (t->ndim != want_ndim || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
        char got[128], want[64];
        shape_text(got, sizeof got, t);
        if (cols)
            snprintf(want, sizeof want, "[%lld, %lld]", (long long)rows, (long long)cols);
        else
            snprintf(want, sizeof want, "[%lld]", (long long)rows);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, tw->where,
                               "tensor '%s' has shape %s but config.json implies %s", name, got,
                               want);
    }
    if (!cpdit_dtype_is_float(t->dtype))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, tw->where,
                               "tensor '%s' has dtype %s; expected a float dtype", name,
                               cpdit_dtype_name(t->dtype));
    for (size_t i = 0; i < safetensors_set_count(tw->set); i++)
        if (safetensors_set_tensor_at(tw->set, i) == t)
            tw->used[i] = 1;
    if (tw->n_pending == tw->cap_pending) {
        size_t cap = tw->cap_pending ? 2 * tw->cap_pending : 64;
        text_param **np = realloc(tw->pending, cap * sizeof *np);
        if (!np)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, tw->where, "out of memory");
        tw->pending = np;
        tw->cap_pending = cap;
    }
    tw->pending[tw->n_pending++] = p;
    p->t = t;
    p->kind = kind;
    p->rows = rows;
    p->cols = cols;
    tw->n_params += t->nelem;
    return CPDIT_OK;
}

/* Drop the map pages wholly inside [p, p + bytes): they are re-read from the file if needed. */
static void drop_pages(const void *p, size_t bytes)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + page - 1) / page * page;
    const uintptr_t hi = ((uintptr_t)p + bytes) / page * page;
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static int usable_in_place(const safetensors_tensor *t)
{
    return t->dtype == CPDIT_DTYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0;
}

static size_t round_floats(size_t n)
{
    const size_t q = TEXT_CACHE_ALIGN / sizeof(float);
    return (n + q - 1) / q * q;
}

static cpdit_status convert_into(const safetensors_tensor *t, float *dst, cpdit_error *err)
{
    cpdit_status st = safetensors_tensor_read_f32(t, dst, t->nelem, err);
    if (st)
        return st;
    drop_pages(t->data, t->nbytes);
    return CPDIT_OK;
}

static int has_prefix(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

cpdit_status text_weights_finish(text_weights *tw, size_t cache_bytes,
                                 const char *const *ignore, int n_ignore, cpdit_error *err)
{
    cpdit_status st = CPDIT_OK;
    size_t small = 0, convert = 0, largest = 0;
    for (size_t i = 0; i < tw->n_pending; i++) {
        text_param *p = tw->pending[i];
        const size_t n = p->t->nelem;
        if (p->kind == TEXT_PARAM_SMALL) {
            small += round_floats(n);
        } else if (p->kind == TEXT_PARAM_MATRIX) {
            if (usable_in_place(p->t)) {
                p->f32 = (const float *)p->t->data;
                p->in_map = 1;
            } else {
                convert += round_floats(n);
                if (n > largest)
                    largest = n;
            }
        }
    }
    tw->streaming = convert > 0 && convert > cache_bytes / sizeof(float);
    tw->scratch_floats = tw->streaming ? largest : 0;
    tw->cache_floats = small + (tw->streaming ? 0 : convert);
    if (tw->cache_floats) {
        tw->cache = aligned_alloc(TEXT_CACHE_ALIGN, tw->cache_floats * sizeof(float));
        if (!tw->cache)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, tw->where,
                                   "out of memory for %zu MB of fp32 weights",
                                   tw->cache_floats * sizeof(float) >> 20);
    }
    size_t off = 0;
    for (size_t i = 0; i < tw->n_pending && !st; i++) {
        text_param *p = tw->pending[i];
        if (p->kind == TEXT_PARAM_ROWS || p->in_map ||
            (p->kind == TEXT_PARAM_MATRIX && tw->streaming))
            continue;
        float *dst = tw->cache + off;
        off += round_floats(p->t->nelem);
        st = convert_into(p->t, dst, err);
        p->f32 = dst;
    }
    free(tw->pending);
    tw->pending = NULL;
    tw->n_pending = tw->cap_pending = 0;
    if (st)
        return st;

    for (size_t i = 0; i < safetensors_set_count(tw->set); i++) {
        if (tw->used[i])
            continue;
        const char *name = safetensors_set_tensor_at(tw->set, i)->name;
        int ignored = 0;
        for (int k = 0; k < n_ignore && !ignored; k++)
            ignored = has_prefix(name, ignore[k]);
        if (!ignored)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, tw->where,
                                   "unexpected tensor '%s': config.json and the checkpoint "
                                   "disagree",
                                   name);
    }
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ use */

cpdit_status text_param_get(const text_weights *tw, const text_param *p, float *scratch,
                            const float **out, cpdit_error *err)
{
    if (p->f32) {
        *out = p->f32;
        return CPDIT_OK;
    }
    if (!scratch || p->t->nelem > tw->scratch_floats)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, tw->where,
                               "tensor '%s': no scratch to convert it into", p->t->name);
    cpdit_status st = safetensors_tensor_read_f32(p->t, scratch, p->t->nelem, err);
    if (st)
        return st;
    *out = scratch;
    return CPDIT_OK;
}

void text_param_release(const text_weights *tw, const text_param *p)
{
    if (tw->streaming && p->kind == TEXT_PARAM_MATRIX)
        drop_pages(p->t->data, p->t->nbytes);
}

cpdit_status text_param_gather_rows(const text_param *p, const int32_t *ids, size_t n,
                                    float *dst, cpdit_error *err)
{
    const size_t cols = p->cols ? (size_t)p->cols : 1;
    const size_t es = cpdit_dtype_size(p->t->dtype);
    for (size_t r = 0; r < n; r++) {
        const char *src = (const char *)p->t->data + (size_t)ids[r] * cols * es;
        cpdit_status st = cpdit_dtype_to_f32(dst + r * cols, src, p->t->dtype, cols, err);
        if (st)
            return cpdit_error_prefix_where(err, p->t->file);
    }
    return CPDIT_OK;
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
