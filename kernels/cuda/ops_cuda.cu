// ops_cuda.cu — the small ops of the kernel table on CUDA (see ops_cuda.h for semantics).
//
// Row ops (norms) use one block of kRowThreads per row with a two-pass mean/variance in fp32
// (block reductions through shared memory); elementwise ops use a grid-stride loop. Every
// kernel is a template on the activation element type T (float or bf16, elem_cuda.cuh): it
// loads T, computes in fp32 and stores T once; parameters (gamma, beta, RoPE tables, the
// embedding table) are fp32.
#include "kernels/cuda/ops_cuda.h"

#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/elem_cuda.cuh"

namespace {

using cpdit_elem::load;
using cpdit_elem::store;

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

// x, y (rows, dim): one block per row.
template <typename T>
__global__ void layer_norm_kernel(T *y, const T *x, const float *gamma, const float *beta, int dim,
                                  float eps)
{
    __shared__ float red[kRowThreads / 32];
    const T *xr = x + (size_t)blockIdx.x * dim;
    T *yr = y + (size_t)blockIdx.x * dim;
    float s = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        s += load(xr + i);
    float mean = block_sum(s, red) / (float)dim;
    float q = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float d = load(xr + i) - mean;
        q += d * d;
    }
    float inv = rsqrtf(block_sum(q, red) / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = (load(xr + i) - mean) * inv;
        if (gamma)
            v *= gamma[i];
        if (beta)
            v += beta[i];
        store(yr + i, v);
    }
}

template <typename T>
__global__ void rms_norm_kernel(T *y, const T *x, const float *w, int dim, float eps)
{
    __shared__ float red[kRowThreads / 32];
    const T *xr = x + (size_t)blockIdx.x * dim;
    T *yr = y + (size_t)blockIdx.x * dim;
    float q = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = load(xr + i);
        q += v * v;
    }
    float inv = rsqrtf(block_sum(q, red) / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        store(yr + i, load(xr + i) * inv * (w ? w[i] : 1.0f));
}

// One thread per (s, h, pair); x (S, H, D), cos, sin (S, D) fp32.
template <typename T>
__global__ void rope_kernel(T *x, const float *cos, const float *sin, int S, int H, int D)
{
    size_t half = (size_t)D / 2, n = (size_t)S * H * half;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t i = t % half, sh = t / half, s = sh / H;
        T *p = x + sh * D + 2 * i;
        const float *c = cos + s * D + 2 * i, *sn = sin + s * D + 2 * i;
        float a = load(p), b = load(p + 1);
        store(p, a * c[0] - b * sn[0]);
        store(p + 1, b * c[1] + a * sn[1]);
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

template <typename T>
__global__ void act_kernel(int kind, T *y, const T *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store(y + i, act_one(kind, load(x + i)));
}

template <typename T>
__global__ void binary_kernel(int mul, T *y, const T *a, const T *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float u = load(a + i), v = load(b + i);
        store(y + i, mul ? u * v : u + v);
    }
}

// y (n, dim) = rows ids of the fp32 table (vocab, dim).
template <typename T>
__global__ void embedding_kernel(T *y, const float *table, const int32_t *ids, size_t n, int dim)
{
    size_t total = n * (size_t)dim;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t r = t / dim, c = t % dim;
        store(y + t, table[(size_t)ids[r] * dim + c]);
    }
}

template <typename T>
__global__ void modulate_kernel(T *y, const T *x, const T *shift, const T *scale, size_t rows,
                                int dim)
{
    size_t total = rows * (size_t)dim;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(t % dim);
        store(y + t, load(x + t) * (1.0f + load(scale + c)) + load(shift + c));
    }
}

template <typename T>
__global__ void gated_residual_kernel(T *h, int ldh, const T *x, int ldx, const T *gate,
                                      size_t rows, int dim)
{
    size_t total = rows * (size_t)dim;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t r = t / dim;
        int c = (int)(t % dim);
        T *hp = h + r * ldh + c;
        store(hp, load(hp) + load(gate + c) * load(x + r * ldx + c));
    }
}

} // namespace

extern "C" int cpdit_cuda_layer_norm(cpdit_cuda_dtype t, void *y, const void *x,
                                     const float *gamma, const float *beta, size_t rows, int dim,
                                     float eps, void *stream)
{
    if (rows == 0 || dim == 0)
        return 0;
    CPDIT_CUDA_DISPATCH(t, layer_norm_kernel<T><<<(unsigned)rows, kRowThreads, 0,
                                                  (cudaStream_t)stream>>>(
                               (T *)y, (const T *)x, gamma, beta, dim, eps));
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_rms_norm(cpdit_cuda_dtype t, void *y, const void *x,
                                   const float *weight, size_t rows, int dim, float eps,
                                   void *stream)
{
    if (rows == 0 || dim == 0)
        return 0;
    CPDIT_CUDA_DISPATCH(t, rms_norm_kernel<T><<<(unsigned)rows, kRowThreads, 0,
                                                (cudaStream_t)stream>>>((T *)y, (const T *)x,
                                                                        weight, dim, eps));
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_rope(cpdit_cuda_dtype t, void *x, const float *cos, const float *sin,
                               int S, int H, int D, void *stream)
{
    size_t n = (size_t)S * H * (D / 2);
    if (n == 0)
        return 0;
    CPDIT_CUDA_DISPATCH(t, rope_kernel<T><<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(
                               (T *)x, cos, sin, S, H, D));
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_act(cpdit_cuda_dtype t, int kind, void *y, const void *x, size_t n,
                              void *stream)
{
    if (n == 0)
        return 0;
    CPDIT_CUDA_DISPATCH(t, act_kernel<T><<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(
                               kind, (T *)y, (const T *)x, n));
    return (int)cudaGetLastError();
}

static int binary(cpdit_cuda_dtype t, int mul, void *y, const void *a, const void *b, size_t n,
                  void *stream)
{
    if (n == 0)
        return 0;
    CPDIT_CUDA_DISPATCH(t, binary_kernel<T><<<blocks_for(n), kThreads, 0,
                                              (cudaStream_t)stream>>>(mul, (T *)y, (const T *)a,
                                                                      (const T *)b, n));
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_add(cpdit_cuda_dtype t, void *y, const void *a, const void *b, size_t n,
                              void *stream)
{
    return binary(t, 0, y, a, b, n, stream);
}

extern "C" int cpdit_cuda_mul(cpdit_cuda_dtype t, void *y, const void *a, const void *b, size_t n,
                              void *stream)
{
    return binary(t, 1, y, a, b, n, stream);
}

extern "C" int cpdit_cuda_embedding(cpdit_cuda_dtype t, void *y, const float *table,
                                    const int32_t *ids, size_t n, int dim, void *stream)
{
    if (n == 0 || dim == 0)
        return 0;
    CPDIT_CUDA_DISPATCH(t, embedding_kernel<T><<<blocks_for(n * dim), kThreads, 0,
                                                 (cudaStream_t)stream>>>((T *)y, table, ids, n,
                                                                         dim));
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_modulate(cpdit_cuda_dtype t, void *y, const void *x, const void *shift,
                                   const void *scale, size_t rows, int dim, void *stream)
{
    if (rows == 0 || dim == 0)
        return 0;
    CPDIT_CUDA_DISPATCH(t, modulate_kernel<T><<<blocks_for(rows * dim), kThreads, 0,
                                                (cudaStream_t)stream>>>(
                               (T *)y, (const T *)x, (const T *)shift, (const T *)scale, rows,
                               dim));
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_gated_residual(cpdit_cuda_dtype t, void *h, int ldh, const void *x,
                                         int ldx, const void *gate, size_t rows, int dim,
                                         void *stream)
{
    if (rows == 0 || dim == 0)
        return 0;
    CPDIT_CUDA_DISPATCH(t, gated_residual_kernel<T><<<blocks_for(rows * dim), kThreads, 0,
                                                      (cudaStream_t)stream>>>(
                               (T *)h, ldh, (const T *)x, ldx, (const T *)gate, rows, dim));
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_copy_rows(cpdit_cuda_dtype t, void *dst, int ldd, const void *src,
                                    int lds, size_t rows, int dim, void *stream)
{
    if (rows == 0 || dim == 0)
        return 0;
    const size_t es = cpdit_cuda_dtype_size(t);
    return (int)cudaMemcpy2DAsync(dst, (size_t)ldd * es, src, (size_t)lds * es, (size_t)dim * es,
                                  rows, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
}
