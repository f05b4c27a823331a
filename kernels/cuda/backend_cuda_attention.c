/* backend_cuda_attention.c — the attention kernels of the CUDA tables (kernels/backend.h's
 * cpdit_attention_kernel): "cuda-flash" (the flash kernel with LSE on the table's element type,
 * the reference for head dims it lacks), "cuda-reference" (cuBLAS SGEMMs + softmax with LSE, on
 * fp32 copies for bf16), "cudnn" (cuDNN's fused graph, bf16 operands) and "auto" (the faster
 * of cuda-flash and cudnn, timed once per shape); each written once over the activation type,
 * with one set of entries per table ("cuda": bf16, "cuda-fp32": fp32, its names prefixed).
 */
#include "config.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cuda/alloc_cuda.h"
#include "kernels/cuda/attention_flash_cuda.h"
#include "kernels/cuda/backend_cuda_kernels.h"
#include "kernels/cuda/backend_cuda_table.h"
#include "kernels/cuda/sdpa_cudnn.h"
#include "kernels/cuda/sdpa_layout.h"

/* Scores of the reference attention per chunk of queries (H x chunk x Skv fp32). */
#define CUDA_ATTN_SCORES_BYTES ((size_t)512 << 20)
/* Flash kernel limits (attention_flash_cuda.h). */
#define CUDA_FLASH_D_QUANTUM 32
#define CUDA_FLASH_D_MAX 256


static cpdit_status check_args(const cpdit_attention_args *a, const char *name, cpdit_error *err)
{
    if (a->B < 0 || a->Sq < 0 || a->Skv < 0 || a->H < 0 || a->D <= 0 ||
        (a->causal && a->Sq != a->Skv))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CUDA_WHERE,
                               "%s: bad shape B %d Sq %d Skv %d H %d D %d%s", name, a->B, a->Sq,
                               a->Skv, a->H, a->D, a->causal ? " (causal needs Sq == Skv)" : "");
    return CPDIT_OK;
}

static cpdit_cuda_attention to_cuda_args(const cpdit_attention_args *a)
{
    cpdit_cuda_attention c = {a->B,      a->Sq,     a->Skv,   a->H,    a->D,     a->ld_q,
                              a->ld_kv,  a->ld_out, a->scale, a->bias, a->causal};
    return c;
}

/* The fp32 reference (cuBLAS SGEMMs + softmax with LSE). Activations of type t: bf16 q, k, v
 * are widened into contiguous fp32 staging ((B Sq) rows of H D: the row stride covers the
 * items, as item b starts at b Sq ld), the result rounded into out once. */
static cpdit_status reference_forward(cpdit_cuda_dtype t, cpdit_buf *out, float *lse,
                                      const cpdit_buf *q, const cpdit_buf *k, const cpdit_buf *v,
                                      const cpdit_attention_args *a, cpdit_error *err)
{
    cpdit_cuda_attention c = to_cuda_args(a);
    const size_t ws_bytes = cpdit_cuda_attention_reference_bytes(&c, CUDA_ATTN_SCORES_BYTES);
    void *ws = cpdit_cuda_alloc(ws_bytes);
    if (!ws)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE,
                               "out of device memory for attention scores (%zu MiB)",
                               ws_bytes >> 20);
    if (t == CPDIT_CUDA_F32) {
        int rc = cpdit_cuda_attention_reference(
            cpdit_cuda_S.cublas, (const float *)q, (const float *)k, (const float *)v, (float *)out,
            lse, &c, ws, CUDA_ATTN_SCORES_BYTES, cpdit_cuda_S.stream);
        cpdit_cuda_free(ws);
        return cpdit_cuda_rc_status(rc, "attention (cuda-reference)", err);
    }
    const int HD = a->H * a->D;
    const long ldq = a->ld_q ? a->ld_q : HD, ldkv = a->ld_kv ? a->ld_kv : HD,
               ldo = a->ld_out ? a->ld_out : HD;
    const size_t rq = (size_t)a->B * a->Sq, rkv = (size_t)a->B * a->Skv;
    float *qf = cpdit_cuda_alloc(rq * HD * sizeof(float)),
          *kf = cpdit_cuda_alloc(rkv * HD * sizeof(float)),
          *vf = cpdit_cuda_alloc(rkv * HD * sizeof(float)),
          *of = cpdit_cuda_alloc(rq * HD * sizeof(float));
    int rc = qf && kf && vf && of ? 0 : (int)cudaErrorMemoryAllocation;
    if (!rc)
        rc =
            cpdit_cuda_convert_rows(CPDIT_CUDA_F32, qf, HD, t, q, ldq, rq, HD, cpdit_cuda_S.stream);
    if (!rc)
        rc = cpdit_cuda_convert_rows(CPDIT_CUDA_F32, kf, HD, t, k, ldkv, rkv, HD,
                                     cpdit_cuda_S.stream);
    if (!rc)
        rc = cpdit_cuda_convert_rows(CPDIT_CUDA_F32, vf, HD, t, v, ldkv, rkv, HD,
                                     cpdit_cuda_S.stream);
    c.ld_q = c.ld_kv = c.ld_out = 0; /* the staging is contiguous */
    if (!rc)
        rc = cpdit_cuda_attention_reference(cpdit_cuda_S.cublas, qf, kf, vf, of, lse, &c, ws,
                                            CUDA_ATTN_SCORES_BYTES, cpdit_cuda_S.stream);
    if (!rc)
        rc = cpdit_cuda_convert_rows(t, out, ldo, CPDIT_CUDA_F32, of, HD, rq, HD,
                                     cpdit_cuda_S.stream);
    /* stream-ordered reuse: freeing after queueing is safe */
    cpdit_cuda_free(qf), cpdit_cuda_free(kf), cpdit_cuda_free(vf), cpdit_cuda_free(of);
    cpdit_cuda_free(ws);
    return cpdit_cuda_rc_status(rc, "attention (cuda-reference)", err);
}

static cpdit_status attention_reference_t(cpdit_cuda_dtype t, cpdit_buf *out, float *lse,
                                          const cpdit_buf *q, const cpdit_buf *k,
                                          const cpdit_buf *v, const cpdit_attention_args *a,
                                          cpdit_error *err)
{
    if (!cpdit_cuda_ready())
        return cpdit_cuda_not_ready(err);
    cpdit_status st = check_args(a, "cuda-reference", err);
    if (!st)
        st = cpdit_cuda_latched_status(err);
    return st ? st : reference_forward(t, out, lse, q, k, v, a, err);
}

/* The flash kernel loads q, k, v of type t and stores out of type t (fp32 math, fp32 LSE). */
static cpdit_status attention_flash_t(cpdit_cuda_dtype t, cpdit_buf *out, float *lse,
                                      const cpdit_buf *q, const cpdit_buf *k, const cpdit_buf *v,
                                      const cpdit_attention_args *a, cpdit_error *err)
{
    if (!cpdit_cuda_ready())
        return cpdit_cuda_not_ready(err);
    cpdit_status st = check_args(a, "cuda-flash", err);
    if (!st)
        st = cpdit_cuda_latched_status(err);
    if (st)
        return st;
    if (a->D % CUDA_FLASH_D_QUANTUM || a->D > CUDA_FLASH_D_MAX) /* e.g. the VAE's D = 512 */
        return reference_forward(t, out, lse, q, k, v, a, err);
    const cpdit_cuda_attention c = to_cuda_args(a);
    return cpdit_cuda_rc_status(
        cpdit_cuda_attention_flash_ex(t, q, k, v, out, lse, &c, cpdit_cuda_S.stream),
        "attention (cuda-flash)", err);
}

/* ---- cudnn: cuDNN's fused flash attention (sdpa_cudnn.h), bf16 Q, K, V, P, O, fp32 stats */

static pthread_once_t sdpa_once = PTHREAD_ONCE_INIT;
static cpdit_cudnn_sdpa *sdpa_ctx;
static char sdpa_error[256];

static void sdpa_init(void)
{
    sdpa_ctx = cpdit_cudnn_sdpa_create(sdpa_error, sizeof sdpa_error);
}

/* Shapes already reported as refused by cuDNN (the fallback note is printed once per shape). */
#define CUDNN_REFUSED_MAX 64
static struct { int B, Sq, Skv, H, D; } cudnn_refused[CUDNN_REFUSED_MAX];
static int cudnn_nrefused;

static void note_refused(const cpdit_attention_args *a, const char *msg)
{
    pthread_mutex_lock(&cpdit_cuda_S.lock);
    int seen = 0;
    for (int i = 0; i < cudnn_nrefused && !seen; i++)
        seen = cudnn_refused[i].B == a->B && cudnn_refused[i].Sq == a->Sq &&
               cudnn_refused[i].Skv == a->Skv && cudnn_refused[i].H == a->H &&
               cudnn_refused[i].D == a->D;
    if (!seen && cudnn_nrefused < CUDNN_REFUSED_MAX) {
        cudnn_refused[cudnn_nrefused].B = a->B, cudnn_refused[cudnn_nrefused].Sq = a->Sq;
        cudnn_refused[cudnn_nrefused].Skv = a->Skv, cudnn_refused[cudnn_nrefused].H = a->H;
        cudnn_refused[cudnn_nrefused].D = a->D;
        cudnn_nrefused++;
    }
    pthread_mutex_unlock(&cpdit_cuda_S.lock);
    if (!seen)
        fprintf(stderr, "cpdit: %s: attention cudnn: %s; this shape runs on cuda-flash\n",
                CUDA_WHERE, msg);
}

/* What the cudnn kernel does for a: 0 = the cuDNN graph; 1 = cuda-flash (bias or causal, which
 * this graph leaves out; an empty side); 2 = cuda-flash because cuDNN refuses the shape (msg);
 * -1 = the cuDNN context cannot be made (msg). Builds the plan on first use of a shape. */
static int cudnn_route(const cpdit_attention_args *a, char *msg, size_t msg_size)
{
    if (a->bias || a->causal || a->B == 0 || a->Sq == 0 || a->Skv == 0 || a->H == 0)
        return 1;
    pthread_once(&sdpa_once, sdpa_init);
    if (!sdpa_ctx) {
        snprintf(msg, msg_size, "cuDNN attention: %s", sdpa_error);
        return -1;
    }
    int rc = cpdit_cudnn_sdpa_prepare(sdpa_ctx, a->B, a->Sq, a->Skv, a->H, a->D, msg, msg_size);
    return rc == 0 ? 0 : rc == CPDIT_CUDNN_SDPA_UNSUPPORTED ? 2 : -1;
}


/* p (rows of cols elements of type t, row stride ld) as cuDNN's operand: p itself when it is
 * already contiguous bf16 and aligned, else a bf16 copy in *stage (from the caching
 * allocator; a strided copy for bf16, one rounding for fp32). NULL when out of memory or the
 * copy could not be queued (*rc set). */
static const void *cudnn_operand(cpdit_cuda_dtype t, const void *p, long ld, size_t rows,
                                 int cols, void **stage, int *rc)
{
    *stage = NULL;
    if (cpdit_sdpa_operand_direct(cpdit_cuda_dtype_size(t), (uintptr_t)p, ld, cols))
        return p;
    *stage = cpdit_cuda_alloc(rows * (size_t)cols * sizeof(uint16_t));
    if (!*stage) {
        *rc = (int)cudaErrorMemoryAllocation;
        return NULL;
    }
    *rc = cpdit_cuda_convert_rows(CPDIT_CUDA_BF16, *stage, cols, t, p, ld, rows, cols,
                                  cpdit_cuda_S.stream);
    return *rc ? NULL : *stage;
}

/* cuDNN's graph on activations of type t: the "cuda" table's bf16 q, k, v, out go to cuDNN as
 * they are when contiguous and aligned (a column block of a fused qkv buffer, ld > H D, is
 * copied to a contiguous block first: a copy, no rounding); cuda-fp32's are rounded to bf16
 * copies and out widened back. Stats (B, H, Sq) fp32 -> lse (B, Sq, H). */
static cpdit_status cudnn_forward(cpdit_cuda_dtype t, cpdit_buf *out, float *lse,
                                  const cpdit_buf *q, const cpdit_buf *k, const cpdit_buf *v,
                                  const cpdit_attention_args *a, cpdit_error *err)
{
    const int B = a->B, Sq = a->Sq, Skv = a->Skv, H = a->H, D = a->D, HD = H * D;
    const long ldq = a->ld_q ? a->ld_q : HD, ldkv = a->ld_kv ? a->ld_kv : HD,
               ldo = a->ld_out ? a->ld_out : HD;
    const size_t rq = (size_t)B * Sq, rkv = (size_t)B * Skv;
    void *qs = NULL, *ks = NULL, *vs = NULL, *os = NULL;
    int rc = 0;
    const void *qb = cudnn_operand(t, q, ldq, rq, HD, &qs, &rc);
    const void *kb = qb ? cudnn_operand(t, k, ldkv, rkv, HD, &ks, &rc) : NULL;
    const void *vb = kb ? cudnn_operand(t, v, ldkv, rkv, HD, &vs, &rc) : NULL;
    /* out: written in place when it is contiguous aligned bf16 */
    void *ob = NULL;
    if (vb) {
        if (cpdit_sdpa_operand_direct(cpdit_cuda_dtype_size(t), (uintptr_t)out, ldo, HD))
            ob = out;
        else if (!(ob = os = cpdit_cuda_alloc(rq * HD * sizeof(uint16_t))))
            rc = (int)cudaErrorMemoryAllocation;
    }
    float *stats = ob ? cpdit_cuda_alloc((size_t)B * H * Sq * sizeof(float)) : NULL;
    cpdit_status st = CPDIT_OK;
    char msg[512] = "";
    if (!stats) {
        st = rc == (int)cudaErrorMemoryAllocation || !rc
                 ? cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE,
                                   "out of device memory for cudnn attention (B %d Sq %d Skv %d "
                                   "H %d D %d)",
                                   B, Sq, Skv, H, D)
                 : cpdit_cuda_rc_status(rc, "cudnn attention: operands", err);
        goto done;
    }
    if (cpdit_cudnn_sdpa_forward(sdpa_ctx, qb, kb, vb, ob, stats, B, Sq, Skv, H, D, a->scale,
                                 cpdit_cuda_S.stream, msg, sizeof msg))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "%s", msg);
    if (!st && ob != out)
        st = cpdit_cuda_rc_status(cpdit_cuda_convert_rows(t, out, ldo, CPDIT_CUDA_BF16, ob, HD, rq,
                                                          HD, cpdit_cuda_S.stream),
                                  "cudnn attention: out", err);
    if (!st && lse)
        st =
            cpdit_cuda_rc_status(cpdit_cuda_stats_to_lse(lse, stats, B, H, Sq, cpdit_cuda_S.stream),
                                 "cudnn attention: stats to lse", err);
done:
    /* stream-ordered reuse: freeing after queueing is safe */
    cpdit_cuda_free(qs), cpdit_cuda_free(ks), cpdit_cuda_free(vs), cpdit_cuda_free(os);
    cpdit_cuda_free(stats);
    return st;
}

static cpdit_status attention_cudnn_t(cpdit_cuda_dtype t, cpdit_buf *out, float *lse,
                                      const cpdit_buf *q, const cpdit_buf *k, const cpdit_buf *v,
                                      const cpdit_attention_args *a, cpdit_error *err)
{
    if (!cpdit_cuda_ready())
        return cpdit_cuda_not_ready(err);
    cpdit_status st = check_args(a, "cudnn", err);
    if (!st)
        st = cpdit_cuda_latched_status(err);
    if (st)
        return st;
    char msg[512] = "";
    switch (cudnn_route(a, msg, sizeof msg)) {
    case 0:
        return cudnn_forward(t, out, lse, q, k, v, a, err);
    case 2:
        note_refused(a, msg);
        return attention_flash_t(t, out, lse, q, k, v, a, err);
    case 1:
        return attention_flash_t(t, out, lse, q, k, v, a, err);
    default:
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "%s", msg);
    }
}

/* ---- auto: cuda-flash or cudnn, whichever is faster, measured once per shape and table */

#define AUTO_SHAPES_MAX 128
typedef struct auto_pick {
    int B, Sq, Skv, H, D, ld_q, ld_kv, ld_out;
    cpdit_cuda_dtype t; /* the table's activations */
    int cudnn;          /* 1: cudnn won */
} auto_pick;
static auto_pick auto_picks[AUTO_SHAPES_MAX];
static int auto_npicks;
static pthread_mutex_t auto_lock = PTHREAD_MUTEX_INITIALIZER;

static int same_shape(const auto_pick *p, cpdit_cuda_dtype t, const cpdit_attention_args *a)
{
    return p->t == t && p->B == a->B && p->Sq == a->Sq && p->Skv == a->Skv && p->H == a->H &&
           p->D == a->D && p->ld_q == a->ld_q && p->ld_kv == a->ld_kv && p->ld_out == a->ld_out;
}

typedef cpdit_status (*attention_fn)(cpdit_cuda_dtype, cpdit_buf *, float *, const cpdit_buf *,
                                     const cpdit_buf *, const cpdit_buf *,
                                     const cpdit_attention_args *, cpdit_error *);

/* Milliseconds of the fastest of `reps` calls of fn after one warm-up (the warm-up builds the
 * cuDNN plan); < 0 when a call fails (err filled). */
static float time_kernel(attention_fn fn, cpdit_cuda_dtype t, cpdit_buf *out, float *lse,
                         const cpdit_buf *q, const cpdit_buf *k, const cpdit_buf *v,
                         const cpdit_attention_args *a, int reps, cpdit_error *err)
{
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best = -1.0f;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        cudaGetLastError();
        goto out;
    }
    if (fn(t, out, lse, q, k, v, a, err))
        goto out;
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(e0, cpdit_cuda_S.stream);
        if (fn(t, out, lse, q, k, v, a, err)) {
            best = -1.0f;
            goto out;
        }
        cudaEventRecord(e1, cpdit_cuda_S.stream);
        float ms = 0;
        if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) !=
                                                           cudaSuccess) {
            cudaGetLastError();
            best = -1.0f;
            goto out;
        }
        if (best < 0 || ms < best)
            best = ms;
    }
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    return best;
}

static cpdit_status attention_auto_t(cpdit_cuda_dtype t, cpdit_buf *out, float *lse,
                                     const cpdit_buf *q, const cpdit_buf *k, const cpdit_buf *v,
                                     const cpdit_attention_args *a, cpdit_error *err)
{
    if (!cpdit_cuda_ready())
        return cpdit_cuda_not_ready(err);
    cpdit_status st = check_args(a, "auto", err);
    if (!st)
        st = cpdit_cuda_latched_status(err);
    if (st)
        return st;
    char msg[512] = "";
    /* cudnn would run cuda-flash anyway (bias, causal, empty, refused shape) or cannot run */
    const int route = cudnn_route(a, msg, sizeof msg);
    if (route != 0) {
        if (route == 2 && cpdit_backend_verbose()) /* auto: a refusal is only a choice */
            note_refused(a, msg);
        return attention_flash_t(t, out, lse, q, k, v, a, err);
    }
    int pick = -1;
    pthread_mutex_lock(&auto_lock);
    for (int i = 0; i < auto_npicks && pick < 0; i++)
        if (same_shape(&auto_picks[i], t, a))
            pick = auto_picks[i].cudnn;
    pthread_mutex_unlock(&auto_lock);
    if (pick < 0) {
        cpdit_error e1, e2;
        cpdit_error_clear(&e1);
        cpdit_error_clear(&e2);
        const float t_flash = time_kernel(attention_flash_t, t, out, lse, q, k, v, a, 3, &e1);
        const float t_cudnn = time_kernel(cudnn_forward, t, out, lse, q, k, v, a, 3, &e2);
        if (t_flash < 0 && t_cudnn < 0) { /* both failed: report cuda-flash's error */
            if (err)
                *err = e1;
            return CPDIT_ERR_RUNTIME;
        }
        pick = t_cudnn >= 0 && (t_flash < 0 || t_cudnn < t_flash);
        pthread_mutex_lock(&auto_lock);
        if (auto_npicks < AUTO_SHAPES_MAX) {
            auto_pick p = {a->B,    a->Sq,    a->Skv,    a->H, a->D,
                           a->ld_q, a->ld_kv, a->ld_out, t,    pick};
            auto_picks[auto_npicks++] = p;
        }
        pthread_mutex_unlock(&auto_lock);
        if (cpdit_backend_verbose() || t_flash < 0 || t_cudnn < 0)
            fprintf(stderr,
                    "cpdit: %s: attention auto: B %d Sq %d Skv %d H %d D %d: cuda-flash %s, "
                    "cudnn %s -> %s\n",
                    CUDA_WHERE, a->B, a->Sq, a->Skv, a->H, a->D,
                    t_flash < 0 ? e1.what : "", t_cudnn < 0 ? e2.what : "",
                    pick ? "cudnn" : "cuda-flash");
        if (cpdit_backend_verbose() && t_flash >= 0 && t_cudnn >= 0)
            fprintf(stderr, "cpdit: %s: attention auto: (cuda-flash %.3f ms, cudnn %.3f ms)\n",
                    CUDA_WHERE, (double)t_flash, (double)t_cudnn);
    }
    /* the timed runs left the other kernel's result in out: run the choice once more */
    return pick ? cudnn_forward(t, out, lse, q, k, v, a, err)
                : attention_flash_t(t, out, lse, q, k, v, a, err);
}

#define ATTENTION_PARAMS                                                                           \
    (cpdit_buf * out, float *lse, const cpdit_buf *q, const cpdit_buf *k, const cpdit_buf *v,     \
     const cpdit_attention_args *a, cpdit_error *err)
#define ATTENTION_ARGS (out, lse, q, k, v, a, err)
TABLE_OP(cpdit_status, attention_flash, ATTENTION_PARAMS, ATTENTION_ARGS)
TABLE_OP(cpdit_status, attention_reference, ATTENTION_PARAMS, ATTENTION_ARGS)
TABLE_OP(cpdit_status, attention_cudnn, ATTENTION_PARAMS, ATTENTION_ARGS)
TABLE_OP(cpdit_status, attention_auto, ATTENTION_PARAMS, ATTENTION_ARGS)

/* The "cuda" table's kernels: bf16 in and out, fp32 math; the output rounded to bf16 once (at
 * most 2^-8 of a value: the bound the conformance suite holds a bf16 output to), cudnn also
 * rounds P: tolerances against fp32 attention on the same inputs. */
#define CUDA_BF16_OUTPUT_TOL (1.0 / 256.0)
static const cpdit_attention_kernel cuda_flash_kernel = {
    "cuda-flash",
    "flash attention with LSE, bf16 q/k/v/out, fp32 math, one pass over the keys (head dims "
    "32..256 in steps of 32; others take cuda-reference)",
    cuda_attention_flash, CUDA_BF16_OUTPUT_TOL};
static const cpdit_attention_kernel cuda_reference_kernel = {
    "cuda-reference",
    "cuBLAS SGEMM scores + softmax with LSE + SGEMM on fp32 copies of bf16 q/k/v, any shape",
    cuda_attention_reference, CUDA_BF16_OUTPUT_TOL};
/* bf16 Q, K, V (8 bits of mantissa), P and O rounded to bf16: normalised errors ~4e-3 */
static const cpdit_attention_kernel cuda_cudnn_kernel = {
    "cudnn",
    "cuDNN fused flash attention (graph API): bf16 Q, K, V, O, fp32 softmax stats as the LSE; "
    "bias, causal and shapes cuDNN refuses run on cuda-flash",
    cuda_attention_cudnn, 2e-2};
const cpdit_attention_kernel cpdit_cuda_bf16_auto_kernel = {
    "auto",
    "times cuda-flash and cudnn once per shape on first use and keeps the faster (--verbose "
    "prints the choice); bias and causal take cuda-flash",
    cuda_attention_auto, 2e-2};
const cpdit_attention_kernel *const cpdit_cuda_bf16_kernels[] = {
    &cuda_flash_kernel, &cuda_reference_kernel, &cuda_cudnn_kernel, NULL};

/* The "cuda-fp32" table's: the same kernels on fp32 activations (held to the suite's fp32
 * thresholds, except cudnn which rounds to bf16 inside); names unique over all backends. */
static const cpdit_attention_kernel cuda32_flash_kernel = {
    "cuda-fp32-flash",
    "flash attention with LSE, fp32, one pass over the keys (head dims 32..256 in steps of 32; "
    "others take cuda-fp32-reference)",
    cuda32_attention_flash, 0.0};
static const cpdit_attention_kernel cuda32_reference_kernel = {
    "cuda-fp32-reference", "cuBLAS SGEMM scores + softmax with LSE + SGEMM, fp32, any shape",
    cuda32_attention_reference, 0.0};
static const cpdit_attention_kernel cuda32_cudnn_kernel = {
    "cuda-fp32-cudnn",
    "cuDNN fused flash attention (graph API): bf16 copies of Q, K, V, fp32 softmax stats as the "
    "LSE; bias, causal and shapes cuDNN refuses run on cuda-fp32-flash",
    cuda32_attention_cudnn, 2e-2};
const cpdit_attention_kernel cpdit_cuda_f32_auto_kernel = {
    "auto",
    "times cuda-flash and cudnn once per shape on first use and keeps the faster (--verbose "
    "prints the choice); bias and causal take cuda-fp32-flash",
    cuda32_attention_auto, 2e-2};
const cpdit_attention_kernel *const cpdit_cuda_f32_kernels[] = {
    &cuda32_flash_kernel, &cuda32_reference_kernel, &cuda32_cudnn_kernel, NULL};

