/* run_placement.h — where the ranks of `cpdit run` landed: each rank's host, the CPUs its
 * affinity allows and its BLAS threads, gathered on rank 0 and printed as
 *   placement: 2 ranks x 2 threads on 1 host (rank 0's host: 2 CPUs online)
 *   placement: rank 0 on node1: CPUs 0-1 (2), 2 threads
 * (one line per rank up to RUN_PLACEMENT_MAX_LINES ranks, or with --verbose), and a warning
 * line when a rank has more threads than CPUs or a host's ranks x threads exceed the CPUs
 * online there. What an admin checks after changing --cpus-per-task or the binding. */
#ifndef CPDIT_RUN_PLACEMENT_H
#define CPDIT_RUN_PLACEMENT_H

#include <mpi.h>
#include <stdio.h>

#define RUN_PLACEMENT_MAX_LINES 16

/* Collective over comm; rank 0 writes to out. */
void run_print_placement(MPI_Comm comm, int verbose, FILE *out);

#endif
