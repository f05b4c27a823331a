/* gemm_layout.h — how a row-major nn.Linear maps onto cuBLASLt's column-major matmul (plain C,
 * no CUDA: unit-tested without a GPU by tests/test_cuda_host_math.c).
 *
 *   y (M, N), row stride ldy  =  x (M, K), row stride ldx  ·  W^T,   W (N, K) row-major (ld K)
 *
 * Column-major, a row-major (R, C) matrix with row stride ld is a (C x R) matrix with leading
 * dimension ld. So y is Y (N x M, ld ldy), x is X (K x M, ld ldx), W is Wc (K x N, ld K), and
 *   Y = W · x^T = Wc^T · X:  A = Wc with op T, B = X with op N, C = D = Y.
 * The bias epilogue adds a vector along D's rows: N values, one per output feature, as
 * nn.Linear's bias. cuBLASLt's m, n, k are then N, M, K.
 */
#ifndef CPDIT_GEMM_LAYOUT_H
#define CPDIT_GEMM_LAYOUT_H

#include <stdint.h>

typedef struct cpdit_lt_matrix {
    uint64_t rows, cols; /* column-major shape as stored (before op) */
    int64_t ld;          /* leading dimension, elements */
} cpdit_lt_matrix;

typedef struct cpdit_lt_linear_layout {
    int trans_a, trans_b; /* 1: op T */
    cpdit_lt_matrix a, b, c; /* A = W, B = x, C = D = y */
} cpdit_lt_linear_layout;

static inline cpdit_lt_linear_layout cpdit_lt_linear_layout_for(int M, int K, int N, int ldx,
                                                                int ldy)
{
    cpdit_lt_linear_layout l;
    l.trans_a = 1;
    l.trans_b = 0;
    l.a.rows = (uint64_t)K, l.a.cols = (uint64_t)N, l.a.ld = K;
    l.b.rows = (uint64_t)K, l.b.cols = (uint64_t)M, l.b.ld = ldx;
    l.c.rows = (uint64_t)N, l.c.cols = (uint64_t)M, l.c.ld = ldy;
    return l;
}

/* The largest power of two (<= 256) dividing the address: cuBLASLt's heuristic assumes
 * 256-byte aligned matrices unless told (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), and
 * column blocks of fused buffers are not. */
static inline int cpdit_lt_pointer_alignment(const void *p)
{
    const uintptr_t u = (uintptr_t)p;
    int a = 1;
    while (a < 256 && u % (uintptr_t)(2 * a) == 0)
        a *= 2;
    return a;
}

#endif
