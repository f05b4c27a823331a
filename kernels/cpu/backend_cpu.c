/* backend_cpu.c — the CPU kernel table: memory and the elementwise ops (add, mul, AdaLN
 * modulate, gated residual, strided row copy, embedding gather). Weights and linear layers
 * (linear_cpu.c), norms, RoPE, activations and attention live in their own files
 * (see backend_cpu.h).
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/blas_runtime.h"
#include "kernels/cpu/vae_ops_cpu.h"

#define CPU_WHERE "kernels/cpu"

/* ------------------------------------------------------------------ memory */

void *cpu_alloc(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes > SIZE_MAX - CPU_ALLOC_ALIGN)
        return NULL;
    const size_t rounded = (bytes + CPU_ALLOC_ALIGN - 1) / CPU_ALLOC_ALIGN * CPU_ALLOC_ALIGN;
    return aligned_alloc(CPU_ALLOC_ALIGN, rounded);
}

void cpu_free(void *p)
{
    free(p);
}

/* upload / download: host and backend memory are the same on the CPU */
void cpu_copy_bytes(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
}

/* ------------------------------------------------------------------ elementwise */

void cpu_add(float *y, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

void cpu_mul(float *y, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

/* y (n, dim) = rows ids[0..n) of table (vocab, dim). */
void cpu_embedding(float *y, const float *table, const int32_t *ids, size_t n, int dim)
{
    for (size_t i = 0; i < n; i++)
        memcpy(y + i * (size_t)dim, table + (size_t)ids[i] * (size_t)dim,
               (size_t)dim * sizeof(float));
}

void cpu_modulate(float *y, const float *x, const float *shift, const float *scale, size_t rows,
                  int dim)
{
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * (size_t)dim;
        float *yr = y + r * (size_t)dim;
        for (int j = 0; j < dim; j++)
            yr[j] = xr[j] * (1.0f + scale[j]) + shift[j];
    }
}

void cpu_gated_residual(float *h, int ldh, const float *x, int ldx, const float *gate,
                        size_t rows, int dim)
{
    for (size_t r = 0; r < rows; r++) {
        float *hr = h + r * (size_t)ldh;
        const float *xr = x + r * (size_t)ldx;
        for (int j = 0; j < dim; j++)
            hr[j] += gate[j] * xr[j];
    }
}

void cpu_copy_rows(float *dst, int ldd, const float *src, int lds, size_t rows, int dim)
{
    if (ldd == dim && lds == dim) {
        memmove(dst, src, rows * (size_t)dim * sizeof(float));
        return;
    }
    for (size_t r = 0; r < rows; r++)
        memmove(dst + r * (size_t)ldd, src + r * (size_t)lds, (size_t)dim * sizeof(float));
}

/* ------------------------------------------------------------------ runtime */

static int cpu_available(char *why, size_t why_size)
{
    (void)why;
    (void)why_size;
    return 1; /* the host is always there */
}

static void cpu_describe(char *buf, size_t size)
{
    blas_runtime_describe(buf, size);
}

static cpdit_status cpu_sync(cpdit_error *err)
{
    (void)err; /* every CPU op has finished when it returns */
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ the table */

static const cpdit_backend cpu_backend = {
    .name = "cpu",
    .summary = "host memory, fp32 activations; bf16 GEMM or OpenBLAS SGEMM, pthreads attention",
    .host_memory = 1,
    .available = cpu_available,
    .describe = cpu_describe,
    .sync = cpu_sync,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy_bytes,
    .download = cpu_copy_bytes,
    .weight_bytes = cpu_weight_bytes,
    .weight_create = cpu_weight_create,
    .weight_free = cpu_weight_free,
    .linear = cpu_linear,
    .layer_norm = cpu_layer_norm,
    .rms_norm = cpu_rms_norm,
    .rope = cpu_rope,
    .act = cpu_act,
    .add = cpu_add,
    .mul = cpu_mul,
    .embedding = cpu_embedding,
    .modulate = cpu_modulate,
    .gated_residual = cpu_gated_residual,
    .copy_rows = cpu_copy_rows,
    .lse_merge = attention_lse_merge,
    .attention_kernels = attention_cpu_kernels,
    .workers = attention_cpu_get_num_threads,
    /* VAE section (kernels/cpu/vae_ops_cpu.c) */
    .conv2d_pack = cpu_conv2d_pack,
    .conv2d_pack_stored = cpu_conv2d_pack_stored,
    .conv2d_workspace_bytes = cpu_conv2d_workspace_bytes,
    .conv2d = cpu_conv2d,
    .group_moments = cpu_group_moments,
    .group_norm_apply = cpu_group_norm_apply,
    .upsample2x = cpu_upsample2x,
    .transpose = cpu_transpose,
};

const cpdit_backend *cpdit_backend_cpu(void)
{
    return &cpu_backend;
}
