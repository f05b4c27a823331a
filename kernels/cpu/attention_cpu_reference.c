/* attention_cpu_reference.c — the plain definition of scaled-dot-product attention, kept
 * beside the fast kernel (attention_cpu.c) so tests can compare the two; it is also the
 * "cpu-reference" attention kernel of the CPU table (every cpdit_attention_args: strides,
 * additive bias, causal mask).
 *
 * For each batch b, head h and query row i (shapes in kernels/backend.h):
 *   s_j     = scale * sum_d q[b,i,h,d] * k[b,j,h,d] + bias[h,i,j]    j visible to i
 *   m       = max_j s_j
 *   l       = sum_j exp(s_j - m)
 *   out[b,i,h,:] = sum_j exp(s_j - m) / l * v[b,j,h,:]
 *   lse[b,i,h]   = m + log(l)
 * Scores and sums are accumulated in double so the reference is more accurate than any fp32
 * kernel it checks. No visible key (Skv == 0) gives out = 0 and lse = -INFINITY.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention_cpu.h"

#define REF_WHERE "attention_cpu_reference"

cpdit_status attention_cpu_reference_args(float *out, float *lse, const float *q,
                                          const float *k, const float *v,
                                          const cpdit_attention_args *a, cpdit_error *err)
{
    const int B = a->B, Sq = a->Sq, Skv = a->Skv, H = a->H, D = a->D;
    if (B < 0 || Sq < 0 || Skv < 0 || H < 0 || D < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, REF_WHERE,
                               "bad shape B=%d Sq=%d Skv=%d H=%d D=%d", B, Sq, Skv, H, D);
    if (a->causal && Sq != Skv)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, REF_WHERE,
                               "causal attention needs Sq == Skv (got %d and %d)", Sq, Skv);
    const size_t row = (size_t)H * (size_t)D;
    const size_t ldq = a->ld_q > 0 ? (size_t)a->ld_q : row;
    const size_t ldkv = a->ld_kv > 0 ? (size_t)a->ld_kv : row;
    const size_t ldo = a->ld_out > 0 ? (size_t)a->ld_out : row;
    double *s = malloc(sizeof(double) * (Skv > 0 ? (size_t)Skv : 1));
    double *acc = malloc(sizeof(double) * (size_t)D);
    if (!s || !acc) {
        free(s);
        free(acc);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, REF_WHERE,
                               "out of memory for Skv=%d D=%d scratch", Skv, D);
    }
    for (int b = 0; b < B; b++) {
        const float *qb = q + (size_t)b * Sq * ldq;
        const float *kb = k + (size_t)b * Skv * ldkv;
        const float *vb = v + (size_t)b * Skv * ldkv;
        float *ob = out + (size_t)b * Sq * ldo;
        float *lb = lse ? lse + (size_t)b * Sq * H : NULL;
        for (int i = 0; i < Sq; i++) {
            const int n = a->causal ? i + 1 : Skv; /* visible keys */
            for (int h = 0; h < H; h++) {
                const float *qi = qb + (size_t)i * ldq + (size_t)h * D;
                float *oi = ob + (size_t)i * ldo + (size_t)h * D;
                if (n == 0) {
                    memset(oi, 0, sizeof(float) * (size_t)D);
                    if (lb)
                        lb[(size_t)i * H + h] = -INFINITY;
                    continue;
                }
                const float *bias =
                    a->bias ? a->bias + ((size_t)h * Sq + (size_t)i) * (size_t)Skv : NULL;
                double m = -INFINITY;
                for (int j = 0; j < n; j++) {
                    const float *kj = kb + (size_t)j * ldkv + (size_t)h * D;
                    double dot = 0.0;
                    for (int d = 0; d < D; d++)
                        dot += (double)qi[d] * (double)kj[d];
                    s[j] = dot * (double)a->scale + (bias ? (double)bias[j] : 0.0);
                    if (s[j] > m)
                        m = s[j];
                }
                double l = 0.0;
                for (int d = 0; d < D; d++)
                    acc[d] = 0.0;
                for (int j = 0; j < n; j++) {
                    const float *vj = vb + (size_t)j * ldkv + (size_t)h * D;
                    double p = exp(s[j] - m);
                    l += p;
                    for (int d = 0; d < D; d++)
                        acc[d] += p * (double)vj[d];
                }
                for (int d = 0; d < D; d++)
                    oi[d] = (float)(acc[d] / l);
                if (lb)
                    lb[(size_t)i * H + h] = (float)(m + log(l));
            }
        }
    }
    free(s);
    free(acc);
    return CPDIT_OK;
}

/* q, k, v, out: (B, S, H, D) fp32 contiguous; lse: (B, Sq, H) fp32 natural log. */
cpdit_status attention_cpu_reference(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int B, int Sq, int Skv, int H, int D,
                                     float scale, cpdit_error *err)
{
    const cpdit_attention_args a = {.B = B, .Sq = Sq, .Skv = Skv, .H = H, .D = D,
                                    .scale = scale};
    return attention_cpu_reference_args(out, lse, q, k, v, &a, err);
}
