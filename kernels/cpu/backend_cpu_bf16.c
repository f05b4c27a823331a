/* backend_cpu_bf16.c — the "cpu-bf16" kernel table: host memory, bf16 activations (half the
 * activation memory of "cpu"), the CPU fp32 kernels behind every op. It exists so that every
 * bf16 offset, count and stride of the model code runs on a machine without a GPU: the same
 * storage as the "cuda" table, checked against the fp32 "cpu" table.
 *
 * Every op: widen its bf16 inputs into fp32 temporaries (exact), call the "cpu" table's fp32
 * kernel on them, round each output once to bf16 (cpdit_f32_to_bf16: nearest, ties to even).
 * So an op's result is the "cpu" result on the bf16 values of its inputs, rounded once: a
 * relative error of at most 2^-8 per stored value (half an ulp of 8 significant bits; about
 * 2^-9 on average), plus what the inputs' own rounding carries through the op.
 *   - Parameters (biases, norm weights, RoPE tables, embedding tables, T5's position bias,
 *     conv weights) and the attention LSE stay fp32, and weights are the "cpu" table's
 *     (weights are not activations): the same weight entries and formats.
 *   - Strides (ld*) are honoured: strided inputs are widened row by row into contiguous
 *     temporaries, outputs narrowed row by row into their strided places (gaps untouched).
 *   - In place (y aliasing x) works: each block of inputs is widened before its outputs are
 *     written.
 *   - Row-independent ops run in blocks of rows (at most BF16_BLOCK_FLOATS floats per
 *     temporary, at least one row), so temporaries stay in cache; linear, attention, the
 *     convolution, upsampling and transpose widen whole operands.
 *   - Thread safe: the temporaries are one growable buffer per thread (never shared: the text
 *     encoders run forwards on several threads at once, ring attention runs its kernel on
 *     worker threads), kept between calls and freed when the thread ends. A fresh malloc per
 *     call made every large temporary new pages (a page fault per 4 KiB, zeroed by the kernel):
 *     that cost 2-3x the forward time at FLUX.1's width.
 * The void ops cannot report a failure: when a temporary cannot be allocated they print the
 * size on stderr and abort (a check table; the sizes are those of one activation). linear,
 * linear_act, attention and conv2d return CPDIT_ERR_RUNTIME instead.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vae_ops_cpu.h"
#include "lib/core/dtype.h"

#define BF16_WHERE "kernels/cpu-bf16"
/* Floats of one temporary of a row-blocked op (256 KB: several fit in L2). */
#define BF16_BLOCK_FLOATS ((size_t)1 << 16)
/* Elements of one stack block of the elementwise ops (add, mul, act): 3 x 16 KB of stack. */
#define BF16_STACK_FLOATS 4096

/* ------------------------------------------------------------------ conversion */

static const uint16_t *bits_of(const cpdit_buf *p)
{
    return (const uint16_t *)(const void *)p;
}
static uint16_t *bits_of_mut(cpdit_buf *p)
{
    return (uint16_t *)(void *)p;
}
/* The buffer n bf16 elements after p (n may be negative: a convolution's halo row). */
static cpdit_buf *at(const cpdit_buf *p, ptrdiff_t n)
{
    return (cpdit_buf *)(void *)((uint16_t *)(uintptr_t)p + n);
}

/* bf16 bits of v rounded to nearest even: cpdit_f32_to_bf16 written without a branch (the
 * NaN case as a select), so that the loops below vectorise; the same bits for all 2^32
 * inputs. */
static inline uint16_t bf16_bits(uint32_t v)
{
    const uint32_t rounded = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (v >> 16) | 0x0040u;
    return (uint16_t)((v & ~CPDIT_F32_SIGN) > CPDIT_F32_INF ? quiet_nan : rounded);
}

/* f (n) fp32 = the n bf16 values at src (exact): the bits shifted up. Blocks of CPU_LANES
 * with a fixed-size inner loop, then a tail (backend_cpu.h). */
CPU_KERNEL_CLONES
static void widen(float *f, const cpdit_buf *src, size_t n)
{
    const uint16_t *s = bits_of(src);
    uint32_t *u = (uint32_t *)(void *)f;
    size_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++)
            u[i + l] = (uint32_t)s[i + l] << 16;
    for (; i < n; i++)
        u[i] = (uint32_t)s[i] << 16;
}
/* n bf16 values at dst = f (n) rounded to nearest even. */
CPU_KERNEL_CLONES
static void narrow(cpdit_buf *dst, const float *f, size_t n)
{
    uint16_t *d = bits_of_mut(dst);
    const uint32_t *u = (const uint32_t *)(const void *)f;
    size_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++)
            d[i + l] = bf16_bits(u[i + l]);
    for (; i < n; i++)
        d[i] = bf16_bits(u[i]);
}
/* f (rows, dim) contiguous = src (rows, dim) with row stride lds elements. */
static void widen_rows(float *f, const cpdit_buf *src, size_t lds, size_t rows, int dim)
{
    for (size_t r = 0; r < rows; r++)
        widen(f + r * (size_t)dim, at(src, r * lds), (size_t)dim);
}
/* dst (rows, dim) with row stride ldd elements = f (rows, dim) contiguous, rounded. */
static void narrow_rows(cpdit_buf *dst, size_t ldd, const float *f, size_t rows, int dim)
{
    for (size_t r = 0; r < rows; r++)
        narrow(at(dst, r * ldd), f + r * (size_t)dim, (size_t)dim);
}

/* This thread's temporary: one buffer grown on demand and kept, freed at thread exit. */
typedef struct bf16_temp {
    float *p;
    size_t cap; /* floats */
} bf16_temp;

static pthread_key_t temp_key;
static pthread_once_t temp_once = PTHREAD_ONCE_INIT;

static void temp_destroy(void *v)
{
    bf16_temp *t = v;
    free(t->p);
    free(t);
}

static void temp_key_create(void)
{
    if (pthread_key_create(&temp_key, temp_destroy) != 0) {
        fprintf(stderr, "cpdit: %s: pthread_key_create failed\n", BF16_WHERE);
        abort();
    }
}

/* n floats of this thread's scratch (n >= 1), valid until this thread's next temp_floats: an
 * op takes one and splits it. NULL when out of memory. Release with temp_done (a no-op: the
 * buffer stays for the next op). */
static float *temp_floats(size_t n)
{
    pthread_once(&temp_once, temp_key_create);
    bf16_temp *t = pthread_getspecific(temp_key);
    if (!t) {
        if (!(t = calloc(1, sizeof *t)) || pthread_setspecific(temp_key, t) != 0) {
            free(t);
            return NULL;
        }
    }
    if (n < 1)
        n = 1;
    if (n > t->cap) {
        free(t->p);
        t->cap = 0;
        if (!(t->p = malloc(n * sizeof(float))))
            return NULL;
        t->cap = n;
    }
    return t->p;
}

static void temp_done(float *p)
{
    (void)p; /* kept for this thread's next op */
}
/* The same for the void ops, which cannot return a status: abort with the size. */
static float *temp_floats_or_die(size_t n)
{
    float *p = temp_floats(n);
    if (!p) {
        fprintf(stderr, "cpdit: %s: out of memory for a %zu-float temporary\n", BF16_WHERE, n);
        abort();
    }
    return p;
}

/* Rows of dim values per block of a row-blocked op (>= 1). */
static size_t block_rows(int dim)
{
    const size_t r = BF16_BLOCK_FLOATS / (size_t)(dim > 0 ? dim : 1);
    return r ? r : 1;
}

/* ------------------------------------------------------------------ memory */

static void bf16_upload_act(cpdit_buf *dst, const float *host_src, size_t n)
{
    narrow(dst, host_src, n);
}
static void bf16_download_act(float *host_dst, const cpdit_buf *src, size_t n)
{
    widen(host_dst, src, n);
}

/* ------------------------------------------------------------------ elementwise */

/* y = op(a, b) over n elements through the fp32 kernel op, in stack-sized blocks. */
static void binary(void (*op)(float *, const float *, const float *, size_t), cpdit_buf *y,
                   const cpdit_buf *a, const cpdit_buf *b, size_t n)
{
    float fa[BF16_STACK_FLOATS], fb[BF16_STACK_FLOATS];
    for (size_t i = 0; i < n; i += BF16_STACK_FLOATS) {
        const size_t m = n - i < BF16_STACK_FLOATS ? n - i : BF16_STACK_FLOATS;
        widen(fa, at(a, i), m);
        widen(fb, at(b, i), m);
        op(fa, fa, fb, m);
        narrow(at(y, i), fa, m);
    }
}

static void bf16_add(cpdit_buf *y, const cpdit_buf *a, const cpdit_buf *b, size_t n)
{
    binary(cpu_add, y, a, b, n);
}

static void bf16_mul(cpdit_buf *y, const cpdit_buf *a, const cpdit_buf *b, size_t n)
{
    binary(cpu_mul, y, a, b, n);
}

static void bf16_act(cpdit_act kind, cpdit_buf *y, const cpdit_buf *x, size_t n)
{
    float fx[BF16_STACK_FLOATS], fy[BF16_STACK_FLOATS];
    for (size_t i = 0; i < n; i += BF16_STACK_FLOATS) {
        const size_t m = n - i < BF16_STACK_FLOATS ? n - i : BF16_STACK_FLOATS;
        widen(fx, at(x, i), m);
        cpu_act(kind, fy, fx, m);
        narrow(at(y, i), fy, m);
    }
}

/* y (n, dim) = table (fp32) rows ids[0..n), rounded. */
static void bf16_embedding(cpdit_buf *y, const float *table, const int32_t *ids, size_t n,
                           int dim)
{
    const size_t rb = block_rows(dim);
    float *fy = temp_floats_or_die((n < rb ? n : rb) * (size_t)dim);
    for (size_t r = 0; r < n; r += rb) {
        const size_t m = n - r < rb ? n - r : rb;
        cpu_embedding(fy, table, ids + r, m, dim);
        narrow(at(y, r * (size_t)dim), fy, m * (size_t)dim);
    }
    temp_done(fy);
}

/* y (rows, dim) = x (1 + scale) + shift; shift, scale (dim) activations. */
static void bf16_modulate(cpdit_buf *y, const cpdit_buf *x, const cpdit_buf *shift,
                          const cpdit_buf *scale, size_t rows, int dim)
{
    if (!rows || dim <= 0)
        return;
    const size_t rb = block_rows(dim), cap = (rows < rb ? rows : rb) * (size_t)dim;
    float *fx = temp_floats_or_die(cap + 2 * (size_t)dim);
    float *fshift = fx + cap, *fscale = fshift + dim;
    widen(fshift, shift, (size_t)dim);
    widen(fscale, scale, (size_t)dim);
    for (size_t r = 0; r < rows; r += rb) {
        const size_t m = rows - r < rb ? rows - r : rb;
        widen(fx, at(x, r * (size_t)dim), m * (size_t)dim);
        cpu_modulate(fx, fx, fshift, fscale, m, dim);
        narrow(at(y, r * (size_t)dim), fx, m * (size_t)dim);
    }
    temp_done(fx);
}

/* h (rows, dim; stride ldh) += gate x (x: stride ldx); gate (dim) activations. */
static void bf16_gated_residual(cpdit_buf *h, int ldh, const cpdit_buf *x, int ldx,
                                const cpdit_buf *gate, size_t rows, int dim)
{
    if (!rows || dim <= 0)
        return;
    const size_t rb = block_rows(dim), cap = (rows < rb ? rows : rb) * (size_t)dim;
    float *fh = temp_floats_or_die(2 * cap + (size_t)dim);
    float *fx = fh + cap, *fgate = fx + cap;
    widen(fgate, gate, (size_t)dim);
    for (size_t r = 0; r < rows; r += rb) {
        const size_t m = rows - r < rb ? rows - r : rb;
        widen_rows(fh, at(h, r * (size_t)ldh), (size_t)ldh, m, dim);
        widen_rows(fx, at(x, r * (size_t)ldx), (size_t)ldx, m, dim);
        cpu_gated_residual(fh, dim, fx, dim, fgate, m, dim);
        narrow_rows(at(h, r * (size_t)ldh), (size_t)ldh, fh, m, dim);
    }
    temp_done(fh);
}

/* A copy is exact in bf16 (widening then rounding gives the same bits back): the rows move
 * as 2-byte elements, with memmove as cpu_copy_rows (overlap within a row is fine). */
static void bf16_copy_rows(cpdit_buf *dst, int ldd, const cpdit_buf *src, int lds, size_t rows,
                           int dim)
{
    if (dim <= 0)
        return;
    if (ldd == dim && lds == dim) {
        memmove(dst, src, rows * (size_t)dim * sizeof(uint16_t));
        return;
    }
    for (size_t r = 0; r < rows; r++)
        memmove(at(dst, r * (size_t)ldd), at(src, r * (size_t)lds),
                (size_t)dim * sizeof(uint16_t));
}

/* ------------------------------------------------------------------ norms, RoPE */

static void bf16_layer_norm(cpdit_buf *y, const cpdit_buf *x, const float *gamma,
                            const float *beta, size_t rows, int dim, float eps)
{
    if (!rows || dim <= 0)
        return;
    const size_t rb = block_rows(dim);
    float *f = temp_floats_or_die((rows < rb ? rows : rb) * (size_t)dim);
    for (size_t r = 0; r < rows; r += rb) {
        const size_t m = rows - r < rb ? rows - r : rb;
        widen(f, at(x, r * (size_t)dim), m * (size_t)dim);
        cpu_layer_norm(f, f, gamma, beta, m, dim, eps);
        narrow(at(y, r * (size_t)dim), f, m * (size_t)dim);
    }
    temp_done(f);
}

static void bf16_rms_norm(cpdit_buf *y, const cpdit_buf *x, const float *weight, size_t rows,
                          int dim, float eps)
{
    if (!rows || dim <= 0)
        return;
    const size_t rb = block_rows(dim);
    float *f = temp_floats_or_die((rows < rb ? rows : rb) * (size_t)dim);
    for (size_t r = 0; r < rows; r += rb) {
        const size_t m = rows - r < rb ? rows - r : rb;
        widen(f, at(x, r * (size_t)dim), m * (size_t)dim);
        cpu_rms_norm(f, f, weight, m, dim, eps);
        narrow(at(y, r * (size_t)dim), f, m * (size_t)dim);
    }
    temp_done(f);
}

/* x (S, H, D) in place; cos, sin (S, D) fp32: blocks of tokens. */
static void bf16_rope(cpdit_buf *x, const float *cos, const float *sin, int S, int H, int D)
{
    if (S <= 0 || H <= 0 || D <= 0)
        return;
    const size_t tok = (size_t)H * D, sb = block_rows((int)tok);
    float *f = temp_floats_or_die(((size_t)S < sb ? (size_t)S : sb) * tok);
    for (size_t s = 0; s < (size_t)S; s += sb) {
        const size_t m = (size_t)S - s < sb ? (size_t)S - s : sb;
        widen(f, at(x, s * tok), m * tok);
        cpu_rope(f, cos + s * (size_t)D, sin + s * (size_t)D, (int)m, H, D);
        narrow(at(x, s * tok), f, m * tok);
    }
    temp_done(f);
}

/* ------------------------------------------------------------------ linear */

/* y (M, N; stride ldy) [+]= act(x (M, K; stride ldx) W^T + b): x widened, y widened first
 * when accumulating, the fp32 kernel into a contiguous (M, N) temporary, act in fp32, y
 * rounded once. */
static cpdit_status linear_fp32(cpdit_buf *y, int ldy, const cpdit_buf *x, int ldx,
                                const cpdit_weight *w, const float *b, int M, int K, int N,
                                int accumulate, cpdit_act act, cpdit_error *err)
{
    if (M <= 0 || N <= 0 || K < 0 || ldx < K || ldy < N)
        return cpu_linear(NULL, ldy, NULL, ldx, w, b, M, K, N, accumulate, err); /* its checks */
    const size_t nx = (size_t)M * K, ny = (size_t)M * N;
    float *fx = temp_floats(nx + ny);
    if (!fx)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, BF16_WHERE,
                               "linear: out of memory for %zu fp32 temporaries", nx + ny);
    float *fy = fx + nx;
    widen_rows(fx, x, (size_t)ldx, (size_t)M, K);
    if (accumulate)
        widen_rows(fy, y, (size_t)ldy, (size_t)M, N);
    cpdit_status st = cpu_linear(fy, N, fx, K, w, b, M, K, N, accumulate, err);
    if (!st) {
        if (act != CPDIT_ACT_NONE)
            cpu_act(act, fy, fy, ny);
        narrow_rows(y, (size_t)ldy, fy, (size_t)M, N);
    }
    temp_done(fx);
    return st;
}

static cpdit_status bf16_linear(cpdit_buf *y, int ldy, const cpdit_buf *x, int ldx,
                                const cpdit_weight *w, const float *b, int M, int K, int N,
                                int accumulate, cpdit_error *err)
{
    return linear_fp32(y, ldy, x, ldx, w, b, M, K, N, accumulate, CPDIT_ACT_NONE, err);
}

/* linear then act with one rounding (as the cuda table's fused epilogue stores it). */
static cpdit_status bf16_linear_act(cpdit_buf *y, int ldy, const cpdit_buf *x, int ldx,
                                    const cpdit_weight *w, const float *b, int M, int K, int N,
                                    cpdit_act act, cpdit_error *err)
{
    return linear_fp32(y, ldy, x, ldx, w, b, M, K, N, 0, act, err);
}

/* ------------------------------------------------------------------ attention */

/* out_a (rows, D) activations, lse_a (rows) fp32, merged with (out_b, lse_b): row blocks. */
static void bf16_lse_merge(cpdit_buf *out_a, float *lse_a, const cpdit_buf *out_b,
                           const float *lse_b, size_t rows, int D)
{
    if (!rows || D <= 0)
        return;
    const size_t rb = block_rows(D), cap = (rows < rb ? rows : rb) * (size_t)D;
    float *fa = temp_floats_or_die(2 * cap), *fb = fa + cap;
    for (size_t r = 0; r < rows; r += rb) {
        const size_t m = rows - r < rb ? rows - r : rb;
        widen(fa, at(out_a, r * (size_t)D), m * (size_t)D);
        widen(fb, at(out_b, r * (size_t)D), m * (size_t)D);
        attention_lse_merge(fa, lse_a + r, fb, lse_b + r, m, D);
        narrow(at(out_a, r * (size_t)D), fa, m * (size_t)D);
    }
    temp_done(fa);
}

/* out_a (rows, D) fp32 accumulator (host memory), lse_a (rows) fp32, merged with the bf16
 * block (out_b, lse_b) widened: the fp32 merge of "cpu" on the widened block, nothing rounded. */
static void bf16_lse_merge_f32(float *out_a, float *lse_a, const cpdit_buf *out_b,
                               const float *lse_b, size_t rows, int D)
{
    if (!rows || D <= 0)
        return;
    const size_t rb = block_rows(D), cap = (rows < rb ? rows : rb) * (size_t)D;
    float *fb = temp_floats_or_die(cap);
    for (size_t r = 0; r < rows; r += rb) {
        const size_t m = rows - r < rb ? rows - r : rb;
        widen(fb, at(out_b, r * (size_t)D), m * (size_t)D);
        attention_lse_merge(out_a + r * (size_t)D, lse_a + r, fb, lse_b + r, m, D);
    }
    temp_done(fb);
}

/* y (n) fp32 = x (n) bf16 widened (exact); y = x (n) rounded to bf16 once. */
static void bf16_act_to_f32(float *y, const cpdit_buf *x, size_t n)
{
    widen(y, x, n);
}
static void bf16_act_from_f32(cpdit_buf *y, const float *x, size_t n)
{
    narrow(y, x, n);
}

typedef cpdit_status (*attention_fp32_fn)(float *out, float *lse, const float *q,
                                          const float *k, const float *v,
                                          const cpdit_attention_args *a, cpdit_error *err);

/* q, k, v widened into contiguous (B*S, H*D) temporaries (their row strides honoured), the
 * fp32 kernel with contiguous strides, out rounded into its strided rows; lse fp32 as is. */
static cpdit_status attention_fp32(attention_fp32_fn fn, cpdit_buf *out, float *lse,
                                   const cpdit_buf *q, const cpdit_buf *k, const cpdit_buf *v,
                                   const cpdit_attention_args *a, cpdit_error *err)
{
    if (a->B < 0 || a->Sq < 0 || a->Skv < 0 || a->H < 0 || a->D < 1)
        return fn(NULL, lse, NULL, NULL, NULL, a, err); /* the kernel's own checks */
    const int row = a->H * a->D;
    const size_t ld_q = (size_t)(a->ld_q ? a->ld_q : row);
    const size_t ld_kv = (size_t)(a->ld_kv ? a->ld_kv : row);
    const size_t ld_out = (size_t)(a->ld_out ? a->ld_out : row);
    const size_t nq = (size_t)a->B * a->Sq, nk = (size_t)a->B * a->Skv;
    const size_t total = (2 * nq + 2 * nk) * (size_t)row;
    float *fq = temp_floats(total);
    if (!fq)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, BF16_WHERE,
                               "attention: out of memory for %zu fp32 temporaries", total);
    float *fk = fq + nq * row, *fv = fk + nk * row, *fo = fv + nk * row;
    widen_rows(fq, q, ld_q, nq, row);
    widen_rows(fk, k, ld_kv, nk, row);
    widen_rows(fv, v, ld_kv, nk, row);
    cpdit_attention_args c = *a;
    c.ld_q = c.ld_kv = c.ld_out = 0;
    cpdit_status st = fn(fo, lse, fq, fk, fv, &c, err);
    if (!st)
        narrow_rows(out, ld_out, fo, nq, row);
    temp_done(fq);
    return st;
}

static cpdit_status bf16_flash_forward(cpdit_buf *out, float *lse, const cpdit_buf *q,
                                       const cpdit_buf *k, const cpdit_buf *v,
                                       const cpdit_attention_args *a, cpdit_error *err)
{
    return attention_fp32(attention_cpu_flash_or_dense, out, lse, q, k, v, a, err);
}

static cpdit_status bf16_reference_forward(cpdit_buf *out, float *lse, const cpdit_buf *q,
                                           const cpdit_buf *k, const cpdit_buf *v,
                                           const cpdit_attention_args *a, cpdit_error *err)
{
    return attention_fp32(attention_cpu_reference_args, out, lse, q, k, v, a, err);
}

/* The normalised error of bf16 storage against fp32 attention (q, k, v rounded on the way
 * in, out rounded once): tests/test_backend_ops measured at most 1.0e-3 over its attention
 * cases (out and LSE together); the bound is one rounding at its worst, 2^-8. */
#define BF16_ATTENTION_TOLERANCE (1.0 / 256.0)

static const cpdit_attention_kernel bf16_flash = {
    .name = "cpu-bf16-flash",
    .summary = "cpu-flash on fp32 copies of bf16 q, k, v; out rounded to bf16",
    .forward = bf16_flash_forward,
    .tolerance = BF16_ATTENTION_TOLERANCE,
};

static const cpdit_attention_kernel bf16_reference = {
    .name = "cpu-bf16-reference",
    .summary = "cpu-reference on fp32 copies of bf16 q, k, v; out rounded (slow; for checking)",
    .forward = bf16_reference_forward,
    .tolerance = BF16_ATTENTION_TOLERANCE,
};

static const cpdit_attention_kernel *const bf16_attention_kernels[] = {&bf16_flash,
                                                                        &bf16_reference, NULL};

/* ------------------------------------------------------------------ VAE section */

/* Output rows [r0, r1) of y (rows, W, Cout): x rows [r0 - h, r1 + h) (h = 1 halo row for
 * K = 3) widened into a band whose row h is x's row r0, the fp32 kernel on the band's rows
 * [0, r1 - r0), the band's output rounded into y's rows [r0, r1). */
static cpdit_status bf16_conv2d(cpdit_buf *y, const cpdit_buf *x, const float *w_packed,
                                const float *b, int W, int Cin, int Cout, int K, int r0, int r1,
                                void *ws, cpdit_error *err)
{
    if (W < 1 || Cin < 1 || Cout < 1 || (K != 1 && K != 3) || r0 < 0 || r1 <= r0)
        return cpu_conv2d(NULL, NULL, w_packed, b, W, Cin, Cout, K, r0, r1, ws, err);
    const ptrdiff_t halo = K == 3 ? 1 : 0, rows = r1 - r0;
    const size_t in_row = (size_t)W * Cin, out_row = (size_t)W * Cout;
    const size_t nx = (size_t)(rows + 2 * halo) * in_row, ny = (size_t)rows * out_row;
    float *fx = temp_floats(nx + ny);
    if (!fx)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, BF16_WHERE,
                               "conv2d: out of memory for %zu fp32 temporaries", nx + ny);
    float *fy = fx + nx;
    widen(fx, at(x, ((ptrdiff_t)r0 - halo) * (ptrdiff_t)in_row), nx);
    cpdit_status st = cpu_conv2d(fy, fx + halo * in_row, w_packed, b, W, Cin, Cout, K, 0,
                                 (int)rows, ws, err);
    if (!st)
        narrow(at(y, (size_t)r0 * out_row), fy, ny);
    temp_done(fx);
    return st;
}

/* acc[g] += moments of x (pixels, C): blocks of pixels, accumulated as the kernel does. */
static void bf16_group_moments(double *acc, const cpdit_buf *x, size_t pixels, int C, int G,
                               const double *mean)
{
    if (!pixels || C <= 0)
        return;
    const size_t pb = block_rows(C);
    float *f = temp_floats_or_die((pixels < pb ? pixels : pb) * (size_t)C);
    for (size_t p = 0; p < pixels; p += pb) {
        const size_t m = pixels - p < pb ? pixels - p : pb;
        widen(f, at(x, p * (size_t)C), m * (size_t)C);
        cpu_group_moments(acc, f, m, C, G, mean);
    }
    temp_done(f);
}

static void bf16_group_norm_apply(cpdit_buf *y, const cpdit_buf *x, size_t pixels, int C, int G,
                                  const double *mean, const double *rstd, const float *gamma,
                                  const float *beta, cpdit_activation act)
{
    if (!pixels || C <= 0)
        return;
    const size_t pb = block_rows(C);
    float *f = temp_floats_or_die((pixels < pb ? pixels : pb) * (size_t)C);
    for (size_t p = 0; p < pixels; p += pb) {
        const size_t m = pixels - p < pb ? pixels - p : pb;
        widen(f, at(x, p * (size_t)C), m * (size_t)C);
        cpu_group_norm_apply(f, f, m, C, G, mean, rstd, gamma, beta, act);
        narrow(at(y, p * (size_t)C), f, m * (size_t)C);
    }
    temp_done(f);
}

static void bf16_upsample2x(cpdit_buf *y, const cpdit_buf *x, int rows, int W, int C)
{
    if (rows <= 0 || W <= 0 || C <= 0)
        return;
    const size_t n = (size_t)rows * W * C;
    float *fx = temp_floats_or_die(5 * n), *fy = fx + n;
    widen(fx, x, n);
    cpu_upsample2x(fy, fx, rows, W, C);
    narrow(y, fy, 4 * n);
    temp_done(fx);
}

static void bf16_transpose(cpdit_buf *y, const cpdit_buf *x, size_t rows, size_t cols)
{
    const size_t n = rows * cols;
    if (!n)
        return;
    float *fx = temp_floats_or_die(2 * n), *fy = fx + n;
    widen(fx, x, n);
    cpu_transpose(fy, fx, rows, cols);
    narrow(y, fy, n);
    temp_done(fx);
}

/* ------------------------------------------------------------------ runtime */

static int bf16_available(char *why, size_t why_size)
{
    (void)why;
    (void)why_size;
    return 1; /* the host is always there */
}

static void bf16_describe(char *buf, size_t size)
{
    char cpu[200];
    cpdit_backend_cpu()->describe(cpu, sizeof cpu);
    snprintf(buf, size, "bf16 storage, cpu kernels: %s", cpu);
}

static cpdit_status bf16_sync(cpdit_error *err)
{
    (void)err; /* every op has finished when it returns */
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ the table */

static const cpdit_backend cpu_bf16_backend = {
    .name = "cpu-bf16",
    .summary = "host memory, bf16 activations (half the memory), cpu kernels in fp32: the host "
               "check of bf16 storage",
    .act_dtype = CPDIT_DTYPE_BF16,
    .act_size = sizeof(uint16_t),
    .host_memory = 1,
    .available = bf16_available,
    .describe = bf16_describe,
    .sync = bf16_sync,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy_bytes,
    .download = cpu_copy_bytes,
    .upload_act = bf16_upload_act,
    .download_act = bf16_download_act,
    .weight_bytes = cpu_weight_bytes,
    .weight_create = cpu_weight_create,
    .weight_free = cpu_weight_free,
    .linear = bf16_linear,
    .layer_norm = bf16_layer_norm,
    .rms_norm = bf16_rms_norm,
    .rope = bf16_rope,
    .act = bf16_act,
    .add = bf16_add,
    .mul = bf16_mul,
    .embedding = bf16_embedding,
    .modulate = bf16_modulate,
    .gated_residual = bf16_gated_residual,
    .copy_rows = bf16_copy_rows,
    .lse_merge = bf16_lse_merge,
    .attention_kernels = bf16_attention_kernels,
    .workers = attention_cpu_get_num_threads,
    .conv2d_pack = cpu_conv2d_pack,
    .conv2d_pack_stored = cpu_conv2d_pack_stored,
    .conv2d_workspace_bytes = cpu_conv2d_workspace_bytes,
    .conv2d = bf16_conv2d,
    .group_moments = bf16_group_moments,
    .group_norm_apply = bf16_group_norm_apply,
    .upsample2x = bf16_upsample2x,
    .transpose = bf16_transpose,
    .linear_act = bf16_linear_act,
    .lse_merge_f32 = bf16_lse_merge_f32,
    .act_to_f32 = bf16_act_to_f32,
    .act_from_f32 = bf16_act_from_f32,
};

const cpdit_backend *cpdit_backend_cpu_bf16(void)
{
    (void)cpu_pool_size(); /* the rank's threads (kernels/cpu/thread_pool.h) */
    return &cpu_bf16_backend;
}
