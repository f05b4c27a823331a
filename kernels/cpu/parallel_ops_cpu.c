/* parallel_ops_cpu.c — the "cpu" table's element-wise ops, norms, RoPE and GroupNorm apply
 * split over the rank's pool (kernels/cpu/thread_pool.h) when they are large.
 *
 * Each op's outputs are computed independently per element (add, mul, act, modulate, gated
 * residual, group-norm apply) or per row (layer/RMS norm: a row's statistics are summed by one
 * thread in the same order) or per token (RoPE), so splitting the rows over threads gives the
 * same bits as one thread: these ops are thread-count independent. The ranges are contiguous
 * (each worker first touches and re-touches the same part of a buffer).
 * SGEMM: OpenBLAS runs one thread inside each pool worker (its own threads are set to 1 when
 * the pool is made); cpu_par_sgemm splits C's rows, and each row of C comes out of the same
 * single-threaded kernel, K in the same order, whatever the split (test_backend_ops and
 * test_threads check the bits).
 */
#include "config.h"

#include <cblas.h>

#include "kernels/cpu/parallel_ops_cpu.h"

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vae_ops_cpu.h"

/* Fewest floats a worker gets: below this the op runs on the calling thread (the wake-up of a
 * worker costs a few microseconds, the op on 32 Ki floats about as much). */
#define PAR_MIN_FLOATS ((size_t)1 << 15)

/* Rows per worker at least, for a row of dim floats. */
static size_t row_grain(int dim)
{
    const size_t per = PAR_MIN_FLOATS / (size_t)(dim > 0 ? dim : 1);
    return per > 0 ? per : 1;
}

/* ------------------------------------------------------------------ element-wise */

typedef struct ew_job {
    float *y;
    const float *a, *b, *c;
    int kind;
    cpdit_act act;
    int dim, ldy, lda;
    float eps;
} ew_job;

enum { EW_ADD, EW_MUL, EW_ACT };

static void ew_range(void *ctx, size_t i0, size_t i1)
{
    const ew_job *j = ctx;
    switch (j->kind) {
    case EW_ADD:
        cpu_add(j->y + i0, j->a + i0, j->b + i0, i1 - i0);
        break;
    case EW_MUL:
        cpu_mul(j->y + i0, j->a + i0, j->b + i0, i1 - i0);
        break;
    default:
        cpu_act(j->act, j->y + i0, j->a + i0, i1 - i0);
        break;
    }
}

/* y (n) = a + b; may alias. */
void cpu_par_add(float *y, const float *a, const float *b, size_t n)
{
    ew_job j = {.y = y, .a = a, .b = b, .kind = EW_ADD};
    cpu_pool_for(n, PAR_MIN_FLOATS, ew_range, &j);
}

/* y (n) = a * b; may alias. */
void cpu_par_mul(float *y, const float *a, const float *b, size_t n)
{
    ew_job j = {.y = y, .a = a, .b = b, .kind = EW_MUL};
    cpu_pool_for(n, PAR_MIN_FLOATS, ew_range, &j);
}

/* y (n) = act(x); may alias. */
void cpu_par_act(cpdit_act kind, float *y, const float *x, size_t n)
{
    ew_job j = {.y = y, .a = x, .kind = EW_ACT, .act = kind};
    cpu_pool_for(n, PAR_MIN_FLOATS, ew_range, &j);
}

/* ------------------------------------------------------------------ per row */

static void modulate_rows(void *ctx, size_t r0, size_t r1)
{
    const ew_job *j = ctx;
    const size_t d = (size_t)j->dim;
    cpu_modulate(j->y + r0 * d, j->a + r0 * d, j->b, j->c, r1 - r0, j->dim);
}

/* y, x (rows, dim); shift, scale (dim). */
void cpu_par_modulate(float *y, const float *x, const float *shift, const float *scale,
                      size_t rows, int dim)
{
    ew_job j = {.y = y, .a = x, .b = shift, .c = scale, .dim = dim};
    cpu_pool_for(rows, row_grain(dim), modulate_rows, &j);
}

static void gated_rows(void *ctx, size_t r0, size_t r1)
{
    const ew_job *j = ctx;
    cpu_gated_residual(j->y + r0 * (size_t)j->ldy, j->ldy, j->a + r0 * (size_t)j->lda, j->lda,
                       j->b, r1 - r0, j->dim);
}

/* h (rows, dim; ldh) += gate (dim) * x (rows, dim; ldx). */
void cpu_par_gated_residual(float *h, int ldh, const float *x, int ldx, const float *gate,
                            size_t rows, int dim)
{
    ew_job j = {.y = h, .a = x, .b = gate, .dim = dim, .ldy = ldh, .lda = ldx};
    cpu_pool_for(rows, row_grain(dim), gated_rows, &j);
}

static void layer_norm_rows(void *ctx, size_t r0, size_t r1)
{
    const ew_job *j = ctx;
    const size_t d = (size_t)j->dim;
    cpu_layer_norm(j->y + r0 * d, j->a + r0 * d, j->b, j->c, r1 - r0, j->dim, j->eps);
}

/* y, x (rows, dim); gamma, beta (dim) or NULL. */
void cpu_par_layer_norm(float *y, const float *x, const float *gamma, const float *beta,
                        size_t rows, int dim, float eps)
{
    ew_job j = {.y = y, .a = x, .b = gamma, .c = beta, .dim = dim, .eps = eps};
    cpu_pool_for(rows, row_grain(dim), layer_norm_rows, &j);
}

static void rms_norm_rows(void *ctx, size_t r0, size_t r1)
{
    const ew_job *j = ctx;
    const size_t d = (size_t)j->dim;
    cpu_rms_norm(j->y + r0 * d, j->a + r0 * d, j->b, r1 - r0, j->dim, j->eps);
}

/* y, x (rows, dim); weight (dim) or NULL. */
void cpu_par_rms_norm(float *y, const float *x, const float *weight, size_t rows, int dim,
                      float eps)
{
    ew_job j = {.y = y, .a = x, .b = weight, .dim = dim, .eps = eps};
    cpu_pool_for(rows, row_grain(dim), rms_norm_rows, &j);
}

static void rope_rows(void *ctx, size_t s0, size_t s1)
{
    const ew_job *j = ctx; /* dim = H * D, ldy = H, lda = D */
    cpu_rope(j->y + s0 * (size_t)j->dim, j->a + s0 * (size_t)j->lda,
             j->b + s0 * (size_t)j->lda, (int)(s1 - s0), j->ldy, j->lda);
}

/* x (S, H, D) in place; cos, sin (S, D). */
void cpu_par_rope(float *x, const float *cos, const float *sin, int S, int H, int D)
{
    ew_job j = {.y = x, .a = cos, .b = sin, .dim = H * D, .ldy = H, .lda = D};
    cpu_pool_for((size_t)(S > 0 ? S : 0), row_grain(H * D), rope_rows, &j);
}

/* ------------------------------------------------------------------ SGEMM by rows */

/* Rows of C per worker at least (a multiple of OpenBLAS's micro-tile heights). */
#define PAR_SGEMM_MIN_ROWS 64

typedef struct sgemm_job {
    int trans_b, N, K;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int lda, ldb, ldc;
    int M;
} sgemm_job;

/* Blocks [k0, k1) of PAR_SGEMM_MIN_ROWS rows, ONE cblas_sgemm per block: OpenBLAS picks its
 * kernels by the call's size (the rows of a 72-row call and of a 64 + 8 split round
 * differently), so the calls must be the same whatever the thread count. */
static void sgemm_rows(void *ctx, size_t k0, size_t k1)
{
    const sgemm_job *j = ctx;
    for (size_t k = k0; k < k1; k++) {
        const size_t m0 = k * PAR_SGEMM_MIN_ROWS;
        const size_t m1 = m0 + PAR_SGEMM_MIN_ROWS < (size_t)j->M ? m0 + PAR_SGEMM_MIN_ROWS
                                                                 : (size_t)j->M;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, j->trans_b ? CblasTrans : CblasNoTrans,
                    (int)(m1 - m0), j->N, j->K, j->alpha, j->a + m0 * (size_t)j->lda, j->lda,
                    j->b, j->ldb, j->beta, j->c + m0 * (size_t)j->ldc, j->ldc);
    }
}

/* C (M, N; ldc) = alpha A (M, K; lda) op(B) + beta C, row-major; op(B) = B (K, N; ldb) or,
 * with trans_b, B^T of B (N, K; ldb). Rows of C split over the pool in blocks of at least
 * PAR_SGEMM_MIN_ROWS (start offsets multiples of it: the split of a size is fixed). */
void cpu_par_sgemm(int trans_b, int M, int N, int K, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    sgemm_job j = {trans_b, N, K, alpha, beta, a, b, c, lda, ldb, ldc, M};
    cpu_pool_for(((size_t)M + PAR_SGEMM_MIN_ROWS - 1) / PAR_SGEMM_MIN_ROWS, 1, sgemm_rows, &j);
}

/* ------------------------------------------------------------------ GroupNorm apply */

typedef struct gn_job {
    float *y;
    const float *x;
    int C, G;
    const double *mean, *rstd;
    const float *gamma, *beta;
    cpdit_activation act;
} gn_job;

static void gn_rows(void *ctx, size_t p0, size_t p1)
{
    const gn_job *j = ctx;
    const size_t c = (size_t)j->C;
    cpu_group_norm_apply(j->y + p0 * c, j->x + p0 * c, p1 - p0, j->C, j->G, j->mean, j->rstd,
                         j->gamma, j->beta, j->act);
}

/* y, x (pixels, C) NHWC; as cpu_group_norm_apply. */
void cpu_par_group_norm_apply(float *y, const float *x, size_t pixels, int C, int G,
                              const double *mean, const double *rstd, const float *gamma,
                              const float *beta, cpdit_activation act)
{
    gn_job j = {y, x, C, G, mean, rstd, gamma, beta, act};
    cpu_pool_for(pixels, row_grain(C), gn_rows, &j);
}
