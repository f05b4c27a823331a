/* cmd_forward_vae.c — `cpdit forward --component vae`: the VAE part of cmd_forward (see
 * cmd_forward.h), vae.decode(latent_sample) -> sample through vae_forward_file.
 *
 * The decoder is not split over ranks: rank 0 decodes and writes the output, the other ranks
 * (whatever --ulysses / --ring say) wait for its status without spinning on a core, so that
 * rank 0's BLAS threads have the machine. Every rank returns rank 0's status.
 */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

#include "bin/cmd_forward.h"
#include "lib/vae/vae_decoder.h"

#define WAIT_POLL_NS 2000000L /* 2 ms between status polls on the waiting ranks */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

cpdit_status vae_forward_command(const forward_options *opt, cpdit_error *err)
{
    int status = CPDIT_OK;
    MPI_Request req;
    if (opt->world_rank == 0) {
        const double t0 = now_s();
        status = (int)vae_forward_file(opt->model, opt->inputs, opt->output, err);
        if (opt->verbose && status == CPDIT_OK)
            fprintf(stderr, "cpdit: forward: vae decode on rank 0: %.3f s\n", now_s() - t0);
        MPI_Ibcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        return (cpdit_status)status;
    }
    MPI_Ibcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
    for (int done = 0;;) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (done)
            break;
        const struct timespec pause = {0, WAIT_POLL_NS};
        nanosleep(&pause, NULL);
    }
    if (status != CPDIT_OK)
        return cpdit_error_set(err, (cpdit_status)status, "forward",
                               "the VAE decode failed on rank 0");
    return CPDIT_OK;
}
