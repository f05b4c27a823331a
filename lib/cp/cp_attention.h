/* cp_attention.h — context-parallel attention: one entry point, variants chosen by a config.
 *
 * The sequence is split over the CP group of a grid (grid.h: R*U ranks); each rank passes
 * its local tokens q, k, v of shape (B, S_local, H, D) row-major, activations of the config's
 * backend (cpdit_buf of be->act_dtype: fp32 on "cpu", bf16 on "cpu-bf16" and "cuda"), where
 * S_local = layout->len[cp_rank] (cp_shard.h), and receives out (B, S_local, H, D) (same
 * dtype) and lse (B, S_local, H) fp32 for exactly those tokens in the same local order: the
 * values one rank would compute by attending over the whole sequence (unmasked
 * softmax(scale * q k^T) v, lse the natural-log log-sum-exp of the scaled scores).
 * K/V blocks and all-to-alls travel in the activation dtype (cpdit_comm_act_type), the LSE in
 * fp32. With bf16 storage every ring step's merge rounds out to bf16 once more (lse_merge
 * stores activations), so the result is within a few bf16 roundings of the single-rank one.
 *
 * Variants:
 *   RING     K/V blocks travel around all R*U ranks of the CP group; the next block is in
 *            flight (isend/irecv posted) while the current one is computed; partial results
 *            merge by LSE. ring_mode ALLGATHER instead all-gathers K/V and computes once.
 *   ULYSSES  all-to-all over the R*U ranks (tokens -> heads), local attention over the whole
 *            sequence for a share of the heads, all-to-all back (heads -> tokens).
 *   UNIFIED  Ulysses inside each ulysses group (U ranks) and Ring across groups (over the
 *            ring communicator, R ranks) on the 2D grid; ring_mode applies to the ring part.
 *            R = 1 is plain Ulysses, U = 1 plain Ring.
 *   AUTO     = UNIFIED.
 *
 * anything = 0 (the strict mode) requires: every rank holds the same number of tokens (> 0),
 * and for ULYSSES / UNIFIED the head count divides the Ulysses degree. anything = 1 (the
 * --anything flag) lifts both: uneven lengths, ranks with no tokens at all, uneven head shares
 * (6 heads over 4 ranks as 2,2,1,1; with fewer heads than ranks some ranks hold no heads and
 * only relay). Every rank of the CP group must call cp_attention with the same config,
 * layout, B, H, D and scale (checked: a mismatch is an error on all ranks, not a hang).
 */
#ifndef CPDIT_CP_ATTENTION_H
#define CPDIT_CP_ATTENTION_H

#include "kernels/backend.h"
#include "lib/core/cpdit_error.h"
#include "lib/cp/cp_shard.h"
#include "lib/cp/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cp_attention_variant {
    CP_ATTN_AUTO = 0,
    CP_ATTN_RING,
    CP_ATTN_ULYSSES,
    CP_ATTN_UNIFIED
} cp_attention_variant;

typedef enum cp_ring_mode {
    CP_RING_P2P = 0,  /* rotate K/V blocks, next block in flight */
    CP_RING_ALLGATHER /* all-gather K/V, compute once */
} cp_ring_mode;

/* The local work (kernel on each rank's share, LSE merges, workspace) goes through a backend's
 * kernel table (kernels/backend.h) and one of its attention kernels (--attention-backend). */
typedef struct cp_attention_config {
    cp_attention_variant variant;
    cp_ring_mode ring_mode;
    int anything;                         /* 1: uneven lengths / head shares (--anything) */
    const cpdit_backend *backend;         /* whose activations q, k, v, out are; NULL: the
                                             "cpu" table (host fp32 arrays through
                                             cpdit_host_buf, as callers that name none pass) */
    const cpdit_attention_kernel *kernel; /* NULL: the backend's default kernel */
} cp_attention_config;

/* What cp_attention keeps between calls: the workspace (backend memory, grown on demand) and
 * timing. Zero-initialise; one cp_attention call at a time per workspace; free the memory with
 * cp_attention_ws_release. Passing NULL to cp_attention allocates and frees per call. */
typedef struct cp_attention_ws {
    cpdit_scratch mem;
    double last_kernel_seconds; /* the last call's time in the local kernel on this rank (the
                                   rest: communication, packing, merges, waiting) */
} cp_attention_ws;

void cp_attention_ws_release(cp_attention_ws *ws);

/* Parse a variant name: "auto", "ring", "ring-allgather", "ulysses", "unified",
 * "unified-allgather" into cfg->variant and cfg->ring_mode (other fields untouched).
 * CPDIT_ERR_INPUT naming the accepted spellings otherwise. */
cpdit_status cp_attention_config_parse(const char *name, cp_attention_config *cfg,
                                       cpdit_error *err);
/* The spelling cp_attention_config_parse accepts for cfg ("ring-allgather", ...). */
const char *cp_attention_config_name(const cp_attention_config *cfg);

/* Check that the config can run on a grid with the given ring and ulysses degrees over the
 * layout with H heads, B batch, D head dim. Pure, no communication, the same verdict on every
 * rank. CPDIT_ERR_INPUT with a message naming the fix (e.g. "pass --anything ...") when not. */
cpdit_status cp_attention_validate(const cp_attention_config *cfg, int ring, int ulysses,
                                   const cp_seq_layout *layout, int B, int H, int D,
                                   cpdit_error *err);

/* The entry point (collective over g->cp). q, k, v (B, S_local, H, D) activations of cfg's
 * backend; out (B, S_local, H, D) activations and lse (B, S_local, H) fp32 are written
 * (backend memory); lse may be NULL when not wanted. q/k/v/out may be NULL when
 * S_local = 0. ws: the workspace kept for the next call, or NULL. Returns
 * CPDIT_OK; CPDIT_ERR_INPUT for configurations that cannot work (see validate) or a table
 * whose activations are neither fp32 nor bf16; or CPDIT_ERR_RUNTIME (out of memory or
 * communication failure on any rank of the group). */
cpdit_status cp_attention(const cp_attention_config *cfg, const cp_grid *g, cp_attention_ws *ws,
                          cpdit_buf *out, float *lse, const cpdit_buf *q, const cpdit_buf *k,
                          const cpdit_buf *v, const cp_seq_layout *layout, int B, int H, int D,
                          float scale, cpdit_error *err);

/* No grid: the whole sequence is on this rank (q, k, v, out (B, S, H, D) activations of cfg's
 * backend, lse (B, S, H) fp32, required); runs cfg's backend kernel (cfg NULL or its
 * backend/kernel NULL: the CPU backend's default kernel; host fp32 arrays then go in as
 * cpdit_host_buf). */
cpdit_status cp_attention_whole(const cp_attention_config *cfg, cpdit_buf *out, float *lse,
                                const cpdit_buf *q, const cpdit_buf *k, const cpdit_buf *v,
                                int B, int S, int H, int D, float scale, cpdit_error *err);

/* Attention FLOPs of the whole (unsplit) problem: 4 * B * S^2 * H * D (two matrix products,
 * multiply + add each), for rate reports. */
double cp_attention_flops(int B, long long S, int H, int D);

#ifdef __cplusplus
}
#endif
#endif
