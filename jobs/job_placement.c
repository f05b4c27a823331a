/* job_placement.c — where the ranks of a batch run are: one log line from rank 0 naming each
 * node's ranks and saying which parallel groups stay inside one node (see
 * job_run_internal.h). A run that spans nodes is meant to keep its Ulysses groups (all-to-all
 * every layer) inside a node and put ring and dp across; this line shows whether it did. */
#include "jobs/job_run_internal.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/grid.h"

enum { NODE_NAME = MPI_MAX_PROCESSOR_NAME + 1 };

/* The groups of one kind (ulysses, ring or cp) whose ranks are on more than one node, of
 * *n_groups. names: world_size x NODE_NAME. kind 0: ulysses group (dp, ring index) of size
 * ulysses; 1: ring group (dp, ulysses index) of size ring; 2: cp group (dp) of size ring x u. */
static int groups_across(const cp_grid *g, const char *names, int kind, int *n_groups)
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
                const char *n = names + (size_t)r * NODE_NAME;
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

/* Collective over world. Rank 0 writes, when the run has more than one rank:
 *   [cpdit] placement: node1 ranks 0,1; node2 ranks 2,3; ulysses groups 2 (0 across nodes),
 *   ring groups 2 (2 across nodes), cp groups 1 (1 across nodes)
 * node: this rank's node name (the one of the index lines). */
void job_placement_log(MPI_Comm world, const cp_grid *g, const char *node, FILE *log)
{
    if (g->world_size < 2)
        return;
    char mine[NODE_NAME];
    memset(mine, 0, sizeof mine);
    snprintf(mine, sizeof mine, "%s", node);
    char *all = g->world_rank == 0 ? calloc((size_t)g->world_size, NODE_NAME) : NULL;
    int ok = g->world_rank != 0 || all != NULL;
    MPI_Bcast(&ok, 1, MPI_INT, 0, world); /* rank 0 out of memory: no line, no gather */
    if (!ok)
        return;
    MPI_Gather(mine, NODE_NAME, MPI_CHAR, all, NODE_NAME, MPI_CHAR, 0, world);
    if (g->world_rank != 0)
        return;
    fprintf(log, "[cpdit] placement:");
    char *done = calloc((size_t)g->world_size, 1);
    for (int r = 0; done && r < g->world_size; r++) {
        if (done[r])
            continue;
        const char *n = all + (size_t)r * NODE_NAME;
        fprintf(log, "%s %s ranks", r ? ";" : "", n);
        const char *sep = " ";
        for (int s = r; s < g->world_size; s++)
            if (!done[s] && strcmp(n, all + (size_t)s * NODE_NAME) == 0) {
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
    fflush(log);
    free(done);
    free(all);
}
