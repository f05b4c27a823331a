/* activations_cpu.c — the activations by kind (cpdit_act): GELU (tanh approximation), SiLU and
 * quick GELU through a vectorisable exp, exact GELU through erff, ReLU; and the table's act
 * dispatcher.
 *
 * The sigmoid ones are written as x * sigmoid(z):
 *   silu(x)       = x / (1 + e^-x)
 *   quick_gelu(x) = x / (1 + e^(-1.702 x))
 *   gelu_tanh(x)  = 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
 * (since 0.5 (1 + tanh u) = sigmoid(2u)), which has no cancellation for small u and saturates
 * cleanly: e^(-2u) -> inf gives 0, -> 0 gives x.
 *
 * exp: Cody-Waite reduction x = n ln2 + r (ln2 split in a part exact in fp32 and a small
 * remainder), a degree-6 Taylor/Cephes polynomial for e^r on |r| <= ln2/2, then 2^n built in
 * the exponent bits. The argument is clamped to [EXP_MIN_ARG, EXP_MAX_ARG] so that 2^n stays a
 * normal float: results saturate at about 1e-38 and 2e38 instead of 0 and inf, which is exact
 * enough for x / (1 + e^z).
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/backend_cpu.h"

#define EXP_MIN_ARG (-87.3f)
#define EXP_MAX_ARG (88.3f)
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f      /* ln 2 rounded to 9 significant bits: n * LN2_HI is exact */
#define LN2_LO (-2.12194440e-4f) /* ln 2 - LN2_HI */
#define ROUND_MAGIC 12582912.0f  /* 1.5 * 2^23: adding and subtracting it rounds to an integer */
#define F32_EXP_BIAS 127
#define F32_MANT_BITS 23
/* sqrt(2/pi) and the cubic coefficient of the tanh approximation (torch's gelu "tanh"). */
#define GELU_SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_CUBIC 0.044715f
/* QuickGELU's sigmoid slope (OpenAI CLIP, transformers' QuickGELUActivation). */
#define QUICK_GELU_SLOPE 1.702f

/* Cephes expf polynomial: e^r ~ 1 + r + r^2 (P0 r^4... ) on |r| <= ln2/2. */
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

static inline __attribute__((always_inline)) float exp_core(float x)
{
    x = x < EXP_MIN_ARG ? EXP_MIN_ARG : x;
    x = x > EXP_MAX_ARG ? EXP_MAX_ARG : x;
    const float fn = (x * LOG2E + ROUND_MAGIC) - ROUND_MAGIC;
    const float r = (x - fn * LN2_HI) - fn * LN2_LO;
    const float r2 = r * r;
    float p = EXP_P0;
    p = p * r + EXP_P1;
    p = p * r + EXP_P2;
    p = p * r + EXP_P3;
    p = p * r + EXP_P4;
    p = p * r + EXP_P5;
    p = p * r2 + r + 1.0f;
    const int32_t n = (int32_t)fn;
    const uint32_t bits = (uint32_t)(n + F32_EXP_BIAS) << F32_MANT_BITS;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

float cpu_fast_expf(float x)
{
    return exp_core(x);
}

static inline __attribute__((always_inline)) float silu_one(float x)
{
    return x / (1.0f + exp_core(-x));
}

static inline __attribute__((always_inline)) float gelu_one(float x)
{
    const float u = GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    return x / (1.0f + exp_core(-2.0f * u));
}

static inline __attribute__((always_inline)) float quick_gelu_one(float x)
{
    return x / (1.0f + exp_core(-QUICK_GELU_SLOPE * x));
}

/* Apply one of the *_one functions over n floats in CPU_LANES blocks (vectorised by GCC). */
#define CPU_MAP(one, y, x, n)                                                                 \
    do {                                                                                      \
        size_t i_ = 0;                                                                        \
        for (; i_ + CPU_LANES <= (n); i_ += CPU_LANES) {                                      \
            float t_[CPU_LANES];                                                              \
            for (int l_ = 0; l_ < CPU_LANES; l_++)                                            \
                t_[l_] = one((x)[i_ + l_]);                                                   \
            for (int l_ = 0; l_ < CPU_LANES; l_++)                                            \
                (y)[i_ + l_] = t_[l_];                                                        \
        }                                                                                     \
        for (; i_ < (n); i_++)                                                                \
            (y)[i_] = one((x)[i_]);                                                           \
    } while (0)

/* y, x: n floats (y may alias x). */
CPU_KERNEL_CLONES
void cpu_quick_gelu(float *y, const float *x, size_t n)
{
    CPU_MAP(quick_gelu_one, y, x, n);
}

/* y = 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2): the erfc form keeps the relative
 * precision for negative x, where 1 + erf cancels. y, x: n floats (y may alias x). */
void cpu_gelu_erf(float *y, const float *x, size_t n)
{
    const float inv_sqrt2 = (float)M_SQRT1_2;
    for (size_t i = 0; i < n; i++) {
        const float a = x[i];
        y[i] = 0.5f * a * erfcf(-a * inv_sqrt2);
    }
}

/* y = max(x, 0); y, x: n floats (y may alias x). */
CPU_KERNEL_CLONES
void cpu_relu(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void cpu_act(cpdit_act kind, float *y, const float *x, size_t n)
{
    switch (kind) {
    case CPDIT_ACT_GELU_TANH:
        cpu_gelu_tanh(y, x, n);
        break;
    case CPDIT_ACT_GELU_ERF:
        cpu_gelu_erf(y, x, n);
        break;
    case CPDIT_ACT_QUICK_GELU:
        cpu_quick_gelu(y, x, n);
        break;
    case CPDIT_ACT_SILU:
        cpu_silu(y, x, n);
        break;
    case CPDIT_ACT_RELU:
        cpu_relu(y, x, n);
        break;
    case CPDIT_ACT_MISH: /* x tanh(softplus(x)), softplus through log1p for large |x| */
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] * tanhf(x[i] > 20.0f ? x[i] : log1pf(expf(x[i])));
        break;
    case CPDIT_ACT_NONE:
        if (y != x)
            memmove(y, x, n * sizeof(float));
        break;
    case CPDIT_ACT_COUNT:
        break;
    }
}

/* y, x: n floats (y may alias x). */
CPU_KERNEL_CLONES
void cpu_silu(float *y, const float *x, size_t n)
{
    size_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        float t[CPU_LANES];
        for (int l = 0; l < CPU_LANES; l++)
            t[l] = silu_one(x[i + l]);
        for (int l = 0; l < CPU_LANES; l++)
            y[i + l] = t[l];
    }
    for (; i < n; i++)
        y[i] = silu_one(x[i]);
}

/* y, x: n floats (y may alias x). */
CPU_KERNEL_CLONES
void cpu_gelu_tanh(float *y, const float *x, size_t n)
{
    size_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        float t[CPU_LANES];
        for (int l = 0; l < CPU_LANES; l++)
            t[l] = gelu_one(x[i + l]);
        for (int l = 0; l < CPU_LANES; l++)
            y[i + l] = t[l];
    }
    for (; i < n; i++)
        y[i] = gelu_one(x[i]);
}
