/* attention_cpu_reference.c — the plain definition of scaled-dot-product attention, kept
 * beside the fast kernel (attention_cpu.c) so tests can compare the two.
 *
 * For each batch b, head h and query row i (shapes in attention_cpu.h):
 *   s_j     = scale * sum_d q[b,i,h,d] * k[b,j,h,d]          j = 0 .. Skv-1
 *   m       = max_j s_j
 *   l       = sum_j exp(s_j - m)
 *   out[b,i,h,:] = sum_j exp(s_j - m) / l * v[b,j,h,:]
 *   lse[b,i,h]   = m + log(l)
 * Scores and sums are accumulated in double so the reference is more accurate than any fp32
 * kernel it checks. Skv == 0 gives out = 0 and lse = -INFINITY.
 */
#include "kernels/cpu/attention_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* q, k, v, out: (B, S, H, D) fp32; lse: (B, Sq, H) fp32 natural log. */
cpdit_status attention_cpu_reference(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int B, int Sq, int Skv, int H, int D,
                                     float scale, cpdit_error *err)
{
    if (B < 0 || Sq < 0 || Skv < 0 || H < 0 || D < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "attention_cpu_reference",
                               "bad shape B=%d Sq=%d Skv=%d H=%d D=%d", B, Sq, Skv, H, D);
    const size_t row = (size_t)H * (size_t)D; /* floats between consecutive tokens */
    double *s = malloc(sizeof(double) * (Skv > 0 ? (size_t)Skv : 1));
    double *acc = malloc(sizeof(double) * (size_t)D);
    if (!s || !acc) {
        free(s);
        free(acc);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "attention_cpu_reference",
                               "out of memory for Skv=%d D=%d scratch", Skv, D);
    }
    for (int b = 0; b < B; b++) {
        const float *qb = q + (size_t)b * Sq * row;
        const float *kb = k + (size_t)b * Skv * row;
        const float *vb = v + (size_t)b * Skv * row;
        float *ob = out + (size_t)b * Sq * row;
        float *lb = lse + (size_t)b * Sq * H;
        for (int i = 0; i < Sq; i++) {
            for (int h = 0; h < H; h++) {
                const float *qi = qb + (size_t)i * row + (size_t)h * D;
                float *oi = ob + (size_t)i * row + (size_t)h * D;
                if (Skv == 0) {
                    memset(oi, 0, sizeof(float) * (size_t)D);
                    lb[(size_t)i * H + h] = -INFINITY;
                    continue;
                }
                double m = -INFINITY;
                for (int j = 0; j < Skv; j++) {
                    const float *kj = kb + (size_t)j * row + (size_t)h * D;
                    double dot = 0.0;
                    for (int d = 0; d < D; d++)
                        dot += (double)qi[d] * (double)kj[d];
                    s[j] = dot * (double)scale;
                    if (s[j] > m)
                        m = s[j];
                }
                double l = 0.0;
                for (int d = 0; d < D; d++)
                    acc[d] = 0.0;
                for (int j = 0; j < Skv; j++) {
                    const float *vj = vb + (size_t)j * row + (size_t)h * D;
                    double p = exp(s[j] - m);
                    l += p;
                    for (int d = 0; d < D; d++)
                        acc[d] += p * (double)vj[d];
                }
                for (int d = 0; d < D; d++)
                    oi[d] = (float)(acc[d] / l);
                lb[(size_t)i * H + h] = (float)(m + log(l));
            }
        }
    }
    free(s);
    free(acc);
    return CPDIT_OK;
}
