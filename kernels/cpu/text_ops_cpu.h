/* text_ops_cpu.h — CPU ops the text encoders (CLIP text model, T5 encoder) need and the kernel
 * table (kernels/backend.h) does not have: attention with a causal mask or an additive bias,
 * and the activations quick_gelu, exact (erf) gelu, relu, and an elementwise product.
 *
 * The text sequences are short (CLIP: 77 tokens, T5: up to 512), so the attention forms the
 * whole (S, S) score matrix of one head at a time with two SGEMMs; there is no online softmax.
 * Candidates for the kernel table once a GPU backend needs the text encoders: all of these.
 */
#ifndef CPDIT_TEXT_OPS_CPU_H
#define CPDIT_TEXT_OPS_CPU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Multi-head attention of one sequence, every query over every key (or, with causal, over keys
 * j <= i), softmax in fp32:
 *   out[i, h, :] = sum_j softmax_j(scale * q[i,h,:]·k[j,h,:] + bias[h,i,j]) v[j, h, :]
 * q, k, v: (S, H, Dh) with a row stride of ld floats per token (ld >= H*Dh: they may be
 * column blocks of a wider buffer); out: (S, H, Dh) with row stride ldo; bias: (H, S, S)
 * contiguous, or NULL; scores: scratch of S*S floats. out must not alias q, k or v. */
void text_attention_cpu(float *out, int ldo, const float *q, const float *k, const float *v,
                        int ld, const float *bias, int causal, int S, int H, int Dh, float scale,
                        float *scores);

/* y = x * sigmoid(1.702 x)  (transformers' QuickGELUActivation, CLIP's "quick_gelu"). */
void text_quick_gelu_cpu(float *y, const float *x, size_t n);

/* y = 0.5 x (1 + erf(x / sqrt 2))  (torch's exact gelu, transformers' "gelu"). */
void text_gelu_erf_cpu(float *y, const float *x, size_t n);

/* y = max(x, 0). */
void text_relu_cpu(float *y, const float *x, size_t n);

/* y = a * b elementwise; y may alias a or b. */
void text_mul_cpu(float *y, const float *a, const float *b, size_t n);

#ifdef __cplusplus
}
#endif
#endif
