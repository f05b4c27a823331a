/* group_norm_cpu.h — GroupNorm (torch.nn.GroupNorm, affine) with an optional activation after
 * it, and the activations AutoencoderKL's act_fn names.
 *
 * Layout: x and y (B, C, S) fp32 contiguous, S = H·W spatial positions; C divisible by G.
 * For each batch b and group g (channels g·C/G .. (g+1)·C/G - 1, all S positions each):
 *   mean, var = biased mean and variance over the group's C/G·S values (double accumulation,
 *   two passes), y = (x - mean) / sqrt(var + eps) · gamma[c] + beta[c], then act(y).
 * y may equal x (in place).
 */
#ifndef CPDIT_GROUP_NORM_CPU_H
#define CPDIT_GROUP_NORM_CPU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpu_activation {
    CPU_ACT_NONE = 0,
    CPU_ACT_SILU, /* x · sigmoid(x)  ("silu", "swish") */
    CPU_ACT_GELU, /* x · Φ(x), exact erf form (torch.nn.GELU()) */
    CPU_ACT_RELU, /* max(x, 0) */
    CPU_ACT_MISH  /* x · tanh(softplus(x)) */
} cpu_activation;

/* The activation diffusers' get_activation(name) returns, or -1 for an unknown name. */
int cpu_activation_from_name(const char *name);

/* x[i] = act(x[i]), i < n. */
void activation_cpu(float *x, size_t n, cpu_activation act);

void group_norm_cpu(float *y, const float *x, const float *gamma, const float *beta, int B, int C,
                    size_t S, int G, float eps, cpu_activation act);

#ifdef __cplusplus
}
#endif
#endif
