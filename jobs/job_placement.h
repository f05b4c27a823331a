/* job_placement.h — where the ranks of `cpdit run` landed, printed once by rank 0 (both the
 * batch runner and the single-image path use it):
 *   [cpdit] placement: node1 ranks 0,1; node2 ranks 2,3; ulysses groups 2 (0 across nodes),
 *   ring groups 2 (2 across nodes), cp groups 1 (1 across nodes)
 * (more than one rank only: which parallel groups stay inside one node; a run spanning nodes
 * keeps its Ulysses groups, all-to-all every layer, inside a node), then each rank's CPUs and
 * threads (kernels/cpu/thread_pool.h: --threads, CPDIT_THREADS, SLURM_CPUS_PER_TASK, ...):
 *   placement: 2 ranks x 2 threads on 1 host (rank 0's host: 2 CPUs online)
 *   placement: rank 0 on node1: CPUs 0-1 (2), 2 threads
 * (one line per rank up to JOB_PLACEMENT_MAX_LINES ranks, or all with verbose), and a warning
 * line when a rank has more threads than CPUs or a host's ranks x threads exceed the CPUs
 * online there. What an admin checks after changing --cpus-per-task or the binding. */
#ifndef CPDIT_JOB_PLACEMENT_H
#define CPDIT_JOB_PLACEMENT_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>

#include "lib/cp/grid.h"

#define JOB_PLACEMENT_MAX_LINES 16

/* This rank's node name: $CPDIT_NODE_NAME, else MPI's processor name ("unknown"). */
void job_node_name(char *out, size_t size);

/* Collective over world (g's ranks are world's). node: this rank's node name, or NULL for
 * job_node_name's. Rank 0 writes the lines above to log. */
void job_placement_log(MPI_Comm world, const cp_grid *g, const char *node, int verbose,
                       FILE *log);

#endif
