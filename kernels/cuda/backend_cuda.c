/* backend_cuda.c — the CUDA kernel table (kernels/backend.h) over the CUDA kernels of
 * kernels/cuda/: caching allocator, cuBLASLt linear, flash / reference attention with LSE, the
 * small ops, the VAE's cuDNN convolutions. See backend_cuda.h for the policy (device per local
 * rank, one compute stream, bf16 weights, fp32 activations, latched errors).
 */
#include "config.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cuda/alloc_cuda.h"
#include "kernels/cuda/attention_flash_cuda.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/backend_cuda_kernels.h"
#include "kernels/cuda/cuda_runtime_info.h"
#include "kernels/cuda/gemm_lt_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/sdpa_cudnn.h"
#include "kernels/cuda/vae_ops_cuda.h"
#include "lib/io/dtype.h"

#define CUDA_WHERE "kernels/cuda"
/* Scores of the reference attention per chunk of queries (H x chunk x Skv fp32). */
#define CUDA_ATTN_SCORES_BYTES ((size_t)512 << 20)
/* Flash kernel limits (attention_flash_cuda.h). */
#define CUDA_FLASH_D_QUANTUM 32
#define CUDA_FLASH_D_MAX 256
/* cuDNN errors come back from vae_ops_cuda as this + the cudnnStatus_t (cuDNN 9's statuses run
 * from 1001 to 5004: above every cuBLAS (2000 + status) and CUDA code). */
#define CUDA_CUDNN_ERROR_BASE 100000

/* ------------------------------------------------------------------ state */

typedef struct cuda_state {
    pthread_once_t once;
    int ok;                 /* initialised */
    char init_error[CPDIT_ERROR_WHAT_MAX];
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
    cpdit_gemm_lt *gemm;
    pthread_mutex_t lock;   /* the latch and the small staging buffers */
    char latched[CPDIT_ERROR_WHAT_MAX]; /* first failure of a void op, "" when none */
    void *small;            /* device staging for host-side small arrays (ids, moments) */
    size_t small_bytes;
} cuda_state;

static cuda_state S = {PTHREAD_ONCE_INIT, 0, "", -1, NULL, NULL, NULL,
                       PTHREAD_MUTEX_INITIALIZER, "", NULL, 0};

/* The device chosen by cpdit_cuda_bind_device_mpi (-1: none, device 0). */
static int bound_device = -1;

void cpdit_cuda_bind_device_mpi(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin)
        return;
    MPI_Comm node;
    int local = 0;
    /* collective: every rank splits, with or without a device */
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
        MPI_SUCCESS)
        return;
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
        cudaGetLastError();
        return;
    }
    bound_device = local % ndev;
}

static void init_once(void)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev <= 0) {
        snprintf(S.init_error, sizeof S.init_error, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        cudaGetLastError();
        return;
    }
    S.device = bound_device >= 0 && bound_device < ndev ? bound_device : 0;
    if ((e = cudaSetDevice(S.device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&S.stream, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(S.init_error, sizeof S.init_error, "device %d: %s", S.device,
                 cudaGetErrorString(e));
        return;
    }
    cublasStatus_t bs = cublasCreate(&S.cublas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snprintf(S.init_error, sizeof S.init_error, "cublasCreate: %s",
                 cublasGetStatusString(bs));
        return;
    }
    cublasSetMathMode(S.cublas, CUBLAS_DEFAULT_MATH); /* fp32 stays fp32 (no TF32) */
    char msg[256] = "";
    S.gemm = cpdit_gemm_lt_create(0, msg, sizeof msg);
    if (!S.gemm) {
        snprintf(S.init_error, sizeof S.init_error, "%s", msg);
        return;
    }
    S.ok = 1;
}

/* Initialise once (on the calling thread's first use); 0 when the backend cannot run. */
static int ready(void)
{
    pthread_once(&S.once, init_once);
    if (S.ok)
        cudaSetDevice(S.device); /* threads other than the first start on device 0 */
    return S.ok;
}

static cpdit_status not_ready(cpdit_error *err)
{
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "the cuda backend cannot run: %s",
                           S.init_error[0] ? S.init_error : "not initialised");
}

void *cpdit_cuda_compute_stream(cpdit_error *err)
{
    if (!ready()) {
        not_ready(err);
        return NULL;
    }
    return (void *)S.stream;
}

int cpdit_cuda_backend_device(cpdit_error *err)
{
    if (!ready()) {
        not_ready(err);
        return -1;
    }
    return S.device;
}

/* A failed launch in a void op: say so now, keep the first message for the next status. */
static void latch(const char *op, int rc)
{
    if (!rc)
        return;
    char what[CPDIT_ERROR_WHAT_MAX];
    if (rc >= CUDA_CUDNN_ERROR_BASE)
        snprintf(what, sizeof what, "%s: cuDNN: %s", op,
                 cudnnGetErrorString((cudnnStatus_t)(rc - CUDA_CUDNN_ERROR_BASE)));
    else if (rc >= CPDIT_CUDA_CUBLAS_ERROR_BASE)
        snprintf(what, sizeof what, "%s: cuBLAS status %d", op,
                 rc - CPDIT_CUDA_CUBLAS_ERROR_BASE);
    else
        snprintf(what, sizeof what, "%s: %s", op, cudaGetErrorString((cudaError_t)rc));
    pthread_mutex_lock(&S.lock);
    if (!S.latched[0])
        snprintf(S.latched, sizeof S.latched, "%s", what);
    pthread_mutex_unlock(&S.lock);
    fprintf(stderr, "cpdit: %s: %s\n", CUDA_WHERE, what);
}

/* CPDIT_OK, or the latched failure of an earlier void op (reported once). */
static cpdit_status latched_status(cpdit_error *err)
{
    cpdit_status st = CPDIT_OK;
    pthread_mutex_lock(&S.lock);
    if (S.latched[0]) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "an earlier op failed: %s",
                             S.latched);
        S.latched[0] = '\0';
    }
    pthread_mutex_unlock(&S.lock);
    return st;
}

static cpdit_status rc_status(int rc, const char *op, cpdit_error *err)
{
    if (!rc)
        return CPDIT_OK;
    if (rc >= CUDA_CUDNN_ERROR_BASE)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "%s: cuDNN: %s", op,
                               cudnnGetErrorString((cudnnStatus_t)(rc - CUDA_CUDNN_ERROR_BASE)));
    if (rc >= CPDIT_CUDA_CUBLAS_ERROR_BASE)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "%s: cuBLAS status %d", op,
                               rc - CPDIT_CUDA_CUBLAS_ERROR_BASE);
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "%s: %s", op,
                           cudaGetErrorString((cudaError_t)rc));
}

/* Device staging of at least bytes (for small host arrays), under S.lock. */
static void *small_buffer(size_t bytes)
{
    if (bytes <= S.small_bytes)
        return S.small;
    /* the old block may still be read by queued kernels: free after the stream drains */
    cudaStreamSynchronize(S.stream);
    cpdit_cuda_free(S.small);
    S.small = cpdit_cuda_alloc(bytes);
    S.small_bytes = S.small ? bytes : 0;
    return S.small;
}

/* ------------------------------------------------------------------ runtime */

static int cuda_available(char *why, size_t why_size)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev <= 0) {
        if (why && why_size)
            snprintf(why, why_size, "no CUDA device (%s)",
                     e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        cudaGetLastError();
        return 0;
    }
    return 1;
}

static void cuda_describe(char *buf, size_t size)
{
    cpdit_cuda_describe(buf, size);
}

static cpdit_status cuda_sync(cpdit_error *err)
{
    if (!ready())
        return not_ready(err);
    cudaError_t e = cudaStreamSynchronize(S.stream);
    cpdit_status st = latched_status(err); /* an earlier void op's failure first */
    return st ? st : rc_status((int)e, "cudaStreamSynchronize", err);
}

/* ------------------------------------------------------------------ memory */

static void *cuda_alloc(size_t bytes)
{
    return ready() ? cpdit_cuda_alloc(bytes) : NULL;
}

/* Packed convolution weights in bf16 (conv2d_pack_stored, NATIVE format, bf16 or fp8 stored):
 * conv2d tells them from the fp32 ones by this list; free takes a block off it before the
 * allocator may hand the address out again. */
static void **bf16_convs;
static size_t n_bf16_convs, cap_bf16_convs;

static int is_bf16_conv(const void *p)
{
    int found = 0;
    pthread_mutex_lock(&S.lock);
    for (size_t i = 0; i < n_bf16_convs && !found; i++)
        found = bf16_convs[i] == p;
    pthread_mutex_unlock(&S.lock);
    return found;
}

static void cuda_free(void *p)
{
    if (!p || !ready())
        return;
    if (n_bf16_convs) {
        pthread_mutex_lock(&S.lock);
        for (size_t i = 0; i < n_bf16_convs; i++)
            if (bf16_convs[i] == p) {
                bf16_convs[i] = bf16_convs[--n_bf16_convs];
                break;
            }
        pthread_mutex_unlock(&S.lock);
    }
    cpdit_cuda_free(p);
}

/* Any direction (unified addressing); complete on return. */
static void cuda_copy(void *dst, const void *src, size_t bytes, const char *op)
{
    if (!bytes || !ready())
        return;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, S.stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(S.stream);
    latch(op, (int)e);
}

static void cuda_upload(void *dst, const void *host_src, size_t bytes)
{
    cuda_copy(dst, host_src, bytes, "upload");
}

static void cuda_download(void *host_dst, const void *src, size_t bytes)
{
    cuda_copy(host_dst, src, bytes, "download");
}

/* ------------------------------------------------------------------ weights */

struct cpdit_weight {
    int rows, cols;
    cpdit_cuda_dtype type; /* bf16 (NATIVE) or fp32 (F32) */
    void *data;            /* device, (rows, cols) row-major */
    int owned;             /* data from cpdit_cuda_alloc (else the caller's storage) */
};

static cpdit_cuda_dtype weight_type(const cpdit_weight_desc *d)
{
    return d->format == CPDIT_WEIGHT_F32 ? CPDIT_CUDA_F32 : CPDIT_CUDA_BF16;
}

static size_t cuda_weight_bytes(const cpdit_weight_desc *d)
{
    const size_t n = (size_t)d->rows * (size_t)d->cols;
    return n * (weight_type(d) == CPDIT_CUDA_F32 ? sizeof(float) : sizeof(uint16_t));
}

static cpdit_status cuda_weight_create(cpdit_weight **out, const cpdit_weight_desc *d,
                                       cpdit_error *err)
{
    *out = NULL;
    if (!ready())
        return not_ready(err);
    if (d->rows < 0 || d->cols < 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CUDA_WHERE, "weight of %d x %d", d->rows,
                               d->cols);
    if (!cpdit_dtype_is_float(d->dtype) || d->dtype == CPDIT_DTYPE_F64)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CUDA_WHERE,
                               "weights of dtype %s are not supported (F32, F16, BF16, F8)",
                               cpdit_dtype_name(d->dtype));
    const size_t n = (size_t)d->rows * (size_t)d->cols;
    cpdit_weight *w = calloc(1, sizeof *w);
    if (!w)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "out of memory");
    w->rows = d->rows;
    w->cols = d->cols;
    w->type = weight_type(d);
    const size_t bytes = cuda_weight_bytes(d);
    w->owned = !d->storage; /* storage: device memory of the caller (a streaming slot) */
    w->data = d->storage ? d->storage : cpdit_cuda_alloc(bytes);
    if (!w->data) {
        free(w);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE,
                               "out of device memory for a %d x %d weight (%zu MiB)", d->rows,
                               d->cols, bytes >> 20);
    }
    /* the values as the device keeps them, on the host; then one copy */
    const void *src = d->data;
    void *tmp = NULL;
    cpdit_status st = CPDIT_OK;
    const int as_stored = (w->type == CPDIT_CUDA_F32 && d->dtype == CPDIT_DTYPE_F32) ||
                          (w->type == CPDIT_CUDA_BF16 && d->dtype == CPDIT_DTYPE_BF16);
    const int write = !d->storage || d->fill; /* fill 0: the storage holds it already */
    if (write && !as_stored && n) {
        float *f = malloc(n * sizeof *f);
        st = f ? cpdit_dtype_to_f32(f, d->data, d->dtype, n, err)
               : cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "out of memory");
        if (!st && w->type == CPDIT_CUDA_BF16) { /* round to bf16 in place (2 of 4 bytes) */
            uint16_t *h = (uint16_t *)f;
            for (size_t i = 0; i < n; i++)
                h[i] = cpdit_f32_to_bf16(f[i]);
        }
        tmp = f;
        src = f;
    }
    if (!st && n && write) {
        cudaError_t e = cudaMemcpyAsync(w->data, src, bytes, cudaMemcpyHostToDevice, S.stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(S.stream);
        st = rc_status((int)e, "weight upload", err);
    }
    free(tmp);
    if (st) {
        if (w->owned)
            cpdit_cuda_free(w->data);
        free(w);
        return st;
    }
    *out = w;
    return CPDIT_OK;
}

static void cuda_weight_free(cpdit_weight *w)
{
    if (!w)
        return;
    if (w->owned)
        cuda_free(w->data);
    free(w);
}

/* ------------------------------------------------------------------ linear */

/* The table's linear with a cuBLASLt epilogue (CPDIT_GEMM_PLAIN: bias only). With an
 * activation epilogue cuBLASLt may have no algorithm: then *refused = 1 and nothing is queued. */
static cpdit_status linear_impl(float *y, int ldy, const float *x, int ldx, const cpdit_weight *w,
                                const float *b, int M, int K, int N, int accumulate,
                                cpdit_gemm_epilogue epi, int *refused, cpdit_error *err)
{
    if (!ready())
        return not_ready(err);
    if (w->rows != N || w->cols != K)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CUDA_WHERE,
                               "linear: weight is %d x %d, the call needs %d x %d", w->rows,
                               w->cols, N, K);
    if (M < 0 || K < 0 || N < 0 || ldx < K || ldy < N)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CUDA_WHERE,
                               "linear: M %d K %d N %d ldx %d ldy %d", M, K, N, ldx, ldy);
    cpdit_status st = latched_status(err);
    if (st || M == 0 || N == 0)
        return st;
    if (K == 0) { /* x W^T = 0: y = b, or unchanged / + b */
        if (!accumulate)
            latch("linear (K = 0)", cpdit_cuda_fill_rows(y, ldy, (size_t)M, N, 0.0f, S.stream));
        for (int r = 0; b && r < M; r++)
            latch("linear (K = 0)", cpdit_cuda_add(y + (size_t)r * ldy, y + (size_t)r * ldy, b,
                                                   (size_t)N, S.stream));
        return latched_status(err);
    }
    /* cuBLASLt's bias pointer wants 16-byte alignment: copy an odd one */
    float *b_al = NULL;
    if (b && ((uintptr_t)b % 16) != 0) {
        b_al = cpdit_cuda_alloc((size_t)N * sizeof *b_al);
        if (!b_al)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "out of device memory");
        cudaError_t e = cudaMemcpyAsync(b_al, b, (size_t)N * sizeof *b_al,
                                        cudaMemcpyDeviceToDevice, S.stream);
        if (e != cudaSuccess) {
            cpdit_cuda_free(b_al);
            return rc_status((int)e, "linear bias copy", err);
        }
        b = b_al;
    }
    const void *xin = x;
    int ldxin = ldx;
    void *xb = NULL;
    if (w->type == CPDIT_CUDA_BF16) { /* bf16 GEMM: x rounded to bf16, contiguous */
        xb = cpdit_cuda_alloc((size_t)M * (size_t)K * sizeof(uint16_t));
        if (!xb) {
            cpdit_cuda_free(b_al);
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE,
                                   "out of device memory for the bf16 input of a linear");
        }
        st = rc_status(cpdit_cuda_cast_f32_bf16(xb, x, ldx, (size_t)M, K, S.stream),
                       "linear: cast to bf16", err);
        xin = xb;
        ldxin = K;
    }
    if (!st) {
        char msg[256] = "";
        int rc = cpdit_gemm_lt_linear_f32out_ex(S.gemm, w->type, y, ldy, xin, ldxin, w->data, b,
                                                M, K, N, accumulate, epi, S.stream, msg,
                                                sizeof msg);
        if (rc == (int)CUBLAS_STATUS_NOT_SUPPORTED && epi != CPDIT_GEMM_PLAIN && refused)
            *refused = 1;
        else if (rc)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE,
                                 "linear (M %d, K %d, N %d, %s): %s", M, K, N,
                                 w->type == CPDIT_CUDA_BF16 ? "bf16" : "fp32", msg);
    }
    /* the caching allocator reuses blocks in stream order: freeing after queueing is safe */
    cpdit_cuda_free(xb);
    cpdit_cuda_free(b_al);
    return st;
}

static cpdit_status cuda_linear(float *y, int ldy, const float *x, int ldx, const cpdit_weight *w,
                                const float *b, int M, int K, int N, int accumulate,
                                cpdit_error *err)
{
    return linear_impl(y, ldy, x, ldx, w, b, M, K, N, accumulate, CPDIT_GEMM_PLAIN, NULL, err);
}

static void cuda_act(cpdit_act kind, float *y, const float *x, size_t n);

/* y = act(x W^T + b). GELU-tanh with bf16 weights: one cuBLASLt call with the GELU_BIAS
 * epilogue (fp32 accumulate, the activation applied to the fp32 sum before the store). fp32
 * weights (the exact reference path), other activations, K = 0, or a shape cuBLASLt has no
 * fused algorithm for: linear, then the activation kernel over the block. */
static cpdit_status cuda_linear_act(float *y, int ldy, const float *x, int ldx,
                                    const cpdit_weight *w, const float *b, int M, int K, int N,
                                    cpdit_act act, cpdit_error *err)
{
    if (!ready())
        return not_ready(err);
    int refused = 0;
    cpdit_status st;
    if (act == CPDIT_ACT_GELU_TANH && w->type == CPDIT_CUDA_BF16 && K > 0) {
        st = linear_impl(y, ldy, x, ldx, w, b, M, K, N, 0, CPDIT_GEMM_GELU_TANH, &refused, err);
        if (st || !refused)
            return st;
        if (cpdit_backend_verbose())
            fprintf(stderr, "cpdit: %s: no cuBLASLt GELU epilogue for linear M %d K %d N %d: "
                            "GEMM then gelu-tanh\n", CUDA_WHERE, M, K, N);
    }
    if ((st = linear_impl(y, ldy, x, ldx, w, b, M, K, N, 0, CPDIT_GEMM_PLAIN, NULL, err)) ||
        act == CPDIT_ACT_NONE || M <= 0 || N <= 0)
        return st;
    if (ldy == N) {
        cuda_act(act, y, y, (size_t)M * (size_t)N);
    } else {
        for (int r = 0; r < M; r++)
            cuda_act(act, y + (size_t)r * ldy, y + (size_t)r * ldy, (size_t)N);
    }
    return latched_status(err);
}

/* ------------------------------------------------------------------ small ops */

static void cuda_layer_norm(float *y, const float *x, const float *gamma, const float *beta,
                            size_t rows, int dim, float eps)
{
    if (rows && ready())
        latch("layer_norm", cpdit_cuda_layer_norm(y, x, gamma, beta, rows, dim, eps, S.stream));
}

static void cuda_rms_norm(float *y, const float *x, const float *weight, size_t rows, int dim,
                          float eps)
{
    if (rows && ready())
        latch("rms_norm", cpdit_cuda_rms_norm(y, x, weight, rows, dim, eps, S.stream));
}

static void cuda_rope(float *x, const float *cos, const float *sin, int S_, int H, int D)
{
    if (S_ > 0 && H > 0 && ready())
        latch("rope", cpdit_cuda_rope(x, cos, sin, S_, H, D, S.stream));
}

static void cuda_act(cpdit_act kind, float *y, const float *x, size_t n)
{
    if (!n || !ready())
        return;
    int k;
    switch (kind) {
    case CPDIT_ACT_NONE:
        if (y != x)
            latch("act (none)", (int)cudaMemcpyAsync(y, x, n * sizeof *y,
                                                     cudaMemcpyDeviceToDevice, S.stream));
        return;
    case CPDIT_ACT_SILU: k = CPDIT_CUDA_ACT_SILU; break;
    case CPDIT_ACT_GELU: k = CPDIT_CUDA_ACT_GELU_ERF; break;
    case CPDIT_ACT_RELU: k = CPDIT_CUDA_ACT_RELU; break;
    case CPDIT_ACT_MISH: k = CPDIT_CUDA_ACT_MISH; break;
    case CPDIT_ACT_GELU_TANH: k = CPDIT_CUDA_ACT_GELU_TANH; break;
    case CPDIT_ACT_QUICK_GELU: k = CPDIT_CUDA_ACT_QUICK_GELU; break;
    default:
        latch("act: unknown kind", (int)cudaErrorInvalidValue);
        return;
    }
    latch("act", cpdit_cuda_act(k, y, x, n, S.stream));
}

static void cuda_add(float *y, const float *a, const float *b, size_t n)
{
    if (n && ready())
        latch("add", cpdit_cuda_add(y, a, b, n, S.stream));
}

static void cuda_mul(float *y, const float *a, const float *b, size_t n)
{
    if (n && ready())
        latch("mul", cpdit_cuda_mul(y, a, b, n, S.stream));
}

/* ids are host memory (the table's contract): staged to the device first. */
static void cuda_embedding(float *y, const float *table, const int32_t *ids, size_t n, int dim)
{
    if (!n || !ready())
        return;
    pthread_mutex_lock(&S.lock);
    int32_t *dids = small_buffer(n * sizeof *ids);
    int rc = dids ? (int)cudaMemcpyAsync(dids, ids, n * sizeof *ids, cudaMemcpyHostToDevice,
                                         S.stream)
                  : (int)cudaErrorMemoryAllocation;
    if (!rc)
        rc = cpdit_cuda_embedding(y, table, dids, n, dim, S.stream);
    pthread_mutex_unlock(&S.lock);
    latch("embedding", rc);
}

static void cuda_modulate(float *y, const float *x, const float *shift, const float *scale,
                          size_t rows, int dim)
{
    if (rows && ready())
        latch("modulate", cpdit_cuda_modulate(y, x, shift, scale, rows, dim, S.stream));
}

static void cuda_gated_residual(float *h, int ldh, const float *x, int ldx, const float *gate,
                                size_t rows, int dim)
{
    if (rows && ready())
        latch("gated_residual",
              cpdit_cuda_gated_residual(h, ldh, x, ldx, gate, rows, dim, S.stream));
}

static void cuda_copy_rows(float *dst, int ldd, const float *src, int lds, size_t rows, int dim)
{
    if (rows && dim > 0 && ready())
        latch("copy_rows", cpdit_cuda_copy_rows(dst, ldd, src, lds, rows, dim, S.stream));
}

static void cuda_lse_merge(float *out_a, float *lse_a, const float *out_b, const float *lse_b,
                           size_t rows, int D)
{
    if (rows && ready())
        latch("lse_merge", cpdit_cuda_lse_merge(out_a, lse_a, out_b, lse_b, (long)rows, 1, D,
                                                S.stream));
}

static int cuda_workers(void)
{
    return 1; /* one stream: ring attention computes a block in one call */
}

/* ------------------------------------------------------------------ attention */

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

static cpdit_status reference_forward(float *out, float *lse, const float *q, const float *k,
                                      const float *v, const cpdit_attention_args *a,
                                      cpdit_error *err)
{
    const cpdit_cuda_attention c = to_cuda_args(a);
    const size_t ws_bytes = cpdit_cuda_attention_reference_bytes(&c, CUDA_ATTN_SCORES_BYTES);
    void *ws = cpdit_cuda_alloc(ws_bytes);
    if (!ws)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE,
                               "out of device memory for attention scores (%zu MiB)",
                               ws_bytes >> 20);
    int rc = cpdit_cuda_attention_reference(S.cublas, q, k, v, out, lse, &c, ws,
                                            CUDA_ATTN_SCORES_BYTES, S.stream);
    cpdit_cuda_free(ws);
    return rc_status(rc, "attention (cuda-reference)", err);
}

static cpdit_status cuda_attention_reference(float *out, float *lse, const float *q,
                                             const float *k, const float *v,
                                             const cpdit_attention_args *a, cpdit_error *err)
{
    if (!ready())
        return not_ready(err);
    cpdit_status st = check_args(a, "cuda-reference", err);
    if (!st)
        st = latched_status(err);
    return st ? st : reference_forward(out, lse, q, k, v, a, err);
}

static cpdit_status cuda_attention_flash(float *out, float *lse, const float *q, const float *k,
                                         const float *v, const cpdit_attention_args *a,
                                         cpdit_error *err)
{
    if (!ready())
        return not_ready(err);
    cpdit_status st = check_args(a, "cuda-flash", err);
    if (!st)
        st = latched_status(err);
    if (st)
        return st;
    if (a->D % CUDA_FLASH_D_QUANTUM || a->D > CUDA_FLASH_D_MAX) /* e.g. the VAE's D = 512 */
        return reference_forward(out, lse, q, k, v, a, err);
    const cpdit_cuda_attention c = to_cuda_args(a);
    return rc_status(cpdit_cuda_attention_flash_ex(CPDIT_CUDA_F32, q, k, v, out, lse, &c,
                                                   S.stream),
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
    pthread_mutex_lock(&S.lock);
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
    pthread_mutex_unlock(&S.lock);
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

static cpdit_status cudnn_forward(float *out, float *lse, const float *q, const float *k,
                                  const float *v, const cpdit_attention_args *a, cpdit_error *err)
{
    const int B = a->B, Sq = a->Sq, Skv = a->Skv, H = a->H, D = a->D, HD = H * D;
    const int ldq = a->ld_q ? a->ld_q : HD, ldkv = a->ld_kv ? a->ld_kv : HD,
              ldo = a->ld_out ? a->ld_out : HD;
    const size_t nq = (size_t)B * Sq * HD, nkv = (size_t)B * Skv * HD;
    uint16_t *qb = cpdit_cuda_alloc(nq * 2), *kb = cpdit_cuda_alloc(nkv * 2),
             *vb = cpdit_cuda_alloc(nkv * 2), *ob = cpdit_cuda_alloc(nq * 2);
    float *stats = cpdit_cuda_alloc((size_t)B * H * Sq * sizeof(float));
    cpdit_status st = CPDIT_OK;
    if (!qb || !kb || !vb || !ob || !stats) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE,
                             "out of device memory for cudnn attention (B %d Sq %d Skv %d H %d "
                             "D %d)", B, Sq, Skv, H, D);
        goto done;
    }
    /* (B, S, H, D) fp32 with row strides -> contiguous bf16 */
    st = rc_status(cpdit_cuda_cast_f32_bf16(qb, q, ldq, (size_t)B * Sq, HD, S.stream),
                   "cudnn attention: cast q", err);
    if (!st)
        st = rc_status(cpdit_cuda_cast_f32_bf16(kb, k, ldkv, (size_t)B * Skv, HD, S.stream),
                       "cudnn attention: cast k", err);
    if (!st)
        st = rc_status(cpdit_cuda_cast_f32_bf16(vb, v, ldkv, (size_t)B * Skv, HD, S.stream),
                       "cudnn attention: cast v", err);
    if (!st) {
        char msg[512] = "";
        int rc = cpdit_cudnn_sdpa_forward(sdpa_ctx, qb, kb, vb, ob, stats, B, Sq, Skv, H, D,
                                          a->scale, S.stream, msg, sizeof msg);
        if (rc)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "%s", msg);
    }
    if (!st)
        st = rc_status(cpdit_cuda_cast_bf16_f32(out, ldo, ob, (size_t)B * Sq, HD, S.stream),
                       "cudnn attention: cast out", err);
    if (!st && lse)
        st = rc_status(cpdit_cuda_stats_to_lse(lse, stats, B, H, Sq, S.stream),
                       "cudnn attention: stats to lse", err);
done:
    /* stream-ordered reuse: freeing after queueing is safe */
    cpdit_cuda_free(qb), cpdit_cuda_free(kb), cpdit_cuda_free(vb), cpdit_cuda_free(ob);
    cpdit_cuda_free(stats);
    return st;
}

static cpdit_status cuda_attention_cudnn(float *out, float *lse, const float *q, const float *k,
                                         const float *v, const cpdit_attention_args *a,
                                         cpdit_error *err)
{
    if (!ready())
        return not_ready(err);
    cpdit_status st = check_args(a, "cudnn", err);
    if (!st)
        st = latched_status(err);
    if (st)
        return st;
    char msg[512] = "";
    switch (cudnn_route(a, msg, sizeof msg)) {
    case 0:
        return cudnn_forward(out, lse, q, k, v, a, err);
    case 2:
        note_refused(a, msg);
        return cuda_attention_flash(out, lse, q, k, v, a, err);
    case 1:
        return cuda_attention_flash(out, lse, q, k, v, a, err);
    default:
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "%s", msg);
    }
}

/* ---- auto: cuda-flash or cudnn, whichever is faster, measured once per shape */

#define AUTO_SHAPES_MAX 128
typedef struct auto_pick {
    int B, Sq, Skv, H, D, ld_q, ld_kv, ld_out;
    int cudnn; /* 1: cudnn won */
} auto_pick;
static auto_pick auto_picks[AUTO_SHAPES_MAX];
static int auto_npicks;
static pthread_mutex_t auto_lock = PTHREAD_MUTEX_INITIALIZER;

static int same_shape(const auto_pick *p, const cpdit_attention_args *a)
{
    return p->B == a->B && p->Sq == a->Sq && p->Skv == a->Skv && p->H == a->H && p->D == a->D &&
           p->ld_q == a->ld_q && p->ld_kv == a->ld_kv && p->ld_out == a->ld_out;
}

/* Milliseconds of the fastest of `reps` calls of fn after one warm-up (the warm-up builds the
 * cuDNN plan); < 0 when a call fails (err filled). */
static float time_kernel(cpdit_status (*fn)(float *, float *, const float *, const float *,
                                            const float *, const cpdit_attention_args *,
                                            cpdit_error *),
                         float *out, float *lse, const float *q, const float *k, const float *v,
                         const cpdit_attention_args *a, int reps, cpdit_error *err)
{
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best = -1.0f;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        cudaGetLastError();
        goto out;
    }
    if (fn(out, lse, q, k, v, a, err))
        goto out;
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(e0, S.stream);
        if (fn(out, lse, q, k, v, a, err)) {
            best = -1.0f;
            goto out;
        }
        cudaEventRecord(e1, S.stream);
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

static cpdit_status cuda_attention_auto(float *out, float *lse, const float *q, const float *k,
                                        const float *v, const cpdit_attention_args *a,
                                        cpdit_error *err)
{
    if (!ready())
        return not_ready(err);
    cpdit_status st = check_args(a, "auto", err);
    if (!st)
        st = latched_status(err);
    if (st)
        return st;
    char msg[512] = "";
    /* cudnn would run cuda-flash anyway (bias, causal, empty, refused shape) or cannot run */
    const int route = cudnn_route(a, msg, sizeof msg);
    if (route != 0) {
        if (route == 2 && cpdit_backend_verbose()) /* auto: a refusal is only a choice */
            note_refused(a, msg);
        return cuda_attention_flash(out, lse, q, k, v, a, err);
    }
    int pick = -1;
    pthread_mutex_lock(&auto_lock);
    for (int i = 0; i < auto_npicks && pick < 0; i++)
        if (same_shape(&auto_picks[i], a))
            pick = auto_picks[i].cudnn;
    pthread_mutex_unlock(&auto_lock);
    if (pick < 0) {
        cpdit_error e1, e2;
        cpdit_error_clear(&e1);
        cpdit_error_clear(&e2);
        const float t_flash = time_kernel(cuda_attention_flash, out, lse, q, k, v, a, 3, &e1);
        const float t_cudnn = time_kernel(cudnn_forward, out, lse, q, k, v, a, 3, &e2);
        if (t_flash < 0 && t_cudnn < 0) { /* both failed: report cuda-flash's error */
            if (err)
                *err = e1;
            return CPDIT_ERR_RUNTIME;
        }
        pick = t_cudnn >= 0 && (t_flash < 0 || t_cudnn < t_flash);
        pthread_mutex_lock(&auto_lock);
        if (auto_npicks < AUTO_SHAPES_MAX) {
            auto_pick p = {a->B,    a->Sq,    a->Skv,    a->H, a->D,
                           a->ld_q, a->ld_kv, a->ld_out, pick};
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
    return pick ? cudnn_forward(out, lse, q, k, v, a, err)
                : cuda_attention_flash(out, lse, q, k, v, a, err);
}

static const cpdit_attention_kernel cuda_flash_kernel = {
    "cuda-flash",
    "flash attention with LSE, fp32, one pass over the keys (head dims 32..256 in steps of 32; "
    "others take cuda-reference)",
    cuda_attention_flash, 0.0};
static const cpdit_attention_kernel cuda_reference_kernel = {
    "cuda-reference", "cuBLAS SGEMM scores + softmax with LSE + SGEMM, fp32, any shape",
    cuda_attention_reference, 0.0};
/* bf16 Q, K, V (8 bits of mantissa), P and O rounded to bf16: normalised errors ~4e-3 */
static const cpdit_attention_kernel cuda_cudnn_kernel = {
    "cudnn",
    "cuDNN fused flash attention (graph API): bf16 Q, K, V, fp32 softmax stats as the LSE; bias, "
    "causal and shapes cuDNN refuses run on cuda-flash",
    cuda_attention_cudnn, 2e-2};
static const cpdit_attention_kernel cuda_auto_kernel = {
    "auto",
    "times cuda-flash and cudnn once per shape on first use and keeps the faster (--verbose "
    "prints the choice); bias and causal take cuda-flash",
    cuda_attention_auto, 2e-2};
static const cpdit_attention_kernel *const cuda_kernels[] = {
    &cuda_flash_kernel, &cuda_reference_kernel, &cuda_cudnn_kernel, NULL};

/* ------------------------------------------------------------------ VAE section */

static float *cuda_conv2d_pack(const float *w, int Cout, int Cin, int K)
{
    if (!ready())
        return NULL;
    /* the packer copies on the legacy stream, which does not wait for our non-blocking one:
     * let queued kernels finish with the cached blocks it may be handed */
    latch("conv2d_pack", (int)cudaStreamSynchronize(S.stream));
    return cpdit_cuda_conv2d_pack(w, Cout, Cin, K);
}

/* The bf16 form of fp32 host weights (Cout, Cin, K, K), registered for conv2d. */
static float *conv2d_pack_bf16(const float *w, int Cout, int Cin, int K)
{
    latch("conv2d_pack", (int)cudaStreamSynchronize(S.stream)); /* as cuda_conv2d_pack */
    void *p = cpdit_cuda_conv2d_pack_bf16(w, Cout, Cin, K);
    if (!p)
        return NULL;
    pthread_mutex_lock(&S.lock);
    if (n_bf16_convs == cap_bf16_convs) {
        const size_t cap = cap_bf16_convs ? 2 * cap_bf16_convs : 64;
        void **n = realloc(bf16_convs, cap * sizeof *n);
        if (n) {
            bf16_convs = n;
            cap_bf16_convs = cap;
        }
    }
    const int ok = n_bf16_convs < cap_bf16_convs;
    if (ok)
        bf16_convs[n_bf16_convs++] = p;
    pthread_mutex_unlock(&S.lock);
    if (!ok) { /* out of host memory for the list: the caller sees out of memory */
        cpdit_cuda_free(p);
        return NULL;
    }
    return (float *)p;
}

/* Weights as stored. NATIVE with bf16 or fp8 storage: bf16 weights for cuDNN's bf16
 * convolution (tensor cores, fp32 accumulation; fp8 values are exact in bf16); otherwise the
 * exact fp32 path (conv2d_pack), as the CPU decides. */
static float *cuda_conv2d_pack_stored(const void *w, cpdit_dtype dtype, int Cout, int Cin,
                                      int K, cpdit_weight_format format)
{
    if (!ready() || !cpdit_dtype_is_float(dtype) || dtype == CPDIT_DTYPE_F64)
        return NULL;
    const int bf16 = format == CPDIT_WEIGHT_NATIVE &&
                     (dtype == CPDIT_DTYPE_BF16 || dtype == CPDIT_DTYPE_F8_E4M3 ||
                      dtype == CPDIT_DTYPE_F8_E5M2);
    const size_t n = (size_t)Cout * Cin * K * K;
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!f)
        return NULL;
    float *packed = NULL;
    if (cpdit_dtype_to_f32(f, w, dtype, n, NULL) == CPDIT_OK)
        packed = bf16 ? conv2d_pack_bf16(f, Cout, Cin, K) : cuda_conv2d_pack(f, Cout, Cin, K);
    free(f);
    return packed;
}

static size_t cuda_conv2d_workspace_bytes(int W, int Cin, int K)
{
    (void)W;
    (void)Cin;
    (void)K;
    return 0; /* cuDNN's workspace comes from the caching allocator */
}

static cpdit_status cuda_conv2d(float *y, const float *x, const float *w_packed, const float *b,
                                int W, int Cin, int Cout, int K, int r0, int r1, void *ws,
                                cpdit_error *err)
{
    (void)ws;
    if (!ready())
        return not_ready(err);
    if ((K != 1 && K != 3) || W < 0 || Cin <= 0 || Cout <= 0 || r1 < r0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CUDA_WHERE,
                               "conv2d: K %d W %d Cin %d Cout %d rows [%d, %d)", K, W, Cin, Cout,
                               r0, r1);
    cpdit_status st = latched_status(err);
    if (st || r1 == r0 || W == 0)
        return st;
    if (is_bf16_conv(w_packed))
        return rc_status(cpdit_cuda_conv2d_bf16(y, x, w_packed, b, W, Cin, Cout, K, r0, r1,
                                                S.stream),
                         "conv2d (bf16)", err);
    return rc_status(cpdit_cuda_conv2d(y, x, w_packed, b, W, Cin, Cout, K, r0, r1, S.stream),
                     "conv2d", err);
}

/* acc and mean are host doubles (G values; the caller reduces them over ranks). */
static void cuda_group_moments(double *acc, const float *x, size_t pixels, int C, int G,
                               const double *mean)
{
    if (!pixels || G <= 0 || !ready())
        return;
    const size_t gb = (size_t)G * sizeof(double);
    pthread_mutex_lock(&S.lock);
    double *dacc = small_buffer(2 * gb), *dmean = dacc ? dacc + G : NULL;
    int rc = dacc ? 0 : (int)cudaErrorMemoryAllocation;
    if (!rc)
        rc = (int)cudaMemcpyAsync(dacc, acc, gb, cudaMemcpyHostToDevice, S.stream);
    if (!rc && mean)
        rc = (int)cudaMemcpyAsync(dmean, mean, gb, cudaMemcpyHostToDevice, S.stream);
    if (!rc)
        rc = cpdit_cuda_group_moments(dacc, x, pixels, C, G, mean ? dmean : NULL, S.stream);
    if (!rc)
        rc = (int)cudaMemcpyAsync(acc, dacc, gb, cudaMemcpyDeviceToHost, S.stream);
    if (!rc)
        rc = (int)cudaStreamSynchronize(S.stream);
    pthread_mutex_unlock(&S.lock);
    latch("group_moments", rc);
}

static void cuda_group_norm_apply(float *y, const float *x, size_t pixels, int C, int G,
                                  const double *mean, const double *rstd, const float *gamma,
                                  const float *beta, cpdit_activation act)
{
    if (!pixels || G <= 0 || !ready())
        return;
    if (act != CPDIT_ACT_NONE && act != CPDIT_ACT_SILU && act != CPDIT_ACT_GELU &&
        act != CPDIT_ACT_RELU && act != CPDIT_ACT_MISH) {
        latch("group_norm_apply: activation not fused on CUDA", (int)cudaErrorInvalidValue);
        return;
    }
    /* cpdit_activation's NONE, SILU, GELU, RELU, MISH are numbered as the CUDA VAE enum */
    const size_t gb = (size_t)G * sizeof(double);
    pthread_mutex_lock(&S.lock);
    double *dmean = small_buffer(2 * gb), *drstd = dmean ? dmean + G : NULL;
    int rc = dmean ? 0 : (int)cudaErrorMemoryAllocation;
    if (!rc)
        rc = (int)cudaMemcpyAsync(dmean, mean, gb, cudaMemcpyHostToDevice, S.stream);
    if (!rc)
        rc = (int)cudaMemcpyAsync(drstd, rstd, gb, cudaMemcpyHostToDevice, S.stream);
    if (!rc)
        rc = cpdit_cuda_group_norm_apply(y, x, pixels, C, G, dmean, drstd, gamma, beta, (int)act,
                                         S.stream);
    /* the staging is rewritten by the next call: let this kernel read it first */
    if (!rc)
        rc = (int)cudaStreamSynchronize(S.stream);
    pthread_mutex_unlock(&S.lock);
    latch("group_norm_apply", rc);
}

static void cuda_upsample2x(float *y, const float *x, int rows, int W, int C)
{
    if (rows > 0 && W > 0 && ready())
        latch("upsample2x", cpdit_cuda_upsample2x(y, x, rows, W, C, S.stream));
}

static void cuda_transpose(float *y, const float *x, size_t rows, size_t cols)
{
    if (rows && cols && ready())
        latch("transpose", cpdit_cuda_transpose(y, x, rows, cols, S.stream));
}

/* ------------------------------------------------------------------ the table */

static const cpdit_backend cuda_backend = {
    .name = "cuda",
    .summary = "device memory, fp32 activations; bf16 weights with cuBLASLt (fp32 accumulate), "
               "flash attention with LSE or cuDNN fused attention, cuDNN convolutions (bf16 or "
               "fp32)",
    .host_memory = 0,
    .available = cuda_available,
    .describe = cuda_describe,
    .sync = cuda_sync,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .weight_bytes = cuda_weight_bytes,
    .weight_create = cuda_weight_create,
    .weight_free = cuda_weight_free,
    .linear = cuda_linear,
    .layer_norm = cuda_layer_norm,
    .rms_norm = cuda_rms_norm,
    .rope = cuda_rope,
    .act = cuda_act,
    .add = cuda_add,
    .mul = cuda_mul,
    .embedding = cuda_embedding,
    .modulate = cuda_modulate,
    .gated_residual = cuda_gated_residual,
    .copy_rows = cuda_copy_rows,
    .lse_merge = cuda_lse_merge,
    .attention_kernels = cuda_kernels,
    .workers = cuda_workers,
    .conv2d_pack = cuda_conv2d_pack,
    .conv2d_pack_stored = cuda_conv2d_pack_stored,
    .conv2d_workspace_bytes = cuda_conv2d_workspace_bytes,
    .conv2d = cuda_conv2d,
    .group_moments = cuda_group_moments,
    .group_norm_apply = cuda_group_norm_apply,
    .upsample2x = cuda_upsample2x,
    .transpose = cuda_transpose,
    .linear_act = cuda_linear_act,
    .attention_auto = &cuda_auto_kernel,
};

const cpdit_backend *cpdit_backend_cuda(void)
{
    return &cuda_backend;
}
