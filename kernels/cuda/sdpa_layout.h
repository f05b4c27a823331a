/* sdpa_layout.h — the tensor shapes of cuDNN's fused attention graph (sdpa_cudnn.c) for the
 * table's token-major activations, and the cuDNN versions it refuses (plain C, no CUDA:
 * unit-tested without a GPU by tests/test_cuda_host_math.c; the index helper also compiles as
 * device code for sdpa_cudnn_kernels.cu).
 *
 * cuDNN's attention graph names every tensor by dims in (B, H, rows, cols) order; the memory
 * layout is in the strides. The table's q, o are (B, Sq, H, D) and k, v (B, Skv, H, D)
 * contiguous (token-major), so element (b, h, s, d) sits at ((b S + s) H + h) D + d:
 * strides (S H D, D, H D, 1). The first matmul takes K^T: dims (B, H, D, Skv), the strides of
 * K with the last two swapped. Scores are (B, H, Sq, Skv) (virtual, packed) and the softmax
 * stats (B, H, Sq, 1) fp32 packed: stats (b, h, s) at (b H + h) Sq + s.
 */
#ifndef CPDIT_SDPA_LAYOUT_H
#define CPDIT_SDPA_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CPDIT_SDPA_HD __host__ __device__
#else
#define CPDIT_SDPA_HD
#endif

typedef struct cpdit_sdpa_tensor {
    int64_t dim[4], stride[4];
} cpdit_sdpa_tensor;

typedef struct cpdit_sdpa_layout {
    cpdit_sdpa_tensor q, kt, v, o; /* bf16, in memory */
    cpdit_sdpa_tensor scores;      /* fp32 / bf16, virtual */
    cpdit_sdpa_tensor stats;       /* fp32, in memory; also the row max / sum (virtual) */
} cpdit_sdpa_layout;

static inline cpdit_sdpa_tensor cpdit_sdpa_tensor_of(int64_t d0, int64_t d1, int64_t d2,
                                                     int64_t d3, int64_t s0, int64_t s1,
                                                     int64_t s2, int64_t s3)
{
    cpdit_sdpa_tensor t = {{d0, d1, d2, d3}, {s0, s1, s2, s3}};
    return t;
}

static inline cpdit_sdpa_layout cpdit_sdpa_layout_for(int64_t B, int64_t Sq, int64_t Skv,
                                                      int64_t H, int64_t D)
{
    cpdit_sdpa_layout l;
    l.q = cpdit_sdpa_tensor_of(B, H, Sq, D, Sq * H * D, D, H * D, 1);
    l.o = l.q;
    l.v = cpdit_sdpa_tensor_of(B, H, Skv, D, Skv * H * D, D, H * D, 1);
    l.kt = cpdit_sdpa_tensor_of(B, H, D, Skv, Skv * H * D, D, 1, H * D);
    l.scores = cpdit_sdpa_tensor_of(B, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    l.stats = cpdit_sdpa_tensor_of(B, H, Sq, 1, H * Sq, Sq, 1, 1);
    return l;
}

/* Where cuDNN's stats (B, H, Sq, 1) keep row (b, h, s). */
static inline CPDIT_SDPA_HD size_t cpdit_sdpa_stats_index(size_t b, size_t h, size_t s, size_t H,
                                                          size_t Sq)
{
    return (b * H + h) * Sq + s;
}

/* Why a cuDNN version (cudnnGetVersion(), e.g. 91000) must not run this graph, or NULL.
 * cudnn-frontend refuses bf16/fp16 SDPA forward on 9.10.0 and 9.10.1 for known wrong results. */
static inline const char *cpdit_sdpa_version_refused(size_t version)
{
    if (version < 90000)
        return "cuDNN before 9.0 has no fused attention through this graph";
    if (version == 91000 || version == 91001)
        return "cuDNN 9.10.0 / 9.10.1 compute bf16 fused attention wrongly (known bug, fixed in "
               "9.10.2)";
    return NULL;
}

/* Alignment in bytes of the graph's tensors (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT). */
#define CPDIT_SDPA_ALIGN 16

/* Whether a table's activation operand (rows of cols = H D elements of elem_bytes bytes, row
 * stride ld elements, at address addr) can go to the graph as it is: bf16 (2 bytes),
 * contiguous (ld == cols) and aligned; otherwise the CUDA table copies it into a contiguous
 * bf16 block (a fused qkv buffer's column blocks, ld = 3 H D, always are). */
static inline int cpdit_sdpa_operand_direct(size_t elem_bytes, uintptr_t addr, int64_t ld,
                                            int64_t cols)
{
    return elem_bytes == 2 && ld == cols && addr % CPDIT_SDPA_ALIGN == 0;
}

/* The head dims cuDNN's fused attention takes: multiples of 8 up to 256. */
static inline int cpdit_sdpa_head_dim_ok(int D)
{
    return D > 0 && D % 8 == 0 && D <= 256;
}

#endif
