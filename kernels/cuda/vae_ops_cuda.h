/* vae_ops_cuda.h — the VAE's ops on CUDA (C linkage, --with-cuda): NHWC convolution through
 * cuDNN, GroupNorm in two steps (moments in double, then normalise + activation), nearest 2x
 * upsampling and a 2D transpose. Semantics are those of the VAE section of kernels/backend.h:
 * images are NHWC (rows, W, C), a row band of an image lives on each rank, the caller
 * exchanges the convolution's halo rows and reduces GroupNorm's moments.
 * Every function queues its work on `stream` (NULL = default) and returns 0 or a nonzero
 * error (a cudaError_t value, or 100000 + a cudnnStatus_t value for cuDNN errors).
 */
#ifndef CPDIT_VAE_OPS_CUDA_H
#define CPDIT_VAE_OPS_CUDA_H

#include <stddef.h>

#include "kernels/cuda/attention_flash_cuda.h" /* cpdit_cuda_dtype */

#ifdef __cplusplus
extern "C" {
#endif

/* The part of an image a convolution call touches (plain C, checked on the host by
 * tests/test_cuda_host_math.c): output rows [r0, r1) of a (rows, W, Cout) image from a
 * (rows, W, Cin) one with a K x K kernel (K = 1 or 3) read input rows in_row0 .. in_row0 +
 * rows_in - 1 (a 3x3 kernel one halo row either side), i.e. in_elems elements starting
 * in_offset elements from row 0 of x (negative: the halo row above), and write out_elems
 * elements starting out_offset elements from row 0 of y. Bytes are these times the element
 * size of the activations (4 fp32, 2 bf16). */
typedef struct cpdit_conv_band {
    int in_row0, rows_in, rows_out;
    long long in_offset, out_offset; /* elements */
    size_t in_elems, out_elems;
} cpdit_conv_band;

static inline cpdit_conv_band cpdit_conv_band_for(int K, int r0, int r1, int W, int Cin, int Cout)
{
    cpdit_conv_band b;
    b.rows_out = r1 - r0;
    b.in_row0 = K == 3 ? r0 - 1 : r0;
    b.rows_in = K == 3 ? b.rows_out + 2 : b.rows_out;
    b.in_offset = (long long)b.in_row0 * W * Cin;
    b.out_offset = (long long)r0 * W * Cout;
    b.in_elems = (size_t)b.rows_in * W * Cin;
    b.out_elems = (size_t)b.rows_out * W * Cout;
    return b;
}

/* Activation fused into group_norm_apply (numbered as the VAE section's cpdit_activation). */
enum {
    CPDIT_CUDA_VAE_ACT_NONE = 0,
    CPDIT_CUDA_VAE_ACT_SILU,
    CPDIT_CUDA_VAE_ACT_GELU, /* erf form */
    CPDIT_CUDA_VAE_ACT_RELU,
    CPDIT_CUDA_VAE_ACT_MISH
};

/* Host weights (Cout, Cin, K, K) (PyTorch) -> device (Cout, K, K, Cin), the NHWC filter layout
 * cuDNN takes. Returns a device block from cpdit_cuda_alloc (free with cpdit_cuda_free) or NULL. */
float *cpdit_cuda_conv2d_pack(const float *w, int Cout, int Cin, int K);

/* The bf16 form: host weights -> device bf16 (Cout, K, K, Cin) (cpdit_cuda_free), or NULL. */
void *cpdit_cuda_conv2d_pack_bf16(const float *w, int Cout, int Cin, int K);

/* Output rows [r0, r1) of y (rows, W, Cout) = conv KxK (K = 1 or 3), stride 1, "same" zero
 * padding, of x (rows, W, Cin) (device, x points at row 0; for K = 3 rows r0-1 and r1 must be
 * readable: halo rows or zero rows), with packed weights of wtype (cpdit_cuda_conv2d_pack: fp32,
 * the exact FMA convolution; cpdit_cuda_conv2d_pack_bf16: bf16, cuDNN's bf16 convolution with
 * fp32 accumulation) and bias b (Cout) fp32 or NULL. x, y are activations of type act (fp32 or
 * bf16); an act other than wtype goes through staging of wtype (vae_ops_cuda.cu). The
 * workspace comes from the caching allocator. */
int cpdit_cuda_conv2d(cpdit_cuda_dtype act, void *y, const void *x, const void *w_packed,
                      cpdit_cuda_dtype wtype, const float *b, int W, int Cin, int Cout, int K,
                      int r0, int r1, void *stream);

/* acc[g] += sum over the group's elements of x (mean == NULL) or of (x - mean[g])^2.
 * acc, mean: device doubles (G). x (pixels, C) of type t, G groups of C/G consecutive
 * channels; sums in double. */
int cpdit_cuda_group_moments(cpdit_cuda_dtype t, double *acc, const void *x, size_t pixels, int C,
                             int G, const double *mean, void *stream);

/* y = act((x - mean[g]) rstd[g] gamma[c] + beta[c]); x, y of type t; mean, rstd device doubles
 * (G); gamma, beta (C) fp32 or NULL; y may alias x. */
int cpdit_cuda_group_norm_apply(cpdit_cuda_dtype t, void *y, const void *x, size_t pixels, int C,
                                int G, const double *mean, const double *rstd,
                                const float *gamma, const float *beta, int act, void *stream);

/* Nearest 2x: y (2 rows, 2W, C)[r][i] = x (rows, W, C)[r/2][i/2]; elements of t moved as they
 * are. */
int cpdit_cuda_upsample2x(cpdit_cuda_dtype t, void *y, const void *x, int rows, int W, int C,
                          void *stream);

/* y (cols, rows) = x (rows, cols)^T, elements of t. */
int cpdit_cuda_transpose(cpdit_cuda_dtype t, void *y, const void *x, size_t rows, size_t cols,
                         void *stream);

#ifdef __cplusplus
}
#endif
#endif
