/* gemm_lt_cuda.h — nn.Linear on the GPU through cuBLASLt (C linkage, --with-cuda).
 *
 *   y (M, N) = x (M, K) · W^T (+ b) (then GELU-tanh when asked), all row-major on the device,
 *   W (N, K) as nn.Linear stores it, b (N).
 * x, W and y share one element type (fp32 or bf16); accumulation is fp32, and with bf16 the
 * bias is bf16 too (cuBLASLt's rule for the bias epilogue). fp32 inputs use the
 * CUBLAS_COMPUTE_32F path (exact fp32, no TF32), so they serve as the reference.
 *
 * A context owns the cuBLASLt handle, a workspace and a cache of the heuristic's choice per
 * shape (M, N, K, type, epilogue), so repeated shapes (every sampler step) skip the search.
 */
#ifndef CPDIT_GEMM_LT_CUDA_H
#define CPDIT_GEMM_LT_CUDA_H

#include "kernels/cuda/attention_flash_cuda.h" /* cpdit_cuda_dtype */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cpdit_gemm_lt cpdit_gemm_lt;

typedef enum cpdit_gemm_epilogue {
    CPDIT_GEMM_PLAIN = 0, /* y = x W^T (+ b when b != NULL) */
    CPDIT_GEMM_GELU_TANH  /* y = gelu_tanh(x W^T + b) */
} cpdit_gemm_epilogue;

/* A context on the current device with workspace_bytes of workspace (0: 32 MiB). Returns NULL
 * and fills msg (when given) on failure. */
cpdit_gemm_lt *cpdit_gemm_lt_create(size_t workspace_bytes, char *msg, size_t msg_size);
void cpdit_gemm_lt_destroy(cpdit_gemm_lt *g);

/* Queue y = epilogue(x W^T + b) on stream. Returns 0, or a nonzero status with msg filled
 * (cuBLAS status text). */
int cpdit_gemm_lt_linear(cpdit_gemm_lt *g, cpdit_cuda_dtype dtype, void *y, const void *x,
                         const void *w, const void *b, int M, int K, int N,
                         cpdit_gemm_epilogue epilogue, void *stream, char *msg, size_t msg_size);

/* Number of distinct shapes whose algorithm is cached (for tests). */
int cpdit_gemm_lt_cached_shapes(const cpdit_gemm_lt *g);

#ifdef __cplusplus
}
#endif
#endif
