/* ops_cuda.h — the small ops of the kernel table as CUDA kernels (C linkage, --with-cuda).
 *
 * Each function queues one kernel on `stream` (a cudaStream_t; NULL = default stream) and
 * returns 0 or a cudaError_t value from the launch. Semantics, shapes and aliasing rules are
 * exactly those of the same-named op in kernels/backend.h (row-major, device memory, fp32 math),
 * so that the CUDA table is a thin layer over these and tests compare them with the CPU ops.
 */
#ifndef CPDIT_OPS_CUDA_H
#define CPDIT_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/attention_flash_cuda.h" /* cpdit_cuda_dtype */

#ifdef __cplusplus
extern "C" {
#endif

/* Activation kinds of cpdit_cuda_act (NOT numbered as cpdit_act: the CUDA table maps them). */
enum {
    CPDIT_CUDA_ACT_GELU_TANH = 0,
    CPDIT_CUDA_ACT_GELU_ERF,
    CPDIT_CUDA_ACT_QUICK_GELU,
    CPDIT_CUDA_ACT_SILU,
    CPDIT_CUDA_ACT_RELU,
    CPDIT_CUDA_ACT_MISH   /* x tanh(softplus(x)) */
};

/* Every op takes the activation element type t first (CPDIT_CUDA_BF16: the "cuda" table,
 * CPDIT_CUDA_F32: "cuda-fp32"); activations are void * of that type, parameters fp32. */

/* x, y (rows, dim); gamma, beta (dim) or NULL. Biased variance, as torch.nn.LayerNorm. */
int cpdit_cuda_layer_norm(cpdit_cuda_dtype t, void *y, const void *x, const float *gamma,
                          const float *beta, size_t rows, int dim, float eps, void *stream);
/* y = x / sqrt(mean(x^2) + eps) * weight; weight (dim) or NULL. */
int cpdit_cuda_rms_norm(cpdit_cuda_dtype t, void *y, const void *x, const float *weight,
                        size_t rows, int dim, float eps, void *stream);
/* In place, pairwise-interleaved (diffusers apply_rotary_emb, use_real_unbind_dim=-1).
 * x (S, H, D); cos, sin (S, D) fp32. */
int cpdit_cuda_rope(cpdit_cuda_dtype t, void *x, const float *cos, const float *sin, int S, int H,
                    int D, void *stream);
int cpdit_cuda_act(cpdit_cuda_dtype t, int kind, void *y, const void *x, size_t n, void *stream);
int cpdit_cuda_add(cpdit_cuda_dtype t, void *y, const void *a, const void *b, size_t n,
                   void *stream);
int cpdit_cuda_mul(cpdit_cuda_dtype t, void *y, const void *a, const void *b, size_t n,
                   void *stream);
/* y[i] = table[ids[i]]; table fp32 (vocab, dim); ids in DEVICE memory here (the table layer
 * uploads them). */
int cpdit_cuda_embedding(cpdit_cuda_dtype t, void *y, const float *table, const int32_t *ids,
                         size_t n, int dim, void *stream);
/* y[r] = x[r] * (1 + scale) + shift; shift, scale (dim) activations. */
int cpdit_cuda_modulate(cpdit_cuda_dtype t, void *y, const void *x, const void *shift,
                        const void *scale, size_t rows, int dim, void *stream);
/* h[r] += gate * x[r] with row strides ldh, ldx (elements). */
int cpdit_cuda_gated_residual(cpdit_cuda_dtype t, void *h, int ldh, const void *x, int ldx,
                              const void *gate, size_t rows, int dim, void *stream);
/* dst[r] = src[r] with row strides in elements (a 2D copy of dim * size bytes per row). */
int cpdit_cuda_copy_rows(cpdit_cuda_dtype t, void *dst, int ldd, const void *src, int lds,
                         size_t rows, int dim, void *stream);

#ifdef __cplusplus
}
#endif
#endif
