/* ops_cuda.h — the small ops of the kernel table as CUDA kernels (C linkage, --with-cuda).
 *
 * Each function queues one kernel on `stream` (a cudaStream_t; NULL = default stream) and
 * returns 0 or a cudaError_t value from the launch. Semantics, shapes and aliasing rules are
 * exactly those of the same-named op in kernels/backend.h (fp32, row-major, device memory),
 * so that the CUDA table is a thin layer over these and tests compare them with the CPU ops.
 */
#ifndef CPDIT_OPS_CUDA_H
#define CPDIT_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>

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

/* x, y (rows, dim); gamma, beta (dim) or NULL. Biased variance, as torch.nn.LayerNorm. */
int cpdit_cuda_layer_norm(float *y, const float *x, const float *gamma, const float *beta,
                          size_t rows, int dim, float eps, void *stream);
/* y = x / sqrt(mean(x^2) + eps) * weight; weight (dim) or NULL. */
int cpdit_cuda_rms_norm(float *y, const float *x, const float *weight, size_t rows, int dim,
                        float eps, void *stream);
/* In place, pairwise-interleaved (diffusers apply_rotary_emb, use_real_unbind_dim=-1).
 * x (S, H, D); cos, sin (S, D). */
int cpdit_cuda_rope(float *x, const float *cos, const float *sin, int S, int H, int D,
                    void *stream);
int cpdit_cuda_act(int kind, float *y, const float *x, size_t n, void *stream);
int cpdit_cuda_add(float *y, const float *a, const float *b, size_t n, void *stream);
int cpdit_cuda_mul(float *y, const float *a, const float *b, size_t n, void *stream);
/* y[i] = table[ids[i]]; ids in DEVICE memory here (the table layer uploads them). */
int cpdit_cuda_embedding(float *y, const float *table, const int32_t *ids, size_t n, int dim,
                         void *stream);
/* y[r] = x[r] * (1 + scale) + shift. */
int cpdit_cuda_modulate(float *y, const float *x, const float *shift, const float *scale,
                        size_t rows, int dim, void *stream);
/* h[r] += gate * x[r] with row strides ldh, ldx. */
int cpdit_cuda_gated_residual(float *h, int ldh, const float *x, int ldx, const float *gate,
                              size_t rows, int dim, void *stream);
/* dst[r] = src[r] with row strides (a 2D copy). */
int cpdit_cuda_copy_rows(float *dst, int ldd, const float *src, int lds, size_t rows, int dim,
                         void *stream);

#ifdef __cplusplus
}
#endif
#endif
