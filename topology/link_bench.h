/* link_bench.h — link micro-benchmarks of the probe, the OSU / nccl-tests way.
 *
 * Data moves through a cpdit_comm (lib/cp/comm.h): the MPI communicator today, the NCCL one
 * when it exists (see PROBE_NCCL_HOOK in probe.h) — the same code measures both. Control
 * (iteration counts, results, the quiet waits of ranks not taking part) goes over the MPI
 * communicator `ctl`, which must hold the same ranks in the same order as the cpdit_comm.
 *
 * Point-to-point (OSU latency style): ping-pong between ranks a and b. `warmup` round trips,
 * then the iteration count is chosen so that trials x iterations take about target_s, then
 * `trials` timed batches of that many round trips; one-way time = batch time / (2 x iters).
 * time_s_min/avg/max are over the trials. Ranks other than a and b wait in a sleeping
 * barrier so that they do not take CPU from the pair.
 *
 * Collectives (nccl-tests style): every rank of the group runs `warmup` calls, the group
 * agrees on an iteration count (slowest rank's warm-up time, about target_s in all), a
 * barrier, then the timed calls; each rank's time per call is reduced to min/avg/max over
 * the group's ranks. `bytes` is the per-rank send size:
 *   alltoall       bytes split evenly over the group's ranks (to itself included), as one
 *                  Ulysses all-to-all; algbw = bytes / t, busbw = algbw (n-1)/n
 *   allgather      every rank contributes bytes; algbw = n bytes / t, busbw = algbw (n-1)/n
 *   sendrecv_ring  every rank sends bytes to rank+1 and receives from rank-1 at once (one
 *                  ring-attention step); algbw = busbw = bytes / t
 * t = time_s_avg. Sizes are rounded down to whole floats (at least one float per peer); the
 * bytes actually sent are reported.
 *
 * Failures: a failed transfer leaves the peer waiting for it, so callers must treat a
 * non-OK return as fatal for the whole job (the probe calls MPI_Abort).
 */
#ifndef CPDIT_LINK_BENCH_H
#define CPDIT_LINK_BENCH_H

#include <mpi.h>
#include <stddef.h>

#include "lib/cp/comm.h"
#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct link_bench_opts {
    int warmup;      /* warm-up round trips / calls (>= 1) */
    int trials;      /* timed batches of a ping-pong (>= 1) */
    int max_iters;   /* cap on round trips per batch / timed collective calls */
    double target_s; /* about how long one (pair, size) or (group, op, size) takes */
    /* NULL for MPI; for an asynchronous transport (NCCL): wait until every transfer this rank
     * issued has finished. Called after the warm-up and after every timed batch. */
    cpdit_status (*sync)(cpdit_error *err);
} link_bench_opts;

typedef struct link_times {
    double min_s, avg_s, max_s; /* see above: over trials (p2p) or ranks (collectives) */
    size_t bytes;               /* bytes actually sent per message / per rank */
    int iters;                  /* timed round trips per trial / timed calls */
} link_times;

typedef enum link_coll_op {
    LINK_ALLTOALL = 0,
    LINK_ALLGATHER,
    LINK_SENDRECV_RING
} link_coll_op;

/* "alltoall", "allgather", "sendrecv_ring" */
const char *link_coll_op_name(link_coll_op op);

/* Sleep-polling barrier over ctl: returns when every rank has entered (MPI errors: -1). */
int link_quiet_barrier(MPI_Comm ctl);

/* Ping-pong of `bytes` between ranks a != b of c; every rank of c and ctl calls it, and every
 * rank gets the result. buf: at least bytes (rounded down to floats, min 1 float) on a and b,
 * unused elsewhere. */
cpdit_status link_bench_pingpong(cpdit_comm *c, MPI_Comm ctl, int a, int b, size_t bytes,
                                 float *buf, const link_bench_opts *o, link_times *out,
                                 cpdit_error *err);

/* Buffer floats (send + receive) that link_bench_collective needs for op on n ranks. */
size_t link_bench_collective_floats(link_coll_op op, int n, size_t bytes);

/* One collective over every rank of c (a group's communicator; all its ranks call it).
 * buf: link_bench_collective_floats(op, c->size, bytes) floats, in the memory c's data movers
 * take (device memory for NCCL); its contents are never read. Result on every rank. */
cpdit_status link_bench_collective(cpdit_comm *c, link_coll_op op, size_t bytes, float *buf,
                                   const link_bench_opts *o, link_times *out, cpdit_error *err);

/* Bandwidths of a collective result (see above). */
double link_algbw(link_coll_op op, int n, const link_times *t);
double link_busbw(link_coll_op op, int n, const link_times *t);

#ifdef __cplusplus
}
#endif
#endif
