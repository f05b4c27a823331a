/* cp_unified.c — Unified attention on the 2D grid: Ulysses inside each group of U neighbouring
 * ranks, Ring across the R groups.
 *
 * CP rank (r, u) = r*U + u holds layout->len[r*U + u] tokens. Inside ring group r the Ulysses
 * all-to-all gives rank (r, u) head share u of the group's G_r = sum_u len[r*U + u] tokens;
 * the ranks with the same u in all groups then hold the same head share of different token
 * blocks (G_0 .. G_{R-1}) and run ring attention over the ring communicator; the second
 * all-to-all returns the results to the token owners. Any lengths (0 included) and any head
 * split work: ring peers share u, so they always agree on the head count (0 included).
 * U = 1 skips the all-to-alls (plain ring over the ring communicator); R = 1 is plain Ulysses.
 */
#include "lib/cp/cp_internal.h"

/* len_u[u] = tokens of ulysses rank u in this rank's ring group; ring_len[r] = G_r. */
static void group_lengths(const cp_grid *g, const cp_seq_layout *layout, int *len_u,
                          int *ring_len)
{
    const int R = g->ring, U = g->ulysses;
    for (int r = 0; r < R; r++) {
        ring_len[r] = 0;
        for (int u = 0; u < U; u++)
            ring_len[r] += layout->len[r * U + u];
    }
    for (int u = 0; u < U; u++)
        len_u[u] = layout->len[g->ring_index * U + u];
}

size_t cp_unified_ws_bytes(const cp_grid *g, cp_ring_mode mode, const cp_seq_layout *layout,
                           int B, int H, int D, size_t esize, int workers)
{
    const int R = g->ring, U = g->ulysses;
    int len_u[U], ring_len[R];
    group_lengths(g, layout, len_u, ring_len);
    if (U == 1)
        return cp_ring_ws_bytes(mode, R, ring_len, g->ring_index, B, H, D, esize, workers);
    return cp_ulysses_ws_bytes(U, len_u, g->ulysses_index, B, H, D, mode, R,
                               R > 1 ? ring_len : NULL, g->ring_index, esize, workers);
}

cpdit_status cp_unified_attend(const cp_grid *g, cp_ring_mode mode,
                               const cp_seq_layout *layout, const cp_problem *p, cpdit_buf *out,
                               float *lse, const cpdit_buf *q, const cpdit_buf *k,
                               const cpdit_buf *v, cp_ws *ws, cpdit_error *err)
{
    const int R = g->ring, U = g->ulysses;
    int len_u[U], ring_len[R];
    group_lengths(g, layout, len_u, ring_len);
    if (U == 1)
        return cp_ring_attend(g->ring_comm, mode, ring_len, p, out, lse, q, k, v, ws, err);
    return cp_ulysses_attend(g->ulysses_comm, len_u, R > 1 ? g->ring_comm : NULL, mode,
                             R > 1 ? ring_len : NULL, p, out, lse, q, k, v, ws, err);
}
