// attention_flash_cuda.cu — flash attention with LSE, and the LSE merge (see the header).
//
// Work split: a block holds WARPS warps; warp w owns query row (blockIdx.x * WARPS + w) of head
// blockIdx.y in batch blockIdx.z. The block walks the keys in tiles of 32: the tile of K and V
// is staged in shared memory (fp32) once for all its warps; lane j scores key j of the tile
// against the warp's query, the warp updates its running max / sum (online softmax), and each
// lane accumulates D/32 output dimensions (lane, lane + 32, ...) in fp32 registers.
// This is the portable kernel (CUDA cores, any sm); cuDNN's fused SDPA is the fast path where
// it applies.
#include "kernels/cuda/attention_flash_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

namespace {

constexpr int kWarps = 4;     // query rows per block
constexpr int kTile = 32;     // keys per tile = lanes per warp
constexpr int kMaxD = 256;

__device__ inline float load(const float *p) { return *p; }
__device__ inline float load(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ inline void store(float *p, float x) { *p = x; }
__device__ inline void store(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }

__device__ inline float warp_max(float x)
{
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ inline float warp_sum(float x)
{
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// NPL = D / 32 output dimensions per lane.
template <typename T, int NPL>
__global__ void flash_kernel(const T *__restrict__ q, const T *__restrict__ k,
                             const T *__restrict__ v, T *__restrict__ out, float *__restrict__ lse,
                             cpdit_cuda_attention a)
{
    const int Sq = a.Sq, Sk = a.Sk, H = a.H;
    const float scale = a.scale;
    constexpr int D = NPL * 32;
    extern __shared__ float smem[];
    float *q_s = smem;                        // (kWarps, D)
    float *k_s = q_s + kWarps * D;            // (kTile, D + 1): padded against bank conflicts
    float *v_s = k_s + kTile * (D + 1);       // (kTile, D)

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y, b = blockIdx.z;
    const int row = blockIdx.x * kWarps + warp;
    const bool active = row < Sq;
    const long ld_q = a.ld_q, ld_kv = a.ld_kv; // elements between consecutive tokens

    if (active)
        for (int d = lane; d < D; d += 32)
            q_s[warp * D + d] = load(q + ((long)b * Sq + row) * ld_q + (long)h * D + d);
    // causal: no query of this block sees keys past its last row
    int last_row = min((int)(blockIdx.x * kWarps + kWarps - 1), Sq - 1);
    int key_end = a.causal ? min(Sk, last_row + 1) : Sk;
    const float *bias_row = (a.bias && active) ? a.bias + ((long)h * Sq + row) * Sk : nullptr;

    float m = -INFINITY, l = 0.0f, acc[NPL];
#pragma unroll
    for (int i = 0; i < NPL; i++)
        acc[i] = 0.0f;

    for (int t0 = 0; t0 < key_end; t0 += kTile) {
        __syncthreads(); // the previous tile is no longer read (and q_s is written)
        for (int idx = threadIdx.x; idx < kTile * D; idx += blockDim.x) {
            int j = idx / D, d = idx % D, key = t0 + j;
            float kv = 0.0f, vv = 0.0f;
            if (key < Sk) {
                long off = ((long)b * Sk + key) * ld_kv + (long)h * D + d;
                kv = load(k + off);
                vv = load(v + off);
            }
            k_s[j * (D + 1) + d] = kv;
            v_s[j * D + d] = vv;
        }
        __syncthreads();
        if (!active)
            continue;
        float s = -INFINITY;
        int key = t0 + lane;
        if (key < Sk && !(a.causal && key > row)) {
            const float *qr = q_s + warp * D, *kr = k_s + lane * (D + 1);
            float dot = 0.0f;
#pragma unroll 8
            for (int d = 0; d < D; d++)
                dot = fmaf(qr[d], kr[d], dot);
            s = dot * scale + (bias_row ? bias_row[key] : 0.0f);
        }
        // finite: key 0 is visible to every row, so m is finite after the first tile
        float m_new = fmaxf(m, warp_max(s));
        float p = (s == -INFINITY || m_new == -INFINITY) ? 0.0f : __expf(s - m_new);
        float correction = (m == -INFINITY) ? 0.0f : __expf(m - m_new);
        l = l * correction + warp_sum(p);
#pragma unroll
        for (int i = 0; i < NPL; i++)
            acc[i] *= correction;
        int nkeys = min(kTile, Sk - t0);
        for (int j = 0; j < nkeys; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j);
            const float *vr = v_s + j * D + lane;
#pragma unroll
            for (int i = 0; i < NPL; i++)
                acc[i] = fmaf(pj, vr[32 * i], acc[i]);
        }
        m = m_new;
    }
    if (!active)
        return;
    long o = ((long)b * Sq + row) * (long)a.ld_out + (long)h * D;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int i = 0; i < NPL; i++)
        store(out + o + lane + 32 * i, acc[i] * inv);
    if (lse && lane == 0)
        lse[((long)b * Sq + row) * H + h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

template <typename T, int NPL>
cudaError_t launch(const void *q, const void *k, const void *v, void *out, float *lse,
                   const cpdit_cuda_attention &a, cudaStream_t stream)
{
    constexpr int D = NPL * 32;
    size_t smem = sizeof(float) * ((size_t)kWarps * D + (size_t)kTile * (D + 1) + (size_t)kTile * D);
    cudaError_t e = cudaFuncSetAttribute(flash_kernel<T, NPL>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    dim3 grid((unsigned)((a.Sq + kWarps - 1) / kWarps), (unsigned)a.H, (unsigned)a.B);
    flash_kernel<T, NPL><<<grid, kWarps * 32, smem, stream>>>((const T *)q, (const T *)k,
                                                              (const T *)v, (T *)out, lse, a);
    return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch(const void *q, const void *k, const void *v, void *out, float *lse,
                     const cpdit_cuda_attention &a, cudaStream_t s)
{
    switch (a.D / 32) {
    case 1: return launch<T, 1>(q, k, v, out, lse, a, s);
    case 2: return launch<T, 2>(q, k, v, out, lse, a, s);
    case 3: return launch<T, 3>(q, k, v, out, lse, a, s);
    case 4: return launch<T, 4>(q, k, v, out, lse, a, s);
    case 5: return launch<T, 5>(q, k, v, out, lse, a, s);
    case 6: return launch<T, 6>(q, k, v, out, lse, a, s);
    case 7: return launch<T, 7>(q, k, v, out, lse, a, s);
    case 8: return launch<T, 8>(q, k, v, out, lse, a, s);
    default: return cudaErrorInvalidValue;
    }
}

// *d = *s: the same type bit for bit; a bf16 part into an fp32 accumulator widened (exact).
template <typename T> __device__ __forceinline__ void copy_elem(T *d, const T *s) { *d = *s; }
__device__ __forceinline__ void copy_elem(float *d, const __nv_bfloat16 *s)
{
    *d = __bfloat162float(*s);
}

// One warp per (row, head); the CPU's semantics (kernels/cpu/attention_lse_merge.c): an empty
// part (lse -inf) contributes nothing and is never read, so the other part passes bit for bit
// (a partial result left uninitialised or NaN behind an empty lse cannot leak in), and the
// weights of two finite parts are computed in double relative to the larger lse.
// TA: the accumulator's element type, TB: the part's (TA = float, TB = bf16: the fp32
// accumulator of ring attention on the bf16 table, nothing rounded).
template <typename TA, typename TB>
__global__ void lse_merge_kernel(TA *out_acc, float *lse_acc, const TB *out_part,
                                 const float *lse_part, long rows_heads, int D)
{
    long rh = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (rh >= rows_heads)
        return;
    const float a = lse_acc[rh], b = lse_part[rh];
    TA *oa = out_acc + rh * D;
    const TB *ob = out_part + rh * D;
    if (b == -INFINITY)
        return; // nothing to add
    float lse = b;
    if (a == -INFINITY) {
        for (int d = lane; d < D; d += 32)
            copy_elem(oa + d, ob + d);
    } else {
        const double mx = a > b ? a : b, mn = a > b ? b : a;
        const double l = mx + log1p(exp(mn - mx));
        const float wa = (float)exp((double)a - l), wb = (float)exp((double)b - l);
        for (int d = lane; d < D; d += 32) // fp32 math, one rounding to TA
            store(oa + d, load(oa + d) * wa + load(ob + d) * wb);
        lse = (float)l;
    }
    __syncwarp(); // every lane has read lse_acc[rh] before it is overwritten
    if (lane == 0)
        lse_acc[rh] = lse;
}

} // namespace

extern "C" int cpdit_cuda_attention_flash_ex(cpdit_cuda_dtype dtype, const void *q,
                                             const void *k, const void *v, void *out, float *lse,
                                             const cpdit_cuda_attention *args, void *stream)
{
    cpdit_cuda_attention a = *args;
    if (a.B < 0 || a.Sq < 0 || a.Sk < 0 || a.H < 0 || a.D <= 0 || a.D % 32 != 0 || a.D > kMaxD ||
        (a.causal && a.Sq != a.Sk))
        return (int)cudaErrorInvalidValue;
    if (a.B == 0 || a.Sq == 0 || a.H == 0)
        return 0;
    if (a.ld_q == 0)
        a.ld_q = a.H * a.D;
    if (a.ld_kv == 0)
        a.ld_kv = a.H * a.D;
    if (a.ld_out == 0)
        a.ld_out = a.H * a.D;
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = dtype == CPDIT_CUDA_BF16
                        ? dispatch<__nv_bfloat16>(q, k, v, out, lse, a, s)
                        : dispatch<float>(q, k, v, out, lse, a, s);
    return (int)e;
}

extern "C" int cpdit_cuda_attention_flash(cpdit_cuda_dtype dtype, const void *q, const void *k,
                                          const void *v, void *out, float *lse, int B, int Sq,
                                          int Sk, int H, int D, float scale, void *stream)
{
    cpdit_cuda_attention a = {B, Sq, Sk, H, D, 0, 0, 0, scale, nullptr, 0};
    return cpdit_cuda_attention_flash_ex(dtype, q, k, v, out, lse, &a, stream);
}

extern "C" int cpdit_cuda_lse_merge(cpdit_cuda_dtype dtype, void *out_acc, float *lse_acc,
                                    const void *out_part, const float *lse_part, long rows, int H,
                                    int D, void *stream)
{
    long n = rows * (long)H;
    if (n <= 0)
        return 0;
    const int warps = 8;
    unsigned blocks = (unsigned)((n + warps - 1) / warps);
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype == CPDIT_CUDA_BF16)
        lse_merge_kernel<<<blocks, warps * 32, 0, s>>>((__nv_bfloat16 *)out_acc, lse_acc,
                                                       (const __nv_bfloat16 *)out_part, lse_part,
                                                       n, D);
    else
        lse_merge_kernel<<<blocks, warps * 32, 0, s>>>((float *)out_acc, lse_acc,
                                                       (const float *)out_part, lse_part, n, D);
    return (int)cudaGetLastError();
}

extern "C" int cpdit_cuda_lse_merge_f32(cpdit_cuda_dtype dtype, float *out_acc, float *lse_acc,
                                        const void *out_part, const float *lse_part, long rows,
                                        int H, int D, void *stream)
{
    long n = rows * (long)H;
    if (n <= 0)
        return 0;
    const int warps = 8;
    unsigned blocks = (unsigned)((n + warps - 1) / warps);
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype == CPDIT_CUDA_BF16)
        lse_merge_kernel<<<blocks, warps * 32, 0, s>>>(out_acc, lse_acc,
                                                       (const __nv_bfloat16 *)out_part, lse_part,
                                                       n, D);
    else
        lse_merge_kernel<<<blocks, warps * 32, 0, s>>>(out_acc, lse_acc,
                                                       (const float *)out_part, lse_part, n, D);
    return (int)cudaGetLastError();
}
