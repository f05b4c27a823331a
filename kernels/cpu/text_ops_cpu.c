/* text_ops_cpu.c — attention with a causal mask or additive bias, and the activations of the
 * text encoders (see text_ops_cpu.h). Score and value products go through cblas_sgemm; the
 * softmax rows use the vectorised exp of attention_softmax_cpu.c.
 */
#include "config.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/attention_softmax_cpu.h"
#include "kernels/cpu/text_ops_cpu.h"

/* QuickGELU's sigmoid slope (OpenAI CLIP, transformers' QuickGELUActivation). */
#define QUICK_GELU_SLOPE 1.702f

/* Softmax of row[0..n) in place (n >= 1), entries n..S-1 set to 0 (masked keys). */
static void softmax_row(float *row, int n, int S)
{
    const float m = attention_row_max(row, n);
    const float sum = attention_row_exp_sum(row, n, m); /* >= 1: the maximum gives e^0 */
    attention_row_scale(row, n, 1.0f / sum);
    if (n < S)
        memset(row + n, 0, (size_t)(S - n) * sizeof(float));
}

/* q, k, v, out: (S, H, Dh) row-strided; scores (S, S); bias (H, S, S) or NULL. */
void text_attention_cpu(float *out, int ldo, const float *q, const float *k, const float *v,
                        int ld, const float *bias, int causal, int S, int H, int Dh, float scale,
                        float *scores)
{
    if (S <= 0 || H <= 0 || Dh <= 0)
        return;
    for (int h = 0; h < H; h++) {
        const size_t col = (size_t)h * (size_t)Dh;
        /* scores (S, S) = scale · q_h (S, Dh) · k_h^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, S, S, Dh, scale, q + col, ld,
                    k + col, ld, 0.0f, scores, S);
        for (int i = 0; i < S; i++) {
            float *row = scores + (size_t)i * (size_t)S;
            const int n = causal ? i + 1 : S;
            if (bias) {
                const float *b = bias + ((size_t)h * (size_t)S + (size_t)i) * (size_t)S;
                for (int j = 0; j < n; j++)
                    row[j] += b[j];
            }
            softmax_row(row, n, S);
        }
        /* out_h (S, Dh) = P (S, S) · v_h (S, Dh) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, Dh, S, 1.0f, scores, S,
                    v + col, ld, 0.0f, out + col, ldo);
    }
}

void text_quick_gelu_cpu(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const float a = x[i];
        y[i] = a / (1.0f + expf(-QUICK_GELU_SLOPE * a));
    }
}

void text_gelu_erf_cpu(float *y, const float *x, size_t n)
{
    const float inv_sqrt2 = (float)M_SQRT1_2;
    for (size_t i = 0; i < n; i++) {
        const float a = x[i];
        y[i] = 0.5f * a * (1.0f + erff(a * inv_sqrt2));
    }
}

void text_relu_cpu(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void text_mul_cpu(float *y, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}
