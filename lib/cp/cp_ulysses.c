/* cp_ulysses.c — Ulysses attention: two all-to-alls around an attention over whole sequences.
 *
 * U ranks; rank s holds len[s] tokens (any lengths, 0 included) of all H heads. Heads are
 * split into shares, count[c] heads from start[c] for rank c (uneven when H % U != 0, even
 * zero when H < U). First all-to-all (tokens -> heads): rank c receives, from every rank s,
 * s's tokens restricted to c's heads, so it holds q, k, v of all G = sum(len) group tokens for
 * its head share. Attention over them (locally, or as a ring over other groups for Unified).
 * Second all-to-all (heads -> tokens) returns every rank's tokens with all heads, output and
 * LSE together in one exchange.
 *
 * Buffers (L = len[me], h = count[me]; "e" activation elements of the backend's act_dtype,
 * "f" fp32):
 *   send1 3*B*L*H*D e   [dest c][q|k|v][b][l][count[c]][D]    (later recv2)
 *   recv1 3*B*G*h*D e   [src s][q|k|v][b][l][h][D]            (later send2)
 *   qh, kh, vh          (B, G, h, D) e each: the group sequence for this head share
 *   oh (B, G, h, D) e, lh (B, G, h) f
 *   send2 = recv1       out part [dest c](B, len[c], h, D) e, then (aligned) lse part
 *                       [dest c](B, len[c], h) f
 *   recv2 = send1       out part [src s](B, L, count[s], D) e, then lse part
 *                       [src s](B, L, count[s]) f
 * The second exchange is two all-to-alls, the output in the activation type and the LSE in
 * fp32 (one exchange cannot carry both when activations are bf16). send1 and recv1 are sized
 * for the larger of their two uses (pair_bytes).
 */
#include "lib/cp/cp_internal.h"

#include <string.h>

#define ULY_WHERE "cp/ulysses"

/* Sum of len[0..n). */
static size_t total_of(int n, const int *len)
{
    size_t s = 0;
    for (int i = 0; i < n; i++)
        s += (size_t)len[i];
    return s;
}

/* Bytes of a buffer that holds first 3*tok*D activations (q|k|v), later tok*D activations
 * (out) followed, from the next aligned offset, by tok fp32 values (lse); tok = tokens x
 * heads. */
static size_t pair_bytes(size_t tok, size_t D, size_t esize)
{
    const size_t qkv = 3 * tok * D * esize;
    const size_t out_lse = cp_ws_round(tok * D * esize) + tok * sizeof(float);
    return qkv > out_lse ? qkv : out_lse;
}

/* The LSE part of a pair_bytes buffer at base holding tok*D activations of esize bytes. */
static float *lse_part(void *base, size_t tok, size_t D, size_t esize)
{
    return (float *)(void *)((char *)base + cp_ws_round(tok * D * esize));
}

size_t cp_ulysses_ws_bytes(int U, const int *len, int me, int B, int H, int D,
                           cp_ring_mode ring_mode, int R, const int *ring_len, int ring_me,
                           size_t esize, int workers)
{
    int count[U > 0 ? U : 1], start[U > 0 ? U : 1];
    cp_heads_split(H, U, count, start);
    const size_t h = (size_t)count[me];
    const size_t L = (size_t)len[me], G = total_of(U, len);
    size_t bytes = cp_ws_round(pair_bytes((size_t)B * L * H, (size_t)D, esize)) /* send1 */
                   + cp_ws_round(pair_bytes((size_t)B * G * h, (size_t)D, esize)) /* recv1 */
                   + 4 * cp_ws_round((size_t)B * G * h * D * esize) /* qh kh vh oh */
                   + cp_ws_round((size_t)B * G * h * sizeof(float)); /* lh */
    if (ring_len)
        bytes += cp_ring_ws_bytes(ring_mode, R, ring_len, ring_me, B, (int)h, D, esize,
                                  workers);
    return bytes;
}

/* Rows of W activations: copy n rows with strides (in elements) from src to dst (backend
 * memory). */
static void copy_rows(const cpdit_backend *be, cpdit_buf *dst, size_t dst_stride,
                      const cpdit_buf *src, size_t src_stride, size_t n, size_t W)
{
    if (W == 0 || n == 0)
        return;
    be->copy_rows(dst, (int)dst_stride, src, (int)src_stride, n, (int)W);
}

cpdit_status cp_ulysses_attend(cpdit_comm *u, const int *len, cpdit_comm *ring,
                               cp_ring_mode ring_mode, const int *ring_len, const cp_problem *p,
                               cpdit_buf *out, float *lse, const cpdit_buf *q,
                               const cpdit_buf *k, const cpdit_buf *v, cp_ws *ws,
                               cpdit_error *err)
{
    const int U = u->size, me = u->rank, B = p->B, H = p->H, D = p->D;
    const size_t L = (size_t)len[me], G = total_of(U, len);
    const cpdit_backend *be = p->be;
    const size_t es = be->act_size;
    int count[U], start[U]; /* host: head shares; the workspace is backend memory */
    size_t sc[U], sd[U], rc[U], rd[U], scl[U], sdl[U], rcl[U], rdl[U];
    cp_heads_split(H, U, count, start);
    const size_t h = (size_t)count[me];
    void *s1 = cp_ws_take(ws, pair_bytes((size_t)B * L * H, (size_t)D, es));
    void *r1 = cp_ws_take(ws, pair_bytes((size_t)B * G * h, (size_t)D, es));
    cpdit_buf *send1 = s1, *recv1 = r1;
    cpdit_buf *qh = cp_ws_take(ws, cpdit_act_bytes(be, (size_t)B * G * h * D));
    cpdit_buf *kh = cp_ws_take(ws, cpdit_act_bytes(be, (size_t)B * G * h * D));
    cpdit_buf *vh = cp_ws_take(ws, cpdit_act_bytes(be, (size_t)B * G * h * D));
    cpdit_buf *oh = cp_ws_take(ws, cpdit_act_bytes(be, (size_t)B * G * h * D));
    float *lh = cp_ws_take(ws, (size_t)B * G * h * sizeof(float));
    if (!lh && ws->cap > 0) /* cap 0: nothing to hold on this rank (all sizes are 0) */
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, ULY_WHERE, "workspace too small");

    /* ---- tokens -> heads: pack [dest c][q|k|v][b][l][count[c] heads][D] */
    const cpdit_buf *in[3] = {q, k, v};
    const size_t tokrow = (size_t)H * D; /* elements per token with all heads */
    size_t off = 0;
    for (int c = 0; c < U; c++) {
        const size_t part = (size_t)B * L * count[c] * D; /* one of q, k, v */
        sd[c] = off;
        sc[c] = 3 * part;
        for (int i = 0; i < 3 && L > 0; i++)
            copy_rows(be, cpdit_buf_at(be, send1, (ptrdiff_t)(off + i * part)),
                      (size_t)count[c] * D,
                      cpdit_buf_at(be, in[i], (ptrdiff_t)((size_t)start[c] * D)), tokrow,
                      (size_t)B * L, (size_t)count[c] * D);
        off += sc[c];
    }
    off = 0;
    for (int s = 0; s < U; s++) {
        rd[s] = off;
        rc[s] = 3 * (size_t)B * len[s] * h * D;
        off += rc[s];
    }
    if (cpdit_comm_alltoallv(u, p->act, send1, sc, sd, recv1, rc, rd, err))
        return CPDIT_ERR_RUNTIME;

    /* unpack into (B, G, h, D): source s's tokens go after those of ranks < s */
    cpdit_buf *hv[3] = {qh, kh, vh};
    const size_t hrow = h * D; /* elements per token for this head share */
    size_t tok0 = 0;
    for (int s = 0; s < U && h > 0; s++) {
        const size_t part = (size_t)B * len[s] * hrow;
        for (int i = 0; i < 3; i++)
            copy_rows(be, cpdit_buf_at(be, hv[i], (ptrdiff_t)(tok0 * hrow)), G * hrow,
                      cpdit_buf_at(be, recv1, (ptrdiff_t)(rd[s] + i * part)),
                      (size_t)len[s] * hrow, (size_t)B, (size_t)len[s] * hrow);
        tok0 += (size_t)len[s];
    }

    /* ---- attention over the group's tokens for this head share */
    cp_problem ph = *p;
    ph.H = (int)h;
    if (ring) {
        if (cp_ring_attend(ring, ring_mode, ring_len, &ph, oh, lh, qh, kh, vh, ws, err))
            return CPDIT_ERR_RUNTIME;
    } else if (h > 0 && G > 0) {
        cp_local_call(&ph, oh, lh, qh, kh, vh, B, (int)G, (int)G);
    }

    /* ---- heads -> tokens: pack out [dest c](B, len[c], h, D), lse [dest c](B, len[c], h) */
    cpdit_buf *send2 = recv1, *recv2 = send1;
    float *send2_lse = lse_part(r1, (size_t)B * G * h, (size_t)D, es);
    float *recv2_lse = lse_part(s1, (size_t)B * L * H, (size_t)D, es);
    off = 0;
    size_t offl = 0;
    tok0 = 0;
    for (int c = 0; c < U; c++) {
        const size_t lc = (size_t)len[c];
        sd[c] = off;
        sc[c] = (size_t)B * lc * hrow;
        sdl[c] = offl;
        scl[c] = (size_t)B * lc * h;
        if (h > 0) {
            copy_rows(be, cpdit_buf_at(be, send2, (ptrdiff_t)off), lc * hrow,
                      cpdit_buf_at(be, oh, (ptrdiff_t)(tok0 * hrow)), G * hrow, (size_t)B,
                      lc * hrow);
            cp_copy_f32_rows(be, send2_lse + offl, lc * h, lh + tok0 * h, G * h, (size_t)B,
                             lc * h);
        }
        off += sc[c];
        offl += scl[c];
        tok0 += lc;
    }
    off = 0;
    offl = 0;
    for (int s = 0; s < U; s++) {
        rd[s] = off;
        rc[s] = (size_t)B * L * count[s] * D;
        rdl[s] = offl;
        rcl[s] = (size_t)B * L * count[s];
        off += rc[s];
        offl += rcl[s];
    }
    if (cpdit_comm_alltoallv(u, p->act, send2, sc, sd, recv2, rc, rd, err) ||
        cpdit_comm_alltoallv(u, CPDIT_COMM_FLOAT, send2_lse, scl, sdl, recv2_lse, rcl, rdl,
                             err))
        return CPDIT_ERR_RUNTIME;

    /* unpack: out (B, L, H, D) heads start[s].. from s; lse (B, L, H) likewise */
    for (int s = 0; s < U && L > 0; s++) {
        const size_t hs = (size_t)count[s];
        if (hs == 0)
            continue;
        copy_rows(be, cpdit_buf_at(be, out, (ptrdiff_t)((size_t)start[s] * D)), tokrow,
                  cpdit_buf_at(be, recv2, (ptrdiff_t)rd[s]), hs * D, (size_t)B * L, hs * D);
        cp_copy_f32_rows(be, lse + start[s], (size_t)H, recv2_lse + rdl[s], hs, (size_t)B * L,
                         hs);
    }
    return CPDIT_OK;
}
