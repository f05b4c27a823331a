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
 * Buffers, in floats (L = len[me], h = count[me]):
 *   send1 3*B*L*H*D   [dest c][q|k|v][b][l][count[c]][D]    (later recv2)
 *   recv1 3*B*G*h*D   [src s][q|k|v][b][l][h][D]            (later send2)
 *   qh, kh, vh        (B, G, h, D) each: the group sequence for this head share
 *   oh (B, G, h, D), lh (B, G, h)
 *   send2 = recv1     [dest c][out (B, len[c], h, D) | lse (B, len[c], h)]
 *   recv2 = send1     [src s][out (B, L, count[s], D) | lse (B, L, count[s])]
 * recv1 holds 3*B*G*h*D >= B*G*h*(D+1) and send1 3*B*L*H*D >= B*L*H*(D+1), so the second
 * exchange reuses the first one's buffers.
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

size_t cp_ulysses_ws_bytes(int U, const int *len, int me, int B, int H, int D,
                           cp_ring_mode ring_mode, int R, const int *ring_len, int ring_me,
                           int workers)
{
    int count[U > 0 ? U : 1], start[U > 0 ? U : 1];
    cp_heads_split(H, U, count, start);
    const size_t h = (size_t)count[me];
    const size_t L = (size_t)len[me], G = total_of(U, len);
    const size_t f = sizeof(float);
    size_t bytes = cp_ws_round(3 * (size_t)B * L * H * D * f)  /* send1 / recv2 */
                   + cp_ws_round(3 * (size_t)B * G * h * D * f) /* recv1 / send2 */
                   + 4 * cp_ws_round((size_t)B * G * h * D * f) /* qh kh vh oh */
                   + cp_ws_round((size_t)B * G * h * f);        /* lh */
    if (ring_len)
        bytes += cp_ring_ws_bytes(ring_mode, R, ring_len, ring_me, B, (int)h, D, workers);
    return bytes;
}

/* Rows of W floats: copy n rows with strides (in floats) from src to dst (backend memory). */
static void copy_rows(const cpdit_backend *be, float *dst, size_t dst_stride, const float *src,
                      size_t src_stride, size_t n, size_t W)
{
    if (W == 0 || n == 0)
        return;
    be->copy_rows(dst, (int)dst_stride, src, (int)src_stride, n, (int)W);
}

cpdit_status cp_ulysses_attend(cpdit_comm *u, const int *len, cpdit_comm *ring,
                               cp_ring_mode ring_mode, const int *ring_len, const cp_problem *p,
                               float *out, float *lse, const float *q, const float *k,
                               const float *v, cp_ws *ws, cpdit_error *err)
{
    const int U = u->size, me = u->rank, B = p->B, H = p->H, D = p->D;
    const size_t L = (size_t)len[me], G = total_of(U, len);
    const size_t f = sizeof(float);
    const cpdit_backend *be = p->be;
    int count[U], start[U]; /* host: head shares; the workspace is backend memory */
    size_t sc[U], sd[U], rc[U], rd[U];
    cp_heads_split(H, U, count, start);
    const size_t h = (size_t)count[me];
    float *send1 = cp_ws_take(ws, 3 * (size_t)B * L * H * D * f);
    float *recv1 = cp_ws_take(ws, 3 * (size_t)B * G * h * D * f);
    float *qh = cp_ws_take(ws, (size_t)B * G * h * D * f);
    float *kh = cp_ws_take(ws, (size_t)B * G * h * D * f);
    float *vh = cp_ws_take(ws, (size_t)B * G * h * D * f);
    float *oh = cp_ws_take(ws, (size_t)B * G * h * D * f);
    float *lh = cp_ws_take(ws, (size_t)B * G * h * f);
    if (!lh && ws->cap > 0) /* cap 0: nothing to hold on this rank (all sizes are 0) */
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, ULY_WHERE, "workspace too small");

    /* ---- tokens -> heads: pack [dest c][q|k|v][b][l][count[c] heads][D] */
    const float *in[3] = {q, k, v};
    const size_t tokrow = (size_t)H * D; /* floats per token with all heads */
    size_t off = 0;
    for (int c = 0; c < U; c++) {
        const size_t part = (size_t)B * L * count[c] * D; /* one of q, k, v */
        sd[c] = off;
        sc[c] = 3 * part;
        for (int i = 0; i < 3 && L > 0; i++)
            copy_rows(be, send1 + off + i * part, (size_t)count[c] * D,
                      in[i] + (size_t)start[c] * D, tokrow, (size_t)B * L,
                      (size_t)count[c] * D);
        off += sc[c];
    }
    off = 0;
    for (int s = 0; s < U; s++) {
        rd[s] = off;
        rc[s] = 3 * (size_t)B * len[s] * h * D;
        off += rc[s];
    }
    if (cpdit_comm_alltoallv(u, send1, sc, sd, recv1, rc, rd, err))
        return CPDIT_ERR_RUNTIME;

    /* unpack into (B, G, h, D): source s's tokens go after those of ranks < s */
    float *hv[3] = {qh, kh, vh};
    const size_t hrow = h * D; /* floats per token for this head share */
    size_t tok0 = 0;
    for (int s = 0; s < U && h > 0; s++) {
        const size_t part = (size_t)B * len[s] * hrow;
        for (int i = 0; i < 3; i++)
            copy_rows(be, hv[i] + tok0 * hrow, G * hrow, recv1 + rd[s] + i * part,
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

    /* ---- heads -> tokens: pack [dest c][out (B, len[c], h, D) | lse (B, len[c], h)] */
    float *send2 = recv1, *recv2 = send1;
    off = 0;
    tok0 = 0;
    for (int c = 0; c < U; c++) {
        const size_t lc = (size_t)len[c];
        sd[c] = off;
        sc[c] = (size_t)B * lc * h * (D + 1);
        if (h > 0) {
            copy_rows(be, send2 + off, lc * hrow, oh + tok0 * hrow, G * hrow, (size_t)B,
                      lc * hrow);
            copy_rows(be, send2 + off + (size_t)B * lc * hrow, lc * h, lh + tok0 * h, G * h,
                      (size_t)B, lc * h);
        }
        off += sc[c];
        tok0 += lc;
    }
    off = 0;
    for (int s = 0; s < U; s++) {
        rd[s] = off;
        rc[s] = (size_t)B * L * count[s] * (D + 1);
        off += rc[s];
    }
    if (cpdit_comm_alltoallv(u, send2, sc, sd, recv2, rc, rd, err))
        return CPDIT_ERR_RUNTIME;

    /* unpack: out (B, L, H, D) heads start[s].. from s; lse (B, L, H) likewise */
    for (int s = 0; s < U && L > 0; s++) {
        const size_t hs = (size_t)count[s];
        if (hs == 0)
            continue;
        const float *seg = recv2 + rd[s];
        copy_rows(be, out + (size_t)start[s] * D, tokrow, seg, hs * D, (size_t)B * L, hs * D);
        copy_rows(be, lse + start[s], (size_t)H, seg + (size_t)B * L * hs * D, hs,
                  (size_t)B * L, hs);
    }
    return CPDIT_OK;
}
