/* forward_ranks.h — what the `cpdit forward` components share about the job's ranks: a
 * clock, agreeing on a status over MPI_COMM_WORLD, and rank 0 working alone while the others
 * wait for its status. */
#ifndef CPDIT_FORWARD_RANKS_H
#define CPDIT_FORWARD_RANKS_H

#include "lib/core/cpdit_error.h"

/* Monotonic seconds (differences only). */
double forward_now_s(void);

/* Collective over MPI_COMM_WORLD (this rank `rank` of `size`): the worst status of all
 * ranks; the first failing rank's message lands in err on every rank, as it is. */
cpdit_status forward_agree_world(cpdit_status st, cpdit_error *err, int rank, int size);

/* Collective over MPI_COMM_WORLD: rank 0's status st to every rank; the other ranks wait
 * without spinning on a core (rank 0 computes with every thread of the node). On a failure
 * the ranks but 0 get err = ("forward", failed) when failed is given; with failed NULL rank 0's
 * whole message is sent to every rank. Returns rank 0's status on every rank. */
cpdit_status forward_wait_rank0(int rank, cpdit_status st, const char *failed, cpdit_error *err);

#endif
