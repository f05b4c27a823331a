/* cp_ring.c — ring attention: K/V blocks travel around the ranks of a communicator and each
 * rank merges the partial attention of its queries over every block by LSE.
 *
 * P2P mode, n ranks, this rank me, step t = 0..n-1: the block held is the one that started
 * on rank (me - t) mod n. Before computing on it, the rank posts the receive of the next block
 * (from me-1) and the send of the current one (to me+1), so the next block is in flight while
 * the current one is computed. The computation runs in chunks of query rows and tests the
 * transfers between chunks, which lets MPI progress them during the computation. Blocks may
 * have any length, 0 included (uneven "anything" layouts): an empty block is relayed but not
 * computed; a rank with no queries still relays.
 *
 * ALLGATHER mode: all-gather K and V (uneven counts), then one kernel call over the whole
 * sequence. Simple; no overlap; for comparison.
 *
 * K/V blocks, out and the chunk's partial result are activations (cpdit_buf, p->be's
 * act_dtype, offsets in elements via cpdit_buf_at) and travel as p->act; the LSE is fp32.
 * On a table with an fp32 accumulator (cpdit_backend_f32_accumulator: bf16 storage) P2P mode
 * keeps the running output in fp32 (workspace), merges each block into it with lse_merge_f32
 * and rounds it into out once at the end: merging in bf16 rounded the running output at every
 * block, an error that grew with the ring size (cpu-bf16 against fp32, 2 / 4 / 6 / 8 blocks:
 * 7.1e-3 / 1.04e-2 / 1.16e-2 / 1.12e-2 of max|ref|; now 7.1e-3 / 8.5e-3 / 9.7e-3 / 9.6e-3, the
 * rest being the inputs' rounding and each block's partial output, which the kernel stores).
 * fp32 tables merge into out in place, as before.
 */
#include "lib/cp/cp_internal.h"

#include <math.h>
#include <string.h>


/* The kernel runs on chunks of about 1/CP_RING_POLLS_PER_BLOCK of a block's query rows,
 * testing the in-flight transfers between chunks. Chunks are whole multiples of
 * CP_RING_CHUNK_QUANTUM rows, about the CPU kernel's largest query tile (ATTN_BLOCK_Q in
 * kernels/cpu/attention_cpu.c), so chunking does not shrink its block products. */
#define CP_RING_POLLS_PER_BLOCK 4
#define CP_RING_CHUNK_QUANTUM 256
/* A chunk must still give each kernel thread this many (head, query tile) tasks, else the
 * kernel shrinks its tiles: with many threads, chunks grow (fewer polls, full-size tiles). */
#define CP_RING_TASKS_PER_THREAD 4

/* The ring's four transfers of one step. */
#define CP_RING_NREQ 4

/* Query rows per kernel call for a block of Lq local queries with H heads (>= 1), on a
 * backend running `threads` tasks at once (cpdit_backend.workers). */
static int chunk_rows(int Lq, int H, int threads)
{
    const int hh = H > 0 ? H : 1;
    const int tiles = (CP_RING_TASKS_PER_THREAD * threads + hh - 1) / hh; /* per chunk */
    int r = (Lq + CP_RING_POLLS_PER_BLOCK - 1) / CP_RING_POLLS_PER_BLOCK;
    r = (r + CP_RING_CHUNK_QUANTUM - 1) / CP_RING_CHUNK_QUANTUM * CP_RING_CHUNK_QUANTUM;
    if (r < tiles * CP_RING_CHUNK_QUANTUM)
        r = tiles * CP_RING_CHUNK_QUANTUM;
    return r > Lq ? (Lq > 0 ? Lq : 1) : r;
}

static int max_len(int n, const int *len)
{
    int m = 0;
    for (int r = 0; r < n; r++)
        if (len[r] > m)
            m = len[r];
    return m;
}

size_t cp_ring_ws_bytes(cp_ring_mode mode, int n, const int *len, int me, int B, int H, int D,
                        size_t esize, int workers)
{
    size_t row = (size_t)H * D;
    if (H == 0 || n == 1)
        return 0;
    if (mode == CP_RING_ALLGATHER) {
        size_t S = 0;
        for (int r = 0; r < n; r++)
            S += (size_t)len[r];
        size_t full = (size_t)B * S * row * esize; /* kf, vf, stage */
        return 3 * cp_ws_round(full);
    }
    size_t blk = (size_t)B * (size_t)max_len(n, len) * row * esize; /* kb[2], vb[2] */
    size_t cr = (size_t)chunk_rows(len[me], H, workers);
    /* the fp32 running output of a table storing less than fp32 (the table may lack the
     * entries: the bytes are then unused) */
    size_t acc = esize < sizeof(float) ? (size_t)B * len[me] * row * sizeof(float) : 0;
    return 4 * cp_ws_round(blk) + cp_ws_round(cr * row * esize) /* tout */ +
           cp_ws_round(cr * (size_t)H * sizeof(float)) /* tlse */ + cp_ws_round(acc);
}

/* Test every active request (lets the transfers progress). */
static cpdit_status poll(cpdit_comm *c, cpdit_comm_request *reqs, cpdit_error *err)
{
    for (int i = 0; i < CP_RING_NREQ; i++) {
        int done = 0;
        if (reqs[i].impl && cpdit_comm_test(c, &reqs[i], &done, err))
            return CPDIT_ERR_RUNTIME;
    }
    return CPDIT_OK;
}

/* Attention of the local queries q (B, Lq, H, D) over one K/V block (B, Lk, H, D): written
 * into out/lse when first, else merged into them through tout/tlse (chunk-sized). With acc
 * (B, Lq, H, D) fp32 (backend memory), the running output is acc instead of out: the first
 * block is widened into it, later ones merged with lse_merge_f32; out is not written. */
static cpdit_status compute_block(cpdit_comm *c, cpdit_comm_request *reqs, const cp_problem *p,
                                  int first, cpdit_buf *out, float *acc, float *lse,
                                  const cpdit_buf *q, const cpdit_buf *kb, const cpdit_buf *vb,
                                  int Lq, int Lk, cpdit_buf *tout, float *tlse, cpdit_error *err)
{
    const cpdit_backend *be = p->be;
    const size_t row = (size_t)p->H * p->D;
    const int cr = chunk_rows(Lq, p->H, p->workers);
    for (int b = 0; b < p->B; b++) {
        const cpdit_buf *kbb = cpdit_buf_at(be, kb, (ptrdiff_t)((size_t)b * Lk * row));
        const cpdit_buf *vbb = cpdit_buf_at(be, vb, (ptrdiff_t)((size_t)b * Lk * row));
        for (int s0 = 0; s0 < Lq; s0 += cr) {
            int rows = Lq - s0 < cr ? Lq - s0 : cr;
            size_t tok = (size_t)b * Lq + (size_t)s0;
            cpdit_buf *op = cpdit_buf_at(be, out, (ptrdiff_t)(tok * row));
            float *lp = lse + tok * (size_t)p->H;
            const cpdit_buf *qp = cpdit_buf_at(be, q, (ptrdiff_t)(tok * row));
            if (acc) {
                float *ap = acc + tok * row;
                cp_local_call(p, tout, first ? lp : tlse, qp, kbb, vbb, 1, rows, Lk);
                if (first)
                    be->act_to_f32(ap, tout, (size_t)rows * row);
                else
                    be->lse_merge_f32(ap, lp, tout, tlse, (size_t)rows * p->H, p->D);
            } else if (first) {
                cp_local_call(p, op, lp, qp, kbb, vbb, 1, rows, Lk);
            } else {
                cp_local_call(p, tout, tlse, qp, kbb, vbb, 1, rows, Lk);
                be->lse_merge(op, lp, tout, tlse, (size_t)rows * p->H, p->D);
            }
            if (poll(c, reqs, err))
                return CPDIT_ERR_RUNTIME;
        }
    }
    return CPDIT_OK;
}

static cpdit_status ring_p2p(cpdit_comm *c, const int *len, const cp_problem *p,
                             cpdit_buf *out, float *lse, const cpdit_buf *q, const cpdit_buf *k,
                             const cpdit_buf *v, cp_ws *ws, cpdit_error *err)
{
    const cpdit_backend *be = p->be;
    const int n = c->size, me = c->rank;
    const int next = (me + 1) % n, prev = (me - 1 + n) % n;
    const int Lq = len[me];
    const size_t row = (size_t)p->H * p->D;
    const size_t blk_max = (size_t)p->B * (size_t)max_len(n, len) * row;
    const int cr = chunk_rows(Lq, p->H, p->workers);
    cpdit_buf *kb[2], *vb[2];
    for (int i = 0; i < 2; i++) {
        kb[i] = cp_ws_take(ws, cpdit_act_bytes(be, blk_max));
        vb[i] = cp_ws_take(ws, cpdit_act_bytes(be, blk_max));
    }
    cpdit_buf *tout = cp_ws_take(ws, cpdit_act_bytes(be, (size_t)cr * row));
    float *tlse = cp_ws_take(ws, (size_t)cr * p->H * sizeof(float));
    float *acc = NULL; /* the fp32 running output (B, Lq, H, D), tables storing bf16 */
    if (cpdit_backend_f32_accumulator(be) && Lq > 0) {
        acc = cp_ws_take(ws, (size_t)p->B * Lq * row * sizeof(float));
        if (!acc)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "cp/ring", "workspace too small");
    }
    if (!kb[1] || !vb[1] || !tlse)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "cp/ring", "workspace too small");

    const cpdit_buf *kc = k, *vc = v; /* the block held at this step */
    int have = 0;                 /* out/lse hold a partial result */
    for (int t = 0; t < n; t++) {
        const int src = ((me - t) % n + n) % n;
        const size_t cur = (size_t)p->B * len[src] * row;
        cpdit_comm_request reqs[CP_RING_NREQ] = {CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT,
                                                 CPDIT_COMM_REQUEST_INIT,
                                                 CPDIT_COMM_REQUEST_INIT};
        cpdit_buf *kn = kb[t % 2], *vn = vb[t % 2];
        if (t < n - 1) {
            const int nsrc = ((me - t - 1) % n + n) % n;
            const size_t nxt = (size_t)p->B * len[nsrc] * row;
            if (cpdit_comm_irecv(c, p->act, kn, nxt, prev, CP_TAG_RING_K, &reqs[0], err) ||
                cpdit_comm_irecv(c, p->act, vn, nxt, prev, CP_TAG_RING_V, &reqs[1], err) ||
                cpdit_comm_isend(c, p->act, kc, cur, next, CP_TAG_RING_K, &reqs[2], err) ||
                cpdit_comm_isend(c, p->act, vc, cur, next, CP_TAG_RING_V, &reqs[3], err))
                return CPDIT_ERR_RUNTIME;
        }
        if (Lq > 0 && len[src] > 0) {
            if (compute_block(c, reqs, p, !have, out, acc, lse, q, kc, vc, Lq, len[src], tout,
                              tlse, err))
                return CPDIT_ERR_RUNTIME;
            have = 1;
        }
        for (int i = 0; i < CP_RING_NREQ; i++)
            if (cpdit_comm_wait(c, &reqs[i], err))
                return CPDIT_ERR_RUNTIME;
        kc = kn;
        vc = vn;
    }
    if (acc && have)
        be->act_from_f32(out, acc, (size_t)p->B * Lq * row); /* the one rounding */
    return CPDIT_OK;
}

static cpdit_status ring_allgather(cpdit_comm *c, const int *len, const cp_problem *p,
                                   cpdit_buf *out, float *lse, const cpdit_buf *q,
                                   const cpdit_buf *k, const cpdit_buf *v, cp_ws *ws,
                                   cpdit_error *err)
{
    const cpdit_backend *be = p->be;
    const int n = c->size, me = c->rank, B = p->B;
    const size_t row = (size_t)p->H * p->D;
    size_t S = 0;
    for (int r = 0; r < n; r++)
        S += (size_t)len[r];
    size_t counts[n], displs[n]; /* host; the workspace is backend memory */
    cpdit_buf *kf = cp_ws_take(ws, cpdit_act_bytes(be, (size_t)B * S * row));
    cpdit_buf *vf = cp_ws_take(ws, cpdit_act_bytes(be, (size_t)B * S * row));
    cpdit_buf *stage = cp_ws_take(ws, cpdit_act_bytes(be, (size_t)B * S * row));
    if (!kf || !vf || !stage)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "cp/ring", "workspace too small");
    size_t off = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = (size_t)B * len[r] * row;
        displs[r] = off;
        off += counts[r];
    }
    /* rank blocks arrive as [rank][b][token]; attention wants [b][rank, token] */
    const cpdit_buf *src[2] = {k, v};
    cpdit_buf *dst[2] = {kf, vf};
    for (int i = 0; i < 2; i++) {
        cpdit_buf *land = B == 1 ? dst[i] : stage; /* B = 1: both orders agree */
        if (cpdit_comm_allgatherv(c, p->act, src[i], counts[me], land, counts, displs, err))
            return CPDIT_ERR_RUNTIME;
        if (B == 1)
            continue;
        size_t tok0 = 0;
        for (int r = 0; r < n; r++) {
            const size_t blk = (size_t)len[r] * row; /* one item's block of rank r */
            if (blk > 0)
                be->copy_rows(cpdit_buf_at(be, dst[i], (ptrdiff_t)(tok0 * row)), (int)(S * row),
                              cpdit_buf_at(be, stage, (ptrdiff_t)displs[r]), (int)blk,
                              (size_t)B, (int)blk);
            tok0 += (size_t)len[r];
        }
    }
    if (len[me] > 0)
        cp_local_call(p, out, lse, q, kf, vf, B, len[me], (int)S);
    return CPDIT_OK;
}

cpdit_status cp_ring_attend(cpdit_comm *c, cp_ring_mode mode, const int *len,
                            const cp_problem *p, cpdit_buf *out, float *lse, const cpdit_buf *q,
                            const cpdit_buf *k, const cpdit_buf *v, cp_ws *ws,
                            cpdit_error *err)
{
    if (p->H == 0)
        return CPDIT_OK; /* this head share is empty on every rank of c */
    if (c->size == 1) {
        if (len[0] > 0)
            cp_local_call(p, out, lse, q, k, v, p->B, len[0], len[0]);
        return CPDIT_OK;
    }
    if (mode == CP_RING_ALLGATHER)
        return ring_allgather(c, len, p, out, lse, q, k, v, ws, err);
    return ring_p2p(c, len, p, out, lse, q, k, v, ws, err);
}
