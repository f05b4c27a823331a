/* rope_cpu.c — rotary position embedding applied in place, FLUX / diffusers layout.
 *
 * diffusers' apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-1) views the
 * head dim as D/2 pairs (x[2i], x[2i+1]) = (re, im) and computes
 *   out = x * cos + rotate(x) * sin,   rotate(x)[2i] = -x[2i+1], rotate(x)[2i+1] = x[2i]
 * which is the complex product (re + i im)(cos + i sin) when both entries of a pair share one
 * angle (FLUX's table repeats each angle twice: repeat_interleave_real=True).
 */
#include "config.h"

#include "kernels/cpu/backend_cpu.h"

/* x (S, H, D) in place; cos, sin (S, D). D even. */
CPU_KERNEL_CLONES
void cpu_rope(float *x, const float *cos, const float *sin, int S, int H, int D)
{
    for (int s = 0; s < S; s++) {
        const float *c = cos + (size_t)s * D;
        const float *sn = sin + (size_t)s * D;
        for (int h = 0; h < H; h++) {
            float *v = x + ((size_t)s * H + h) * D;
            for (int i = 0; i + 1 < D; i += 2) {
                const float re = v[i], im = v[i + 1];
                v[i] = re * c[i] - im * sn[i];
                v[i + 1] = im * c[i + 1] + re * sn[i + 1];
            }
        }
    }
}
