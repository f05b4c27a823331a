/* backend_cuda.c — the CUDA kernel tables (kernels/backend.h) over the CUDA kernels of
 * kernels/cuda/: state and device binding, caching allocator, weights, cuBLASLt linear, the
 * small ops, and the tables themselves (the attention kernels are in backend_cuda_attention.c,
 * the VAE's ops in backend_cuda_vae.c). Two tables share every line: "cuda" (bf16 activations) and
 * "cuda-fp32" (fp32 activations); each op is written once over the element type
 * (backend_cuda_table.h). See backend_cuda.h for the policy (device per local rank, one
 * compute stream, bf16 weights, latched errors).
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
#include "kernels/cuda/backend_cuda_table.h"
#include "kernels/cuda/cuda_runtime_info.h"
#include "kernels/cuda/gemm_lt_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/vae_ops_cuda.h"
#include "lib/core/dtype.h"

/* ------------------------------------------------------------------ state */

cpdit_cuda_state cpdit_cuda_S = {PTHREAD_ONCE_INIT, 0, "", -1, NULL, NULL, NULL,
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
        snprintf(cpdit_cuda_S.init_error, sizeof cpdit_cuda_S.init_error, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        cudaGetLastError();
        return;
    }
    cpdit_cuda_S.device = bound_device >= 0 && bound_device < ndev ? bound_device : 0;
    if ((e = cudaSetDevice(cpdit_cuda_S.device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&cpdit_cuda_S.stream, cudaStreamNonBlocking)) !=
            cudaSuccess) {
        snprintf(cpdit_cuda_S.init_error, sizeof cpdit_cuda_S.init_error, "device %d: %s",
                 cpdit_cuda_S.device, cudaGetErrorString(e));
        return;
    }
    cublasStatus_t bs = cublasCreate(&cpdit_cuda_S.cublas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snprintf(cpdit_cuda_S.init_error, sizeof cpdit_cuda_S.init_error, "cublasCreate: %s",
                 cublasGetStatusString(bs));
        return;
    }
    cublasSetMathMode(cpdit_cuda_S.cublas, CUBLAS_DEFAULT_MATH); /* fp32 stays fp32 (no TF32) */
    char msg[256] = "";
    cpdit_cuda_S.gemm = cpdit_gemm_lt_create(0, msg, sizeof msg);
    if (!cpdit_cuda_S.gemm) {
        snprintf(cpdit_cuda_S.init_error, sizeof cpdit_cuda_S.init_error, "%s", msg);
        return;
    }
    cpdit_cuda_S.ok = 1;
}

/* Initialise once (on the calling thread's first use); 0 when the backend cannot run. */
int cpdit_cuda_ready(void)
{
    pthread_once(&cpdit_cuda_S.once, init_once);
    if (cpdit_cuda_S.ok)
        cudaSetDevice(cpdit_cuda_S.device); /* threads other than the first start on device 0 */
    return cpdit_cuda_S.ok;
}

cpdit_status cpdit_cuda_not_ready(cpdit_error *err)
{
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "the cuda backend cannot run: %s",
                           cpdit_cuda_S.init_error[0] ? cpdit_cuda_S.init_error
                                                      : "not initialised");
}

void *cpdit_cuda_compute_stream(cpdit_error *err)
{
    if (!cpdit_cuda_ready()) {
        cpdit_cuda_not_ready(err);
        return NULL;
    }
    return (void *)cpdit_cuda_S.stream;
}

int cpdit_cuda_backend_device(cpdit_error *err)
{
    if (!cpdit_cuda_ready()) {
        cpdit_cuda_not_ready(err);
        return -1;
    }
    return cpdit_cuda_S.device;
}

/* A failed launch in a void op: say so now, keep the first message for the next status. */
void cpdit_cuda_latch(const char *op, int rc)
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
    pthread_mutex_lock(&cpdit_cuda_S.lock);
    if (!cpdit_cuda_S.latched[0])
        snprintf(cpdit_cuda_S.latched, sizeof cpdit_cuda_S.latched, "%s", what);
    pthread_mutex_unlock(&cpdit_cuda_S.lock);
    fprintf(stderr, "cpdit: %s: %s\n", CUDA_WHERE, what);
}

/* CPDIT_OK, or the latched failure of an earlier void op (reported once). */
cpdit_status cpdit_cuda_latched_status(cpdit_error *err)
{
    cpdit_status st = CPDIT_OK;
    pthread_mutex_lock(&cpdit_cuda_S.lock);
    if (cpdit_cuda_S.latched[0]) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "an earlier op failed: %s",
                             cpdit_cuda_S.latched);
        cpdit_cuda_S.latched[0] = '\0';
    }
    pthread_mutex_unlock(&cpdit_cuda_S.lock);
    return st;
}

cpdit_status cpdit_cuda_rc_status(int rc, const char *op, cpdit_error *err)
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

void *cpdit_cuda_small_buffer(size_t bytes)
{
    if (bytes <= cpdit_cuda_S.small_bytes)
        return cpdit_cuda_S.small;
    /* the old block may still be read by queued kernels: free after the stream drains */
    cudaStreamSynchronize(cpdit_cuda_S.stream);
    cpdit_cuda_free(cpdit_cuda_S.small);
    cpdit_cuda_S.small = cpdit_cuda_alloc(bytes);
    cpdit_cuda_S.small_bytes = cpdit_cuda_S.small ? bytes : 0;
    return cpdit_cuda_S.small;
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
    if (!cpdit_cuda_ready())
        return cpdit_cuda_not_ready(err);
    cudaError_t e = cudaStreamSynchronize(cpdit_cuda_S.stream);
    cpdit_status st = cpdit_cuda_latched_status(err); /* an earlier void op's failure first */
    return st ? st : cpdit_cuda_rc_status((int)e, "cudaStreamSynchronize", err);
}

/* ------------------------------------------------------------------ memory */

static void *cuda_alloc(size_t bytes)
{
    return cpdit_cuda_ready() ? cpdit_cuda_alloc(bytes) : NULL;
}

static void cuda_free(void *p)
{
    if (!p || !cpdit_cuda_ready())
        return;
    cpdit_cuda_forget_conv(p); /* a bf16 conv weight's address may be handed out again */
    cpdit_cuda_free(p);
}

/* Any direction (unified addressing); complete on return. */
static void cuda_copy(void *dst, const void *src, size_t bytes, const char *op)
{
    if (!bytes || !cpdit_cuda_ready())
        return;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cpdit_cuda_S.stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(cpdit_cuda_S.stream);
    cpdit_cuda_latch(op, (int)e);
}

static void cuda_upload(void *dst, const void *host_src, size_t bytes)
{
    cuda_copy(dst, host_src, bytes, "upload");
}

static void cuda_download(void *host_dst, const void *src, size_t bytes)
{
    cuda_copy(host_dst, src, bytes, "download");
}


/* Longest row of one convert call (its column count is an int). */
#define CUDA_CONVERT_ROW_MAX ((size_t)1 << 30)

/* dst = src, n contiguous elements converted between types (fp32 <-> bf16), queued. */
static int convert_flat(cpdit_cuda_dtype dst_t, void *dst, cpdit_cuda_dtype src_t,
                        const void *src, size_t n)
{
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i += CUDA_CONVERT_ROW_MAX) {
        const size_t m = n - i < CUDA_CONVERT_ROW_MAX ? n - i : CUDA_CONVERT_ROW_MAX;
        rc = cpdit_cuda_convert_rows(dst_t, cpdit_cuda_elem_at(dst_t, dst, i), (long)m, src_t,
                                     cpdit_cuda_elem_at(src_t, src, i), (long)m, 1, (int)m,
                                     cpdit_cuda_S.stream);
    }
    return rc;
}

/* Host fp32 -> activations of type t: fp32 is a plain copy; bf16 goes through an fp32 staging
 * block of the caching allocator and one rounding kernel on the device. Complete on return. */
static void upload_act_t(cpdit_cuda_dtype t, cpdit_buf *dst, const float *host, size_t n)
{
    if (!n || !cpdit_cuda_ready())
        return;
    if (t == CPDIT_CUDA_F32) {
        cuda_copy(dst, host, n * sizeof(float), "upload_act");
        return;
    }
    float *stage = cpdit_cuda_alloc(n * sizeof(float));
    int rc = stage ? 0 : (int)cudaErrorMemoryAllocation;
    if (!rc)
        rc = (int)cudaMemcpyAsync(stage, host, n * sizeof(float), cudaMemcpyHostToDevice,
                                  cpdit_cuda_S.stream);
    if (!rc)
        rc = convert_flat(t, dst, CPDIT_CUDA_F32, stage, n);
    if (!rc) /* the host array may be reused at once */
        rc = (int)cudaStreamSynchronize(cpdit_cuda_S.stream);
    cpdit_cuda_free(stage);
    cpdit_cuda_latch("upload_act", rc);
}

/* Activations of type t -> host fp32 (widened on the device into fp32 staging). */
static void download_act_t(cpdit_cuda_dtype t, float *host, const cpdit_buf *src, size_t n)
{
    if (!n || !cpdit_cuda_ready())
        return;
    if (t == CPDIT_CUDA_F32) {
        cuda_copy(host, src, n * sizeof(float), "download_act");
        return;
    }
    float *stage = cpdit_cuda_alloc(n * sizeof(float));
    int rc = stage ? 0 : (int)cudaErrorMemoryAllocation;
    if (!rc)
        rc = convert_flat(CPDIT_CUDA_F32, stage, t, src, n);
    if (!rc)
        rc = (int)cudaMemcpyAsync(host, stage, n * sizeof(float), cudaMemcpyDeviceToHost,
                                  cpdit_cuda_S.stream);
    if (!rc)
        rc = (int)cudaStreamSynchronize(cpdit_cuda_S.stream);
    cpdit_cuda_free(stage);
    if (rc && !stage) /* nothing copied: do not leave the caller's array undefined */
        memset(host, 0, n * sizeof(float));
    cpdit_cuda_latch("download_act", rc);
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
    if (!cpdit_cuda_ready())
        return cpdit_cuda_not_ready(err);
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
        cudaError_t e =
            cudaMemcpyAsync(w->data, src, bytes, cudaMemcpyHostToDevice, cpdit_cuda_S.stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(cpdit_cuda_S.stream);
        st = cpdit_cuda_rc_status((int)e, "weight upload", err);
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

/* ------------------------------------------------------------------ both tables */

TABLE_VOID(upload_act, (cpdit_buf * dst, const float *host_src, size_t n), (dst, host_src, n))
TABLE_VOID(download_act, (float *host_dst, const cpdit_buf *src, size_t n), (host_dst, src, n))

/* ------------------------------------------------------------------ linear */

/* y, x activations of type t. One cuBLASLt call with an epilogue (CPDIT_GEMM_PLAIN: bias only):
 *   t bf16, bf16 weights: x bf16 as A's partner directly, y bf16 (C = D for accumulate), fp32
 *     compute and scale, the fp32 bias fused (gemm_lt_cuda.h);
 *   t bf16, fp32 weights (the exact reference form): x widened into fp32 staging, the fp32 GEMM
 *     into fp32 staging (holding y first for accumulate), then rounded into y once;
 *   t fp32 ("cuda-fp32"), bf16 weights: x rounded to a bf16 copy, fp32 output; fp32 weights:
 *     the exact fp32 GEMM in place.
 * With an activation epilogue cuBLASLt may have no algorithm: then *refused = 1 and nothing is
 * queued. */
static cpdit_status linear_impl(cpdit_cuda_dtype t, void *y, int ldy, const void *x, int ldx,
                                const cpdit_weight *w, const float *b, int M, int K, int N,
                                int accumulate, cpdit_gemm_epilogue epi, int *refused,
                                cpdit_error *err)
{
    if (!cpdit_cuda_ready())
        return cpdit_cuda_not_ready(err);
    if (w->rows != N || w->cols != K)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CUDA_WHERE,
                               "linear: weight is %d x %d, the call needs %d x %d", w->rows,
                               w->cols, N, K);
    if (M < 0 || K < 0 || N < 0 || ldx < K || ldy < N)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CUDA_WHERE,
                               "linear: M %d K %d N %d ldx %d ldy %d", M, K, N, ldx, ldy);
    cpdit_status st = cpdit_cuda_latched_status(err);
    if (st || M == 0 || N == 0)
        return st;
    if (K == 0) { /* x W^T = 0: y = b, or unchanged / + b */
        if (!accumulate)
            cpdit_cuda_latch("linear (K = 0)", cpdit_cuda_fill_rows(t, y, ldy, (size_t)M, N, 0.0f,
                                                                    cpdit_cuda_S.stream));
        if (b)
            cpdit_cuda_latch("linear (K = 0)", cpdit_cuda_add_bias_rows(t, y, ldy, b, (size_t)M, N,
                                                                        cpdit_cuda_S.stream));
        return cpdit_cuda_latched_status(err);
    }
    /* cuBLASLt's bias pointer wants 16-byte alignment: copy an odd one */
    float *b_al = NULL;
    if (b && ((uintptr_t)b % 16) != 0) {
        b_al = cpdit_cuda_alloc((size_t)N * sizeof *b_al);
        if (!b_al)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE, "out of device memory");
        cudaError_t e = cudaMemcpyAsync(b_al, b, (size_t)N * sizeof *b_al,
                                        cudaMemcpyDeviceToDevice, cpdit_cuda_S.stream);
        if (e != cudaSuccess) {
            cpdit_cuda_free(b_al);
            return cpdit_cuda_rc_status((int)e, "linear bias copy", err);
        }
        b = b_al;
    }
    /* the GEMM's operands: x and y as they are, or staging (see above) */
    const cpdit_cuda_dtype in_t = w->type;
    const cpdit_cuda_dtype out_t = in_t == CPDIT_CUDA_F32 ? CPDIT_CUDA_F32 : t;
    const void *xin = x;
    int ldxin = ldx, ldyout = ldy;
    void *yout = y, *xs = NULL, *ys = NULL;
    int rc = 0;
    if (in_t != t) { /* x into the weights' type, contiguous */
        xs = cpdit_cuda_alloc((size_t)M * (size_t)K * cpdit_cuda_dtype_size(in_t));
        rc = xs ? cpdit_cuda_convert_rows(in_t, xs, K, t, x, ldx, (size_t)M, K, cpdit_cuda_S.stream)
                : (int)cudaErrorMemoryAllocation;
        xin = xs;
        ldxin = K;
    }
    if (!rc && out_t != t) { /* fp32 output staging, holding y for accumulate */
        ys = cpdit_cuda_alloc((size_t)M * (size_t)N * sizeof(float));
        rc = !ys ? (int)cudaErrorMemoryAllocation
                 : accumulate ? cpdit_cuda_convert_rows(out_t, ys, N, t, y, ldy, (size_t)M, N,
                                                        cpdit_cuda_S.stream)
                              : 0;
        yout = ys;
        ldyout = N;
    }
    if (rc)
        st = cpdit_cuda_rc_status(rc, "linear: staging", err);
    if (!st) {
        char msg[256] = "";
        rc = cpdit_gemm_lt_linear_typed(cpdit_cuda_S.gemm, in_t, out_t, yout, ldyout, xin, ldxin,
                                        w->data, b, M, K, N, accumulate, epi, cpdit_cuda_S.stream,
                                        msg, sizeof msg);
        if (rc == (int)CUBLAS_STATUS_NOT_SUPPORTED && epi != CPDIT_GEMM_PLAIN && refused)
            *refused = 1;
        else if (rc)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, CUDA_WHERE,
                                 "linear (M %d, K %d, N %d, %s weights, %s activations): %s", M,
                                 K, N, in_t == CPDIT_CUDA_BF16 ? "bf16" : "fp32",
                                 t == CPDIT_CUDA_BF16 ? "bf16" : "fp32", msg);
        else if (ys) /* the fp32 result rounded into y once */
            st = cpdit_cuda_rc_status(
                cpdit_cuda_convert_rows(t, y, ldy, out_t, ys, N, (size_t)M, N, cpdit_cuda_S.stream),
                "linear: output", err);
    }
    /* the caching allocator reuses blocks in stream order: freeing after queueing is safe */
    cpdit_cuda_free(xs);
    cpdit_cuda_free(ys);
    cpdit_cuda_free(b_al);
    return st;
}

static cpdit_status linear_t(cpdit_cuda_dtype t, cpdit_buf *y, int ldy, const cpdit_buf *x,
                             int ldx, const cpdit_weight *w, const float *b, int M, int K, int N,
                             int accumulate, cpdit_error *err)
{
    return linear_impl(t, y, ldy, x, ldx, w, b, M, K, N, accumulate, CPDIT_GEMM_PLAIN, NULL, err);
}
TABLE_OP(cpdit_status, linear,
         (cpdit_buf * y, int ldy, const cpdit_buf *x, int ldx, const cpdit_weight *w,
          const float *b, int M, int K, int N, int accumulate, cpdit_error *err),
         (y, ldy, x, ldx, w, b, M, K, N, accumulate, err))

static void act_t(cpdit_cuda_dtype t, cpdit_act kind, cpdit_buf *y, const cpdit_buf *x,
                  size_t n);

/* y = act(x W^T + b). GELU-tanh with bf16 weights: one cuBLASLt call with the GELU_BIAS
 * epilogue (fp32 accumulate, the activation applied to the fp32 sum before the one store).
 * fp32 weights (the exact reference path), other activations, K = 0, or a shape cuBLASLt has
 * no fused algorithm for: linear, then the activation kernel over the block. */
static cpdit_status linear_act_t(cpdit_cuda_dtype t, cpdit_buf *y, int ldy, const cpdit_buf *x,
                                 int ldx, const cpdit_weight *w, const float *b, int M, int K,
                                 int N, cpdit_act act, cpdit_error *err)
{
    if (!cpdit_cuda_ready())
        return cpdit_cuda_not_ready(err);
    int refused = 0;
    cpdit_status st;
    if (act == CPDIT_ACT_GELU_TANH && w->type == CPDIT_CUDA_BF16 && K > 0) {
        st = linear_impl(t, y, ldy, x, ldx, w, b, M, K, N, 0, CPDIT_GEMM_GELU_TANH, &refused,
                         err);
        if (st || !refused)
            return st;
        if (cpdit_backend_verbose())
            fprintf(stderr, "cpdit: %s: no cuBLASLt GELU epilogue for linear M %d K %d N %d: "
                            "GEMM then gelu-tanh\n", CUDA_WHERE, M, K, N);
    }
    if ((st = linear_impl(t, y, ldy, x, ldx, w, b, M, K, N, 0, CPDIT_GEMM_PLAIN, NULL, err)) ||
        act == CPDIT_ACT_NONE || M <= 0 || N <= 0)
        return st;
    if (ldy == N) {
        act_t(t, act, y, y, (size_t)M * (size_t)N);
    } else {
        for (int r = 0; r < M; r++) {
            cpdit_buf *row = cpdit_cuda_elem_at(t, y, (size_t)r * ldy);
            act_t(t, act, row, row, (size_t)N);
        }
    }
    return cpdit_cuda_latched_status(err);
}
TABLE_OP(cpdit_status, linear_act,
         (cpdit_buf * y, int ldy, const cpdit_buf *x, int ldx, const cpdit_weight *w,
          const float *b, int M, int K, int N, cpdit_act act, cpdit_error *err),
         (y, ldy, x, ldx, w, b, M, K, N, act, err))

/* ------------------------------------------------------------------ small ops */

static void layer_norm_t(cpdit_cuda_dtype t, cpdit_buf *y, const cpdit_buf *x, const float *gamma,
                         const float *beta, size_t rows, int dim, float eps)
{
    if (rows && cpdit_cuda_ready())
        cpdit_cuda_latch("layer_norm", cpdit_cuda_layer_norm(t, y, x, gamma, beta, rows, dim, eps,
                                                             cpdit_cuda_S.stream));
}
TABLE_VOID(layer_norm,
           (cpdit_buf * y, const cpdit_buf *x, const float *gamma, const float *beta, size_t rows,
            int dim, float eps),
           (y, x, gamma, beta, rows, dim, eps))

static void rms_norm_t(cpdit_cuda_dtype t, cpdit_buf *y, const cpdit_buf *x, const float *weight,
                       size_t rows, int dim, float eps)
{
    if (rows && cpdit_cuda_ready())
        cpdit_cuda_latch("rms_norm",
                         cpdit_cuda_rms_norm(t, y, x, weight, rows, dim, eps, cpdit_cuda_S.stream));
}
TABLE_VOID(rms_norm,
           (cpdit_buf * y, const cpdit_buf *x, const float *weight, size_t rows, int dim,
            float eps),
           (y, x, weight, rows, dim, eps))

static void rope_t(cpdit_cuda_dtype t, cpdit_buf *x, const float *cos, const float *sin, int S_,
                   int H, int D)
{
    if (S_ > 0 && H > 0 && cpdit_cuda_ready())
        cpdit_cuda_latch("rope", cpdit_cuda_rope(t, x, cos, sin, S_, H, D, cpdit_cuda_S.stream));
}
TABLE_VOID(rope, (cpdit_buf * x, const float *cos, const float *sin, int S_, int H, int D),
           (x, cos, sin, S_, H, D))

static void act_t(cpdit_cuda_dtype t, cpdit_act kind, cpdit_buf *y, const cpdit_buf *x, size_t n)
{
    if (!n || !cpdit_cuda_ready())
        return;
    int k;
    switch (kind) {
    case CPDIT_ACT_NONE:
        if (y != x)
            cpdit_cuda_latch("act (none)",
                             (int)cudaMemcpyAsync(y, x, n * cpdit_cuda_dtype_size(t),
                                                  cudaMemcpyDeviceToDevice, cpdit_cuda_S.stream));
        return;
    case CPDIT_ACT_SILU: k = CPDIT_CUDA_ACT_SILU; break;
    case CPDIT_ACT_GELU: k = CPDIT_CUDA_ACT_GELU_ERF; break;
    case CPDIT_ACT_RELU: k = CPDIT_CUDA_ACT_RELU; break;
    case CPDIT_ACT_MISH: k = CPDIT_CUDA_ACT_MISH; break;
    case CPDIT_ACT_GELU_TANH: k = CPDIT_CUDA_ACT_GELU_TANH; break;
    case CPDIT_ACT_QUICK_GELU: k = CPDIT_CUDA_ACT_QUICK_GELU; break;
    default:
        cpdit_cuda_latch("act: unknown kind", (int)cudaErrorInvalidValue);
        return;
    }
    cpdit_cuda_latch("act", cpdit_cuda_act(t, k, y, x, n, cpdit_cuda_S.stream));
}
TABLE_VOID(act, (cpdit_act kind, cpdit_buf *y, const cpdit_buf *x, size_t n), (kind, y, x, n))

static void add_t(cpdit_cuda_dtype t, cpdit_buf *y, const cpdit_buf *a, const cpdit_buf *b,
                  size_t n)
{
    if (n && cpdit_cuda_ready())
        cpdit_cuda_latch("add", cpdit_cuda_add(t, y, a, b, n, cpdit_cuda_S.stream));
}
TABLE_VOID(add, (cpdit_buf * y, const cpdit_buf *a, const cpdit_buf *b, size_t n), (y, a, b, n))

static void mul_t(cpdit_cuda_dtype t, cpdit_buf *y, const cpdit_buf *a, const cpdit_buf *b,
                  size_t n)
{
    if (n && cpdit_cuda_ready())
        cpdit_cuda_latch("mul", cpdit_cuda_mul(t, y, a, b, n, cpdit_cuda_S.stream));
}
TABLE_VOID(mul, (cpdit_buf * y, const cpdit_buf *a, const cpdit_buf *b, size_t n), (y, a, b, n))

/* ids are host memory (the table's contract): staged to the device first. */
static void embedding_t(cpdit_cuda_dtype t, cpdit_buf *y, const float *table, const int32_t *ids,
                        size_t n, int dim)
{
    if (!n || !cpdit_cuda_ready())
        return;
    pthread_mutex_lock(&cpdit_cuda_S.lock);
    int32_t *dids = cpdit_cuda_small_buffer(n * sizeof *ids);
    int rc = dids ? (int)cudaMemcpyAsync(dids, ids, n * sizeof *ids, cudaMemcpyHostToDevice,
                                         cpdit_cuda_S.stream)
                  : (int)cudaErrorMemoryAllocation;
    if (!rc)
        rc = cpdit_cuda_embedding(t, y, table, dids, n, dim, cpdit_cuda_S.stream);
    pthread_mutex_unlock(&cpdit_cuda_S.lock);
    cpdit_cuda_latch("embedding", rc);
}
TABLE_VOID(embedding, (cpdit_buf * y, const float *table, const int32_t *ids, size_t n, int dim),
           (y, table, ids, n, dim))

static void modulate_t(cpdit_cuda_dtype t, cpdit_buf *y, const cpdit_buf *x,
                       const cpdit_buf *shift, const cpdit_buf *scale, size_t rows, int dim)
{
    if (rows && cpdit_cuda_ready())
        cpdit_cuda_latch(
            "modulate", cpdit_cuda_modulate(t, y, x, shift, scale, rows, dim, cpdit_cuda_S.stream));
}
TABLE_VOID(modulate,
           (cpdit_buf * y, const cpdit_buf *x, const cpdit_buf *shift, const cpdit_buf *scale,
            size_t rows, int dim),
           (y, x, shift, scale, rows, dim))

static void gated_residual_t(cpdit_cuda_dtype t, cpdit_buf *h, int ldh, const cpdit_buf *x,
                             int ldx, const cpdit_buf *gate, size_t rows, int dim)
{
    if (rows && cpdit_cuda_ready())
        cpdit_cuda_latch("gated_residual", cpdit_cuda_gated_residual(t, h, ldh, x, ldx, gate, rows,
                                                                     dim, cpdit_cuda_S.stream));
}
TABLE_VOID(gated_residual,
           (cpdit_buf * h, int ldh, const cpdit_buf *x, int ldx, const cpdit_buf *gate,
            size_t rows, int dim),
           (h, ldh, x, ldx, gate, rows, dim))

static void copy_rows_t(cpdit_cuda_dtype t, cpdit_buf *dst, int ldd, const cpdit_buf *src,
                        int lds, size_t rows, int dim)
{
    if (rows && dim > 0 && cpdit_cuda_ready())
        cpdit_cuda_latch("copy_rows", cpdit_cuda_copy_rows(t, dst, ldd, src, lds, rows, dim,
                                                           cpdit_cuda_S.stream));
}
TABLE_VOID(copy_rows,
           (cpdit_buf * dst, int ldd, const cpdit_buf *src, int lds, size_t rows, int dim),
           (dst, ldd, src, lds, rows, dim))

static void lse_merge_t(cpdit_cuda_dtype t, cpdit_buf *out_a, float *lse_a,
                        const cpdit_buf *out_b, const float *lse_b, size_t rows, int D)
{
    if (rows && cpdit_cuda_ready())
        cpdit_cuda_latch("lse_merge", cpdit_cuda_lse_merge(t, out_a, lse_a, out_b, lse_b,
                                                           (long)rows, 1, D, cpdit_cuda_S.stream));
}
TABLE_VOID(lse_merge,
           (cpdit_buf * out_a, float *lse_a, const cpdit_buf *out_b, const float *lse_b,
            size_t rows, int D),
           (out_a, lse_a, out_b, lse_b, rows, D))

/* The fp32 accumulator (backend.h), bf16 table only ("cuda-fp32" leaves the entries NULL: its
 * lse_merge already accumulates in fp32). y, x of the conversions: device memory. */
static void cuda_lse_merge_f32(float *out_a, float *lse_a, const cpdit_buf *out_b,
                               const float *lse_b, size_t rows, int D)
{
    if (rows && cpdit_cuda_ready())
        cpdit_cuda_latch("lse_merge_f32",
                         cpdit_cuda_lse_merge_f32(CPDIT_CUDA_BF16, out_a, lse_a, out_b, lse_b,
                                                  (long)rows, 1, D, cpdit_cuda_S.stream));
}
static void cuda_act_to_f32(float *y, const cpdit_buf *x, size_t n)
{
    if (n && cpdit_cuda_ready())
        cpdit_cuda_latch("act_to_f32", convert_flat(CPDIT_CUDA_F32, y, CPDIT_CUDA_BF16, x, n));
}
static void cuda_act_from_f32(cpdit_buf *y, const float *x, size_t n)
{
    if (n && cpdit_cuda_ready())
        cpdit_cuda_latch("act_from_f32", convert_flat(CPDIT_CUDA_BF16, y, CPDIT_CUDA_F32, x, n));
}

static int cuda_workers(void)
{
    return 1; /* one stream: ring attention computes a block in one call */
}

/* ------------------------------------------------------------------ the tables */

/* The entries both tables share (device memory, weights, the VAE's packing). */
#define CUDA_TABLE_COMMON                                                                          \
    .host_memory = 0, .available = cuda_available, .describe = cuda_describe,                     \
    .sync = cuda_sync, .alloc = cuda_alloc, .free = cuda_free, .upload = cuda_upload,             \
    .download = cuda_download, .weight_bytes = cuda_weight_bytes,                                 \
    .weight_create = cuda_weight_create, .weight_free = cuda_weight_free,                         \
    .workers = cuda_workers, .conv2d_pack = cpdit_cuda_table_conv2d_pack,                         \
    .conv2d_pack_stored = cpdit_cuda_table_conv2d_pack_stored,                                    \
    .conv2d_workspace_bytes = cpdit_cuda_table_conv2d_workspace_bytes

/* The other entries over activations, from the wrappers of prefix P (cuda_ or cuda32_). */
#define CUDA_TABLE_OPS(P)                                                                          \
    .upload_act = P##upload_act, .download_act = P##download_act, .linear = P##linear,           \
    .layer_norm = P##layer_norm, .rms_norm = P##rms_norm, .rope = P##rope, .act = P##act,         \
    .add = P##add, .mul = P##mul, .embedding = P##embedding, .modulate = P##modulate,             \
    .gated_residual = P##gated_residual, .copy_rows = P##copy_rows, .lse_merge = P##lse_merge,    \
    .linear_act = P##linear_act

/* The VAE entries (backend_cuda_vae.c) of prefix V (cpdit_cuda_bf16_ or cpdit_cuda_f32_). */
#define CUDA_TABLE_VAE(V)                                                                          \
    .conv2d = V##conv2d, .group_moments = V##group_moments,                                       \
    .group_norm_apply = V##group_norm_apply, .upsample2x = V##upsample2x,                         \
    .transpose = V##transpose

static const cpdit_backend cuda_backend = {
    .name = "cuda",
    .summary = "device memory, bf16 activations (fp32 math, one rounding per op); bf16 weights "
               "with cuBLASLt (fp32 accumulate), flash attention with LSE or cuDNN fused "
               "attention, cuDNN convolutions (bf16 or fp32)",
    .act_dtype = CPDIT_DTYPE_BF16,
    .act_size = 2,
    CUDA_TABLE_COMMON,
    CUDA_TABLE_OPS(cuda_),
    CUDA_TABLE_VAE(cpdit_cuda_bf16_),
    .attention_kernels = cpdit_cuda_bf16_kernels,
    .attention_auto = &cpdit_cuda_bf16_auto_kernel,
    .lse_merge_f32 = cuda_lse_merge_f32,
    .act_to_f32 = cuda_act_to_f32,
    .act_from_f32 = cuda_act_from_f32,
};

static const cpdit_backend cuda_fp32_backend = {
    .name = "cuda-fp32",
    .summary = "the cuda table with fp32 activations (the same kernels instantiated for fp32): "
               "twice the activation memory; tells bf16 storage error from kernel error",
    .act_dtype = CPDIT_DTYPE_F32,
    .act_size = 4,
    CUDA_TABLE_COMMON,
    CUDA_TABLE_OPS(cuda32_),
    CUDA_TABLE_VAE(cpdit_cuda_f32_),
    .attention_kernels = cpdit_cuda_f32_kernels,
    .attention_auto = &cpdit_cuda_f32_auto_kernel,
};

const cpdit_backend *cpdit_backend_cuda(void)
{
    return &cuda_backend;
}

const cpdit_backend *cpdit_backend_cuda_fp32(void)
{
    return &cuda_fp32_backend;
}
