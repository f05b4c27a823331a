/* run_placement.c — each rank's host, CPU affinity and threads, printed by rank 0
 * (run_placement.h). */
#include "config.h"

#include "bin/run_placement.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/host_runtime.h"

#define PLACE_HOST_MAX 64
#define PLACE_CPUS_MAX 128

typedef struct rank_place {
    char host[PLACE_HOST_MAX];
    char cpus[PLACE_CPUS_MAX]; /* "0-1,4" */
    int ncpus;                 /* CPUs in the affinity mask */
    int threads;               /* BLAS threads */
    int online;                /* CPUs online on the host */
} rank_place;

/* The affinity mask as ranges into p. */
static void this_rank(rank_place *p)
{
    memset(p, 0, sizeof *p);
    if (gethostname(p->host, sizeof p->host - 1) != 0)
        snprintf(p->host, sizeof p->host, "?");
    p->threads = cpdit_host_gemm_threads();
    p->online = (int)sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        snprintf(p->cpus, sizeof p->cpus, "unknown");
        return;
    }
    size_t used = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set))
            e++;
        p->ncpus += e - c + 1;
        if (used < sizeof p->cpus - 1)
            used += (size_t)snprintf(p->cpus + used, sizeof p->cpus - used,
                                     e > c ? "%s%d-%d" : "%s%d", used ? "," : "", c, e);
        c = e;
    }
}

void run_print_placement(MPI_Comm comm, int verbose, FILE *out)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    rank_place me;
    this_rank(&me);
    rank_place *all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
    int ok = rank != 0 || all != NULL;
    MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
    if (!ok)
        return;
    MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0, comm);
    if (rank != 0)
        return;
    int hosts = 0, same_threads = 1;
    for (int r = 0; r < size; r++) {
        int first = 1;
        for (int q = 0; q < r && first; q++)
            first = strcmp(all[q].host, all[r].host) != 0;
        hosts += first;
        same_threads &= all[r].threads == all[0].threads;
    }
    if (same_threads)
        fprintf(out, "placement: %d rank%s x %d thread%s on %d host%s (rank 0's host: %d CPUs "
                     "online)\n", size, size == 1 ? "" : "s", all[0].threads,
                all[0].threads == 1 ? "" : "s", hosts, hosts == 1 ? "" : "s", all[0].online);
    else
        fprintf(out, "placement: %d ranks, threads differ per rank, on %d host%s\n", size, hosts,
                hosts == 1 ? "" : "s");
    for (int r = 0; r < size && (verbose || size <= RUN_PLACEMENT_MAX_LINES); r++)
        fprintf(out, "placement: rank %d on %s: CPUs %s (%d), %d thread%s\n", r, all[r].host,
                all[r].cpus, all[r].ncpus, all[r].threads, all[r].threads == 1 ? "" : "s");
    for (int r = 0; r < size; r++) {
        int on_host = 0;
        for (int q = 0; q < size; q++)
            on_host += strcmp(all[q].host, all[r].host) == 0 ? all[q].threads : 0;
        if (all[r].threads > all[r].ncpus && all[r].ncpus > 0) {
            fprintf(out, "placement: warning: rank %d has %d threads on %d CPU%s (its affinity): "
                         "threads wait for each other; give the task more CPUs (srun -c, "
                         "--cpus-per-task) or fewer threads\n", r, all[r].threads,
                    all[r].ncpus, all[r].ncpus == 1 ? "" : "s");
            break;
        }
        if (on_host > all[r].online) {
            fprintf(out, "placement: warning: host %s runs %d threads (ranks x threads) on %d "
                         "CPUs: oversubscribed\n", all[r].host, on_host, all[r].online);
            break;
        }
    }
    free(all);
}
