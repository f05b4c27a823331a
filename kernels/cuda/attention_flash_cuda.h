/* attention_flash_cuda.h — attention with log-sum-exp on the GPU (C linkage, --with-cuda).
 *
 * The local kernel of context-parallel attention on CUDA: one pass over the keys with an online
 * softmax (flash attention), fp32 accumulation, and the LSE that ring attention needs to merge
 * partial results (DESIGN.md: lse = log(e^a + e^b), out = out_a e^(a-lse) + out_b e^(b-lse)).
 *
 * Layouts (row-major, device memory): q, out (B, Sq, H, D); k, v (B, Sk, H, D);
 * lse (B, Sq, H) fp32, natural log of sum_j exp(scale * q.k_j). Inputs and out share one
 * element type (fp32 or bf16). D is a multiple of 32, at most 256. Sk = 0 gives out = 0 and
 * lse = -inf (an empty block merges as nothing).
 */
#ifndef CPDIT_ATTENTION_FLASH_CUDA_H
#define CPDIT_ATTENTION_FLASH_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of device data: activations (the "cuda" table: bf16, "cuda-fp32": fp32) and
 * weights. */
typedef enum cpdit_cuda_dtype { CPDIT_CUDA_F32 = 0, CPDIT_CUDA_BF16 } cpdit_cuda_dtype;

/* Bytes of one element of t (4 or 2). */
static inline size_t cpdit_cuda_dtype_size(cpdit_cuda_dtype t)
{
    return t == CPDIT_CUDA_BF16 ? 2 : 4;
}

/* Queue the attention on stream (a cudaStream_t; NULL = default). Returns 0, or a cudaError_t
 * value (an unsupported D gives cudaErrorInvalidValue). lse may be NULL. */
int cpdit_cuda_attention_flash(cpdit_cuda_dtype dtype, const void *q, const void *k,
                               const void *v, void *out, float *lse, int B, int Sq, int Sk, int H,
                               int D, float scale, void *stream);

/* The general form, with the options of cpdit_attention_args (kernels/backend.h):
 *   ld_q, ld_kv, ld_out: elements between consecutive tokens (0 = H*D), so q, k, v may be
 *     column blocks of one fused qkv buffer; item b starts at b*Sq*ld_q (k, v: b*Sk*ld_kv);
 *   bias: additive fp32 scores (H, Sq, Sk) shared by all items (T5), or NULL;
 *   causal: query i sees keys j <= i only (CLIP); needs Sq == Sk.
 * lse stays contiguous (B, Sq, H). */
typedef struct cpdit_cuda_attention {
    int B, Sq, Sk, H, D;
    int ld_q, ld_kv, ld_out;
    float scale;
    const float *bias;
    int causal;
} cpdit_cuda_attention;

int cpdit_cuda_attention_flash_ex(cpdit_cuda_dtype dtype, const void *q, const void *k,
                                  const void *v, void *out, float *lse,
                                  const cpdit_cuda_attention *a, void *stream);

/* Merge a partial result into an accumulated one, in place (ring attention):
 * for each (row, head): lse = log(e^lse_acc + e^lse_part),
 * out_acc = out_acc e^(lse_acc - lse) + out_part e^(lse_part - lse).
 * out_* (rows, H, D) of dtype (computed in fp32, stored once); lse_* (rows, H) fp32.
 * Returns 0 or a cudaError_t value. */
int cpdit_cuda_lse_merge(cpdit_cuda_dtype dtype, void *out_acc, float *lse_acc,
                         const void *out_part, const float *lse_part, long rows, int H, int D,
                         void *stream);

/* cpdit_cuda_lse_merge into an fp32 accumulator: out_acc (rows, H, D) fp32, out_part of dtype
 * (widened); fp32 math, out_acc stored without rounding (ring attention's running output on
 * the bf16 table). Returns 0 or a cudaError_t value. */
int cpdit_cuda_lse_merge_f32(cpdit_cuda_dtype dtype, float *out_acc, float *lse_acc,
                             const void *out_part, const float *lse_part, long rows, int H,
                             int D, void *stream);

#ifdef __cplusplus
}
#endif
#endif
