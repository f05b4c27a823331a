/* linear_cpu.c — the CPU backend's weights and linear layers.
 *
 * A weight is kept in one of two forms, chosen at creation (cpdit_weight_format):
 *   fp32    used in place when the data is fp32, 4-byte aligned and persists (the map), else
 *           converted once; linear = one cblas_sgemm. The reference path.
 *   bf16    packed once into the panels of gemm_bf16_cpu.h (bf16 as stored; fp8 widened
 *           exactly); linear = cpu_gemm_bf16. NATIVE picks it for bf16 and fp8 data; fp16
 *           (whose 11-bit mantissa bf16 cannot hold) and fp32 stay fp32.
 * The bias is fp32 and broadcast into y before the product is added, so the sum is formed once.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/gemm_bf16_cpu.h"
#include "kernels/cpu/parallel_ops_cpu.h"
#include "kernels/cpu/profile_cpu.h"

#define LINEAR_WHERE "kernels/cpu"

enum { CPU_WEIGHT_F32 = 1, CPU_WEIGHT_BF16 };

struct cpdit_weight {
    int rows, cols;
    int kind;              /* CPU_WEIGHT_* */
    const float *f32;      /* (rows, cols) */
    const uint16_t *bf16;  /* packed */
    void *owned;           /* allocated by the backend, freed with the weight */
};

int cpdit_weight_format_from_name(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "native") || !strcmp(name, "bf16"))
        return CPDIT_WEIGHT_NATIVE;
    if (!strcmp(name, "fp32") || !strcmp(name, "f32"))
        return CPDIT_WEIGHT_F32;
    return -1;
}

const char *cpdit_weight_format_name(cpdit_weight_format f)
{
    return f == CPDIT_WEIGHT_F32 ? "fp32" : "native";
}

static int form_of(const cpdit_weight_desc *d)
{
    if (d->format == CPDIT_WEIGHT_NATIVE &&
        (d->dtype == CPDIT_DTYPE_BF16 || d->dtype == CPDIT_DTYPE_F8_E4M3 ||
         d->dtype == CPDIT_DTYPE_F8_E5M2))
        return CPU_WEIGHT_BF16;
    return CPU_WEIGHT_F32;
}

static int f32_in_place(const cpdit_weight_desc *d)
{
    return d->dtype == CPDIT_DTYPE_F32 && d->data_persists &&
           (uintptr_t)d->data % sizeof(float) == 0;
}

size_t cpu_weight_bytes(const cpdit_weight_desc *d)
{
    if (d->rows <= 0 || d->cols <= 0)
        return 0;
    if (form_of(d) == CPU_WEIGHT_BF16)
        return cpu_bf16_packed_bytes(d->rows, d->cols);
    if (f32_in_place(d))
        return 0;
    return (size_t)d->rows * (size_t)d->cols * sizeof(float);
}

cpdit_status cpu_weight_create(cpdit_weight **out, const cpdit_weight_desc *d, cpdit_error *err)
{
    *out = NULL;
    if (d->rows <= 0 || d->cols <= 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, LINEAR_WHERE, "weight: bad shape (%d, %d)",
                               d->rows, d->cols);
    if (!cpdit_dtype_is_float(d->dtype) || d->dtype == CPDIT_DTYPE_F64)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, LINEAR_WHERE,
                               "weight: dtype %s is not a weight type (F32, F16, BF16, F8)",
                               cpdit_dtype_name(d->dtype));
    cpdit_weight *w = calloc(1, sizeof *w);
    if (!w)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, LINEAR_WHERE, "out of memory");
    w->rows = d->rows;
    w->cols = d->cols;
    w->kind = form_of(d);
    const size_t bytes = cpu_weight_bytes(d);
    void *mem = d->storage;
    const int fill = !d->storage || d->fill;
    if (bytes && !mem) {
        mem = w->owned = cpu_alloc(bytes);
        if (!mem) {
            free(w);
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, LINEAR_WHERE,
                                   "out of memory for a %d x %d weight (%zu MiB)", d->rows,
                                   d->cols, bytes >> 20);
        }
    }
    if (w->kind == CPU_WEIGHT_BF16) {
        if (fill) {
            CPU_PROF_BEGIN();
            cpu_bf16_pack(mem, d->data, d->dtype, d->rows, d->cols);
            CPU_PROF_END(CPU_PROF_PACK, 0,
                         (double)d->rows * d->cols * cpdit_dtype_size(d->dtype));
        }
        w->bf16 = mem;
    } else if (!bytes) {
        w->f32 = d->data;
    } else {
        if (fill && cpdit_dtype_to_f32(mem, d->data, d->dtype, (size_t)d->rows * d->cols, err)) {
            free(w->owned);
            free(w);
            return err ? err->status : CPDIT_ERR_INPUT;
        }
        w->f32 = mem;
    }
    *out = w;
    return CPDIT_OK;
}

void cpu_weight_free(cpdit_weight *w)
{
    if (!w)
        return;
    free(w->owned);
    free(w);
}

/* ------------------------------------------------------------------ linear */

static cpdit_status linear_run(float *y, int ldy, const float *x, int ldx,
                               const cpdit_weight *w, const float *b, int M, int K, int N,
                               int accumulate, cpdit_error *err);

cpdit_status cpu_linear(float *y, int ldy, const float *x, int ldx, const cpdit_weight *w,
                        const float *b, int M, int K, int N, int accumulate, cpdit_error *err)
{
    CPU_PROF_BEGIN();
    const cpdit_status st = linear_run(y, ldy, x, ldx, w, b, M, K, N, accumulate, err);
    CPU_PROF_END(w && w->kind == CPU_WEIGHT_BF16 ? CPU_PROF_LINEAR_BF16 : CPU_PROF_LINEAR_F32,
                 2.0 * M * N * K, 0);
    return st;
}

/* cpu_linear's work (the profile hook around it). */
static cpdit_status linear_run(float *y, int ldy, const float *x, int ldx,
                               const cpdit_weight *w, const float *b, int M, int K, int N,
                               int accumulate, cpdit_error *err)
{
    if (M < 0 || K < 0 || N < 0 || ldx < K || ldy < N)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, LINEAR_WHERE,
                               "linear: bad sizes M %d K %d N %d ldx %d ldy %d", M, K, N, ldx,
                               ldy);
    if (M == 0 || N == 0)
        return CPDIT_OK;
    if (!w || w->rows != N || w->cols != K)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, LINEAR_WHERE,
                               "linear: weight is (%d, %d), the call needs (N %d, K %d)",
                               w ? w->rows : 0, w ? w->cols : 0, N, K);
    float beta = accumulate ? 1.0f : 0.0f;
    if (b) {
        for (int r = 0; r < M; r++) {
            float *yr = y + (size_t)r * ldy;
            if (accumulate)
                for (int j = 0; j < N; j++)
                    yr[j] += b[j];
            else
                memcpy(yr, b, (size_t)N * sizeof(float));
        }
        beta = 1.0f;
    }
    if (w->kind == CPU_WEIGHT_BF16) {
        if (beta == 0.0f) /* y is written, not read: no clearing first */
            return cpu_gemm_bf16_set(y, ldy, x, ldx, w->bf16, M, K, N, err);
        return cpu_gemm_bf16(y, ldy, x, ldx, w->bf16, M, K, N, err);
    }
    cpu_par_sgemm(1, M, N, K, 1.0f, x, ldx, w->f32, K, beta, y, ldy); /* rows on the pool */
    return CPDIT_OK;
}
