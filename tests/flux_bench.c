/* flux_bench.c — time the FLUX transformer forward on a CP grid, against SGEMM.
 *
 *   mpirun -np N tests/flux_bench --model DIR [--batch B] [--txt T] [--img-h h --img-w w]
 *          [--ring R] [--ulysses U] [--anything] [--reps K] [--sgemm-threads P] [--header]
 *          [--weight-format native|fp32] [--no-weight-sharing] [--backend cpu|cuda]
 *          [--attention-backend KERNEL]
 *          [--weight-memory-mib M [--no-weight-prefetch]]
 *
 * Random inputs of the given sizes (default 1 item, 128 text + 32x32 image tokens) are split
 * as cpdit forward splits them; after one warm-up forward, K timed forwards (default 3) run
 * with a barrier before each. Before that, rank 0 measures SGEMM (n = BENCH_SGEMM_N) with P
 * threads (default 2) while the other ranks wait. One table row:
 *   grid       dp x ring x ulysses
 *   tokens     text + image tokens per item
 *   best_ms avg_ms   the slowest rank's forward time, best and mean over the reps
 *   GFLOP      linear layers + attention (4 S^2 H D per block) of the whole batch
 *   GFLOP/s    GFLOP / best time: the rate of all ranks together
 *   sgemm      SGEMM GFLOP/s measured just before, P threads on rank 0
 *   %sgemm     GFLOP/s / sgemm
 *   bf16mm     the backend's bf16 GEMM (packed bf16 weights, n = BENCH_SGEMM_N), same threads
 *   rss_MiB    peak resident size of the largest rank (counts node-shared pages whole)
 *   pss_MiB    proportional set size of the largest rank after the reps (shared pages split
 *              among the ranks mapping them): the memory a rank really costs
 *   rd_MiB     linear weights read from the files during the timed reps (0 when they stay
 *              made in memory after the first step)
 *   faults     minor page faults per timed forward (getrusage, the largest rank): 0 when
 *              every workspace is reused (steady state)
 * Weights are made once before the first forward and kept (budget unlimited), as a sampler loop
 * would: in the stored dtype (--weight-format native, default) or fp32; in node-shared memory
 * unless --no-weight-sharing. With --weight-memory-mib M below the model's size they are
 * streamed block by block at every forward instead (the next block made on a helper thread
 * unless --no-weight-prefetch); a second line then says, per timed forward, how long making
 * the weights took and how long the forward waited for them.
 * --backend (default cpu): the kernel table the forward runs on; the grid's communicators
 * move that backend's memory (GPU communicators for cuda); --attention-backend its local
 * attention kernel (default: its first; auto as cpdit's). The sgemm/bf16mm columns are the
 * host's rates whatever the backend.
 * Prints to stdout from rank 0; never asserts on time (benchmarks do not gate CI).
 */
#include "config.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kernels/backend.h"
#include "lib/cp/cp_attention.h"
#include "lib/models/flux/flux_shard.h"
#include "lib/models/flux/flux_transformer.h"
#include "lib/cp/grid_mpi.h"
#include "kernels/host_runtime.h"
#include "lib/weights/weight_shared_mpi.h"

#define BENCH_SGEMM_N 1024
#define BENCH_SGEMM_REPS 3

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static float urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static float *rand_buf(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; p && i < n; i++)
        p[i] = urand();
    return p;
}

/* GFLOP/s of the CPU backend's linear with a packed bf16 weight, (n, n) x (n, n). */
static double bf16_gemm_gflops(int n, int reps)
{
    const cpdit_backend *be = cpdit_backend_cpu();
    uint16_t *wb = malloc((size_t)n * n * sizeof(uint16_t));
    float *x = malloc((size_t)n * n * sizeof(float)), *y = malloc((size_t)n * n * sizeof(float));
    cpdit_weight *wt = NULL;
    double best = 1e30;
    if (wb && x && y) {
        for (size_t i = 0; i < (size_t)n * n; i++) {
            wb[i] = cpdit_f32_to_bf16((float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
            x[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
        }
        cpdit_weight_desc d = {.dtype = CPDIT_DTYPE_BF16, .rows = n, .cols = n, .data = wb};
        if (!be->weight_create(&wt, &d, NULL)) {
            /* the "cpu" table: host fp32 arrays are its activations */
            be->linear(cpdit_host_buf(y), n, cpdit_host_buf(x), n, wt, NULL, n, n, n, 0,
                       NULL); /* warm-up */
            for (int r = 0; r < reps; r++) {
                const double t0 = now_s();
                be->linear(cpdit_host_buf(y), n, cpdit_host_buf(x), n, wt, NULL, n, n, n, 0,
                           NULL);
                const double t = now_s() - t0;
                best = t < best ? t : best;
            }
            be->weight_free(wt);
        }
    }
    free(wb);
    free(x);
    free(y);
    return best < 1e30 ? 2.0 * n * n * (double)n / best * 1e-9 : 0.0;
}

int main(int argc, char **argv)
{
    cpdit_host_runtime_init(argc, argv);
    MPI_Init(&argc, &argv);
    cpdit_backends_bind_mpi(); /* each rank to its device (collective, right after MPI_Init) */
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *model_dir = NULL;
    int B = 1, T = 128, h = 32, w = 32, R = 1, U = 1, anything = 0, reps = 3, sgemm_threads = 2;
    int header = 0, no_share = 0, no_prefetch = 0;
    size_t budget = SIZE_MAX;
    const char *wformat = "native", *backend = "cpu", *kernel_name = NULL;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(k, "--anything")) { anything = 1; continue; }
        if (!strcmp(k, "--header")) { header = 1; continue; }
        if (!strcmp(k, "--no-weight-sharing")) { no_share = 1; continue; }
        if (!strcmp(k, "--no-weight-prefetch")) { no_prefetch = 1; continue; }
        if (!strcmp(k, "--model")) model_dir = v;
        else if (!strcmp(k, "--batch")) B = atoi(v);
        else if (!strcmp(k, "--txt")) T = atoi(v);
        else if (!strcmp(k, "--img-h")) h = atoi(v);
        else if (!strcmp(k, "--img-w")) w = atoi(v);
        else if (!strcmp(k, "--ring")) R = atoi(v);
        else if (!strcmp(k, "--ulysses")) U = atoi(v);
        else if (!strcmp(k, "--reps")) reps = atoi(v);
        else if (!strcmp(k, "--sgemm-threads")) sgemm_threads = atoi(v);
        else if (!strcmp(k, "--weight-format")) wformat = v;
        else if (!strcmp(k, "--backend")) backend = v;
        else if (!strcmp(k, "--attention-backend")) kernel_name = v;
        else if (!strcmp(k, "--weight-memory-mib")) budget = (size_t)atoll(v) << 20;
        else {
            if (rank == 0)
                fprintf(stderr, "flux_bench: unknown option %s\n", k);
            MPI_Finalize();
            return 2;
        }
        i++;
    }
    if (!model_dir || B < 1 || T < 0 || h < 1 || w < 1 || reps < 1 ||
        cpdit_weight_format_from_name(wformat) < 0) {
        if (rank == 0)
            fprintf(stderr, "usage: flux_bench --model DIR [--batch B] [--txt T] [--img-h h "
                            "--img-w w] [--ring R] [--ulysses U] [--anything] [--reps K]\n");
        MPI_Finalize();
        return 2;
    }
    const int I = h * w;
    cpdit_error err;
    cpdit_error_clear(&err);
    flux_transformer *m = NULL;
    cp_grid *g = NULL;
    cp_seq_layout layout;
    const cpdit_backend *be = NULL;
    int rc = 1;
    const cpdit_attention_kernel *kernel = NULL;
    if (cpdit_backend_resolve(backend, &be, &err) ||
        cpdit_attention_kernel_find(be, kernel_name, &kernel, &err) ||
        flux_transformer_open(&m, model_dir, &err) ||
        cp_grid_create_for(MPI_COMM_WORLD, 0, R, U, be, &g, &err) ||
        flux_shard_layout(&layout, g->cp_size, T, I, &err)) {
        fprintf(stderr, "flux_bench: %s: %s\n", err.where, err.what);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    flux_transformer_set_weight_cache(m, budget);
    if (no_prefetch)
        flux_transformer_set_weight_prefetch(m, 0);
    flux_transformer_set_weight_format(m,
                                       (cpdit_weight_format)cpdit_weight_format_from_name(wformat));
    weight_sharer *sharer = NULL;
    weight_arena_ops arena;
    if (!no_share) {
        if (weight_sharer_create(&sharer, MPI_COMM_WORLD, &err)) {
            fprintf(stderr, "flux_bench: %s: %s\n", err.where, err.what);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        arena = weight_sharer_arena(sharer);
        flux_transformer_set_weight_arena(m, &arena);
    }
    if (flux_transformer_set_backend(m, be, &err) ||
        flux_transformer_load_weights(m, &err)) {
        fprintf(stderr, "flux_bench: %s: %s\n", err.where, err.what);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const flux_transformer_config *c = flux_transformer_config_of(m);
    int b0, nb;
    flux_shard_batch(B, g->dp, g->dp_index, &b0, &nb);
    const int tl = layout.txt_len[g->cp_rank], il = layout.img_len[g->cp_rank];
    float *hs = rand_buf((size_t)nb * il * c->in_channels);
    float *ehs = rand_buf((size_t)nb * tl * c->joint_attention_dim);
    float *pooled = rand_buf((size_t)nb * c->pooled_projection_dim);
    float *ts = rand_buf((size_t)nb), *gd = rand_buf((size_t)nb);
    float *txt_ids = calloc((size_t)tl * c->n_axes + 1, sizeof(float));
    float *img_ids = calloc((size_t)il * c->n_axes + 1, sizeof(float));
    for (int i = 0; i < il; i++) { /* (0, row, col) of image token img_start + i */
        const int t = layout.img_start[g->cp_rank] + i;
        img_ids[(size_t)i * c->n_axes + 1] = (float)(t / w);
        img_ids[(size_t)i * c->n_axes + 2] = (float)(t % w);
    }
    const int out_dim = c->patch_size * c->patch_size * c->out_channels;
    float *out = malloc(((size_t)nb * il * out_dim + 1) * sizeof(float));
    flux_inputs in = {nb, tl, il, hs, ehs, pooled, ts, c->guidance_embeds ? gd : NULL,
                      txt_ids, img_ids};
    cp_attention_ws ws = {{NULL, NULL, 0}, 0.0};
    flux_cp cp = {g, {CP_ATTN_AUTO, CP_RING_P2P, anything, NULL, kernel}, &layout, &ws};

    /* SGEMM on rank 0 while the others wait */
    double sgemm = 0, bf16mm = 0;
    if (rank == 0) {
        const int saved = cpdit_host_gemm_threads();
        cpdit_host_set_gemm_threads(sgemm_threads);
        sgemm = cpdit_host_sgemm_gflops(BENCH_SGEMM_N, BENCH_SGEMM_REPS);
        bf16mm = bf16_gemm_gflops(BENCH_SGEMM_N, BENCH_SGEMM_REPS);
        cpdit_host_set_gemm_threads(saved);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    double best = 1e30, sum = 0;
    flux_weight_stats ws0;
    memset(&ws0, 0, sizeof ws0);
    long flt0 = 0; /* minor page faults before the timed reps */
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        if (r == 0) {
            flux_transformer_weight_stats(m, &ws0);
            struct rusage r0;
            getrusage(RUSAGE_SELF, &r0);
            flt0 = r0.ru_minflt;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = now_s();
        cpdit_status st = nb > 0 ? flux_transformer_forward(m, be, &cp, &in, out, &err)
                                 : CPDIT_OK;
        double t = now_s() - t0, tmax = 0;
        int bad = st != CPDIT_OK, any_bad = 0;
        MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any_bad) {
            if (bad)
                fprintf(stderr, "flux_bench: rank %d: %s: %s\n", rank, err.where, err.what);
            goto done;
        }
        if (r >= 0) {
            best = tmax < best ? tmax : best;
            sum += tmax;
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long flt = (ru.ru_minflt - flt0) / (reps > 0 ? reps : 1), max_flt = 0;
    MPI_Reduce(&flt, &max_flt, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    long peak = ru.ru_maxrss, max_peak = 0;
    MPI_Reduce(&peak, &max_peak, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    long pss = (long)(weight_process_pss_bytes() >> 10), max_pss = 0;
    MPI_Reduce(&pss, &max_pss, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    flux_weight_stats ws1;
    flux_transformer_weight_stats(m, &ws1);
    double rd = (double)(ws1.bytes_read - ws0.bytes_read), max_rd = 0;
    MPI_Reduce(&rd, &max_rd, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        const long long S = (long long)T + I;
        const double flops =
            flux_transformer_linear_flops(m, B, T, I) +
            (c->num_layers + c->num_single_layers) *
                cp_attention_flops(B, S, c->num_attention_heads, c->attention_head_dim);
        char gd_text[96];
        snprintf(gd_text, sizeof gd_text, "%dx%dx%d%s", g->dp, g->ring, g->ulysses,
                 anything ? "+any" : "");
        if (header)
            printf("%-14s %6s %6s %10s %9s %9s %8s %9s %9s %7s %8s %8s %8s %7s %7s\n",
                   "grid(dpxRxU)", "ranks", "wfmt", "tokens", "best_ms", "avg_ms", "GFLOP",
                   "GFLOP/s", "sgemm", "%sgemm", "bf16mm", "rss_MiB", "pss_MiB", "rd_MiB",
                   "faults");
        const double rate = flops / best * 1e-9;
        printf("%-14s %6d %6s %4d+%-5d %9.1f %9.1f %8.2f %9.1f %9.1f %6.0f%% %8.1f %8.1f %8.1f "
               "%7.1f %7ld\n",
               gd_text, size, wformat, T, I, best * 1e3, sum / reps * 1e3, flops * 1e-9, rate,
               sgemm, sgemm > 0 ? 100.0 * rate / sgemm : 0.0, bf16mm, (double)max_peak / 1024.0,
               (double)max_pss / 1024.0, max_rd / 1048576.0, max_flt);
        if (!ws1.resident)
            printf("# streamed per block (%s): making the weights %.3f s per forward, the "
                   "forward waited %.3f s of it (rank 0)\n",
                   no_prefetch ? "no prefetch" : "next block made ahead",
                   (ws1.create_seconds - ws0.create_seconds) / reps,
                   (ws1.stall_seconds - ws0.stall_seconds) / reps);
        fflush(stdout);
    }
    rc = 0;
done:
    free(hs);
    free(ehs);
    free(pooled);
    free(ts);
    free(gd);
    free(txt_ids);
    free(img_ids);
    free(out);
    cp_seq_layout_free(&layout);
    cp_grid_destroy(g);
    flux_transformer_close(m);
    weight_sharer_destroy(sharer);
    MPI_Finalize();
    return rc;
}
