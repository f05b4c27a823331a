// vae_ops_cuda.cu — the VAE's ops on CUDA (see vae_ops_cuda.h).
//
// Convolution: cuDNN's convolution forward on NHWC tensors of the weights' type (fp32, or bf16
// with fp32 accumulation). A band of output rows [r0, r1) with a 3x3 kernel reads input rows
// r0-1 .. r1 (halo rows supplied by the caller), so the input is described as a (r1-r0+2)-row
// image with no vertical padding and one column of horizontal padding; a 1x1 kernel reads rows
// r0 .. r1-1. The algorithm is cuDNN's heuristic choice per shape, cached; the workspace comes
// from the caching allocator. The other kernels are templates on the activation element type
// (elem_cuda.cuh): fp32 math, one rounding at the store; moments in double.
#include "kernels/cuda/vae_ops_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/alloc_cuda.h"
#include "kernels/cuda/elem_cuda.cuh"

namespace {

using cpdit_elem::load;
using cpdit_elem::store;

constexpr int kThreads = 256;
constexpr int kCudnnError = 100000; // above cuBLAS (2000 + status) and CUDA codes

unsigned blocks_for(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b > 65535u * 16u ? 65535u * 16u : (b ? b : 1));
}

cudnnHandle_t handle_for(cudaStream_t s)
{
    static thread_local cudnnHandle_t h = nullptr;
    if (!h && cudnnCreate(&h) != CUDNN_STATUS_SUCCESS)
        return nullptr;
    cudnnSetStream(h, s);
    return h;
}

struct conv_plan {
    int W, Cin, Cout, K, rows_in, bf16;
    cudnnConvolutionFwdAlgo_t algo;
    cudnnMathType_t math; // the math type the heuristic evaluated the algorithm with
    size_t ws_bytes;
    int f32_fallback;     // bf16: cuDNN has no bf16 algorithm for the shape: run it in fp32
};
thread_local std::vector<conv_plan> g_plans;

__global__ void pack_kernel(float *dst, const float *src, int Cout, int Cin, int K)
{
    size_t n = (size_t)Cout * Cin * K * K;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        // dst (Cout, K, K, Cin) <- src (Cout, Cin, K, K)
        size_t ci = t % Cin, kx = (t / Cin) % K, ky = (t / Cin / K) % K, co = t / Cin / K / K;
        dst[t] = src[((co * Cin + ci) * K + ky) * K + kx];
    }
}

// y = x (+ bias, fp32, channel t % C), n values, converted from TS to TD once; y may be x
// (TD == TS: the bias added in place).
template <typename TD, typename TS>
__global__ void convert_bias_kernel(TD *y, const TS *x, const float *b, size_t n, int C)
{
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x)
        store(y + t, load(x + t) + (b ? b[t % C] : 0.0f));
}

// y = x (+ b) from src_type to dst_type, n values of C channels, queued on s.
int convert_bias(cpdit_cuda_dtype dst_type, void *y, cpdit_cuda_dtype src_type, const void *x,
                 const float *b, size_t n, int C, cudaStream_t s)
{
    const unsigned nb = blocks_for(n);
    if (dst_type == CPDIT_CUDA_BF16 && src_type == CPDIT_CUDA_BF16)
        convert_bias_kernel<<<nb, kThreads, 0, s>>>((__nv_bfloat16 *)y,
                                                    (const __nv_bfloat16 *)x, b, n, C);
    else if (dst_type == CPDIT_CUDA_BF16)
        convert_bias_kernel<<<nb, kThreads, 0, s>>>((__nv_bfloat16 *)y, (const float *)x, b, n,
                                                    C);
    else if (src_type == CPDIT_CUDA_BF16)
        convert_bias_kernel<<<nb, kThreads, 0, s>>>((float *)y, (const __nv_bfloat16 *)x, b, n,
                                                    C);
    else
        convert_bias_kernel<<<nb, kThreads, 0, s>>>((float *)y, (const float *)x, b, n, C);
    return (int)cudaGetLastError();
}

// grid (G, blocks per group): each block sums a slice of the group's elements in double.
template <typename T>
__global__ void moments_kernel(double *acc, const T *x, size_t pixels, int C, int G,
                               const double *mean)
{
    __shared__ double red[kThreads];
    int g = blockIdx.x, cg = C / G;
    size_t n = pixels * (size_t)cg;
    double m = mean ? mean[g] : 0.0, s = 0.0;
    for (size_t t = blockIdx.y * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.y * blockDim.x) {
        size_t p = t / cg;
        int c = g * cg + (int)(t % cg);
        double v = load(x + p * C + c);
        s += mean ? (v - m) * (v - m) : v;
    }
    red[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o)
            red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(&acc[g], red[0]);
}

__device__ inline float vae_act(int act, float v)
{
    switch (act) {
    case CPDIT_CUDA_VAE_ACT_SILU: return v / (1.0f + expf(-v));
    case CPDIT_CUDA_VAE_ACT_GELU: return 0.5f * v * erfcf(-v * 0.7071067811865476f);
    case CPDIT_CUDA_VAE_ACT_RELU: return v > 0.0f ? v : 0.0f;
    case CPDIT_CUDA_VAE_ACT_MISH: return v * tanhf(log1pf(expf(v)));
    default: return v;
    }
}

template <typename T>
__global__ void norm_apply_kernel(T *y, const T *x, size_t pixels, int C, int G,
                                  const double *mean, const double *rstd, const float *gamma,
                                  const float *beta, int act)
{
    size_t n = pixels * (size_t)C;
    int cg = C / G;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(t % C), g = c / cg;
        float v = (float)(((double)load(x + t) - mean[g]) * rstd[g]);
        if (gamma)
            v *= gamma[c];
        if (beta)
            v += beta[c];
        store(y + t, vae_act(act, v));
    }
}

// Element moves of any 2- or 4-byte type E (bits copied as they are).
template <typename E>
__global__ void upsample_kernel(E *y, const E *x, int rows, int W, int C)
{
    size_t n = (size_t)rows * 2 * W * 2 * C;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t c = t % C, i = (t / C) % (2 * (size_t)W), r = t / C / (2 * (size_t)W);
        y[t] = x[((r / 2) * W + i / 2) * C + c];
    }
}

// Tiles of 32 x 32: block x walks the column tiles; the row tiles are walked in a loop from
// blockIdx.y with stride gridDim.y (gridDim.y is at most 65535: a 2048^2 image has 4M pixels,
// 131072 row tiles).
template <typename E>
__global__ void transpose_kernel(E *y, const E *x, size_t rows, size_t cols)
{
    __shared__ E tile[32][33];
    const size_t c0 = (size_t)blockIdx.x * 32;
    for (size_t r0 = (size_t)blockIdx.y * 32; r0 < rows; r0 += (size_t)gridDim.y * 32) {
        for (int j = threadIdx.y; j < 32; j += blockDim.y) {
            size_t r = r0 + j, c = c0 + threadIdx.x;
            if (r < rows && c < cols)
                tile[j][threadIdx.x] = x[r * cols + c];
        }
        __syncthreads();
        for (int j = threadIdx.y; j < 32; j += blockDim.y) {
            size_t c = c0 + j, r = r0 + threadIdx.x;
            if (r < rows && c < cols)
                y[c * rows + r] = tile[threadIdx.x][j];
        }
        __syncthreads(); // the tile is rewritten by the next row tile
    }
}

} // namespace

extern "C" float *cpdit_cuda_conv2d_pack(const float *w, int Cout, int Cin, int K)
{
    size_t n = (size_t)Cout * Cin * K * K;
    float *src = (float *)cpdit_cuda_alloc(n * sizeof(float));
    float *dst = (float *)cpdit_cuda_alloc(n * sizeof(float));
    if (!src || !dst || cudaMemcpy(src, w, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        cpdit_cuda_free(src);
        cpdit_cuda_free(dst);
        return nullptr;
    }
    pack_kernel<<<blocks_for(n), kThreads>>>(dst, src, Cout, Cin, K);
    cudaError_t e = cudaDeviceSynchronize();
    cpdit_cuda_free(src);
    if (e != cudaSuccess) {
        cpdit_cuda_free(dst);
        return nullptr;
    }
    return dst;
}

extern "C" void *cpdit_cuda_conv2d_pack_bf16(const float *w, int Cout, int Cin, int K)
{
    const size_t n = (size_t)Cout * Cin * K * K;
    float *f = cpdit_cuda_conv2d_pack(w, Cout, Cin, K);
    void *dst = f ? cpdit_cuda_alloc(n * 2) : nullptr;
    if (!dst) {
        cpdit_cuda_free(f);
        return nullptr;
    }
    cudaError_t e = (cudaError_t)convert_bias(CPDIT_CUDA_BF16, dst, CPDIT_CUDA_F32, f, nullptr, n,
                                              1, nullptr);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    cpdit_cuda_free(f);
    if (e != cudaSuccess) {
        cpdit_cuda_free(dst);
        return nullptr;
    }
    return dst;
}

static int conv2d_any(cpdit_cuda_dtype act, void *y, const void *x, const void *w_packed,
                      int bf16, const float *b, int W, int Cin, int Cout, int K, int r0, int r1,
                      void *stream);

extern "C" int cpdit_cuda_conv2d(cpdit_cuda_dtype act, void *y, const void *x,
                                 const void *w_packed, cpdit_cuda_dtype wtype, const float *b,
                                 int W, int Cin, int Cout, int K, int r0, int r1, void *stream)
{
    return conv2d_any(act, y, x, w_packed, wtype == CPDIT_CUDA_BF16, b, W, Cin, Cout, K, r0, r1,
                      stream);
}

// The heuristic's first usable algorithm for the descriptors (cached per shape by the caller).
// fp32: only FMA-math algorithms (no TF32 tensor cores: the VAE must match the CPU to 1e-5);
// bf16: any, with the math type it was evaluated with; none -> f32_fallback.
static cudnnStatus_t choose_algo(cudnnHandle_t h, cudnnTensorDescriptor_t xd,
                                 cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd,
                                 cudnnTensorDescriptor_t yd, conv_plan *p)
{
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    cudnnStatus_t st = cudnnGetConvolutionForwardAlgorithm_v7(
        h, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    int have = 0;
    for (int i = 0; i < found && !have; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS)
            continue;
        if (!p->bf16 && perf[i].mathType != CUDNN_FMA_MATH &&
            perf[i].mathType != CUDNN_DEFAULT_MATH)
            continue;
        p->algo = perf[i].algo;
        p->math = p->bf16 ? perf[i].mathType : CUDNN_FMA_MATH;
        have = 1;
    }
    if (!have) {
        if (p->bf16) {
            p->f32_fallback = 1;
            return CUDNN_STATUS_SUCCESS;
        }
        p->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM; // FMA math, any layout
        p->math = CUDNN_FMA_MATH;
    }
    st = cudnnSetConvolutionMathType(cd, p->math);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, p->algo, &p->ws_bytes);
    return st;
}

// The convolution runs in the weights' type dt: fp32 (x, w, y fp32, FMA math: exact fp32) or
// bf16 (x, w, y bf16 with fp32 accumulation: cuDNN's PSEUDO_BFLOAT16 configuration, tensor
// cores). Activations x, y of type act: an input band of another type than dt is converted to
// a dt staging band first; the output is written to y directly when act == dt (the bias then
// added in place: with bf16 that rounds twice, once in cuDNN and once after the fp32 bias),
// else to a dt staging band converted into y with the bias in one pass. A shape with no bf16
// algorithm (e.g. the VAE's conv_out, 3 output channels) runs in fp32 from the bf16 weights
// widened exactly.
static int conv2d_any(cpdit_cuda_dtype act, void *y, const void *x, const void *w_packed,
                      int bf16, const float *b, int W, int Cin, int Cout, int K, int r0, int r1,
                      void *stream)
{
    if (r1 <= r0 || W <= 0)
        return 0;
    if (K != 1 && K != 3)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    cudnnHandle_t h = handle_for(s);
    if (!h)
        return kCudnnError + (int)CUDNN_STATUS_NOT_INITIALIZED;
    // the band in elements from row 0 of x and y (row -1 for a 3x3 kernel's halo), then bytes
    const cpdit_conv_band band = cpdit_conv_band_for(K, r0, r1, W, Cin, Cout);
    const int rows_out = band.rows_out, rows_in = band.rows_in;
    const ptrdiff_t es = (ptrdiff_t)cpdit_cuda_dtype_size(act); // activation bytes
    const cpdit_cuda_dtype dtc = bf16 ? CPDIT_CUDA_BF16 : CPDIT_CUDA_F32;
    const void *xin = (const char *)x + (ptrdiff_t)band.in_offset * es;
    void *yout = (char *)y + (ptrdiff_t)band.out_offset * es;
    const size_t n_in = band.in_elems, n_out = band.out_elems;
    const cudnnDataType_t dt = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
    cudnnFilterDescriptor_t wd = nullptr;
    cudnnConvolutionDescriptor_t cd = nullptr;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
#define CK(call)                                                                                   \
    do {                                                                                           \
        if (st == CUDNN_STATUS_SUCCESS)                                                            \
            st = (call);                                                                           \
    } while (0)
    CK(cudnnCreateTensorDescriptor(&xd));
    CK(cudnnCreateTensorDescriptor(&yd));
    CK(cudnnCreateFilterDescriptor(&wd));
    CK(cudnnCreateConvolutionDescriptor(&cd));
    CK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, dt, 1, Cin, rows_in, W));
    CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, dt, 1, Cout, rows_out, W));
    CK(cudnnSetFilter4dDescriptor(wd, dt, CUDNN_TENSOR_NHWC, Cout, Cin, K, K));
    CK(cudnnSetConvolution2dDescriptor(cd, 0, K == 3 ? 1 : 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                       CUDNN_DATA_FLOAT));
    // fp32 exactly: no TF32 tensor-core math; bf16: tensor cores with fp32 accumulation (the
    // heuristic below sets the math type its algorithm was evaluated with)
    CK(cudnnSetConvolutionMathType(cd, bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    conv_plan *plan = nullptr;
    for (auto &p : g_plans)
        if (p.W == W && p.Cin == Cin && p.Cout == Cout && p.K == K && p.rows_in == rows_in &&
            p.bf16 == bf16)
            plan = &p;
    if (st == CUDNN_STATUS_SUCCESS && !plan) {
        conv_plan p{W, Cin, Cout, K, rows_in, bf16, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                    CUDNN_FMA_MATH, 0, 0};
        CK(choose_algo(h, xd, wd, cd, yd, &p));
        if (st == CUDNN_STATUS_SUCCESS) {
            g_plans.push_back(p);
            plan = &g_plans.back();
        }
    } else if (st == CUDNN_STATUS_SUCCESS && !plan->f32_fallback) {
        CK(cudnnSetConvolutionMathType(cd, plan->math));
    }
    if (st == CUDNN_STATUS_SUCCESS && plan->f32_fallback) {
        cudnnDestroyTensorDescriptor(xd);
        cudnnDestroyTensorDescriptor(yd);
        cudnnDestroyFilterDescriptor(wd);
        cudnnDestroyConvolutionDescriptor(cd);
        const size_t n_w = (size_t)Cout * K * K * Cin;
        float *w32 = (float *)cpdit_cuda_alloc(n_w * sizeof(float));
        if (!w32)
            return (int)cudaErrorMemoryAllocation;
        int rc = convert_bias(CPDIT_CUDA_F32, w32, CPDIT_CUDA_BF16, w_packed, nullptr, n_w, 1, s);
        if (!rc)
            rc = conv2d_any(act, y, x, w32, 0, b, W, Cin, Cout, K, r0, r1, stream);
        cpdit_cuda_free(w32); // stream-ordered reuse: see alloc_cuda.h
        return rc;
    }
    // staging in the convolution's type of the input band and the output, when act differs
    const int staged = act != dtc;
    const size_t esc = cpdit_cuda_dtype_size(dtc);
    void *xb = nullptr, *yb = nullptr;
    if (st == CUDNN_STATUS_SUCCESS && staged) {
        xb = cpdit_cuda_alloc(n_in * esc);
        yb = cpdit_cuda_alloc(n_out * esc);
        if (!xb || !yb)
            st = CUDNN_STATUS_ALLOC_FAILED;
        else if (convert_bias(dtc, xb, act, xin, nullptr, n_in, 1, s))
            st = CUDNN_STATUS_EXECUTION_FAILED;
    }
    void *ws = nullptr;
    if (st == CUDNN_STATUS_SUCCESS && plan->ws_bytes) {
        ws = cpdit_cuda_alloc(plan->ws_bytes);
        if (!ws)
            st = CUDNN_STATUS_ALLOC_FAILED;
    }
    const float one = 1.0f, zero = 0.0f;
    CK(cudnnConvolutionForward(h, &one, xd, staged ? (const void *)xb : xin, wd, w_packed, cd,
                               plan->algo, ws, plan->ws_bytes, &zero, yd, staged ? yb : yout));
#undef CK
    cpdit_cuda_free(ws); // stream-ordered reuse: see alloc_cuda.h
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cd);
    int rc = st != CUDNN_STATUS_SUCCESS ? kCudnnError + (int)st : 0;
    if (!rc && staged) // staging -> y (+ bias), one rounding
        rc = convert_bias(act, yout, dtc, yb, b, n_out, Cout, s);
    else if (!rc && b) // in place
        rc = convert_bias(act, yout, act, yout, b, n_out, Cout, s);
    cpdit_cuda_free(xb);
    cpdit_cuda_free(yb);
    return rc;
}

extern "C" int cpdit_cuda_group_moments(cpdit_cuda_dtype t, double *acc, const void *x,
                                        size_t pixels, int C, int G, const double *mean,
                                        void *stream)
{
    if (G <= 0 || C % G)
        return (int)cudaErrorInvalidValue;
    if (pixels == 0 || C == 0)
        return 0;
    size_t per_group = pixels * (size_t)(C / G);
    unsigned by = (unsigned)((per_group + kThreads * 16 - 1) / (kThreads * 16));
    if (by > 1024)
        by = 1024;
    CPDIT_CUDA_DISPATCH(t, moments_kernel<T><<<dim3((unsigned)G, by ? by : 1), kThreads, 0,
                                               (cudaStream_t)stream>>>(acc, (const T *)x, pixels,
                                                                       C, G, mean));
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_group_norm_apply(cpdit_cuda_dtype t, void *y, const void *x,
                                           size_t pixels, int C, int G, const double *mean,
                                           const double *rstd, const float *gamma,
                                           const float *beta, int act, void *stream)
{
    size_t n = pixels * (size_t)C;
    if (n == 0)
        return 0;
    CPDIT_CUDA_DISPATCH(t, norm_apply_kernel<T><<<blocks_for(n), kThreads, 0,
                                                  (cudaStream_t)stream>>>(
                               (T *)y, (const T *)x, pixels, C, G, mean, rstd, gamma, beta, act));
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_upsample2x(cpdit_cuda_dtype t, void *y, const void *x, int rows, int W,
                                     int C, void *stream)
{
    size_t n = (size_t)rows * 4 * W * C;
    if (n == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    if (t == CPDIT_CUDA_BF16) // bf16 bits moved as 2-byte words
        upsample_kernel<<<blocks_for(n), kThreads, 0, s>>>((uint16_t *)y, (const uint16_t *)x,
                                                           rows, W, C);
    else
        upsample_kernel<<<blocks_for(n), kThreads, 0, s>>>((float *)y, (const float *)x, rows, W,
                                                           C);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_transpose(cpdit_cuda_dtype t, void *y, const void *x, size_t rows,
                                    size_t cols, void *stream)
{
    if (rows == 0 || cols == 0)
        return 0;
    const size_t row_tiles = (rows + 31) / 32, max_y = 65535;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)(row_tiles < max_y ? row_tiles : max_y));
    cudaStream_t s = (cudaStream_t)stream;
    if (t == CPDIT_CUDA_BF16) // bf16 bits moved as 2-byte words
        transpose_kernel<<<grid, dim3(32, 8), 0, s>>>((uint16_t *)y, (const uint16_t *)x, rows,
                                                      cols);
    else
        transpose_kernel<<<grid, dim3(32, 8), 0, s>>>((float *)y, (const float *)x, rows, cols);
    return (int)cudaGetLastError();
}
