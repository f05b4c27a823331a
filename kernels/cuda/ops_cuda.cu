// ops_cuda.cu — the small ops of the kernel table on CUDA (see ops_cuda.h for semantics).
//
// Row ops (norms) use one block of kRowThreads per row with a two-pass mean/variance in fp32
// (block reductions through shared memory); elementwise ops use a grid-stride loop.
#include "kernels/cuda/ops_cuda.h"

#include <cuda_runtime.h>

#include <cmath>

namespace {

constexpr int kRowThreads = 256;
constexpr int kThreads = 256;

inline unsigned blocks_for(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b > 65535u * 8u ? 65535u * 8u : (b ? b : 1));
}

__device__ float block_sum(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads(); // red may still be read from a previous call
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float t = 0.0f;
    for (int w = 0; w < (int)(blockDim.x / 32); w++)
        t += red[w];
    return t;
}

__global__ void layer_norm_kernel(float *y, const float *x, const float *gamma, const float *beta,
                                  int dim, float eps)
{
    __shared__ float red[kRowThreads / 32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    float s = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        s += xr[i];
    float mean = block_sum(s, red) / (float)dim;
    float q = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float d = xr[i] - mean;
        q += d * d;
    }
    float inv = rsqrtf(block_sum(q, red) / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = (xr[i] - mean) * inv;
        if (gamma)
            v *= gamma[i];
        if (beta)
            v += beta[i];
        yr[i] = v;
    }
}

__global__ void rms_norm_kernel(float *y, const float *x, const float *w, int dim, float eps)
{
    __shared__ float red[kRowThreads / 32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    float q = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        q += xr[i] * xr[i];
    float inv = rsqrtf(block_sum(q, red) / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        yr[i] = xr[i] * inv * (w ? w[i] : 1.0f);
}

// One thread per (s, h, pair).
__global__ void rope_kernel(float *x, const float *cos, const float *sin, int S, int H, int D)
{
    size_t half = (size_t)D / 2, n = (size_t)S * H * half;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t i = t % half, sh = t / half, s = sh / H;
        float *p = x + sh * D + 2 * i;
        const float *c = cos + s * D + 2 * i, *sn = sin + s * D + 2 * i;
        float a = p[0], b = p[1];
        p[0] = a * c[0] - b * sn[0];
        p[1] = b * c[1] + a * sn[1];
    }
}

__device__ inline float act_one(int kind, float v)
{
    switch (kind) {
    case CPDIT_CUDA_ACT_GELU_TANH:
        return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case CPDIT_CUDA_ACT_GELU_ERF:
        return 0.5f * v * erfcf(-v * 0.7071067811865476f);
    case CPDIT_CUDA_ACT_QUICK_GELU:
        return v / (1.0f + expf(-1.702f * v));
    case CPDIT_CUDA_ACT_SILU:
        return v / (1.0f + expf(-v));
    case CPDIT_CUDA_ACT_MISH: // softplus as torch: x above 20 is its own softplus
        return v * tanhf(v > 20.0f ? v : log1pf(expf(v)));
    default:
        return v > 0.0f ? v : 0.0f;
    }
}

__global__ void act_kernel(int kind, float *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = act_one(kind, x[i]);
}

__global__ void binary_kernel(int mul, float *y, const float *a, const float *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = mul ? a[i] * b[i] : a[i] + b[i];
}

__global__ void embedding_kernel(float *y, const float *table, const int32_t *ids, size_t n,
                                 int dim)
{
    size_t total = n * (size_t)dim;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t r = t / dim, c = t % dim;
        y[t] = table[(size_t)ids[r] * dim + c];
    }
}

__global__ void modulate_kernel(float *y, const float *x, const float *shift, const float *scale,
                                size_t rows, int dim)
{
    size_t total = rows * (size_t)dim;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(t % dim);
        y[t] = x[t] * (1.0f + scale[c]) + shift[c];
    }
}

__global__ void gated_residual_kernel(float *h, int ldh, const float *x, int ldx,
                                      const float *gate, size_t rows, int dim)
{
    size_t total = rows * (size_t)dim;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t r = t / dim;
        int c = (int)(t % dim);
        h[r * ldh + c] += gate[c] * x[r * ldx + c];
    }
}

} // namespace

extern "C" int cpdit_cuda_layer_norm(float *y, const float *x, const float *gamma,
                                     const float *beta, size_t rows, int dim, float eps,
                                     void *stream)
{
    if (rows == 0 || dim == 0)
        return 0;
    layer_norm_kernel<<<(unsigned)rows, kRowThreads, 0, (cudaStream_t)stream>>>(y, x, gamma, beta,
                                                                              dim, eps);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_rms_norm(float *y, const float *x, const float *weight, size_t rows,
                                   int dim, float eps, void *stream)
{
    if (rows == 0 || dim == 0)
        return 0;
    rms_norm_kernel<<<(unsigned)rows, kRowThreads, 0, (cudaStream_t)stream>>>(y, x, weight, dim,
                                                                            eps);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_rope(float *x, const float *cos, const float *sin, int S, int H, int D,
                               void *stream)
{
    size_t n = (size_t)S * H * (D / 2);
    if (n == 0)
        return 0;
    rope_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(x, cos, sin, S, H, D);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_act(int kind, float *y, const float *x, size_t n, void *stream)
{
    if (n == 0)
        return 0;
    act_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(kind, y, x, n);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_add(float *y, const float *a, const float *b, size_t n, void *stream)
{
    if (n == 0)
        return 0;
    binary_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(0, y, a, b, n);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_mul(float *y, const float *a, const float *b, size_t n, void *stream)
{
    if (n == 0)
        return 0;
    binary_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(1, y, a, b, n);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_embedding(float *y, const float *table, const int32_t *ids, size_t n,
                                    int dim, void *stream)
{
    if (n == 0 || dim == 0)
        return 0;
    embedding_kernel<<<blocks_for(n * dim), kThreads, 0, (cudaStream_t)stream>>>(y, table, ids, n,
                                                                                 dim);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_modulate(float *y, const float *x, const float *shift,
                                   const float *scale, size_t rows, int dim, void *stream)
{
    if (rows == 0 || dim == 0)
        return 0;
    modulate_kernel<<<blocks_for(rows * dim), kThreads, 0, (cudaStream_t)stream>>>(
        y, x, shift, scale, rows, dim);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_gated_residual(float *h, int ldh, const float *x, int ldx,
                                         const float *gate, size_t rows, int dim, void *stream)
{
    if (rows == 0 || dim == 0)
        return 0;
    gated_residual_kernel<<<blocks_for(rows * dim), kThreads, 0, (cudaStream_t)stream>>>(
        h, ldh, x, ldx, gate, rows, dim);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_copy_rows(float *dst, int ldd, const float *src, int lds, size_t rows,
                                    int dim, void *stream)
{
    if (rows == 0 || dim == 0)
        return 0;
    return (int)cudaMemcpy2DAsync(dst, (size_t)ldd * sizeof(float), src,
                                  (size_t)lds * sizeof(float), (size_t)dim * sizeof(float), rows,
                                  cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
}
