/* norms_cpu.c — LayerNorm and RMSNorm over the last dimension (kernels/backend.h).
 *
 * Row statistics are summed in CPU_LANES partial sums (vector lanes), then the lanes are
 * added: a fixed summation order, the same on every rank, close to torch's blocked sums.
 * The variance is computed in a second pass around the mean (no cancellation).
 */
#include "config.h"

#include <math.h>

#include "kernels/cpu/backend_cpu.h"

/* sum of x[0..n) in lanes. */
static inline __attribute__((always_inline)) float lane_sum(const float *x, int n)
{
    float acc[CPU_LANES] = {0};
    int i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++)
            acc[l] += x[i + l];
    float s = 0.0f;
    for (int l = 0; l < CPU_LANES; l++)
        s += acc[l];
    for (; i < n; i++)
        s += x[i];
    return s;
}

/* sum of (x[i] - c)^2 over i in [0, n), in lanes. */
static inline __attribute__((always_inline)) float lane_sumsq(const float *x, int n, float c)
{
    float acc[CPU_LANES] = {0};
    int i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++) {
            const float d = x[i + l] - c;
            acc[l] += d * d;
        }
    float s = 0.0f;
    for (int l = 0; l < CPU_LANES; l++)
        s += acc[l];
    for (; i < n; i++) {
        const float d = x[i] - c;
        s += d * d;
    }
    return s;
}

/* y = (x - mean) * rstd * gamma + beta for one row; gamma/beta may be NULL. */
static inline __attribute__((always_inline)) void normalize_row(float *y, const float *x, int n, float mean, float rstd,
                                 const float *gamma, const float *beta)
{
    if (gamma && beta) {
        for (int i = 0; i < n; i++)
            y[i] = (x[i] - mean) * rstd * gamma[i] + beta[i];
    } else if (gamma) {
        for (int i = 0; i < n; i++)
            y[i] = (x[i] - mean) * rstd * gamma[i];
    } else if (beta) {
        for (int i = 0; i < n; i++)
            y[i] = (x[i] - mean) * rstd + beta[i];
    } else {
        for (int i = 0; i < n; i++)
            y[i] = (x[i] - mean) * rstd;
    }
}

/* x, y (rows, dim); gamma, beta (dim) or NULL. Biased variance, as torch.nn.LayerNorm. */
CPU_KERNEL_CLONES
void cpu_layer_norm(float *y, const float *x, const float *gamma, const float *beta,
                    size_t rows, int dim, float eps)
{
    if (dim <= 0)
        return;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * (size_t)dim;
        float *yr = y + r * (size_t)dim;
        const float mean = lane_sum(xr, dim) / (float)dim;
        const float var = lane_sumsq(xr, dim, mean) / (float)dim;
        const float rstd = 1.0f / sqrtf(var + eps);
        normalize_row(yr, xr, dim, mean, rstd, gamma, beta);
    }
}

/* x, y (rows, dim); weight (dim) or NULL: y = x / sqrt(mean(x^2) + eps) * weight. */
CPU_KERNEL_CLONES
void cpu_rms_norm(float *y, const float *x, const float *weight, size_t rows, int dim,
                  float eps)
{
    if (dim <= 0)
        return;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * (size_t)dim;
        float *yr = y + r * (size_t)dim;
        const float ms = lane_sumsq(xr, dim, 0.0f) / (float)dim;
        const float rstd = 1.0f / sqrtf(ms + eps);
        normalize_row(yr, xr, dim, 0.0f, rstd, weight, NULL);
    }
}
