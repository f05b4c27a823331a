// elem_cuda.cuh — activation elements in the CUDA kernels (device code, --with-cuda).
//
// The kernel table stores activations as fp32 ("cuda-fp32") or bf16 ("cuda"); every kernel is a
// template on the element type T and computes in fp32: load() widens, store() rounds to
// nearest even once. CPDIT_CUDA_DISPATCH runs a statement with T bound to the type of a
// cpdit_cuda_dtype value.
#ifndef CPDIT_ELEM_CUDA_CUH
#define CPDIT_ELEM_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/attention_flash_cuda.h" /* cpdit_cuda_dtype */

namespace cpdit_elem {

__device__ __forceinline__ float load(const float *p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store(float *p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

} // namespace cpdit_elem

// Run `call` (a statement using the type name T) for the element type of dtype `t`.
#define CPDIT_CUDA_DISPATCH(t, ...)                                                                \
    do {                                                                                           \
        if ((t) == CPDIT_CUDA_BF16) {                                                              \
            typedef __nv_bfloat16 T;                                                               \
            __VA_ARGS__;                                                                           \
        } else {                                                                                   \
            typedef float T;                                                                       \
            __VA_ARGS__;                                                                           \
        }                                                                                          \
    } while (0)

#endif
