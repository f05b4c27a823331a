/* attention_lse_merge.c — combine two partial attention results computed over disjoint
 * key/value sets (ring attention, split-KV) using their log-sum-exps.
 *
 * Each row r has D outputs. With a = lse_a[r], b = lse_b[r]:
 *   lse = log(e^a + e^b) = max + log1p(e^(min - max))
 *   out = out_a * e^(a - lse) + out_b * e^(b - lse)
 * An empty part has lse = -INFINITY and contributes nothing: merging it leaves the other part
 * unchanged bit for bit. Two empty parts stay empty (lse -INFINITY, out unchanged).
 */
#include "kernels/cpu/attention_cpu.h"

#include <math.h>

/* out_a: (rows, D) fp32, updated in place; lse_a: (rows) fp32, updated in place;
 * out_b: (rows, D) fp32; lse_b: (rows) fp32. Rows are contiguous D-float vectors, so for
 * (B, S, H, D) attention tensors rows = B*S*H. */
void attention_lse_merge(float *out_a, float *lse_a, const float *out_b, const float *lse_b,
                         size_t rows, int D)
{
    for (size_t r = 0; r < rows; r++) {
        const float a = lse_a[r];
        const float b = lse_b[r];
        float *oa = out_a + r * (size_t)D;
        const float *ob = out_b + r * (size_t)D;
        if (b == -INFINITY)
            continue; /* nothing to add */
        if (a == -INFINITY) {
            for (int d = 0; d < D; d++)
                oa[d] = ob[d];
            lse_a[r] = b;
            continue;
        }
        /* both finite: weights in (0, 1], computed in double relative to the larger lse so
         * the merge adds no error beyond the final rounding to fp32 */
        const double mx = a > b ? a : b;
        const double mn = a > b ? b : a;
        const double lse = mx + log1p(exp(mn - mx));
        const float wa = (float)exp((double)a - lse);
        const float wb = (float)exp((double)b - lse);
        for (int d = 0; d < D; d++)
            oa[d] = oa[d] * wa + ob[d] * wb;
        lse_a[r] = (float)lse;
    }
}
