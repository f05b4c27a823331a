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
 * The grid is built from an MPI communicator by cp_grid_create (lib/cp/grid_mpi.h, the one
 * header that needs <mpi.h>); everything else sees only cpdit_comm handles.
 */
#ifndef CPDIT_GRID_H
#define CPDIT_GRID_H

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

/* Free the grid and its communicators (collective over the grid's world). NULL is fine. */
void cp_grid_destroy(cp_grid *g);

/* "dp 2 x ring 2 x ulysses 2 (8 ranks)" into buf; returns buf. */
const char *cp_grid_describe(const cp_grid *g, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
