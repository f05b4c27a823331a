/* vae_conv_onednn.c — FLUX.1's VAE decoder 3x3 convolutions, one thread: oneDNN next to the CPU
 * backend's own conv2d (kernels/backend.h, both weight formats), same shapes, same run, with
 * the same-run SGEMM rate. A benchmark (issue 14: "measure oneDNN against your own kernels and
 * choose"), not a test: it prints a table and gates nothing. Built only when configure found
 * oneDNN (Debian libdnnl-dev; build-aux/install-deps.sh --bench).
 *
 *   tests/bench/vae_conv_onednn [IMAGE_SIZE [ITERS]]      defaults 256 and 2
 *
 * Shapes: every distinct 3x3 convolution of the decoder for an IMAGE_SIZE² image (latent
 * IMAGE_SIZE/8), with how many times one decode runs it (block_out_channels 128/256/512/512,
 * 2 layers per block: 3 resnets per up block, 2 in the mid block). Columns, GFLOP/s (best of
 * ITERS after one warm-up, the methods interleaved; oneDNN: primitive and weight reorder made
 * once, only execute timed):
 *   ours_f32   conv2d, CPDIT_WEIGHT_F32 (NHWC, blocked im2col + SGEMM)
 *   ours_bf16  conv2d, CPDIT_WEIGHT_NATIVE of the weights stored as bf16, engine "builtin"
 *              (bf16 GEMM on the same blocks; AVX512-BF16 only)
 *   table_dnnl the same with engine "dnnl" (kernels/cpu/conv2d_dnnl_cpu.h: what the table runs
 *              in a build with oneDNN, bf16 conversion of the input included)
 *   dnnl_f32_nhwc / dnnl_bf16_nhwc   oneDNN, src and dst NHWC (our layout), weights "any"
 *   dnnl_f32_any / dnnl_bf16_any     oneDNN, src, weights and dst "any" (its blocked layout;
 *                                    a decode would also pay reorders, not timed here)
 * bf16 oneDNN: src bf16 (converted before timing), weights bf16, fp32 dst and bias; ours_bf16
 * rounds its inputs inside the timed im2col. err_* = max |a - ours_f32| / max |ours_f32|;
 * err_tbl = table_dnnl against ours_bf16 (same rounding: only the sum order differs).
 * The last row ("decode") weights each shape by its count: the 3x3 convolutions of one decode.
 */
#include "config.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cpu/conv2d_dnnl_cpu.h"
#include "kernels/host_runtime.h"

#define SGEMM_N 1024
#define SGEMM_REPS 3
#define KSIZE 3
#define N_SHAPES 10
#define N_METHODS 7
#define SEED 12345u

enum { OURS_F32, OURS_BF16, DNNL_F32_NHWC, DNNL_F32_ANY, DNNL_BF16_NHWC, DNNL_BF16_ANY,
       TABLE_DNNL };
static const char *const method_names[N_METHODS] = {"ours_f32", "ours_bf16", "dnnl_f32_nhwc",
                                                    "dnnl_f32_any", "dnnl_bf16_nhwc",
                                                    "dnnl_bf16_any", "table_dnnl"};

/* One 3x3 convolution of the decoder: Cin -> Cout at (res x res), run `count` times a decode;
 * res_div: the image size divided by the resolution. */
typedef struct conv_shape {
    const char *where;
    int cin, cout, res_div, count;
} conv_shape;

static const conv_shape shapes[N_SHAPES] = {
    {"conv_in", 16, 512, 8, 1},        {"mid+up0", 512, 512, 8, 10},
    {"up0.up+up1", 512, 512, 4, 7},    {"up1.up", 512, 512, 2, 1},
    {"up2.r0.conv1", 512, 256, 2, 1},  {"up2", 256, 256, 2, 5},
    {"up2.up", 256, 256, 1, 1},        {"up3.r0.conv1", 256, 128, 1, 1},
    {"up3", 128, 128, 1, 5},           {"conv_out", 128, 3, 1, 1},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned rng_state = SEED;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / (float)(1u << 23) - 1.0f;
}

#define DNNL_TRY(call)                                                                   \
    do {                                                                                 \
        dnnl_status_t s_ = (call);                                                       \
        if (s_ != dnnl_success) {                                                        \
            fprintf(stderr, "vae_conv_onednn: %s: oneDNN status %d\n", #call, (int)s_); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* dst memory (allocated by oneDNN, layout dmd) = reorder of src memory. */
static void reorder(dnnl_engine_t eng, dnnl_stream_t strm, dnnl_memory_t src, dnnl_memory_t dst)
{
    const dnnl_memory_desc_t *smd, *dmd;
    DNNL_TRY(dnnl_memory_get_memory_desc(src, &smd));
    DNNL_TRY(dnnl_memory_get_memory_desc(dst, &dmd));
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t r;
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, smd, eng, dmd, eng, NULL));
    DNNL_TRY(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    DNNL_TRY(dnnl_primitive_execute(r, strm, 2, args));
    DNNL_TRY(dnnl_stream_wait(strm));
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
}

/* One method prepared for one shape: oneDNN's primitive with its memories (weights reordered
 * once), or our packed weights with a workspace. run() executes it once. */
typedef struct method_state {
    int dnnl;
    /* oneDNN */
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t conv;
    dnnl_memory_t us, uw, ub, ud, cs, cw, cdst;
    /* ours */
    const cpdit_backend *be;
    float *wp, *y;
    const float *x_halo, *b;
    void *ws;
    int H, W, Cin, Cout;
} method_state;

/* oneDNN convolution of x (H, W, Cin) NHWC fp32 with w (Cout, Cin, 3, 3), bias b, into
 * y (H, W, Cout) NHWC fp32 (written by method_finish); impl: its implementation's name. */
static void dnnl_prepare(method_state *ms, dnnl_engine_t eng, dnnl_stream_t strm, int bf16,
                         int any, float *y, const float *x, const float *w, const float *b,
                         int H, int W, int Cin, int Cout, char *impl, size_t impl_size)
{
    memset(ms, 0, sizeof *ms);
    ms->dnnl = 1;
    ms->eng = eng;
    ms->strm = strm;
    const dnnl_dims_t sdims = {1, Cin, H, W}, wdims = {Cout, Cin, KSIZE, KSIZE}, bdims = {Cout},
                      ddims = {1, Cout, H, W}, strides = {1, 1}, pad = {KSIZE / 2, KSIZE / 2};
    const dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32;
    const dnnl_format_tag_t act_tag = any ? dnnl_format_tag_any : dnnl_nhwc;
    dnnl_memory_desc_t smd, wmd, bmd, dmd, user_smd, user_wmd, user_dmd;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&smd, 4, sdims, dt, act_tag));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&wmd, 4, wdims, dt, dnnl_format_tag_any));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&bmd, 1, bdims, dnnl_f32, dnnl_x));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&dmd, 4, ddims, dnnl_f32, act_tag));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&user_smd, 4, sdims, dnnl_f32, dnnl_nhwc));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&user_wmd, 4, wdims, dnnl_f32, dnnl_oihw));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&user_dmd, 4, ddims, dnnl_f32, dnnl_nhwc));
    dnnl_convolution_desc_t cd;
    DNNL_TRY(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                dnnl_convolution_direct, &smd, &wmd, &bmd,
                                                &dmd, strides, pad, pad));
    DNNL_TRY(dnnl_primitive_desc_create(&ms->pd, &cd, NULL, eng, NULL));
    const char *name = NULL;
    DNNL_TRY(dnnl_primitive_desc_query(ms->pd, dnnl_query_impl_info_str, 0, &name));
    snprintf(impl, impl_size, "%s", name ? name : "?");
    DNNL_TRY(dnnl_memory_create(&ms->us, &user_smd, eng, (void *)x));
    DNNL_TRY(dnnl_memory_create(&ms->uw, &user_wmd, eng, (void *)w));
    DNNL_TRY(dnnl_memory_create(&ms->ub, &bmd, eng, (void *)b));
    DNNL_TRY(dnnl_memory_create(&ms->ud, &user_dmd, eng, y));
    DNNL_TRY(dnnl_memory_create(&ms->cs, dnnl_primitive_desc_query_md(ms->pd, dnnl_query_src_md,
                                                                      0),
                                eng, DNNL_MEMORY_ALLOCATE));
    DNNL_TRY(dnnl_memory_create(&ms->cw,
                                dnnl_primitive_desc_query_md(ms->pd, dnnl_query_weights_md, 0),
                                eng, DNNL_MEMORY_ALLOCATE));
    DNNL_TRY(dnnl_memory_create(&ms->cdst,
                                dnnl_primitive_desc_query_md(ms->pd, dnnl_query_dst_md, 0), eng,
                                DNNL_MEMORY_ALLOCATE));
    reorder(eng, strm, ms->us, ms->cs);
    reorder(eng, strm, ms->uw, ms->cw);
    DNNL_TRY(dnnl_primitive_create(&ms->conv, ms->pd));
}

/* The CPU backend's conv2d of x (H, W, Cin) into y (H, W, Cout) with weights packed in fmt
 * (native without AVX512-BF16 packs fp32). */
static void ours_prepare(method_state *ms, const cpdit_backend *be, cpdit_weight_format fmt,
                         float *y, const float *x_halo, const float *w, const float *b, int H,
                         int W, int Cin, int Cout)
{
    memset(ms, 0, sizeof *ms);
    ms->be = be;
    /* native: the weights as a bf16 checkpoint stores them (bf16 stays bf16 in the pack) */
    const size_t nw = (size_t)Cout * Cin * KSIZE * KSIZE;
    uint16_t *wb = fmt == CPDIT_WEIGHT_NATIVE ? malloc(nw * sizeof *wb) : NULL;
    if (wb && cpdit_dtype_from_f32(wb, CPDIT_DTYPE_BF16, w, nw, NULL) != CPDIT_OK) {
        free(wb);
        wb = NULL;
    }
    ms->wp = wb ? be->conv2d_pack_stored(wb, CPDIT_DTYPE_BF16, Cout, Cin, KSIZE, fmt)
                : be->conv2d_pack_stored(w, CPDIT_DTYPE_F32, Cout, Cin, KSIZE, fmt);
    free(wb);
    ms->ws = be->alloc(be->conv2d_workspace_bytes(W, Cin, KSIZE));
    if (!ms->wp || !ms->ws) {
        fprintf(stderr, "vae_conv_onednn: out of memory\n");
        exit(1);
    }
    ms->y = y, ms->x_halo = x_halo, ms->b = b;
    ms->H = H, ms->W = W, ms->Cin = Cin, ms->Cout = Cout;
}

/* One execution; returns its wall time (s). */
static double method_run(method_state *ms)
{
    const double t0 = now_s();
    if (ms->dnnl) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ms->cs},
                                   {DNNL_ARG_WEIGHTS, ms->cw},
                                   {DNNL_ARG_BIAS, ms->ub},
                                   {DNNL_ARG_DST, ms->cdst}};
        DNNL_TRY(dnnl_primitive_execute(ms->conv, ms->strm, 4, args));
        DNNL_TRY(dnnl_stream_wait(ms->strm));
    } else {
        cpdit_error err;
        cpdit_error_clear(&err);
        /* the "cpu" table: host fp32 arrays are its activations */
        if (ms->be->conv2d(cpdit_host_buf(ms->y), cpdit_host_buf(ms->x_halo), ms->wp, ms->b,
                           ms->W, ms->Cin, ms->Cout, KSIZE, 0, ms->H, ms->ws, &err) != CPDIT_OK) {
            fprintf(stderr, "vae_conv_onednn: conv2d: %s\n", err.what);
            exit(1);
        }
    }
    return now_s() - t0;
}

/* Write the output (oneDNN: reorder into y) and release everything. */
static void method_finish(method_state *ms)
{
    if (ms->dnnl) {
        reorder(ms->eng, ms->strm, ms->cdst, ms->ud);
        dnnl_primitive_destroy(ms->conv);
        dnnl_memory_destroy(ms->us);
        dnnl_memory_destroy(ms->uw);
        dnnl_memory_destroy(ms->ub);
        dnnl_memory_destroy(ms->ud);
        dnnl_memory_destroy(ms->cs);
        dnnl_memory_destroy(ms->cw);
        dnnl_memory_destroy(ms->cdst);
        dnnl_primitive_desc_destroy(ms->pd);
    } else {
        ms->be->free(ms->ws);
        ms->be->free(ms->wp);
    }
}

/* max |a - ref| / max |ref| over n values. */
static double rel_err(const float *a, const float *ref, size_t n)
{
    double dmax = 0.0, rmax = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - ref[i]), r = fabs((double)ref[i]);
        dmax = d > dmax ? d : dmax;
        rmax = r > rmax ? r : rmax;
    }
    return rmax > 0.0 ? dmax / rmax : dmax;
}

int main(int argc, char **argv)
{
    cpdit_host_runtime_init(argc, argv);
    const int size = argc > 1 ? atoi(argv[1]) : 256;
    const int iters = argc > 2 ? atoi(argv[2]) : 2;
    if (size < 8 || size % 8 || iters < 1) {
        fprintf(stderr, "usage: %s [IMAGE_SIZE (multiple of 8) [ITERS >= 1]]\n", argv[0]);
        return 2;
    }
    cpdit_host_set_gemm_threads(1);
    omp_set_num_threads(1);
    const cpdit_backend *be = cpdit_backend_cpu();
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    DNNL_TRY(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DNNL_TRY(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    const dnnl_version_t *v = dnnl_version();
    char rt[256];
    const double sgemm = cpdit_host_sgemm_gflops(SGEMM_N, SGEMM_REPS);
    printf("# FLUX.1 VAE decoder 3x3 convolutions at %dx%d (latent %dx%d), 1 thread; %s; "
           "oneDNN %d.%d.%d (%s); SGEMM n=%d same run: %.1f GFLOP/s\n",
           size, size, size / 8, size / 8, cpdit_host_runtime_describe(rt, sizeof rt), v->major,
           v->minor, v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime",
           SGEMM_N, sgemm);
    printf("# GFLOP/s per method (best of %d); err_* = max|x - ours_f32| / max|ours_f32|\n",
           iters);
    printf("%-13s %4s %4s %5s %3s %7s", "conv", "Cin", "Cout", "res", "n", "GFLOP");
    for (int m = 0; m < N_METHODS; m++)
        printf(" %14s", method_names[m]);
    printf(" %9s %9s %9s %9s\n", "err_ob16", "err_df32", "err_db16", "err_tbl");
    double tot_flop = 0.0, tot_t[N_METHODS] = {0};
    char impls[N_SHAPES][N_METHODS][64];
    for (int s = 0; s < N_SHAPES; s++) {
        const conv_shape *sh = &shapes[s];
        const int H = size / sh->res_div, W = H, Cin = sh->cin, Cout = sh->cout;
        const size_t nx = (size_t)H * W * Cin, ny = (size_t)H * W * Cout, row = (size_t)W * Cin;
        float *xh = calloc(nx + 2 * row, sizeof *xh); /* zero halo rows above and below */
        float *w = malloc((size_t)Cout * Cin * KSIZE * KSIZE * sizeof *w);
        float *b = malloc((size_t)Cout * sizeof *b);
        float *y[N_METHODS];
        for (int m = 0; m < N_METHODS; m++)
            y[m] = malloc(ny * sizeof *y[m]);
        if (!xh || !w || !b) {
            fprintf(stderr, "vae_conv_onednn: out of memory\n");
            return 1;
        }
        float *x = xh + row;
        const float wscale = 1.0f / sqrtf((float)(Cin * KSIZE * KSIZE));
        for (size_t i = 0; i < nx; i++)
            x[i] = frand();
        for (size_t i = 0; i < (size_t)Cout * Cin * KSIZE * KSIZE; i++)
            w[i] = frand() * wscale;
        for (int i = 0; i < Cout; i++)
            b[i] = 0.1f * frand();
        const double flop = 2.0 * KSIZE * KSIZE * Cin * (double)Cout * H * W;
        method_state ms[N_METHODS];
        ours_prepare(&ms[OURS_F32], be, CPDIT_WEIGHT_F32, y[OURS_F32], x, w, b, H, W, Cin, Cout);
        cpu_conv2d_set_engine("builtin");
        ours_prepare(&ms[OURS_BF16], be, CPDIT_WEIGHT_NATIVE, y[OURS_BF16], x, w, b, H, W, Cin,
                     Cout);
        cpu_conv2d_set_engine("dnnl");
        ours_prepare(&ms[TABLE_DNNL], be, CPDIT_WEIGHT_NATIVE, y[TABLE_DNNL], x, w, b, H, W,
                     Cin, Cout);
        cpu_conv2d_set_engine("auto");
        snprintf(impls[s][TABLE_DNNL], 64, "table:%s", cpu_conv2d_engine());
        snprintf(impls[s][OURS_F32], 64, "im2col+sgemm");
        snprintf(impls[s][OURS_BF16], 64, "im2col+gemm_bf16");
        for (int m = DNNL_F32_NHWC; m <= DNNL_BF16_ANY; m++) {
            const int bf16 = m == DNNL_BF16_NHWC || m == DNNL_BF16_ANY;
            const int any = m == DNNL_F32_ANY || m == DNNL_BF16_ANY;
            dnnl_prepare(&ms[m], eng, strm, bf16, any, y[m], x, w, b, H, W, Cin, Cout,
                         impls[s][m], sizeof impls[s][m]);
        }
        /* interleaved: iteration 0 warms every method up, then each iteration runs each
         * method once, so that a burst of load on the shared machine hits all of them */
        double t[N_METHODS];
        for (int m = 0; m < N_METHODS; m++)
            t[m] = 1e300;
        for (int it = 0; it <= iters; it++)
            for (int m = 0; m < N_METHODS; m++) {
                const double tm = method_run(&ms[m]);
                if (it > 0 && tm < t[m])
                    t[m] = tm;
            }
        for (int m = 0; m < N_METHODS; m++)
            method_finish(&ms[m]);
        printf("%-13s %4d %4d %5d %3d %7.2f", sh->where, Cin, Cout, H, sh->count, flop * 1e-9);
        for (int m = 0; m < N_METHODS; m++) {
            printf(" %14.1f", flop / t[m] * 1e-9);
            tot_t[m] += sh->count * t[m];
        }
        tot_flop += sh->count * flop;
        printf(" %9.1e %9.1e %9.1e %9.1e\n", rel_err(y[OURS_BF16], y[OURS_F32], ny),
               rel_err(y[DNNL_F32_NHWC], y[OURS_F32], ny),
               rel_err(y[DNNL_BF16_NHWC], y[OURS_F32], ny),
               rel_err(y[TABLE_DNNL], y[OURS_BF16], ny));
        fflush(stdout);
        for (int m = 0; m < N_METHODS; m++)
            free(y[m]);
        free(xh);
        free(w);
        free(b);
    }
    printf("%-13s %4s %4s %5s %3s %7.1f", "decode", "", "", "", "", tot_flop * 1e-9);
    for (int m = 0; m < N_METHODS; m++)
        printf(" %14.1f", tot_flop / tot_t[m] * 1e-9);
    printf("\n%-13s %4s %4s %5s %3s %7s", "%SGEMM", "", "", "", "", "");
    for (int m = 0; m < N_METHODS; m++)
        printf(" %13.0f%%", 100.0 * tot_flop / tot_t[m] * 1e-9 / sgemm);
    printf("\n# decode 3x3 conv time (s): ");
    for (int m = 0; m < N_METHODS; m++)
        printf("%s %.2f%s", method_names[m], tot_t[m], m + 1 < N_METHODS ? ", " : "\n");
    printf("# implementations (shape mid+up0):");
    for (int m = 0; m < N_METHODS; m++)
        printf(" %s=%s", method_names[m], impls[1][m]);
    printf("\n");
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
    return 0;
}
