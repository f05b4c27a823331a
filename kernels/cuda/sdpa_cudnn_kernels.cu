// sdpa_cudnn_kernels.cu — the device helper around cuDNN's attention graph (sdpa_cudnn.h): the
// stats transpose (B, H, Sq) -> (B, Sq, H) (cuDNN's softmax stats into the table's LSE layout).
// Operands move between the tables' activations and the graph through
// cpdit_cuda_convert_rows (backend_cuda_kernels.h).
#include "kernels/cuda/sdpa_cudnn.h"
#include "kernels/cuda/sdpa_layout.h"

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 65535u * 8u;

inline unsigned blocks_for(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b > kMaxBlocks ? kMaxBlocks : (b ? b : 1));
}

__global__ void stats_to_lse_kernel(float *lse, const float *stats, int B, int H, int Sq)
{
    const size_t n = (size_t)B * H * Sq;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        // t indexes lse (b, s, h)
        const size_t h = t % (size_t)H, s = (t / (size_t)H) % (size_t)Sq,
                     b = t / ((size_t)H * Sq);
        lse[t] = stats[cpdit_sdpa_stats_index(b, h, s, (size_t)H, (size_t)Sq)];
    }
}

} // namespace

extern "C" int cpdit_cuda_stats_to_lse(float *lse, const float *stats, int B, int H, int Sq,
                                       void *stream)
{
    const size_t n = (size_t)B * H * Sq;
    if (!n)
        return 0;
    stats_to_lse_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(lse, stats, B, H,
                                                                              Sq);
    return (int)cudaGetLastError();
}
