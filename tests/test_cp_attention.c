/* test_cp_attention.c — every context-parallel attention variant on every grid that fits the
 * world, against single-rank attention over the whole sequence.
 *
 * Run under mpirun (tests/cp_attention.sh, several rank counts). Every rank builds the same
 * full q, k, v (B, S, H, D) from a fixed seed; the reference output and LSE over the whole
 * sequence (attention_cpu_reference, double accumulation) are computed once per shape, split
 * over the ranks and all-gathered. Then for every grid ring x ulysses dividing the world (dp =
 * the rest), every shape, every variant (ring, ring-allgather, ulysses, unified,
 * unified-allgather) and anything off / on, each rank takes its local tokens (joint text +
 * image sharding, cp_shard.h), calls cp_attention and compares its local output and LSE with
 * its slice of the reference:
 *     max |out - ref| / max |ref| <= TOL   (the same for the LSE)
 * Where a configuration cannot work in strict mode (uneven lengths, more ranks than tokens,
 * heads that do not divide the Ulysses degree) the expected verdict is worked out here from
 * the rules, independently of the library, and the call must fail with CPDIT_ERR_INPUT and a
 * message naming --anything.
 * Extra passes: lse = NULL, the chunked communicator path (tiny MPI element limit), and ranks
 * that disagree on the shapes (an error on all ranks, not a hang).
 */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm_mpi.h"
#include "lib/cp/cp_attention.h"
#include "lib/cp/cp_shard.h"
#include "lib/cp/grid_mpi.h"
#include "kernels/cpu/attention_cpu.h"
#include "tests/test_util.h"

#define TOL 1e-5
/* Element limit per MPI call in the chunked pass (prime, so chunks do not line up with rows). */
#define CHUNK_SMALL 97

typedef struct shape {
    int B, txt, img, H, D;
} shape;

/* Batch 1 and 2; heads 1, 2, 3, 5, 6, 7, 8, 12, 24; head dims 16, 64, 128; lengths prime,
 * smaller than the rank count, joint text + image with ranks that hold no text, and long
 * enough for the ring to compute its blocks in several chunks. */
static const shape shapes[] = {
    {1, 0, 16, 8, 16},   /* even everywhere up to 8 ranks */
    {2, 0, 13, 6, 64},   /* prime length; 6 heads over 4 = 2,2,1,1 */
    {1, 7, 24, 24, 128}, /* 7 text tokens: on 8 ranks one rank has no text */
    {2, 3, 5, 5, 16},    /* 8 tokens on 8 ranks split unevenly: ranks with 0 tokens */
    {1, 0, 7, 3, 64},    /* fewer tokens than 8 ranks; fewer heads than 4 or 8 ranks */
    {1, 0, 32, 1, 128},  /* one head */
    {2, 8, 56, 7, 16},   /* even length, prime head count */
    {1, 0, 1, 2, 16},    /* a single token */
    {2, 16, 48, 24, 64}, /* fully even */
    {1, 5, 37, 12, 128}, /* 42 tokens */
    {2, 100, 1000, 2, 16}, /* local blocks above the ring's 256-row chunk: several chunks */
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static const char *variant_names[] = {"ring", "ring-allgather", "ulysses", "unified",
                                      "unified-allgather"};
#define NVARIANTS ((int)(sizeof variant_names / sizeof variant_names[0]))

typedef struct full_case {
    float *q, *k, *v, *out, *lse; /* (B, S, H, D) and (B, S, H) */
} full_case;

static int world_rank, world_size;
static long cases_run, cases_refused;
static double worst_out, worst_lse; /* largest relative errors seen, for the summary */

/* Deterministic values in [-2, 2) (a 64-bit LCG; larger spread than [-1, 1) so the softmax is
 * not flat). */
static void fill(float *x, size_t n, unsigned long long seed)
{
    unsigned long long s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 4.0 - 2.0);
    }
}

/* Reference over the whole sequence: rank r computes rows (b, s) with (b*S + s) % world == r,
 * one kernel call per row, then everyone sums (rows not computed are zero). */
static void build_case(const shape *sh, int idx, full_case *fc)
{
    const int S = sh->txt + sh->img, B = sh->B, H = sh->H, D = sh->D;
    const size_t row = (size_t)H * D, n = (size_t)B * S * row, nl = (size_t)B * S * H;
    fc->q = malloc(n * sizeof(float));
    fc->k = malloc(n * sizeof(float));
    fc->v = malloc(n * sizeof(float));
    fc->out = calloc(n, sizeof(float));
    fc->lse = calloc(nl, sizeof(float));
    fill(fc->q, n, 3 * (unsigned)idx + 1);
    fill(fc->k, n, 3 * (unsigned)idx + 2);
    fill(fc->v, n, 3 * (unsigned)idx + 3);
    const float scale = 1.0f / sqrtf((float)D);
    cpdit_error e;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            if ((b * S + s) % world_size != world_rank)
                continue;
            size_t tok = (size_t)b * S + s;
            CHECK(attention_cpu_reference(fc->out + tok * row, fc->lse + tok * H,
                                          fc->q + tok * row, fc->k + (size_t)b * S * row,
                                          fc->v + (size_t)b * S * row, 1, 1, S, H, D, scale,
                                          &e) == CPDIT_OK);
        }
    MPI_Allreduce(MPI_IN_PLACE, fc->out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, fc->lse, (int)nl, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static void free_case(full_case *fc)
{
    free(fc->q);
    free(fc->k);
    free(fc->v);
    free(fc->out);
    free(fc->lse);
}

/* max |a - b| / max |b| over n values (0 when both are empty). */
static double rel_err(const float *a, const float *b, size_t n)
{
    double md = 0.0, mb = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= md)) /* also catches NaN */
            md = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > mb)
            mb = fabs((double)b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* The strict-mode rules, restated independently of cp_attention_validate. */
static int expect_ok(const cp_attention_config *cfg, int R, int U, const cp_seq_layout *l,
                     int H)
{
    if (cfg->anything)
        return 1;
    const int n = R * U, total = cp_seq_layout_total(l);
    if (total < n)
        return 0;
    for (int r = 0; r < n; r++)
        if (l->len[r] != total / n || total % n)
            return 0;
    const int uly = cfg->variant == CP_ATTN_RING ? 1 : cfg->variant == CP_ATTN_ULYSSES ? n : U;
    return H % uly == 0;
}

/* One call and its checks. lse_null: pass lse = NULL and check the output only. */
static void run_one(const cp_grid *g, const cp_attention_config *cfg, const shape *sh,
                    const full_case *fc, const cp_seq_layout *l, int lse_null, const char *tag)
{
    const int B = sh->B, H = sh->H, D = sh->D, L = l->len[g->cp_rank];
    const size_t row = (size_t)H * D, n = (size_t)B * L * row, nl = (size_t)B * L * H;
    float *q = NULL, *k = NULL, *v = NULL, *out = NULL, *lse = NULL, *ro = NULL, *rl = NULL;
    if (L > 0) { /* a rank without tokens passes NULL buffers */
        q = malloc(n * sizeof(float));
        k = malloc(n * sizeof(float));
        v = malloc(n * sizeof(float));
        out = malloc(n * sizeof(float));
        lse = malloc(nl * sizeof(float));
        ro = malloc(n * sizeof(float));
        rl = malloc(nl * sizeof(float));
        cp_shard_take(q, fc->q, l, g->cp_rank, B, row);
        cp_shard_take(k, fc->k, l, g->cp_rank, B, row);
        cp_shard_take(v, fc->v, l, g->cp_rank, B, row);
        cp_shard_take(ro, fc->out, l, g->cp_rank, B, row);
        cp_shard_take(rl, fc->lse, l, g->cp_rank, B, H);
        for (size_t i = 0; i < n; i++)
            out[i] = NAN; /* every element must be written */
        for (size_t i = 0; i < nl; i++)
            lse[i] = NAN;
    }
    cpdit_error e;
    cpdit_error_clear(&e);
    const int want = expect_ok(cfg, g->ring, g->ulysses, l, H);
    cpdit_status st = cp_attention(cfg, g, NULL, out, lse_null ? NULL : lse, q, k, v, l, B, H, D,
                                   1.0f / sqrtf((float)D), &e);
    const char *name = cp_attention_config_name(cfg);
    if (want) {
        cases_run++;
        CHECK_MSG(st == CPDIT_OK, "%s %s %dx%d B%d txt%d img%d H%d D%d anything %d: %s", tag,
                  name, g->ring, g->ulysses, B, sh->txt, sh->img, H, D, cfg->anything, e.what);
        if (st == CPDIT_OK && L > 0) {
            double eo = rel_err(out, ro, n);
            double el = lse_null ? 0.0 : rel_err(lse, rl, nl);
            worst_out = eo > worst_out ? eo : worst_out;
            worst_lse = el > worst_lse ? el : worst_lse;
            CHECK_MSG(eo <= TOL && el <= TOL,
                      "%s %s %dx%d (dp %d) rank %d B%d txt%d img%d H%d D%d anything %d: "
                      "out err %.3g lse err %.3g",
                      tag, name, g->ring, g->ulysses, g->dp, g->world_rank, B, sh->txt,
                      sh->img, H, D, cfg->anything, eo, el);
        }
    } else {
        cases_refused++;
        CHECK_MSG(st == CPDIT_ERR_INPUT, "%s %s %dx%d B%d txt%d img%d H%d: expected a refusal",
                  tag, name, g->ring, g->ulysses, B, sh->txt, sh->img, H);
        CHECK_STR_CONTAINS(e.what, "--anything");
    }
    free(q);
    free(k);
    free(v);
    free(out);
    free(lse);
    free(ro);
    free(rl);
}

/* Ranks of one CP group pass different head counts: every rank must get the error. */
static void test_mismatch(const cp_grid *g)
{
    if (g->cp_size < 2)
        return;
    cp_seq_layout l;
    cpdit_error e;
    cp_seq_layout_joint(&l, g->cp_size, 0, 4 * g->cp_size, &e);
    const int H = g->cp_rank == 0 ? 2 : 1, D = 16, L = l.len[g->cp_rank];
    float *buf = calloc((size_t)5 * L * H * D, sizeof(float));
    cp_attention_config cfg = {CP_ATTN_RING, CP_RING_P2P, 1, NULL, NULL};
    const size_t n = (size_t)L * H * D;
    cpdit_status st = cp_attention(&cfg, g, NULL, buf + 3 * n, buf + 4 * n, buf, buf + n,
                                   buf + 2 * n, &l, 1, H, D, 0.25f, &e);
    CHECK(st == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "different");
    free(buf);
    cp_seq_layout_free(&l);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    double t0 = MPI_Wtime();

    full_case fc[NSHAPES];
    for (int s = 0; s < NSHAPES; s++)
        build_case(&shapes[s], s, &fc[s]);
    const double t_ref = MPI_Wtime() - t0;

    for (int cp = 1; cp <= world_size; cp++) {
        if (world_size % cp)
            continue;
        for (int R = 1; R <= cp; R++) {
            if (cp % R)
                continue;
            const int U = cp / R;
            cp_grid *g = NULL;
            cpdit_error e;
            CHECK(cp_grid_create(MPI_COMM_WORLD, 0, R, U, &g, &e) == CPDIT_OK);
            if (!g)
                continue;
            for (int s = 0; s < NSHAPES; s++) {
                cp_seq_layout l;
                CHECK(cp_seq_layout_joint(&l, cp, shapes[s].txt, shapes[s].img, &e) ==
                      CPDIT_OK);
                for (int vi = 0; vi < NVARIANTS; vi++) {
                    /* strict mode first: where it works, the anything mode runs the very
                     * same code (the flag only relaxes validation), so it is run only where
                     * strict mode must refuse */
                    cp_attention_config cfg = {0};
                    cp_attention_config_parse(variant_names[vi], &cfg, &e);
                    int strict_ok = expect_ok(&cfg, R, U, &l, shapes[s].H);
                    run_one(g, &cfg, &shapes[s], &fc[s], &l, 0, "strict");
                    if (!strict_ok) {
                        cfg.anything = 1;
                        run_one(g, &cfg, &shapes[s], &fc[s], &l, 0, "anything");
                    }
                }
                cp_seq_layout_free(&l);
            }
            /* lse = NULL, and the chunked communicator path, on the biggest joint shape */
            cp_seq_layout l;
            cp_seq_layout_joint(&l, cp, shapes[2].txt, shapes[2].img, &e);
            for (int vi = 0; vi < NVARIANTS; vi++) {
                cp_attention_config cfg = {0};
                cp_attention_config_parse(variant_names[vi], &cfg, &e);
                cfg.anything = 1;
                run_one(g, &cfg, &shapes[2], &fc[2], &l, 1, "lse=NULL");
                cpdit_comm_mpi_set_max_count(CHUNK_SMALL);
                run_one(g, &cfg, &shapes[2], &fc[2], &l, 0, "chunked");
                cpdit_comm_mpi_set_max_count(0);
            }
            cp_seq_layout_free(&l);
            test_mismatch(g);
            cp_grid_destroy(g);
        }
    }
    for (int s = 0; s < NSHAPES; s++)
        free_case(&fc[s]);

    int failed = test_failures, any = 0;
    double worst[2] = {worst_out, worst_lse};
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (world_rank == 0)
        fprintf(stderr,
                "%d ranks: %ld calls compared, %ld refused as expected; largest relative "
                "error: out %.2g, lse %.2g (tolerance %g); reference %.1f s, total %.1f s\n",
                world_size, cases_run, cases_refused, worst[0], worst[1], TOL, t_ref,
                MPI_Wtime() - t0);
    MPI_Finalize();
    test_failures += any && !failed;
    TEST_MAIN_END();
}
