/* gemm_lt_cuda.h — nn.Linear on the GPU through cuBLASLt (C linkage, --with-cuda).
 *
 *   y (M, N) = x (M, K) · W^T (+ b) (then GELU-tanh when asked), all row-major on the device,
 *   W (N, K) as nn.Linear stores it, b (N).
 * x and W share one element type (fp32 or bf16), y is fp32 or bf16 (bf16 only with bf16
 * inputs); accumulation is fp32 (CUBLAS_COMPUTE_32F, fp32 scale), the output is rounded once.
 * fp32 inputs use the exact fp32 path (no TF32), so they serve as the reference.
 *
 * A context owns the cuBLASLt handle, a workspace and a cache of the heuristic's choice per
 * key (shape, row strides, input/output types, epilogue, bias, accumulate, pointer
 * alignments), so repeated shapes (every sampler step) skip the search. Calls are serialised
 * by one lock (they share the workspace and the cached descriptors' bias pointer); the layout
 * mapping is kernels/cuda/gemm_layout.h.
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

/* The kernel table's linear (kernels/backend.h) in one cuBLASLt call:
 *   y (M, N), row stride ldy, fp32  =  [y +] x (M, K), row stride ldx · W^T  (+ b)
 * with W (N, K) and x of one element type wtype (bf16: tensor cores; fp32: the exact
 * CUBLAS_COMPUTE_32F path), fp32 accumulation, fp32 output and fp32 bias b (N) or NULL fused
 * in the epilogue; accumulate = 1 adds to y (beta = 1, y read as C and written as D).
 * Returns 0 or a nonzero cuBLAS status with msg filled. */
int cpdit_gemm_lt_linear_f32out(cpdit_gemm_lt *g, cpdit_cuda_dtype wtype, float *y, int ldy,
                                const void *x, int ldx, const void *w, const float *b, int M,
                                int K, int N, int accumulate, void *stream, char *msg,
                                size_t msg_size);

/* cpdit_gemm_lt_linear_f32out with an epilogue: CPDIT_GEMM_GELU_TANH gives
 *   y = gelu_tanh(x W^T + b)   (CUBLASLT_EPILOGUE_GELU_BIAS, or _GELU without b)
 * with accumulate = 0 only (INVALID_VALUE otherwise). Returns 0 or the cuBLAS status:
 * CUBLAS_STATUS_NOT_SUPPORTED (15) when cuBLASLt has no algorithm for the shape and types (kept,
 * so asked once per shape): the caller then runs the GEMM and the activation apart. */
int cpdit_gemm_lt_linear_f32out_ex(cpdit_gemm_lt *g, cpdit_cuda_dtype wtype, float *y, int ldy,
                                   const void *x, int ldx, const void *w, const float *b, int M,
                                   int K, int N, int accumulate, cpdit_gemm_epilogue epilogue,
                                   void *stream, char *msg, size_t msg_size);

/* The general form: y (M, N) of out_type, row stride ldy elements  =  [y +] epilogue(x (M, K) of
 * in_type, row stride ldx · W^T + b), W (N, K) of in_type, b (N) fp32 or NULL. in_type bf16
 * with out_type bf16 is the "cuda" table's linear (x bf16 activations directly, D = C = y bf16
 * for accumulate = 1); bf16 -> fp32 and fp32 -> fp32 as cpdit_gemm_lt_linear_f32out_ex. With a
 * bf16 y the fp32 bias is given to cuBLASLt as fp32 when it takes it, else as a bf16 copy
 * made on the stream (see gemm_lt_cuda.cu). Returns as cpdit_gemm_lt_linear_f32out_ex. */
int cpdit_gemm_lt_linear_typed(cpdit_gemm_lt *g, cpdit_cuda_dtype in_type,
                               cpdit_cuda_dtype out_type, void *y, int ldy, const void *x,
                               int ldx, const void *w, const float *b, int M, int K, int N,
                               int accumulate, cpdit_gemm_epilogue epilogue, void *stream,
                               char *msg, size_t msg_size);

/* Number of distinct shapes whose algorithm is cached (for tests). */
int cpdit_gemm_lt_cached_shapes(const cpdit_gemm_lt *g);

/* Calls of cpdit_gemm_lt_linear_typed with a bf16 output whose fp32 bias cuBLASLt refused, so
 * that a bf16 copy of the bias was made (0 when cuBLASLt takes fp32 biases with bf16 outputs;
 * the device checks print it). */
long cpdit_gemm_lt_bias_copies(const cpdit_gemm_lt *g);

#ifdef __cplusplus
}
#endif
#endif
