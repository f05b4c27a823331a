/* forward_ranks.c — the clock, the status agreement and rank 0's status for the `cpdit
 * forward` components (see forward_ranks.h). */
#include <mpi.h>
#include <time.h>

#include "bin/forward_ranks.h"

#define WAIT_POLL_NS 2000000L /* 2 ms between status polls on the waiting ranks */

double forward_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

cpdit_status forward_agree_world(cpdit_status st, cpdit_error *err, int rank, int size)
{
    int mine[2] = {st ? rank : size, (int)st}, first = 0, worst = 0;
    MPI_Allreduce(&mine[0], &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine[1], &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (first < size)
        MPI_Bcast(err, (int)sizeof *err, MPI_BYTE, first, MPI_COMM_WORLD);
    return (cpdit_status)worst;
}

cpdit_status forward_wait_rank0(int rank, cpdit_status st, const char *failed, cpdit_error *err)
{
    int status = rank == 0 ? (int)st : CPDIT_OK;
    MPI_Request req;
    MPI_Ibcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
    if (rank == 0) {
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        for (int done = 0;;) {
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (done)
                break;
            const struct timespec pause = {0, WAIT_POLL_NS};
            nanosleep(&pause, NULL);
        }
    }
    if (status == CPDIT_OK)
        return CPDIT_OK;
    if (!failed) /* rank 0's message everywhere */
        MPI_Bcast(err, (int)sizeof *err, MPI_BYTE, 0, MPI_COMM_WORLD);
    else if (rank != 0)
        return cpdit_error_set(err, (cpdit_status)status, "forward", "%s", failed);
    return (cpdit_status)status;
}
