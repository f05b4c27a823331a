/* tune_stats.h — the statistics `cpdit tune` decides with: median, min, max and a 95 %
 * confidence interval of a candidate's median step time (distribution-free: two order
 * statistics of the sorted samples, so that the rare descheduled step of a shared machine
 * neither moves the median nor widens a normal-theory interval), when that interval is
 * tight enough to stop measuring, and whether two candidates' intervals overlap (then they
 * are tied and the simpler grid wins).
 */
#ifndef CPDIT_TUNE_STATS_H
#define CPDIT_TUNE_STATS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Stop measuring a candidate when its interval's half-width is at most this part of its
 * median (and it has at least TUNE_STATS_MIN_SAMPLES samples). */
#define TUNE_STATS_REL_HALF_WIDTH 0.05
#define TUNE_STATS_MIN_SAMPLES 3

typedef struct tune_stats {
    int n;
    double median, min, max, mean, sd; /* seconds */
    double lo, hi;                     /* 95 % interval of the median ([min, max] below 6
                                          samples) */
} tune_stats;

/* Summary of v[0..n) (n >= 1). */
void tune_stats_of(const double *v, int n, tune_stats *out);
/* 1 when st is tight: n >= TUNE_STATS_MIN_SAMPLES and (hi - lo) / 2 <= rel * median. */
int tune_stats_tight(const tune_stats *st, double rel);
/* 1 when [a_lo, a_hi] and [b_lo, b_hi] overlap. */
int tune_stats_overlap(double a_lo, double a_hi, double b_lo, double b_hi);

#ifdef __cplusplus
}
#endif
#endif
