/* tune_stats.c — median, spread and 95 % intervals of tune's samples (tune_stats.h). */
#include "topology/tune_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TUNE_STATS_MAX_N 1024
#define TUNE_STATS_Z95 1.959964 /* the normal quantile, df = infinity */

/* t_{0.975, df} for df 1..30. */
static const double t95[30] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                               2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                               2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                               2.060,  2.056, 2.052, 2.048, 2.045, 2.042};

double tune_stats_t95(int df)
{
    if (df < 1)
        return INFINITY;
    return df <= 30 ? t95[df - 1] : TUNE_STATS_Z95 + 2.4 / df; /* within 0.2 % above 30 */
}

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
    const double half = n > 1 ? tune_stats_t95(n - 1) * out->sd / sqrt((double)n) : 0;
    out->lo = out->mean - half;
    out->hi = out->mean + half;
}

int tune_stats_tight(const tune_stats *st, double rel)
{
    return st->n >= TUNE_STATS_MIN_SAMPLES && 0.5 * (st->hi - st->lo) <= rel * st->mean;
}

int tune_stats_overlap(double a_lo, double a_hi, double b_lo, double b_hi)
{
    return a_lo <= b_hi && b_lo <= a_hi;
}
