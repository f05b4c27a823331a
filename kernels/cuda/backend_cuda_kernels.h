/* backend_cuda_kernels.h — device helpers of the CUDA kernel table (C linkage, --with-cuda):
 * strided conversion between fp32 and bf16 (activations in and out of fp32 staging), a
 * strided fill and bias add, and the reference attention (fp32, any head dim, bias, causal)
 * through cuBLAS SGEMMs and a softmax-with-LSE kernel.
 * Every function queues its work on `stream` (a cudaStream_t) and returns 0 or a nonzero
 * error: a cudaError_t value, or 2000 + a cublasStatus_t value for cuBLAS errors.
 */
#ifndef CPDIT_BACKEND_CUDA_KERNELS_H
#define CPDIT_BACKEND_CUDA_KERNELS_H

#include <stddef.h>

#include "kernels/cuda/attention_flash_cuda.h" /* cpdit_cuda_attention */

#ifdef __cplusplus
extern "C" {
#endif

/* Offset of cuBLAS statuses in the returned codes. */
#define CPDIT_CUDA_CUBLAS_ERROR_BASE 2000

/* dst (rows, cols) of dst_type, row stride ld_dst elements = src (rows, cols) of src_type, row
 * stride ld_src elements: widened exactly, or rounded to nearest even into bf16; the same type
 * is a strided copy. */
int cpdit_cuda_convert_rows(cpdit_cuda_dtype dst_type, void *dst, long ld_dst,
                            cpdit_cuda_dtype src_type, const void *src, long ld_src, size_t rows,
                            int cols, void *stream);

/* y[r * ld + c] = value for r < rows, c < cols; y of element type t. */
int cpdit_cuda_fill_rows(cpdit_cuda_dtype t, void *y, int ld, size_t rows, int cols, float value,
                         void *stream);

/* y[r * ld + c] += b[c] (b fp32 (cols), fp32 math, one rounding) for r < rows; y of type t. */
int cpdit_cuda_add_bias_rows(cpdit_cuda_dtype t, void *y, int ld, const float *b, size_t rows,
                             int cols, void *stream);

/* Reference attention with the semantics of kernels/backend.h's cpdit_attention_args (fp32,
 * any D, row strides, bias (H, Sq, Sk) fp32 device, causal, Sk = 0): per item, queries in
 * chunks so that the scores (H, chunk, Sk) stay within scores_bytes_max:
 *   S = scale Q K^T (cublasSgemmStridedBatched over heads, CUBLAS_COMPUTE_32F: no TF32),
 *   softmax rows (+ bias, causal mask) with the LSE, O = P V (second batched SGEMM).
 * cublas: a cublasHandle_t. workspace: device memory of at least
 * cpdit_cuda_attention_reference_bytes(a, scores_bytes_max) bytes. */
size_t cpdit_cuda_attention_reference_bytes(const cpdit_cuda_attention *a,
                                            size_t scores_bytes_max);
int cpdit_cuda_attention_reference(void *cublas, const float *q, const float *k, const float *v,
                                   float *out, float *lse, const cpdit_cuda_attention *a,
                                   void *workspace, size_t scores_bytes_max, void *stream);

#ifdef __cplusplus
}
#endif
#endif
