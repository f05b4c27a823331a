/* backend_cuda_table.h — what the files of the CUDA kernel tables share (--with-cuda; not an
 * interface: kernels/cuda/backend_cuda.c holds the state, memory, weights, linear, small ops
 * and the two tables; backend_cuda_attention.c the attention kernels; backend_cuda_vae.c the
 * VAE's ops).
 */
#ifndef CPDIT_BACKEND_CUDA_TABLE_H
#define CPDIT_BACKEND_CUDA_TABLE_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cuda/attention_flash_cuda.h"
#include "kernels/cuda/gemm_lt_cuda.h"
#include "lib/core/cpdit_error.h"

#define CUDA_WHERE "kernels/cuda"
/* cuDNN errors come back from vae_ops_cuda as this + the cudnnStatus_t (cuDNN 9's statuses run
 * from 1001 to 5004: above every cuBLAS (2000 + status) and CUDA code). */
#define CUDA_CUDNN_ERROR_BASE 100000

/* The process's device, stream and handles (one for both tables). */
typedef struct cpdit_cuda_state {
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
} cpdit_cuda_state;

extern cpdit_cuda_state cpdit_cuda_S;

/* Initialise once (on the calling thread's first use); 0 when the backend cannot run. */
int cpdit_cuda_ready(void);
/* CPDIT_ERR_RUNTIME with why the backend cannot run. */
cpdit_status cpdit_cuda_not_ready(cpdit_error *err);
/* A failed launch in a void op (rc != 0): said on stderr now, the first kept for the next
 * status. */
void cpdit_cuda_latch(const char *op, int rc);
/* CPDIT_OK, or the latched failure of an earlier void op (reported once). */
cpdit_status cpdit_cuda_latched_status(cpdit_error *err);
/* rc (0, a cudaError_t, 2000 + a cuBLAS status or CUDA_CUDNN_ERROR_BASE + a cuDNN status) as a
 * status with err filled. */
cpdit_status cpdit_cuda_rc_status(int rc, const char *op, cpdit_error *err);

/* The element n elements after p in activations of type t. */
static inline void *cpdit_cuda_elem_at(cpdit_cuda_dtype t, const void *p, size_t n)
{
    return (char *)(uintptr_t)p + n * cpdit_cuda_dtype_size(t);
}

/* ------------------------------------------------------------------ two tables, one code
 * Every op is written once as name_t(cpdit_cuda_dtype t, ...) over activations of type t; the
 * table entries (which carry no table pointer) are thin wrappers: cuda_name for the "cuda"
 * table (bf16) and cuda32_name for "cuda-fp32". TABLE_OP(ret, name, (params), (args)) defines
 * both (TABLE_VOID for the void ops). */
#define TABLE_ARGS_(...) __VA_ARGS__
#define TABLE_OP(ret, name, params, args)                                                         \
    static ret cuda_##name params                                                                 \
    {                                                                                              \
        return name##_t(CPDIT_CUDA_BF16, TABLE_ARGS_ args);                                       \
    }                                                                                              \
    static ret cuda32_##name params                                                               \
    {                                                                                              \
        return name##_t(CPDIT_CUDA_F32, TABLE_ARGS_ args);                                        \
    }
#define TABLE_VOID(name, params, args)                                                            \
    static void cuda_##name params                                                                \
    {                                                                                              \
        name##_t(CPDIT_CUDA_BF16, TABLE_ARGS_ args);                                              \
    }                                                                                              \
    static void cuda32_##name params                                                              \
    {                                                                                              \
        name##_t(CPDIT_CUDA_F32, TABLE_ARGS_ args);                                               \
    }

/* Device staging of at least bytes for small host arrays (ids, moments); call under
 * cpdit_cuda_S.lock. NULL when out of memory. */
void *cpdit_cuda_small_buffer(size_t bytes);

/* Both tables' wrappers with external linkage (for entries defined in another file than the
 * tables): cpdit_cuda_bf16_name and cpdit_cuda_f32_name; TABLE_DECL declares them. */
#define TABLE_OP_EXTERN(ret, name, params, args)                                                  \
    ret cpdit_cuda_bf16_##name params                                                             \
    {                                                                                              \
        return name##_t(CPDIT_CUDA_BF16, TABLE_ARGS_ args);                                       \
    }                                                                                              \
    ret cpdit_cuda_f32_##name params                                                              \
    {                                                                                              \
        return name##_t(CPDIT_CUDA_F32, TABLE_ARGS_ args);                                        \
    }
#define TABLE_VOID_EXTERN(name, params, args)                                                     \
    void cpdit_cuda_bf16_##name params                                                            \
    {                                                                                              \
        name##_t(CPDIT_CUDA_BF16, TABLE_ARGS_ args);                                              \
    }                                                                                              \
    void cpdit_cuda_f32_##name params                                                             \
    {                                                                                              \
        name##_t(CPDIT_CUDA_F32, TABLE_ARGS_ args);                                               \
    }
#define TABLE_DECL(ret, name, params)                                                             \
    ret cpdit_cuda_bf16_##name params;                                                            \
    ret cpdit_cuda_f32_##name params;

/* The VAE section (backend_cuda_vae.c): packing (shared by both tables) and the entries. */
float *cpdit_cuda_table_conv2d_pack(const float *w, int Cout, int Cin, int K);
float *cpdit_cuda_table_conv2d_pack_stored(const void *w, cpdit_dtype dtype, int Cout, int Cin,
                                           int K, cpdit_weight_format format);
size_t cpdit_cuda_table_conv2d_workspace_bytes(int W, int Cin, int K);
/* Take p off the list of bf16 convolution weights (the table's free, before the allocator may
 * hand the address out again). */
void cpdit_cuda_forget_conv(const void *p);
TABLE_DECL(cpdit_status, conv2d,
           (cpdit_buf * y, const cpdit_buf *x, const float *w_packed, const float *b, int W,
            int Cin, int Cout, int K, int r0, int r1, void *ws, cpdit_error *err))
TABLE_DECL(void, group_moments,
           (double *acc, const cpdit_buf *x, size_t pixels, int C, int G, const double *mean))
TABLE_DECL(void, group_norm_apply,
           (cpdit_buf * y, const cpdit_buf *x, size_t pixels, int C, int G, const double *mean,
            const double *rstd, const float *gamma, const float *beta, cpdit_activation act))
TABLE_DECL(void, upsample2x, (cpdit_buf * y, const cpdit_buf *x, int rows, int W, int C))
TABLE_DECL(void, transpose, (cpdit_buf * y, const cpdit_buf *x, size_t rows, size_t cols))

/* The attention kernels of each table (backend_cuda_attention.c): "cuda" (bf16) and
 * "cuda-fp32"; NULL-terminated lists, and the auto kernel of each. */
extern const cpdit_attention_kernel *const cpdit_cuda_bf16_kernels[];
extern const cpdit_attention_kernel *const cpdit_cuda_f32_kernels[];
extern const cpdit_attention_kernel cpdit_cuda_bf16_auto_kernel;
extern const cpdit_attention_kernel cpdit_cuda_f32_auto_kernel;

#endif
