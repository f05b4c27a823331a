/* dtype.c — dtype names and sizes, and whole-buffer conversion to and from f32 (dtype.h).
 *
 * Buffers may be unaligned (tensors inside an mmap'd safetensors file start at any byte), so
 * every element is loaded and stored with memcpy, which compilers turn into plain moves.
 * The 16-bit loops are written so that gcc/clang vectorise them at -O2/-O3.
 */
#include "lib/core/dtype.h"

#include <float.h>
#include <math.h>

/* safetensors data is little-endian and is converted in place from the file's map. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "cpdit reads little-endian tensor data in place; big-endian hosts are not supported"
#endif

typedef struct dtype_info {
    const char *name; /* safetensors spelling */
    size_t size;      /* bytes per element */
    int is_float;
} dtype_info;

static const dtype_info dtype_table[CPDIT_DTYPE_COUNT] = {
    [CPDIT_DTYPE_INVALID] = {"INVALID", 0, 0},
    [CPDIT_DTYPE_F32] = {"F32", 4, 1},
    [CPDIT_DTYPE_F16] = {"F16", 2, 1},
    [CPDIT_DTYPE_BF16] = {"BF16", 2, 1},
    [CPDIT_DTYPE_F8_E4M3] = {"F8_E4M3", 1, 1},
    [CPDIT_DTYPE_F8_E5M2] = {"F8_E5M2", 1, 1},
    [CPDIT_DTYPE_F64] = {"F64", 8, 1},
    [CPDIT_DTYPE_I64] = {"I64", 8, 0},
    [CPDIT_DTYPE_I32] = {"I32", 4, 0},
    [CPDIT_DTYPE_I16] = {"I16", 2, 0},
    [CPDIT_DTYPE_I8] = {"I8", 1, 0},
    [CPDIT_DTYPE_U64] = {"U64", 8, 0},
    [CPDIT_DTYPE_U32] = {"U32", 4, 0},
    [CPDIT_DTYPE_U16] = {"U16", 2, 0},
    [CPDIT_DTYPE_U8] = {"U8", 1, 0},
    [CPDIT_DTYPE_BOOL] = {"BOOL", 1, 0},
};

static int dtype_valid(cpdit_dtype dtype)
{
    return dtype > CPDIT_DTYPE_INVALID && dtype < CPDIT_DTYPE_COUNT;
}

const char *cpdit_dtype_name(cpdit_dtype dtype)
{
    return dtype_valid(dtype) ? dtype_table[dtype].name : "INVALID";
}

cpdit_dtype cpdit_dtype_from_name(const char *name)
{
    int i;
    if (!name)
        return CPDIT_DTYPE_INVALID;
    for (i = CPDIT_DTYPE_INVALID + 1; i < CPDIT_DTYPE_COUNT; i++)
        if (strcmp(name, dtype_table[i].name) == 0)
            return (cpdit_dtype)i;
    return CPDIT_DTYPE_INVALID;
}

size_t cpdit_dtype_size(cpdit_dtype dtype)
{
    return dtype_valid(dtype) ? dtype_table[dtype].size : 0;
}

int cpdit_dtype_is_float(cpdit_dtype dtype)
{
    return dtype_valid(dtype) && dtype_table[dtype].is_float;
}

#define F8_E4M3_MAX 448.0f   /* 1.110 × 2^8 */
#define F8_E5M2_MAX 57344.0f /* 1.11 × 2^15 */
#define F16_MAX 65504.0f     /* 1.1111111111 × 2^15 */
#define BF16_MAX 3.38953139e38f /* 1.1111111 × 2^127 */

float cpdit_dtype_max_finite(cpdit_dtype dtype)
{
    switch (dtype) {
    case CPDIT_DTYPE_F8_E4M3: return F8_E4M3_MAX;
    case CPDIT_DTYPE_F8_E5M2: return F8_E5M2_MAX;
    case CPDIT_DTYPE_F16: return F16_MAX;
    case CPDIT_DTYPE_BF16: return BF16_MAX;
    case CPDIT_DTYPE_F32: return FLT_MAX;
    case CPDIT_DTYPE_F64: return INFINITY;
    default: return 0.0f;
    }
}

/* ---------------------------------------------------------------- to f32
 * The 16-bit paths work on blocks of VEC_BLOCK elements copied into local arrays: a loop with
 * a constant trip count and mask arithmetic instead of branches is what gcc vectorises even
 * at -O2 (its cheap cost model skips loops of unknown length). The scalar inline functions of
 * dtype.h are the reference; tests/test_dtype.c checks every input against them. */
#define VEC_BLOCK 16

/* BF16 → f32: a 16-bit shift. src: n × 2 bytes, dst: n floats. */
static void bf16_to_f32(float *dst, const unsigned char *src, size_t n)
{
    size_t i = 0, k;
    for (; i + VEC_BLOCK <= n; i += VEC_BLOCK) {
        uint16_t h[VEC_BLOCK];
        uint32_t o[VEC_BLOCK];
        memcpy(h, src + 2 * i, sizeof h);
        for (k = 0; k < VEC_BLOCK; k++)
            o[k] = (uint32_t)h[k] << 16;
        memcpy(dst + i, o, sizeof o);
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, sizeof h);
        dst[i] = cpdit_bf16_to_f32(h);
    }
}

/* One F16 → f32 bits without branches: exponent and mantissa move into f32 position and are
 * rebiased; exponent 31 (inf/NaN) gets the rest of the f32 bias so that it lands on 255;
 * zero and denormals are m · 2^-24, made by an exact int → float conversion and scaling
 * (the result is a normal f32, so flush-to-zero modes cannot change it). */
#define F16_REBIAS ((uint32_t)(CPDIT_F32_BIAS - 15) << 23)
#define F16_INF_EXTRA ((uint32_t)(128 - 16) << 23) /* 31 + 112 + 112 = 255 */
#define F16_MIN_NORMAL_MAG 0x0400u                 /* exponent field 1 */
static inline uint32_t f16_bits_to_f32_bits(uint16_t h)
{
    const uint32_t em = h & 0x7fffu;
    const uint32_t inf_mask = 0u - (uint32_t)(em >= CPDIT_F16_INF);
    const uint32_t denorm_mask = 0u - (uint32_t)(em < F16_MIN_NORMAL_MAG);
    const uint32_t normal = (em << 13) + F16_REBIAS + (inf_mask & F16_INF_EXTRA);
    const float denorm = (float)(int32_t)em * CPDIT_F16_DENORM_UNIT;
    uint32_t denorm_bits;
    memcpy(&denorm_bits, &denorm, sizeof denorm_bits);
    return (denorm_bits & denorm_mask) | (normal & ~denorm_mask) |
           ((uint32_t)(h & 0x8000u) << 16);
}

/* F16 → f32. src: n × 2 bytes, dst: n floats. */
static void f16_to_f32(float *dst, const unsigned char *src, size_t n)
{
    size_t i = 0, k;
    for (; i + VEC_BLOCK <= n; i += VEC_BLOCK) {
        uint16_t h[VEC_BLOCK];
        uint32_t o[VEC_BLOCK];
        memcpy(h, src + 2 * i, sizeof h);
        for (k = 0; k < VEC_BLOCK; k++)
            o[k] = f16_bits_to_f32_bits(h[k]);
        memcpy(dst + i, o, sizeof o);
    }
    for (; i < n; i++) {
        uint16_t h;
        uint32_t o;
        memcpy(&h, src + 2 * i, sizeof h);
        o = f16_bits_to_f32_bits(h);
        memcpy(dst + i, &o, sizeof o);
    }
}

/* F8 → f32 through a 256-entry table built on the stack per call (thread-safe, 256 scalar
 * conversions). src: n bytes, dst: n floats. */
static void f8_to_f32(float *dst, const unsigned char *src, size_t n, float (*decode)(uint8_t))
{
    float table[256];
    size_t i;
    int b;
    for (b = 0; b < 256; b++)
        table[b] = decode((uint8_t)b);
    for (i = 0; i < n; i++)
        dst[i] = table[src[i]];
}

/* Integer and other types → f32 by value. src: n elements, dst: n floats. */
#define CONVERT_LOOP(ctype, expr)                                                            \
    do {                                                                                     \
        size_t i_;                                                                           \
        for (i_ = 0; i_ < n; i_++) {                                                         \
            ctype v_;                                                                        \
            memcpy(&v_, s + i_ * sizeof v_, sizeof v_);                                      \
            dst[i_] = (expr);                                                                \
        }                                                                                    \
    } while (0)

cpdit_status cpdit_dtype_to_f32(float *dst, const void *src, cpdit_dtype dtype, size_t n,
                                cpdit_error *err)
{
    const unsigned char *s = (const unsigned char *)src;
    switch (dtype) {
    case CPDIT_DTYPE_F32:
        if (n)
            memcpy(dst, s, n * sizeof(float));
        break;
    case CPDIT_DTYPE_BF16: bf16_to_f32(dst, s, n); break;
    case CPDIT_DTYPE_F16: f16_to_f32(dst, s, n); break;
    case CPDIT_DTYPE_F8_E4M3: f8_to_f32(dst, s, n, cpdit_f8e4m3_to_f32); break;
    case CPDIT_DTYPE_F8_E5M2: f8_to_f32(dst, s, n, cpdit_f8e5m2_to_f32); break;
    case CPDIT_DTYPE_F64: CONVERT_LOOP(double, (float)v_); break;
    case CPDIT_DTYPE_I64: CONVERT_LOOP(int64_t, (float)v_); break;
    case CPDIT_DTYPE_I32: CONVERT_LOOP(int32_t, (float)v_); break;
    case CPDIT_DTYPE_I16: CONVERT_LOOP(int16_t, (float)v_); break;
    case CPDIT_DTYPE_I8: CONVERT_LOOP(int8_t, (float)v_); break;
    case CPDIT_DTYPE_U64: CONVERT_LOOP(uint64_t, (float)v_); break;
    case CPDIT_DTYPE_U32: CONVERT_LOOP(uint32_t, (float)v_); break;
    case CPDIT_DTYPE_U16: CONVERT_LOOP(uint16_t, (float)v_); break;
    case CPDIT_DTYPE_U8: CONVERT_LOOP(uint8_t, (float)v_); break;
    case CPDIT_DTYPE_BOOL: CONVERT_LOOP(uint8_t, v_ ? 1.0f : 0.0f); break;
    default:
        return cpdit_error_set(err, CPDIT_ERR_INPUT, NULL, "cannot convert dtype %s to F32",
                               cpdit_dtype_name(dtype));
    }
    return CPDIT_OK;
}

/* ---------------------------------------------------------------- from f32 */

/* f32 → BF16 without branches (same bits as cpdit_f32_to_bf16), in blocks so that it
 * vectorises. src: n floats, dst: n × 2 bytes. */
static inline uint16_t f32_bits_to_bf16(uint32_t u)
{
    const uint32_t nan_mask = 0u - (uint32_t)((u & ~CPDIT_F32_SIGN) > CPDIT_F32_INF);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;
    return (uint16_t)((quiet_nan & nan_mask) | (rounded & ~nan_mask));
}

static void f32_to_bf16(unsigned char *dst, const float *src, size_t n)
{
    size_t i = 0, k;
    for (; i + VEC_BLOCK <= n; i += VEC_BLOCK) {
        uint32_t u[VEC_BLOCK];
        uint16_t h[VEC_BLOCK];
        memcpy(u, src + i, sizeof u);
        for (k = 0; k < VEC_BLOCK; k++)
            h[k] = f32_bits_to_bf16(u[k]);
        memcpy(dst + 2 * i, h, sizeof h);
    }
    for (; i < n; i++) {
        uint16_t h = cpdit_f32_to_bf16(src[i]);
        memcpy(dst + 2 * i, &h, sizeof h);
    }
}

/* f32 → F16 (and other 16-bit dtypes) with a scalar converter. src: n floats, dst: n × 2 bytes. */
#define STORE16_LOOP(fn)                                                                     \
    do {                                                                                     \
        size_t i_;                                                                           \
        for (i_ = 0; i_ < n; i_++) {                                                         \
            uint16_t h_ = fn(src[i_]);                                                       \
            memcpy(d + 2 * i_, &h_, sizeof h_);                                              \
        }                                                                                    \
    } while (0)

cpdit_status cpdit_dtype_from_f32(void *dst, cpdit_dtype dtype, const float *src, size_t n,
                                  cpdit_error *err)
{
    unsigned char *d = (unsigned char *)dst;
    size_t i;
    switch (dtype) {
    case CPDIT_DTYPE_F32:
        if (n)
            memcpy(d, src, n * sizeof(float));
        break;
    case CPDIT_DTYPE_BF16: f32_to_bf16(d, src, n); break;
    case CPDIT_DTYPE_F16: STORE16_LOOP(cpdit_f32_to_f16); break;
    case CPDIT_DTYPE_F8_E4M3:
        for (i = 0; i < n; i++)
            d[i] = cpdit_f32_to_f8e4m3(src[i]);
        break;
    case CPDIT_DTYPE_F8_E5M2:
        for (i = 0; i < n; i++)
            d[i] = cpdit_f32_to_f8e5m2(src[i]);
        break;
    case CPDIT_DTYPE_F64:
        for (i = 0; i < n; i++) {
            double v = (double)src[i];
            memcpy(d + i * sizeof v, &v, sizeof v);
        }
        break;
    default:
        return cpdit_error_set(err, CPDIT_ERR_INPUT, NULL,
                               "cannot convert F32 to dtype %s (only float dtypes can be "
                               "written from F32)",
                               cpdit_dtype_name(dtype));
    }
    return CPDIT_OK;
}
