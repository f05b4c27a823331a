/* backend.h — the kernel table: the ops the models call, one table per backend.
 *
 * Model code (lib/flux, lib/text, lib/cp, lib/pipeline, lib/vae) never calls BLAS, a loop kernel
 * or malloc for activations directly: it calls through a `const cpdit_backend *`, so that a GPU
 * backend plugs in with its own table and the model code stays one copy. The backends compiled
 * in are listed by cpdit_backend_list(); one is picked by name (--backend) or the best available
 * one by cpdit_backend_default().
 *
 * Conventions for every op:
 *   - activations (cpdit_buf) are row-major elements of the table's act_dtype: fp32 on "cpu",
 *     bf16 on "cuda" and "cpu-bf16" (ops compute in fp32 and round once when they store);
 *     "rows x dim" means `rows` vectors of `dim` contiguous elements, and every stride, count
 *     and offset of an activation is in elements, never bytes or floats;
 *   - parameters (biases, norm weights, RoPE tables, embedding tables, T5's position bias)
 *     and the attention LSE are fp32 (`float *`) in every table;
 *   - buffers belong to the backend's memory (host memory for the CPU tables): allocate
 *     activations with cpdit_act_alloc (or be->alloc of cpdit_act_bytes, or a cpdit_scratch)
 *     and move host fp32 data in and out with upload_act/download_act (which convert), other
 *     data with upload/download (bytes as they are);
 *   - unless an op says otherwise, y may alias x (in place), and sizes of 0 are no-ops;
 *   - the ops do not fail on valid arguments; `linear` and attention return a status because a
 *     backend may need workspace or a library handle.
 * Weights follow PyTorch's nn.Linear storage: W is (out, in) row-major, and
 *   linear: y = x W^T + b.
 * Attention tensors are (B, S, H, D) (DESIGN.md); the LSE is (B, Sq, H) fp32, natural log.
 * tests/test_backend_ops checks every op of every table against plain C references
 * (kernels/backend_ops.h lists the cases); `cpdit bench ops` times them.
 */
#ifndef CPDIT_KERNELS_BACKEND_H
#define CPDIT_KERNELS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "lib/core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activation storage: a pointer into a backend's memory holding elements of the table's
 * act_dtype. An incomplete type on purpose: C cannot step through it, so an offset must go
 * through cpdit_buf_at(be, p, elements), which knows the element size; passing a `float *`
 * where a cpdit_buf * is expected is a compile error (-Werror=incompatible-pointer-types).
 * Host fp32 arrays become buffers of a host fp32 table ("cpu") with cpdit_host_buf. */
typedef struct cpdit_buf cpdit_buf;

/* Activations by kind (the `act` op, and the ones an op can fuse: diffusers' get_activation
 * names silu/swish, gelu (erf form), relu, mish); n elements, y may alias x. */
typedef enum cpdit_act {
    CPDIT_ACT_NONE = 0,   /* identity (a fused op applies nothing) */
    CPDIT_ACT_SILU,       /* x sigmoid(x) */
    CPDIT_ACT_GELU,       /* 0.5 x (1 + erf(x / sqrt 2))  (torch's exact gelu) */
    CPDIT_ACT_RELU,       /* max(x, 0) */
    CPDIT_ACT_MISH,       /* x tanh(softplus(x)) */
    CPDIT_ACT_GELU_TANH,  /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (torch "tanh") */
    CPDIT_ACT_QUICK_GELU, /* x sigmoid(1.702 x)  (CLIP's quick_gelu) */
    CPDIT_ACT_COUNT
} cpdit_act;
#define CPDIT_ACT_GELU_ERF CPDIT_ACT_GELU
/* The VAE's name for the same kinds. */
typedef cpdit_act cpdit_activation;

/* "none", "silu", "gelu-erf", "relu", "mish", "gelu-tanh", "quick-gelu"; "invalid" out of
 * range. */
const char *cpdit_act_name(cpdit_act kind);

/* One attention problem: out = softmax(scale q k^T + bias, masked) v, per item b and head h.
 *   q (B, Sq, H, D), k and v (B, Skv, H, D), out (B, Sq, H, D): activations (cpdit_buf);
 *   lse (B, Sq, H) fp32 or NULL.
 *   Row strides: consecutive tokens of q are ld_q elements apart (k and v: ld_kv, out: ld_out;
 *   0 means H*D, contiguous), so q, k, v may be column blocks of one fused qkv buffer; item b
 *   starts at b*Sq*ld_q (k, v: b*Skv*ld_kv; out: b*Sq*ld_out). lse is always contiguous.
 *   bias: additive scores (H, Sq, Skv), the same for every item (T5's relative position bias),
 *   or NULL. causal: query i sees keys j <= i only (CLIP); needs Sq == Skv.
 *   Skv may be 0: out = 0 and lse = -INFINITY (an empty block; merging it changes nothing).
 * out must not alias q, k or v. */
typedef struct cpdit_attention_args {
    int B, Sq, Skv, H, D;
    int ld_q, ld_kv, ld_out;
    float scale;
    const float *bias;
    int causal;
} cpdit_attention_args;

/* A local attention kernel of a backend (--attention-backend NAME, as diffusers'
 * set_attention_backend). Every kernel takes every cpdit_attention_args; kernels differ in
 * speed and numerics (within the conformance threshold), not in what they accept.
 * forward returns CPDIT_OK, CPDIT_ERR_INPUT (bad shape, causal with Sq != Skv) or
 * CPDIT_ERR_RUNTIME (out of memory), err filled. */
typedef struct cpdit_attention_kernel {
    const char *name;    /* "cpu-flash", "cpu-reference", ... unique over all backends */
    const char *summary; /* one line for --help and errors */
    cpdit_status (*forward)(cpdit_buf *out, float *lse, const cpdit_buf *q, const cpdit_buf *k,
                            const cpdit_buf *v, const cpdit_attention_args *a, cpdit_error *err);
    /* The normalised error the kernel may show against fp32 attention, for kernels that
     * compute in lower precision (cudnn: bf16 Q, K, V, P and O); 0 for fp32 kernels (the
     * conformance suite then holds them to its fp32 thresholds). */
    double tolerance;
} cpdit_attention_kernel;

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
    void *storage;           /* NULL: the backend allocates; else weight_bytes(desc) bytes of
                                the backend's memory owned by the caller (a streaming slot from
                                be->alloc; for a host-memory backend also memory shared by the
                                ranks of a node), aligned to 64, outliving the weight */
    int fill;                /* with storage: 1 = write the weight into it; 0 = it already
                                holds it (another process wrote it), data is not read */
} cpdit_weight_desc;

typedef struct cpdit_backend {
    const char *name;    /* "cpu", ... */
    const char *summary; /* one line for cpdit --version */
    /* The element type of activations (cpdit_buf) in this table: CPDIT_DTYPE_F32 or
     * CPDIT_DTYPE_BF16; act_size its bytes (4 or 2). */
    cpdit_dtype act_dtype;
    size_t act_size;
    /* 1 when the backend's memory is host memory (a host pointer is a valid backend buffer:
     * the CPU); 0 when it is a device's (upload/download are the only way across). */
    int host_memory;

    /* Runtime: can this backend run here (a GPU backend: is there a usable device)? Returns
     * 1, or 0 with the reason in why (when given). Cheap after the first call. */
    int (*available)(char *why, size_t why_size);
    /* The libraries and device it runs on, one line ("OpenBLAS 0.3.26 SkylakeX, 16 threads";
     * "CUDA 13.0, cuBLASLt 13.0.0, cuDNN 9.13.0, NCCL 2.28.3; NVIDIA H200"). */
    void (*describe)(char *buf, size_t size);
    /* Wait until every op queued so far has finished (timing; the end of a forward). Returns
     * CPDIT_OK, or CPDIT_ERR_RUNTIME (err filled, when given) when an op queued since the last
     * status failed on the device: the void ops cannot say so themselves. Always OK on the
     * CPU. */
    cpdit_status (*sync)(cpdit_error *err);

    /* Memory for activations: bytes rounded up to the backend's alignment; free(NULL) is fine.
     * alloc returns NULL when memory runs out. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    /* Copies between host memory and the backend's memory (plain memcpy on the CPU): model
     * inputs, tables built on the host and outputs cross here and nowhere else.
     * upload/download move bytes as they are (fp32 parameters, the LSE, index tables);
     * upload_act/download_act move n activations between host fp32 and the table's act_dtype
     * (rounding to nearest even on the way in; a plain copy when act_dtype is fp32). */
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*upload_act)(cpdit_buf *dst, const float *host_src, size_t n);
    void (*download_act)(float *host_dst, const cpdit_buf *src, size_t n);

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
    cpdit_status (*linear)(cpdit_buf *y, int ldy, const cpdit_buf *x, int ldx,
                           const cpdit_weight *w, const float *b, int M, int K, int N,
                           int accumulate, cpdit_error *err);

    /* LayerNorm over the last dim: y = (x - mean) / sqrt(var + eps) * gamma + beta, the
     * variance biased (divide by dim) as torch.nn.LayerNorm. x, y (rows, dim); gamma, beta
     * (dim) or NULL (no affine: gamma = 1, beta = 0). */
    void (*layer_norm)(cpdit_buf *y, const cpdit_buf *x, const float *gamma, const float *beta,
                       size_t rows, int dim, float eps);

    /* RMSNorm over the last dim: y = x / sqrt(mean(x^2) + eps) * weight. x, y (rows, dim),
     * weight (dim) or NULL. For per-head Q/K norms call it with rows = tokens * heads and
     * dim = head_dim. */
    void (*rms_norm)(cpdit_buf *y, const cpdit_buf *x, const float *weight, size_t rows, int dim,
                     float eps);

    /* Rotary embedding in place, pairwise-interleaved as diffusers' apply_rotary_emb with
     * use_real=True, use_real_unbind_dim=-1: for each token s, head h, pair i (0 <= i < D/2),
     * with a = x[s,h,2i], b = x[s,h,2i+1]:
     *   x[s,h,2i]   = a cos[s,2i]   - b sin[s,2i]
     *   x[s,h,2i+1] = b cos[s,2i+1] + a sin[s,2i+1]
     * x (S, H, D); cos, sin (S, D) (each pair's two entries are equal in FLUX's table). D even. */
    void (*rope)(cpdit_buf *x, const float *cos, const float *sin, int S, int H, int D);

    /* y = act(x) for the activation kind (cpdit_act), n elements. */
    void (*act)(cpdit_act kind, cpdit_buf *y, const cpdit_buf *x, size_t n);

    /* y = a + b, n elements (y may alias a or b). */
    void (*add)(cpdit_buf *y, const cpdit_buf *a, const cpdit_buf *b, size_t n);

    /* y = a * b elementwise, n elements (y may alias a or b). */
    void (*mul)(cpdit_buf *y, const cpdit_buf *a, const cpdit_buf *b, size_t n);

    /* Embedding gather: y[i] = table[ids[i]] for i < n; table (vocab, dim), y (n, dim). The
     * caller checks 0 <= ids[i] < vocab (ids are host memory). table: fp32 parameters. */
    void (*embedding)(cpdit_buf *y, const float *table, const int32_t *ids, size_t n, int dim);

    /* AdaLN modulation: y[r] = x[r] * (1 + scale) + shift for each of rows rows.
     * x, y (rows, dim); shift, scale (dim): all activations. */
    void (*modulate)(cpdit_buf *y, const cpdit_buf *x, const cpdit_buf *shift,
                     const cpdit_buf *scale, size_t rows, int dim);

    /* Gated residual: h[r] += gate * x[r] for each of rows rows. h, x (rows, dim) with row
     * strides ldh and ldx (>= dim); gate (dim): all activations. h must not alias x. */
    void (*gated_residual)(cpdit_buf *h, int ldh, const cpdit_buf *x, int ldx,
                           const cpdit_buf *gate, size_t rows, int dim);

    /* Copy a (rows, dim) block between row-strided buffers: dst[r] = src[r], bits unchanged
     * (no conversion: lib/cp moves its fp32 LSE rows through it as 4 / act_size elements). */
    void (*copy_rows)(cpdit_buf *dst, int ldd, const cpdit_buf *src, int lds, size_t rows,
                      int dim);

    /* Merge a partial attention result (out_b, lse_b) over other keys into (out_a, lse_a), in
     * place: lse = log(e^a + e^b), out = out_a e^(a-lse) + out_b e^(b-lse). rows = B*Sq*H
     * rows of D activations (out) and one fp32 (lse). An empty part (lse -INFINITY) adds
     * nothing. */
    void (*lse_merge)(cpdit_buf *out_a, float *lse_a, const cpdit_buf *out_b, const float *lse_b,
                      size_t rows, int D);

    /* The local attention kernels, NULL-terminated, the default (fastest) first. */
    const cpdit_attention_kernel *const *attention_kernels;

    /* How many independent tasks the backend runs at once (CPU: worker threads), for callers
     * that split work into chunks (ring attention). >= 1. */
    int (*workers)(void);
    /* ---------------------------------------------------------------- VAE section (issue 14)
     * Images are NHWC: (rows, W, C), each pixel's C channels contiguous. A row split over
     * ranks keeps every op local except the convolution's halo rows and GroupNorm's moments,
     * which the caller exchanges / reduces (lib/vae). */

    /* Convolution weights (Cout, Cin, K, K) host fp32 (PyTorch's layout) -> the backend's
     * packed form for conv2d, in backend memory (release with free); NULL when out of memory. */
    float *(*conv2d_pack)(const float *w, int Cout, int Cin, int K);
    /* conv2d_pack from the weights as stored: w (Cout, Cin, K, K) in dtype (F32, F16, BF16,
     * F8; host memory, any alignment: a checkpoint's map), for a weight format, as
     * weight_create does for linear. CPDIT_WEIGHT_F32 = conv2d_pack of the fp32 values (the
     * exact reference); CPDIT_WEIGHT_NATIVE = the backend's fast form for the dtype (CPU with
     * AVX512-BF16: bf16 and fp8 as bf16 panels for the bf16 GEMM, inputs rounded to bf16, fp32
     * sums; fp32 and fp16 stay fp32). No fp32 copy of a bf16 weight is made on the way. conv2d
     * tells the forms apart by itself. NULL when out of memory. May be NULL (the backend packs
     * only fp32): callers convert to fp32 and call conv2d_pack. */
    float *(*conv2d_pack_stored)(const void *w, cpdit_dtype dtype, int Cout, int Cin, int K,
                                 cpdit_weight_format format);
    /* Bytes of workspace conv2d needs for this width, Cin and K (0 for K = 1). */
    size_t (*conv2d_workspace_bytes)(int W, int Cin, int K);
    /* Output rows [r0, r1) of y (rows, W, Cout) = conv KxK, stride 1, zero "same" padding, of
     * x (rows, W, Cin) with packed weights and bias b (Cout) or NULL. K is 1 or 3. x points at
     * row 0; for K = 3 rows -1 and `rows` must be readable (halo rows: the neighbouring rank's
     * rows, or zeros at the image's top and bottom edges); columns outside 0..W-1 count as
     * zero. y must not alias x. ws: conv2d_workspace_bytes bytes of backend memory. */
    cpdit_status (*conv2d)(cpdit_buf *y, const cpdit_buf *x, const float *w_packed,
                           const float *b, int W, int Cin, int Cout, int K, int r0, int r1,
                           void *ws, cpdit_error *err);
    /* GroupNorm's moments over x (pixels, C), G groups of C/G consecutive channels:
     * acc[g] += sum of x over the group (mean = NULL), or of (x - mean[g])^2 (mean: G values).
     * Accumulated in double, so that a caller can add the partial moments of several ranks and
     * get the single-rank result to rounding. */
    void (*group_moments)(double *acc, const cpdit_buf *x, size_t pixels, int C, int G,
                          const double *mean);
    /* y = act((x - mean[g]) · rstd[g] · gamma[c] + beta[c]) over x, y (pixels, C); mean, rstd
     * (G) from group_moments; y may alias x. */
    void (*group_norm_apply)(cpdit_buf *y, const cpdit_buf *x, size_t pixels, int C, int G,
                             const double *mean, const double *rstd, const float *gamma,
                             const float *beta, cpdit_activation act);
    /* Nearest 2x: y (2 rows, 2W, C)[r][i] = x (rows, W, C)[r / 2][i / 2]. y must not alias x. */
    void (*upsample2x)(cpdit_buf *y, const cpdit_buf *x, int rows, int W, int C);
    /* y (cols, rows) = transpose of x (rows, cols) (NCHW <-> NHWC per image). No aliasing. */
    void (*transpose)(cpdit_buf *y, const cpdit_buf *x, size_t rows, size_t cols);

    /* ---------------------------------------------------------------- optional entries
     * NULL in a table that has nothing better than the generic form; call them through the
     * helpers below, which fall back. */

    /* linear followed by an activation over y's (M, N) block, accumulate = 0:
     *   y = act(x W^T + b)
     * (cuda: one cuBLASLt call with the bias and GELU-tanh epilogue). NULL: linear, then act on
     * each row (the CPU: results identical to the two ops). Errors as linear. */
    cpdit_status (*linear_act)(cpdit_buf *y, int ldy, const cpdit_buf *x, int ldx,
                               const cpdit_weight *w, const float *b, int M, int K, int N,
                               cpdit_act act, cpdit_error *err);
    /* The kernel `--attention-backend auto` picks (cuda: times cuda-flash and cudnn once per
     * shape and keeps the faster); NULL: attention_kernels[0]. Not in attention_kernels. */
    const cpdit_attention_kernel *attention_auto;
    /* An fp32 accumulator for tables whose act_dtype is not fp32 (ring attention keeps its
     * running output in one, as ring flash-attention implementations do, and rounds it once at
     * the end: repeated merges in bf16 would round the running output at every block, an
     * error growing with the ring size). All three or none; NULL on fp32 tables ("cpu": its
     * lse_merge already accumulates in fp32). The float arrays are the backend's memory.
     * lse_merge_f32: lse_merge with out_a (rows, D) fp32: out_b (rows, D) activations widened,
     *   merged in fp32 as lse_merge does, nothing rounded (equals the fp32 lse_merge on the
     *   widened block).
     * act_to_f32: y (n) fp32 = x (n) activations widened (exact).
     * act_from_f32: y (n) activations = x (n) fp32 rounded once (nearest, ties to even). */
    void (*lse_merge_f32)(float *out_a, float *lse_a, const cpdit_buf *out_b,
                          const float *lse_b, size_t rows, int D);
    void (*act_to_f32)(float *y, const cpdit_buf *x, size_t n);
    void (*act_from_f32)(cpdit_buf *y, const float *x, size_t n);
} cpdit_backend;

/* be->linear_act when the table has it, else be->linear then be->act over the block (one call
 * when ldy == N, else one per row). */
cpdit_status cpdit_linear_act(const cpdit_backend *be, cpdit_buf *y, int ldy, const cpdit_buf *x,
                              int ldx, const cpdit_weight *w, const float *b, int M, int K,
                              int N, cpdit_act act, cpdit_error *err);

/* 1 when be accumulates in fp32 apart from its storage (act_dtype not fp32 and the three
 * fp32-accumulator entries present): ring attention then merges into an fp32 running output. */
static inline int cpdit_backend_f32_accumulator(const cpdit_backend *be)
{
    return be->act_dtype != CPDIT_DTYPE_F32 && be->lse_merge_f32 && be->act_to_f32 &&
           be->act_from_f32;
}

/* ---- activation buffers ------------------------------------------------------------------ */

/* The element n elements after p in be's activation storage (n may be negative: a conv's
 * halo row above row 0). Takes a const buffer and returns a mutable one, as strchr does. */
static inline cpdit_buf *cpdit_buf_at(const cpdit_backend *be, const cpdit_buf *p, ptrdiff_t n)
{
    return (cpdit_buf *)((char *)(uintptr_t)p + n * (ptrdiff_t)be->act_size);
}

/* Bytes of n activations of be. */
static inline size_t cpdit_act_bytes(const cpdit_backend *be, size_t n)
{
    return n * be->act_size;
}

/* n activations of be's memory (be->alloc; free with be->free); NULL when out of memory. */
static inline cpdit_buf *cpdit_act_alloc(const cpdit_backend *be, size_t n)
{
    return (cpdit_buf *)be->alloc(n * be->act_size);
}

/* 1 when be's activations are host fp32 arrays (the "cpu" table): a caller may then read and
 * write them as floats through cpdit_host_buf / cpdit_buf_host. */
static inline int cpdit_backend_host_f32(const cpdit_backend *be)
{
    return be->host_memory && be->act_dtype == CPDIT_DTYPE_F32;
}

/* A host fp32 array as a buffer of a host fp32 table (cpdit_backend_host_f32), and back. */
static inline cpdit_buf *cpdit_host_buf(const float *p)
{
    return (cpdit_buf *)(uintptr_t)p;
}
static inline float *cpdit_buf_host(const cpdit_buf *p)
{
    return (float *)(uintptr_t)p;
}

/* Notes of the backends on stderr: 0 none (default); 1 choices made at run time (the attention
 * kernel `auto` picks per shape, fallbacks). The CLI's --verbose sets 1 on rank 0. */
void cpdit_backend_set_verbose(int level);
int cpdit_backend_verbose(void);

/* ---- backends in this build (kernels/backend.c) ---------------------------------------- */

/* The CPU backend (kernels/cpu/backend_cpu.c): OpenBLAS SGEMM and loop kernels. */
const cpdit_backend *cpdit_backend_cpu(void);

/* The CPU backend with bf16 activation storage (kernels/cpu/backend_cpu_bf16.c): every op
 * reads bf16, computes as the "cpu" table in fp32 and rounds its outputs to bf16 once, as the
 * GPU table stores them. Half the activation memory; the host check of every bf16 offset and
 * count of the model code. Listed after "cpu" (never the default). */
const cpdit_backend *cpdit_backend_cpu_bf16(void);

/* The CUDA backend (kernels/cuda/backend_cuda.c): only in builds configured --with-cuda
 * (CPDIT_HAVE_CUDA); listed before the CPU one, picked by default when a device is there. */
const cpdit_backend *cpdit_backend_cuda(void);

/* The backends compiled in, NULL-terminated, best first (cpdit --version lists them). */
const cpdit_backend *const *cpdit_backend_list(void);

/* A backend by name ("cpu"); NULL when this build has no such backend. */
const cpdit_backend *cpdit_backend_by_name(const char *name);

/* The best backend available here (the first of the list whose available() says yes: a GPU
 * backend without a device is skipped); never NULL (the CPU backend is always built and
 * always available). */
const cpdit_backend *cpdit_backend_default(void);

/* After MPI_Init, on every rank (collective over MPI_COMM_WORLD): backends that need it bind
 * this process to its device (cuda: local rank on the node from MPI's shared-memory split,
 * modulo the devices). A no-op in a CPU-only build. */
void cpdit_backends_bind_mpi(void);

/* be->available(why, size) (1: usable here). */
int cpdit_backend_available(const cpdit_backend *be, char *why, size_t why_size);

/* The backend named name (NULL or "" or "auto": cpdit_backend_default()) into *out.
 * CPDIT_ERR_INPUT naming the backends of this build otherwise; CPDIT_ERR_RUNTIME when the
 * backend is built in but cannot run here (no device), with available()'s reason. */
cpdit_status cpdit_backend_resolve(const char *name, const cpdit_backend **out,
                                   cpdit_error *err);

/* ---- attention kernels ------------------------------------------------------------------- */

/* The attention kernel of be named name into *out: NULL or "": be's default
 * (attention_kernels[0]); "auto": be->attention_auto, or the default when it has none.
 * CPDIT_ERR_INPUT otherwise, the message listing be's kernels (and saying which backend
 * offers the name, when another one does). */
cpdit_status cpdit_attention_kernel_find(const cpdit_backend *be, const char *name,
                                         const cpdit_attention_kernel **out, cpdit_error *err);

/* "cpu-flash, cpu-reference" — be's kernel names into buf; returns buf. */
const char *cpdit_attention_kernel_names(const cpdit_backend *be, char *buf, size_t size);

/* ---- scratch memory over a backend's alloc/free ------------------------------------------ */

/* A growable block of backend memory kept between calls (attention workspaces): get returns at
 * least bytes bytes (aligned as be->alloc), reallocating when it must grow (contents are not
 * kept); NULL when out of memory. release frees it; the struct may be reused afterwards.
 * Zero-initialise, then set be. One user at a time. */
typedef struct cpdit_scratch {
    const cpdit_backend *be;
    void *base;
    size_t cap; /* bytes */
} cpdit_scratch;

void *cpdit_scratch_get(cpdit_scratch *s, size_t bytes);
void cpdit_scratch_release(cpdit_scratch *s);

#ifdef __cplusplus
}
#endif
#endif
