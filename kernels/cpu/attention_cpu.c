/* attention_cpu.c — the fast local attention kernel: blocked online softmax (flash-attention
 * style) with the two block products through cblas_sgemm, fp32 throughout.
 *
 * Work is split into tasks (b, h, query block of up to ATTN_BLOCK_Q rows) handed to worker
 * threads through an atomic counter. One task, for its query rows Q (bq x D):
 *     m = -inf, l = 0, O = 0                       (O written straight into `out`)
 *     for each key/value block K_j, V_j (bk x D):
 *         S   = scale * Q K_j^T                     sgemm  bq x bk x D
 *         m'  = max(m, rowmax S);  P = exp(S - m')  in place, rowsum into l
 *         O   = O * e^(m - m') + P V_j              row rescale, then sgemm bq x D x bk
 *         l   = l * e^(m - m') + rowsum P;  m = m'
 *     out = O / l;  lse = m + log l
 * q, k, v rows of one (b, h) are H*D floats apart, which the sgemm calls take as leading
 * dimensions: nothing is copied. Tasks run on the rank's pool (kernels/cpu/thread_pool.h),
 * each worker's score block kept between calls (thread-local). While the kernel runs, OpenBLAS is set to one thread (our
 * workers are the parallelism) and restored afterwards; the setting is process-global, so no
 * other thread should call BLAS concurrently with this kernel.
 */
#include "kernels/cpu/attention_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/attention_softmax_cpu.h"
#include "kernels/cpu/blas_runtime.h"
#include "kernels/cpu/thread_pool.h"

/* Query rows per task (at most): OpenBLAS re-packs the K/V block for every task, so the
 * more query rows share one packing the closer the block products run to the SGEMM rate
 * (measured on Zen 5 / SkylakeX kernels: 64 rows ~120, 256 rows ~165 GFLOP/s per core;
 * 512 rows x 256 keys: D = 128 another 3-5% over 256 x 512, D = 64 the same; PERFORMANCE.md). */
#ifndef ATTN_BLOCK_Q /* overridable at build time for tuning */
#define ATTN_BLOCK_Q 512
#endif
/* Smallest query block when shrinking it to give every thread enough tasks. */
#define ATTN_BLOCK_Q_MIN 32
/* Tasks per thread below which the query block is halved (load balance on many cores). */
#define ATTN_TASKS_PER_THREAD 4
/* Keys per block: the score block (ATTN_BLOCK_Q x ATTN_BLOCK_KV fp32 = 512 KiB) stays in L2
 * between the two products and the softmax pass. */
#ifndef ATTN_BLOCK_KV /* overridable at build time for tuning */
#define ATTN_BLOCK_KV 256
#endif
/* The thread count the query blocks are sized for, whatever the pool (see the block choice). */
#define ATTN_SPLIT_THREADS 8
/* Upper bound on worker threads (also bounded by the task count). */
#define ATTN_MAX_THREADS CPU_POOL_MAX_THREADS

static int attn_threads_setting = 0; /* 0 = follow the BLAS thread count */

void attention_cpu_set_num_threads(int n)
{
    __atomic_store_n(&attn_threads_setting, n > 0 ? n : 0, __ATOMIC_RELAXED);
}

int attention_cpu_get_num_threads(void)
{
    const int n = __atomic_load_n(&attn_threads_setting, __ATOMIC_RELAXED);
    return n > 0 ? n : cpu_pool_size();
}

typedef struct attn_job {
    float *out, *lse;
    const float *q, *k, *v;
    int B, Sq, Skv, H, D;
    int ld_q, ld_kv, ld_o; /* floats between consecutive tokens */
    float scale;
    int block_q;  /* query rows per task */
    int block_kv; /* keys per block: min(ATTN_BLOCK_KV, Skv) */
    int q_blocks; /* ceil(Sq / block_q) */
    long tasks;   /* B * H * q_blocks */
    long next;    /* atomic task counter */
} attn_job;

/* One task: query rows [i0, i0 + bq) of batch b, head h. s: bq x block_kv scratch;
 * m, l: bq floats. */
static void attn_task(const attn_job *j, int b, int h, int i0, int bq, float *s, float *m, float *l)
{
    const int H = j->H, D = j->D, Skv = j->Skv;
    const int ld = j->ld_o, ldq = j->ld_q, ldkv = j->ld_kv; /* floats between tokens */
    const float *q = j->q + ((size_t)b * j->Sq + (size_t)i0) * (size_t)ldq + (size_t)h * D;
    const float *k = j->k + (size_t)b * Skv * (size_t)ldkv + (size_t)h * D;
    const float *v = j->v + (size_t)b * Skv * (size_t)ldkv + (size_t)h * D;
    float *o = j->out + ((size_t)b * j->Sq + (size_t)i0) * (size_t)ld + (size_t)h * D;
    float *lse = j->lse ? j->lse + ((size_t)b * j->Sq + (size_t)i0) * (size_t)H + h : NULL;

    if (Skv == 0) {
        for (int r = 0; r < bq; r++) {
            memset(o + (size_t)r * ld, 0, sizeof(float) * (size_t)D);
            if (lse)
                lse[(size_t)r * H] = -INFINITY;
        }
        return;
    }
    for (int j0 = 0; j0 < Skv; j0 += j->block_kv) {
        const int bk = Skv - j0 < j->block_kv ? Skv - j0 : j->block_kv;
        const int first = j0 == 0;
        /* S (bq x bk) = scale * Q (bq x D) . K_j^T (D x bk) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, D, j->scale, q, ldq,
                    k + (size_t)j0 * ldkv, ldkv, 0.0f, s, bk);
        for (int r = 0; r < bq; r++) {
            float *sr = s + (size_t)r * bk;
            const float mx = attention_row_max(sr, bk);
            if (first) {
                m[r] = mx;
                l[r] = attention_row_exp_sum(sr, bk, mx);
                continue;
            }
            const float mnew = mx > m[r] ? mx : m[r];
            const float sum = attention_row_exp_sum(sr, bk, mnew);
            if (mnew > m[r]) { /* rescale what was accumulated under the old maximum */
                const float alpha = expf(m[r] - mnew);
                attention_row_scale(o + (size_t)r * ld, D, alpha);
                l[r] *= alpha;
                m[r] = mnew;
            }
            l[r] += sum;
        }
        /* O (bq x D) = P (bq x bk) . V_j (bk x D) + (first ? 0 : O) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, D, bk, 1.0f, s, bk,
                    v + (size_t)j0 * ldkv, ldkv, first ? 0.0f : 1.0f, o, ld);
    }
    for (int r = 0; r < bq; r++) {
        attention_row_scale(o + (size_t)r * ld, D, 1.0f / l[r]);
        if (lse)
            lse[(size_t)r * H] = m[r] + logf(l[r]);
    }
}

/* Each pool thread's scratch (score block, m, l), grown as needed and kept for the next call:
 * no allocation (and no page faults) in steady state. */
static __thread float *attn_scratch;
static __thread size_t attn_scratch_floats;

static void attn_worker(void *arg, int worker, int workers)
{
    attn_job *j = arg;
    (void)worker;
    (void)workers;
    const size_t s_floats = (size_t)j->block_q * (size_t)j->block_kv;
    const size_t need = s_floats + 2 * (size_t)j->block_q;
    if (attn_scratch_floats < need) {
        free(attn_scratch);
        attn_scratch = malloc(sizeof(float) * need);
        attn_scratch_floats = attn_scratch ? need : 0;
        if (!attn_scratch)
            return; /* the other workers take the tasks */
    }
    float *s = attn_scratch;
    float *m = s + s_floats, *l = m + j->block_q;
    for (;;) {
        const long t = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (t >= j->tasks)
            break;
        /* task order: q-block fastest, so neighbouring tasks share the same K/V head */
        const int qb = (int)(t % j->q_blocks);
        const long bh = t / j->q_blocks;
        const int h = (int)(bh % j->H), b = (int)(bh / j->H);
        const int i0 = qb * j->block_q;
        const int bq = j->Sq - i0 < j->block_q ? j->Sq - i0 : j->block_q;
        attn_task(j, b, h, i0, bq, s, m, l);
    }
}

/* q: (B, Sq, H, D); k, v: (B, Skv, H, D); out: (B, Sq, H, D); lse: (B, Sq, H) or NULL; fp32,
 * row strides as cpdit_attention_args (bias and causal are not this kernel's: see
 * attention_cpu_kernels.c). */
cpdit_status attention_cpu_flash(float *out, float *lse, const float *q, const float *k,
                                 const float *v, const cpdit_attention_args *a, cpdit_error *err)
{
    const int B = a->B, Sq = a->Sq, Skv = a->Skv, H = a->H, D = a->D;
    if (B < 0 || Sq < 0 || Skv < 0 || H < 0 || D < 1 || (long)H * D > (long)(1 << 30))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "attention_cpu_forward",
                               "bad shape B=%d Sq=%d Skv=%d H=%d D=%d", B, Sq, Skv, H, D);
    const int row = H * D;
    attn_job job = {
        .out = out,
        .lse = lse,
        .q = q,
        .k = k,
        .v = v,
        .B = B,
        .Sq = Sq,
        .Skv = Skv,
        .H = H,
        .D = D,
        .ld_q = a->ld_q > 0 ? a->ld_q : row,
        .ld_kv = a->ld_kv > 0 ? a->ld_kv : row,
        .ld_o = a->ld_out > 0 ? a->ld_out : row,
        .scale = a->scale,
        .block_q = ATTN_BLOCK_Q,
        .block_kv = Skv < ATTN_BLOCK_KV ? (Skv > 0 ? Skv : 1) : ATTN_BLOCK_KV,
    };
    if ((long)B * H * Sq == 0)
        return CPDIT_OK;
    long nthreads = attention_cpu_get_num_threads();
    /* smaller query blocks when there would be too few tasks to keep ATTN_SPLIT_THREADS threads
     * busy: a fixed count, not this pool's size, so that the sgemm shapes (and OpenBLAS's
     * choice of kernel for them, which changes the rounding: its small-matrix path on AVX-512)
     * and hence the bits do not depend on the thread count */
    while (job.block_q > ATTN_BLOCK_Q_MIN &&
           (long)B * H * ((Sq + job.block_q - 1) / job.block_q) <
               ATTN_TASKS_PER_THREAD * ATTN_SPLIT_THREADS)
        job.block_q /= 2;
    if (job.block_q > Sq)
        job.block_q = Sq;
    job.q_blocks = (Sq + job.block_q - 1) / job.block_q;
    job.tasks = (long)B * H * job.q_blocks;
    if (nthreads > job.tasks)
        nthreads = job.tasks;
    if (nthreads > ATTN_MAX_THREADS)
        nthreads = ATTN_MAX_THREADS;
    const int blas_threads = blas_runtime_get_num_threads();
    if (blas_threads != 1)
        blas_runtime_set_num_threads(1);

    cpu_pool_run((int)nthreads, attn_worker, &job);

    if (blas_threads != 1)
        blas_runtime_set_num_threads(blas_threads);
    if (job.next < job.tasks) /* every worker failed to allocate (one success finishes all) */
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "attention_cpu_forward",
                               "out of memory for the %zu-byte score block of a worker",
                               sizeof(float) * ((size_t)job.block_q * job.block_kv));
    return CPDIT_OK;
}

cpdit_status attention_cpu_forward(float *out, float *lse, const float *q, const float *k,
                                   const float *v, int B, int Sq, int Skv, int H, int D,
                                   float scale, cpdit_error *err)
{
    const cpdit_attention_args a = {.B = B, .Sq = Sq, .Skv = Skv, .H = H, .D = D,
                                    .scale = scale};
    return attention_cpu_flash(out, lse, q, k, v, &a, err);
}
