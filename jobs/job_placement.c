/* job_placement.c — where the ranks of a run are: rank 0 prints each node's ranks and which
 * parallel groups stay inside one node, and each rank's CPUs and threads (job_placement.h). */
#include "config.h"

#include "jobs/job_placement.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/host_runtime.h"

enum { NODE_NAME = MPI_MAX_PROCESSOR_NAME + 1, PLACE_CPUS_MAX = 128 };

typedef struct rank_place {
    char host[NODE_NAME];      /* the node name (job_node_name) */
    char cpus[PLACE_CPUS_MAX]; /* "0-1,4" */
    int ncpus;                 /* CPUs in the affinity mask */
    int threads;               /* the rank's thread pool */
    int online;                /* CPUs online on the host */
} rank_place;

void job_node_name(char *out, size_t size)
{
    const char *env = getenv("CPDIT_NODE_NAME");
    int len = 0;
    char name[MPI_MAX_PROCESSOR_NAME + 1] = "";
    if (env && env[0])
        snprintf(out, size, "%s", env);
    else if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS)
        snprintf(out, size, "%.*s", len, name);
    else
        snprintf(out, size, "unknown");
}

/* This rank's node, threads and affinity mask (as ranges) into p. */
static void this_rank(rank_place *p, const char *node)
{
    memset(p, 0, sizeof *p);
    snprintf(p->host, sizeof p->host, "%s", node);
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

/* The groups of one kind (ulysses, ring or cp) whose ranks are on more than one node, of
 * *n_groups. all: world_size places. kind 0: ulysses group (dp, ring index) of size
 * ulysses; 1: ring group (dp, ulysses index) of size ring; 2: cp group (dp) of size ring x u. */
static int groups_across(const cp_grid *g, const rank_place *all, int kind, int *n_groups)
{
    int across = 0;
    *n_groups = 0;
    for (int d = 0; d < g->dp; d++) {
        int outer = kind == 0 ? g->ring : kind == 1 ? g->ulysses : 1;
        int inner = kind == 0 ? g->ulysses : kind == 1 ? g->ring : g->ring * g->ulysses;
        for (int o = 0; o < outer; o++) {
            const char *first = NULL;
            int split = 0;
            for (int i = 0; i < inner; i++) {
                int r = kind == 0   ? cp_grid_rank_of(d, o, i, g->ring, g->ulysses)
                        : kind == 1 ? cp_grid_rank_of(d, i, o, g->ring, g->ulysses)
                                    : cp_grid_rank_of(d, i / g->ulysses, i % g->ulysses,
                                                      g->ring, g->ulysses);
                const char *n = all[r].host;
                if (!first)
                    first = n;
                else if (strcmp(first, n) != 0)
                    split = 1;
            }
            (*n_groups)++;
            across += split;
        }
    }
    return across;
}

/* "[cpdit] placement: node1 ranks 0,1; ...; ulysses groups 2 (0 across nodes), ..." */
static void put_groups(const cp_grid *g, const rank_place *all, FILE *log)
{
    fprintf(log, "[cpdit] placement:");
    char *done = calloc((size_t)g->world_size, 1);
    for (int r = 0; done && r < g->world_size; r++) {
        if (done[r])
            continue;
        const char *n = all[r].host;
        fprintf(log, "%s %s ranks", r ? ";" : "", n);
        const char *sep = " ";
        for (int s = r; s < g->world_size; s++)
            if (!done[s] && strcmp(n, all[s].host) == 0) {
                fprintf(log, "%s%d", sep, s);
                sep = ",";
                done[s] = 1;
            }
    }
    static const char *const kinds[] = {"ulysses", "ring", "cp"};
    for (int k = 0; k < 3; k++) {
        int n = 0, across = groups_across(g, all, k, &n);
        fprintf(log, "%s %s groups %d (%d across nodes)", k ? "," : ";", kinds[k], n, across);
    }
    fputc('\n', log);
    free(done);
}

/* "placement: 2 ranks x 2 threads on 1 host ...", a line per rank, the warnings. */
static void put_ranks(const rank_place *all, int size, int verbose, FILE *out)
{
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
    for (int r = 0; r < size && (verbose || size <= JOB_PLACEMENT_MAX_LINES); r++)
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
}

void job_placement_log(MPI_Comm world, const cp_grid *g, const char *node, int verbose,
                       FILE *log)
{
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    char name[NODE_NAME];
    if (!node) {
        job_node_name(name, sizeof name);
        node = name;
    }
    rank_place me;
    this_rank(&me, node);
    rank_place *all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
    int ok = rank != 0 || all != NULL;
    MPI_Bcast(&ok, 1, MPI_INT, 0, world); /* rank 0 out of memory: no lines, no gather */
    if (!ok)
        return;
    MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0, world);
    if (rank != 0)
        return;
    if (size > 1 && g && g->world_size == size)
        put_groups(g, all, log);
    put_ranks(all, size, verbose, log);
    fflush(log);
    free(all);
}
