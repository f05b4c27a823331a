/* cp_attention_bench.c — time context-parallel attention per variant and grid against the
 * single-rank kernel (see cp_attention_bench.h for the table). */
#include "lib/cp/cp_attention_bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/cp/comm.h"
#include "lib/cp/cp_attention.h"
#include "lib/cp/cp_shard.h"
#include "lib/cp/grid_mpi.h"
#include "kernels/host_runtime.h"

#define BENCH_WHERE "bench attention"
#define BENCH_MAX_VARIANTS 16
#define BENCH_NAME_MAX 32
/* A waiting rank sleeps this long between checks (oversubscribed runs: leave the core to the
 * rank that computes). */
#define BENCH_IDLE_POLL_NS 1000000L
#define BYTES_PER_MB 1e6
#define MS_PER_S 1e3
#define FLOP_PER_GFLOP 1e9
#define PERCENT 100.0

void cp_attention_bench_defaults(cp_attention_bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch = 1;
    o->txt = 512;
    o->img = 1024;
    o->heads = 24;
    o->head_dim = 128;
    o->warmup = 1;
    o->iters = 3;
    o->anything = 1;
    o->sgemm_n = 1024;
}

/* Deterministic values in [-1, 1) from a 64-bit LCG (Knuth's MMIX constants). */
static void fill_random(float *x, size_t n, unsigned long long seed)
{
    unsigned long long s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

/* Barrier that sleeps instead of spinning while other ranks compute. */
static void idle_barrier(MPI_Comm comm)
{
    MPI_Request r;
    int done = 0;
    struct timespec ts = {0, BENCH_IDLE_POLL_NS};
    MPI_Ibarrier(comm, &r);
    for (;;) {
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (done)
            break;
        nanosleep(&ts, NULL);
    }
}

/* The benchmark's table: o->backend, or "cpu". */
static const cpdit_backend *bench_backend(const cp_attention_bench_opts *o)
{
    return o->backend ? o->backend : cpdit_backend_cpu();
}

/* One problem's buffers in be's memory: q (nq), k and v (nkv), out (nq) activations, lse (nl)
 * fp32. */
typedef struct bench_bufs {
    cpdit_buf *q, *k, *v, *out;
    float *lse;
} bench_bufs;

static void bufs_free(const cpdit_backend *be, bench_bufs *b)
{
    be->free(b->q);
    be->free(b->k);
    be->free(b->v);
    be->free(b->out);
    be->free(b->lse);
    memset(b, 0, sizeof *b);
}

/* Allocate b and fill q, k, v with fill_random values (seed, seed+1, seed+2) uploaded as
 * activations. 0, or -1 when out of memory (b freed). Sizes of 0 allocate one element, so
 * that NULL means failure. */
static int bufs_alloc(const cpdit_backend *be, bench_bufs *b, size_t nq, size_t nkv, size_t nl,
                      unsigned long long seed)
{
    const size_t nmax = nq > nkv ? nq : nkv;
    float *host = malloc((nmax ? nmax : 1) * sizeof(float));
    b->q = cpdit_act_alloc(be, nq ? nq : 1);
    b->k = cpdit_act_alloc(be, nkv ? nkv : 1);
    b->v = cpdit_act_alloc(be, nkv ? nkv : 1);
    b->out = cpdit_act_alloc(be, nq ? nq : 1);
    b->lse = be->alloc((nl ? nl : 1) * sizeof(float));
    if (!host || !b->q || !b->k || !b->v || !b->out || !b->lse) {
        free(host);
        bufs_free(be, b);
        return -1;
    }
    cpdit_buf *dst[3] = {b->q, b->k, b->v};
    const size_t n[3] = {nq, nkv, nkv};
    for (int i = 0; i < 3; i++) {
        fill_random(host, n[i], seed + (unsigned long long)i);
        be->upload_act(dst[i], host, n[i]);
    }
    free(host);
    return 0;
}

/* The table's default attention kernel (what cp_attention runs locally). */
static cpdit_status local_attention(const cpdit_backend *be, const bench_bufs *b, int B, int Sq,
                                    int Skv, int H, int D, float scale, cpdit_error *err)
{
    const cpdit_attention_args a = {.B = B, .Sq = Sq, .Skv = Skv, .H = H, .D = D,
                                    .scale = scale};
    cpdit_status st = be->attention_kernels[0]->forward(b->out, b->lse, b->q, b->k, b->v, &a,
                                                        err);
    return st == CPDIT_OK ? be->sync(err) : st;
}

/* Seconds of the fastest timed call of the local kernel over the whole problem, measured on
 * world rank 0 while the others wait; every rank returns the value (negative on failure). */
static double single_rank_seconds(MPI_Comm world, const cp_attention_bench_opts *o, int S)
{
    int rank;
    double best = -1.0;
    MPI_Comm_rank(world, &rank);
    if (rank == 0) {
        const cpdit_backend *be = bench_backend(o);
        size_t n = (size_t)o->batch * S * o->heads * o->head_dim;
        bench_bufs b;
        if (bufs_alloc(be, &b, n, n, (size_t)o->batch * S * o->heads, 1) == 0) {
            float scale = 1.0f / sqrtf((float)o->head_dim);
            cpdit_error e;
            int ok = 1;
            best = INFINITY;
            for (int i = 0; i < o->warmup + o->iters && ok; i++) {
                double t0 = MPI_Wtime();
                ok = local_attention(be, &b, o->batch, S, S, o->heads, o->head_dim, scale,
                                     &e) == CPDIT_OK;
                double dt = MPI_Wtime() - t0;
                if (i >= o->warmup && dt < best)
                    best = dt;
            }
            if (!ok)
                best = -1.0;
            bufs_free(be, &b);
        }
    }
    idle_barrier(world);
    MPI_Bcast(&best, 1, MPI_DOUBLE, 0, world);
    return best;
}

/* This rank's share of the kernel work alone — its len[cp_rank] local queries against the
 * whole sequence's K/V — run by all ranks at once (so the cores are shared as in the CP
 * runs): seconds of the fastest timed call, a call lasting until its slowest rank finishes.
 * The ideal a CP variant can reach on this machine; negative on failure (on every rank). */
static double local_share_seconds(MPI_Comm world, const cp_attention_bench_opts *o, int cp)
{
    int rank, bad = 0, any_bad = 0;
    double best = INFINITY;
    cp_seq_layout layout;
    cpdit_error e;
    MPI_Comm_rank(world, &rank);
    const int cp_rank = rank % cp;
    if (cp_seq_layout_joint(&layout, cp, o->txt, o->img, &e))
        return -1.0;
    const int S = cp_seq_layout_total(&layout), L = layout.len[cp_rank];
    const size_t row = (size_t)o->heads * o->head_dim, nf = (size_t)o->batch * S * row;
    const size_t nl = (size_t)o->batch * L * row;
    const cpdit_backend *be = bench_backend(o);
    bench_bufs b = {NULL, NULL, NULL, NULL, NULL};
    bad = bufs_alloc(be, &b, nl, nf, (size_t)o->batch * L * o->heads, 7u + (unsigned)rank) != 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, world);
    if (!any_bad) {
        const float scale = 1.0f / sqrtf((float)o->head_dim);
        for (int i = 0; i < o->warmup + o->iters; i++) {
            MPI_Barrier(world);
            double t0 = MPI_Wtime();
            if (L > 0 && local_attention(be, &b, o->batch, L, S, o->heads, o->head_dim, scale,
                                         &e) != CPDIT_OK)
                bad = 1;
            double dt = bad ? INFINITY : MPI_Wtime() - t0;
            MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, world);
            if (i >= o->warmup && dt < best)
                best = dt;
        }
    }
    if (b.q)
        bufs_free(be, &b);
    cp_seq_layout_free(&layout);
    return (any_bad || !isfinite(best)) ? -1.0 : best;
}

/* Split a comma list into names; returns the count. */
static int split_variants(const char *list, char names[][BENCH_NAME_MAX], int max)
{
    const char *all = "ring,ring-allgather,ulysses,unified,unified-allgather";
    const char *p = (list && list[0]) ? list : all;
    int n = 0;
    while (*p && n < max) {
        size_t len = strcspn(p, ",");
        if (len > 0 && len < BENCH_NAME_MAX) {
            memcpy(names[n], p, len);
            names[n][len] = '\0';
            n++;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return n;
}

/* In the sweep, the 1D variants run once on their own grid and Unified on the 2D grids. */
static int variant_fits_sweep(const cp_attention_config *cfg, int R, int U)
{
    if (R * U == 1)
        return cfg->variant == CP_ATTN_UNIFIED || cfg->variant == CP_ATTN_AUTO;
    if (cfg->variant == CP_ATTN_RING)
        return U == 1;
    if (cfg->variant == CP_ATTN_ULYSSES)
        return R == 1;
    return R > 1 && U > 1;
}

/* Time one variant on one grid and print its row (rank 0). */
static cpdit_status bench_row(FILE *out, MPI_Comm world, const cp_attention_bench_opts *o,
                              const cp_attention_config *cfg, int R, int U, double t1,
                              double tloc, cpdit_error *err)
{
    cp_grid *g = NULL;
    cp_seq_layout layout;
    int rank;
    const cpdit_backend *be = bench_backend(o);
    MPI_Comm_rank(world, &rank);
    if (cp_grid_create_for(world, 0, R, U, be, &g, err))
        return err->status;
    if (cp_seq_layout_joint(&layout, g->cp_size, o->txt, o->img, err)) {
        cp_grid_destroy(g);
        return err->status;
    }
    const int S = cp_seq_layout_total(&layout), B = o->batch, H = o->heads, D = o->head_dim;
    char gridname[32];
    snprintf(gridname, sizeof gridname, "%dx%d", R, U);
    cpdit_error verr;
    if (cp_attention_validate(cfg, R, U, &layout, B, H, D, &verr) != CPDIT_OK) {
        if (rank == 0 && out)
            fprintf(out, "%-18s %-6s skipped: %s\n", cp_attention_config_name(cfg), gridname,
                    verr.what);
        cp_seq_layout_free(&layout);
        cp_grid_destroy(g);
        return CPDIT_OK;
    }
    const size_t L = (size_t)layout.len[g->cp_rank];
    const size_t n = (size_t)B * L * H * D;
    bench_bufs b = {NULL, NULL, NULL, NULL, NULL};
    int bad = bufs_alloc(be, &b, n, n, (size_t)B * L * H, 1000u + (unsigned)g->world_rank) != 0;
    int any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, world);
    if (any_bad) {
        if (b.q)
            bufs_free(be, &b);
        cp_seq_layout_free(&layout);
        cp_grid_destroy(g);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, BENCH_WHERE, "out of memory");
    }
    const float scale = 1.0f / sqrtf((float)D);
    cpdit_comm *comms[3] = {g->cp, g->ring_comm, g->ulysses_comm};
    cp_attention_ws ws = {{NULL, NULL, 0}, 0.0};
    double tsum = 0.0, best = INFINITY, ksum = 0.0;
    cpdit_status st = CPDIT_OK;
    for (int i = 0; i < o->warmup + o->iters && st == CPDIT_OK; i++) {
        if (i == o->warmup)
            for (int c = 0; c < 3; c++)
                cpdit_comm_reset_counters(comms[c]);
        MPI_Barrier(world);
        double t0 = MPI_Wtime();
        st = cp_attention(cfg, g, &ws, b.out, b.lse, b.q, b.k, b.v, &layout, B, H, D, scale,
                          err);
        if (st == CPDIT_OK)
            st = be->sync(err);
        double dt = MPI_Wtime() - t0, call = dt;
        /* the call lasts until its slowest rank returns */
        MPI_Allreduce(&dt, &call, 1, MPI_DOUBLE, MPI_MAX, world);
        if (i >= o->warmup) {
            tsum += dt;
            ksum += ws.last_kernel_seconds;
            best = call < best ? call : best;
        }
    }
    if (st == CPDIT_OK) {
        double sent = 0.0;
        for (int c = 0; c < 3; c++)
            sent += (double)comms[c]->bytes_sent;
        double mean = tsum / o->iters, mb = sent / o->iters / BYTES_PER_MB;
        double share = tsum > 0 ? ksum / tsum : 0.0, share_avg = 0.0;
        double tmin, tmax, tavg, mbmax;
        MPI_Reduce(&share, &share_avg, 1, MPI_DOUBLE, MPI_SUM, 0, world);
        MPI_Reduce(&mean, &tmin, 1, MPI_DOUBLE, MPI_MIN, 0, world);
        MPI_Reduce(&mean, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, world);
        MPI_Reduce(&mean, &tavg, 1, MPI_DOUBLE, MPI_SUM, 0, world);
        MPI_Reduce(&mb, &mbmax, 1, MPI_DOUBLE, MPI_MAX, 0, world);
        if (rank == 0 && out) {
            int world_size;
            MPI_Comm_size(world, &world_size);
            tavg /= world_size;
            share_avg /= world_size;
            double gflops = cp_attention_flops(B, S, H, D) / best / FLOP_PER_GFLOP;
            double ideal = t1 / (R * U);
            fprintf(out, "%-18s %-6s %9.2f %9.2f %9.2f %9.2f %9.1f %10.2f %8.2f %8.2f %7.1f\n",
                    cp_attention_config_name(cfg), gridname, tmin * MS_PER_S, tavg * MS_PER_S,
                    tmax * MS_PER_S, best * MS_PER_S, gflops, mbmax,
                    t1 > 0 ? best / ideal : NAN, tloc > 0 ? best / tloc : NAN,
                    PERCENT * share_avg);
        }
    }
    bufs_free(be, &b);
    cp_attention_ws_release(&ws);
    cp_seq_layout_free(&layout);
    cp_grid_destroy(g);
    return st;
}

cpdit_status cp_attention_bench(FILE *out, MPI_Comm world, const cp_attention_bench_opts *o,
                                cpdit_error *err)
{
    int rank, N;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &N);
    if (o->batch < 1 || o->heads < 1 || o->head_dim < 1 || o->txt < 0 || o->img < 0 ||
        o->txt + o->img < 1 || o->iters < 1 || o->warmup < 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, BENCH_WHERE,
                               "need batch, heads, head dim, iterations >= 1 and at least one "
                               "token (got B %d, H %d, D %d, text %d, image %d, iters %d)",
                               o->batch, o->heads, o->head_dim, o->txt, o->img, o->iters);
    char names[BENCH_MAX_VARIANTS][BENCH_NAME_MAX];
    cp_attention_config cfgs[BENCH_MAX_VARIANTS];
    int nv = split_variants(o->variants, names, BENCH_MAX_VARIANTS);
    for (int i = 0; i < nv; i++) {
        memset(&cfgs[i], 0, sizeof cfgs[i]);
        cfgs[i].anything = o->anything;
        if (cp_attention_config_parse(names[i], &cfgs[i], err))
            return err->status;
        cfgs[i].backend = bench_backend(o); /* the grids are made for its memory */
    }
    if ((o->ring || o->ulysses) && (o->ring < 1 || o->ulysses < 1))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, BENCH_WHERE,
                               "give both ring and ulysses degrees (>= 1), or neither to sweep "
                               "every grid");
    int dp = 0;
    if (o->ring && cp_grid_resolve(N, 0, o->ring, o->ulysses, &dp, err))
        return err->status;
    const int S = o->txt + o->img;
    double t1 = single_rank_seconds(world, o, S);
    double sgemm = -1.0;
    if (rank == 0 && o->sgemm_n > 0)
        sgemm = cpdit_host_sgemm_gflops(o->sgemm_n, 3);
    idle_barrier(world);
    if (rank == 0 && out) {
        char line[1024];
        double kflops = cp_attention_flops(o->batch, S, o->heads, o->head_dim);
        if (o->build_line && o->build_line[0])
            fprintf(out, "# %s\n", o->build_line);
        fprintf(out, "# BLAS: %s\n", cpdit_host_runtime_describe(line, sizeof line));
        bench_backend(o)->describe(line, sizeof line);
        fprintf(out, "# backend %s (activations %s): %s\n", bench_backend(o)->name,
                cpdit_dtype_name(bench_backend(o)->act_dtype), line);
        fprintf(out,
                "# attention B %d, S %d (text %d + image %d), H %d, D %d: %.2f GFLOP per "
                "call; %d ranks; warm-up %d, timed %d\n",
                o->batch, S, o->txt, o->img, o->heads, o->head_dim, kflops / FLOP_PER_GFLOP, N,
                o->warmup, o->iters);
        const double krate = t1 > 0 ? kflops / t1 / FLOP_PER_GFLOP : 0.0;
        if (t1 > 0)
            fprintf(out, "# single rank, best call (%d kernel threads): %.2f ms, %.1f GFLOP/s",
                    bench_backend(o)->workers(), t1 * MS_PER_S, krate);
        else
            fprintf(out, "# single rank: failed (out of memory?)");
        if (sgemm > 0)
            fprintf(out, "; SGEMM %dx%d %.1f GFLOP/s; kernel at %.0f%% of SGEMM", o->sgemm_n,
                    o->sgemm_n, sgemm, 100.0 * krate / sgemm);
        fprintf(out, "\n");
    }
    /* the in-situ ideal, per CP size (the sweep uses one: N, or ring*ulysses) */
    const int cp_all = o->ring ? o->ring * o->ulysses : N;
    double tloc = local_share_seconds(world, o, cp_all);
    if (rank == 0 && out) {
        fprintf(out,
                "# min/avg/max: per-rank mean time per call over ranks; best: the fastest call "
                "(until its slowest rank returns)\n"
                "# GFLOP/s, ratio and vs_local use best. ratio = best / (single-rank time / "
                "(ring*ulysses)): 1.00 needs a core per rank\n"
                "# vs_local = best / (each rank's own share of the kernel work, all ranks at "
                "once: %.2f ms): 1.00 = no CP overhead\n"
                "# kernel%% = share of each rank's call time spent in the local kernel (average "
                "over ranks); the rest is communication, copies, merges, waiting\n",
                tloc * MS_PER_S);
        fprintf(out, "%-18s %-6s %9s %9s %9s %9s %9s %10s %8s %8s %7s\n", "# variant", "RxU",
                "min_ms", "avg_ms", "max_ms", "best_ms", "GFLOP/s", "MB_sent/rk", "ratio",
                "vs_local", "kernel%");
    }
    for (int cp = 1; cp <= N; cp++) {
        if (N % cp)
            continue;
        for (int R = 1; R <= cp; R++) {
            if (cp % R)
                continue;
            int U = cp / R;
            if (o->ring && (R != o->ring || U != o->ulysses))
                continue;
            if (!o->ring && cp != N)
                continue;
            for (int i = 0; i < nv; i++) {
                if (!o->ring && !variant_fits_sweep(&cfgs[i], R, U))
                    continue;
                if (bench_row(out, world, o, &cfgs[i], R, U, t1, tloc, err))
                    return err->status;
            }
        }
    }
    return CPDIT_OK;
}
