/* weight_shared_mpi.h — one copy of the resident weights per node: the weight loader's arena
 * (lib/weights/weight_loader.h) in an MPI-3 shared-memory window of the node's ranks.
 *
 * The ranks of comm on one node (MPI_Comm_split_type SHARED) form a node group; the group's
 * first rank allocates the whole block (MPI_Win_allocate_shared: /dev/shm on Open MPI) and
 * writes the weights, the others map the same pages (MPI_Win_shared_query) and wait for it at
 * the ready barrier. So 4 Ulysses ranks on a node hold the packed weights once.
 *
 * Streamed weights (over the budget) the same way: the ranks of one CP group on one node (the
 * loader's lockstep peers, weight_loader_set_lockstep, numbered as in comm) share the two
 * streaming slots in a window of their own, made by MPI_Comm_create_group over just them at
 * their first streamed block (other dp groups, not in lockstep, never share or wait).
 *
 * Collective: every rank of comm must create the sharer, and every rank of a node group must
 * load its model's weights (weight_loader_prepare) at the same point, in the same order.
 */
#ifndef CPDIT_WEIGHT_SHARED_MPI_H
#define CPDIT_WEIGHT_SHARED_MPI_H

#include <mpi.h>

#include "lib/core/cpdit_error.h"
#include "lib/weights/weight_loader.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weight_sharer weight_sharer;

/* Errors: MPI failures, out of memory (RUNTIME). */
cpdit_status weight_sharer_create(weight_sharer **out, MPI_Comm comm, cpdit_error *err);
/* Frees the windows: call after every model using them is closed (collective over the node). */
void weight_sharer_destroy(weight_sharer *s);

/* Ranks in this rank's node group and this rank's index in it. */
int weight_sharer_node_size(const weight_sharer *s);
int weight_sharer_node_rank(const weight_sharer *s);

/* The arena operations that put a loader's resident weights in a shared window, and its
 * streaming slots in one per CP group and node (.stream). */
weight_arena_ops weight_sharer_arena(weight_sharer *s);

#ifdef __cplusplus
}
#endif
#endif
