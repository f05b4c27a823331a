/* torch_rng.c — PyTorch's CPU generator and its float32 randn, reproduced bit for bit.
 *
 * The AVX2 kernel is emulated one lane at a time. Every float operation below is one rounding,
 * in the order PyTorch's AVX2 code performs them; where GCC fused a multiply and an add in
 * PyTorch's binaries (it builds with -mfma and contracts vector mul+add into FMA), fmaf() is
 * written out. Which pairs are fused was established against Debian's python3-torch 1.13
 * (GCC 12): it fuses every multiply whose only use is an add, taking the first such multiply
 * in program order. Any other fusing changes about 1 value in 100 by one ulp, which the tests
 * catch. So this file must not let the C compiler fuse on its own: */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "lib/pipeline/torch_rng.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- MT19937 */

#define MT_SHIFT_M 397                /* the "M" offset of the recurrence */
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UPPER_MASK 0x80000000u
#define MT_LOWER_MASK 0x7fffffffu
#define MT_INIT_MULT 1812433253u      /* init_genrand's multiplier */
#define MT_TEMPER_B 0x9d2c5680u
#define MT_TEMPER_C 0xefc60000u

void torch_generator_init(torch_generator *g, uint64_t seed)
{
    g->seed = seed;
    g->state[0] = (uint32_t)(seed & 0xffffffffu); /* PyTorch keeps only the low 32 bits */
    for (uint32_t j = 1; j < TORCH_MT_STATE_N; j++) {
        uint32_t prev = g->state[j - 1];
        g->state[j] = MT_INIT_MULT * (prev ^ (prev >> 30)) + j;
    }
    g->left = 1; /* the first draw twists */
    g->next = 0;
    g->has_next_double_normal = 0;
    g->next_double_normal = 0.0;
}

static uint32_t mt_twist(uint32_t u, uint32_t v)
{
    uint32_t mixed = (u & MT_UPPER_MASK) | (v & MT_LOWER_MASK);
    return (mixed >> 1) ^ ((v & 1u) ? MT_MATRIX_A : 0u);
}

/* Regenerate all 624 words (state[i] from state[i+M], state[i], state[i+1], indices mod N). */
static void mt_next_state(torch_generator *g)
{
    uint32_t *s = g->state;
    const int n = TORCH_MT_STATE_N, m = MT_SHIFT_M;
    int i = 0;
    for (; i < n - m; i++)
        s[i] = s[i + m] ^ mt_twist(s[i], s[i + 1]);
    for (; i < n - 1; i++)
        s[i] = s[i + m - n] ^ mt_twist(s[i], s[i + 1]);
    s[n - 1] = s[m - 1] ^ mt_twist(s[n - 1], s[0]);
    g->left = n;
    g->next = 0;
}

uint32_t torch_generator_random(torch_generator *g)
{
    if (--g->left == 0)
        mt_next_state(g);
    uint32_t y = g->state[g->next++];
    y ^= y >> 11;
    y ^= (y << 7) & MT_TEMPER_B;
    y ^= (y << 15) & MT_TEMPER_C;
    y ^= y >> 18;
    return y;
}

uint64_t torch_generator_random64(torch_generator *g)
{
    uint64_t hi = torch_generator_random(g);
    uint64_t lo = torch_generator_random(g);
    return (hi << 32) | lo;
}

/* ---------------------------------------------------------------- uniform and scalar normal */

#define FLOAT_RANDOM_BITS 24  /* float mantissa digits */
#define DOUBLE_RANDOM_BITS 53 /* double mantissa digits */

float torch_uniform_f32(torch_generator *g)
{
    const uint32_t mask = (1u << FLOAT_RANDOM_BITS) - 1u;
    const float scale = 1.0f / (float)(1u << FLOAT_RANDOM_BITS);
    return (float)(torch_generator_random(g) & mask) * scale; /* exact */
}

double torch_uniform_f64(torch_generator *g)
{
    const uint64_t mask = (UINT64_C(1) << DOUBLE_RANDOM_BITS) - 1u;
    const double scale = 1.0 / (double)(UINT64_C(1) << DOUBLE_RANDOM_BITS);
    return (double)(torch_generator_random64(g) & mask) * scale; /* exact */
}

static const double TORCH_PI = 3.14159265358979323846; /* c10::pi<double> */

double torch_normal_f64(torch_generator *g)
{
    if (g->has_next_double_normal) {
        g->has_next_double_normal = 0;
        return g->next_double_normal;
    }
    const double u1 = torch_uniform_f64(g);
    const double u2 = torch_uniform_f64(g);
    const double r = sqrt(-2.0 * log1p(-u2));
    const double theta = 2.0 * TORCH_PI * u1;
    g->next_double_normal = r * sin(theta);
    g->has_next_double_normal = 1;
    return r * cos(theta);
}

/* ---------------------------------------------------------------- AVX2 kernel, one lane */

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

#define F32_EXP_MASK 0x7f800000u
#define F32_SIGN_MASK 0x80000000u
#define F32_MIN_NORMAL_BITS 0x00800000u
#define F32_EXP_BIAS 127
#define F32_MANT_BITS 23

/* Cephes logf coefficients as avx_mathfun.h uses them (float constants). */
static const float LOG_P[9] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                               -1.2420140846E-1f, 1.4249322787E-1f,  -1.6668057665E-1f,
                               2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
static const float LOG_Q1 = -2.12194440e-4f; /* ln 2 = LOG_Q2 - LOG_Q1, split */
static const float LOG_Q2 = 0.693359375f;
static const float SQRT_HALF = 0.707106781186547524f;

/* log256_ps for one lane, x > 0 (u1 = 1 - uniform is in [2^-24, 1]). */
static float avx2_logf(float x)
{
    if (bits_from_f32(x) < F32_MIN_NORMAL_BITS)
        x = f32_from_bits(F32_MIN_NORMAL_BITS); /* the kernel's denormal cut-off */
    /* x = m * 2^k with m in [0.5, 1): e = k as a float, x = m */
    const int32_t biased = (int32_t)(bits_from_f32(x) >> F32_MANT_BITS);
    float e = (float)(biased - F32_EXP_BIAS);
    x = f32_from_bits((bits_from_f32(x) & ~F32_EXP_MASK) | bits_from_f32(0.5f));
    e = e + 1.0f;
    /* m < sqrt(1/2): use 2m - 1 and k - 1, else m - 1 (computed as x - 1 + (x or 0)) */
    const int small = x < SQRT_HALF;
    const float add_back = small ? x : 0.0f;
    x = x - 1.0f;
    e = e - (small ? 1.0f : 0.0f);
    x = x + add_back;

    const float z = x * x;
    float y = LOG_P[0];
    for (int i = 1; i < 9; i++)
        y = fmaf(y, x, LOG_P[i]);      /* fused Horner step */
    const float yx = y * x;
    y = fmaf(yx, z, e * LOG_Q1);       /* (y*x)*z + e*q1: the first product is fused */
    y = fmaf(-z, 0.5f, y);             /* y - z/2 (exact product: same as unfused) */
    x = x + y;
    return fmaf(e, LOG_Q2, x);         /* x + e*q2 */
}

/* Cephes sinf/cosf reduction and polynomials as sincos256_ps uses them. */
static const float FOUR_OVER_PI = 1.27323954473516f;
static const float MINUS_DP1 = -0.78515625f; /* π/4 = DP1 + DP2 + DP3, extended precision */
static const float MINUS_DP2 = -2.4187564849853515625e-4f;
static const float MINUS_DP3 = -3.77489497744594108e-8f;
static const float SIN_P[3] = {-1.9515295891E-4f, 8.3321608736E-3f, -1.6666654611E-1f};
static const float COS_P[3] = {2.443315711809948E-005f, -1.388731625493765E-003f,
                               4.166664568298827E-002f};

/* sincos256_ps for one lane. */
static void avx2_sincosf(float x, float *s, float *c)
{
    uint32_t sign_sin = bits_from_f32(x) & F32_SIGN_MASK;
    x = fabsf(x);
    /* octant j = trunc(x * 4/π) rounded up to even; y = j as a float */
    int32_t j = (int32_t)(x * FOUR_OVER_PI);
    j = (j + 1) & ~1;
    const float y = (float)j;
    const uint32_t swap_sin = (uint32_t)(j & 4) << 29;   /* flips the sine's sign bit */
    const uint32_t sign_cos = (uint32_t)(~(j - 2) & 4) << 29;
    const int sin_poly = (j & 2) == 0; /* the sine polynomial gives sin here, else cos */
    sign_sin ^= swap_sin;

    x = fmaf(y, MINUS_DP1, x); /* x - j π/4 in three fused steps */
    x = fmaf(y, MINUS_DP2, x);
    x = fmaf(y, MINUS_DP3, x);
    const float z = x * x;

    float yc = COS_P[0];
    yc = fmaf(yc, z, COS_P[1]);
    yc = fmaf(yc, z, COS_P[2]);
    yc = yc * z;
    yc = fmaf(yc, z, -(z * 0.5f)); /* yc*z - z/2: the first product is fused */
    yc = yc + 1.0f;

    float ys = SIN_P[0];
    ys = fmaf(ys, z, SIN_P[1]);
    ys = fmaf(ys, z, SIN_P[2]);
    ys = ys * z;
    ys = fmaf(ys, x, x);

    /* select, as the kernel does with masks: s = one polynomial, c = the other (+0) */
    const float sin_part = sin_poly ? ys : 0.0f;
    const float cos_part = sin_poly ? 0.0f : yc;
    const float s_val = cos_part + sin_part;
    const float c_val = (yc - cos_part) + (ys - sin_part);
    *s = f32_from_bits(bits_from_f32(s_val) ^ sign_sin);
    *c = f32_from_bits(bits_from_f32(c_val) ^ sign_cos);
}

#define NORMAL_CHUNK 16
#define NORMAL_HALF 8
/* randn is normal(mean 0, std 1): the kernels end with `· std + mean`; · 1 is exact, + 0 is
 * exact too but turns -0 into +0, so it is kept. */
#define TORCH_MEAN 0.0f

/* normal_fill_16_AVX2 (its final fma(n, std, mean) = n + 0). */
static void normal_fill_16_avx2(float *d)
{
    const float two_pi = (float)(2.0f * TORCH_PI);
    for (int j = 0; j < NORMAL_HALF; j++) {
        const float u1 = 1.0f - d[j];
        const float u2 = d[j + NORMAL_HALF];
        const float radius = sqrtf(-2.0f * avx2_logf(u1));
        const float theta = two_pi * u2;
        float s, c;
        avx2_sincosf(theta, &s, &c);
        d[j] = radius * c + TORCH_MEAN;
        d[j + NORMAL_HALF] = radius * s + TORCH_MEAN;
    }
}

/* normal_fill_16 (portable kernel), float: libm logf/cosf/sinf; θ is computed in double and
 * rounded to float, as `2.0f * c10::pi<double> * u2` does. */
static void normal_fill_16_default(float *d)
{
    for (int j = 0; j < NORMAL_HALF; j++) {
        const float u1 = 1.0f - d[j];
        const float u2 = d[j + NORMAL_HALF];
        const float radius = sqrtf(-2.0f * logf(u1));
        const float theta = (float)(2.0 * TORCH_PI * (double)u2);
        d[j] = radius * cosf(theta) + TORCH_MEAN;
        d[j + NORMAL_HALF] = radius * sinf(theta) + TORCH_MEAN;
    }
}

void torch_randn_f32(torch_generator *g, float *out, size_t n, torch_normal_kernel kernel)
{
    if (n < TORCH_NORMAL_FILL_MIN) {
        for (size_t i = 0; i < n; i++)
            out[i] = (float)torch_normal_f64(g);
        return;
    }
    void (*fill16)(float *) =
        kernel == TORCH_NORMAL_DEFAULT ? normal_fill_16_default : normal_fill_16_avx2;
    for (size_t i = 0; i < n; i++)
        out[i] = torch_uniform_f32(g);
    for (size_t i = 0; i + NORMAL_CHUNK <= n; i += NORMAL_CHUNK)
        fill16(out + i);
    if (n % NORMAL_CHUNK != 0) {
        float *tail = out + n - NORMAL_CHUNK; /* redo the last 16 with fresh uniforms */
        for (int i = 0; i < NORMAL_CHUNK; i++)
            tail[i] = torch_uniform_f32(g);
        fill16(tail);
    }
}

/* ---------------------------------------------------------------- bfloat16 randn */

#define BF16_RANDOM_BITS 8 /* bfloat16 mantissa digits */

/* float -> nearest-even bfloat16, returned as a float (c10::BFloat16's conversion). */
static float bf16_round(float f)
{
    uint32_t u = bits_from_f32(f);
    if ((u & 0x7fffffffu) > F32_EXP_MASK) /* NaN */
        return f32_from_bits(0x7fc00000u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return f32_from_bits(u & 0xffff0000u);
}

/* normal_fill_16<c10::BFloat16>: every operator rounds its float result to bfloat16; θ is
 * computed in double and converted double -> float -> bfloat16. */
static void normal_fill_16_bf16(float *d)
{
    for (int j = 0; j < NORMAL_HALF; j++) {
        const float u1 = bf16_round(1.0f - d[j]);
        const float u2 = d[j + NORMAL_HALF];
        const float lg = bf16_round(logf(u1));
        const float radius = bf16_round(sqrtf(bf16_round(-2.0f * lg)));
        const float theta = bf16_round((float)(2.0 * TORCH_PI * (double)u2));
        d[j] = bf16_round(radius * bf16_round(cosf(theta))) + TORCH_MEAN;
        d[j + NORMAL_HALF] = bf16_round(radius * bf16_round(sinf(theta))) + TORCH_MEAN;
    }
}

void torch_randn_bf16(torch_generator *g, float *out, size_t n)
{
    if (n < TORCH_NORMAL_FILL_MIN) {
        for (size_t i = 0; i < n; i++)
            out[i] = bf16_round((float)torch_normal_f64(g)); /* double -> float -> bf16 */
        return;
    }
    const uint32_t mask = (1u << BF16_RANDOM_BITS) - 1u;
    const float scale = 1.0f / (float)(1u << BF16_RANDOM_BITS);
    for (size_t i = 0; i < n; i++)
        out[i] = (float)(torch_generator_random(g) & mask) * scale; /* exact in bf16 */
    for (size_t i = 0; i + NORMAL_CHUNK <= n; i += NORMAL_CHUNK)
        normal_fill_16_bf16(out + i);
    if (n % NORMAL_CHUNK != 0) {
        float *tail = out + n - NORMAL_CHUNK;
        for (int i = 0; i < NORMAL_CHUNK; i++)
            tail[i] = (float)(torch_generator_random(g) & mask) * scale;
        normal_fill_16_bf16(tail);
    }
}

cpdit_status torch_randn_seeded(uint64_t seed, float *out, size_t n, torch_normal_kernel kernel,
                                cpdit_error *err)
{
    if (n > 0 && !out)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "noise", "no output buffer for %zu values",
                               n);
    torch_generator g;
    torch_generator_init(&g, seed);
    torch_randn_f32(&g, out, n, kernel);
    return CPDIT_OK;
}

const char *torch_normal_kernel_name(torch_normal_kernel kernel)
{
    return kernel == TORCH_NORMAL_DEFAULT ? "default" : "avx2";
}

cpdit_status torch_normal_kernel_from_name(const char *name, torch_normal_kernel *kernel,
                                           cpdit_error *err)
{
    if (name && strcmp(name, "avx2") == 0) {
        *kernel = TORCH_NORMAL_AVX2;
        return CPDIT_OK;
    }
    if (name && strcmp(name, "default") == 0) {
        *kernel = TORCH_NORMAL_DEFAULT;
        return CPDIT_OK;
    }
    return cpdit_error_set(err, CPDIT_ERR_INPUT, "noise kernel",
                           "unknown kernel \"%s\" (expected \"avx2\" or \"default\")",
                           name ? name : "(null)");
}
