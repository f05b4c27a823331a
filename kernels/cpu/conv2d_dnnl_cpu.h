/* conv2d_dnnl_cpu.h — the CPU table's 3x3 convolution through oneDNN (kernels/backend.h's
 * conv2d, CPDIT_WEIGHT_NATIVE form), in builds configured with oneDNN (CPDIT_HAVE_DNNL; Debian
 * libdnnl-dev, `./configure --with-dnnl`), on a CPU with AVX512-BF16: oneDNN's brgconv ran
 * 1.2-1.5x our im2col + bf16 GEMM at the FLUX VAE's shapes (PERFORMANCE.md). Same arithmetic
 * as ours (inputs and weights rounded to bf16, fp32 sums), and like ours each output row is
 * the same whatever band of rows it is computed in, so a decode split over ranks stays exact.
 *
 * Only weights stored as bf16 take this form (as our bf16 kernel: fp32 checkpoints stay fp32).
 * Packed form (after vae_ops_cpu.c's header): the weights' oneDNN memory descriptor, then the
 * weights reordered into the layout oneDNN chose for them at a probe shape. A call converts
 * the band's input rows (with the halo rows above and below) to bf16 in the workspace, in
 * sub-bands that fit it, and runs a primitive made once per (Cin, Cout, rows, W, bias), with
 * oneDNN's own weights layout for that shape, kept in a small process-wide cache; the rare
 * shapes (narrow images) whose layout differs from the packed one get the weights reordered
 * for the call. OpenMP threads: the BLAS's thread count.
 */
#ifndef CPDIT_CONV2D_DNNL_CPU_H
#define CPDIT_CONV2D_DNNL_CPU_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which engine the native 3x3 convolutions use: "auto" (oneDNN when built in and the CPU has
 * AVX512-BF16, else ours; the default), "dnnl" (the same, -1 when unavailable), "builtin"
 * (ours). Affects weights packed afterwards. Returns 0 or -1. */
int cpu_conv2d_set_engine(const char *name);
/* "dnnl" or "builtin": what cpu_conv2d_pack_stored(bf16 weights, NATIVE) packs for now. */
const char *cpu_conv2d_engine(void);

#ifdef CPDIT_HAVE_DNNL
/* A cpu_alloc block: header bytes (left for the caller), then the packed form of w (Cout,
 * Cin, 3, 3) bf16 as stored (any alignment). NULL when oneDNN has no bf16 convolution for these sizes or memory ran
 * out (the caller packs its own form instead). */
void *cpu_conv2d_dnnl_pack(const void *w, int Cout, int Cin, size_t header);
/* Workspace bytes a call needs at this width and Cin (sub-bands of >= CONV_DNNL_MIN_ROWS). */
size_t cpu_conv2d_dnnl_workspace_bytes(int W, int Cin);
/* Output rows [r0, r1) of y (rows, W, Cout) from x (rows, W, Cin), rows r0-1 and r1 readable
 * (conv2d's contract); packed from cpu_conv2d_dnnl_pack (past the header); b (Cout) or NULL;
 * ws of ws_bytes >= cpu_conv2d_dnnl_workspace_bytes(W, Cin). Errors: RUNTIME from oneDNN. */
cpdit_status cpu_conv2d_dnnl(float *y, const float *x, const void *packed, const float *b,
                             int W, int Cin, int Cout, int r0, int r1, void *ws,
                             size_t ws_bytes, cpdit_error *err);
#endif

#ifdef __cplusplus
}
#endif
#endif
