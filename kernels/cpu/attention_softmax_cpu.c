/* attention_softmax_cpu.c — row max, in-place exp-and-sum and row scaling for the online
 * softmax, with AVX-512 and AVX2+FMA versions picked at run time (attention_softmax_cpu.h).
 *
 * exp(x): n = round(x log2 e); r = x - n ln2 (ln2 split in a high part exact in fp32 and a low
 * part, so r is exact to fp32); e^r = 1 + r + r^2 (1/2! + r/3! + ... + r^5/7!) with the
 * classic Cephes expf coefficients; result = e^r * 2^n built in the exponent field.
 */
#include "kernels/cpu/attention_softmax_cpu.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTN_SOFTMAX_X86 1
#endif

/* Range reduction and polynomial constants. */
#define EXP_LOG2E 1.44269504088896341f
#define EXP_LN2_HI 0.693359375f       /* ln 2 rounded to 11 bits: n * LN2_HI is exact */
#define EXP_LN2_LO -2.12194440e-4f    /* ln 2 - LN2_HI */
#define EXP_MAX_ARG 88.3762626647949f /* above: e^x overflows fp32 */
#define EXP_P0 1.9875691500e-4f       /* ~1/7! */
#define EXP_P1 1.3981999507e-3f       /* ~1/6! */
#define EXP_P2 8.3334519073e-3f       /* ~1/5! */
#define EXP_P3 4.1665795894e-2f       /* ~1/4! */
#define EXP_P4 1.6666665459e-1f       /* ~1/3! */
#define EXP_P5 5.0000001201e-1f       /* ~1/2! */
#define FLOAT_EXP_BIAS 127
#define FLOAT_MANT_BITS 23

float attention_fast_expf(float x)
{
    if (!(x >= ATTN_EXP_MIN_ARG))
        return 0.0f; /* also NaN -> 0: a NaN score has no defined weight */
    if (x > EXP_MAX_ARG)
        x = EXP_MAX_ARG;
    const float n = nearbyintf(x * EXP_LOG2E);
    float r = fmaf(-n, EXP_LN2_HI, x);
    r = fmaf(-n, EXP_LN2_LO, r);
    float p = EXP_P0;
    p = fmaf(p, r, EXP_P1);
    p = fmaf(p, r, EXP_P2);
    p = fmaf(p, r, EXP_P3);
    p = fmaf(p, r, EXP_P4);
    p = fmaf(p, r, EXP_P5);
    const float y = fmaf(p, r * r, r) + 1.0f;
    int32_t bits = ((int32_t)n + FLOAT_EXP_BIAS) << FLOAT_MANT_BITS;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

static float row_max_scalar(const float *x, int n)
{
    float m = x[0];
    for (int i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static float row_exp_sum_scalar(float *x, int n, float m)
{
    double s = 0.0; /* one chain: double keeps it as accurate as the vector lanes' sums */
    for (int i = 0; i < n; i++) {
        x[i] = attention_fast_expf(x[i] - m);
        s += x[i];
    }
    return (float)s;
}

#ifdef ATTN_SOFTMAX_X86
/* ------------------------------------------------------------------ AVX-512 (16 lanes) */

__attribute__((target("avx512f"))) static inline __m512 exp16(__m512 x)
{
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(ATTN_EXP_MIN_ARG), _CMP_GE_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(EXP_MAX_ARG));
    x = _mm512_max_ps(x, _mm512_set1_ps(ATTN_EXP_MIN_ARG));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(FLOAT_EXP_BIAS)),
        FLOAT_MANT_BITS);
    return _mm512_maskz_mul_ps(live, y, _mm512_castsi512_ps(e));
}

__attribute__((target("avx512f"))) static float row_max_avx512(const float *x, int n)
{
    __m512 m = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, x + i));
    }
    return _mm512_reduce_max_ps(m);
}

__attribute__((target("avx512f"))) static float row_exp_sum_avx512(float *x, int n, float m)
{
    const __m512 vm = _mm512_set1_ps(m);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) { /* two vectors per step: independent dependency chains */
        const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        const __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm));
        _mm512_storeu_ps(x + i, e0);
        _mm512_storeu_ps(x + i + 16, e1);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; i < n; i += 16) {
        const int left = n - i;
        const __mmask16 k = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
        _mm512_mask_storeu_ps(x + i, k, e);
        s0 = _mm512_mask_add_ps(s0, k, s0, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* ------------------------------------------------------------------ AVX2 + FMA (8 lanes) */

__attribute__((target("avx2,fma"))) static inline __m256 exp8(__m256 x)
{
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(ATTN_EXP_MIN_ARG), _CMP_GE_OQ);
    x = _mm256_min_ps(x, _mm256_set1_ps(EXP_MAX_ARG));
    x = _mm256_max_ps(x, _mm256_set1_ps(ATTN_EXP_MIN_ARG));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P5));
    __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(FLOAT_EXP_BIAS)),
        FLOAT_MANT_BITS);
    return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), live);
}

__attribute__((target("avx2,fma"))) static float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static float row_max_avx2(const float *x, int n)
{
    __m256 m = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float r = _mm_cvtss_f32(h);
    for (; i < n; i++)
        r = x[i] > r ? x[i] : r;
    return r;
}

__attribute__((target("avx2,fma"))) static float row_exp_sum_avx2(float *x, int n, float m)
{
    const __m256 vm = _mm256_set1_ps(m);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        const __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm));
        _mm256_storeu_ps(x + i, e0);
        _mm256_storeu_ps(x + i + 8, e1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        s0 = _mm256_add_ps(s0, e);
    }
    float s = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) {
        x[i] = attention_fast_expf(x[i] - m);
        s += x[i];
    }
    return s;
}
__attribute__((target("avx512f"))) static void row_scale_avx512(float *x, int n, float a)
{
    const __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), va));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), va));
    }
}

__attribute__((target("avx2,fma"))) static void row_scale_avx2(float *x, int n, float a)
{
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), va));
    for (; i < n; i++)
        x[i] *= a;
}
#endif /* ATTN_SOFTMAX_X86 */

/* ------------------------------------------------------------------ dispatch */

enum { ISA_UNKNOWN = 0, ISA_SCALAR, ISA_AVX2, ISA_AVX512 };

static int isa_choice = ISA_UNKNOWN; /* benign race: every thread computes the same value */

static int softmax_isa(void)
{
    int v = __atomic_load_n(&isa_choice, __ATOMIC_RELAXED);
    if (v != ISA_UNKNOWN)
        return v;
    v = ISA_SCALAR;
#ifdef ATTN_SOFTMAX_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        v = ISA_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        v = ISA_AVX2;
#endif
    __atomic_store_n(&isa_choice, v, __ATOMIC_RELAXED);
    return v;
}

int attention_softmax_set_isa(const char *name)
{
    int want;
    if (!name || strcmp(name, "auto") == 0) {
        __atomic_store_n(&isa_choice, ISA_UNKNOWN, __ATOMIC_RELAXED);
        return 0;
    }
    if (strcmp(name, "scalar") == 0)
        want = ISA_SCALAR;
    else if (strcmp(name, "avx2") == 0)
        want = ISA_AVX2;
    else if (strcmp(name, "avx512") == 0)
        want = ISA_AVX512;
    else
        return -1;
    __atomic_store_n(&isa_choice, ISA_UNKNOWN, __ATOMIC_RELAXED);
    if (want > softmax_isa())
        return -1; /* the CPU (or this build) lacks it; the automatic choice stays */
    __atomic_store_n(&isa_choice, want, __ATOMIC_RELAXED);
    return 0;
}

const char *attention_softmax_isa(void)
{
    switch (softmax_isa()) {
    case ISA_AVX512: return "avx512";
    case ISA_AVX2: return "avx2";
    default: return "scalar";
    }
}

float attention_row_max(const float *x, int n)
{
#ifdef ATTN_SOFTMAX_X86
    switch (softmax_isa()) {
    case ISA_AVX512: return row_max_avx512(x, n);
    case ISA_AVX2: return row_max_avx2(x, n);
    default: break;
    }
#endif
    return row_max_scalar(x, n);
}

void attention_row_scale(float *x, int n, float a)
{
#ifdef ATTN_SOFTMAX_X86
    switch (softmax_isa()) {
    case ISA_AVX512: row_scale_avx512(x, n, a); return;
    case ISA_AVX2: row_scale_avx2(x, n, a); return;
    default: break;
    }
#endif
    for (int i = 0; i < n; i++)
        x[i] *= a;
}

float attention_row_exp_sum(float *x, int n, float m)
{
#ifdef ATTN_SOFTMAX_X86
    switch (softmax_isa()) {
    case ISA_AVX512: return row_exp_sum_avx512(x, n, m);
    case ISA_AVX2: return row_exp_sum_avx2(x, n, m);
    default: break;
    }
#endif
    return row_exp_sum_scalar(x, n, m);
}
