/* backend_cpu.c — the CPU kernel table ("cpu", fp32 activations): memory and the elementwise
 * ops (add, mul, AdaLN modulate, gated residual, strided row copy, embedding gather). Weights
 * and linear layers (linear_cpu.c), norms, RoPE, activations and attention live in their own
 * files (see backend_cpu.h). The kernels take float *; the table's entries (tab_*) take the
 * table's cpdit_buf * activations, which on this table are host fp32 arrays, and pass them on
 * unchanged (cpdit_buf_host), so results are the kernels' bit for bit.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/backend.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/blas_runtime.h"
#include "kernels/cpu/parallel_ops_cpu.h"
#include "kernels/cpu/profile_cpu.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vae_ops_cpu.h"

#define CPU_WHERE "kernels/cpu"

/* ------------------------------------------------------------------ memory */

/* Blocks from this size on (weights, activations, workspaces) start on a huge-page boundary;
 * with CPDIT_HUGEPAGES=1 they are also advised onto transparent huge pages (one page fault per
 * 2 MiB instead of 512). Opt-in: on the 2-vCPU VM where this was measured (THP "madvise",
 * defrag "madvise"), a 1 GiB bf16 load took 3.4x the system time with the advice (2.9 s vs
 * 0.8 s: clear_page_erms on fresh 2 MiB pages, 18 k page faults instead of 298 k). */
#define CPU_HUGE_PAGE ((size_t)2 << 20)

void *cpu_alloc(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes > SIZE_MAX - CPU_HUGE_PAGE)
        return NULL;
    if (bytes >= CPU_HUGE_PAGE) {
        const size_t rounded = (bytes + CPU_HUGE_PAGE - 1) / CPU_HUGE_PAGE * CPU_HUGE_PAGE;
        void *p = aligned_alloc(CPU_HUGE_PAGE, rounded);
#ifdef MADV_HUGEPAGE
        const char *e = getenv("CPDIT_HUGEPAGES"); /* opt-in: see CPU_HUGE_PAGE */
        if (p && e && e[0] == '1')
            (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice: ignored where THP is off */
#endif
        return p;
    }
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

/* ------------------------------------------------------------------ the table's entries
 * Activations of this table are host fp32 arrays: each entry hands its cpdit_buf pointers to
 * the float kernel as they are. */

#define HF(p) cpdit_buf_host(p)

/* upload_act / download_act: n fp32 activations, a plain copy */
static void tab_upload_act(cpdit_buf *dst, const float *host_src, size_t n)
{
    cpu_copy_bytes(HF(dst), host_src, n * sizeof(float));
}
static void tab_download_act(float *host_dst, const cpdit_buf *src, size_t n)
{
    cpu_copy_bytes(host_dst, HF(src), n * sizeof(float));
}
static cpdit_status tab_linear(cpdit_buf *y, int ldy, const cpdit_buf *x, int ldx,
                               const cpdit_weight *w, const float *b, int M, int K, int N,
                               int accumulate, cpdit_error *err)
{
    return cpu_linear(HF(y), ldy, HF(x), ldx, w, b, M, K, N, accumulate, err);
}
static void tab_layer_norm(cpdit_buf *y, const cpdit_buf *x, const float *gamma,
                           const float *beta, size_t rows, int dim, float eps)
{
    CPU_PROF_BEGIN();
    cpu_par_layer_norm(HF(y), HF(x), gamma, beta, rows, dim, eps);
    CPU_PROF_END(CPU_PROF_NORM, 0, 0);
}
static void tab_rms_norm(cpdit_buf *y, const cpdit_buf *x, const float *weight, size_t rows,
                         int dim, float eps)
{
    CPU_PROF_BEGIN();
    cpu_par_rms_norm(HF(y), HF(x), weight, rows, dim, eps);
    CPU_PROF_END(CPU_PROF_NORM, 0, 0);
}
static void tab_rope(cpdit_buf *x, const float *cos, const float *sin, int S, int H, int D)
{
    CPU_PROF_BEGIN();
    cpu_par_rope(HF(x), cos, sin, S, H, D);
    CPU_PROF_END(CPU_PROF_ELEMENTWISE, 0, 0);
}
static void tab_act(cpdit_act kind, cpdit_buf *y, const cpdit_buf *x, size_t n)
{
    CPU_PROF_BEGIN();
    cpu_par_act(kind, HF(y), HF(x), n);
    CPU_PROF_END(CPU_PROF_ELEMENTWISE, 0, 0);
}
static void tab_add(cpdit_buf *y, const cpdit_buf *a, const cpdit_buf *b, size_t n)
{
    CPU_PROF_BEGIN();
    cpu_par_add(HF(y), HF(a), HF(b), n);
    CPU_PROF_END(CPU_PROF_ELEMENTWISE, 0, 0);
}
static void tab_mul(cpdit_buf *y, const cpdit_buf *a, const cpdit_buf *b, size_t n)
{
    CPU_PROF_BEGIN();
    cpu_par_mul(HF(y), HF(a), HF(b), n);
    CPU_PROF_END(CPU_PROF_ELEMENTWISE, 0, 0);
}
static void tab_embedding(cpdit_buf *y, const float *table, const int32_t *ids, size_t n,
                          int dim)
{
    cpu_embedding(HF(y), table, ids, n, dim);
}
static void tab_modulate(cpdit_buf *y, const cpdit_buf *x, const cpdit_buf *shift,
                         const cpdit_buf *scale, size_t rows, int dim)
{
    CPU_PROF_BEGIN();
    cpu_par_modulate(HF(y), HF(x), HF(shift), HF(scale), rows, dim);
    CPU_PROF_END(CPU_PROF_ELEMENTWISE, 0, 0);
}
static void tab_gated_residual(cpdit_buf *h, int ldh, const cpdit_buf *x, int ldx,
                               const cpdit_buf *gate, size_t rows, int dim)
{
    CPU_PROF_BEGIN();
    cpu_par_gated_residual(HF(h), ldh, HF(x), ldx, HF(gate), rows, dim);
    CPU_PROF_END(CPU_PROF_ELEMENTWISE, 0, 0);
}
static void tab_copy_rows(cpdit_buf *dst, int ldd, const cpdit_buf *src, int lds, size_t rows,
                          int dim)
{
    CPU_PROF_BEGIN();
    cpu_copy_rows(HF(dst), ldd, HF(src), lds, rows, dim);
    CPU_PROF_END(CPU_PROF_ELEMENTWISE, 0, 0);
}
static void tab_lse_merge(cpdit_buf *out_a, float *lse_a, const cpdit_buf *out_b,
                          const float *lse_b, size_t rows, int D)
{
    attention_lse_merge(HF(out_a), lse_a, HF(out_b), lse_b, rows, D);
}
static cpdit_status tab_conv2d(cpdit_buf *y, const cpdit_buf *x, const float *w_packed,
                               const float *b, int W, int Cin, int Cout, int K, int r0, int r1,
                               void *ws, cpdit_error *err)
{
    CPU_PROF_BEGIN();
    const cpdit_status st = cpu_conv2d(HF(y), HF(x), w_packed, b, W, Cin, Cout, K, r0, r1, ws,
                                       err);
    CPU_PROF_END(CPU_PROF_CONV, 2.0 * (r1 - r0) * W * (double)Cout * Cin * K * K, 0);
    return st;
}
static void tab_group_moments(double *acc, const cpdit_buf *x, size_t pixels, int C, int G,
                              const double *mean)
{
    CPU_PROF_BEGIN();
    cpu_group_moments(acc, HF(x), pixels, C, G, mean);
    CPU_PROF_END(CPU_PROF_NORM, 0, 0);
}
static void tab_group_norm_apply(cpdit_buf *y, const cpdit_buf *x, size_t pixels, int C, int G,
                                 const double *mean, const double *rstd, const float *gamma,
                                 const float *beta, cpdit_activation act)
{
    CPU_PROF_BEGIN();
    cpu_par_group_norm_apply(HF(y), HF(x), pixels, C, G, mean, rstd, gamma, beta, act);
    CPU_PROF_END(CPU_PROF_NORM, 0, 0);
}
static void tab_upsample2x(cpdit_buf *y, const cpdit_buf *x, int rows, int W, int C)
{
    CPU_PROF_BEGIN();
    cpu_upsample2x(HF(y), HF(x), rows, W, C);
    CPU_PROF_END(CPU_PROF_ELEMENTWISE, 0, 0);
}
static void tab_transpose(cpdit_buf *y, const cpdit_buf *x, size_t rows, size_t cols)
{
    CPU_PROF_BEGIN();
    cpu_transpose(HF(y), HF(x), rows, cols);
    CPU_PROF_END(CPU_PROF_ELEMENTWISE, 0, 0);
}

#undef HF

/* ------------------------------------------------------------------ the table */

static const cpdit_backend cpu_backend = {
    .name = "cpu",
    .summary = "host memory, fp32 activations; bf16 GEMM or OpenBLAS SGEMM, one thread pool per rank",
    .act_dtype = CPDIT_DTYPE_F32,
    .act_size = sizeof(float),
    .host_memory = 1,
    .available = cpu_available,
    .describe = cpu_describe,
    .sync = cpu_sync,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy_bytes,
    .download = cpu_copy_bytes,
    .upload_act = tab_upload_act,
    .download_act = tab_download_act,
    .weight_bytes = cpu_weight_bytes,
    .weight_create = cpu_weight_create,
    .weight_free = cpu_weight_free,
    .linear = tab_linear,
    .layer_norm = tab_layer_norm,
    .rms_norm = tab_rms_norm,
    .rope = tab_rope,
    .act = tab_act,
    .add = tab_add,
    .mul = tab_mul,
    .embedding = tab_embedding,
    .modulate = tab_modulate,
    .gated_residual = tab_gated_residual,
    .copy_rows = tab_copy_rows,
    .lse_merge = tab_lse_merge,
    .attention_kernels = attention_cpu_kernels,
    .workers = attention_cpu_get_num_threads,
    /* VAE section (kernels/cpu/vae_ops_cpu.c) */
    .conv2d_pack = cpu_conv2d_pack,
    .conv2d_pack_stored = cpu_conv2d_pack_stored,
    .conv2d_workspace_bytes = cpu_conv2d_workspace_bytes,
    .conv2d = tab_conv2d,
    .group_moments = tab_group_moments,
    .group_norm_apply = tab_group_norm_apply,
    .upsample2x = tab_upsample2x,
    .transpose = tab_transpose,
};

const cpdit_backend *cpdit_backend_cpu(void)
{
    (void)cpu_pool_size(); /* the rank's threads (and OpenBLAS's count) from the first use on */
    return &cpu_backend;
}
