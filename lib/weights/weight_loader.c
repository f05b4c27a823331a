/* weight_loader.c — registration and checks, vectors to fp32, matrices through the backend
 * (resident in one arena, or streamed per group). See weight_loader.h.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "lib/weights/weight_loader.h"
#include "lib/weights/weight_stream_share.h"

/* Storage blocks inside the arena start on this boundary (the backend's alignment). */
#define WEIGHT_ARENA_ALIGN 64
/* Part of the available memory the default budget leaves for activations and the rest. */
#define WEIGHT_BUDGET_RESERVE_PERCENT 20

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void weight_drop_pages(const void *p, size_t bytes)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + page - 1) / page * page;
    const uintptr_t hi = ((uintptr_t)p + bytes) / page * page;
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Ask the kernel to read [p, p + bytes) of a map ahead (asynchronously): the disk reads the
 * next weights while the current ones are packed. */
static void weight_read_ahead(const void *p, size_t bytes)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = (uintptr_t)p / page * page;
    const uintptr_t hi = ((uintptr_t)p + bytes + page - 1) / page * page;
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_WILLNEED);
}

size_t weight_budget_default(int ranks_not_sharing)
{
    unsigned long long kb = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
                break;
        fclose(f);
    }
    if (!kb)
        return (size_t)4 << 30; /* unknown: 4 GiB */
    if (ranks_not_sharing < 1)
        ranks_not_sharing = 1;
    const unsigned long long bytes = kb * 1024ull * (100 - WEIGHT_BUDGET_RESERVE_PERCENT) / 100;
    return (size_t)(bytes / (unsigned long long)ranks_not_sharing);
}

/* ------------------------------------------------------------------ open / close */

cpdit_status weight_loader_open(weight_loader *wl, safetensors_set *set, const char *where,
                                const cpdit_backend *be, cpdit_error *err)
{
    memset(wl, 0, sizeof *wl);
    wl->set = set;
    wl->be = be ? be : cpdit_backend_default();
    wl->current_group = -1;
    wl->current_slot = 1;
    wl->stream_sharers = 1;
    wl->where = strdup(where ? where : "weights");
    wl->used = calloc((set ? safetensors_set_count(set) : 0) + 1, 1);
    if (!wl->where || !wl->used) {
        weight_loader_close(wl);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    }
    return CPDIT_OK;
}

cpdit_status weight_loader_open_tensors(weight_loader *wl, weight_tensor_find find, void *ctx,
                                        const char *where, const cpdit_backend *be,
                                        cpdit_error *err)
{
    cpdit_status st = weight_loader_open(wl, NULL, where, be, err);
    wl->find = find;
    wl->find_ctx = ctx;
    return st;
}

/* The prefetch thread: one group's matrices made ahead (next_w), its status and costs. */
struct weight_prefetch {
    pthread_t thread;
    int running;      /* started and not joined */
    int group;        /* the group it makes */
    char *slot;       /* into this streaming slot */
    const weight_loader *wl;
    cpdit_status st;
    cpdit_error err;
    double seconds;   /* its time reading and converting */
    unsigned long long bytes;
};

static void prefetch_join(weight_loader *wl);
static void prefetch_discard(weight_loader *wl);

void weight_loader_close(weight_loader *wl)
{
    if (!wl)
        return;
    prefetch_discard(wl);
    free(wl->pf);
    weight_stream_share_close(wl);
    for (size_t i = 0; i < wl->n_params; i++) {
        if (wl->params[i]->w)
            wl->be->weight_free(wl->params[i]->w);
        if (wl->params[i]->conv)
            wl->be->free(wl->params[i]->conv);
        free(wl->params[i]);
    }
    free(wl->params);
    for (int k = 0; k < 2; k++)
        if (wl->slot[k])
            wl->be->free(wl->slot[k]);
    if (wl->arena && wl->arena_shared)
        wl->arena_ops.release(wl->arena_ops.ctx, wl->arena, wl->arena_bytes);
    else
        free(wl->arena);
    free(wl->vectors);
    if (wl->be_vectors)
        wl->be->free(wl->be_vectors);
    free(wl->used);
    free(wl->where);
    memset(wl, 0, sizeof *wl);
}

cpdit_status weight_loader_set_backend(weight_loader *wl, const cpdit_backend *be,
                                       cpdit_error *err)
{
    if (!be || be == wl->be)
        return CPDIT_OK;
    if (wl->prepared)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, wl->where,
                               "the weights were made for the %s backend; they cannot be used "
                               "by the %s backend in the same process (open the model again)",
                               wl->be->name, be->name);
    wl->be = be;
    return CPDIT_OK;
}

void weight_loader_set_arena(weight_loader *wl, const weight_arena_ops *ops)
{
    if (ops) {
        wl->arena_ops = *ops;
        wl->have_arena_ops = 1;
    } else {
        wl->have_arena_ops = 0;
    }
}

/* ------------------------------------------------------------------ registration */

static const safetensors_tensor *find_tensor(const weight_loader *wl, const char *name)
{
    return wl->set ? safetensors_set_find(wl->set, name) : wl->find(wl->find_ctx, name);
}

/* The tensor disk_name (NULL: name) holding parameter name, or NULL with the error (INPUT)
 * filled. */
static const safetensors_tensor *lookup(const weight_loader *wl, const char *disk_name,
                                        const char *name, cpdit_error *err)
{
    if (!disk_name)
        disk_name = name;
    const safetensors_tensor *t = find_tensor(wl, disk_name);
    if (t)
        return t;
    if (strcmp(disk_name, name))
        cpdit_error_set(err, CPDIT_ERR_INPUT, wl->where,
                        "missing tensor '%s' (holds diffusers' '%s')", disk_name, name);
    else
        cpdit_error_set(err, CPDIT_ERR_INPUT, wl->where, "missing tensor '%s'", disk_name);
    return NULL;
}

/* The shape error: t is not want (its text); hint appended. */
static cpdit_status shape_error(const weight_loader *wl, const safetensors_tensor *t,
                                const char *name, const char *want, const char *needs,
                                const char *hint, cpdit_error *err)
{
    char got[128];
    safetensors_shape_text(got, sizeof got, t->shape, t->ndim, "[]");
    char alias[CPDIT_ERROR_WHAT_MAX / 4] = "";
    if (strcmp(t->name, name))
        snprintf(alias, sizeof alias, " (diffusers' '%s')", name);
    return cpdit_error_set(err, CPDIT_ERR_INPUT, wl->where, "tensor '%s'%s has shape %s but %s %s%s",
                           t->name, alias, got, needs ? needs : "the model needs", want,
                           hint ? hint : "");
}

/* A parameter of kind over nelem values of t from elem_offset on, after the dtype check; the
 * tensor counts as used. */
static cpdit_status register_param(weight_loader *wl, const safetensors_tensor *t,
                                   weight_kind kind, int group, const char *name,
                                   size_t elem_offset, size_t nelem, weight_param **out,
                                   cpdit_error *err)
{
    if (!cpdit_dtype_is_float(t->dtype) || t->dtype == CPDIT_DTYPE_F64)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, wl->where,
                               "tensor '%s' has dtype %s; expected a float dtype (F32, F16, "
                               "BF16, F8)",
                               t->name, cpdit_dtype_name(t->dtype));
    for (size_t i = 0; wl->set && i < safetensors_set_count(wl->set); i++)
        if (safetensors_set_tensor_at(wl->set, i) == t)
            wl->used[i] = 1;
    if (wl->n_params == wl->cap_params) {
        const size_t cap = wl->cap_params ? 2 * wl->cap_params : 64;
        weight_param **np = realloc(wl->params, cap * sizeof *np);
        if (!np)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where, "out of memory");
        wl->params = np;
        wl->cap_params = cap;
    }
    weight_param *p = calloc(1, sizeof *p);
    if (!p)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where, "out of memory");
    wl->params[wl->n_params++] = p;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->t = t;
    p->elem_offset = elem_offset;
    p->nelem = nelem;
    p->kind = kind;
    p->group = group;
    if (group + 1 > wl->n_groups)
        wl->n_groups = group + 1;
    wl->n_values += nelem;
    *out = p;
    return CPDIT_OK;
}

cpdit_status weight_loader_add(weight_loader *wl, int group, weight_kind kind, const char *name,
                               const char *disk_name, int64_t disk_rows, int64_t row_off,
                               int64_t rows, int64_t cols, int swap, void *dst,
                               const char *needs, const char *hint, weight_param **out,
                               cpdit_error *err)
{
    if (out)
        *out = NULL;
    const safetensors_tensor *t = lookup(wl, disk_name, name, err);
    if (!t)
        return CPDIT_ERR_INPUT;
    const int want_ndim = cols ? 2 : 1;
    /* a matrix may be stored as a 1x1 convolution's weight (rows, cols, 1, 1) */
    const int as_conv1x1 = kind == WEIGHT_MATRIX && t->ndim == 4 && t->shape[2] == 1 &&
                           t->shape[3] == 1;
    if ((t->ndim != want_ndim && !as_conv1x1) || t->shape[0] != disk_rows ||
        (cols && t->shape[1] != cols)) {
        const int64_t shape[2] = {disk_rows, cols};
        char want[64];
        safetensors_shape_text(want, sizeof want, shape, want_ndim, "[]");
        return shape_error(wl, t, name, want, needs, hint, err);
    }
    if (rows > INT32_MAX || cols > INT32_MAX)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, wl->where, "tensor '%s' is too large",
                               t->name);
    const size_t row_elems = cols ? (size_t)cols : 1;
    weight_param *p;
    cpdit_status st = register_param(wl, t, kind, group, name, (size_t)row_off * row_elems,
                                     (size_t)rows * row_elems, &p, err);
    if (st)
        return st;
    p->swap_halves = swap;
    p->rows = (int)rows;
    p->cols = (int)cols;
    if (kind == WEIGHT_MATRIX)
        p->wdst = dst;
    else if (kind == WEIGHT_VECTOR || kind == WEIGHT_HOST_VECTOR)
        p->fdst = dst;
    if (out)
        *out = p;
    return CPDIT_OK;
}

cpdit_status weight_loader_add_shaped(weight_loader *wl, int group, weight_kind kind,
                                      const char *name, const int64_t *shape, int ndim,
                                      int64_t rows, int64_t cols, void *dst, const char *needs,
                                      const char *hint, cpdit_error *err)
{
    const safetensors_tensor *t = lookup(wl, name, name, err);
    if (!t)
        return CPDIT_ERR_INPUT;
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char want[128];
        safetensors_shape_text(want, sizeof want, shape, ndim, "[]");
        return shape_error(wl, t, name, want, needs, hint, err);
    }
    const size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    if (rows > INT32_MAX || cols > INT32_MAX || n != t->nelem)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, wl->where,
                               "tensor '%s': %zu values cannot be a (%lld, %lld) parameter",
                               t->name, t->nelem, (long long)rows, (long long)cols);
    weight_param *p;
    cpdit_status st = register_param(wl, t, kind, group, name, 0, n, &p, err);
    if (st)
        return st;
    p->rows = (int)rows;
    p->cols = (int)cols;
    if (kind == WEIGHT_MATRIX)
        p->wdst = dst;
    else if (kind == WEIGHT_VECTOR || kind == WEIGHT_HOST_VECTOR)
        p->fdst = dst;
    return CPDIT_OK;
}

cpdit_status weight_loader_add_conv(weight_loader *wl, const char *name, const char *disk_name,
                                    int cout, int cin, int k, const float **dst,
                                    const char *needs, weight_param **out, cpdit_error *err)
{
    if (out)
        *out = NULL;
    const safetensors_tensor *t = lookup(wl, disk_name, name, err);
    if (!t)
        return CPDIT_ERR_INPUT;
    if (t->ndim != 4 || t->shape[0] != cout || t->shape[1] != cin || t->shape[2] != k ||
        t->shape[3] != k) {
        const int64_t shape[4] = {cout, cin, k, k};
        char want[96];
        safetensors_shape_text(want, sizeof want, shape, 4, "[]");
        return shape_error(wl, t, name, want, needs, "", err);
    }
    weight_param *p;
    cpdit_status st = register_param(wl, t, WEIGHT_CONV, 0, name, 0, t->nelem, &p, err);
    if (st)
        return st;
    p->rows = cout;
    p->cols = cin;
    p->conv_k = k;
    p->cdst = dst;
    if (out)
        *out = p;
    return CPDIT_OK;
}

static int has_prefix(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

const char *weight_loader_first_unused(const weight_loader *wl, const char *const *ignore,
                                       int n_ignore)
{
    for (size_t i = 0; wl->set && i < safetensors_set_count(wl->set); i++) {
        if (wl->used[i])
            continue;
        const char *name = safetensors_set_tensor_at(wl->set, i)->name;
        int ignored = 0;
        for (int k = 0; k < n_ignore && !ignored; k++)
            ignored = has_prefix(name, ignore[k]);
        if (!ignored)
            return name;
    }
    return NULL;
}

/* ------------------------------------------------------------------ creation */

static const char *param_data(const weight_param *p)
{
    return (const char *)p->t->data + p->elem_offset * cpdit_dtype_size(p->t->dtype);
}

static size_t round_up(size_t n)
{
    return (n + WEIGHT_ARENA_ALIGN - 1) / WEIGHT_ARENA_ALIGN * WEIGHT_ARENA_ALIGN;
}

static cpdit_weight_desc desc_of(const weight_loader *wl, const weight_param *p)
{
    cpdit_weight_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = p->t->dtype;
    d.rows = p->rows;
    d.cols = p->cols;
    d.data = param_data(p);
    d.data_persists = !p->swap_halves;
    d.format = wl->format;
    return d;
}

/* Create p's weight into storage (NULL: the backend allocates); fill as weight_cpu's. */
cpdit_status weight_param_create(const weight_loader *wl, const weight_param *p, void *storage,
                                 int fill, cpdit_weight **out, cpdit_error *err)
{
    cpdit_weight_desc d = desc_of(wl, p);
    d.storage = storage;
    d.fill = fill;
    void *tmp = NULL;
    if (p->swap_halves && (!storage || fill)) {
        /* the two halves in diffusers' order, as stored bytes */
        const size_t es = cpdit_dtype_size(p->t->dtype), h = p->nelem / 2;
        tmp = malloc(p->nelem * es);
        if (!tmp)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where, "out of memory");
        memcpy(tmp, param_data(p) + h * es, (p->nelem - h) * es);
        memcpy((char *)tmp + (p->nelem - h) * es, param_data(p), h * es);
        d.data = tmp;
    }
    cpdit_status st = wl->be->weight_create(out, &d, err);
    free(tmp);
    if (st)
        return cpdit_error_prefix_where(err, p->t->file);
    d.data = param_data(p);
    /* not used in place: drop the map's pages (never a caller's host tensors) */
    if (wl->set && wl->be->weight_bytes(&d) && (!storage || fill))
        weight_drop_pages(param_data(p), p->nelem * cpdit_dtype_size(p->t->dtype));
    return CPDIT_OK;
}

cpdit_status weight_loader_make(const weight_loader *wl, const weight_param *p,
                                cpdit_weight **out, cpdit_error *err)
{
    return weight_param_create(wl, p, NULL, 1, out, err);
}

static cpdit_status convert_vector(const weight_param *p, float *dst, cpdit_error *err)
{
    const safetensors_tensor *t = p->t;
    const size_t es = cpdit_dtype_size(t->dtype);
    const char *base = param_data(p);
    cpdit_status st;
    if (p->swap_halves) {
        const size_t h = p->nelem / 2;
        st = cpdit_dtype_to_f32(dst, base + h * es, t->dtype, p->nelem - h, err);
        if (!st)
            st = cpdit_dtype_to_f32(dst + (p->nelem - h), base, t->dtype, h, err);
    } else {
        st = cpdit_dtype_to_f32(dst, base, t->dtype, p->nelem, err);
    }
    return st ? cpdit_error_prefix_where(err, t->file) : CPDIT_OK;
}

static int vector_in_place(const weight_param *p)
{
    return p->t->dtype == CPDIT_DTYPE_F32 && !p->swap_halves &&
           (uintptr_t)param_data(p) % sizeof(float) == 0;
}

/* A vector the backend's ops read: in backend memory (HOST_VECTOR: read by host code). */
static int vector_on_backend(const weight_loader *wl, const weight_param *p)
{
    return p->kind == WEIGHT_VECTOR && !wl->be->host_memory;
}

static void publish(weight_param *p)
{
    if (p->wdst)
        *p->wdst = p->w;
}

static int is_vector(const weight_param *p)
{
    return p->kind == WEIGHT_VECTOR || p->kind == WEIGHT_HOST_VECTOR;
}

/* Host fp32 values of every vector (in place from the map when it holds aligned fp32); then,
 * for a backend with its own memory, the WEIGHT_VECTORs copied into one block of it. */
static cpdit_status prepare_vectors(weight_loader *wl, cpdit_error *err)
{
    size_t floats = 0, be_floats = 0;
    for (size_t i = 0; i < wl->n_params; i++) {
        const weight_param *p = wl->params[i];
        if (is_vector(p) && !vector_in_place(p) && !vector_on_backend(wl, p))
            floats += round_up(p->nelem * sizeof(float)) / sizeof(float);
        if (vector_on_backend(wl, p))
            be_floats += round_up(p->nelem * sizeof(float)) / sizeof(float);
    }
    if (floats) {
        wl->vectors = aligned_alloc(WEIGHT_ARENA_ALIGN, floats * sizeof(float));
        if (!wl->vectors)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where,
                                   "out of memory for %zu MiB of fp32 vectors",
                                   floats * sizeof(float) >> 20);
    }
    if (be_floats) {
        wl->be_vectors = wl->be->alloc(be_floats * sizeof(float));
        if (!wl->be_vectors)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where,
                                   "out of %s memory for %zu MiB of fp32 vectors", wl->be->name,
                                   be_floats * sizeof(float) >> 20);
        wl->be_vector_bytes = be_floats * sizeof(float);
    }
    size_t at = 0, be_at = 0;
    for (size_t i = 0; i < wl->n_params; i++) {
        weight_param *p = wl->params[i];
        if (!is_vector(p))
            continue;
        if (vector_on_backend(wl, p)) { /* converted on the host, uploaded, host copy gone */
            float *tmp = vector_in_place(p) ? NULL : malloc(p->nelem * sizeof(float));
            if (!vector_in_place(p) && !tmp)
                return cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where, "out of memory");
            if (tmp && convert_vector(p, tmp, err)) {
                free(tmp);
                return err ? err->status : CPDIT_ERR_INPUT;
            }
            float *dst = (float *)wl->be_vectors + be_at;
            wl->be->upload(dst, tmp ? tmp : (const float *)param_data(p),
                           p->nelem * sizeof(float));
            free(tmp);
            p->f32 = dst;
            be_at += round_up(p->nelem * sizeof(float)) / sizeof(float);
        } else if (vector_in_place(p)) {
            p->f32 = (const float *)param_data(p);
        } else {
            if (convert_vector(p, wl->vectors + at, err))
                return err ? err->status : CPDIT_ERR_INPUT;
            p->f32 = wl->vectors + at;
            at += round_up(p->nelem * sizeof(float)) / sizeof(float);
        }
        if (p->fdst)
            *p->fdst = p->f32;
    }
    return CPDIT_OK;
}

/* The convolutions' packed weights, made by the backend from the stored data (through fp32
 * and conv2d_pack for a backend that packs only fp32); always resident. */
static cpdit_status prepare_convs(weight_loader *wl, cpdit_error *err)
{
    const cpdit_backend *be = wl->be;
    const double t0 = now_seconds();
    for (size_t i = 0; i < wl->n_params; i++) {
        weight_param *p = wl->params[i];
        if (p->kind != WEIGHT_CONV)
            continue;
        const size_t bytes = p->nelem * cpdit_dtype_size(p->t->dtype);
        if (be->conv2d_pack_stored) {
            p->conv = be->conv2d_pack_stored(param_data(p), p->t->dtype, p->rows, p->cols,
                                             p->conv_k, wl->format);
        } else {
            float *tmp = malloc(p->nelem * sizeof *tmp);
            if (tmp && convert_vector(p, tmp, err)) {
                free(tmp);
                return err ? err->status : CPDIT_ERR_INPUT;
            }
            p->conv = tmp ? be->conv2d_pack(tmp, p->rows, p->cols, p->conv_k) : NULL;
            free(tmp);
        }
        if (!p->conv)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where,
                                   "out of %s memory packing the convolution '%s'", be->name,
                                   p->name);
        wl->bytes_read += bytes;
        if (wl->set) /* packed: the map's pages are not needed any more */
            weight_drop_pages(param_data(p), bytes);
        if (p->cdst)
            *p->cdst = p->conv;
    }
    wl->create_seconds += now_seconds() - t0;
    return CPDIT_OK;
}

static cpdit_status create_resident(weight_loader *wl, cpdit_error *err)
{
    int fill = 1;
    /* a node-shared host block serves a backend whose weights live in host memory */
    if (wl->matrix_bytes && wl->have_arena_ops && wl->be->host_memory) {
        wl->arena = wl->arena_ops.alloc(wl->arena_ops.ctx, wl->matrix_bytes, &fill, err);
        if (!wl->arena)
            return err ? err->status : CPDIT_ERR_RUNTIME;
        wl->arena_shared = 1;
        wl->arena_bytes = wl->matrix_bytes;
    }
    cpdit_status st = CPDIT_OK;
    const double t0 = now_seconds();
    /* the weights fit: read them all ahead (the page cache keeps them for the next run; the
     * packing below overlaps the reads) */
    for (size_t i = 0; wl->set && fill && i < wl->n_params; i++)
        if (wl->params[i]->kind == WEIGHT_MATRIX)
            weight_read_ahead(param_data(wl->params[i]),
                              wl->params[i]->nelem * cpdit_dtype_size(wl->params[i]->t->dtype));
    for (size_t i = 0; i < wl->n_params && !st; i++) {
        weight_param *p = wl->params[i];
        if (p->kind != WEIGHT_MATRIX)
            continue;
        void *storage = wl->arena ? (char *)wl->arena + p->arena_offset : NULL;
        st = weight_param_create(wl, p, storage, fill, &p->w, err);
        if (!st && fill)
            wl->bytes_read += p->nelem * cpdit_dtype_size(p->t->dtype);
        publish(p);
    }
    wl->create_seconds += now_seconds() - t0;
    /* the sharing processes meet even after a failure here, so that none waits forever */
    if (wl->arena_shared && wl->arena_ops.ready(wl->arena_ops.ctx, st ? NULL : err) && !st)
        st = err ? err->status : CPDIT_ERR_RUNTIME;
    return st;
}

cpdit_status weight_loader_prepare(weight_loader *wl, size_t budget, cpdit_weight_format format,
                                   cpdit_error *err)
{
    if (wl->prepared)
        return CPDIT_OK;
    wl->format = format;
    cpdit_status st = prepare_vectors(wl, err);
    if (!st)
        st = prepare_convs(wl, err);
    if (st)
        return st;
    size_t *group_bytes = calloc((size_t)(wl->n_groups ? wl->n_groups : 1), sizeof *group_bytes);
    if (!group_bytes)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where, "out of memory");
    wl->matrix_bytes = 0;
    for (size_t i = 0; i < wl->n_params; i++) {
        weight_param *p = wl->params[i];
        if (p->kind != WEIGHT_MATRIX)
            continue;
        const cpdit_weight_desc d = desc_of(wl, p);
        const size_t b = round_up(wl->be->weight_bytes(&d));
        p->arena_offset = wl->matrix_bytes;
        p->group_offset = group_bytes[p->group];
        wl->matrix_bytes += b;
        group_bytes[p->group] += b;
    }
    wl->largest_group_bytes = 0;
    for (int g = 0; g < wl->n_groups; g++)
        if (group_bytes[g] > wl->largest_group_bytes)
            wl->largest_group_bytes = group_bytes[g];
    free(group_bytes);
    wl->resident = wl->matrix_bytes <= budget;
    if (wl->have_arena_ops && wl->arena_ops.agree) /* sharing processes decide together */
        wl->resident = wl->arena_ops.agree(wl->arena_ops.ctx, wl->resident);
    if (wl->resident && (st = create_resident(wl, err)))
        return st;
    wl->prepared = 1;
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ streaming, prefetch */

static void *prefetch_main(void *arg)
{
    struct weight_prefetch *pf = arg;
    const weight_loader *wl = pf->wl;
    const double t0 = now_seconds();
    for (size_t i = 0; i < wl->n_params && !pf->st; i++) {
        weight_param *p = wl->params[i];
        if (p->kind != WEIGHT_MATRIX || p->group != pf->group)
            continue;
        pf->st = weight_param_create(wl, p, pf->slot + p->group_offset, 1, &p->next_w, &pf->err);
        pf->bytes += p->nelem * cpdit_dtype_size(p->t->dtype);
    }
    pf->seconds = now_seconds() - t0;
    return NULL;
}

/* Wait for the thread (if running) and account for its work. */
static void prefetch_join(weight_loader *wl)
{
    struct weight_prefetch *pf = wl->pf;
    if (!pf || !pf->running)
        return;
    const double t0 = now_seconds();
    pthread_join(pf->thread, NULL);
    pf->running = 0;
    wl->stall_seconds += now_seconds() - t0;
    wl->create_seconds += pf->seconds;
    wl->bytes_read += pf->bytes;
}

/* Join, and free what it made (a group nobody asked for, or after a failure). */
static void prefetch_discard(weight_loader *wl)
{
    if (!wl->pf)
        return;
    prefetch_join(wl);
    for (size_t i = 0; i < wl->n_params; i++)
        if (wl->params[i]->next_w) {
            wl->be->weight_free(wl->params[i]->next_w);
            wl->params[i]->next_w = NULL;
        }
    wl->pf->group = -1;
}

/* Streaming slot k (backend memory, made on first use); NULL when out of memory. */
static char *slot_get(weight_loader *wl, int k)
{
    if (!wl->slot[k] && wl->largest_group_bytes)
        wl->slot[k] = wl->be->alloc(wl->largest_group_bytes);
    return wl->slot[k];
}

/* Start making group g ahead, into the slot the current group does not use (nothing when it
 * cannot start: acquire makes it then). */
static void prefetch_start(weight_loader *wl, int g)
{
    if (!wl->pf && !(wl->pf = calloc(1, sizeof *wl->pf)))
        return;
    struct weight_prefetch *pf = wl->pf;
    pf->slot = slot_get(wl, 1 - wl->current_slot);
    if (!pf->slot)
        return;
    pf->wl = wl;
    pf->group = g;
    pf->st = CPDIT_OK;
    cpdit_error_clear(&pf->err);
    pf->seconds = 0.0;
    pf->bytes = 0;
    pf->running = pthread_create(&pf->thread, NULL, prefetch_main, pf) == 0;
    if (!pf->running)
        pf->group = -1;
}

void weight_loader_set_prefetch(weight_loader *wl, int on)
{
    if (!on)
        prefetch_discard(wl);
    wl->prefetch = on != 0;
}

void weight_loader_drop_current(weight_loader *wl)
{
    for (size_t i = 0; i < wl->n_params; i++) {
        weight_param *p = wl->params[i];
        if (p->kind == WEIGHT_MATRIX && p->group == wl->current_group && p->w) {
            wl->be->weight_free(p->w);
            p->w = NULL;
            publish(p);
        }
    }
    wl->current_group = -1;
}

void weight_loader_set_lockstep(weight_loader *wl, int first, int count, int me)
{
    if (count < 1)
        count = 1;
    if (wl->lockstep_count && (first != wl->lockstep_first || count != wl->lockstep_count ||
                               me != wl->lockstep_me)) {
        /* other peers now: whatever was shared stops, for good (own slots) */
        weight_stream_share_abandon(wl);
        if (wl->share || wl->lockstep_count > 1)
            wl->share_off = 1;
    }
    wl->lockstep_first = first;
    wl->lockstep_count = count;
    wl->lockstep_me = me;
}

void weight_loader_stream_abandon(weight_loader *wl)
{
    weight_stream_share_abandon(wl);
}

cpdit_status weight_loader_acquire(weight_loader *wl, int g, cpdit_error *err)
{
    if (!wl->prepared)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where,
                               "weights used before weight_loader_prepare");
    if (wl->resident || wl->current_group == g)
        return CPDIT_OK;
    if (weight_stream_share_wanted(wl)) { /* the node's lockstep peers share the slots */
        if (!wl->share)
            prefetch_discard(wl);
        cpdit_status st;
        if (weight_stream_share_acquire(wl, g, &st, err))
            return st;
    }
    /* made ahead? (a prefetch of another group is dropped: the order changed) */
    int ready = 0;
    if (wl->pf && wl->pf->group == g) {
        prefetch_join(wl);
        if (wl->pf->st) {
            cpdit_status st = wl->pf->st;
            *err = wl->pf->err;
            prefetch_discard(wl);
            return st;
        }
        ready = 1;
    } else {
        prefetch_discard(wl);
    }
    weight_loader_drop_current(wl); /* the previous group's go */
    cpdit_status st = CPDIT_OK;
    if (ready) {
        for (size_t i = 0; i < wl->n_params; i++) {
            weight_param *p = wl->params[i];
            if (p->kind != WEIGHT_MATRIX || p->group != g)
                continue;
            p->w = p->next_w;
            p->next_w = NULL;
            publish(p);
        }
        wl->pf->group = -1;
        wl->prefetched_groups++;
        wl->current_slot = 1 - wl->current_slot;
    } else {
        /* nothing of the old group or a prefetch is alive: any slot is free; with prefetch
         * the other one, without it always slot 0 (one slot's memory) */
        const int k = wl->prefetch ? 1 - wl->current_slot : 0;
        char *slot = slot_get(wl, k);
        if (!slot && wl->largest_group_bytes)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where,
                                   "out of memory for a streamed block (%zu MiB)",
                                   wl->largest_group_bytes >> 20);
        wl->current_slot = k;
        const double t0 = now_seconds();
        for (size_t i = 0; i < wl->n_params && !st; i++) {
            weight_param *p = wl->params[i];
            if (p->kind != WEIGHT_MATRIX || p->group != g)
                continue;
            st = weight_param_create(wl, p, slot ? slot + p->group_offset : NULL, 1, &p->w, err);
            wl->bytes_read += p->nelem * cpdit_dtype_size(p->t->dtype);
            publish(p);
        }
        const double dt = now_seconds() - t0;
        wl->create_seconds += dt;
        wl->stall_seconds += dt;
    }
    if (st)
        return st;
    wl->current_group = g;
    if (wl->prefetch && wl->n_groups > 1)
        prefetch_start(wl, (g + 1) % wl->n_groups);
    return CPDIT_OK;
}

cpdit_status weight_loader_gather_rows(const weight_param *p, const int32_t *ids, size_t n,
                                       float *dst, cpdit_error *err)
{
    const size_t cols = p->cols ? (size_t)p->cols : 1;
    const size_t es = cpdit_dtype_size(p->t->dtype);
    for (size_t r = 0; r < n; r++) {
        const char *src = param_data(p) + (size_t)ids[r] * cols * es;
        cpdit_status st = cpdit_dtype_to_f32(dst + r * cols, src, p->t->dtype, cols, err);
        if (st)
            return cpdit_error_prefix_where(err, p->t->file);
    }
    return CPDIT_OK;
}

size_t weight_loader_bytes(const weight_loader *wl)
{
    size_t b = 0;
    for (size_t i = 0; i < wl->n_params; i++) {
        const weight_param *p = wl->params[i];
        if (is_vector(p) && !vector_in_place(p) && !vector_on_backend(wl, p))
            b += round_up(p->nelem * sizeof(float));
        else if (p->kind == WEIGHT_MATRIX && p->w && !wl->arena_shared && wl->resident) {
            const cpdit_weight_desc d = desc_of(wl, p);
            b += round_up(wl->be->weight_bytes(&d));
        }
    }
    if (wl->arena_shared)
        b += wl->arena_bytes;
    for (int k = 0; k < 2; k++) /* streaming: the slots, whole */
        b += wl->slot[k] ? wl->largest_group_bytes : 0;
    b += weight_stream_share_bytes(wl); /* shared slots, whole */
    return b + wl->be_vector_bytes;
}

size_t weight_process_pss_bytes(void)
{
    unsigned long long kb = 0;
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return 0;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Pss: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (size_t)kb * 1024;
}
