/* test_backend_ops.c — the kernel table's conformance suite (in the spirit of ggml's
 * test-backend-ops): every op case of kernels/backend_ops.h, over its grid of shapes, on
 * seeded random inputs, on every backend of the build (and every attention kernel of each),
 * against the double-precision references of tests/backend_ops_reference.c. The error is
 * normalised, ||out - ref||_2 / ||ref||_2 (plain ||out - ref||_2 when the reference is all
 * zeros), and must not exceed the case's tolerance; infinities must match exactly (empty
 * attention rows give lse = -inf). Prints one line per op, backend and kernel with the worst
 * error over the shapes and the threshold it was held to.
 *
 * Tables that store activations in bf16 (act_dtype BF16: "cpu-bf16", "cuda") are held to two
 * bounds, each raised to the case's (or attention kernel's) own tolerance when that is larger;
 * fp32 tables keep the case's thresholds unchanged:
 *   - storage: against the reference evaluated on the bf16 values of the activation inputs
 *     (what the table was given), at most BF16_OUTPUT_TOL: only the rounding of the outputs
 *     (and of an intermediate) is left, whatever the op's conditioning;
 *   - end to end: against the reference on the fp32 inputs, at most BF16_STORAGE_TOL, asserted
 *     for outputs of at least BF16_MIN_VALUES values (a single value can be ill-conditioned:
 *     gelu near x = -3 turns its input's 2^-9 into 10 times that).
 *
 * The suite must be able to fail: a copy of each host table with deliberately mis-offset
 * entries (an operand one element off, a row stride ignored, a halo one element off) has to
 * exceed the thresholds, in-place calls (y aliasing x) must give the bits of out-of-place
 * ones, and a convolution split into row ranges the bits of one call.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend_ops.h"
#include "lib/core/dtype.h"
#include "tests/backend_ops_reference.h"
#include "tests/test_util.h"

/* Thresholds for tables with bf16 activations. bf16 keeps 8 significant bits (7 stored):
 * rounding to nearest changes a value by at most half an ulp, 2^-8 of it just above a power
 * of two and about 2^-9 of it on average (the per-value rounding of the plan). An output
 * rounded once therefore has a normalised error of at most 2^-8 = 3.9e-3 against the exact
 * result on the same inputs (measured on cpu-bf16 over random data: at most 2.2e-3 on every
 * output of 7 values or more, 3.1e-3 on a single gelu value): BF16_OUTPUT_TOL = 2^-8. End to
 * end, the inputs' own rounding (2^-8 at most each) adds what the op's conditioning makes of
 * it: measured at most 2.8e-3 (mul) over outputs of BF16_MIN_VALUES values or more;
 * BF16_STORAGE_TOL = 2^-7 allows input and output rounding at their worst. A wrong offset or
 * stride gives errors of order 1, far above both (test_wrong_offsets_fail). */
#define BF16_OUTPUT_TOL (1.0 / 256.0)
#define BF16_STORAGE_TOL (1.0 / 128.0)
#define BF16_MIN_VALUES 32

/* Normalised error of out against ref (n values); INFINITY when infinities differ. */
static double normalised_error(const float *out, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i]) || isinf(out[i]) || isnan(out[i])) {
            if ((double)out[i] != ref[i])
                return INFINITY;
            continue;
        }
        const double e = (double)out[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The threshold of case c on be with kernel k: fp32 tables the case's; bf16 tables at least
 * bf16_tol (BF16_OUTPUT_TOL or BF16_STORAGE_TOL), except on the bf16 inputs for a case whose
 * outputs are fp32 (c->f32_out: nothing is rounded after the inputs, the case's tol holds). */
static double case_tol(const cpdit_backend *be, const cpdit_attention_kernel *k,
                       const backend_op_case *c, double bf16_tol)
{
    /* a lower-precision attention kernel (cudnn: bf16) states its own bound */
    double tol = k && k->tolerance > c->tol ? k->tolerance : c->tol;
    if (be->act_dtype == CPDIT_DTYPE_BF16 && tol < bf16_tol &&
        !(c->f32_out && bf16_tol == BF16_OUTPUT_TOL))
        tol = bf16_tol;
    return tol;
}

/* in_b = in with the activation parts of c at d rounded to bf16 (what a bf16 table holds). */
static void round_act_inputs(const backend_op_case *c, const int *d, const float *in,
                             float *in_b)
{
    backend_op_parts pin, pout;
    backend_op_layout(c, d, &pin, &pout);
    size_t o = 0;
    for (int p = 0; p < pin.n; p++) {
        for (size_t i = o; i < o + pin.count[p]; i++)
            in_b[i] = pin.kind[p] == BACKEND_OP_ACT ? cpdit_bf16_to_f32(cpdit_f32_to_bf16(in[i]))
                                                    : in[i];
        o += pin.count[p];
    }
}

/* Worst errors of a case over its shapes: against the reference on the inputs as given
 * (fp32), and on the inputs as a bf16 table stores them (= total on fp32 tables). */
typedef struct case_errors {
    double total, storage;
} case_errors;

/* One case on one backend and kernel over all its shapes (INFINITY when a run fails).
 * assert_each: CHECK every shape against the thresholds (0: only measure, for the tables
 * broken on purpose). */
static case_errors check_case(const cpdit_backend *be, const cpdit_attention_kernel *k,
                              const backend_op_case *c, backend_op_reference_fn ref,
                              int assert_each)
{
    case_errors worst = {0, 0};
    const int bf16 = be->act_dtype == CPDIT_DTYPE_BF16;
    const double tol = case_tol(be, k, c, BF16_STORAGE_TOL);
    const double tol_out = case_tol(be, k, c, BF16_OUTPUT_TOL);
    for (int s = 0; s < c->nshapes; s++) {
        const int *d = c->shapes[s].d;
        size_t ni, no;
        backend_op_sizes(c, d, &ni, &no);
        float *in = malloc((ni + 1) * sizeof(float)), *out = malloc((no + 1) * sizeof(float));
        float *in_b = bf16 ? malloc((ni + 1) * sizeof(float)) : NULL;
        double *want = malloc((no + 1) * sizeof(double));
        double *want_b = bf16 ? malloc((no + 1) * sizeof(double)) : NULL;
        CHECK(in && out && want && (!bf16 || (in_b && want_b)));
        if (!in || !out || !want || (bf16 && (!in_b || !want_b))) {
            free(in);
            free(out);
            free(in_b);
            free(want);
            free(want_b);
            return (case_errors){INFINITY, INFINITY};
        }
        const uint64_t seed = 1000u * (uint64_t)s + 7u;
        if (c->fill)
            c->fill(d, in, ni, seed);
        else
            backend_op_fill_uniform(in, ni, seed);
        cpdit_error err;
        cpdit_error_clear(&err);
        char shape[96];
        backend_op_shape_text(c, d, shape, sizeof shape);
        const cpdit_status st = backend_op_run_host(be, k, c, d, out, in, &err);
        if (assert_each)
            CHECK_MSG(st == CPDIT_OK, "%s on %s (%s) %s: %s: %s", c->name, be->name,
                      k ? k->name : "-", shape, err.where, err.what);
        case_errors e = {INFINITY, INFINITY};
        if (st == CPDIT_OK) {
            ref(d, in, want);
            e.total = e.storage = normalised_error(out, want, no);
            if (bf16) {
                round_act_inputs(c, d, in, in_b);
                ref(d, in_b, want_b);
                e.storage = normalised_error(out, want_b, no);
            }
            if (assert_each) {
                if (!bf16 || no >= BF16_MIN_VALUES)
                    CHECK_MSG(e.total <= tol, "%s on %s (%s) %s: normalised error %.3g > %.3g",
                              c->name, be->name, k ? k->name : "-", shape, e.total, tol);
                if (bf16)
                    CHECK_MSG(e.storage <= tol_out,
                              "%s on %s (%s) %s: normalised error on the bf16 inputs %.3g > "
                              "%.3g", c->name, be->name, k ? k->name : "-", shape, e.storage,
                              tol_out);
            }
        }
        /* bf16 tables: the end-to-end worst over the shapes it is asserted on (and failures) */
        if ((!bf16 || no >= BF16_MIN_VALUES || st != CPDIT_OK) && !(e.total <= worst.total))
            worst.total = e.total;
        if (!(e.storage <= worst.storage))
            worst.storage = e.storage;
        free(in);
        free(out);
        free(in_b);
        free(want);
        free(want_b);
    }
    return worst;
}

/* The harness itself must catch a wrong result: perturb one output and see the error. */
static void test_harness_detects(void)
{
    const double ref[4] = {1, 2, 3, 4};
    const float same[4] = {1, 2, 3, 4}, off[4] = {1, 2, 3.001f, 4};
    CHECK(normalised_error(same, ref, 4) == 0);
    CHECK(normalised_error(off, ref, 4) > 1e-5);
    const double r_inf[2] = {-INFINITY, 1};
    const float o_inf[2] = {-INFINITY, 1}, o_fin[2] = {-1e30f, 1};
    CHECK(normalised_error(o_inf, r_inf, 2) == 0);
    CHECK(isinf(normalised_error(o_fin, r_inf, 2)));
}

/* ------------------------------------------------------------------ tables broken on purpose */

/* The table a broken entry forwards to (one at a time: the suite is single-threaded). */
static const cpdit_backend *broken_base;

/* add with b read one element late (a wrong offset) */
static void broken_add(cpdit_buf *y, const cpdit_buf *a, const cpdit_buf *b, size_t n)
{
    broken_base->add(y, a, cpdit_buf_at(broken_base, b, 1), n);
}
/* copy_rows ignoring the source's row stride (a stride taken for the width) */
static void broken_copy_rows(cpdit_buf *dst, int ldd, const cpdit_buf *src, int lds,
                             size_t rows, int dim)
{
    (void)lds;
    broken_base->copy_rows(dst, ldd, src, dim, rows, dim);
}
/* conv2d with x one element late (a halo offset off by one element) */
static cpdit_status broken_conv2d(cpdit_buf *y, const cpdit_buf *x, const float *w_packed,
                                  const float *b, int W, int Cin, int Cout, int K, int r0,
                                  int r1, void *ws, cpdit_error *err)
{
    return broken_base->conv2d(y, cpdit_buf_at(broken_base, x, 1), w_packed, b, W, Cin, Cout,
                               K, r0, r1, ws, err);
}

/* Each broken entry's case must exceed its threshold on be (a host table: the broken entries
 * read one element past an operand, which the harness allocates). */
static void test_wrong_offsets_fail(const cpdit_backend *be)
{
    static const char *const broken_cases[] = {"add", "copy_rows", "conv2d-3x3", NULL};
    cpdit_backend broken = *be;
    broken.add = broken_add;
    broken.copy_rows = broken_copy_rows;
    broken.conv2d = broken_conv2d;
    broken_base = be;
    for (const char *const *name = broken_cases; *name; name++) {
        for (const backend_op_case *const *c = backend_op_cases(); *c; c++) {
            if (strcmp((*c)->name, *name))
                continue;
            const case_errors e =
                check_case(&broken, NULL, *c, backend_op_reference_find(*name), 0);
            const double tol = case_tol(be, NULL, *c, BF16_OUTPUT_TOL);
            printf("%-20s %-8s broken on purpose: worst %.3g  (must exceed tol %.3g)\n", *name,
                   be->name, e.storage, tol);
            CHECK_MSG(e.storage > tol,
                      "%s on a deliberately mis-offset %s table: error %.3g <= %.3g", *name,
                      be->name, e.storage, tol);
        }
    }
    broken_base = NULL;
}

/* ------------------------------------------------------------------ in place */

#define IN_PLACE_ROWS 37
#define IN_PLACE_COLS 300 /* rows x cols spans several 4096-element blocks of cpu-bf16 */
#define IN_PLACE_EPS 1e-6f

/* y may alias x: act, add, mul, layer_norm, rms_norm, modulate and group_norm_apply called in
 * place must give the bits of the same call into another buffer. */
static void test_in_place(const cpdit_backend *be)
{
    const size_t R = IN_PLACE_ROWS, C = IN_PLACE_COLS, n = R * C;
    float *host = malloc((3 * n + 2 * C) * sizeof(float));
    float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    cpdit_buf *x = cpdit_act_alloc(be, n), *y = cpdit_act_alloc(be, n);
    cpdit_buf *b = cpdit_act_alloc(be, n), *sh = cpdit_act_alloc(be, 2 * C);
    float *par = be->alloc(2 * C * sizeof(float));
    CHECK(host && want && got && x && y && b && sh && par);
    if (!host || !want || !got || !x || !y || !b || !sh || !par)
        goto done;
    backend_op_fill_uniform(host, 3 * n + 2 * C, 99);
    be->upload_act(b, host + n, n);
    be->upload_act(sh, host + 2 * n, 2 * C);
    be->upload(par, host + 3 * n, 2 * C * sizeof(float));
    const double mean[1] = {0.01}, rstd[1] = {1.7};
    for (int op = 0; op < 7; op++) {
        /* op on (dst, src): run out of place into y, then in place on x */
        for (int in_place = 0; in_place < 2; in_place++) {
            be->upload_act(x, host, n);
            cpdit_buf *dst = in_place ? x : y;
            switch (op) {
            case 0: be->act(CPDIT_ACT_GELU_TANH, dst, x, n); break;
            case 1: be->add(dst, x, b, n); break;
            case 2: be->mul(dst, b, x, n); break;
            case 3: be->layer_norm(dst, x, par, par + C, R, (int)C, IN_PLACE_EPS); break;
            case 4: be->rms_norm(dst, x, par, R, (int)C, IN_PLACE_EPS); break;
            case 5: be->modulate(dst, x, sh, cpdit_buf_at(be, sh, (ptrdiff_t)C), R, (int)C); break;
            default:
                be->group_norm_apply(dst, x, R, (int)C, 1, mean, rstd, par, par + C,
                                     CPDIT_ACT_SILU);
                break;
            }
            CHECK(be->sync(NULL) == CPDIT_OK);
            be->download_act(in_place ? got : want, dst, n);
        }
        CHECK_MSG(memcmp(want, got, n * sizeof(float)) == 0,
                  "%s: op %d in place differs from out of place", be->name, op);
    }
done:
    free(host);
    free(want);
    free(got);
    be->free(x);
    be->free(y);
    be->free(b);
    be->free(sh);
    be->free(par);
}

/* ------------------------------------------------------------------ fp32 accumulator */

#define ACC_VALUES 4099 /* a vector-lane multiple plus a tail */

/* Tables with an fp32 accumulator (cpdit_backend_f32_accumulator): act_to_f32 must give the
 * values download_act gives (exact widening), act_from_f32 the bits upload_act stores (one
 * rounding, nearest even), on values that round up, down and to even. fp32 tables must not
 * have the entries ("cpu": its lse_merge already is the fp32 accumulation). */
static void test_f32_accumulator(const cpdit_backend *be)
{
    if (be->act_dtype == CPDIT_DTYPE_F32) {
        CHECK_MSG(!be->lse_merge_f32 && !be->act_to_f32 && !be->act_from_f32,
                  "%s: fp32 table with fp32 accumulator entries", be->name);
        return;
    }
    if (!cpdit_backend_f32_accumulator(be)) {
        CHECK_MSG(!be->lse_merge_f32 && !be->act_to_f32 && !be->act_from_f32,
                  "%s: fp32 accumulator entries: all three or none", be->name);
        return;
    }
    const size_t n = ACC_VALUES;
    float *host = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    float *got = malloc(n * sizeof(float));
    cpdit_buf *a = cpdit_act_alloc(be, n), *b = cpdit_act_alloc(be, n);
    float *f = be->alloc(n * sizeof(float));
    CHECK(host && want && got && a && b && f);
    if (!host || !want || !got || !a || !b || !f)
        goto done;
    backend_op_fill_uniform(host, n, 31);
    host[0] = 1.0f + 1.0f / 256.0f;  /* a tie: rounds to even (1) */
    host[1] = 1.0f + 3.0f / 256.0f;  /* a tie: rounds to even (1 + 2^-6) */
    host[2] = -1.0f - 1.0f / 512.0f; /* below half an ulp: rounds down */
    be->upload_act(a, host, n);
    be->download_act(want, a, n);
    be->act_to_f32(f, a, n);
    be->download(got, f, n * sizeof(float));
    CHECK(be->sync(NULL) == CPDIT_OK);
    CHECK_MSG(memcmp(want, got, n * sizeof(float)) == 0, "%s: act_to_f32 differs from "
              "download_act", be->name);
    be->upload(f, host, n * sizeof(float));
    be->act_from_f32(b, f, n);
    be->download_act(got, b, n);
    CHECK(be->sync(NULL) == CPDIT_OK);
    CHECK_MSG(memcmp(want, got, n * sizeof(float)) == 0, "%s: act_from_f32 differs from "
              "upload_act", be->name);
    CHECK(got[0] == 1.0f && got[1] == 1.0f + 1.0f / 64.0f && got[2] == -1.0f);
    printf("%-20s %-8s act_to_f32 / act_from_f32 bitwise as download_act / upload_act\n",
           "fp32 accumulator", be->name);
done:
    free(host);
    free(want);
    free(got);
    be->free(a);
    be->free(b);
    be->free(f);
}

/* ------------------------------------------------------------------ conv2d row ranges */

#define RANGE_ROWS 7
#define RANGE_W 9
#define RANGE_CIN 5
#define RANGE_COUT 6
#define RANGE_K 3
#define RANGE_TOL 1e-6 /* max |one call - three calls| / max |y| */

/* conv2d over rows [0, rows) in one call must equal (to SGEMM rounding) three calls over [0, 2), [2, 5)
 * and [5, rows) (a row split keeps its halo rows: r0 > 0 reads row r0 - 1 of x). */
static void test_conv_row_ranges(const cpdit_backend *be)
{
    const size_t row_in = (size_t)RANGE_W * RANGE_CIN, row_out = (size_t)RANGE_W * RANGE_COUT;
    const size_t nx = (RANGE_ROWS + 2) * row_in, ny = RANGE_ROWS * row_out;
    const size_t nw = (size_t)RANGE_COUT * RANGE_CIN * RANGE_K * RANGE_K;
    float *host = malloc((nx + nw + RANGE_COUT) * sizeof(float));
    float *one = malloc(ny * sizeof(float)), *three = malloc(ny * sizeof(float));
    cpdit_buf *x = cpdit_act_alloc(be, nx), *y = cpdit_act_alloc(be, ny);
    float *b = be->alloc(RANGE_COUT * sizeof(float));
    float *packed = NULL;
    const size_t ws_bytes = be->conv2d_workspace_bytes(RANGE_W, RANGE_CIN, RANGE_K);
    void *ws = be->alloc(ws_bytes ? ws_bytes : 1);
    CHECK(host && one && three && x && y && b && ws);
    if (!host || !one || !three || !x || !y || !b || !ws)
        goto done;
    backend_op_fill_uniform(host, nx + nw + RANGE_COUT, 5);
    packed = be->conv2d_pack(host + nx, RANGE_COUT, RANGE_CIN, RANGE_K);
    CHECK(packed != NULL);
    if (!packed)
        goto done;
    be->upload_act(x, host, nx);
    be->upload(b, host + nx + nw, RANGE_COUT * sizeof(float));
    const cpdit_buf *x0 = cpdit_buf_at(be, x, (ptrdiff_t)row_in); /* row 0: after the halo */
    const int cuts[] = {0, 2, 5, RANGE_ROWS};
    for (int split = 0; split < 2; split++) {
        for (int i = 0; i < (split ? 3 : 1); i++) {
            const int r0 = split ? cuts[i] : 0, r1 = split ? cuts[i + 1] : RANGE_ROWS;
            CHECK(be->conv2d(y, x0, packed, b, RANGE_W, RANGE_CIN, RANGE_COUT, RANGE_K, r0, r1,
                             ws, NULL) == CPDIT_OK);
        }
        CHECK(be->sync(NULL) == CPDIT_OK);
        be->download_act(split ? three : one, y, ny);
    }
    /* Not bitwise: OpenBLAS's SGEMM picks its edge kernels by the column count, so on some
     * CPUs (seen: core Cooperlake) the rows of a shorter call round differently. A wrong band
     * offset or halo row gives errors of order 1 (the broken-on-purpose case: 2.45). */
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < ny; i++) {
        const double d = fabs((double)one[i] - three[i]), a = fabs((double)one[i]);
        worst = d > worst ? d : worst;
        scale = a > scale ? a : scale;
    }
    CHECK_MSG(worst <= RANGE_TOL * (scale > 0.0 ? scale : 1.0),
              "%s: conv2d over row ranges differs from one call by %.3g (max |y| %.3g)",
              be->name, worst, scale);
done:
    free(host);
    free(one);
    free(three);
    be->free(x);
    be->free(y);
    be->free(b);
    be->free(packed);
    be->free(ws);
}

/* usage: test_backend_ops [--backend NAME]  (default: every backend of the build; a named
 * backend that cannot run here is a skip, exit 77) */
int main(int argc, char **argv)
{
    const char *only = argc == 3 && !strcmp(argv[1], "--backend") ? argv[2] : NULL;
    if (argc != 1 && !only) {
        fprintf(stderr, "usage: test_backend_ops [--backend NAME]\n");
        return 2;
    }
    if (only) {
        const cpdit_backend *be = cpdit_backend_by_name(only);
        char why[256] = "not in this build";
        if (!be || !cpdit_backend_available(be, why, sizeof why)) {
            printf("SKIP: backend %s: %s\n", only, why);
            return 77;
        }
    }
    test_harness_detects();
    int cases = 0;
    for (const backend_op_case *const *c = backend_op_cases(); *c; c++) {
        backend_op_reference_fn ref = backend_op_reference_find((*c)->name);
        CHECK_MSG(ref != NULL, "op case %s has no reference in tests/backend_ops_reference.c",
                  (*c)->name);
        CHECK_MSG((*c)->nshapes >= 1 && (*c)->nshapes <= BACKEND_OP_MAX_SHAPES,
                  "op case %s: %d shapes", (*c)->name, (*c)->nshapes);
        if (!ref)
            continue;
        for (const cpdit_backend *const *b = cpdit_backend_list(); *b; b++) {
            if (only && strcmp(only, (*b)->name))
                continue;
            char why[256];
            if (!cpdit_backend_available(*b, why, sizeof why)) {
                printf("%-20s %-8s skipped: %s\n", (*c)->name, (*b)->name, why);
                continue;
            }
            if ((*c)->supported && !(*c)->supported(*b)) {
                printf("%-20s %-8s skipped: an optional entry the table lacks\n", (*c)->name,
                       (*b)->name);
                continue;
            }
            const cpdit_attention_kernel *const *ks = (*b)->attention_kernels;
            const cpdit_attention_kernel *k = (*c)->per_kernel ? *ks : NULL;
            do {
                const case_errors e = check_case(*b, k, *c, ref, 1);
                if ((*b)->act_dtype == CPDIT_DTYPE_BF16)
                    printf("%-20s %-8s %-18s %d shapes  worst %.3g  (tol %.3g); on the bf16 "
                           "inputs %.3g  (tol %.3g)\n",
                           (*c)->name, (*b)->name, k ? k->name : "-", (*c)->nshapes, e.total,
                           case_tol(*b, k, *c, BF16_STORAGE_TOL), e.storage,
                           case_tol(*b, k, *c, BF16_OUTPUT_TOL));
                else
                    printf("%-20s %-8s %-18s %d shapes  worst %.3g  (tol %.3g)\n", (*c)->name,
                           (*b)->name, k ? k->name : "-", (*c)->nshapes, e.total,
                           case_tol(*b, k, *c, 0));
                cases++;
                k = (*c)->per_kernel ? *++ks : NULL;
            } while (k);
        }
    }
    CHECK(cases > 0);
    for (const cpdit_backend *const *b = cpdit_backend_list(); *b; b++) {
        if ((only && strcmp(only, (*b)->name)) || !cpdit_backend_available(*b, NULL, 0))
            continue;
        test_in_place(*b);
        test_conv_row_ranges(*b);
        test_f32_accumulator(*b);
        if ((*b)->host_memory)
            test_wrong_offsets_fail(*b);
    }
    TEST_MAIN_END();
}
