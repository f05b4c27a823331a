/* tune_stats.c — median, spread and the 95 % interval of the median of tune's samples
 * (tune_stats.h). */
#include "topology/tune_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TUNE_STATS_MAX_N 1024
#define TUNE_STATS_Z95 1.959964 /* the normal quantile of a two-sided 95 % interval */
/* Below this many samples the distribution-free interval of the median is [min, max]. */
#define TUNE_STATS_MIN_ORDER_N 6

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void tune_stats_of(const double *v, int n, tune_stats *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1)
        return;
    if (n > TUNE_STATS_MAX_N)
        n = TUNE_STATS_MAX_N;
    double t[TUNE_STATS_MAX_N], sum = 0;
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    for (int i = 0; i < n; i++)
        sum += t[i];
    out->n = n;
    out->min = t[0];
    out->max = t[n - 1];
    out->median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    out->mean = sum / n;
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (t[i] - out->mean) * (t[i] - out->mean);
    out->sd = n > 1 ? sqrt(ss / (n - 1)) : 0;
    if (n < TUNE_STATS_MIN_ORDER_N) {
        out->lo = out->min;
        out->hi = out->max;
        return;
    }
    /* order statistics r_lo, r_hi (1-based) with P(x_(r_lo) <= median <= x_(r_hi)) ~ 95 %:
     * the binomial(n, 1/2) count below the median, normal approximation */
    const double h = 0.5 * TUNE_STATS_Z95 * sqrt((double)n);
    int lo = (int)floor(0.5 * n - h), hi = (int)ceil(1.0 + 0.5 * n + h);
    lo = lo < 1 ? 1 : lo;
    hi = hi > n ? n : hi;
    out->lo = t[lo - 1];
    out->hi = t[hi - 1];
}

int tune_stats_tight(const tune_stats *st, double rel)
{
    return st->n >= TUNE_STATS_MIN_SAMPLES && 0.5 * (st->hi - st->lo) <= rel * st->median;
}

int tune_stats_overlap(double a_lo, double a_hi, double b_lo, double b_hi)
{
    return a_lo <= b_hi && b_lo <= a_hi;
}
