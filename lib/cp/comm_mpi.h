/* comm_mpi.h — the MPI implementation of the communicator interface (comm.h). */
#ifndef CPDIT_COMM_MPI_H
#define CPDIT_COMM_MPI_H

#include <mpi.h>
#include <stddef.h>
#include "lib/cp/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wrap an MPI communicator. With take_ownership = 1 the cpdit_comm uses comm itself and frees
 * it (MPI_Comm_free) on destroy; with 0 it works on a private duplicate (MPI_Comm_dup, a
 * collective call over comm), so its tags never meet the caller's traffic. Either way the
 * communicator it uses returns errors (MPI_ERRORS_RETURN) instead of aborting, and they come
 * back as CPDIT_ERR_RUNTIME with MPI's message. *out is NULL on failure. */
cpdit_status cpdit_comm_mpi_create(MPI_Comm comm, int take_ownership, cpdit_comm **out,
                                   cpdit_error *err);

/* cpdit_comm_agree (comm.h) over an MPI communicator used as it is: no duplicate, its error
 * handler untouched (for the callers that hold an MPI_Comm: jobs/, topology/). Collective
 * over comm. */
cpdit_status cpdit_comm_agree_mpi(MPI_Comm comm, cpdit_status st, cpdit_error *err);

/* The MPI communicator behind c, or MPI_COMM_NULL when c is not an MPI communicator. */
MPI_Comm cpdit_comm_mpi_handle(const cpdit_comm *c);

/* The largest element count this implementation hands to one MPI call (MPI counts are int).
 * Default INT_MAX. Larger point-to-point transfers are split into chunks of at most this many
 * elements; all-to-all / all-gather calls whose counts or displacements exceed it run as
 * chunked point-to-point exchanges. Every rank must use the same value; tests lower it to
 * exercise the chunked paths on small data. Values of 0 or above INT_MAX mean INT_MAX. */
void cpdit_comm_mpi_set_max_count(size_t n);
size_t cpdit_comm_mpi_max_count(void);

/* The tag the chunked collectives use; point-to-point callers must use tags below it. */
#define CPDIT_COMM_MPI_COLLECTIVE_TAG 32000

#ifdef __cplusplus
}
#endif
#endif
