/* gemm_bf16_cpu.c — y += x W^T from packed bf16 weights (layout and kernels: gemm_bf16_cpu.h).
 *
 * Blocking: a task is GEMM_MC rows x a few panels (ncols); inside it the k dimension goes in
 * slices of GEMM_KC pairs, so that the task's x slice (MC x 2KC bf16 = 96 KiB) and W slice
 * (ncols x 2KC bf16 <= 256 KiB) stay in L2 while the micro-kernel runs over them. The
 * micro-kernel keeps GEMM_MR x NR fp32 sums in registers (24 zmm) over a k slice, adding into
 * y (which the caller initialised with the bias or zero).
 */
#include "config.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/blas_runtime.h"
#include "kernels/cpu/gemm_bf16_cpu.h"
#include "kernels/cpu/thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define GEMM_HAVE_AVX512BF16 1
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define GEMM_HAVE_AVX512BF16 0
#endif

#define NR GEMM_BF16_NR
/* rows per micro-kernel call (AVX512-BF16: 12 x 2 accumulators) */
#define GEMM_MR 12
/* rows per generic micro-kernel call */
#define GEMM_MR_GENERIC 4
/* rows per task */
#define GEMM_MC 96
/* k pairs per slice */
#define GEMM_KC 256
/* most panels per task */
#define GEMM_NC_PANELS 8
#define GEMM_MAX_THREADS CPU_POOL_MAX_THREADS
/* x copies above this many bytes are freed after the call (else kept for the next one) */
#define GEMM_XBUF_KEEP_BYTES ((size_t)256 << 20)

static inline int pairs_of(int K)
{
    return (K + 1) / 2;
}

size_t cpu_bf16_packed_bytes(int N, int K)
{
    const size_t panels = (size_t)(N + NR - 1) / NR;
    return panels * (size_t)pairs_of(K) * NR * 2 * sizeof(uint16_t);
}

/* ------------------------------------------------------------------ packing */

static inline uint16_t elem_bf16(const void *src, cpdit_dtype dtype, size_t i)
{
    switch (dtype) {
    case CPDIT_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, (const char *)src + 2 * i, 2);
        return h;
    }
    case CPDIT_DTYPE_F32: {
        float f;
        memcpy(&f, (const char *)src + 4 * i, 4);
        return cpdit_f32_to_bf16(f);
    }
    case CPDIT_DTYPE_F8_E4M3:
        return cpdit_f32_to_bf16(cpdit_f8e4m3_to_f32(((const uint8_t *)src)[i]));
    case CPDIT_DTYPE_F8_E5M2:
        return cpdit_f32_to_bf16(cpdit_f8e5m2_to_f32(((const uint8_t *)src)[i]));
    case CPDIT_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, (const char *)src + 2 * i, 2);
        return cpdit_f32_to_bf16(cpdit_f16_to_f32(h));
    }
    default:
        return 0;
    }
}

void cpu_bf16_pack_rows(uint16_t *dst, const void *src, cpdit_dtype dtype, int N, int K, int r0,
                        int r1)
{
    const int KP = pairs_of(K);
    for (int r = r0; r < r1 && r < N; r++) {
        const int p = r / NR, c = r % NR;
        uint16_t *d = dst + (size_t)p * KP * NR * 2 + (size_t)c * 2;
        const size_t row = (size_t)r * K;
        if (dtype == CPDIT_DTYPE_BF16) {
            const unsigned char *s = (const unsigned char *)src + row * 2;
            for (int kk = 0; kk < K / 2; kk++)
                memcpy(d + (size_t)kk * NR * 2, s + (size_t)kk * 4, 4);
        } else {
            for (int kk = 0; kk < K / 2; kk++) {
                d[(size_t)kk * NR * 2] = elem_bf16(src, dtype, row + 2 * (size_t)kk);
                d[(size_t)kk * NR * 2 + 1] = elem_bf16(src, dtype, row + 2 * (size_t)kk + 1);
            }
        }
        if (K % 2) {
            d[(size_t)(KP - 1) * NR * 2] = elem_bf16(src, dtype, row + (size_t)K - 1);
            d[(size_t)(KP - 1) * NR * 2 + 1] = 0;
        }
    }
}

/* ------------------------------------------------------------------ kernel selection */

enum { KERNEL_UNSET = 0, KERNEL_GENERIC, KERNEL_AVX512BF16 };
static int kernel_choice = KERNEL_UNSET;

static int cpu_has_avx512bf16(void)
{
#if GEMM_HAVE_AVX512BF16
    blas_cpu_features f;
    blas_cpu_features_detect(&f);
    return f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16 && f.os_zmm;
#else
    return 0;
#endif
}

static int kernel_get(void)
{
    int k = __atomic_load_n(&kernel_choice, __ATOMIC_RELAXED);
    if (k == KERNEL_UNSET) {
        k = cpu_has_avx512bf16() ? KERNEL_AVX512BF16 : KERNEL_GENERIC;
        __atomic_store_n(&kernel_choice, k, __ATOMIC_RELAXED);
    }
    return k;
}

const char *cpu_gemm_bf16_kernel(void)
{
    return kernel_get() == KERNEL_AVX512BF16 ? "avx512bf16" : "generic";
}

int cpu_gemm_bf16_set_kernel(const char *name)
{
    int k;
    if (!name || !strcmp(name, "auto"))
        k = cpu_has_avx512bf16() ? KERNEL_AVX512BF16 : KERNEL_GENERIC;
    else if (!strcmp(name, "generic"))
        k = KERNEL_GENERIC;
    else if (!strcmp(name, "avx512bf16") && cpu_has_avx512bf16())
        k = KERNEL_AVX512BF16;
    else
        return -1;
    __atomic_store_n(&kernel_choice, k, __ATOMIC_RELAXED);
    return 0;
}

/* ------------------------------------------------------------------ generic micro-kernel */

/* y rows [0, rows) (rows <= GEMM_MR_GENERIC), columns [0, ncols) of one panel, += x W^T over
 * pairs [kk0, kk1). x fp32 (row stride ldx, K valid columns). */
CPU_KERNEL_CLONES
static void ukr_generic(float *y, int ldy, const float *x, int ldx, int K, const uint16_t *panel,
                        int kk0, int kk1, int rows, int ncols, int load)
{
    float acc[GEMM_MR_GENERIC][NR];
    for (int r = 0; r < GEMM_MR_GENERIC; r++)
        for (int c = 0; c < NR; c++)
            acc[r][c] = (load && r < rows && c < ncols) ? y[(size_t)r * ldy + c] : 0.0f;
    for (int kk = kk0; kk < kk1; kk++) {
        const uint16_t *w = panel + (size_t)kk * NR * 2;
        union {
            uint32_t u[NR];
            float f[NR];
        } lo, hi;
        for (int c = 0; c < NR; c++) {
            lo.u[c] = (uint32_t)w[2 * c] << 16;
            hi.u[c] = (uint32_t)w[2 * c + 1] << 16;
        }
        float x0[GEMM_MR_GENERIC], x1[GEMM_MR_GENERIC];
        for (int r = 0; r < GEMM_MR_GENERIC; r++) {
            x0[r] = r < rows ? x[(size_t)r * ldx + 2 * kk] : 0.0f;
            x1[r] = (r < rows && 2 * kk + 1 < K) ? x[(size_t)r * ldx + 2 * kk + 1] : 0.0f;
        }
        for (int r = 0; r < GEMM_MR_GENERIC; r++)
            for (int c = 0; c < NR; c++)
                acc[r][c] += lo.f[c] * x0[r] + hi.f[c] * x1[r];
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < ncols; c++)
            y[(size_t)r * ldy + c] = acc[r][c];
}

/* ------------------------------------------------------------------ AVX512-BF16 micro-kernel */

#if GEMM_HAVE_AVX512BF16
/* y (mr x ncols of one panel) = (load ? y : 0) + xb (mr x 2 (kk1 - kk0) bf16, row stride
 * ldxb elements, already offset to pair kk0) . panel pairs [kk0, kk1). */
static inline __attribute__((always_inline)) BF16_TARGET void
ukr_bf16(const int mr, float *y, int ldy, const uint16_t *xb, size_t ldxb, const uint16_t *w,
         int npairs, int ncols, int load)
{
    const __mmask16 m0 = ncols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << ncols) - 1);
    const __mmask16 m1 = ncols >= 32   ? (__mmask16)0xffff
                         : ncols > 16 ? (__mmask16)((1u << (ncols - 16)) - 1)
                                      : (__mmask16)0;
    __m512 acc[GEMM_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        acc[i][0] = _mm512_maskz_loadu_ps(load ? m0 : 0, y + (size_t)i * ldy);
        acc[i][1] = _mm512_maskz_loadu_ps(load ? m1 : 0, y + (size_t)i * ldy + 16);
    }
    for (int kk = 0; kk < npairs; kk++) {
        const __m512bh w0 = (__m512bh)_mm512_load_si512((const void *)(w + (size_t)kk * 64));
        const __m512bh w1 = (__m512bh)_mm512_load_si512((const void *)(w + (size_t)kk * 64 + 32));
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            int32_t pair;
            memcpy(&pair, xb + (size_t)i * ldxb + 2 * (size_t)kk, 4);
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], xv, w0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], xv, w1);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        _mm512_mask_storeu_ps(y + (size_t)i * ldy, m0, acc[i][0]);
        _mm512_mask_storeu_ps(y + (size_t)i * ldy + 16, m1, acc[i][1]);
    }
}

#define UKR_CASE(n)                                                                       \
    case n:                                                                               \
        ukr_bf16(n, y, ldy, xb, ldxb, w, npairs, ncols, load);                            \
        break;

BF16_TARGET static void ukr_bf16_any(int mr, float *y, int ldy, const uint16_t *xb, size_t ldxb,
                                     const uint16_t *w, int npairs, int ncols, int load)
{
    switch (mr) {
        UKR_CASE(1) UKR_CASE(2) UKR_CASE(3) UKR_CASE(4) UKR_CASE(5) UKR_CASE(6)
        UKR_CASE(7) UKR_CASE(8) UKR_CASE(9) UKR_CASE(10) UKR_CASE(11) UKR_CASE(12)
    default:
        break;
    }
}

/* xb row (2 KP bf16, the last pair's second half zero when K is odd) = bf16(x row), rounded to
 * nearest even. */
BF16_TARGET static void row_to_bf16(uint16_t *xb, const float *x, int K)
{
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        const __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + 16);
        _mm512_storeu_si512((void *)(xb + k), (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
    for (; k < K; k++)
        xb[k] = cpdit_f32_to_bf16(x[k]);
    if (K % 2)
        xb[K] = 0;
}
#endif

/* ------------------------------------------------------------------ threads and tasks */

typedef struct gemm_job {
    float *y;
    const float *x;
    const uint16_t *wp;
    uint16_t *xb; /* bf16 copy of x (AVX512-BF16 kernel), (M, 2 KP) */
    int ldy, ldx, M, K, N, KP;
    int kernel;
    int overwrite; /* y = x W^T: the first k slice starts from zero instead of y */
    int panels, nc_panels; /* panels of W, panels per task */
    int m_tasks, n_tasks;
    long tasks;
    long next; /* atomic task counter */
    long conv_next; /* atomic row-chunk counter for the x conversion */
    long conv_done; /* atomic count of converted chunks: the products wait for all */
    int nthreads;
} gemm_job;

#define CONV_ROWS 16

static void run_task(const gemm_job *j, long t)
{
    const int mt = (int)(t % j->m_tasks), nt = (int)(t / j->m_tasks);
    const int r0 = mt * GEMM_MC, r1 = r0 + GEMM_MC < j->M ? r0 + GEMM_MC : j->M;
    const int p0 = nt * j->nc_panels;
    const int p1 = p0 + j->nc_panels < j->panels ? p0 + j->nc_panels : j->panels;
    const size_t panel_elems = (size_t)j->KP * NR * 2;
    for (int kk0 = 0; kk0 < j->KP; kk0 += GEMM_KC) {
        const int kk1 = kk0 + GEMM_KC < j->KP ? kk0 + GEMM_KC : j->KP;
        const int load = kk0 > 0 || !j->overwrite;
        for (int p = p0; p < p1; p++) {
            const uint16_t *panel = j->wp + (size_t)p * panel_elems;
            const int c0 = p * NR;
            const int ncols = j->N - c0 < NR ? j->N - c0 : NR;
#if GEMM_HAVE_AVX512BF16
            if (j->kernel == KERNEL_AVX512BF16) {
                const size_t ldxb = (size_t)j->KP * 2;
                for (int r = r0; r < r1; r += GEMM_MR) {
                    const int mr = r1 - r < GEMM_MR ? r1 - r : GEMM_MR;
                    ukr_bf16_any(mr, j->y + (size_t)r * j->ldy + c0, j->ldy,
                                 j->xb + (size_t)r * ldxb + 2 * (size_t)kk0, ldxb,
                                 panel + (size_t)kk0 * NR * 2, kk1 - kk0, ncols, load);
                }
                continue;
            }
#endif
            for (int r = r0; r < r1; r += GEMM_MR_GENERIC) {
                const int mr = r1 - r < GEMM_MR_GENERIC ? r1 - r : GEMM_MR_GENERIC;
                ukr_generic(j->y + (size_t)r * j->ldy + c0, j->ldy, j->x + (size_t)r * j->ldx,
                            j->ldx, j->K, panel, kk0, kk1, mr, ncols, load);
            }
        }
    }
}

/* One pool worker's share: rows of the x conversion, then tiles, both from atomic counters
 * (any worker count gives the same result: each tile is computed by one worker, in the same
 * order). */
static void gemm_worker(void *arg, int worker, int workers)
{
    gemm_job *j = arg;
    (void)worker;
    (void)workers;
#if GEMM_HAVE_AVX512BF16
    if (j->kernel == KERNEL_AVX512BF16) {
        const long chunks = (j->M + CONV_ROWS - 1) / CONV_ROWS;
        for (;;) {
            const long c = __atomic_fetch_add(&j->conv_next, 1, __ATOMIC_RELAXED);
            if (c >= chunks)
                break;
            for (int r = (int)c * CONV_ROWS; r < j->M && r < (int)(c + 1) * CONV_ROWS; r++)
                row_to_bf16(j->xb + (size_t)r * j->KP * 2, j->x + (size_t)r * j->ldx, j->K);
            __atomic_fetch_add(&j->conv_done, 1, __ATOMIC_RELEASE);
        }
        while (__atomic_load_n(&j->conv_done, __ATOMIC_ACQUIRE) < chunks)
            sched_yield();
    }
#endif
    for (;;) {
        const long t = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (t >= j->tasks)
            break;
        run_task(j, t);
    }
}

/* The bf16 copy of x: one buffer per calling thread, kept between calls up to a size. */
static __thread uint16_t *xbuf;
static __thread size_t xbuf_bytes;

static cpdit_status gemm_run(float *y, int ldy, const float *x, int ldx, const uint16_t *wp,
                             int M, int K, int N, int overwrite, cpdit_error *err)
{
    if (M <= 0 || N <= 0)
        return CPDIT_OK;
    if (K <= 0) {
        if (overwrite)
            for (int r = 0; r < M; r++)
                memset(y + (size_t)r * ldy, 0, (size_t)N * sizeof(float));
        return CPDIT_OK;
    }
    gemm_job j;
    memset(&j, 0, sizeof j);
    j.overwrite = overwrite;
    j.y = y;
    j.x = x;
    j.wp = wp;
    j.ldy = ldy;
    j.ldx = ldx;
    j.M = M;
    j.K = K;
    j.N = N;
    j.KP = pairs_of(K);
    j.kernel = kernel_get();
    j.panels = (N + NR - 1) / NR;
    j.m_tasks = (M + GEMM_MC - 1) / GEMM_MC;
    long nthreads = cpu_pool_in_task() ? 1 : cpu_pool_size();
    if (nthreads < 1)
        nthreads = 1;
    if (nthreads > GEMM_MAX_THREADS)
        nthreads = GEMM_MAX_THREADS;
    /* fewer panels per task while there are too few tasks for the threads */
    j.nc_panels = GEMM_NC_PANELS;
    while (j.nc_panels > 1 &&
           (long)j.m_tasks * ((j.panels + j.nc_panels - 1) / j.nc_panels) < 2 * nthreads)
        j.nc_panels /= 2;
    j.n_tasks = (j.panels + j.nc_panels - 1) / j.nc_panels;
    j.tasks = (long)j.m_tasks * j.n_tasks;
    if (nthreads > j.tasks)
        nthreads = j.tasks;
    j.nthreads = (int)nthreads;

    size_t xb_need = 0;
    if (j.kernel == KERNEL_AVX512BF16) {
        xb_need = (size_t)M * j.KP * 2 * sizeof(uint16_t);
        if (xbuf_bytes < xb_need) {
            free(xbuf);
            xbuf = cpu_alloc(xb_need);
            xbuf_bytes = xbuf ? xb_need : 0;
            if (!xbuf)
                return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "kernels/cpu",
                                       "linear: out of memory for the %zu MiB bf16 copy of the "
                                       "input", xb_need >> 20);
        }
        j.xb = xbuf;
    }
    cpu_pool_run(j.nthreads, gemm_worker, &j);
    if (xb_need > GEMM_XBUF_KEEP_BYTES) {
        free(xbuf);
        xbuf = NULL;
        xbuf_bytes = 0;
    }
    return CPDIT_OK;
}

cpdit_status cpu_gemm_bf16(float *y, int ldy, const float *x, int ldx, const uint16_t *wp,
                           int M, int K, int N, cpdit_error *err)
{
    return gemm_run(y, ldy, x, ldx, wp, M, K, N, 0, err);
}

cpdit_status cpu_gemm_bf16_set(float *y, int ldy, const float *x, int ldx, const uint16_t *wp,
                               int M, int K, int N, cpdit_error *err)
{
    return gemm_run(y, ldy, x, ldx, wp, M, K, N, 1, err);
}

/* ------------------------------------------------------------------ parallel packing */

typedef struct pack_job {
    uint16_t *dst;
    const void *src;
    cpdit_dtype dtype;
    int N, K;
    long next;
} pack_job;

/* Zero the columns past N of the last panel (the rows before N are written by the packing). */
static void pack_zero_tail(uint16_t *dst, int N, int K)
{
    const int tail = N % NR;
    if (!tail)
        return;
    const int KP = pairs_of(K);
    uint16_t *p = dst + (size_t)(N / NR) * KP * NR * 2;
    for (int kk = 0; kk < KP; kk++)
        memset(p + (size_t)kk * NR * 2 + (size_t)tail * 2, 0,
               (size_t)(NR - tail) * 2 * sizeof(uint16_t));
}

/* Panels from an atomic counter: each panel is written (first touched) by the worker that
 * packs it; every byte of a panel is written, so dst needs no clearing beforehand. */
static void pack_worker(void *arg, int worker, int workers)
{
    pack_job *j = arg;
    (void)worker;
    (void)workers;
    for (;;) {
        const long p = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (p * NR >= j->N)
            break;
        cpu_bf16_pack_rows(j->dst, j->src, j->dtype, j->N, j->K, (int)p * NR, (int)(p + 1) * NR);
        if ((p + 1) * NR > j->N)
            pack_zero_tail(j->dst, j->N, j->K);
    }
}

void cpu_bf16_pack(uint16_t *dst, const void *src, cpdit_dtype dtype, int N, int K)
{
    pack_job j = {dst, src, dtype, N, K, 0};
    const long panels = (N + NR - 1) / NR;
    cpu_pool_run(panels < GEMM_MAX_THREADS ? (int)panels : GEMM_MAX_THREADS, pack_worker, &j);
}
