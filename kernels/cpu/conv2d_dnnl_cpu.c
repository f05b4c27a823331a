/* conv2d_dnnl_cpu.c — the native 3x3 convolution through oneDNN (see conv2d_dnnl_cpu.h). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/conv2d_dnnl_cpu.h"
#include "kernels/cpu/gemm_bf16_cpu.h"

#ifdef CPDIT_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/blas_runtime.h"
#include "kernels/cpu/thread_pool.h"
#endif

enum { ENGINE_AUTO, ENGINE_DNNL, ENGINE_BUILTIN };
static int engine = ENGINE_AUTO;

/* oneDNN is used: built in, and the CPU runs bf16 natively (our GEMM's AVX512-BF16 test). */
static int dnnl_usable(void)
{
#ifdef CPDIT_HAVE_DNNL
    return strcmp(cpu_gemm_bf16_kernel(), "avx512bf16") == 0;
#else
    return 0;
#endif
}

int cpu_conv2d_set_engine(const char *name)
{
    if (!name || !strcmp(name, "auto"))
        engine = ENGINE_AUTO;
    else if (!strcmp(name, "builtin"))
        engine = ENGINE_BUILTIN;
    else if (!strcmp(name, "dnnl") && dnnl_usable())
        engine = ENGINE_DNNL;
    else
        return -1;
    return 0;
}

const char *cpu_conv2d_engine(void)
{
    return engine != ENGINE_BUILTIN && dnnl_usable() ? "dnnl" : "builtin";
}

#ifdef CPDIT_HAVE_DNNL

#define KS 3
#define DNNL_ALIGN 64
#define CONV_DNNL_MIN_ROWS 8  /* a sub-band has at least this many output rows */
#define PACK_PROBE_ROWS 8     /* the band height and width the weights' layout is chosen at */
#define PACK_PROBE_W 64
#define PD_CACHE_SIZE 64

/* One primitive per shape, made with weights "any" (oneDNN's own choice: brgconv at every
 * shape we tried, whereas a layout imposed from another shape can push narrow images onto
 * its slow reference kernel); the weights arrive at execute time, so layers of the same shape
 * share it. */
typedef struct pd_entry {
    int cin, cout, rows, w, bias;
    dnnl_memory_desc_t wmd; /* the weights layout it chose */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
} pd_entry;

static struct {
    pthread_mutex_t lock;
    dnnl_engine_t eng;
    int eng_failed;
    pd_entry e[PD_CACHE_SIZE];
    int n, next; /* entries used; the next to replace when full */
} cache = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, {{0}}, 0, 0};

static size_t round_up(size_t n)
{
    return (n + DNNL_ALIGN - 1) / DNNL_ALIGN * DNNL_ALIGN;
}

/* The CPU engine (made once). Call with the lock held. */
static dnnl_engine_t get_engine(void)
{
    if (!cache.eng && !cache.eng_failed &&
        dnnl_engine_create(&cache.eng, dnnl_cpu, 0) != dnnl_success)
        cache.eng_failed = 1;
    return cache.eng;
}

/* A forward-inference convolution: src (1, cin, rows + 2, w) bf16 NHWC (the halo rows are
 * input: no top/bottom padding), weights wmd (NULL: any), bias f32 or none, dst (1, cout,
 * rows, w) f32 NHWC. NULL when oneDNN has none. */
static dnnl_primitive_desc_t make_pd(dnnl_engine_t eng, int cin, int cout, int rows, int w,
                                     int bias, const dnnl_memory_desc_t *wmd)
{
    const dnnl_dims_t sd = {1, cin, rows + 2, w}, wd = {cout, cin, KS, KS}, bd = {cout},
                      dd = {1, cout, rows, w}, strides = {1, 1}, pl = {0, 1}, pr = {0, 1};
    dnnl_memory_desc_t smd, any_wmd, bmd, dmd;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_bf16, dnnl_nhwc) ||
        dnnl_memory_desc_init_by_tag(&any_wmd, 4, wd, dnnl_bf16, dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_x) ||
        dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, dnnl_nhwc) ||
        dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                           dnnl_convolution_direct, &smd, wmd ? wmd : &any_wmd,
                                           bias ? &bmd : NULL, &dmd, strides, pl, pr) ||
        dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL))
        return NULL;
    return pd;
}

void *cpu_conv2d_dnnl_pack(const void *w, int Cout, int Cin, size_t header)
{
    pthread_mutex_lock(&cache.lock);
    dnnl_engine_t eng = get_engine();
    pthread_mutex_unlock(&cache.lock);
    if (!eng)
        return NULL;
    dnnl_primitive_desc_t pd = make_pd(eng, Cin, Cout, PACK_PROBE_ROWS, PACK_PROBE_W, 1, NULL);
    if (!pd)
        return NULL;
    const dnnl_memory_desc_t wmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_desc_destroy(pd);
    const size_t off = round_up(sizeof wmd), wbytes = dnnl_memory_desc_get_size(&wmd);
    char *block = cpu_alloc(header + off + wbytes);
    if (!block)
        return NULL;
    memcpy(block + header, &wmd, sizeof wmd);
    /* PyTorch's (Cout, Cin, 3, 3) bf16 -> wmd, by a oneDNN reorder (no rounding: bf16 both) */
    const dnnl_dims_t wd = {Cout, Cin, KS, KS};
    dnnl_memory_desc_t user;
    dnnl_memory_t from = NULL, to = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_stream_t s = NULL;
    int ok = dnnl_memory_desc_init_by_tag(&user, 4, wd, dnnl_bf16, dnnl_oihw) == dnnl_success &&
             dnnl_memory_create(&from, &user, eng, (void *)w) == dnnl_success &&
             dnnl_memory_create(&to, &wmd, eng, block + header + off) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&rpd, &user, eng, &wmd, eng, NULL) ==
                 dnnl_success &&
             dnnl_primitive_create(&r, rpd) == dnnl_success &&
             dnnl_stream_create(&s, eng, dnnl_stream_default_flags) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        ok = dnnl_primitive_execute(r, s, 2, args) == dnnl_success &&
             dnnl_stream_wait(s) == dnnl_success;
    }
    dnnl_stream_destroy(s);
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(from);
    dnnl_memory_destroy(to);
    if (!ok) {
        cpu_free(block);
        return NULL;
    }
    return block;
}

size_t cpu_conv2d_dnnl_workspace_bytes(int W, int Cin)
{
    return (size_t)(CONV_DNNL_MIN_ROWS + 2) * W * Cin * sizeof(uint16_t);
}

/* The cached primitive for this shape (made on first use) and, in *wmd, the weights layout it
 * takes; NULL when oneDNN has none. */
static dnnl_primitive_t get_prim(int cin, int cout, int rows, int w, int bias,
                                 dnnl_memory_desc_t *wmd)
{
    dnnl_primitive_t prim = NULL;
    pthread_mutex_lock(&cache.lock);
    for (int i = 0; i < cache.n && !prim; i++) {
        pd_entry *e = &cache.e[i];
        if (e->cin == cin && e->cout == cout && e->rows == rows && e->w == w &&
            e->bias == bias) {
            prim = e->prim;
            *wmd = e->wmd;
        }
    }
    dnnl_engine_t eng = prim ? NULL : get_engine();
    if (!prim && eng) {
        dnnl_primitive_desc_t pd = make_pd(eng, cin, cout, rows, w, bias, NULL);
        if (pd && dnnl_primitive_create(&prim, pd) != dnnl_success)
            prim = NULL;
        if (prim) {
            int slot = cache.n < PD_CACHE_SIZE ? cache.n++ : cache.next++ % PD_CACHE_SIZE;
            pd_entry *e = &cache.e[slot];
            if (e->prim) {
                dnnl_primitive_destroy(e->prim);
                dnnl_primitive_desc_destroy(e->pd);
            }
            *wmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
            *e = (pd_entry){cin, cout, rows, w, bias, *wmd, pd, prim};
        } else {
            dnnl_primitive_desc_destroy(pd);
        }
    }
    pthread_mutex_unlock(&cache.lock);
    return prim;
}

/* dst (layout to, allocated by the caller: dnnl_memory_desc_get_size(to) bytes) = the weights
 * src in layout from. 0 on success. */
static int reorder_weights(dnnl_engine_t eng, dnnl_stream_t s, const dnnl_memory_desc_t *from,
                           const void *src, const dnnl_memory_desc_t *to, void *dst)
{
    dnnl_memory_t a = NULL, b = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    int ok = dnnl_memory_create(&a, from, eng, (void *)src) == dnnl_success &&
             dnnl_memory_create(&b, to, eng, dst) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&rpd, from, eng, to, eng, NULL) ==
                 dnnl_success &&
             dnnl_primitive_create(&r, rpd) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
        ok = dnnl_primitive_execute(r, s, 2, args) == dnnl_success &&
             dnnl_stream_wait(s) == dnnl_success;
    }
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(a);
    dnnl_memory_destroy(b);
    return ok ? 0 : -1;
}

/* dst (n) bf16 = src (n) fp32 rounded to nearest even (as the bf16 GEMM rounds its inputs). */
static void to_bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        u += 0x7fffu + ((u >> 16) & 1u);
        dst[i] = (uint16_t)(u >> 16);
    }
}

cpdit_status cpu_conv2d_dnnl(float *y, const float *x, const void *packed, const float *b,
                             int W, int Cin, int Cout, int r0, int r1, void *ws,
                             size_t ws_bytes, cpdit_error *err)
{
    dnnl_memory_desc_t wmd;
    memcpy(&wmd, packed, sizeof wmd);
    void *wdata = (char *)packed + round_up(sizeof wmd);
    const size_t row_in = (size_t)W * Cin, row_out = (size_t)W * Cout;
    const size_t fit = ws_bytes / (row_in * sizeof(uint16_t));
    if (fit < 3)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "kernels/cpu",
                               "conv2d (oneDNN): workspace of %zu bytes below one row", ws_bytes);
    const int band = (int)(fit - 2);
    omp_set_num_threads(cpu_pool_size());
    dnnl_stream_t s = NULL;
    pthread_mutex_lock(&cache.lock);
    dnnl_engine_t eng = get_engine();
    pthread_mutex_unlock(&cache.lock);
    if (!eng || dnnl_stream_create(&s, eng, dnnl_stream_default_flags) != dnnl_success)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "kernels/cpu",
                               "conv2d (oneDNN): no CPU engine or stream");
    cpdit_status st = CPDIT_OK;
    void *other = NULL; /* the weights in another layout, for shapes whose primitive wants it */
    dnnl_memory_desc_t other_md;
    for (int a = r0; a < r1 && !st; a += band) {
        const int n = r1 - a < band ? r1 - a : band;
        dnnl_memory_desc_t pmd;
        dnnl_primitive_t prim = get_prim(Cin, Cout, n, W, b != NULL, &pmd);
        if (!prim) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "kernels/cpu",
                                 "conv2d (oneDNN): no convolution for Cin %d Cout %d, %d x %d",
                                 Cin, Cout, n, W);
            break;
        }
        void *wuse = wdata;
        if (!dnnl_memory_desc_equal(&pmd, &wmd)) { /* narrow images: reorder this call */
            if (!other || !dnnl_memory_desc_equal(&pmd, &other_md)) {
                free(other);
                other = malloc(dnnl_memory_desc_get_size(&pmd));
                other_md = pmd;
                if (!other || reorder_weights(eng, s, &wmd, wdata, &pmd, other)) {
                    st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "kernels/cpu",
                                         "conv2d (oneDNN): reordering the weights failed");
                    break;
                }
            }
            wuse = other;
        }
        to_bf16(ws, x + (ptrdiff_t)(a - 1) * (ptrdiff_t)row_in, (size_t)(n + 2) * row_in);
        const dnnl_dims_t sd = {1, Cin, n + 2, W}, bd = {Cout}, dd = {1, Cout, n, W};
        dnnl_memory_desc_t smd, bmd, dmd;
        dnnl_memory_t ms = NULL, mw = NULL, mb = NULL, md = NULL;
        int ok = dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_bf16, dnnl_nhwc) == 0 &&
                 dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_x) == 0 &&
                 dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, dnnl_nhwc) == 0 &&
                 dnnl_memory_create(&ms, &smd, eng, ws) == 0 &&
                 dnnl_memory_create(&mw, &pmd, eng, wuse) == 0 &&
                 (!b || dnnl_memory_create(&mb, &bmd, eng, (void *)b) == 0) &&
                 dnnl_memory_create(&md, &dmd, eng, y + (size_t)a * row_out) == 0;
        if (ok) {
            dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ms},
                                       {DNNL_ARG_WEIGHTS, mw},
                                       {DNNL_ARG_DST, md},
                                       {DNNL_ARG_BIAS, mb}};
            ok = dnnl_primitive_execute(prim, s, b ? 4 : 3, args) == 0 &&
                 dnnl_stream_wait(s) == 0;
        }
        dnnl_memory_destroy(ms);
        dnnl_memory_destroy(mw);
        dnnl_memory_destroy(mb);
        dnnl_memory_destroy(md);
        if (!ok)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "kernels/cpu",
                                 "conv2d (oneDNN): executing the convolution failed");
    }
    free(other);
    dnnl_stream_destroy(s);
    return st;
}

#endif /* CPDIT_HAVE_DNNL */
