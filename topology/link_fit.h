/* link_fit.h — the alpha-beta (latency + bandwidth) model of a link class, fitted to
 * measured point-to-point times:
 *
 *     t(n) = alpha_s + n / beta_Bps          n: message bytes, t: one-way time in seconds
 *
 * Fit: least squares on relative residuals (weights 1/t_i^2), so that 8-byte latencies and
 * 16 MiB transfers count alike (an unweighted fit lets the largest messages decide alpha,
 * which then comes out meaningless or negative). Guards, in order:
 *   - alpha < 0: alpha = 0 and beta refitted through the origin (same weights);
 *   - slope <= 0 (time does not grow with size, e.g. one size only): beta = largest n /
 *     its time minus alpha, or when that is not positive (the largest message was no slower
 *     than the latency: noise on a loaded machine) largest n / its whole time, a lower
 *     bound; 0 (unknown) only when every size is 0 bytes.
 * At least one sample with t > 0 is needed.
 */
#ifndef CPDIT_LINK_FIT_H
#define CPDIT_LINK_FIT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct link_fit {
    double alpha_s;  /* latency, seconds */
    double beta_Bps; /* bandwidth, bytes per second (0 = unknown) */
    int samples;     /* samples used */
} link_fit;

/* Fit bytes[i], seconds[i], i < n. Samples with seconds <= 0 are skipped.
 * Returns 0, or -1 when no usable sample is left (fit zeroed). */
int link_fit_alpha_beta(const double *bytes, const double *seconds, size_t n, link_fit *fit);

/* The model's time for n bytes (alpha when beta is unknown). */
double link_fit_time(const link_fit *fit, double bytes);

#ifdef __cplusplus
}
#endif
#endif
