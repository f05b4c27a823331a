/* probe.h — the topology probe as a library call: what `cpdit probe` writes, and what
 * `parallel: auto` runs in-process (--quick) at job start when no topology file is given.
 *
 * cpdit_probe_run is collective over comm. It finds which ranks share a host (the host name is
 * $CPDIT_HOSTNAME when set, else MPI_Get_processor_name), a package and a NUMA node; reads each
 * host's hardware with hwloc (+ NVML) on the host's first rank; measures the compute rate of
 * every rank (SGEMM and the local attention kernel, all ranks at once, as in a run); measures
 * point-to-point links per pair class and all-to-all / all-gather / ring send-receive over the
 * world and, with several hosts, inside host 0 and across hosts (link_bench.h); fits
 * alpha + beta per class (link_fit.h); and returns the topology document, format 1
 * (topology/README.md), on rank 0.
 *
 * Pair classes (probe_pair_class): same host and same NUMA node -> same_numa; same host and
 * same package -> same_socket; same host -> same_node; else cross_node. A rank whose CPU
 * binding spans several NUMA nodes (packages) has numa (package) -1 and never counts as
 * sharing one.
 *
 * Failures: problems that one rank finds locally (hwloc, memory) are agreed on by all ranks,
 * which return the same status, the failing rank's message in err on every rank. A transfer
 * that fails during the measurements would leave its peer waiting forever, so the probe then
 * prints "cpdit: <where>: <what>" on stderr and calls MPI_Abort.
 */
#ifndef CPDIT_PROBE_H
#define CPDIT_PROBE_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <jansson.h>

#include "lib/cp/comm.h"
#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CPDIT_TOPOLOGY_FORMAT 1
#define CPDIT_TOPOLOGY_DEFAULT_FILE "cpdit-topology.json"
#define PROBE_MAX_SIZES 32
/* Tests: CPDIT_PROBE_FAIL_RANK=R makes rank R fail locally at the probe's start (a RUNTIME
 * error every rank agrees on), to check that callers fall back instead of hanging. */
#define PROBE_FAIL_ENV "CPDIT_PROBE_FAIL_RANK"

typedef enum probe_class {
    PROBE_SAME_NUMA = 0,
    PROBE_SAME_SOCKET,
    PROBE_SAME_NODE,
    PROBE_CROSS_NODE,
    PROBE_N_CLASSES
} probe_class;

/* "same_numa", "same_socket", "same_node", "cross_node" */
const char *probe_class_name(probe_class c);

/* Where one rank runs: host index (hosts in order of their first rank), package and NUMA
 * node (logical hwloc indices, -1 = spans several). */
typedef struct probe_place {
    int host, package, numa;
} probe_place;

probe_class probe_pair_class(const probe_place *a, const probe_place *b);

/* PROBE_NCCL_HOOK: a second transport whose links are measured beside MPI's (NCCL on GPU
 * nodes). When cpdit_probe_options.nccl is set, every link measurement is repeated through it
 * with the same code and recorded with "transport": name. The MPI transport is built in; a
 * CPU-only build sets no second one; with --with-cuda bin/cmd_probe.c plugs the NCCL
 * communicator (lib/cp/comm_nccl.h) in here when every rank has a GPU of its own: create =
 * cpdit_comm_gpu_create(NCCL) on the cuda backend's stream, alloc/release = the backend's
 * alloc/free, sync = the backend's sync. */
typedef struct probe_transport {
    const char *name; /* "nccl" */
    /* a communicator over the ranks of mpi, collective over mpi; it must not free mpi */
    cpdit_status (*create)(MPI_Comm mpi, cpdit_comm **out, cpdit_error *err);
    /* buffers of `bytes` that the communicator's data movers take; contents are never read */
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    /* wait until every transfer this rank issued has finished (asynchronous transports) */
    cpdit_status (*sync)(cpdit_error *err);
} probe_transport;

typedef struct cpdit_probe_options {
    int quick;              /* seconds, not tens of seconds: fewer sizes, shorter timings */
    int links;              /* measure links (default 1) */
    int compute;            /* measure compute rates (default 1) */
    int pairs_per_class;    /* rank pairs measured per class (default 2, quick 1) */
    size_t p2p_bytes[PROBE_MAX_SIZES];  /* ping-pong sizes */
    int n_p2p_bytes;
    size_t coll_bytes[PROBE_MAX_SIZES]; /* per-rank collective sizes */
    int n_coll_bytes;
    int warmup, trials, max_iters; /* see link_bench_opts */
    double target_s;
    FILE *log;              /* progress lines on rank 0; NULL = quiet */
    /* with compute: also time the GEMMs and attention calls of this model and image size for
     * grids of shape_ranks ranks (0 = all) into compute.shapes (probe_shapes.h); NULL = not */
    const struct model_plan_shape *shape;
    int shape_ranks;
    const probe_transport *nccl; /* PROBE_NCCL_HOOK, NULL = MPI only */
} cpdit_probe_options;

/* The standard sweep and timings:
 *   full : ping-pong 8 B .. 16 MiB (x8), collectives 16 KiB, 256 KiB, 4 MiB, 32 MiB;
 *          5 warm-ups, 5 trials, ~0.25 s per measurement
 *   quick: ping-pong 8 B, 4 KiB, 256 KiB, 2 MiB; collectives 256 KiB, 4 MiB;
 *          2 warm-ups, 3 trials, ~0.03 s per measurement */
void cpdit_probe_options_default(cpdit_probe_options *o, int quick);

/* Collective over comm. On success *out is the document (new reference) on rank 0 and NULL
 * on the other ranks. */
cpdit_status cpdit_probe_run(MPI_Comm comm, const cpdit_probe_options *o, json_t **out,
                             cpdit_error *err);

/* Write doc to path atomically (temporary file + rename), 2-space indented, keys in the
 * order they were set. */
cpdit_status cpdit_topology_write(const json_t *doc, const char *path, cpdit_error *err);

/* Compute rates of this rank, FLOP/s: SGEMM (2 n^3 per call, n = 1024, quick 512) and the
 * local attention kernel (4 S^2 D H per call, S = 1024, quick 512, D = 128, H = 8). */
cpdit_status probe_compute_rates(int quick, double *sgemm_flops, double *attention_flops,
                                 cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
