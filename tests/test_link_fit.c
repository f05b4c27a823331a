/* test_link_fit.c — the alpha-beta fit (topology/link_fit.h) on synthetic link tables:
 * exact data, data with +-5 % multiplicative noise, the guards (negative intercept, one size,
 * no usable sample). Tolerances are stated per check. */
#include <stdint.h>

#include "tests/test_util.h"
#include "topology/link_fit.h"

#define N_SIZES 12

/* Deterministic noise in [-amp, amp] (LCG). */
static double noise(uint64_t *s, double amp)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return amp * (2.0 * (double)(*s >> 11) / 9007199254740992.0 - 1.0);
}

static void sweep(double *x)
{
    for (int i = 0; i < N_SIZES; i++)
        x[i] = (double)(8ull << (2 * i)); /* 8 B .. 32 MiB, x4 */
}

int main(void)
{
    double x[N_SIZES], y[N_SIZES];
    link_fit f;
    sweep(x);

    /* exact: shared memory (1 us, 10 GB/s) and a slow network (500 us, 125 MB/s) */
    const double alphas[] = {1e-6, 5e-4}, betas[] = {1e10, 1.25e8};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < N_SIZES; i++)
            y[i] = alphas[k] + x[i] / betas[k];
        CHECK(link_fit_alpha_beta(x, y, N_SIZES, &f) == 0);
        CHECK(f.samples == N_SIZES);
        CHECK_NEAR(f.alpha_s / alphas[k], 1.0, 1e-6);
        CHECK_NEAR(f.beta_Bps / betas[k], 1.0, 1e-6);
        CHECK_NEAR(link_fit_time(&f, 1e6) / (alphas[k] + 1e6 / betas[k]), 1.0, 1e-6);
    }

    /* +-5 % noise on every time: alpha and beta within 10 % */
    uint64_t seed = 42;
    for (int i = 0; i < N_SIZES; i++)
        y[i] = (2e-6 + x[i] / 5e9) * (1.0 + noise(&seed, 0.05));
    CHECK(link_fit_alpha_beta(x, y, N_SIZES, &f) == 0);
    CHECK_NEAR(f.alpha_s / 2e-6, 1.0, 0.10);
    CHECK_NEAR(f.beta_Bps / 5e9, 1.0, 0.10);

    /* relative weighting: an unweighted fit of these points would put alpha far off; a
     * 20 % error on the largest point must not move alpha by more than 25 % */
    for (int i = 0; i < N_SIZES; i++)
        y[i] = 3e-6 + x[i] / 1e10;
    y[N_SIZES - 1] *= 1.2;
    CHECK(link_fit_alpha_beta(x, y, N_SIZES, &f) == 0);
    CHECK_NEAR(f.alpha_s / 3e-6, 1.0, 0.25);

    /* negative intercept: times proportional to size minus a bit -> alpha clamped to 0,
     * beta through the origin within 5 % */
    for (int i = 0; i < N_SIZES; i++)
        y[i] = x[i] / 1e9 - 1e-9;
    y[0] = 8.0 / 1e9; /* keep every time positive */
    CHECK(link_fit_alpha_beta(x, y, N_SIZES, &f) == 0);
    CHECK(f.alpha_s >= 0);
    CHECK_NEAR(f.beta_Bps / 1e9, 1.0, 0.05);

    /* one size only: alpha = mean time minus nothing known -> beta from the point */
    double x1[3] = {4096, 4096, 4096}, y1[3] = {1e-5, 1.2e-5, 1.1e-5};
    CHECK(link_fit_alpha_beta(x1, y1, 3, &f) == 0);
    CHECK(f.samples == 3);
    CHECK(f.alpha_s > 0);
    CHECK(f.beta_Bps >= 0);

    /* the largest message no slower than the small ones (a loaded machine's noise): still
     * a positive bandwidth, the lower bound largest n / its time (the planner refuses 0) */
    double x2[3] = {8, 4096, 2097152}, y2[3] = {4e-3, 3e-3, 2e-3};
    CHECK(link_fit_alpha_beta(x2, y2, 3, &f) == 0);
    CHECK(f.alpha_s > 0 && f.beta_Bps > 0);
    CHECK(f.beta_Bps >= 2097152 / 2e-3 * (1 - 1e-9));

    /* no usable sample */
    double y0[3] = {0, -1, 0};
    CHECK(link_fit_alpha_beta(x1, y0, 3, &f) == -1);
    CHECK(f.samples == 0 && f.alpha_s == 0 && f.beta_Bps == 0);
    TEST_MAIN_END();
}
