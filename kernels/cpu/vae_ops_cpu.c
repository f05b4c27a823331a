/* vae_ops_cpu.c — the VAE section of the CPU kernel table (see vae_ops_cpu.h, backend.h).
 *
 * Convolution, NHWC: for each block of output pixels, the column matrix col (pixels, K·K·Cin)
 * takes, for every tap (ky, kx), the Cin contiguous channels of the input pixel the tap reads
 * (one memcpy each, zeros left and right of the image; rows above and below come from the
 * caller's halo rows), then one SGEMM col · Wp with the weights packed once as
 * Wp (K·K·Cin, Cout) writes the block's output pixels (pixels, Cout) in place: the output is
 * NHWC already, no scatter. 1x1 convolutions are one SGEMM on the input itself.
 * With the native weight format on a CPU with AVX512-BF16 the weights are packed instead as
 * bf16 panels of W (Cout, K·K·Cin) and the same column blocks go through the bf16 GEMM
 * (kernels/cpu/gemm_bf16_cpu.h: inputs rounded to bf16, exact products, fp32 sums): 2-4x the
 * SGEMM rate at the decoder's shapes. Each output pixel's sum runs in the same order whatever
 * block or rank it is computed in, so a decode split over ranks still equals one rank's.
 * In builds with oneDNN (CPDIT_HAVE_DNNL) the native 3x3 form is oneDNN's bf16 convolution
 * instead (kernels/cpu/conv2d_dnnl_cpu.h: same rounding, 1.2-1.5x faster here; ours stays the
 * fallback and `cpu_conv2d_set_engine("builtin")` selects it).
 * A packed block starts with a header (CONV_PACK_HEADER bytes) saying which form follows.
 */
#include "config.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/conv2d_dnnl_cpu.h"
#include "kernels/cpu/gemm_bf16_cpu.h"
#include "kernels/cpu/parallel_ops_cpu.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vae_ops_cpu.h"

#define SOFTPLUS_THRESHOLD 20.0f /* torch's softplus: above it softplus(x) = x */
#define TRANSPOSE_TILE 32
/* Fewest output pixels per worker in a split im2col. */
#define CONV_IM2COL_MIN_PIXELS 64

/* ------------------------------------------------------------------ convolution */

/* The header of a packed block: which form the weights after it have. */
#define CONV_PACK_HEADER 64
#define CONV_PACK_MAGIC 0x43563250u /* "CV2P" */
enum { CONV_FORM_F32 = 1, CONV_FORM_BF16 = 2, CONV_FORM_DNNL = 3 };
typedef struct conv_pack_header {
    uint32_t magic, form;
} conv_pack_header;

static int conv_form(const float *packed)
{
    const conv_pack_header *h = (const conv_pack_header *)packed;
    return h->magic == CONV_PACK_MAGIC ? (int)h->form : 0;
}

static const void *conv_weights(const float *packed)
{
    return (const char *)packed + CONV_PACK_HEADER;
}

/* rows[co][(ky·K + kx)·Cin + ci] = w[co][ci][ky][kx], elements of es bytes (1, 2 or 4). */
#define REORDER_TAPS(T)                                                                    \
    do {                                                                                   \
        T *r = (T *)rows;                                                                  \
        const T *s = (const T *)w;                                                         \
        for (int co = 0; co < Cout; co++)                                                  \
            for (int ci = 0; ci < Cin; ci++)                                               \
                for (int t = 0; t < K * K; t++)                                            \
                    r[(size_t)co * depth + (size_t)t * Cin + ci] =                         \
                        s[((size_t)co * Cin + ci) * K * K + t];                            \
    } while (0)

static void reorder_taps(void *rows, const void *w, size_t es, int Cout, int Cin, int K)
{
    const size_t depth = (size_t)K * K * Cin;
    if (es == sizeof(uint32_t) && (uintptr_t)w % sizeof(uint32_t) == 0)
        REORDER_TAPS(uint32_t);
    else if (es == sizeof(uint16_t) && (uintptr_t)w % sizeof(uint16_t) == 0)
        REORDER_TAPS(uint16_t);
    else if (es == 1)
        REORDER_TAPS(uint8_t);
    else /* unaligned in the map: byte copies */
        for (int co = 0; co < Cout; co++)
            for (int ci = 0; ci < Cin; ci++)
                for (int t = 0; t < K * K; t++)
                    memcpy((char *)rows + ((size_t)co * depth + (size_t)t * Cin + ci) * es,
                           (const char *)w + (((size_t)co * Cin + ci) * K * K + t) * es, es);
}
#undef REORDER_TAPS

/* fp32: Wp[(ky·K + kx)·Cin + ci][co] = w[co][ci][ky][kx] (K·K·Cin, Cout) for SGEMM.
 * bf16: the rows W[co][(ky·K + kx)·Cin + ci] (Cout, K·K·Cin) in the bf16 GEMM's panels.
 * Both start from those rows in the stored dtype (a reordering of w's elements, no conversion):
 * bf16 and fp8 rows go to the bf16 packer as they are, fp32 rows are made one row at a time. */
float *cpu_conv2d_pack_stored(const void *w, cpdit_dtype dtype, int Cout, int Cin, int K,
                              cpdit_weight_format format)
{
    const size_t depth = (size_t)K * K * Cin, es = cpdit_dtype_size(dtype);
    const int bf16 = format == CPDIT_WEIGHT_NATIVE &&
                     (dtype == CPDIT_DTYPE_BF16 || dtype == CPDIT_DTYPE_F8_E4M3 ||
                      dtype == CPDIT_DTYPE_F8_E5M2) &&
                     strcmp(cpu_gemm_bf16_kernel(), "avx512bf16") == 0;
    if (!es || !cpdit_dtype_is_float(dtype) || dtype == CPDIT_DTYPE_F64)
        return NULL;
#ifdef CPDIT_HAVE_DNNL
    if (bf16 && K == 3 && dtype == CPDIT_DTYPE_BF16 && strcmp(cpu_conv2d_engine(), "dnnl") == 0) {
        char *db = cpu_conv2d_dnnl_pack(w, Cout, Cin, CONV_PACK_HEADER);
        if (db) { /* else (or fp8 weights): our own bf16 form below */
            conv_pack_header *dh = (conv_pack_header *)db;
            dh->magic = CONV_PACK_MAGIC;
            dh->form = CONV_FORM_DNNL;
            return (float *)db;
        }
    }
#endif
    const size_t bytes = bf16 ? cpu_bf16_packed_bytes(Cout, (int)depth)
                              : depth * (size_t)Cout * sizeof(float);
    char *block = cpu_alloc(CONV_PACK_HEADER + bytes);
    char *rows = malloc(depth * (size_t)Cout * es);
    float *row = bf16 ? NULL : malloc(depth * sizeof *row);
    if (!block || !rows || (!bf16 && !row)) {
        cpu_free(block);
        free(rows);
        free(row);
        return NULL;
    }
    conv_pack_header *h = (conv_pack_header *)block;
    h->magic = CONV_PACK_MAGIC;
    h->form = bf16 ? CONV_FORM_BF16 : CONV_FORM_F32;
    reorder_taps(rows, w, es, Cout, Cin, K);
    if (bf16) {
        cpu_bf16_pack((uint16_t *)(block + CONV_PACK_HEADER), rows, dtype, Cout, (int)depth);
    } else {
        float *p = (float *)(block + CONV_PACK_HEADER);
        for (int co = 0; co < Cout; co++) {
            /* a float dtype (checked above) always converts */
            (void)cpdit_dtype_to_f32(row, rows + (size_t)co * depth * es, dtype, depth, NULL);
            for (size_t k = 0; k < depth; k++)
                p[k * Cout + co] = row[k];
        }
    }
    free(rows);
    free(row);
    return (float *)block;
}

float *cpu_conv2d_pack(const float *w, int Cout, int Cin, int K)
{
    return cpu_conv2d_pack_stored(w, CPDIT_DTYPE_F32, Cout, Cin, K, CPDIT_WEIGHT_F32);
}

static size_t block_pixels(int Cin, int K)
{
    const size_t depth = (size_t)K * K * Cin;
    const size_t pb = CONV_COL_BLOCK_FLOATS / depth;
    return pb < CONV_MIN_BLOCK_PIXELS ? CONV_MIN_BLOCK_PIXELS : pb;
}

size_t cpu_conv2d_workspace_bytes(int W, int Cin, int K)
{
    if (K == 1)
        return 0;
    size_t bytes = block_pixels(Cin, K) * (size_t)K * K * Cin * sizeof(float);
#ifdef CPDIT_HAVE_DNNL
    const size_t db = cpu_conv2d_dnnl_workspace_bytes(W, Cin); /* a band of bf16 rows */
    bytes = db > bytes ? db : bytes;
#else
    (void)W;
#endif
    return bytes;
}

/* y rows: fill each pixel's Cout outputs with the bias (or zero). */
static void fill_bias(float *y, const float *b, size_t pixels, int Cout)
{
    for (size_t p = 0; p < pixels; p++) {
        float *yp = y + p * (size_t)Cout;
        if (b)
            memcpy(yp, b, (size_t)Cout * sizeof *yp);
        else
            memset(yp, 0, (size_t)Cout * sizeof *yp);
    }
}

/* col (n, K·K·Cin) for the n output pixels starting at flat pixel q0 (= row·W + column) of x. */
static void im2col_nhwc(float *col, const float *x, int W, int Cin, int K, size_t q0, size_t n)
{
    const int pad = K / 2;
    const size_t depth = (size_t)K * K * Cin, cbytes = (size_t)Cin * sizeof(float);
    for (size_t i = 0; i < n; i++) {
        const long q = (long)(q0 + i);
        const long yy = q / W, xx = q % W;
        float *dst = col + i * depth;
        for (int ky = 0; ky < K; ky++) {
            const float *row = x + (yy + ky - pad) * (long)W * Cin; /* halo rows readable */
            for (int kx = 0; kx < K; kx++, dst += Cin) {
                const long xs = xx + kx - pad;
                if (xs < 0 || xs >= W)
                    memset(dst, 0, cbytes);
                else
                    memcpy(dst, row + xs * Cin, cbytes);
            }
        }
    }
}

/* Blocks per pool thread from which a 3x3 convolution hands whole blocks to the workers. */
#define CONV_BLOCKS_PER_THREAD 2

typedef struct conv_job {
    float *y;
    const float *x, *wf, *b;
    const uint16_t *wb;
    int W, Cin, Cout, K, form;
    size_t q0, P, depth, pb;
    void *ws;
    cpdit_error *err;
    long next;        /* atomic block counter */
    cpdit_status st;  /* the first failure */
} conv_job;

typedef struct im2col_job {
    float *col;
    const conv_job *j;
    size_t q;
} im2col_job;

static void im2col_range(void *ctx, size_t i0, size_t i1)
{
    const im2col_job *c = ctx;
    const conv_job *j = c->j;
    im2col_nhwc(c->col + i0 * j->depth, j->x, j->W, j->Cin, j->K, c->q + i0, i1 - i0);
    fill_bias(j->y + (c->q + i0) * j->Cout, j->b, i1 - i0, j->Cout);
}

/* Output pixels [q, q + n) through col (n, depth); pooled: split the im2col and GEMM over the
 * pool (else this thread alone). Each pixel's sums run in the same order either way. */
static cpdit_status conv_block(const conv_job *j, float *col, size_t q, size_t n, int pooled)
{
    im2col_job c = {col, j, q};
    if (pooled)
        cpu_pool_for(n, CONV_IM2COL_MIN_PIXELS, im2col_range, &c);
    else
        im2col_range(&c, 0, n);
    float *yq = j->y + q * j->Cout;
    if (j->form == CONV_FORM_BF16)
        return cpu_gemm_bf16(yq, j->Cout, col, (int)j->depth, j->wb, (int)n, (int)j->depth,
                             j->Cout, j->err);
    if (pooled)
        cpu_par_sgemm(0, (int)n, j->Cout, (int)j->depth, 1.0f, col, (int)j->depth, j->wf,
                      j->Cout, 1.0f, yq, j->Cout);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, j->Cout, (int)j->depth,
                    1.0f, col, (int)j->depth, j->wf, j->Cout, 1.0f, yq, j->Cout);
    return CPDIT_OK;
}

/* Each pool thread's column block (worker 0 uses the caller's workspace), kept for the next
 * convolution: no allocation in steady state. */
static __thread float *conv_col;
static __thread size_t conv_col_floats;

static void conv_worker(void *arg, int worker, int workers)
{
    conv_job *j = arg;
    (void)workers;
    float *col = j->ws;
    if (worker > 0) {
        const size_t need = j->pb * j->depth;
        if (conv_col_floats < need) {
            free(conv_col);
            conv_col = cpu_alloc(need * sizeof(float));
            conv_col_floats = conv_col ? need : 0;
        }
        if (!conv_col)
            return; /* the other workers take the blocks */
        col = conv_col;
    }
    for (;;) {
        const long t = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        const size_t q = j->q0 + (size_t)t * j->pb;
        if (q >= j->q0 + j->P)
            break;
        const size_t n = j->q0 + j->P - q < j->pb ? j->q0 + j->P - q : j->pb;
        cpdit_status none = CPDIT_OK;
        const cpdit_status st = conv_block(j, col, q, n, 0);
        if (st)
            __atomic_compare_exchange_n(&j->st, &none, st, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED);
    }
}

cpdit_status cpu_conv2d(float *y, const float *x, const float *w_packed, const float *b, int W,
                        int Cin, int Cout, int K, int r0, int r1, void *ws, cpdit_error *err)
{
    if (W < 1 || Cin < 1 || Cout < 1 || (K != 1 && K != 3) || r0 < 0 || r1 < r0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "kernels/cpu",
                               "conv2d: bad sizes W %d Cin %d Cout %d K %d rows [%d, %d)", W,
                               Cin, Cout, K, r0, r1);
    if (r1 == r0)
        return CPDIT_OK;
    const int form = conv_form(w_packed);
    if (!form)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "kernels/cpu",
                               "conv2d: the weights were not packed by cpu_conv2d_pack");
    const float *wf = conv_weights(w_packed);
    const uint16_t *wb = conv_weights(w_packed);
    const size_t q0 = (size_t)r0 * W, P = (size_t)(r1 - r0) * W;
    if (K == 1) {
        if (form == CONV_FORM_BF16 && !b) /* y written by the GEMM: no clearing */
            return cpu_gemm_bf16_set(y + q0 * Cout, Cout, x + q0 * Cin, Cin, wb, (int)P, Cin,
                                     Cout, err);
        fill_bias(y + q0 * Cout, b, P, Cout);
        if (form == CONV_FORM_BF16)
            return cpu_gemm_bf16(y + q0 * Cout, Cout, x + q0 * Cin, Cin, wb, (int)P, Cin, Cout,
                                 err);
        cpu_par_sgemm(0, (int)P, Cout, Cin, 1.0f, x + q0 * Cin, Cin, wf, Cout, 1.0f,
                      y + q0 * Cout, Cout);
        return CPDIT_OK;
    }
    if (!ws)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "kernels/cpu", "conv2d: no workspace");
#ifdef CPDIT_HAVE_DNNL
    if (form == CONV_FORM_DNNL)
        return cpu_conv2d_dnnl(y, x, conv_weights(w_packed), b, W, Cin, Cout, r0, r1, ws,
                               cpu_conv2d_workspace_bytes(W, Cin, K), err);
#endif
    conv_job j = {.y = y, .x = x, .wf = wf, .wb = wb, .b = b, .W = W, .Cin = Cin, .Cout = Cout,
                  .K = K, .form = form, .q0 = q0, .P = P, .depth = (size_t)K * K * Cin,
                  .pb = block_pixels(Cin, K), .ws = ws, .err = err};
    const size_t blocks = (P + j.pb - 1) / j.pb;
    const int threads = cpu_pool_in_task() ? 1 : cpu_pool_size();
    if (threads > 1 && blocks >= CONV_BLOCKS_PER_THREAD * (size_t)threads) {
        /* whole blocks per worker: im2col, bias and the GEMM of a block on one thread */
        cpu_pool_run(threads, conv_worker, &j);
        return j.st;
    }
    /* few blocks: one at a time, the im2col and the GEMM split over the pool */
    for (size_t q = q0; q < q0 + P; q += j.pb) {
        const size_t n = q0 + P - q < j.pb ? q0 + P - q : j.pb;
        cpdit_status st = conv_block(&j, ws, q, n, 1);
        if (st)
            return st;
    }
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ GroupNorm */

/* acc[g] += sum over pixels and the group's channels of x (mean NULL) or of (x - mean[g])^2.
 * Per-channel sums in double, folded into groups at the end. */
CPU_KERNEL_CLONES
void cpu_group_moments(double *acc, const float *x, size_t pixels, int C, int G,
                       const double *mean)
{
    double ch[C], mc[C];
    const int cpg = C / G;
    for (int c = 0; c < C; c++) {
        ch[c] = 0.0;
        mc[c] = mean ? mean[c / cpg] : 0.0;
    }
    if (!mean) {
        for (size_t p = 0; p < pixels; p++) {
            const float *xp = x + p * (size_t)C;
            for (int c = 0; c < C; c++)
                ch[c] += (double)xp[c];
        }
    } else {
        for (size_t p = 0; p < pixels; p++) {
            const float *xp = x + p * (size_t)C;
            for (int c = 0; c < C; c++) {
                const double d = (double)xp[c] - mc[c];
                ch[c] += d * d;
            }
        }
    }
    for (int c = 0; c < C; c++)
        acc[c / cpg] += ch[c];
}

static float act_scalar(float v, cpdit_activation act)
{
    switch (act) {
    case CPDIT_ACT_SILU:
        return v / (1.0f + expf(-v));
    case CPDIT_ACT_GELU:
        return 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
    case CPDIT_ACT_RELU:
        return v > 0.0f ? v : 0.0f;
    case CPDIT_ACT_MISH: {
        const float sp = v > SOFTPLUS_THRESHOLD ? v : log1pf(expf(v));
        return v * tanhf(sp);
    }
    case CPDIT_ACT_NONE:
    default:
        return v;
    }
}

/* y = act(x · scale[c] + shift[c]), scale = rstd·gamma, shift = beta - mean·rstd·gamma. SiLU
 * and none are vectorised (the SiLU through cpu_silu's vector exp); the others are scalar. */
CPU_KERNEL_CLONES
void cpu_group_norm_apply(float *y, const float *x, size_t pixels, int C, int G,
                          const double *mean, const double *rstd, const float *gamma,
                          const float *beta, cpdit_activation act)
{
    float scale[C], shift[C];
    const int cpg = C / G;
    for (int c = 0; c < C; c++) {
        const double m = mean[c / cpg], r = rstd[c / cpg];
        scale[c] = (float)(r * gamma[c]);
        shift[c] = (float)(beta[c] - m * r * gamma[c]);
    }
    for (size_t p = 0; p < pixels; p++) {
        const float *xp = x + p * (size_t)C;
        float *yp = y + p * (size_t)C;
        if (act == CPDIT_ACT_SILU || act == CPDIT_ACT_NONE) {
            for (int c = 0; c < C; c++)
                yp[c] = xp[c] * scale[c] + shift[c];
            if (act == CPDIT_ACT_SILU) /* the row is in L1: a second vector pass */
                cpu_silu(yp, yp, (size_t)C);
        } else {
            for (int c = 0; c < C; c++)
                yp[c] = act_scalar(xp[c] * scale[c] + shift[c], act);
        }
    }
}

/* ------------------------------------------------------------------ layout */

void cpu_upsample2x(float *y, const float *x, int rows, int W, int C)
{
    const size_t cb = (size_t)C * sizeof(float), row2 = (size_t)2 * W * C;
    for (int r = 0; r < rows; r++) {
        const float *s = x + (size_t)r * W * C;
        float *d = y + (size_t)2 * r * row2;
        for (int i = 0; i < W; i++) {
            memcpy(d + (size_t)2 * i * C, s + (size_t)i * C, cb);
            memcpy(d + (size_t)(2 * i + 1) * C, s + (size_t)i * C, cb);
        }
        memcpy(d + row2, d, row2 * sizeof(float)); /* the odd row repeats the even one */
    }
}

void cpu_transpose(float *y, const float *x, size_t rows, size_t cols)
{
    for (size_t r0 = 0; r0 < rows; r0 += TRANSPOSE_TILE)
        for (size_t c0 = 0; c0 < cols; c0 += TRANSPOSE_TILE) {
            const size_t r1 = r0 + TRANSPOSE_TILE < rows ? r0 + TRANSPOSE_TILE : rows;
            const size_t c1 = c0 + TRANSPOSE_TILE < cols ? c0 + TRANSPOSE_TILE : cols;
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++)
                    y[c * rows + r] = x[r * cols + c];
        }
}
