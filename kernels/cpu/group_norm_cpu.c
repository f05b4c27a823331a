/* group_norm_cpu.c — GroupNorm with a fused activation, and the activations (see
 * group_norm_cpu.h). */
#include "kernels/cpu/group_norm_cpu.h"

#include <math.h>
#include <string.h>

/* torch.nn.functional.softplus's threshold: above it softplus(x) = x. */
#define SOFTPLUS_THRESHOLD 20.0f

int cpu_activation_from_name(const char *name)
{
    if (strcmp(name, "silu") == 0 || strcmp(name, "swish") == 0)
        return CPU_ACT_SILU;
    if (strcmp(name, "gelu") == 0)
        return CPU_ACT_GELU;
    if (strcmp(name, "relu") == 0)
        return CPU_ACT_RELU;
    if (strcmp(name, "mish") == 0)
        return CPU_ACT_MISH;
    return -1;
}

static float act_one(float v, cpu_activation act)
{
    switch (act) {
    case CPU_ACT_SILU:
        return v / (1.0f + expf(-v));
    case CPU_ACT_GELU:
        return 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
    case CPU_ACT_RELU:
        return v > 0.0f ? v : 0.0f;
    case CPU_ACT_MISH: {
        const float sp = v > SOFTPLUS_THRESHOLD ? v : log1pf(expf(v));
        return v * tanhf(sp);
    }
    case CPU_ACT_NONE:
    default:
        return v;
    }
}

void activation_cpu(float *x, size_t n, cpu_activation act)
{
    if (act == CPU_ACT_NONE)
        return;
    for (size_t i = 0; i < n; i++)
        x[i] = act_one(x[i], act);
}

void group_norm_cpu(float *y, const float *x, const float *gamma, const float *beta, int B, int C,
                    size_t S, int G, float eps, cpu_activation act)
{
    const int cpg = C / G; /* channels per group */
    const size_t count = (size_t)cpg * S;
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) {
            const size_t base = ((size_t)b * C + (size_t)g * cpg) * S;
            const float *xs = x + base;
            double sum = 0.0;
            for (size_t i = 0; i < count; i++)
                sum += xs[i];
            const double mean = sum / (double)count;
            double sq = 0.0;
            for (size_t i = 0; i < count; i++) {
                const double d = xs[i] - mean;
                sq += d * d;
            }
            const double rstd = 1.0 / sqrt(sq / (double)count + (double)eps);
            for (int k = 0; k < cpg; k++) {
                const int c = g * cpg + k;
                /* y = x·scale + shift with scale = rstd·gamma, shift = beta - mean·scale */
                const float scale = (float)(rstd * gamma[c]);
                const float shift = (float)(beta[c] - mean * rstd * gamma[c]);
                const float *xc = xs + (size_t)k * S;
                float *yc = y + base + (size_t)k * S;
                for (size_t i = 0; i < S; i++)
                    yc[i] = act_one(xc[i] * scale + shift, act);
            }
        }
}
