/* cp_internal.h — pieces shared by the context-parallel attention variants (not installed).
 *
 * Every variant sizes its workspace first (the *_ws_bytes functions; `esize` is the backend's
 * activation element size be->act_size, `workers` its cpdit_backend.workers(), which sets the
 * ring's chunk size), the entry point allocates it once (backend memory, kept in the caller's
 * cp_attention_ws) and makes the whole CP group agree that allocation worked before any data
 * moves; the variants then carve their buffers from it (cp_ws_take) and never allocate.
 *
 * Activations (q, k, v, out, K/V blocks, packed all-to-all buffers) are cpdit_buf of the
 * backend's act_dtype: every offset through cpdit_buf_at, every size through cpdit_act_bytes,
 * every transfer as cpdit_comm_act_type(be->act_dtype) (cp_problem.act). The LSE is fp32
 * (float *, backend memory) in every table and travels as CPDIT_COMM_FLOAT.
 * A failure inside the local kernel does not stop the exchange (the other ranks are waiting
 * for this rank's blocks): it is recorded in cerr and reported after the exchange.
 */
#ifndef CPDIT_CP_INTERNAL_H
#define CPDIT_CP_INTERNAL_H

#include <stddef.h>
#include "lib/cp/comm.h"
#include "lib/cp/cp_attention.h"

/* Alignment of every buffer taken from a workspace, in bytes (a cache line; also enough for
 * any vector load). */
#define CP_WS_ALIGN 64

/* Message tags of the ring (below CPDIT_COMM_MPI_COLLECTIVE_TAG). */
#define CP_TAG_RING_K 11
#define CP_TAG_RING_V 12

typedef struct cp_ws {
    char *base;
    size_t cap, used; /* bytes */
} cp_ws;

/* Round a byte count up to CP_WS_ALIGN. */
static inline size_t cp_ws_round(size_t bytes)
{
    return (bytes + CP_WS_ALIGN - 1) / CP_WS_ALIGN * CP_WS_ALIGN;
}

/* Take bytes from the workspace (the caller sized it; NULL only on a sizing bug). */
static inline void *cp_ws_take(cp_ws *w, size_t bytes)
{
    size_t n = cp_ws_round(bytes);
    if (w->used + n > w->cap)
        return NULL;
    void *p = w->base + w->used;
    w->used += n;
    return p;
}

/* The per-call problem: batch, heads held by this rank in this phase, head dim, scale, the
 * backend (merge, workers) and its kernel; cerr collects the first kernel failure. */
typedef struct cp_problem {
    int B, H, D;
    float scale;
    const cpdit_backend *be;
    cpdit_comm_dtype act; /* cpdit_comm_act_type(be->act_dtype): how activations travel */
    const cpdit_attention_kernel *kernel;
    int workers; /* be->workers() */
    cpdit_error *cerr;
    double *kernel_seconds; /* accumulates the time spent in the kernel */
} cp_problem;

/* Run the kernel, recording a failure in p->cerr (the first one wins). q, out (B, Sq, p->H,
 * p->D) and k, v (B, Skv, p->H, p->D) activations, lse (B, Sq, p->H) fp32. */
void cp_local_call(const cp_problem *p, cpdit_buf *out, float *lse, const cpdit_buf *q,
                   const cpdit_buf *k, const cpdit_buf *v, int B, int Sq, int Skv);

/* Copy n rows of W fp32 values (the LSE, backend memory) between row-strided buffers; strides
 * in floats. The backend has no fp32 copy of its own, so this is its copy_rows over the same
 * bytes as sizeof(float) / act_size activation elements per float (1 for fp32, 2 for bf16):
 * copy_rows moves elements as they are, never converting. */
void cp_copy_f32_rows(const cpdit_backend *be, float *dst, size_t dst_stride, const float *src,
                      size_t src_stride, size_t n, size_t W);

/* Balanced split of H heads over n ranks: rank c gets count[c] heads starting at start[c]
 * (the first H % n ranks get one more). */
void cp_heads_split(int H, int n, int *count, int *start);

/* ---- ring (cp_ring.c) --------------------------------------------------------------------
 * Over communicator c (n ranks): rank r holds a block of len[r] tokens. q, k, v are this
 * rank's (B, len[me], H, D); out (B, len[me], H, D) and lse (B, len[me], H) receive attention
 * of the local queries over all n blocks. p->H may be 0 (then nothing happens; all ranks of c
 * must agree). */
size_t cp_ring_ws_bytes(cp_ring_mode mode, int n, const int *len, int me, int B, int H, int D,
                        size_t esize, int workers);
cpdit_status cp_ring_attend(cpdit_comm *c, cp_ring_mode mode, const int *len,
                            const cp_problem *p, cpdit_buf *out, float *lse, const cpdit_buf *q,
                            const cpdit_buf *k, const cpdit_buf *v, cp_ws *ws,
                            cpdit_error *err);

/* ---- ulysses (cp_ulysses.c) --------------------------------------------------------------
 * Over communicator u (U ranks): rank s holds len[s] tokens of all p->H heads. Tokens ->
 * heads all-to-all (rank c gets the heads of share c of all G = sum(len) group tokens), then
 * attention over those G tokens — locally when ring is NULL, else as a ring over ring (R
 * ranks, ring_len[r] = group tokens of ring rank r, ring_len[ring->rank] == G) — then
 * heads -> tokens back into out (B, len[me], H, D), lse (B, len[me], H). */
size_t cp_ulysses_ws_bytes(int U, const int *len, int me, int B, int H, int D,
                           cp_ring_mode ring_mode, int R, const int *ring_len, int ring_me,
                           size_t esize, int workers);
cpdit_status cp_ulysses_attend(cpdit_comm *u, const int *len, cpdit_comm *ring,
                               cp_ring_mode ring_mode, const int *ring_len, const cp_problem *p,
                               cpdit_buf *out, float *lse, const cpdit_buf *q,
                               const cpdit_buf *k, const cpdit_buf *v, cp_ws *ws,
                               cpdit_error *err);

/* ---- unified (cp_unified.c) --------------------------------------------------------------
 * Ulysses over g->ulysses_comm inside, ring over g->ring_comm across, for the layout. */
size_t cp_unified_ws_bytes(const cp_grid *g, cp_ring_mode mode, const cp_seq_layout *layout,
                           int B, int H, int D, size_t esize, int workers);
cpdit_status cp_unified_attend(const cp_grid *g, cp_ring_mode mode,
                               const cp_seq_layout *layout, const cp_problem *p, cpdit_buf *out,
                               float *lse, const cpdit_buf *q, const cpdit_buf *k,
                               const cpdit_buf *v, cp_ws *ws, cpdit_error *err);

#endif
