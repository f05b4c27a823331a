/* dtype.h — tensor element types as safetensors names them, and conversion to and from f32.
 *
 * Names are spelled exactly as in safetensors headers ("F32", "BF16", "F8_E4M3", ...).
 * Every dtype can be read as f32 (integers and BOOL by value conversion); only the float
 * dtypes can be written from f32.
 *
 * Rounding from f32 is round-to-nearest-even for every float dtype, with denormals kept.
 *   F16      IEEE binary16: overflow → ±inf, NaN stays NaN (quiet, top payload bits kept).
 *   BF16     top half of an f32: overflow → ±inf, NaN stays NaN (quiet).
 *   F8_E5M2  1.5.2, bias 15, IEEE-like: max 57344, overflow → ±inf, NaN → S.11111.11.
 *   F8_E4M3  1.4.3, bias 7, "fn" flavour as PyTorch float8_e4m3fn: no infinities, the only
 *            NaN is S.1111.111, max finite 448. Like torch's cast, it does NOT saturate:
 *            a value that rounds past 448 (|x| > 464), ±inf and NaN all become NaN. To
 *            saturate instead, clamp to ±cpdit_dtype_max_finite(F8_E4M3) before converting.
 * The f32 → small-float functions give the same bits as torch's .to(dtype) for all finite
 * inputs; NaN inputs may differ only in sign/payload.
 */
#ifndef CPDIT_DTYPE_H
#define CPDIT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpdit_dtype {
    CPDIT_DTYPE_INVALID = 0, /* so that a zeroed struct means "not set" */
    CPDIT_DTYPE_F32,
    CPDIT_DTYPE_F16,
    CPDIT_DTYPE_BF16,
    CPDIT_DTYPE_F8_E4M3,
    CPDIT_DTYPE_F8_E5M2,
    CPDIT_DTYPE_F64,
    CPDIT_DTYPE_I64,
    CPDIT_DTYPE_I32,
    CPDIT_DTYPE_I16,
    CPDIT_DTYPE_I8,
    CPDIT_DTYPE_U64,
    CPDIT_DTYPE_U32,
    CPDIT_DTYPE_U16,
    CPDIT_DTYPE_U8,
    CPDIT_DTYPE_BOOL,
    CPDIT_DTYPE_COUNT
} cpdit_dtype;

/* The safetensors spelling ("BF16"), or "INVALID" for an out-of-range value. */
const char *cpdit_dtype_name(cpdit_dtype dtype);

/* Parse a safetensors dtype name (exact, case-sensitive). CPDIT_DTYPE_INVALID if unknown. */
cpdit_dtype cpdit_dtype_from_name(const char *name);

/* Bytes per element (1, 2, 4 or 8); 0 for CPDIT_DTYPE_INVALID. */
size_t cpdit_dtype_size(cpdit_dtype dtype);

/* 1 for F64, F32, F16, BF16, F8_E4M3, F8_E5M2 (the dtypes cpdit_dtype_from_f32 can write). */
int cpdit_dtype_is_float(cpdit_dtype dtype);

/* Largest finite value of a float dtype (F8_E4M3: 448, F8_E5M2: 57344, F16: 65504, BF16 and
 * F32: FLT_MAX; F64: +inf as an f32); 0 for other dtypes. */
float cpdit_dtype_max_finite(cpdit_dtype dtype);

/* dst[i] = src[i] as f32, i < n. src: n elements of dtype, any alignment (it may point into
 * an mmap'd file); dst: n floats. Exact for F16/BF16/F8 (every value is an f32), F64 and
 * 64/32-bit integers are rounded to nearest, BOOL is 0 or 1 (any nonzero byte is 1).
 * Errors: CPDIT_ERR_INPUT for CPDIT_DTYPE_INVALID. */
cpdit_status cpdit_dtype_to_f32(float *dst, const void *src, cpdit_dtype dtype, size_t n,
                                cpdit_error *err);

/* dst = n elements of dtype converted from the n floats in src (rounding as described at the
 * top of this file); dst may be unaligned. Errors: CPDIT_ERR_INPUT when dtype is not a float
 * dtype (integer outputs are refused rather than silently truncated). */
cpdit_status cpdit_dtype_from_f32(void *dst, cpdit_dtype dtype, const float *src, size_t n,
                                  cpdit_error *err);

/* ---------------------------------------------------------------- scalar conversions
 * Inline so that kernels can use them in their inner loops. Bit layouts are given as
 * sign.exponent.mantissa field widths. */

static inline uint32_t cpdit_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float cpdit_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#define CPDIT_F32_SIGN 0x80000000u
#define CPDIT_F32_INF 0x7f800000u       /* exponent all ones, mantissa 0 */
#define CPDIT_F32_MANT_BITS 23
#define CPDIT_F32_BIAS 127

/* Round a finite, non-negative f32 (its bits `a`, sign cleared) to the nearest value of a
 * binary float format with `ebits` exponent bits (bias 2^(ebits-1)-1) and `mbits` mantissa
 * bits, ties to even, denormals included. Returns the format's magnitude code; a code at or
 * above the format's all-ones exponent means overflow and the caller maps it to inf or NaN.
 * Valid for mbits <= 22 and ebits <= 7 (all of F16, F8_E5M2, F8_E4M3). */
static inline uint32_t cpdit_round_f32_magnitude(uint32_t a, int ebits, int mbits)
{
    const int bias = (1 << (ebits - 1)) - 1;
    const uint32_t implicit = 1u << CPDIT_F32_MANT_BITS;
    const int e32 = (int)(a >> CPDIT_F32_MANT_BITS); /* biased f32 exponent, 0 = denormal */
    const uint32_t mfull = e32 ? (a & (implicit - 1)) | implicit : a;
    const int te = (e32 ? e32 : 1) - CPDIT_F32_BIAS + bias; /* target biased exponent */
    int shift = CPDIT_F32_MANT_BITS - mbits;
    uint32_t base = 0, q, rem, half;
    if (te >= 1)
        base = (uint32_t)(te - 1) << mbits; /* + implicit bit below lands on te << mbits */
    else
        shift += 1 - te; /* denormal in the target: fewer mantissa bits survive */
    if (shift > CPDIT_F32_MANT_BITS + 1)
        return 0; /* mfull < 2^24 so the value is below half the smallest denormal */
    q = base + (mfull >> shift);
    rem = mfull & ((1u << shift) - 1);
    half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++; /* a carry out of the mantissa correctly bumps the exponent */
    return q;
}

/* BF16 (1.8.7) ↔ f32. */
static inline float cpdit_bf16_to_f32(uint16_t h)
{
    return cpdit_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t cpdit_f32_to_bf16(float f)
{
    const uint32_t u = cpdit_f32_bits(f);
    if ((u & ~CPDIT_F32_SIGN) > CPDIT_F32_INF)
        return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep sign and top payload, set quiet */
    /* add just under half an ulp of bf16, plus 1 when the kept lsb is odd: ties go to even */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* F16 (1.5.10, bias 15) ↔ f32. */
#define CPDIT_F16_EXP_SHIFT 10
#define CPDIT_F16_INF 0x7c00u
#define CPDIT_F16_QUIET 0x0200u
#define CPDIT_F16_DENORM_UNIT 5.9604644775390625e-8f /* 2^-24 */

static inline float cpdit_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> CPDIT_F16_EXP_SHIFT) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) { /* zero or denormal: m · 2^-24, exact in f32 */
        const float v = (float)m * CPDIT_F16_DENORM_UNIT;
        return cpdit_f32_from_bits(cpdit_f32_bits(v) | sign);
    }
    if (e == 0x1f) /* inf / NaN, payload kept */
        return cpdit_f32_from_bits(sign | CPDIT_F32_INF | (m << 13));
    return cpdit_f32_from_bits(sign | ((e + (CPDIT_F32_BIAS - 15)) << CPDIT_F32_MANT_BITS) |
                               (m << 13));
}

static inline uint16_t cpdit_f32_to_f16(float f)
{
    const uint32_t u = cpdit_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & ~CPDIT_F32_SIGN;
    uint32_t q;
    if (a > CPDIT_F32_INF)
        return (uint16_t)(sign | CPDIT_F16_INF | CPDIT_F16_QUIET | ((a >> 13) & 0x3ffu));
    if (a == CPDIT_F32_INF)
        return (uint16_t)(sign | CPDIT_F16_INF);
    q = cpdit_round_f32_magnitude(a, 5, 10);
    return (uint16_t)(sign | (q > CPDIT_F16_INF ? CPDIT_F16_INF : q));
}

/* F8_E5M2 (1.5.2, bias 15): the top byte of an F16. */
#define CPDIT_F8_E5M2_INF 0x7cu
#define CPDIT_F8_E5M2_NAN 0x7fu

static inline float cpdit_f8e5m2_to_f32(uint8_t b)
{
    return cpdit_f16_to_f32((uint16_t)(b << 8));
}

static inline uint8_t cpdit_f32_to_f8e5m2(float f)
{
    const uint32_t u = cpdit_f32_bits(f);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const uint32_t a = u & ~CPDIT_F32_SIGN;
    uint32_t q;
    if (a > CPDIT_F32_INF)
        return (uint8_t)(sign | CPDIT_F8_E5M2_NAN);
    if (a == CPDIT_F32_INF)
        return (uint8_t)(sign | CPDIT_F8_E5M2_INF);
    q = cpdit_round_f32_magnitude(a, 5, 2); /* directly from f32: no double rounding */
    return (uint8_t)(sign | (q > CPDIT_F8_E5M2_INF ? CPDIT_F8_E5M2_INF : q));
}

/* F8_E4M3 (1.4.3, bias 7, "fn": no inf, NaN = S.1111.111, max 0x7e = 448). */
#define CPDIT_F8_E4M3_NAN 0x7fu
#define CPDIT_F8_E4M3_MAX_CODE 0x7eu
#define CPDIT_F8_E4M3_DENORM_UNIT 0.001953125f /* 2^-9 */

static inline float cpdit_f8e4m3_to_f32(uint8_t b)
{
    const uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    const uint32_t e = (b >> 3) & 0xfu, m = b & 0x7u;
    if ((b & 0x7fu) == CPDIT_F8_E4M3_NAN)
        return cpdit_f32_from_bits(sign | CPDIT_F32_INF | 0x400000u);
    if (e == 0) {
        const float v = (float)m * CPDIT_F8_E4M3_DENORM_UNIT;
        return cpdit_f32_from_bits(cpdit_f32_bits(v) | sign);
    }
    return cpdit_f32_from_bits(sign | ((e + (CPDIT_F32_BIAS - 7)) << CPDIT_F32_MANT_BITS) |
                               (m << 20));
}

static inline uint8_t cpdit_f32_to_f8e4m3(float f)
{
    const uint32_t u = cpdit_f32_bits(f);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const uint32_t a = u & ~CPDIT_F32_SIGN;
    uint32_t q;
    if (a >= CPDIT_F32_INF)
        return (uint8_t)(sign | CPDIT_F8_E4M3_NAN); /* inf and NaN: there is no inf */
    q = cpdit_round_f32_magnitude(a, 4, 3);
    return (uint8_t)(sign | (q > CPDIT_F8_E4M3_MAX_CODE ? CPDIT_F8_E4M3_NAN : q));
}

#ifdef __cplusplus
}
#endif
#endif
