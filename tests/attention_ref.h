/* attention_ref.h — attention in double precision on the host, the reference of the GPU
 * attention tests (tests/test_cuda_kernels.c, tests/test_cuda_cudnn_attention.c).
 *
 * q (B, Sq, H, D) with row stride ldq, k and v (B, Sk, H, D) with row stride ldkv (column
 * blocks of a fused qkv buffer when ld > H D); bias (H, Sq, Sk) fp32 added to the scaled
 * scores, or NULL; causal: query i sees keys j <= i. Writes out (B, Sq, H, D) contiguous and
 * lse (B, Sq, H), the natural log of the sum of exponentials of the scores (-inf when Sk = 0,
 * out 0 then).
 */
#ifndef CPDIT_TESTS_ATTENTION_REF_H
#define CPDIT_TESTS_ATTENTION_REF_H

#include <math.h>
#include <stdlib.h>

static void attention_ref(const float *q, int ldq, const float *k, const float *v, int ldkv,
                          double *out, double *lse, int B, int Sq, int Sk, int H, int D,
                          double scale, const float *bias, int causal)
{
    double *s = malloc((size_t)(Sk ? Sk : 1) * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Sq; i++)
            for (int h = 0; h < H; h++) {
                const float *qr = q + ((size_t)b * Sq + i) * ldq + (size_t)h * D;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < Sk; j++) {
                    const float *kr = k + ((size_t)b * Sk + j) * ldkv + (size_t)h * D;
                    double dot = 0;
                    for (int d = 0; d < D; d++)
                        dot += (double)qr[d] * kr[d];
                    s[j] = dot * scale + (bias ? bias[((size_t)h * Sq + i) * Sk + j] : 0.0);
                    if (causal && j > i)
                        s[j] = -INFINITY;
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < Sk; j++)
                    sum += exp(s[j] - mx);
                double *o = out + (((size_t)b * Sq + i) * H + h) * D;
                for (int d = 0; d < D; d++) {
                    double acc = 0;
                    for (int j = 0; j < Sk; j++)
                        acc += exp(s[j] - mx) *
                               v[((size_t)b * Sk + j) * ldkv + (size_t)h * D + d];
                    o[d] = Sk ? acc / sum : 0.0;
                }
                lse[((size_t)b * Sq + i) * H + h] = Sk ? mx + log(sum) : -INFINITY;
            }
    free(s);
}

#endif
