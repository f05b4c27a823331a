/* sdpa_cudnn.h — cuDNN's fused scaled-dot-product attention through the cuDNN 9 graph (backend)
 * API, in C (--with-cuda); the "cudnn" attention kernel of the CUDA table.
 *
 * The graph is the one cuDNN's runtime fusion engines recognise as flash attention with
 * softmax statistics (the composite form cudnn-frontend lowers its SDPA node to):
 *   S  = Q K^T                      matmul, fp32 accumulate          [B, H, Sq, Skv] virtual
 *   S' = S * scale                  pointwise MUL, scale by value
 *   M  = max_j S'                   reduction MAX                    [B, H, Sq, 1] virtual
 *   E  = exp(S' - M)                pointwise SUB, EXP
 *   L  = sum_j E                    reduction ADD                    [B, H, Sq, 1] virtual
 *   Stats = M + log(L)              pointwise LOG, ADD               [B, H, Sq, 1] fp32 out
 *   P  = E / L                      pointwise DIV, bf16 (bmm2's input type)
 *   O  = P V                        matmul                           [B, H, Sq, D] bf16 out
 * so Stats is the natural-log log-sum-exp of the scaled scores, max + log(sum exp(s - max)):
 * exactly the LSE the ring merge uses (kernels/backend.h), once transposed to (B, Sq, H).
 *
 * Layouts (device memory, bf16, 16-byte aligned): q, o (B, Sq, H, D) and k, v (B, Skv, H, D)
 * contiguous (token-major, as the table's activations); stats (B, H, Sq) fp32.
 * An execution plan is built once per shape (B, Sq, Skv, H, D) and cached (the scale is passed
 * by value at each call, so it does not key the cache); shapes cuDNN refuses (no engine from the
 * heuristics, none finalises) are cached as refused too, so the search runs once per shape.
 * Workspace comes from the caching allocator (alloc_cuda.h) in stream order.
 */
#ifndef CPDIT_SDPA_CUDNN_H
#define CPDIT_SDPA_CUDNN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cpdit_cudnn_sdpa cpdit_cudnn_sdpa;

/* A return value: cuDNN has no engine for this shape (msg names the shape and why). */
#define CPDIT_CUDNN_SDPA_UNSUPPORTED 1
/* Any other failure (cuDNN or CUDA error, out of memory; msg says which). */
#define CPDIT_CUDNN_SDPA_ERROR 2

/* A context with its own cuDNN handle on the current device; NULL with msg filled on failure. */
cpdit_cudnn_sdpa *cpdit_cudnn_sdpa_create(char *msg, size_t msg_size);
void cpdit_cudnn_sdpa_destroy(cpdit_cudnn_sdpa *s);

/* Build (or find) the plan for a shape without running it: 0, CPDIT_CUDNN_SDPA_UNSUPPORTED or
 * CPDIT_CUDNN_SDPA_ERROR, msg filled when nonzero. */
int cpdit_cudnn_sdpa_prepare(cpdit_cudnn_sdpa *s, int B, int Sq, int Skv, int H, int D, char *msg,
                             size_t msg_size);

/* Queue o = softmax(scale q k^T) v and stats on stream (a cudaStream_t). Sizes > 0. Returns 0,
 * CPDIT_CUDNN_SDPA_UNSUPPORTED (nothing queued) or CPDIT_CUDNN_SDPA_ERROR; msg filled when
 * nonzero. Thread-safe (one lock per context). */
int cpdit_cudnn_sdpa_forward(cpdit_cudnn_sdpa *s, const void *q, const void *k, const void *v,
                             void *o, float *stats, int B, int Sq, int Skv, int H, int D,
                             float scale, void *stream, char *msg, size_t msg_size);

/* Number of shapes with a cached decision (plan or refusal), for tests. */
int cpdit_cudnn_sdpa_cached_shapes(const cpdit_cudnn_sdpa *s);

/* Build the graph's tensor and operation descriptors for a shape and finalise them, without a
 * handle, an operation graph or a device (what can be checked on a machine without a GPU):
 * 0, or CPDIT_CUDNN_SDPA_ERROR with msg naming the descriptor cuDNN rejected. */
int cpdit_cudnn_sdpa_check_ops(int B, int Sq, int Skv, int H, int D, char *msg, size_t msg_size);

/* ---- the device helper around the graph (sdpa_cudnn_kernels.cu); 0 or a cudaError_t value */

/* lse (B, Sq, H) = stats (B, H, Sq). */
int cpdit_cuda_stats_to_lse(float *lse, const float *stats, int B, int H, int Sq, void *stream);

#ifdef __cplusplus
}
#endif
#endif
