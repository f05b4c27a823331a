/* vae_ops_cpu.h — the CPU kernels of the kernel table's VAE section (kernels/backend.h):
 * NHWC convolution (packed weights, blocked im2col + SGEMM), GroupNorm in pieces (moments,
 * then a fused normalise + activation), nearest 2x upsampling, transpose.
 *
 * Shapes, units and aliasing rules are those of the matching cpdit_backend field.
 */
#ifndef CPDIT_VAE_OPS_CPU_H
#define CPDIT_VAE_OPS_CPU_H

#include <stddef.h>

#include "kernels/backend.h"
#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Floats of one im2col block: 9·Cin floats per pixel, as many pixels as fit (at least
 * CONV_MIN_BLOCK_PIXELS). 2 M floats = 8 MB: large M for SGEMM, small enough to stay in L3. */
#define CONV_COL_BLOCK_FLOATS ((size_t)2 << 20)
#define CONV_MIN_BLOCK_PIXELS 64

float *cpu_conv2d_pack(const float *w, int Cout, int Cin, int K);
float *cpu_conv2d_pack_stored(const void *w, cpdit_dtype dtype, int Cout, int Cin, int K,
                              cpdit_weight_format format);
size_t cpu_conv2d_workspace_bytes(int W, int Cin, int K);
cpdit_status cpu_conv2d(float *y, const float *x, const float *w_packed, const float *b, int W,
                        int Cin, int Cout, int K, int r0, int r1, void *ws, cpdit_error *err);
void cpu_group_moments(double *acc, const float *x, size_t pixels, int C, int G,
                       const double *mean);
void cpu_group_norm_apply(float *y, const float *x, size_t pixels, int C, int G,
                          const double *mean, const double *rstd, const float *gamma,
                          const float *beta, cpdit_activation act);
void cpu_upsample2x(float *y, const float *x, int rows, int W, int C);
void cpu_transpose(float *y, const float *x, size_t rows, size_t cols);

#ifdef __cplusplus
}
#endif
#endif
