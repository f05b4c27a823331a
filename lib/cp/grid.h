/* grid.h — the process grid: world = dp groups x (ring x ulysses) context-parallel groups.
 *
 * Rank layout (DESIGN.md):  rank = dp_index*(R*U) + ring_index*U + ulysses_index
 * so Ulysses peers are neighbouring ranks (same node), ring peers are strided by U, and each
 * data-parallel (dp) group is one contiguous block of R*U ranks: the context-parallel (CP)
 * group that splits one sequence. Within it, cp_rank = ring_index*U + ulysses_index.
 *
 * Sub-communicators, all over MPI today (cpdit_comm, comm.h):
 *   cp       R*U ranks with the same dp_index,               rank = cp_rank
 *   ring     R   ranks with the same dp_index and ulysses_index, rank = ring_index
 *   ulysses  U   ranks with the same dp_index and ring_index,    rank = ulysses_index
 *   dp       dp  ranks with the same cp_rank,                rank = dp_index
 */
#ifndef CPDIT_GRID_H
#define CPDIT_GRID_H

#include <mpi.h>
#include "lib/cp/comm.h"
#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_grid {
    int world_rank, world_size;
    int dp, ring, ulysses; /* degrees; dp * ring * ulysses == world_size */
    int dp_index, ring_index, ulysses_index;
    int cp_rank, cp_size; /* cp_size = ring * ulysses */
    cpdit_comm *cp;
    cpdit_comm *ring_comm;
    cpdit_comm *ulysses_comm;
    cpdit_comm *dp_comm;
    /* Scratch memory that cp_attention keeps between calls on this grid (grown on demand,
     * freed with the grid), so repeated calls do not fault in fresh pages every time. One
     * cp_attention call at a time per grid. */
    struct cp_grid_scratch *scratch;
    /* Seconds the last cp_attention call on this grid spent in the local attention kernel on
     * this rank (the rest of the call: communication, packing, merges, waiting). */
    double last_kernel_seconds;
} cp_grid;

/* Check degrees against a world of world_size ranks and resolve dp = 0 ("the rest": world_size
 * / (ring*ulysses)). ring and ulysses must be >= 1, dp >= 0. On success *dp_out holds the
 * resolved dp degree. Errors (CPDIT_ERR_INPUT, where = "grid") say what to change, e.g.
 * "ring 3 x ulysses 2 = 6 does not divide 8 ranks; use a ring x ulysses product that divides
 * 8 (1, 2, 4, 8) or run on a multiple of 6 ranks". Pure: no MPI calls. */
cpdit_status cp_grid_resolve(int world_size, int dp, int ring, int ulysses, int *dp_out,
                             cpdit_error *err);

/* Coordinates of a world rank on a grid with the given ring and ulysses degrees. */
void cp_grid_coords(int world_rank, int ring, int ulysses, int *dp_index, int *ring_index,
                    int *ulysses_index);
/* The world rank at the given coordinates (inverse of cp_grid_coords). */
int cp_grid_rank_of(int dp_index, int ring_index, int ulysses_index, int ring, int ulysses);

/* Build the grid over world (collective over world: every rank must call it with the same
 * degrees). The grid's communicators are new; world itself is not kept. On failure *out is
 * NULL and err says why (bad degrees: CPDIT_ERR_INPUT; MPI failure: CPDIT_ERR_RUNTIME). */
cpdit_status cp_grid_create(MPI_Comm world, int dp, int ring, int ulysses, cp_grid **out,
                            cpdit_error *err);

/* Free the grid and its communicators (collective over the grid's world). NULL is fine. */
void cp_grid_destroy(cp_grid *g);

/* The grid's scratch block (see cp_grid.scratch) of at least bytes bytes, aligned to align (a
 * power of two); the previous contents are not kept when it grows. NULL when out of memory. */
void *cp_grid_scratch_get(cp_grid *g, size_t bytes, size_t align);
void cp_grid_scratch_free(struct cp_grid_scratch *s);

/* "dp 2 x ring 2 x ulysses 2 (8 ranks)" into buf; returns buf. */
const char *cp_grid_describe(const cp_grid *g, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
