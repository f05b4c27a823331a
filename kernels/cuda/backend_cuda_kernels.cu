// backend_cuda_kernels.cu — device helpers of the CUDA table (see backend_cuda_kernels.h).
#include "kernels/cuda/backend_cuda_kernels.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/elem_cuda.cuh"

namespace {

using cpdit_elem::load;
using cpdit_elem::store;

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 65535u * 8u;

inline unsigned blocks_for(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b > kMaxBlocks ? kMaxBlocks : (b ? b : 1));
}

// dst (rows, cols), row stride ld_dst = src (rows, cols), row stride ld_src, through fp32.
template <typename TD, typename TS>
__global__ void convert_kernel(TD *dst, long ld_dst, const TS *src, long ld_src, size_t rows,
                               int cols)
{
    const size_t n = rows * (size_t)cols;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t r = t / (size_t)cols, c = t % (size_t)cols;
        store(dst + r * (size_t)ld_dst + c, load(src + r * (size_t)ld_src + c));
    }
}

template <typename T>
__global__ void fill_kernel(T *y, long ld, size_t rows, int cols, float value)
{
    const size_t n = rows * (size_t)cols;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x)
        store(y + (t / (size_t)cols) * (size_t)ld + t % (size_t)cols, value);
}

// y[r * ld + c] += b[c], b fp32.
template <typename T>
__global__ void add_bias_kernel(T *y, long ld, const float *b, size_t rows, int cols)
{
    const size_t n = rows * (size_t)cols;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        T *p = y + (t / (size_t)cols) * (size_t)ld + t % (size_t)cols;
        store(p, load(p) + b[t % (size_t)cols]);
    }
}

__device__ float block_reduce(float v, float *red, bool is_max)
{
    for (int o = 16; o > 0; o >>= 1) {
        float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads(); // red may still be read from the previous reduction
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float t = is_max ? -INFINITY : 0.0f;
    for (int w = 0; w < (int)(blockDim.x / 32); w++)
        t = is_max ? fmaxf(t, red[w]) : t + red[w];
    return t;
}

// One block per (head, query row of the chunk): scores row (already scale * q.k) + bias, causal
// mask, softmax in place, LSE out. rows of the chunk: nq; query index of row i: q0 + i.
__global__ void softmax_lse_kernel(float *scores, float *lse, const float *bias, int causal,
                                   int b, int q0, int nq, int Sq, int Sk, int H)
{
    __shared__ float red[kThreads / 32];
    const int r = blockIdx.x, h = r / nq, i = r % nq, qi = q0 + i;
    float *row = scores + (size_t)r * Sk;
    const float *brow = bias ? bias + ((size_t)h * Sq + qi) * Sk : nullptr;
    const int visible = causal ? min(Sk, qi + 1) : Sk;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < Sk; j += blockDim.x) {
        float s = j < visible ? row[j] + (brow ? brow[j] : 0.0f) : -INFINITY;
        row[j] = s;
        m = fmaxf(m, s);
    }
    m = block_reduce(m, red, true);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < Sk; j += blockDim.x) {
        float p = (row[j] == -INFINITY || m == -INFINITY) ? 0.0f : expf(row[j] - m);
        row[j] = p;
        sum += p;
    }
    sum = block_reduce(sum, red, false);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int j = threadIdx.x; j < Sk; j += blockDim.x)
        row[j] *= inv;
    if (threadIdx.x == 0 && lse)
        lse[((size_t)b * Sq + qi) * H + h] = sum > 0.0f ? m + logf(sum) : -INFINITY;
}

int cublas_code(cublasStatus_t st)
{
    return st == CUBLAS_STATUS_SUCCESS ? 0 : CPDIT_CUDA_CUBLAS_ERROR_BASE + (int)st;
}

// Query rows per chunk so that H * rows * Sk floats fit in max_bytes (at least 1).
int chunk_rows(const cpdit_cuda_attention *a, size_t max_bytes)
{
    const size_t per_row = (size_t)(a->H > 0 ? a->H : 1) * (size_t)(a->Sk > 0 ? a->Sk : 1) *
                           sizeof(float);
    size_t r = max_bytes / per_row;
    if (r < 1)
        r = 1;
    if (r > (size_t)a->Sq)
        r = (size_t)(a->Sq > 0 ? a->Sq : 1);
    return (int)r;
}

} // namespace

extern "C" int cpdit_cuda_convert_rows(cpdit_cuda_dtype dst_type, void *dst, long ld_dst,
                                       cpdit_cuda_dtype src_type, const void *src, long ld_src,
                                       size_t rows, int cols, void *stream)
{
    if (!rows || cols <= 0)
        return 0;
    const unsigned nb = blocks_for(rows * (size_t)cols);
    cudaStream_t s = (cudaStream_t)stream;
    if (dst_type == src_type) { // a strided copy
        const size_t es = cpdit_cuda_dtype_size(dst_type);
        return (int)cudaMemcpy2DAsync(dst, (size_t)ld_dst * es, src, (size_t)ld_src * es,
                                      (size_t)cols * es, rows, cudaMemcpyDeviceToDevice, s);
    }
    if (dst_type == CPDIT_CUDA_BF16)
        convert_kernel<<<nb, kThreads, 0, s>>>((__nv_bfloat16 *)dst, ld_dst, (const float *)src,
                                               ld_src, rows, cols);
    else
        convert_kernel<<<nb, kThreads, 0, s>>>((float *)dst, ld_dst, (const __nv_bfloat16 *)src,
                                               ld_src, rows, cols);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_fill_rows(cpdit_cuda_dtype t, void *y, int ld, size_t rows, int cols,
                                    float value, void *stream)
{
    if (!rows || cols <= 0)
        return 0;
    CPDIT_CUDA_DISPATCH(t, fill_kernel<T><<<blocks_for(rows * (size_t)cols), kThreads, 0,
                                            (cudaStream_t)stream>>>((T *)y, ld, rows, cols,
                                                                    value));
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_add_bias_rows(cpdit_cuda_dtype t, void *y, int ld, const float *b,
                                        size_t rows, int cols, void *stream)
{
    if (!rows || cols <= 0 || !b)
        return 0;
    CPDIT_CUDA_DISPATCH(t, add_bias_kernel<T><<<blocks_for(rows * (size_t)cols), kThreads, 0,
                                                (cudaStream_t)stream>>>((T *)y, ld, b, rows,
                                                                        cols));
    return (int)cudaGetLastError();
}

extern "C" size_t cpdit_cuda_attention_reference_bytes(const cpdit_cuda_attention *a,
                                                       size_t scores_bytes_max)
{
    return (size_t)a->H * (size_t)chunk_rows(a, scores_bytes_max) *
           (size_t)(a->Sk > 0 ? a->Sk : 1) * sizeof(float);
}

extern "C" int cpdit_cuda_attention_reference(void *cublas, const float *q, const float *k,
                                              const float *v, float *out, float *lse,
                                              const cpdit_cuda_attention *args, void *workspace,
                                              size_t scores_bytes_max, void *stream)
{
    cpdit_cuda_attention a = *args;
    if (a.B < 0 || a.Sq < 0 || a.Sk < 0 || a.H < 0 || a.D <= 0 || (a.causal && a.Sq != a.Sk))
        return (int)cudaErrorInvalidValue;
    if (a.B == 0 || a.Sq == 0 || a.H == 0)
        return 0;
    const int HD = a.H * a.D;
    const long ld_q = a.ld_q ? a.ld_q : HD, ld_kv = a.ld_kv ? a.ld_kv : HD;
    const long ld_out = a.ld_out ? a.ld_out : HD;
    cudaStream_t s = (cudaStream_t)stream;
    if (a.Sk == 0) { // an empty block: out = 0, lse = -inf
        for (int b = 0; b < a.B; b++) {
            int rc = cpdit_cuda_fill_rows(CPDIT_CUDA_F32, out + (size_t)b * a.Sq * ld_out,
                                          (int)ld_out, (size_t)a.Sq, HD, 0.0f, stream);
            if (rc)
                return rc;
        }
        return lse ? cpdit_cuda_fill_rows(CPDIT_CUDA_F32, lse, a.H, (size_t)a.B * a.Sq, a.H,
                                          -INFINITY, stream)
                   : 0;
    }
    cublasHandle_t h = (cublasHandle_t)cublas;
    int rc = cublas_code(cublasSetStream(h, s));
    if (rc)
        return rc;
    const int nq_max = chunk_rows(&a, scores_bytes_max);
    float *scores = (float *)workspace;
    const float one = 1.0f, zero = 0.0f;
    for (int b = 0; b < a.B; b++) {
        const float *qb = q + (size_t)b * a.Sq * ld_q;
        const float *kb = k + (size_t)b * a.Sk * ld_kv;
        const float *vb = v + (size_t)b * a.Sk * ld_kv;
        float *ob = out + (size_t)b * a.Sq * ld_out;
        for (int q0 = 0; q0 < a.Sq; q0 += nq_max) {
            const int nq = a.Sq - q0 < nq_max ? a.Sq - q0 : nq_max;
            // scores_h (col-major Sk x nq, ld Sk) = K_h^T-op (Sk x D) . Q_h (D x nq), scaled
            rc = cublas_code(cublasSgemmStridedBatched(
                h, CUBLAS_OP_T, CUBLAS_OP_N, a.Sk, nq, a.D, &a.scale, kb, (int)ld_kv, a.D,
                qb + (size_t)q0 * ld_q, (int)ld_q, a.D, &zero, scores, a.Sk,
                (long long)nq * a.Sk, a.H));
            if (rc)
                return rc;
            softmax_lse_kernel<<<(unsigned)(a.H * nq), kThreads, 0, s>>>(
                scores, lse, a.bias, a.causal, b, q0, nq, a.Sq, a.Sk, a.H);
            if ((rc = (int)cudaGetLastError()))
                return rc;
            // out_h^T (col-major D x nq, ld ld_out) = V_h^T (D x Sk, ld ld_kv) . P_h^T (Sk x nq)
            rc = cublas_code(cublasSgemmStridedBatched(
                h, CUBLAS_OP_N, CUBLAS_OP_N, a.D, nq, a.Sk, &one, vb, (int)ld_kv, a.D, scores,
                a.Sk, (long long)nq * a.Sk, &zero, ob + (size_t)q0 * ld_out, (int)ld_out, a.D,
                a.H));
            if (rc)
                return rc;
        }
    }
    return 0;
}
