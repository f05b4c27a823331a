/* torch_rng.h — PyTorch's CPU random generator, bit for bit: the noise diffusers draws with
 *   torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed), dtype=torch.float32)
 *
 * What PyTorch does (ATen, unchanged from 1.7 to 2.x; checked against Debian's 1.13):
 *   - The engine is MT19937 seeded with the LOW 32 BITS of the uint64 seed (the usual
 *     init_genrand recurrence), so seeds 5 and 2^32+5 give the same numbers.
 *   - random() is one 32-bit draw; random64() is two draws, first draw in the high half.
 *   - uniform float in [0, 1): (random() & (2^24-1)) * 2^-24; uniform double in [0, 1):
 *     (random64() & (2^53-1)) * 2^-53.
 *   - randn of a contiguous float32 tensor with n >= 16 elements ("normal_fill"): fill all n
 *     with uniform floats, then transform every complete chunk of 16 by Box-Muller (u1 = 1 -
 *     chunk[j], u2 = chunk[j+8], r = sqrt(-2 log u1), θ = 2π u2, chunk[j] = r cos θ,
 *     chunk[j+8] = r sin θ, j < 8). When 16 does not divide n, 16 NEW uniforms are drawn into
 *     the last 16 slots and transformed again (overwriting already finished values).
 *     The float math differs by build: on x86-64 CPUs with AVX2 PyTorch runs an AVX2 kernel
 *     whose log/sin/cos are Cephes-style float polynomials (avx_mathfun.h), compiled by GCC
 *     with some multiply-adds fused; elsewhere (aarch64, x86 without AVX2,
 *     ATEN_CPU_CAPABILITY=default) it calls the C library's logf/cosf/sinf. Both are below.
 *   - n < 16 (or any non-float32 dtype; not used here): one at::normal_distribution<double>
 *     per element: u1, u2 uniform doubles, r = sqrt(-2 log1p(-u2)), θ = 2π u1, return
 *     r cos θ and keep r sin θ in the generator for the next call (a cache that survives
 *     between calls and that manual_seed clears).
 *
 * Diffusers' FLUX pipeline draws latents of shape (B, 16, H/8, W/8) in ONE call with one
 * generator, in the pipeline's dtype: float32 (torch_randn_f32) or bfloat16 (torch_randn_bf16,
 * a different path with different values).
 */
#ifndef CPDIT_TORCH_RNG_H
#define CPDIT_TORCH_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TORCH_MT_STATE_N 624 /* MT19937 state words */
/* Smallest float32 tensor PyTorch fills with the 16-wide Box-Muller kernel. */
#define TORCH_NORMAL_FILL_MIN 16

typedef struct torch_generator {
    uint64_t seed;                     /* as given to manual_seed */
    uint32_t state[TORCH_MT_STATE_N];  /* MT19937 state */
    int left;                          /* draws left before the next twist, + 1 */
    int next;                          /* index of the next state word */
    int has_next_double_normal;        /* Box-Muller cache of normal_distribution<double> */
    double next_double_normal;
} torch_generator;

/* Which float32 normal_fill kernel to reproduce (see the top of this file). */
typedef enum torch_normal_kernel {
    TORCH_NORMAL_AVX2 = 0,   /* x86-64 with AVX2 or AVX-512: Linux GPU servers, most PCs */
    TORCH_NORMAL_DEFAULT = 1 /* portable kernel: aarch64 (Apple, Grace), no AVX2 */
} torch_normal_kernel;

/* torch.Generator("cpu").manual_seed(seed): g fully (re)initialised, cache cleared. */
void torch_generator_init(torch_generator *g, uint64_t seed);

/* One 32-bit MT19937 draw (CPUGeneratorImpl::random). */
uint32_t torch_generator_random(torch_generator *g);
/* Two draws: (first << 32) | second (CPUGeneratorImpl::random64). */
uint64_t torch_generator_random64(torch_generator *g);

/* at::uniform_real_distribution<float>(0, 1): 24 random bits, in [0, 1). */
float torch_uniform_f32(torch_generator *g);
/* at::uniform_real_distribution<double>(0, 1): 53 random bits, in [0, 1). */
double torch_uniform_f64(torch_generator *g);

/* at::normal_distribution<double>(0, 1) with the generator's Box-Muller cache. */
double torch_normal_f64(torch_generator *g);

/* out[0..n) = torch.randn(n, generator=g, dtype=torch.float32) with the given kernel; the
 * generator advances exactly as PyTorch's does (n draws, + 16 when 16 does not divide n, for
 * n >= 16). n = 0 draws nothing. A shape (B, C, H, W) is the same as n = B*C*H*W. */
void torch_randn_f32(torch_generator *g, float *out, size_t n, torch_normal_kernel kernel);

/* out[0..n) = torch.randn(n, generator=g, dtype=torch.bfloat16), each value as the float
 * equal to it. This is what FluxPipeline draws when the pipeline runs in bfloat16 (its latents
 * take the text embeddings' dtype): uniforms of 8 bits, and PyTorch's portable normal_fill
 * kernel with every intermediate rounded to bfloat16 (the same on every CPU, given the C
 * library's logf/sinf/cosf); n < 16 uses normal_distribution<double> as for float32. */
void torch_randn_bf16(torch_generator *g, float *out, size_t n);

/* Convenience: a fresh generator seeded with seed, then torch_randn_f32. Errors: out NULL
 * with n > 0 (INPUT). */
cpdit_status torch_randn_seeded(uint64_t seed, float *out, size_t n, torch_normal_kernel kernel,
                                cpdit_error *err);

/* "avx2" / "default" (as ATen's CPU capability names them) <-> enum. The parse error names
 * the accepted spellings; where = "noise kernel". */
const char *torch_normal_kernel_name(torch_normal_kernel kernel);
cpdit_status torch_normal_kernel_from_name(const char *name, torch_normal_kernel *kernel,
                                           cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
