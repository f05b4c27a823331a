/* grid_mpi.h — building a process grid (grid.h) from an MPI communicator. The only grid
 * header that includes <mpi.h>: model code sees cp_grid and cpdit_comm handles only.
 */
#ifndef CPDIT_GRID_MPI_H
#define CPDIT_GRID_MPI_H

#include <mpi.h>

#include "lib/core/cpdit_error.h"
#include "lib/cp/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Build the grid over world (collective over world: every rank must call it with the same
 * degrees). The grid's communicators are new; world itself is not kept. On failure *out is
 * NULL and err says why (bad degrees: CPDIT_ERR_INPUT; MPI failure: CPDIT_ERR_RUNTIME). */
cpdit_status cp_grid_create(MPI_Comm world, int dp, int ring, int ulysses, cp_grid **out,
                            cpdit_error *err);

/* As cp_grid_create, with communicators that move be's memory: MPI for a backend whose memory
 * is host memory (be NULL too); for the cuda backend GPU communicators (lib/cp/comm_nccl.h:
 * NCCL when every rank of a node has a GPU of its own, host-staged MPI when ranks share one;
 * the environment variable CPDIT_COMM_GPU = nccl | staged forces one). Errors as
 * cp_grid_create; a device backend in a build without GPU communicators is RUNTIME. */
struct cpdit_backend;
cpdit_status cp_grid_create_for(MPI_Comm world, int dp, int ring, int ulysses,
                                const struct cpdit_backend *be, cp_grid **out, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
