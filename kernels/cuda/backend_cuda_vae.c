/* backend_cuda_vae.c — the VAE section of the CUDA tables (kernels/backend.h): convolution
 * weights packed for cuDNN (fp32, or bf16 for the native format of bf16/fp8 checkpoints, told
 * apart by a list of the bf16 blocks), the NHWC convolution over row bands, GroupNorm's
 * moments (double, host in and out) and normalisation with the activation fused, nearest 2x
 * upsampling and the transpose; each written once over the activation type, with entries for
 * both tables ("cuda": bf16 activations, "cuda-fp32").
 */
#include "config.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>

#include "kernels/backend.h"
#include "kernels/cuda/alloc_cuda.h"
#include "kernels/cuda/backend_cuda_table.h"
#include "kernels/cuda/vae_ops_cuda.h"
#include "lib/core/dtype.h"

/* Packed convolution weights in bf16 (conv2d_pack_stored, NATIVE format, bf16 or fp8 stored):
 * conv2d tells them from the fp32 ones by this list; free takes a block off it before the
 * allocator may hand the address out again. */
static void **bf16_convs;
static size_t n_bf16_convs, cap_bf16_convs;

static int is_bf16_conv(const void *p)
{
    int found = 0;
    pthread_mutex_lock(&cpdit_cuda_S.lock);
    for (size_t i = 0; i < n_bf16_convs && !found; i++)
        found = bf16_convs[i] == p;
    pthread_mutex_unlock(&cpdit_cuda_S.lock);
    return found;
}

void cpdit_cuda_forget_conv(const void *p)
{
    if (!n_bf16_convs)
        return;
    pthread_mutex_lock(&cpdit_cuda_S.lock);
    for (size_t i = 0; i < n_bf16_convs; i++)
        if (bf16_convs[i] == p) {
            bf16_convs[i] = bf16_convs[--n_bf16_convs];
            break;
        }
    pthread_mutex_unlock(&cpdit_cuda_S.lock);
}

float *cpdit_cuda_table_conv2d_pack(const float *w, int Cout, int Cin, int K)
{
    if (!cpdit_cuda_ready())
        return NULL;
    /* the packer copies on the legacy stream, which does not wait for our non-blocking one:
     * let queued kernels finish with the cached blocks it may be handed */
    cpdit_cuda_latch("conv2d_pack", (int)cudaStreamSynchronize(cpdit_cuda_S.stream));
    return cpdit_cuda_conv2d_pack(w, Cout, Cin, K);
}

/* The bf16 form of fp32 host weights (Cout, Cin, K, K), registered for conv2d. */
static float *conv2d_pack_bf16(const float *w, int Cout, int Cin, int K)
{
    cpdit_cuda_latch("conv2d_pack",
                     (int)cudaStreamSynchronize(cpdit_cuda_S.stream)); /* as above */
    void *p = cpdit_cuda_conv2d_pack_bf16(w, Cout, Cin, K);
    if (!p)
        return NULL;
    pthread_mutex_lock(&cpdit_cuda_S.lock);
    if (n_bf16_convs == cap_bf16_convs) {
        const size_t cap = cap_bf16_convs ? 2 * cap_bf16_convs : 64;
        void **n = realloc(bf16_convs, cap * sizeof *n);
        if (n) {
            bf16_convs = n;
            cap_bf16_convs = cap;
        }
    }
    const int ok = n_bf16_convs < cap_bf16_convs;
    if (ok)
        bf16_convs[n_bf16_convs++] = p;
    pthread_mutex_unlock(&cpdit_cuda_S.lock);
    if (!ok) { /* out of host memory for the list: the caller sees out of memory */
        cpdit_cuda_free(p);
        return NULL;
    }
    return (float *)p;
}

/* Weights as stored. NATIVE with bf16 or fp8 storage: bf16 weights for cuDNN's bf16
 * convolution (tensor cores, fp32 accumulation; fp8 values are exact in bf16); otherwise the
 * exact fp32 path (conv2d_pack), as the CPU decides. */
float *cpdit_cuda_table_conv2d_pack_stored(const void *w, cpdit_dtype dtype, int Cout, int Cin,
                                      int K, cpdit_weight_format format)
{
    if (!cpdit_cuda_ready() || !cpdit_dtype_is_float(dtype) || dtype == CPDIT_DTYPE_F64)
        return NULL;
    const int bf16 = format == CPDIT_WEIGHT_NATIVE &&
                     (dtype == CPDIT_DTYPE_BF16 || dtype == CPDIT_DTYPE_F8_E4M3 ||
                      dtype == CPDIT_DTYPE_F8_E5M2);
    const size_t n = (size_t)Cout * Cin * K * K;
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!f)
        return NULL;
    float *packed = NULL;
    if (cpdit_dtype_to_f32(f, w, dtype, n, NULL) == CPDIT_OK)
        packed = bf16 ? conv2d_pack_bf16(f, Cout, Cin, K)
                      : cpdit_cuda_table_conv2d_pack(f, Cout, Cin, K);
    free(f);
    return packed;
}


size_t cpdit_cuda_table_conv2d_workspace_bytes(int W, int Cin, int K)
{
    (void)W;
    (void)Cin;
    (void)K;
    return 0; /* cuDNN's workspace comes from the caching allocator */
}

/* x, y activations of type t; the packed weights' type from the bf16 list. */
static cpdit_status conv2d_t(cpdit_cuda_dtype t, cpdit_buf *y, const cpdit_buf *x,
                             const float *w_packed, const float *b, int W, int Cin, int Cout,
                             int K, int r0, int r1, void *ws, cpdit_error *err)
{
    (void)ws;
    if (!cpdit_cuda_ready())
        return cpdit_cuda_not_ready(err);
    if ((K != 1 && K != 3) || W < 0 || Cin <= 0 || Cout <= 0 || r1 < r0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CUDA_WHERE,
                               "conv2d: K %d W %d Cin %d Cout %d rows [%d, %d)", K, W, Cin, Cout,
                               r0, r1);
    cpdit_status st = cpdit_cuda_latched_status(err);
    if (st || r1 == r0 || W == 0)
        return st;
    const int bf16w = is_bf16_conv(w_packed);
    return cpdit_cuda_rc_status(cpdit_cuda_conv2d(t, y, x, w_packed,
                                                  bf16w ? CPDIT_CUDA_BF16 : CPDIT_CUDA_F32, b, W,
                                                  Cin, Cout, K, r0, r1, cpdit_cuda_S.stream),
                                bf16w ? "conv2d (bf16)" : "conv2d", err);
}
TABLE_OP_EXTERN(cpdit_status, conv2d,
         (cpdit_buf * y, const cpdit_buf *x, const float *w_packed, const float *b, int W,
          int Cin, int Cout, int K, int r0, int r1, void *ws, cpdit_error *err),
         (y, x, w_packed, b, W, Cin, Cout, K, r0, r1, ws, err))

/* acc and mean are host doubles (G values; the caller reduces them over ranks). */
static void group_moments_t(cpdit_cuda_dtype t, double *acc, const cpdit_buf *x, size_t pixels,
                            int C, int G, const double *mean)
{
    if (!pixels || G <= 0 || !cpdit_cuda_ready())
        return;
    const size_t gb = (size_t)G * sizeof(double);
    pthread_mutex_lock(&cpdit_cuda_S.lock);
    double *dacc = cpdit_cuda_small_buffer(2 * gb), *dmean = dacc ? dacc + G : NULL;
    int rc = dacc ? 0 : (int)cudaErrorMemoryAllocation;
    if (!rc)
        rc = (int)cudaMemcpyAsync(dacc, acc, gb, cudaMemcpyHostToDevice, cpdit_cuda_S.stream);
    if (!rc && mean)
        rc = (int)cudaMemcpyAsync(dmean, mean, gb, cudaMemcpyHostToDevice, cpdit_cuda_S.stream);
    if (!rc)
        rc = cpdit_cuda_group_moments(t, dacc, x, pixels, C, G, mean ? dmean : NULL,
                                      cpdit_cuda_S.stream);
    if (!rc)
        rc = (int)cudaMemcpyAsync(acc, dacc, gb, cudaMemcpyDeviceToHost, cpdit_cuda_S.stream);
    if (!rc)
        rc = (int)cudaStreamSynchronize(cpdit_cuda_S.stream);
    pthread_mutex_unlock(&cpdit_cuda_S.lock);
    cpdit_cuda_latch("group_moments", rc);
}
TABLE_VOID_EXTERN(group_moments,
           (double *acc, const cpdit_buf *x, size_t pixels, int C, int G, const double *mean),
           (acc, x, pixels, C, G, mean))

static void group_norm_apply_t(cpdit_cuda_dtype t, cpdit_buf *y, const cpdit_buf *x,
                               size_t pixels, int C, int G, const double *mean,
                               const double *rstd, const float *gamma, const float *beta,
                               cpdit_activation act)
{
    if (!pixels || G <= 0 || !cpdit_cuda_ready())
        return;
    if (act != CPDIT_ACT_NONE && act != CPDIT_ACT_SILU && act != CPDIT_ACT_GELU &&
        act != CPDIT_ACT_RELU && act != CPDIT_ACT_MISH) {
        cpdit_cuda_latch("group_norm_apply: activation not fused on CUDA",
                         (int)cudaErrorInvalidValue);
        return;
    }
    /* cpdit_activation's NONE, SILU, GELU, RELU, MISH are numbered as the CUDA VAE enum */
    const size_t gb = (size_t)G * sizeof(double);
    pthread_mutex_lock(&cpdit_cuda_S.lock);
    double *dmean = cpdit_cuda_small_buffer(2 * gb), *drstd = dmean ? dmean + G : NULL;
    int rc = dmean ? 0 : (int)cudaErrorMemoryAllocation;
    if (!rc)
        rc = (int)cudaMemcpyAsync(dmean, mean, gb, cudaMemcpyHostToDevice, cpdit_cuda_S.stream);
    if (!rc)
        rc = (int)cudaMemcpyAsync(drstd, rstd, gb, cudaMemcpyHostToDevice, cpdit_cuda_S.stream);
    if (!rc)
        rc = cpdit_cuda_group_norm_apply(t, y, x, pixels, C, G, dmean, drstd, gamma, beta,
                                         (int)act, cpdit_cuda_S.stream);
    /* the staging is rewritten by the next call: let this kernel read it first */
    if (!rc)
        rc = (int)cudaStreamSynchronize(cpdit_cuda_S.stream);
    pthread_mutex_unlock(&cpdit_cuda_S.lock);
    cpdit_cuda_latch("group_norm_apply", rc);
}
TABLE_VOID_EXTERN(group_norm_apply,
           (cpdit_buf * y, const cpdit_buf *x, size_t pixels, int C, int G, const double *mean,
            const double *rstd, const float *gamma, const float *beta, cpdit_activation act),
           (y, x, pixels, C, G, mean, rstd, gamma, beta, act))

static void upsample2x_t(cpdit_cuda_dtype t, cpdit_buf *y, const cpdit_buf *x, int rows, int W,
                         int C)
{
    if (rows > 0 && W > 0 && cpdit_cuda_ready())
        cpdit_cuda_latch("upsample2x",
                         cpdit_cuda_upsample2x(t, y, x, rows, W, C, cpdit_cuda_S.stream));
}
TABLE_VOID_EXTERN(upsample2x, (cpdit_buf * y, const cpdit_buf *x, int rows, int W, int C),
           (y, x, rows, W, C))

static void transpose_t(cpdit_cuda_dtype t, cpdit_buf *y, const cpdit_buf *x, size_t rows,
                        size_t cols)
{
    if (rows && cols && cpdit_cuda_ready())
        cpdit_cuda_latch("transpose",
                         cpdit_cuda_transpose(t, y, x, rows, cols, cpdit_cuda_S.stream));
}
TABLE_VOID_EXTERN(transpose, (cpdit_buf * y, const cpdit_buf *x, size_t rows, size_t cols),
           (y, x, rows, cols))
