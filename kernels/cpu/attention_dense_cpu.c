/* attention_dense_cpu.c — attention with a causal mask or an additive bias (the text encoders:
 * CLIP is causal, T5 adds its relative position bias), forming the whole (Sq, Skv) score
 * matrix of one head at a time with two SGEMMs; no online softmax. The text sequences are short
 * (CLIP: 77 tokens, T5: up to 512), so the matrix stays small; the unmasked long sequences of
 * FLUX go to the blocked kernel (attention_cpu.c). Softmax rows use the vectorised exp of
 * attention_softmax_cpu.c.
 */
#include "config.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/attention_softmax_cpu.h"
#include "kernels/cpu/thread_pool.h"

#define DENSE_WHERE "attention_cpu_dense"

/* Softmax of row[0..n) in place, entries n..S-1 set to 0 (masked keys); returns the row's
 * log-sum-exp (-INFINITY when n == 0: then the whole row is 0). */
static float softmax_row(float *row, int n, int S)
{
    if (n == 0) {
        memset(row, 0, (size_t)S * sizeof(float));
        return -INFINITY;
    }
    const float m = attention_row_max(row, n);
    const float sum = attention_row_exp_sum(row, n, m); /* >= 1: the maximum gives e^0 */
    attention_row_scale(row, n, 1.0f / sum);
    if (n < S)
        memset(row + n, 0, (size_t)(S - n) * sizeof(float));
    return m + logf(sum);
}

typedef struct dense_job {
    float *out, *lse;
    const float *q, *k, *v;
    const cpdit_attention_args *a;
    int ldq, ldkv, ldo;
    long next; /* atomic (b, h) counter */
} dense_job;

/* One head: out_h (Sq, Dh) of batch b, head h. scores: (Sq, Skv). */
static void dense_head(const dense_job *j, int b, int h, float *scores)
{
    const cpdit_attention_args *a = j->a;
    const int Sq = a->Sq, Skv = a->Skv, H = a->H, Dh = a->D;
    const float *qb = j->q + (size_t)b * Sq * j->ldq, *kb = j->k + (size_t)b * Skv * j->ldkv;
    const float *vb = j->v + (size_t)b * Skv * j->ldkv;
    float *ob = j->out + (size_t)b * Sq * j->ldo;
    const size_t col = (size_t)h * (size_t)Dh;
    if (Skv > 0) /* scores (Sq, Skv) = scale · q_h (Sq, Dh) · k_h^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Sq, Skv, Dh, a->scale, qb + col,
                    j->ldq, kb + col, j->ldkv, 0.0f, scores, Skv);
    for (int i = 0; i < Sq; i++) {
        float *srow = scores + (size_t)i * (size_t)Skv;
        const int n = a->causal ? i + 1 : Skv;
        if (a->bias) {
            const float *bi = a->bias + ((size_t)h * Sq + (size_t)i) * (size_t)Skv;
            for (int c = 0; c < n; c++)
                srow[c] += bi[c];
        }
        const float l = softmax_row(srow, n, Skv);
        if (j->lse)
            j->lse[((size_t)b * Sq + (size_t)i) * (size_t)H + (size_t)h] = l;
    }
    if (Skv > 0) /* out_h (Sq, Dh) = P (Sq, Skv) · v_h (Skv, Dh) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Sq, Dh, Skv, 1.0f, scores, Skv,
                    vb + col, j->ldkv, 0.0f, ob + col, j->ldo);
    else
        for (int i = 0; i < Sq; i++)
            memset(ob + (size_t)i * j->ldo + col, 0, (size_t)Dh * sizeof(float));
}

/* Each pool thread's score matrix, kept between calls. */
static __thread float *dense_scores;
static __thread size_t dense_scores_floats;

static void dense_worker(void *arg, int worker, int workers)
{
    dense_job *j = arg;
    (void)worker;
    (void)workers;
    const size_t need = (size_t)j->a->Sq * (size_t)j->a->Skv + 1;
    if (dense_scores_floats < need) {
        free(dense_scores);
        dense_scores = malloc(need * sizeof(float));
        dense_scores_floats = dense_scores ? need : 0;
        if (!dense_scores)
            return; /* the other workers take the heads */
    }
    const long heads = (long)j->a->B * j->a->H;
    for (;;) {
        const long t = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (t >= heads)
            break;
        dense_head(j, (int)(t / j->a->H), (int)(t % j->a->H), dense_scores);
    }
}

/* Shapes and strides as cpdit_attention_args; one head per pool task (each head computed by
 * one thread, the same bits for any thread count). */
cpdit_status attention_cpu_dense(float *out, float *lse, const float *q, const float *k,
                                 const float *v, const cpdit_attention_args *a, cpdit_error *err)
{
    const int B = a->B, Sq = a->Sq, Skv = a->Skv, H = a->H, Dh = a->D;
    if (B < 0 || Sq < 0 || Skv < 0 || H < 0 || Dh < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, DENSE_WHERE,
                               "bad shape B=%d Sq=%d Skv=%d H=%d D=%d", B, Sq, Skv, H, Dh);
    if (a->causal && Sq != Skv)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, DENSE_WHERE,
                               "causal attention needs Sq == Skv (got %d and %d)", Sq, Skv);
    if ((long)B * Sq * H == 0)
        return CPDIT_OK;
    const int row = H * Dh;
    dense_job j = {.out = out, .lse = lse, .q = q, .k = k, .v = v, .a = a,
                   .ldq = a->ld_q > 0 ? a->ld_q : row, .ldkv = a->ld_kv > 0 ? a->ld_kv : row,
                   .ldo = a->ld_out > 0 ? a->ld_out : row};
    const long heads = (long)B * H;
    const int n = attention_cpu_get_num_threads();
    cpu_pool_run(heads < n ? (int)heads : n, dense_worker, &j);
    if (j.next < heads)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, DENSE_WHERE,
                               "out of memory for a %d x %d score matrix", Sq, Skv);
    return CPDIT_OK;
}
