/* backend_ops.h — the op cases of the kernel table, for the conformance suite
 * (tests/test_backend_ops, in the spirit of ggml's test-backend-ops) and `cpdit bench ops`.
 *
 * A case is one use of one table op over a grid of shapes (1, odd sizes, primes, large). For a
 * shape it lays out its inputs and outputs as parts (backend_op_parts): activations (the
 * table's act_dtype, moved with upload_act/download_act, so a bf16 table sees its bf16
 * storage), fp32 parameters (biases, norm weights, RoPE tables, the LSE: upload/download as
 * bytes) and host-only inputs (weights made by setup, embedding ids). On the host the parts
 * are one fp32 array each way, in part order: the case fills the inputs (random in [-1, 1],
 * except where an op needs other values: ids, positive weights), runs the op on a backend with
 * every part in that backend's memory, and counts the FLOPs and bytes one call moves. The
 * suite compares every output of every case on every backend of the build with a plain C
 * reference on the host arrays (tests/backend_ops_reference.c, double precision, written
 * without the kernels' code) by normalised error  ||out - ref||_2 / ||ref||_2  <= the case's
 * tolerance (for a bf16 table, at least the bf16 storage threshold of the suite).
 *
 * Adding an op to the table: add one backend_op_case to the table in backend_ops.c and one
 * reference under the same name in tests/backend_ops_reference.c (the suite fails when a case
 * has no reference).
 */
#ifndef CPDIT_KERNELS_BACKEND_OPS_H
#define CPDIT_KERNELS_BACKEND_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dimensions of a shape (meaning per case, named by backend_op_case.dims). */
#define BACKEND_OP_MAX_DIMS 6
/* Shapes in a case's grid. */
#define BACKEND_OP_MAX_SHAPES 8

typedef struct backend_op_shape {
    int d[BACKEND_OP_MAX_DIMS];
} backend_op_shape;

/* Parts of a case's inputs or outputs. */
#define BACKEND_OP_MAX_PARTS 6

typedef enum backend_op_kind {
    BACKEND_OP_ACT = 0, /* activations: be->act_dtype in backend memory (upload_act) */
    BACKEND_OP_F32,     /* fp32 parameters or the LSE in backend memory (upload) */
    BACKEND_OP_HOST     /* host only (read by setup or by run on the host): not uploaded */
} backend_op_kind;

/* The inputs or the outputs of a case at one shape, in host order. */
typedef struct backend_op_parts {
    int n;
    size_t count[BACKEND_OP_MAX_PARTS];         /* values of each part */
    backend_op_kind kind[BACKEND_OP_MAX_PARTS];
    /* outputs: the input part an output starts from (uploaded into it before the op runs:
     * in-place and accumulating ops), or -1 for none */
    int from[BACKEND_OP_MAX_PARTS];
} backend_op_parts;

/* The parts as a run sees them: each in the member of its kind, NULL in the others. */
typedef struct backend_op_io {
    const cpdit_buf *act_in[BACKEND_OP_MAX_PARTS];
    const float *f32_in[BACKEND_OP_MAX_PARTS];  /* backend memory */
    const float *host_in[BACKEND_OP_MAX_PARTS]; /* BACKEND_OP_HOST parts */
    cpdit_buf *act_out[BACKEND_OP_MAX_PARTS];
    float *f32_out[BACKEND_OP_MAX_PARTS];
} backend_op_io;

typedef struct backend_op_case {
    const char *name; /* "linear", "attention-causal", ... (unique) */
    const char *dims; /* names of the shape's dimensions: "M K N" */
    int nshapes;
    backend_op_shape shapes[BACKEND_OP_MAX_SHAPES]; /* the last is the largest (bench) */
    double tol;        /* normalised error threshold against the reference (fp32 tables) */
    int per_kernel;    /* 1: run once per attention kernel of the backend */
    /* the input and output parts for a shape (backend_op_layout adds the defaults) */
    void (*layout)(const int *d, backend_op_parts *in, backend_op_parts *out);
    /* fill the n_in host inputs (seeded; the default fills uniform [-1, 1]) */
    void (*fill)(const int *d, float *in, size_t n_in, uint64_t seed);
    /* optional: what the op needs made once from the host inputs before timed calls (a
     * weight: backend_op_setup_weight), released by teardown; NULL for none */
    cpdit_status (*setup)(const cpdit_backend *be, const int *d, const float *host_in,
                          void **ctx, cpdit_error *err);
    void (*teardown)(const cpdit_backend *be, void *ctx);
    /* run on be: io's parts in be's memory (host parts on the host); kernel set when
     * per_kernel; ctx from setup */
    cpdit_status (*run)(const cpdit_backend *be, const cpdit_attention_kernel *kernel,
                        void *ctx, const int *d, const backend_op_io *io, cpdit_error *err);
    double (*flops)(const int *d); /* floating-point operations of one call */
    double (*bytes)(const int *d); /* bytes read + written by one call, at 4 per value */
    /* optional: 0 when be lacks the op (an optional entry of the table): the case is skipped
     * on be; NULL: every table has it */
    int (*supported)(const cpdit_backend *be);
    /* 1: the outputs are fp32, never rounded to the activation type (lse_merge_f32): a bf16
     * table is held to tol on its bf16 inputs, not to the bf16 output threshold */
    int f32_out;
} backend_op_case;

/* The parts of c at shape d (from = -1 unless the case says otherwise). */
void backend_op_layout(const backend_op_case *c, const int *d, backend_op_parts *in,
                       backend_op_parts *out);

/* Values of the host input and output arrays of c at shape d (sums of the parts). */
void backend_op_sizes(const backend_op_case *c, const int *d, size_t *n_in, size_t *n_out);

/* The cases, NULL-terminated (the VAE section's last). */
const backend_op_case *const *backend_op_cases(void);

/* The VAE section's cases (kernels/backend_ops_vae.c): n of them. */
const backend_op_case *backend_ops_vae_cases(size_t *n);

/* Uniform [-1, 1) floats from a seed (xorshift; the same on every machine). */
void backend_op_fill_uniform(float *x, size_t n, uint64_t seed);

/* Run case c at shape d on be (kernel: for per_kernel cases): allocate backend memory for
 * each part, upload host_in (n_in values; activations converted to be's act_dtype), run,
 * download into host_out (n_out values, activations widened to fp32), free. */
cpdit_status backend_op_run_host(const cpdit_backend *be, const cpdit_attention_kernel *kernel,
                                 const backend_op_case *c, const int *d, float *host_out,
                                 const float *host_in, cpdit_error *err);

/* "M 17 K 31 N 13" into buf; returns buf. */
const char *backend_op_shape_text(const backend_op_case *c, const int *d, char *buf,
                                  size_t size);

/* `cpdit bench ops`: time every case (only_op: one name, or NULL) at its largest shape on
 * every backend (only_backend: one name, or NULL), reps timed calls after one warm-up, and
 * print a table: op, kernel, backend, shape, time per call, GFLOP/s, GB/s (activations
 * counted at the backend's act_size). */
cpdit_status backend_ops_bench(FILE *out, const char *only_backend, const char *only_op,
                               int reps, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
