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
 *
 * Every case runs on two tables: "cpu" (fp32 activations, TOL above) and "cpu-bf16" (the same
 * kernels with bf16 activation storage: K/V blocks and all-to-alls move 2-byte elements, the
 * LSE stays fp32). A variant that merges n K/V blocks into its output (ring p2p: n = the ring
 * degree; all-gather and Ulysses: n = 1) rounds each block's partial output to bf16 (the
 * kernel stores it) and, on a table with an fp32 accumulator (cpdit_backend_f32_accumulator:
 * cpu-bf16), merges the blocks in fp32 and rounds the result once: two roundings whatever n,
 * each within BF16_ROUNDING = 2^-8 of the value. A table without one (merging in bf16) rounds
 * the running output again at every block: its error may grow by BF16_ROUNDING per block.
 * So the bound's extra over n = 1 is BF16_ROUNDING for any n > 1 with the accumulator, and
 * (n - 1) BF16_ROUNDING without. The bf16 runs are held to two references:
 *   - the reference over the bf16-rounded inputs (what a bf16 table computes, up to its fp32
 *     arithmetic and its roundings): out within BF16_ROUNDING + TOL + extra, lse within TOL
 *     (fp32 arithmetic only: the LSE is never stored in bf16);
 *   - the fp32 reference above: out within TOL_BF16_OUT + extra, lse within TOL_BF16_LSE
 *     (the inputs' rounding, measured: 7.2e-3 and 3.5e-3 at n = 1).
 * A wrong element offset or count anywhere in the CP code (bytes for elements, a 4-byte stride
 * over 2-byte data, the LSE moved or copied as activations) gives errors of order 1 against
 * these. Measured on cpu-bf16, ring p2p at n = 2 / 3 / 4 / 6 / 8: against the rounded-input
 * reference 4.9e-3 / 4.7e-3 / 4.9e-3 / 4.9e-3 / 5.0e-3 (bound 7.8e-3 for every n > 1; merging
 * in bf16 gave 4.9e-3 / 6.5e-3 / 8.5e-3 / 9.9e-3 / 9.8e-3, so the bound fails from n = 4 if
 * the accumulation goes back to bf16), against fp32 7.1e-3 / 7.6e-3 / 8.5e-3 / 9.7e-3 /
 * 9.6e-3 (bound 1.39e-2; bf16 merging: up to 1.16e-2); worst of all variants (unified 2x3,
 * n = 2): 5.8e-3 and 1.08e-2.
 * The largest bf16 errors per grid and variant are printed (rank 0).
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
/* bf16 activations (see the top): one rounding to bf16 (round to nearest, 8-bit significand),
 * and the error of bf16 inputs against the fp32 reference with one output rounding. */
#define BF16_ROUNDING (1.0 / 256.0)
#define TOL_BF16_OUT 1e-2
#define TOL_BF16_LSE 1e-2
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
    /* the reference over q, k, v rounded to bf16 (out16 (B, S, H, D), lse16 (B, S, H)) */
    float *out16, *lse16;
} full_case;

/* A table the cases run on, and what its results are held to (for n = 1 merged block). */
typedef struct table_case {
    const cpdit_backend *be;
    double tol_out, tol_lse;     /* against the fp32 reference */
    double tol_out_r, tol_lse_r; /* against the bf16-rounded-input reference; < 0: none */
    double per_block;            /* one rounding more per merge (see the top) */
} table_case;

/* K/V blocks merged into each output of cfg on g: the ring degree for ring p2p (the whole
 * CP group for RING, the ring axis for UNIFIED), 1 for the all-gather modes and Ulysses. */
static int merged_blocks(const cp_attention_config *cfg, const cp_grid *g)
{
    if (cfg->ring_mode == CP_RING_ALLGATHER || cfg->variant == CP_ATTN_ULYSSES)
        return 1;
    return cfg->variant == CP_ATTN_RING ? g->cp_size : g->ring;
}

/* Largest errors of one table: out and lse against the fp32 reference, then against the
 * bf16-rounded-input reference. */
enum { ERR_OUT, ERR_LSE, ERR_OUT_R, ERR_LSE_R, NERR };

static int world_rank, world_size;
static long cases_run, cases_refused;
static double worst32[NERR], worst16[NERR]; /* largest errors of "cpu" and "cpu-bf16" */

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

/* dst = src rounded to bf16 as be16 stores it (upload_act, download_act), n values. */
static void round_bf16(const cpdit_backend *be16, float *dst, const float *src, size_t n)
{
    cpdit_buf *t = cpdit_act_alloc(be16, n ? n : 1);
    CHECK(t != NULL);
    if (!t)
        return;
    be16->upload_act(t, src, n);
    be16->download_act(dst, t, n);
    be16->free(t);
}

/* out (B, S, H, D), lse (B, S, H) over the whole sequence q, k, v: rank r computes rows (b, s)
 * with (b*S + s) % world == r, one reference call per row, then everyone sums (rows not
 * computed are zero). */
static void reference(const shape *sh, float *out, float *lse, const float *q, const float *k,
                      const float *v)
{
    const int S = sh->txt + sh->img, B = sh->B, H = sh->H, D = sh->D;
    const size_t row = (size_t)H * D, n = (size_t)B * S * row, nl = (size_t)B * S * H;
    const float scale = 1.0f / sqrtf((float)D);
    cpdit_error e;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            if ((b * S + s) % world_size != world_rank)
                continue;
            size_t tok = (size_t)b * S + s;
            CHECK(attention_cpu_reference(out + tok * row, lse + tok * H, q + tok * row,
                                          k + (size_t)b * S * row, v + (size_t)b * S * row, 1,
                                          1, S, H, D, scale, &e) == CPDIT_OK);
        }
    MPI_Allreduce(MPI_IN_PLACE, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, lse, (int)nl, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* The inputs of shape idx and their references (fp32; over bf16-rounded inputs when be16). */
static void build_case(const shape *sh, int idx, full_case *fc, const cpdit_backend *be16)
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
    reference(sh, fc->out, fc->lse, fc->q, fc->k, fc->v);
    fc->out16 = fc->lse16 = NULL;
    if (!be16)
        return;
    float *r = malloc(3 * n * sizeof(float));
    fc->out16 = calloc(n, sizeof(float));
    fc->lse16 = calloc(nl, sizeof(float));
    round_bf16(be16, r, fc->q, n);
    round_bf16(be16, r + n, fc->k, n);
    round_bf16(be16, r + 2 * n, fc->v, n);
    reference(sh, fc->out16, fc->lse16, r, r + n, r + 2 * n);
    free(r);
}

static void free_case(full_case *fc)
{
    free(fc->q);
    free(fc->k);
    free(fc->v);
    free(fc->out);
    free(fc->lse);
    free(fc->out16);
    free(fc->lse16);
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

/* Local (B, n/B, ...) host values -> n activations of be (NULL when n = 0: a rank without
 * tokens passes NULL buffers). */
static cpdit_buf *to_act(const cpdit_backend *be, const float *host, size_t n)
{
    if (n == 0)
        return NULL;
    cpdit_buf *p = cpdit_act_alloc(be, n);
    CHECK(p != NULL);
    if (p)
        be->upload_act(p, host, n);
    return p;
}

/* One call on tc's table and its checks. lse_null: pass lse = NULL and check the output only.
 * err (NERR, may be NULL) accumulates the largest errors. */
static void run_one(const cp_grid *g, const table_case *tc, const cp_attention_config *cfg,
                    const shape *sh, const full_case *fc, const cp_seq_layout *l, int lse_null,
                    const char *tag, double *errs)
{
    const cpdit_backend *be = tc->be;
    const int B = sh->B, H = sh->H, D = sh->D, L = l->len[g->cp_rank];
    const size_t row = (size_t)H * D, n = (size_t)B * L * row, nl = (size_t)B * L * H;
    float *q = NULL, *k = NULL, *v = NULL, *out = NULL, *lse = NULL, *ro = NULL, *rl = NULL;
    float *ro16 = NULL, *rl16 = NULL;
    if (L > 0) {
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
        if (tc->tol_out_r >= 0) {
            ro16 = malloc(n * sizeof(float));
            rl16 = malloc(nl * sizeof(float));
            cp_shard_take(ro16, fc->out16, l, g->cp_rank, B, row);
            cp_shard_take(rl16, fc->lse16, l, g->cp_rank, B, H);
        }
        for (size_t i = 0; i < n; i++)
            out[i] = NAN; /* every element must be written */
        for (size_t i = 0; i < nl; i++)
            lse[i] = NAN;
    }
    /* the table's buffers: activations q, k, v, out (out and lse start as NaN) */
    cpdit_buf *bq = to_act(be, q, n), *bk = to_act(be, k, n), *bv = to_act(be, v, n);
    cpdit_buf *bo = to_act(be, out, n);
    float *bl = nl ? be->alloc(nl * sizeof(float)) : NULL;
    if (bl)
        be->upload(bl, lse, nl * sizeof(float));
    cpdit_error e;
    cpdit_error_clear(&e);
    const int want = expect_ok(cfg, g->ring, g->ulysses, l, H);
    cpdit_status st = cp_attention(cfg, g, NULL, bo, lse_null ? NULL : bl, bq, bk, bv, l, B, H,
                                   D, 1.0f / sqrtf((float)D), &e);
    if (L > 0) {
        be->download_act(out, bo, n);
        be->download(lse, bl, nl * sizeof(float));
    }
    const char *name = cp_attention_config_name(cfg);
    if (want) {
        cases_run++;
        CHECK_MSG(st == CPDIT_OK, "%s %s %s %dx%d B%d txt%d img%d H%d D%d anything %d: %s",
                  be->name, tag, name, g->ring, g->ulysses, B, sh->txt, sh->img, H, D,
                  cfg->anything, e.what);
        if (st == CPDIT_OK && L > 0) {
            double ev[NERR] = {rel_err(out, ro, n), lse_null ? 0.0 : rel_err(lse, rl, nl), 0.0,
                               0.0};
            if (ro16) {
                ev[ERR_OUT_R] = rel_err(out, ro16, n);
                ev[ERR_LSE_R] = lse_null ? 0.0 : rel_err(lse, rl16, nl);
            }
            for (int i = 0; errs && i < NERR; i++)
                errs[i] = ev[i] > errs[i] ? ev[i] : errs[i];
            /* the roundings beyond n = 1 (see the top): one with an fp32 accumulator */
            const int nb = merged_blocks(cfg, g);
            const double extra =
                tc->per_block * (cpdit_backend_f32_accumulator(be) ? (nb > 1) : nb - 1);
            CHECK_MSG(ev[ERR_OUT] <= tc->tol_out + extra && ev[ERR_LSE] <= tc->tol_lse &&
                          (!ro16 || (ev[ERR_OUT_R] <= tc->tol_out_r + extra &&
                                     ev[ERR_LSE_R] <= tc->tol_lse_r)),
                      "%s %s %s %dx%d (dp %d) rank %d B%d txt%d img%d H%d D%d anything %d: "
                      "out err %.3g lse err %.3g (rounded inputs: out %.3g lse %.3g)",
                      be->name, tag, name, g->ring, g->ulysses, g->dp, g->world_rank, B,
                      sh->txt, sh->img, H, D, cfg->anything, ev[ERR_OUT], ev[ERR_LSE],
                      ev[ERR_OUT_R], ev[ERR_LSE_R]);
        }
    } else {
        cases_refused++;
        CHECK_MSG(st == CPDIT_ERR_INPUT, "%s %s %s %dx%d B%d txt%d img%d H%d: expected a refusal",
                  be->name, tag, name, g->ring, g->ulysses, B, sh->txt, sh->img, H);
        CHECK_STR_CONTAINS(e.what, "--anything");
    }
    be->free(bq);
    be->free(bk);
    be->free(bv);
    be->free(bo);
    be->free(bl);
    free(q);
    free(k);
    free(v);
    free(out);
    free(lse);
    free(ro);
    free(rl);
    free(ro16);
    free(rl16);
}

/* Ranks of one CP group passing different tables (rank 0 bf16, the others fp32: blocks of
 * different sizes): every rank must get the error before any block moves. The buffers are
 * host memory of each rank's table, zeros (all-zero bits are 0.0 in both dtypes). */
static void test_table_mismatch(const cp_grid *g, const cpdit_backend *be16)
{
    if (g->cp_size < 2 || !be16)
        return;
    cp_seq_layout l;
    cpdit_error e;
    cp_seq_layout_joint(&l, g->cp_size, 0, 4 * g->cp_size, &e);
    const cpdit_backend *be = g->cp_rank == 0 ? be16 : cpdit_backend_cpu();
    const int H = 2, D = 16;
    const size_t n = (size_t)l.len[g->cp_rank] * H * D;
    cpdit_buf *buf = cpdit_act_alloc(be, 4 * n);
    float *lse = calloc(n, sizeof(float));
    memset(buf, 0, cpdit_act_bytes(be, 4 * n)); /* host memory: both tables are CPU ones */
    cp_attention_config cfg = {CP_ATTN_RING, CP_RING_P2P, 1, be, NULL};
    cpdit_status st = cp_attention(&cfg, g, NULL, cpdit_buf_at(be, buf, 3 * (ptrdiff_t)n), lse,
                                   buf, cpdit_buf_at(be, buf, (ptrdiff_t)n),
                                   cpdit_buf_at(be, buf, 2 * (ptrdiff_t)n), &l, 1, H, D, 0.25f,
                                   &e);
    CHECK(st == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "dtypes");
    be->free(buf);
    free(lse);
    cp_seq_layout_free(&l);
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
    cp_attention_config cfg = {CP_ATTN_RING, CP_RING_P2P, 1, NULL, NULL}; /* "cpu": host fp32 */
    const size_t n = (size_t)L * H * D;
    cpdit_status st =
        cp_attention(&cfg, g, NULL, cpdit_host_buf(buf + 3 * n), buf + 4 * n,
                     cpdit_host_buf(buf), cpdit_host_buf(buf + n), cpdit_host_buf(buf + 2 * n),
                     &l, 1, H, D, 0.25f, &e);
    CHECK(st == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "different");
    free(buf);
    cp_seq_layout_free(&l);
}

/* Every variant of one shape on one table: strict mode first; where it works, the anything
 * mode runs the very same code (the flag only relaxes validation), so it is run only where
 * strict mode must refuse. errs[vi] (NERR each) take the largest errors per variant. */
static void run_shape(const cp_grid *g, const table_case *tc, const shape *sh,
                      const full_case *fc, const cp_seq_layout *l, double (*errs)[NERR])
{
    for (int vi = 0; vi < NVARIANTS; vi++) {
        cpdit_error e;
        cp_attention_config cfg = {0};
        cp_attention_config_parse(variant_names[vi], &cfg, &e);
        cfg.backend = tc->be;
        int strict_ok = expect_ok(&cfg, g->ring, g->ulysses, l, sh->H);
        run_one(g, tc, &cfg, sh, fc, l, 0, "strict", errs[vi]);
        if (!strict_ok) {
            cfg.anything = 1;
            run_one(g, tc, &cfg, sh, fc, l, 0, "anything", errs[vi]);
        }
    }
}

/* lse = NULL, and the chunked communicator path, on the biggest joint shape (index 2). */
static void run_extra(const cp_grid *g, const table_case *tc, const full_case *fc,
                      double (*errs)[NERR])
{
    cp_seq_layout l;
    cpdit_error e;
    CHECK(cp_seq_layout_joint(&l, g->cp_size, shapes[2].txt, shapes[2].img, &e) == CPDIT_OK);
    for (int vi = 0; vi < NVARIANTS; vi++) {
        cp_attention_config cfg = {0};
        cp_attention_config_parse(variant_names[vi], &cfg, &e);
        cfg.anything = 1;
        cfg.backend = tc->be;
        run_one(g, tc, &cfg, &shapes[2], &fc[2], &l, 1, "lse=NULL", errs[vi]);
        cpdit_comm_mpi_set_max_count(CHUNK_SMALL);
        run_one(g, tc, &cfg, &shapes[2], &fc[2], &l, 0, "chunked", errs[vi]);
        cpdit_comm_mpi_set_max_count(0);
    }
    cp_seq_layout_free(&l);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    double t0 = MPI_Wtime();

    const cpdit_backend *be16 = cpdit_backend_by_name("cpu-bf16");
    CHECK_MSG(be16 != NULL, "this build has no cpu-bf16 table");
    /* "cpu" keeps its fp32 tolerance; "cpu-bf16" is held to both references */
    const table_case tables[2] = {
        {cpdit_backend_cpu(), TOL, TOL, -1.0, -1.0, 0.0},
        {be16, TOL_BF16_OUT, TOL_BF16_LSE, BF16_ROUNDING + TOL, TOL, BF16_ROUNDING},
    };
    const int ntables = be16 ? 2 : 1;

    full_case fc[NSHAPES];
    for (int s = 0; s < NSHAPES; s++)
        build_case(&shapes[s], s, &fc[s], be16);
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
            double errs[2][NVARIANTS][NERR] = {{{0}}}; /* per table and variant, this grid */
            for (int s = 0; s < NSHAPES; s++) {
                cp_seq_layout l;
                CHECK(cp_seq_layout_joint(&l, cp, shapes[s].txt, shapes[s].img, &e) ==
                      CPDIT_OK);
                for (int t = 0; t < ntables; t++)
                    run_shape(g, &tables[t], &shapes[s], &fc[s], &l, errs[t]);
                cp_seq_layout_free(&l);
            }
            for (int t = 0; t < ntables; t++)
                run_extra(g, &tables[t], fc, errs[t]);
            test_mismatch(g);
            test_table_mismatch(g, be16);
            /* the largest errors over the ranks, per variant */
            MPI_Allreduce(MPI_IN_PLACE, errs, 2 * NVARIANTS * NERR, MPI_DOUBLE, MPI_MAX,
                          MPI_COMM_WORLD);
            for (int vi = 0; vi < NVARIANTS; vi++)
                for (int i = 0; i < NERR; i++) {
                    worst32[i] = errs[0][vi][i] > worst32[i] ? errs[0][vi][i] : worst32[i];
                    worst16[i] = errs[1][vi][i] > worst16[i] ? errs[1][vi][i] : worst16[i];
                }
            for (int vi = 0; vi < NVARIANTS && world_rank == 0 && ntables > 1; vi++)
                fprintf(stderr,
                        "cpu-bf16 %dx%d (dp %d) %-17s vs fp32: out %.2e lse %.2e; vs "
                        "bf16-rounded inputs: out %.2e lse %.2e\n",
                        R, U, g->dp, variant_names[vi], errs[1][vi][ERR_OUT],
                        errs[1][vi][ERR_LSE], errs[1][vi][ERR_OUT_R], errs[1][vi][ERR_LSE_R]);
            cp_grid_destroy(g);
        }
    }
    for (int s = 0; s < NSHAPES; s++)
        free_case(&fc[s]);

    int failed = test_failures, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (world_rank == 0) {
        fprintf(stderr,
                "%d ranks: %ld calls compared, %ld refused as expected; largest relative "
                "error: out %.2g, lse %.2g (tolerance %g); reference %.1f s, total %.1f s\n",
                world_size, cases_run, cases_refused, worst32[ERR_OUT], worst32[ERR_LSE], TOL,
                t_ref, MPI_Wtime() - t0);
        if (ntables > 1)
            fprintf(stderr,
                    "cpu-bf16, all grids: vs fp32 out %.2e lse %.2e (tolerances %g, + %.3g "
                    "when merging blocks, %g); vs bf16-rounded inputs out %.2e lse %.2e "
                    "(tolerances %.3g, x 2 when merging blocks, %g)\n",
                    worst16[ERR_OUT], worst16[ERR_LSE], TOL_BF16_OUT, BF16_ROUNDING,
                    TOL_BF16_LSE, worst16[ERR_OUT_R], worst16[ERR_LSE_R], BF16_ROUNDING, TOL);
    }
    MPI_Finalize();
    test_failures += any && !failed;
    TEST_MAIN_END();
}
