/* backend.h — the kernel table: the ops the models call, one table per backend.
 *
 * Model code (lib/flux_transformer.c, ...) never calls BLAS or a loop kernel directly: it calls
 * through a `const cpdit_backend *`, so that a GPU backend plugs in with its own table and
 * the model code stays one copy. Attention is NOT in this table: it goes through the
 * context-parallel entry point (lib/cp_attention.h), which runs the local kernel itself.
 *
 * Conventions for every op:
 *   - tensors are fp32, row-major; "rows x dim" means `rows` vectors of `dim` contiguous floats;
 *   - buffers belong to the backend's memory (host memory for the CPU backend): allocate
 *     activations with alloc/free of the same table and move host data in and out with
 *     upload/download;
 *   - unless an op says otherwise, y may alias x (in place), and sizes of 0 are no-ops;
 *   - the ops do not fail on valid arguments; `linear` returns a status because a backend may
 *     need workspace or a library handle.
 * Weights follow PyTorch's nn.Linear storage: W is (out, in) row-major, and
 *   linear: y = x W^T + b.
 */
#ifndef CPDIT_KERNELS_BACKEND_H
#define CPDIT_KERNELS_BACKEND_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"
#include "lib/io/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activations an op can fuse (diffusers' get_activation names: silu/swish, gelu (erf form),
 * relu, mish). */
typedef enum cpdit_activation {
    CPDIT_ACT_NONE = 0,
    CPDIT_ACT_SILU,
    CPDIT_ACT_GELU,
    CPDIT_ACT_RELU,
    CPDIT_ACT_MISH
} cpdit_activation;

/* A weight matrix in the backend's memory and layout, made from the stored data once (at
 * load) by weight_create; `linear` computes from it. Opaque; free with weight_free. */
typedef struct cpdit_weight cpdit_weight;

/* How a backend keeps a weight. */
typedef enum cpdit_weight_format {
    CPDIT_WEIGHT_NATIVE = 0, /* compute from the stored dtype (the CPU: bf16 and fp8 packed as
                                bf16 panels for the bf16 GEMM; fp32 and fp16 as fp32) */
    CPDIT_WEIGHT_F32         /* converted to fp32 once: the exact reference path (SGEMM) */
} cpdit_weight_format;

/* Names "native" / "bf16" and "fp32" / "f32"; -1 when unknown. */
int cpdit_weight_format_from_name(const char *name);
const char *cpdit_weight_format_name(cpdit_weight_format f);

/* A weight to create: data (rows, cols) row-major in dtype, host memory, any alignment. */
typedef struct cpdit_weight_desc {
    cpdit_dtype dtype;
    int rows, cols;          /* nn.Linear's (out, in) */
    const void *data;
    int data_persists;       /* data stays valid and unchanged while the weight lives (a
                                read-only map): the backend may use it in place */
    cpdit_weight_format format;
    void *storage;           /* NULL: the backend allocates; else weight_bytes(desc) bytes owned
                                by the caller (e.g. memory shared by the ranks of a node),
                                aligned to 64, outliving the weight */
    int fill;                /* with storage: 1 = write the weight into it; 0 = it already
                                holds it (another process wrote it), data is not read */
} cpdit_weight_desc;

typedef struct cpdit_backend {
    const char *name; /* "cpu", ... */

    /* Memory for activations: bytes rounded up to the backend's alignment; free(NULL) is fine.
     * alloc returns NULL when memory runs out. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    /* Copies between host memory and the backend's memory (plain memcpy on the CPU): model
     * inputs, tables built on the host and outputs cross here and nowhere else. */
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);

    /* Weights. weight_bytes: the bytes weight_create stores for d (0 when it would use
     * d->data in place). weight_create: *out = the weight of d. Errors: unsupported dtype,
     * bad sizes (INPUT), out of memory (RUNTIME). */
    size_t (*weight_bytes)(const cpdit_weight_desc *d);
    cpdit_status (*weight_create)(cpdit_weight **out, const cpdit_weight_desc *d,
                                  cpdit_error *err);
    void (*weight_free)(cpdit_weight *w);

    /* y (M, N) with row stride ldy  =  x (M, K) with row stride ldx  ·  W^T  (+ b).
     * W: a weight of (N, K) (nn.Linear's (out, in)); b: (N) fp32 or NULL. y must not alias x.
     * ldx >= K, ldy >= N. With accumulate = 1, y += x W^T (+ b) instead of y = ...
     * Errors: W's shape is not (N, K), bad sizes (INPUT); out of memory (RUNTIME). */
    cpdit_status (*linear)(float *y, int ldy, const float *x, int ldx, const cpdit_weight *w,
                           const float *b, int M, int K, int N, int accumulate,
                           cpdit_error *err);

    /* LayerNorm over the last dim: y = (x - mean) / sqrt(var + eps) * gamma + beta, the
     * variance biased (divide by dim) as torch.nn.LayerNorm. x, y (rows, dim); gamma, beta
     * (dim) or NULL (no affine: gamma = 1, beta = 0). */
    void (*layer_norm)(float *y, const float *x, const float *gamma, const float *beta,
                       size_t rows, int dim, float eps);

    /* RMSNorm over the last dim: y = x / sqrt(mean(x^2) + eps) * weight. x, y (rows, dim),
     * weight (dim) or NULL. For per-head Q/K norms call it with rows = tokens * heads and
     * dim = head_dim. */
    void (*rms_norm)(float *y, const float *x, const float *weight, size_t rows, int dim,
                     float eps);

    /* Rotary embedding in place, pairwise-interleaved as diffusers' apply_rotary_emb with
     * use_real=True, use_real_unbind_dim=-1: for each token s, head h, pair i (0 <= i < D/2),
     * with a = x[s,h,2i], b = x[s,h,2i+1]:
     *   x[s,h,2i]   = a cos[s,2i]   - b sin[s,2i]
     *   x[s,h,2i+1] = b cos[s,2i+1] + a sin[s,2i+1]
     * x (S, H, D); cos, sin (S, D) (each pair's two entries are equal in FLUX's table). D even. */
    void (*rope)(float *x, const float *cos, const float *sin, int S, int H, int D);

    /* y = gelu(x) with the tanh approximation (torch's approximate="tanh"):
     * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). n elements. */
    void (*gelu_tanh)(float *y, const float *x, size_t n);

    /* y = silu(x) = x / (1 + e^-x). n elements. */
    void (*silu)(float *y, const float *x, size_t n);

    /* y = a + b, n elements (y may alias a or b). */
    void (*add)(float *y, const float *a, const float *b, size_t n);

    /* AdaLN modulation: y[r] = x[r] * (1 + scale) + shift for each of rows rows.
     * x, y (rows, dim); shift, scale (dim). */
    void (*modulate)(float *y, const float *x, const float *shift, const float *scale,
                     size_t rows, int dim);

    /* Gated residual: h[r] += gate * x[r] for each of rows rows. h, x (rows, dim) with row
     * strides ldh and ldx (>= dim); gate (dim). h must not alias x. */
    void (*gated_residual)(float *h, int ldh, const float *x, int ldx, const float *gate,
                           size_t rows, int dim);

    /* Copy a (rows, dim) block between row-strided buffers: dst[r] = src[r]. */
    void (*copy_rows)(float *dst, int ldd, const float *src, int lds, size_t rows, int dim);

    /* ---------------------------------------------------------------- VAE section (issue 14)
     * Images are NHWC: (rows, W, C), each pixel's C channels contiguous. A row split over
     * ranks keeps every op local except the convolution's halo rows and GroupNorm's moments,
     * which the caller exchanges / reduces (lib/vae). */

    /* Convolution weights (Cout, Cin, K, K) host fp32 (PyTorch's layout) -> the backend's
     * packed form for conv2d, in backend memory (release with free); NULL when out of memory. */
    float *(*conv2d_pack)(const float *w, int Cout, int Cin, int K);
    /* Bytes of workspace conv2d needs for this width, Cin and K (0 for K = 1). */
    size_t (*conv2d_workspace_bytes)(int W, int Cin, int K);
    /* Output rows [r0, r1) of y (rows, W, Cout) = conv KxK, stride 1, zero "same" padding, of
     * x (rows, W, Cin) with packed weights and bias b (Cout) or NULL. K is 1 or 3. x points at
     * row 0; for K = 3 rows -1 and `rows` must be readable (halo rows: the neighbouring rank's
     * rows, or zeros at the image's top and bottom edges); columns outside 0..W-1 count as
     * zero. y must not alias x. ws: conv2d_workspace_bytes bytes of backend memory. */
    cpdit_status (*conv2d)(float *y, const float *x, const float *w_packed, const float *b,
                           int W, int Cin, int Cout, int K, int r0, int r1, void *ws,
                           cpdit_error *err);
    /* GroupNorm's moments over x (pixels, C), G groups of C/G consecutive channels:
     * acc[g] += sum of x over the group (mean = NULL), or of (x - mean[g])^2 (mean: G values).
     * Accumulated in double, so that a caller can add the partial moments of several ranks and
     * get the single-rank result to rounding. */
    void (*group_moments)(double *acc, const float *x, size_t pixels, int C, int G,
                          const double *mean);
    /* y = act((x - mean[g]) · rstd[g] · gamma[c] + beta[c]) over x, y (pixels, C); mean, rstd
     * (G) from group_moments; y may alias x. */
    void (*group_norm_apply)(float *y, const float *x, size_t pixels, int C, int G,
                             const double *mean, const double *rstd, const float *gamma,
                             const float *beta, cpdit_activation act);
    /* Nearest 2x: y (2 rows, 2W, C)[r][i] = x (rows, W, C)[r / 2][i / 2]. y must not alias x. */
    void (*upsample2x)(float *y, const float *x, int rows, int W, int C);
    /* y (cols, rows) = transpose of x (rows, cols) (NCHW <-> NHWC per image). No aliasing. */
    void (*transpose)(float *y, const float *x, size_t rows, size_t cols);
} cpdit_backend;

/* The CPU backend (kernels/cpu/backend_cpu.c): OpenBLAS SGEMM and loop kernels. */
const cpdit_backend *cpdit_backend_cpu(void);

/* A backend by name ("cpu"); NULL when this build has no such backend. */
const cpdit_backend *cpdit_backend_by_name(const char *name);

#ifdef __cplusplus
}
#endif
#endif
