/* backend.c — what is common to every kernel table: the list of backends compiled in, lookup
 * by name, attention kernel lookup with messages that list the choices, activation names, and
 * scratch memory over a backend's alloc/free.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#ifdef CPDIT_HAVE_CUDA
#include "kernels/cuda/backend_cuda.h"
#endif

#define BACKEND_WHERE "backend"

/* Best first: the CUDA tables (when built: "cuda" with bf16 activations, then "cuda-fp32",
 * its kernels on fp32 activations, a check), then the CPU one, then the CPU one with bf16
 * activation storage (a check, never the default: "cpu" is always available before it). */
static const cpdit_backend *const *backends(void)
{
    static const cpdit_backend *list[5];
    if (!list[0]) {
        int n = 0;
#ifdef CPDIT_HAVE_CUDA
        list[n++] = cpdit_backend_cuda();
        list[n++] = cpdit_backend_cuda_fp32();
#endif
        list[n++] = cpdit_backend_cpu();
        list[n++] = cpdit_backend_cpu_bf16();
        list[n] = NULL;
    }
    return list;
}

void cpdit_backends_bind_mpi(void)
{
#ifdef CPDIT_HAVE_CUDA
    cpdit_cuda_bind_device_mpi();
#endif
}

int cpdit_backend_available(const cpdit_backend *be, char *why, size_t why_size)
{
    if (why && why_size)
        why[0] = '\0';
    return be && (!be->available || be->available(why, why_size));
}

const cpdit_backend *const *cpdit_backend_list(void)
{
    return backends();
}

const cpdit_backend *cpdit_backend_by_name(const char *name)
{
    for (const cpdit_backend *const *b = backends(); name && *b; b++)
        if (strcmp((*b)->name, name) == 0)
            return *b;
    return NULL;
}

const cpdit_backend *cpdit_backend_default(void)
{
    for (const cpdit_backend *const *b = backends(); *b; b++)
        if (cpdit_backend_available(*b, NULL, 0))
            return *b;
    return cpdit_backend_cpu();
}

/* "cpu, cuda" into buf. */
static const char *backend_names(char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const cpdit_backend *const *b = backends(); *b && used < size; b++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", (*b)->name);
    return buf;
}

cpdit_status cpdit_backend_resolve(const char *name, const cpdit_backend **out, cpdit_error *err)
{
    if (!name || !*name || strcmp(name, "auto") == 0) {
        *out = cpdit_backend_default();
        return CPDIT_OK;
    }
    const cpdit_backend *b = cpdit_backend_by_name(name);
    if (!b) {
        char names[256];
        return cpdit_error_set(err, CPDIT_ERR_INPUT, BACKEND_WHERE,
                               "unknown backend '%s'; this build has: %s (or auto)", name,
                               backend_names(names, sizeof names));
    }
    char why[256];
    if (!cpdit_backend_available(b, why, sizeof why))
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, BACKEND_WHERE,
                               "the %s backend is built in but cannot run here: %s", name,
                               why[0] ? why : "not available");
    *out = b;
    return CPDIT_OK;
}

const char *cpdit_attention_kernel_names(const cpdit_backend *be, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const cpdit_attention_kernel *const *k = be->attention_kernels; *k && used < size; k++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", (*k)->name);
    return buf;
}

cpdit_status cpdit_attention_kernel_find(const cpdit_backend *be, const char *name,
                                         const cpdit_attention_kernel **out, cpdit_error *err)
{
    if (name && strcmp(name, "auto") == 0) {
        *out = be->attention_auto ? be->attention_auto : be->attention_kernels[0];
        return CPDIT_OK;
    }
    if (!name || !*name) {
        *out = be->attention_kernels[0];
        return CPDIT_OK;
    }
    for (const cpdit_attention_kernel *const *k = be->attention_kernels; *k; k++)
        if (strcmp((*k)->name, name) == 0) {
            *out = *k;
            return CPDIT_OK;
        }
    char names[256];
    cpdit_attention_kernel_names(be, names, sizeof names);
    for (const cpdit_backend *const *b = backends(); *b; b++)
        for (const cpdit_attention_kernel *const *k = (*b)->attention_kernels; *k; k++)
            if (strcmp((*k)->name, name) == 0)
                return cpdit_error_set(err, CPDIT_ERR_INPUT, BACKEND_WHERE,
                                       "attention kernel '%s' belongs to the %s backend, not "
                                       "%s; the %s backend has: %s (or auto)",
                                       name, (*b)->name, be->name, be->name, names);
    return cpdit_error_set(err, CPDIT_ERR_INPUT, BACKEND_WHERE,
                           "unknown attention kernel '%s'; the %s backend has: %s (or auto)",
                           name, be->name, names);
}

cpdit_status cpdit_linear_act(const cpdit_backend *be, cpdit_buf *y, int ldy, const cpdit_buf *x,
                              int ldx, const cpdit_weight *w, const float *b, int M, int K,
                              int N, cpdit_act act, cpdit_error *err)
{
    if (be->linear_act)
        return be->linear_act(y, ldy, x, ldx, w, b, M, K, N, act, err);
    cpdit_status st = be->linear(y, ldy, x, ldx, w, b, M, K, N, 0, err);
    if (st || act == CPDIT_ACT_NONE || M <= 0 || N <= 0)
        return st;
    if (ldy == N) {
        be->act(act, y, y, (size_t)M * (size_t)N);
    } else {
        for (int r = 0; r < M; r++) {
            cpdit_buf *yr = cpdit_buf_at(be, y, (ptrdiff_t)r * ldy);
            be->act(act, yr, yr, (size_t)N);
        }
    }
    return CPDIT_OK;
}

static int backend_verbose_level;

void cpdit_backend_set_verbose(int level)
{
    backend_verbose_level = level;
}

int cpdit_backend_verbose(void)
{
    return backend_verbose_level;
}

const char *cpdit_act_name(cpdit_act kind)
{
    static const char *const names[CPDIT_ACT_COUNT] = {
        [CPDIT_ACT_NONE] = "none",           [CPDIT_ACT_GELU_TANH] = "gelu-tanh",
        [CPDIT_ACT_GELU_ERF] = "gelu-erf",   [CPDIT_ACT_QUICK_GELU] = "quick-gelu",
        [CPDIT_ACT_SILU] = "silu",           [CPDIT_ACT_RELU] = "relu",
        [CPDIT_ACT_MISH] = "mish"};
    return (unsigned)kind < CPDIT_ACT_COUNT ? names[kind] : "invalid";
}

void *cpdit_scratch_get(cpdit_scratch *s, size_t bytes)
{
    if (bytes <= s->cap && s->base)
        return s->base;
    s->be->free(s->base);
    s->base = s->be->alloc(bytes);
    s->cap = s->base ? bytes : 0;
    return s->base;
}

void cpdit_scratch_release(cpdit_scratch *s)
{
    if (s->be)
        s->be->free(s->base);
    s->base = NULL;
    s->cap = 0;
}
