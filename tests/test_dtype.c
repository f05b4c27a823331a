/* test_dtype.c — dtype names, sizes and f32 conversions (lib/core/dtype.h).
 *
 * - every 16-bit (F16, BF16) and 8-bit (F8_E4M3, F8_E5M2) pattern → f32 → same dtype gives
 *   the same bits (NaN may canonicalise but must stay NaN with its sign);
 * - the vectorised buffer paths (F16/BF16 → f32, f32 → BF16) and the F8 table path equal
 *   the scalar functions bit for bit (all 16/8-bit inputs, 100003 random f32 patterns);
 * - f32 → F16/F8 rounding equals a brute-force reference (nearest representable value by
 *   exhaustive search, ties to the even code) at every halfway point between neighbouring
 *   values, one f32 ulp either side of it, and on random inputs; all exact (0 ulp);
 * - hand-checked halfway cases, denormals, overflow (inf for F16/BF16/E5M2, NaN for E4M3FN);
 * - integer/F64/BOOL reads, unaligned buffers, refusal of f32 → integer.
 */
#include "lib/core/dtype.h"
#include "tests/test_util.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint32_t rng_state = 0x12345678u;
static uint32_t rng_next(void) /* xorshift32: deterministic inputs */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static void test_names(void)
{
    static const struct { cpdit_dtype d; const char *name; size_t size; int is_float; } want[] = {
        {CPDIT_DTYPE_F32, "F32", 4, 1},      {CPDIT_DTYPE_F16, "F16", 2, 1},
        {CPDIT_DTYPE_BF16, "BF16", 2, 1},    {CPDIT_DTYPE_F8_E4M3, "F8_E4M3", 1, 1},
        {CPDIT_DTYPE_F8_E5M2, "F8_E5M2", 1, 1}, {CPDIT_DTYPE_F64, "F64", 8, 1},
        {CPDIT_DTYPE_I64, "I64", 8, 0},      {CPDIT_DTYPE_I32, "I32", 4, 0},
        {CPDIT_DTYPE_I16, "I16", 2, 0},      {CPDIT_DTYPE_I8, "I8", 1, 0},
        {CPDIT_DTYPE_U64, "U64", 8, 0},      {CPDIT_DTYPE_U32, "U32", 4, 0},
        {CPDIT_DTYPE_U16, "U16", 2, 0},      {CPDIT_DTYPE_U8, "U8", 1, 0},
        {CPDIT_DTYPE_BOOL, "BOOL", 1, 0},
    };
    size_t i;
    CHECK(sizeof want / sizeof want[0] == CPDIT_DTYPE_COUNT - 1);
    for (i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_MSG(strcmp(cpdit_dtype_name(want[i].d), want[i].name) == 0, "%s", want[i].name);
        CHECK_MSG(cpdit_dtype_from_name(want[i].name) == want[i].d, "%s", want[i].name);
        CHECK_MSG(cpdit_dtype_size(want[i].d) == want[i].size, "%s", want[i].name);
        CHECK_MSG(cpdit_dtype_is_float(want[i].d) == want[i].is_float, "%s", want[i].name);
    }
    CHECK(cpdit_dtype_from_name("F33") == CPDIT_DTYPE_INVALID);
    CHECK(cpdit_dtype_from_name("f32") == CPDIT_DTYPE_INVALID);
    CHECK(cpdit_dtype_from_name("") == CPDIT_DTYPE_INVALID);
    CHECK(cpdit_dtype_from_name(NULL) == CPDIT_DTYPE_INVALID);
    CHECK(cpdit_dtype_size(CPDIT_DTYPE_INVALID) == 0);
    CHECK(strcmp(cpdit_dtype_name((cpdit_dtype)99), "INVALID") == 0);
}

/* Bits of a NaN-or-not comparison: same bits, or both NaN with the same sign. */
static int same_or_nan(uint32_t back, uint32_t orig, float f, uint32_t sign_bit)
{
    if (isnan(f))
        return (back & sign_bit) == (orig & sign_bit);
    return back == orig;
}

static void test_roundtrip_16(void)
{
    uint32_t h;
    int bad_bf16 = 0, bad_f16 = 0, bad_fast = 0, nan_bf16 = 0, nan_f16 = 0;
    static uint16_t all[65536];
    static float fast[65536];
    for (h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    CHECK(cpdit_dtype_to_f32(fast, all, CPDIT_DTYPE_F16, 65536, NULL) == CPDIT_OK);
    for (h = 0; h < 65536; h++) {
        float fb = cpdit_bf16_to_f32((uint16_t)h), fh = cpdit_f16_to_f32((uint16_t)h);
        uint16_t bb = cpdit_f32_to_bf16(fb), bh = cpdit_f32_to_f16(fh);
        if (isnan(fb)) {
            nan_bf16++;
            if (!isnan(cpdit_bf16_to_f32(bb)))
                bad_bf16++;
        }
        if (isnan(fh)) {
            nan_f16++;
            if (!isnan(cpdit_f16_to_f32(bh)))
                bad_f16++;
        }
        bad_bf16 += !same_or_nan(bb, h, fb, 0x8000u);
        bad_f16 += !same_or_nan(bh, h, fh, 0x8000u);
        bad_fast += cpdit_f32_bits(fast[h]) != cpdit_f32_bits(fh);
    }
    CHECK_MSG(bad_bf16 == 0, "%d BF16 patterns did not round-trip", bad_bf16);
    CHECK_MSG(bad_f16 == 0, "%d F16 patterns did not round-trip", bad_f16);
    CHECK_MSG(bad_fast == 0, "%d F16 patterns differ between buffer and scalar paths", bad_fast);
    CHECK(nan_bf16 == 2 * 127);  /* exponent 255, mantissa 1..127, both signs */
    CHECK(nan_f16 == 2 * 1023);  /* exponent 31, mantissa 1..1023 */
    /* spot values of the decoders */
    CHECK(cpdit_f16_to_f32(0x3c00) == 1.0f);
    CHECK(cpdit_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(cpdit_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(cpdit_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    CHECK(cpdit_f16_to_f32(0x0400) == ldexpf(1.0f, -14));
    CHECK(isinf(cpdit_f16_to_f32(0xfc00)) && cpdit_f16_to_f32(0xfc00) < 0);
    CHECK(cpdit_f32_bits(cpdit_f16_to_f32(0x8000)) == 0x80000000u);
    CHECK(cpdit_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(cpdit_bf16_to_f32(0x0001) == ldexpf(1.0f, -133)); /* bf16 denormal */
}

static void test_roundtrip_8(void)
{
    int b, bad4 = 0, bad5 = 0, nan4 = 0, nan5 = 0, inf4 = 0, inf5 = 0;
    uint8_t all[256];
    float buf[256];
    for (b = 0; b < 256; b++) {
        float f4 = cpdit_f8e4m3_to_f32((uint8_t)b), f5 = cpdit_f8e5m2_to_f32((uint8_t)b);
        all[b] = (uint8_t)b;
        nan4 += isnan(f4) != 0;
        nan5 += isnan(f5) != 0;
        inf4 += isinf(f4) != 0;
        inf5 += isinf(f5) != 0;
        bad4 += !same_or_nan(cpdit_f32_to_f8e4m3(f4), (uint32_t)b, f4, 0x80u);
        bad5 += !same_or_nan(cpdit_f32_to_f8e5m2(f5), (uint32_t)b, f5, 0x80u);
    }
    CHECK_MSG(bad4 == 0, "%d F8_E4M3 patterns did not round-trip", bad4);
    CHECK_MSG(bad5 == 0, "%d F8_E5M2 patterns did not round-trip", bad5);
    CHECK(nan4 == 2 && inf4 == 0); /* only S.1111.111 is NaN; no infinities */
    CHECK(isnan(cpdit_f8e4m3_to_f32(0x7f)) && isnan(cpdit_f8e4m3_to_f32(0xff)));
    CHECK(nan5 == 6 && inf5 == 2);
    CHECK(cpdit_f8e4m3_to_f32(0x7e) == 448.0f);
    CHECK(cpdit_f8e4m3_to_f32(0x38) == 1.0f);
    CHECK(cpdit_f8e4m3_to_f32(0x01) == ldexpf(1.0f, -9));
    CHECK(cpdit_f8e4m3_to_f32(0x08) == ldexpf(1.0f, -6));
    CHECK(cpdit_f8e5m2_to_f32(0x7b) == 57344.0f);
    CHECK(cpdit_f8e5m2_to_f32(0x01) == ldexpf(1.0f, -16));
    /* buffer path equals scalar path */
    CHECK(cpdit_dtype_to_f32(buf, all, CPDIT_DTYPE_F8_E4M3, 256, NULL) == CPDIT_OK);
    for (b = 0; b < 256; b++)
        if (cpdit_f32_bits(buf[b]) != cpdit_f32_bits(cpdit_f8e4m3_to_f32((uint8_t)b)))
            bad4++;
    CHECK(bad4 == 0);
    CHECK(cpdit_dtype_max_finite(CPDIT_DTYPE_F8_E4M3) == cpdit_f8e4m3_to_f32(0x7e));
    CHECK(cpdit_dtype_max_finite(CPDIT_DTYPE_F8_E5M2) == cpdit_f8e5m2_to_f32(0x7b));
    CHECK(cpdit_dtype_max_finite(CPDIT_DTYPE_F16) == cpdit_f16_to_f32(0x7bff));
    CHECK(cpdit_dtype_max_finite(CPDIT_DTYPE_BF16) == cpdit_bf16_to_f32(0x7f7f));
}

/* ---------------------------------------------------------------- reference rounding
 * A format: its decoder, the positive finite codes 0..max_code in increasing value order,
 * and the code an overflow produces. Beyond max_code the next (virtual) value is
 * max + ulp(max) with code max_code + 1; a tie between it and max_code goes to the even code,
 * and anything that rounds to it becomes overflow_code. */
typedef struct fmt {
    const char *name;
    float (*decode)(uint32_t code);
    uint32_t (*encode)(float f);
    uint32_t max_code, overflow_code, sign_bit;
} fmt;

static float dec_f16(uint32_t c) { return cpdit_f16_to_f32((uint16_t)c); }
static float dec_e4(uint32_t c) { return cpdit_f8e4m3_to_f32((uint8_t)c); }
static float dec_e5(uint32_t c) { return cpdit_f8e5m2_to_f32((uint8_t)c); }
static float dec_bf(uint32_t c) { return cpdit_bf16_to_f32((uint16_t)c); }
static uint32_t enc_f16(float f) { return cpdit_f32_to_f16(f); }
static uint32_t enc_e4(float f) { return cpdit_f32_to_f8e4m3(f); }
static uint32_t enc_e5(float f) { return cpdit_f32_to_f8e5m2(f); }
static uint32_t enc_bf(float f) { return cpdit_f32_to_bf16(f); }

/* Value of code c for 0 <= c <= max_code + 1 (the virtual one past the end), in double. */
static double ref_value(const fmt *F, uint32_t c)
{
    if (c <= F->max_code)
        return F->decode(c);
    return 2.0 * F->decode(F->max_code) - F->decode(F->max_code - 1);
}

/* Reference: nearest code to |x| by bisection over the increasing code values, ties even. */
static uint32_t ref_round(const fmt *F, float x)
{
    double a = fabs((double)x), lo_v, hi_v;
    uint32_t lo = 0, hi = F->max_code + 1, pick, sign = signbit(x) ? F->sign_bit : 0;
    if (a >= ref_value(F, hi))
        return sign | F->overflow_code;
    while (hi - lo > 1) { /* invariant: value(lo) <= a < value(hi) */
        uint32_t mid = lo + (hi - lo) / 2;
        if (ref_value(F, mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    lo_v = ref_value(F, lo);
    hi_v = ref_value(F, hi);
    if (a - lo_v < hi_v - a)
        pick = lo;
    else if (a - lo_v > hi_v - a)
        pick = hi;
    else
        pick = (lo & 1u) ? hi : lo;
    if (pick > F->max_code)
        return sign | F->overflow_code;
    return sign | pick;
}

static void test_rounding_reference(const fmt *F)
{
    uint32_t c;
    int bad = 0, checked = 0, k;
    for (c = 0; c <= F->max_code; c++) { /* every midpoint and ±1 f32 ulp around it */
        float mid = (float)(0.5 * (ref_value(F, c) + ref_value(F, c + 1)));
        float probes[3] = {nextafterf(mid, 0.0f), mid, nextafterf(mid, INFINITY)};
        for (k = 0; k < 3; k++) {
            float p = probes[k];
            int s;
            for (s = 0; s < 2; s++, p = -p) {
                uint32_t got = F->encode(p), want = ref_round(F, p);
                checked++;
                if (got != want && bad++ < 5)
                    fprintf(stderr, "%s: %.9g → 0x%x, reference 0x%x\n", F->name, p, got, want);
            }
        }
    }
    for (k = 0; k < 200000; k++) { /* random finite f32 in and around the format's range */
        float x = cpdit_f32_from_bits(rng_next());
        uint32_t got, want;
        if (!isfinite(x))
            continue;
        x = ldexpf(frexpf(x, &(int){0}), (int)(rng_next() % 64) - 40);
        got = F->encode(x);
        want = ref_round(F, x);
        checked++;
        if (got != want && bad++ < 5)
            fprintf(stderr, "%s: %.9g → 0x%x, reference 0x%x\n", F->name, x, got, want);
    }
    CHECK_MSG(bad == 0, "%s: %d of %d roundings differ from the reference", F->name, bad,
              checked);
}

static void test_known_values(void)
{
    /* BF16: halfway cases go to the even mantissa */
    CHECK(cpdit_f32_to_bf16(1.0f + ldexpf(1.0f, -8)) == 0x3f80);             /* 1 + ½ulp → 1 */
    CHECK(cpdit_f32_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)) == 0x3f82);         /* → 1 + 2ulp */
    CHECK(cpdit_f32_to_bf16(1.0f + ldexpf(1.0f, -8) + ldexpf(1.0f, -20)) == 0x3f81);
    CHECK(cpdit_f32_to_bf16(FLT_MAX) == 0x7f80);                             /* rounds to inf */
    CHECK(cpdit_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(cpdit_f32_to_bf16(ldexpf(1.0f, -133)) == 0x0001);                  /* denormal */
    /* F16 */
    CHECK(cpdit_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00);
    CHECK(cpdit_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3c02);
    CHECK(cpdit_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(cpdit_f32_to_f16(65519.996f) == 0x7bff);
    CHECK(cpdit_f32_to_f16(65520.0f) == 0x7c00); /* tie with odd 0x7bff → inf */
    CHECK(cpdit_f32_to_f16(-1e30f) == 0xfc00);
    CHECK(cpdit_f32_to_f16(ldexpf(1.0f, -24)) == 0x0001);
    CHECK(cpdit_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000);                    /* tie → even 0 */
    CHECK(cpdit_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(cpdit_f32_to_f16(3 * ldexpf(1.0f, -25)) == 0x0002);                /* 1.5 → 2 */
    CHECK(cpdit_f32_to_f16(ldexpf(1.0f, -14) - ldexpf(1.0f, -25)) == 0x0400); /* tie → even */
    CHECK(cpdit_f32_to_f16(FLT_MIN / 4) == 0x0000);                          /* f32 denormal */
    CHECK(cpdit_f32_to_f16(-0.0f) == 0x8000);
    CHECK((cpdit_f32_to_f16(NAN) & 0x7e00u) == 0x7e00u);                     /* quiet NaN */
    /* F8_E4M3 (fn): max 448, no inf, overflow → NaN like torch */
    CHECK(cpdit_f32_to_f8e4m3(448.0f) == 0x7e);
    CHECK(cpdit_f32_to_f8e4m3(464.0f) == 0x7e);                /* tie with odd 0x7f → 448 */
    CHECK(cpdit_f32_to_f8e4m3(nextafterf(464.0f, 1e9f)) == 0x7f);
    CHECK(cpdit_f32_to_f8e4m3(480.0f) == 0x7f);
    CHECK(cpdit_f32_to_f8e4m3(INFINITY) == 0x7f);
    CHECK(cpdit_f32_to_f8e4m3(-INFINITY) == 0xff);
    CHECK(cpdit_f32_to_f8e4m3(1.0625f) == 0x38);               /* 1 + ½ulp → 1 */
    CHECK(cpdit_f32_to_f8e4m3(1.1875f) == 0x3a);               /* 1.125 + ½ulp → 1.25 */
    CHECK(cpdit_f32_to_f8e4m3(ldexpf(1.0f, -9)) == 0x01);
    CHECK(cpdit_f32_to_f8e4m3(ldexpf(1.0f, -10)) == 0x00);     /* tie → even 0 */
    CHECK(cpdit_f32_to_f8e4m3(ldexpf(3.0f, -10)) == 0x02);     /* 1.5 units → 2 */
    CHECK(cpdit_f32_to_f8e4m3(-ldexpf(7.5f, -9)) == 0x88);     /* tie 7.5 → 8 = min normal */
    /* saturation as documented: clamp to max_finite first */
    CHECK(cpdit_f32_to_f8e4m3(fminf(1000.0f, cpdit_dtype_max_finite(CPDIT_DTYPE_F8_E4M3))) ==
          0x7e);
    /* F8_E5M2 */
    CHECK(cpdit_f32_to_f8e5m2(57344.0f) == 0x7b);
    CHECK(cpdit_f32_to_f8e5m2(61440.0f) == 0x7c);              /* tie with odd 0x7b → inf */
    CHECK(cpdit_f32_to_f8e5m2(nextafterf(61440.0f, 0.0f)) == 0x7b);
    CHECK(cpdit_f32_to_f8e5m2(-INFINITY) == 0xfc);
    CHECK(cpdit_f32_to_f8e5m2(ldexpf(1.0f, -16)) == 0x01);
    CHECK(cpdit_f32_to_f8e5m2(ldexpf(1.0f, -17)) == 0x00);
    CHECK(cpdit_f32_to_f8e5m2(1.125f) == 0x3c);                /* 1 + ½ulp → 1 */
    /* direct rounding, not through F16: 1 + 2^-3 + 2^-11 is just above the E5M2 midpoint */
    CHECK(cpdit_f32_to_f8e5m2(1.0f + 0.125f + ldexpf(1.0f, -12)) == 0x3d);
    CHECK((cpdit_f32_to_f8e5m2(NAN) & 0x7f) > 0x7c);
}

/* The vectorised block paths (BF16 both ways, F16 → f32) give the scalar functions' bits on
 * random f32 patterns (NaN, inf, denormals included) and on an odd length (scalar tail). */
static void test_block_paths(void)
{
    enum { N = 100003 };
    static uint32_t bits[N];
    static uint16_t h[N], h_ref[N];
    static float f[N];
    size_t i;
    int bad = 0;
    for (i = 0; i < N; i++)
        bits[i] = rng_next();
    CHECK(cpdit_dtype_from_f32(h, CPDIT_DTYPE_BF16, (const float *)bits, N, NULL) == CPDIT_OK);
    for (i = 0; i < N; i++)
        bad += h[i] != cpdit_f32_to_bf16(cpdit_f32_from_bits(bits[i]));
    CHECK_MSG(bad == 0, "%d f32 → BF16 block conversions differ from the scalar ones", bad);
    for (i = 0; i < N; i++)
        h_ref[i] = (uint16_t)bits[i];
    bad = 0;
    CHECK(cpdit_dtype_to_f32(f, h_ref, CPDIT_DTYPE_BF16, N, NULL) == CPDIT_OK);
    for (i = 0; i < N; i++)
        bad += cpdit_f32_bits(f[i]) != cpdit_f32_bits(cpdit_bf16_to_f32(h_ref[i]));
    CHECK(cpdit_dtype_to_f32(f, h_ref, CPDIT_DTYPE_F16, N, NULL) == CPDIT_OK);
    for (i = 0; i < N; i++)
        bad += cpdit_f32_bits(f[i]) != cpdit_f32_bits(cpdit_f16_to_f32(h_ref[i]));
    CHECK_MSG(bad == 0, "%d BF16/F16 → f32 block conversions differ from the scalar ones", bad);
}

static void test_buffers(void)
{
    unsigned char raw[64 + 1];
    float out[8], in[8] = {1.0f, -2.5f, 0.0f, 448.0f, 1e-3f, -65504.0f, 3.0f, 0.1f};
    int64_t i64[3] = {16777217, -5, INT64_C(1) << 40};
    uint8_t boolv[3] = {0, 1, 7};
    double f64[2] = {0.1, -1e300};
    cpdit_error err;
    cpdit_dtype d;
    int i;
    /* every float dtype: write from f32 at an odd address, read back, compare with scalar */
    for (d = CPDIT_DTYPE_F32; d < CPDIT_DTYPE_COUNT; d++) {
        if (!cpdit_dtype_is_float(d))
            continue;
        CHECK(cpdit_dtype_from_f32(raw + 1, d, in, 8, NULL) == CPDIT_OK);
        CHECK(cpdit_dtype_to_f32(out, raw + 1, d, 8, NULL) == CPDIT_OK);
        for (i = 0; i < 8; i++) {
            float want = in[i];
            if (d == CPDIT_DTYPE_F16) want = cpdit_f16_to_f32(cpdit_f32_to_f16(in[i]));
            if (d == CPDIT_DTYPE_BF16) want = cpdit_bf16_to_f32(cpdit_f32_to_bf16(in[i]));
            if (d == CPDIT_DTYPE_F8_E4M3) want = cpdit_f8e4m3_to_f32(cpdit_f32_to_f8e4m3(in[i]));
            if (d == CPDIT_DTYPE_F8_E5M2) want = cpdit_f8e5m2_to_f32(cpdit_f32_to_f8e5m2(in[i]));
            CHECK_MSG(cpdit_f32_bits(out[i]) == cpdit_f32_bits(want) ||
                          (isnan(out[i]) && isnan(want)),
                      "%s element %d: %g vs %g", cpdit_dtype_name(d), i, out[i], want);
        }
    }
    memcpy(raw + 1, i64, sizeof i64);
    CHECK(cpdit_dtype_to_f32(out, raw + 1, CPDIT_DTYPE_I64, 3, NULL) == CPDIT_OK);
    CHECK(out[0] == 16777216.0f && out[1] == -5.0f && out[2] == ldexpf(1.0f, 40));
    CHECK(cpdit_dtype_to_f32(out, boolv, CPDIT_DTYPE_BOOL, 3, NULL) == CPDIT_OK);
    CHECK(out[0] == 0.0f && out[1] == 1.0f && out[2] == 1.0f);
    memcpy(raw + 3, f64, sizeof f64);
    CHECK(cpdit_dtype_to_f32(out, raw + 3, CPDIT_DTYPE_F64, 2, NULL) == CPDIT_OK);
    CHECK(out[0] == 0.1f && isinf(out[1]) && out[1] < 0);
    cpdit_error_clear(&err);
    CHECK(cpdit_dtype_from_f32(raw, CPDIT_DTYPE_I32, in, 2, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "cannot convert F32 to dtype I32");
    CHECK(cpdit_dtype_to_f32(out, raw, CPDIT_DTYPE_INVALID, 1, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "cannot convert dtype INVALID");
    CHECK(cpdit_dtype_to_f32(out, NULL, CPDIT_DTYPE_F32, 0, NULL) == CPDIT_OK); /* n = 0 */
}

int main(void)
{
    static const fmt formats[] = {
        {"F16", dec_f16, enc_f16, 0x7bff, 0x7c00, 0x8000},
        {"BF16", dec_bf, enc_bf, 0x7f7f, 0x7f80, 0x8000},
        {"F8_E4M3", dec_e4, enc_e4, 0x7e, 0x7f, 0x80},
        {"F8_E5M2", dec_e5, enc_e5, 0x7b, 0x7c, 0x80},
    };
    size_t i;
    test_names();
    test_roundtrip_16();
    test_roundtrip_8();
    for (i = 0; i < sizeof formats / sizeof formats[0]; i++)
        test_rounding_reference(&formats[i]);
    test_known_values();
    test_block_paths();
    test_buffers();
    TEST_MAIN_END();
}
