/* test_attention_cpu.c — the fast CPU attention kernel against the reference, the LSE merge,
 * and the vector exp.
 *
 * Error measure for a tensor: max_i |fast_i - ref_i| / max_i |ref_i| (normalised max error),
 * for out and for lse (lse compared as values; Skv = 0 must give -inf exactly).
 * Tolerances: 1e-5 for fast vs reference (fp32 kernel vs double reference), 1e-6 for the
 * merge of split K/V parts vs the whole computed by the same reference, 2 ulp for exp.
 * Inputs are uniform in [-1, 1] with scale 1/sqrt(D) (typical), plus one case with scores
 * spread over ~±30 (scale 4/sqrt(D) on inputs in [-3, 3]) to exercise the running-max rescale.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/attention_softmax_cpu.h"
#include "kernels/cpu/blas_runtime.h"
#include "tests/test_util.h"

#define TOL_FAST 1e-5
#define TOL_MERGE 1e-6
#define EXP_MAX_ULP 2

static double worst_out = 0.0, worst_lse = 0.0; /* over all check_case() calls */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* uniform in [-1, 1) from a 64-bit LCG's top 24 bits */
static float urand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int64_t)(rng_state >> 40) - (1 << 23)) / (float)(1 << 23);
}

static float *rand_buf(size_t n, float amp)
{
    float *p = malloc(n * sizeof *p + 1);
    for (size_t i = 0; i < n; i++)
        p[i] = amp * urand();
    return p;
}

/* max |a - b| / max |ref| over n values (ref = b); -inf entries must match exactly. */
static double norm_err(const float *a, const float *b, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(b[i]) || isinf(a[i])) {
            if (a[i] != b[i])
                return INFINITY;
            continue;
        }
        const double d = fabs((double)a[i] - (double)b[i]);
        num = d > num ? d : num;
        den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
    }
    return den > 0 ? num / den : num;
}

/* fast vs reference for one shape; amp scales inputs, sfac multiplies 1/sqrt(D). */
static void check_case(int B, int Sq, int Skv, int H, int D, float amp, float sfac)
{
    const size_t nq = (size_t)B * Sq * H * D, nkv = (size_t)B * Skv * H * D;
    const size_t nl = (size_t)B * Sq * H;
    float *q = rand_buf(nq, amp), *k = rand_buf(nkv, amp), *v = rand_buf(nkv, 1.0f);
    float *o_ref = malloc(nq * sizeof(float) + 1), *o = malloc(nq * sizeof(float) + 1);
    float *l_ref = malloc(nl * sizeof(float) + 1), *l = malloc(nl * sizeof(float) + 1);
    const float scale = sfac / sqrtf((float)D);
    cpdit_error err;
    CHECK(attention_cpu_reference(o_ref, l_ref, q, k, v, B, Sq, Skv, H, D, scale, &err) ==
          CPDIT_OK);
    /* poison the output so missed rows show up */
    for (size_t i = 0; i < nq; i++)
        o[i] = NAN;
    for (size_t i = 0; i < nl; i++)
        l[i] = NAN;
    CHECK(attention_cpu_forward(o, l, q, k, v, B, Sq, Skv, H, D, scale, &err) == CPDIT_OK);
    const double eo = norm_err(o, o_ref, nq), el = norm_err(l, l_ref, nl);
    if (getenv("CPDIT_TEST_VERBOSE"))
        fprintf(stderr, "B=%d Sq=%d Skv=%d H=%d D=%d amp=%g: out %.3g lse %.3g\n", B, Sq, Skv, H, D,
                amp, eo, el);
    worst_out = eo > worst_out ? eo : worst_out;
    worst_lse = el > worst_lse ? el : worst_lse;
    CHECK_MSG(eo <= TOL_FAST && el <= TOL_FAST,
              "B=%d Sq=%d Skv=%d H=%d D=%d: out err %.3g lse err %.3g (tol %.0e)", B, Sq, Skv, H, D,
              eo, el, TOL_FAST);
    free(q), free(k), free(v), free(o_ref), free(o), free(l_ref), free(l);
}

static void test_fast_vs_reference(void)
{
    /* (B, Sq, Skv, H, D): head dims 16..256 and odd, lengths 1, primes, below one block
     * (up to 256 queries, fewer when there are few tasks / 512 keys), not multiples of a
     * block, Sq != Skv, Skv = 0, Sq = 0, B = 0 */
    static const int cases[][5] = {
        {1, 1, 1, 1, 16},
        {1, 7, 13, 3, 16},
        {2, 61, 67, 3, 64},
        {1, 64, 64, 1, 64},
        {1, 65, 1031, 1, 64},
        {2, 131, 1, 3, 128},
        {1, 1, 2053, 3, 128},
        {1, 97, 1500, 1, 128},
        {2, 33, 29, 1, 256},
        {1, 70, 1100, 1, 256},
        {1, 37, 41, 3, 20},
        {2, 5, 3, 1, 1},
        {1, 127, 0, 3, 64},
        {2, 3, 0, 1, 20},
        {1, 24, 50, 24, 64},
        {2, 17, 23, 24, 128},
        {1, 0, 5, 2, 16},
        {0, 3, 3, 2, 16},
        /* enough heads that full 256-row query blocks are used: Sq past one block,
         * Skv exactly one key block (512) and one past it */
        {1, 300, 513, 8, 32},
        {1, 257, 512, 4, 64},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4], 1.0f, 1.0f);
    /* large score spread: the running maximum changes between key blocks */
    check_case(1, 70, 2100, 2, 64, 3.0f, 4.0f);
    /* the same results with one and with three worker threads */
    attention_cpu_set_num_threads(1);
    check_case(1, 130, 300, 3, 64, 1.0f, 1.0f);
    attention_cpu_set_num_threads(3);
    check_case(2, 130, 300, 3, 64, 1.0f, 1.0f);
    attention_cpu_set_num_threads(0);
}

static void test_bad_shape(void)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    float x = 0;
    CHECK(attention_cpu_forward(&x, &x, &x, &x, &x, 1, 1, 1, 1, 0, 1.0f, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "D=0");
    CHECK(attention_cpu_reference(&x, &x, &x, &x, &x, 1, -1, 1, 1, 4, 1.0f, &err) ==
          CPDIT_ERR_INPUT);
}

/* Split keys into uneven chunks, compute each with the reference, merge, compare. */
static void test_lse_merge(void)
{
    const int B = 2, Sq = 19, Skv = 101, H = 3, D = 24;
    const int cuts[] = {0, 17, 60, Skv}; /* three uneven chunks */
    const size_t row = (size_t)H * D, nq = (size_t)B * Sq * row, nl = (size_t)B * Sq * H;
    float *q = rand_buf(nq, 1.0f), *k = rand_buf((size_t)B * Skv * row, 2.0f);
    float *v = rand_buf((size_t)B * Skv * row, 1.0f);
    float *o_all = malloc(nq * 4), *l_all = malloc(nl * 4), *o_acc = malloc(nq * 4);
    float *l_acc = malloc(nl * 4), *o_part = malloc(nq * 4), *l_part = malloc(nl * 4);
    const float scale = 1.0f / sqrtf((float)D);
    cpdit_error err;
    CHECK(attention_cpu_reference(o_all, l_all, q, k, v, B, Sq, Skv, H, D, scale, &err) ==
          CPDIT_OK);

    /* start from the empty part: out 0, lse -inf */
    CHECK(attention_cpu_reference(o_acc, l_acc, q, k, v, B, Sq, 0, H, D, scale, &err) == CPDIT_OK);
    for (size_t i = 0; i < nl; i++)
        CHECK(l_acc[i] == -INFINITY);
    for (int c = 0; c < 3; c++) {
        const int n = cuts[c + 1] - cuts[c];
        /* keys [cuts[c], cuts[c+1]) of every batch: copy the chunk into contiguous buffers */
        float *kc = malloc((size_t)B * n * row * 4), *vc = malloc((size_t)B * n * row * 4);
        for (int b = 0; b < B; b++) {
            memcpy(kc + (size_t)b * n * row, k + ((size_t)b * Skv + cuts[c]) * row,
                   (size_t)n * row * 4);
            memcpy(vc + (size_t)b * n * row, v + ((size_t)b * Skv + cuts[c]) * row,
                   (size_t)n * row * 4);
        }
        CHECK(attention_cpu_reference(o_part, l_part, q, kc, vc, B, Sq, n, H, D, scale, &err) ==
              CPDIT_OK);
        attention_lse_merge(o_acc, l_acc, o_part, l_part, nl, D);
        free(kc), free(vc);
    }
    const double eo = norm_err(o_acc, o_all, nq), el = norm_err(l_acc, l_all, nl);
    CHECK_MSG(eo <= TOL_MERGE && el <= TOL_MERGE, "merged 3 chunks: out err %.3g lse err %.3g", eo,
              el);

    /* merging an empty part (lse -inf) changes nothing, bit for bit */
    float *o_copy = malloc(nq * 4), *l_copy = malloc(nl * 4);
    memcpy(o_copy, o_acc, nq * 4);
    memcpy(l_copy, l_acc, nl * 4);
    CHECK(attention_cpu_reference(o_part, l_part, q, k, v, B, Sq, 0, H, D, scale, &err) ==
          CPDIT_OK);
    attention_lse_merge(o_acc, l_acc, o_part, l_part, nl, D);
    CHECK(memcmp(o_acc, o_copy, nq * 4) == 0 && memcmp(l_acc, l_copy, nl * 4) == 0);
    /* merging into an empty part copies the other one */
    attention_lse_merge(o_part, l_part, o_copy, l_copy, nl, D);
    CHECK(memcmp(o_part, o_copy, nq * 4) == 0 && memcmp(l_part, l_copy, nl * 4) == 0);
    /* fast kernel parts merge to the fast kernel whole, too (tolerance of the kernel) */
    float *o_f = malloc(nq * 4), *l_f = malloc(nl * 4);
    CHECK(attention_cpu_forward(o_f, l_f, q, k, v, 1, Sq, 50, H, D, scale, &err) == CPDIT_OK);
    CHECK(attention_cpu_forward(o_part, l_part, q, k + 50 * row, v + 50 * row, 1, Sq, 51, H, D,
                                scale, &err) == CPDIT_OK); /* batch 0 only: rows of b=0 */
    attention_lse_merge(o_f, l_f, o_part, l_part, (size_t)Sq * H, D);
    CHECK(norm_err(o_f, o_all, (size_t)Sq * row) <= TOL_FAST);
    free(o_f), free(l_f), free(o_copy), free(l_copy);
    free(q), free(k), free(v), free(o_all), free(l_all), free(o_acc), free(l_acc), free(o_part),
        free(l_part);
}

/* distance in units in the last place between two positive floats */
static long ulp_diff(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return labs((long)ia - (long)ib);
}

static void test_exp(void)
{
    long worst = 0;
    float worst_x = 0;
    for (float x = ATTN_EXP_MIN_ARG; x <= 0.0f; x += 0.00731f) {
        const float want = (float)exp((double)x);
        const long u = ulp_diff(attention_fast_expf(x), want);
        if (u > worst)
            worst = u, worst_x = x;
    }
    CHECK_MSG(worst <= EXP_MAX_ULP, "scalar fast exp: %ld ulp at x=%g", worst, worst_x);
    CHECK(attention_fast_expf(ATTN_EXP_MIN_ARG - 1.0f) == 0.0f);
    CHECK(attention_fast_expf(-INFINITY) == 0.0f);
    CHECK(attention_fast_expf(0.0f) == 1.0f);

    /* the vector path (whatever this CPU uses) over a row of odd length */
    enum { N = 1237 };
    float x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = y[i] = -40.0f * (float)i / N + 0.5f * urand();
    const float m = attention_row_max(x, N);
    float mref = x[0];
    for (int i = 1; i < N; i++)
        mref = x[i] > mref ? x[i] : mref;
    CHECK(m == mref);
    const float s = attention_row_exp_sum(y, N, m);
    double sref = 0;
    long vworst = 0;
    for (int i = 0; i < N; i++) {
        const float arg = x[i] - m; /* the kernel's argument, rounded to fp32 */
        const float want = (float)exp((double)arg);
        sref += want;
        const long u = ulp_diff(y[i], want);
        vworst = u > vworst ? u : vworst;
    }
    CHECK_MSG(vworst <= EXP_MAX_ULP, "%s exp: %ld ulp", attention_softmax_isa(), vworst);
    CHECK_NEAR(s, sref, 1e-6 * sref);
}

int main(int argc, char **argv)
{
    blas_runtime_ensure_best_core(argc, argv);
    /* every softmax implementation this CPU can run: the full set with the best, a few cases
     * with the others */
    static const char *isas[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        if (attention_softmax_set_isa(isas[i]) != 0)
            continue;
        fprintf(stderr, "softmax rows: %s\n", attention_softmax_isa());
        test_exp();
        check_case(2, 61, 1031, 3, 64, 1.0f, 1.0f);
        check_case(1, 37, 41, 3, 20, 1.0f, 1.0f);
        check_case(1, 70, 2100, 2, 64, 3.0f, 4.0f);
    }
    CHECK(attention_softmax_set_isa("no-such-isa") == -1);
    CHECK(attention_softmax_set_isa("auto") == 0);
    fprintf(stderr, "softmax rows: %s (automatic)\n", attention_softmax_isa());
    test_fast_vs_reference();
    test_bad_shape();
    test_lse_merge();
    fprintf(stderr, "worst normalised error fast vs reference: out %.3g, lse %.3g\n", worst_out,
            worst_lse);
    TEST_MAIN_END();
}
