/* test_tune_stats.c — the statistics `cpdit tune` decides with (topology/tune_stats.h):
 *   - median, min, max, n of known samples; the 95 % interval of the median is the order
 *     statistics x_(floor(n/2 - 0.98 sqrt n)) .. x_(ceil(1 + n/2 + 0.98 sqrt n)): for 0..99
 *     that is [39, 60], for 9 samples [min, max], below 6 samples [min, max];
 *   - coverage: over 4000 draws of 25 exponential samples (a seeded generator) the interval
 *     holds the true median ln 2 in 95-99.5 % of the draws (nominal 95 %, conservative: the
 *     exact binomial coverage of these order statistics for n = 25 is 0.985);
 *   - tight: 5 equal samples are, 3 spread ones are not, 2 samples never are;
 *   - overlap of intervals, touching ends included.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "test_util.h"
#include "topology/tune_stats.h"

#define COVERAGE_DRAWS 4000
#define COVERAGE_N 25

static double uniform01(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return ((*s >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
}

int main(void)
{
    double v[100];
    tune_stats st;
    for (int i = 0; i < 100; i++)
        v[i] = 99 - i; /* unsorted on purpose */
    tune_stats_of(v, 100, &st);
    CHECK(st.n == 100 && st.min == 0 && st.max == 99);
    CHECK_NEAR(st.median, 49.5, 1e-12);
    CHECK_NEAR(st.mean, 49.5, 1e-12);
    CHECK(st.lo == 39 && st.hi == 60);
    double nine[9] = {5, 3, 9, 1, 7, 2, 8, 4, 6};
    tune_stats_of(nine, 9, &st);
    CHECK(st.median == 5 && st.lo == 1 && st.hi == 9);
    double few[4] = {2, 1, 4, 3};
    tune_stats_of(few, 4, &st);
    CHECK(st.median == 2.5 && st.lo == 1 && st.hi == 4);
    tune_stats_of(few, 1, &st);
    CHECK(st.n == 1 && st.lo == 2 && st.hi == 2 && st.median == 2);

    uint64_t seed = 27;
    int hits = 0;
    for (int d = 0; d < COVERAGE_DRAWS; d++) {
        double x[COVERAGE_N];
        for (int i = 0; i < COVERAGE_N; i++)
            x[i] = -log(uniform01(&seed)); /* exponential(1): median ln 2 */
        tune_stats_of(x, COVERAGE_N, &st);
        hits += st.lo <= M_LN2 && M_LN2 <= st.hi;
    }
    const double coverage = (double)hits / COVERAGE_DRAWS;
    printf("coverage of the median's 95 %% interval, n = %d: %.3f\n", COVERAGE_N, coverage);
    CHECK(coverage >= 0.95 && coverage <= 0.995); /* exact: P(7 <= Bin(25, 1/2) <= 18) = 0.985 */

    double flat[5] = {1, 1, 1, 1, 1}, spread[3] = {1, 2, 3};
    tune_stats_of(flat, 5, &st);
    CHECK(tune_stats_tight(&st, TUNE_STATS_REL_HALF_WIDTH));
    tune_stats_of(spread, 3, &st);
    CHECK(!tune_stats_tight(&st, TUNE_STATS_REL_HALF_WIDTH));
    tune_stats_of(flat, 2, &st);
    CHECK(!tune_stats_tight(&st, TUNE_STATS_REL_HALF_WIDTH)); /* too few samples */

    CHECK(tune_stats_overlap(1, 2, 2, 3));
    CHECK(tune_stats_overlap(1, 5, 2, 3));
    CHECK(!tune_stats_overlap(1, 2, 2.001, 3));
    CHECK(!tune_stats_overlap(4, 5, 1, 3));
    TEST_MAIN_END();
}
