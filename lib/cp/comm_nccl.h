/* comm_nccl.h — communicators for ranks whose activations live in GPU memory (--with-cuda).
 *
 * Two implementations of the one communicator interface (comm.h), chosen per run by
 * cpdit_comm_gpu_create():
 *   - "nccl":   NCCL on a communication stream. Used when every rank of the communicator has a
 *               GPU of its own (NCCL refuses two ranks on one device).
 *   - "staged": host-staged MPI: device data is copied to host buffers on the compute stream,
 *               moved by MPI and copied back. Used when ranks share a GPU (so one GPU can still test multi-rank
 *               correctness), and as a fallback when NCCL cannot start. CUDA-aware MPI is not
 *               assumed.
 *
 * Memory: the data movers (alltoallv, allgatherv, isend, irecv) take DEVICE pointers. The small
 * control collectives (barrier, allreduce, bcast) take HOST pointers and run over MPI, as the
 * callers (agreement checks, timings, error codes) keep those values on the host.
 *
 * Stream semantics ("nccl"): a transfer starts after all work already queued on the compute
 * stream (the comm stream waits on an event recorded there), and a completed transfer is
 * visible to work queued on the compute stream afterwards: collectives return once the
 * compute stream has been made to wait for them (no host synchronisation), and `wait` on a
 * point-to-point request does the same. `test` reports whether the GPU has finished it.
 * Point-to-point operations are batched: isend/irecv are queued and launched as one NCCL group
 * as soon as the queue holds as many sends as receives (the ring's recv K, recv V, send K,
 * send V; the VAE halo's recv + send per neighbour), or at the next test, wait or collective.
 * A batch split elsewhere could deadlock: a group completes only when all its operations do,
 * and a send matches only a receive already launched or in the same group (comm_nccl.c).
 * Every rank therefore posts its matching operations in batches that balance, in one order.
 *
 * "staged" is synchronous with respect to the host: it synchronises the compute stream before
 * copying out, so it is for correctness runs, not for speed.
 */
#ifndef CPDIT_COMM_NCCL_H
#define CPDIT_COMM_NCCL_H

#include <mpi.h>
#include "lib/cp/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which data mover to use. AUTO: nccl when no two ranks of comm use one device (their device
 * UUIDs are compared, lib/cp/device_ids.h), else staged; staged too when NCCL fails to start
 * on some rank (a note on stderr). NCCL / STAGED: that one (NCCL failing is an error). */
typedef enum cpdit_comm_gpu_kind {
    CPDIT_COMM_GPU_AUTO = 0,
    CPDIT_COMM_GPU_NCCL,
    CPDIT_COMM_GPU_STAGED
} cpdit_comm_gpu_kind;

/* The device this rank uses: local rank (from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) on
 * world, never from SLURM_* variables) modulo the number of visible devices; sets it as the
 * current device. *local_rank and *local_size describe the node; *shared is 1 when two ranks
 * of world use one device (by UUID). Fails with a clear message when CUDA sees no device.
 * Collective over world. */
cpdit_status cpdit_cuda_select_device(MPI_Comm world, int *device, int *local_rank,
                                      int *local_size, int *shared, cpdit_error *err);

/* A GPU communicator over the ranks of comm (collective over comm). compute_stream is the
 * backend's compute stream (a cudaStream_t; NULL = the legacy default stream). The current
 * device must already be selected. *out is NULL on failure. */
cpdit_status cpdit_comm_gpu_create(MPI_Comm comm, void *compute_stream, cpdit_comm_gpu_kind kind,
                                   cpdit_comm **out, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
