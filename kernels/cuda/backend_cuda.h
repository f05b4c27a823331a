/* backend_cuda.h — the CUDA kernel table's extras (--with-cuda): the table itself is
 * cpdit_backend_cuda() in kernels/backend.h.
 *
 * The table (kernels/cuda/backend_cuda.c) runs every op of kernels/backend.h on one device per
 * process, in order on one compute stream:
 *   - memory: the caching allocator (alloc_cuda.h), so sampler steps never call cudaMalloc;
 *     upload/download are complete when they return;
 *   - weights: made once from the stored data; CPDIT_WEIGHT_NATIVE keeps them in bf16 on the
 *     device (bf16 as stored, fp16/fp32/fp8 rounded to bf16), CPDIT_WEIGHT_F32 in fp32;
 *   - activations: bf16 in "cuda" (act_dtype BF16), fp32 in "cuda-fp32"; every kernel loads
 *     the element type, computes in fp32 and stores once (upload_act/download_act convert on
 *     the device through fp32 staging from the caching allocator). linear runs cuBLASLt with
 *     bf16 x and W, fp32 accumulation and a bf16 output (cuda-fp32: x rounded to a bf16 copy,
 *     fp32 output), bias fused (or the exact fp32 path for fp32 weights, through fp32
 *     staging on "cuda"); attention: "cuda-flash" (the flash kernel with LSE on the table's
 *     element type, head dims that are multiples of 32 up to 256, the reference otherwise),
 *     "cuda-reference" (cuBLAS SGEMMs + softmax with LSE on fp32 copies, any shape), "cudnn"
 *     (bf16 q/k/v/out passed to cuDNN as they are when contiguous); the LSE is fp32;
 *   - the VAE's convolutions through cuDNN (NHWC; CPDIT_WEIGHT_NATIVE packs bf16 weights for
 *     cuDNN's bf16 convolution with fp32 accumulation, F32 the exact fp32 one), GroupNorm +
 *     activation fused.
 * The device: the process's local rank on its node (MPI's shared-memory split, done by
 * cpdit_cuda_bind_device_mpi right after MPI_Init; never SLURM_* alone) modulo the visible
 * devices; device 0 when not bound. The first use initialises (lazily, no collective).
 * Errors inside void ops (a failed launch) are reported on stderr at once and latched: the
 * next op that returns a status (linear, attention, conv2d) fails with that message.
 */
#ifndef CPDIT_BACKEND_CUDA_H
#define CPDIT_BACKEND_CUDA_H

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The "cuda-fp32" table: the cuda table's kernels instantiated for fp32 activations (act_dtype
 * F32): the same weights and GEMMs (bf16 weights still multiply bf16-rounded x), no bf16
 * storage between ops. Beside "cuda" in the device checks it tells bf16 storage error from a
 * kernel bug. Listed after "cuda" (kernels/backend.c), never the default. */
const struct cpdit_backend *cpdit_backend_cuda_fp32(void);

/* Bind this process to its device: local rank on the node (MPI_Comm_split_type(SHARED) of
 * MPI_COMM_WORLD) modulo the visible devices. Collective over MPI_COMM_WORLD; call right after
 * MPI_Init on every rank (cpdit_backends_bind_mpi does), before the backend's first use.
 * Without it (or without MPI) the backend uses device 0. */
void cpdit_cuda_bind_device_mpi(void);

/* The compute stream (a cudaStream_t) after initialising the backend on its device
 * (NULL when that failed: err filled). GPU communicators wait on / are waited for by it. */
void *cpdit_cuda_compute_stream(cpdit_error *err);

/* The device the backend uses (initialising it), or -1 with err filled. */
int cpdit_cuda_backend_device(cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
