/* comm_nccl.c — cpdit_comm over NCCL on a communication stream (see comm_nccl.h).
 *
 * Data movers take device pointers (elements of the given type: ncclFloat, or ncclBfloat16 for a
 * bf16 table's activations, moved as they are); control collectives run over an MPI duplicate of
 * the communicator on host memory. Ordering against the compute stream uses events only: a
 * launch makes the comm stream wait for the compute stream, and completion makes the compute
 * stream wait for the comm stream, so nothing here blocks the host inside a sampler step.
 */
#include "lib/cp/comm_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm_mpi.h"
#include "lib/cp/device_ids.h"

#define NCCL_WHERE "comm/nccl"

/* A queued point-to-point operation, launched with the next group. */
typedef struct p2p_op {
    int send;
    void *buf;
    size_t count; /* elements of type */
    ncclDataType_t type;
    int peer;
    struct nccl_request *req;
} p2p_op;

typedef struct nccl_request {
    cudaEvent_t done; /* recorded on the comm stream after the group that carries it */
    int launched;
} nccl_request;

typedef struct nccl_state {
    ncclComm_t nccl;
    cpdit_comm *ctrl; /* MPI, host memory: barrier, allreduce, bcast */
    cudaStream_t compute;
    cudaStream_t stream; /* communication */
    cudaEvent_t compute_ready;
    cudaEvent_t comm_done;
    p2p_op *pending;
    int npending, cap, nsend, nrecv;
} nccl_state;

static nccl_state *state_of(cpdit_comm *c)
{
    return (nccl_state *)c->impl;
}

static cpdit_status cuda_check(cudaError_t rc, const char *call, cpdit_error *err)
{
    if (rc == cudaSuccess)
        return CPDIT_OK;
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE, "%s failed: %s", call,
                           cudaGetErrorString(rc));
}

static cpdit_status nccl_check(ncclResult_t rc, const char *call, cpdit_error *err)
{
    if (rc == ncclSuccess)
        return CPDIT_OK;
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE, "%s failed: %s", call,
                           ncclGetErrorString(rc));
}

/* The comm stream waits for everything queued on the compute stream so far. */
static cpdit_status after_compute(nccl_state *s, cpdit_error *err)
{
    if (cuda_check(cudaEventRecord(s->compute_ready, s->compute), "cudaEventRecord", err))
        return CPDIT_ERR_RUNTIME;
    return cuda_check(cudaStreamWaitEvent(s->stream, s->compute_ready, 0), "cudaStreamWaitEvent",
                      err);
}

/* The compute stream waits for everything queued on the comm stream so far. */
static cpdit_status before_compute(nccl_state *s, cpdit_error *err)
{
    if (cuda_check(cudaEventRecord(s->comm_done, s->stream), "cudaEventRecord", err))
        return CPDIT_ERR_RUNTIME;
    return cuda_check(cudaStreamWaitEvent(s->compute, s->comm_done, 0), "cudaStreamWaitEvent",
                      err);
}

/* NCCL's type for a comm element type. */
static ncclDataType_t nccl_type(cpdit_comm_dtype type)
{
    switch (type) {
    case CPDIT_COMM_BF16: return ncclBfloat16;
    case CPDIT_COMM_DOUBLE: return ncclDouble;
    case CPDIT_COMM_INT64: return ncclInt64;
    default: return ncclFloat;
    }
}

/* One rank's copy to itself inside a collective: bytes bytes device to device on the comm
 * stream. */
static cpdit_status self_copy(nccl_state *s, void *dst, const void *src, size_t bytes,
                              cpdit_error *err)
{
    if (bytes == 0 || dst == src)
        return CPDIT_OK;
    return cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s->stream),
                      "cudaMemcpyAsync", err);
}

/* Launch the queued point-to-point operations as one NCCL group. */
static cpdit_status flush_p2p(cpdit_comm *c, cpdit_error *err)
{
    nccl_state *s = state_of(c);
    if (s->npending == 0)
        return CPDIT_OK;
    cpdit_status st = after_compute(s, err);
    int grouped = 0;
    if (st == CPDIT_OK)
        grouped = !(st = nccl_check(ncclGroupStart(), "ncclGroupStart", err));
    for (int i = 0; st == CPDIT_OK && i < s->npending; i++) {
        p2p_op *op = &s->pending[i];
        if (op->count == 0)
            continue;
        st = op->send ? nccl_check(ncclSend(op->buf, op->count, op->type, op->peer, s->nccl,
                                            s->stream),
                                   "ncclSend", err)
                      : nccl_check(ncclRecv(op->buf, op->count, op->type, op->peer, s->nccl,
                                            s->stream),
                                   "ncclRecv", err);
    }
    cpdit_status end =
        grouped ? nccl_check(ncclGroupEnd(), "ncclGroupEnd", st == CPDIT_OK ? err : NULL)
                : CPDIT_OK;
    if (st == CPDIT_OK)
        st = end;
    for (int i = 0; i < s->npending; i++) {
        nccl_request *r = s->pending[i].req;
        if (st == CPDIT_OK)
            st = cuda_check(cudaEventRecord(r->done, s->stream), "cudaEventRecord", err);
        r->launched = 1;
    }
    s->npending = s->nsend = s->nrecv = 0;
    return st;
}

/* One grouped exchange on the comm stream, ordered after the compute stream's queued work and
 * before its later work: to every peer p != rank send send_counts[p] elements of type from
 * send + send_displs[p] (send_counts NULL: the same send_count elements from send, allgatherv's
 * pattern) and receive recv_counts[p] elements into recv + recv_displs[p]; the rank's own block
 * is a device copy. Counts and displacements are elements of type (esz bytes), never bytes.
 * All sends and receives sit in one NCCL group, so uneven and zero counts cannot deadlock. */
static cpdit_status grouped_exchange(cpdit_comm *c, cpdit_comm_dtype type, const void *send_v,
                                     const size_t *send_counts, const size_t *send_displs,
                                     size_t send_count, void *recv_v, const size_t *recv_counts,
                                     const size_t *recv_displs, cpdit_error *err)
{
    nccl_state *s = state_of(c);
    const ncclDataType_t nt = nccl_type(type);
    const size_t esz = cpdit_comm_dtype_size(type);
    const char *send = send_v;
    char *recv = recv_v;
    if (flush_p2p(c, err) || after_compute(s, err))
        return CPDIT_ERR_RUNTIME;
    const char *own = send_counts ? send + send_displs[c->rank] * esz : send;
    cpdit_status st = self_copy(s, recv + recv_displs[c->rank] * esz, own,
                                (send_counts ? send_counts[c->rank] : send_count) * esz, err);
    int grouped = 0;
    if (st == CPDIT_OK)
        grouped = !(st = nccl_check(ncclGroupStart(), "ncclGroupStart", err));
    for (int p = 0; st == CPDIT_OK && p < c->size; p++) {
        if (p == c->rank)
            continue;
        const size_t n = send_counts ? send_counts[p] : send_count;
        if (n)
            st = nccl_check(ncclSend(send_counts ? send + send_displs[p] * esz : send, n, nt, p,
                                     s->nccl, s->stream),
                            "ncclSend", err);
        if (st == CPDIT_OK && recv_counts[p])
            st = nccl_check(ncclRecv(recv + recv_displs[p] * esz, recv_counts[p], nt, p,
                                     s->nccl, s->stream),
                            "ncclRecv", err);
    }
    /* a started group is always ended, also after a failed call inside it */
    cpdit_status end =
        grouped ? nccl_check(ncclGroupEnd(), "ncclGroupEnd", st == CPDIT_OK ? err : NULL)
                : CPDIT_OK;
    if (st == CPDIT_OK)
        st = end;
    return st == CPDIT_OK ? before_compute(s, err) : st;
}

static cpdit_status nccl_alltoallv(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                   const size_t *send_counts, const size_t *send_displs,
                                   void *recv, const size_t *recv_counts,
                                   const size_t *recv_displs, cpdit_error *err)
{
    return grouped_exchange(c, type, send, send_counts, send_displs, 0, recv, recv_counts,
                            recv_displs, err);
}

static cpdit_status nccl_allgatherv(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                    size_t send_count, void *recv, const size_t *recv_counts,
                                    const size_t *recv_displs, cpdit_error *err)
{
    return grouped_exchange(c, type, send, NULL, NULL, send_count, recv, recv_counts,
                            recv_displs, err);
}

/* Whether the queued point-to-point operations form a batch to launch as one NCCL group: as
 * many sends as receives (at least one each). NCCL matches a send only with a receive that is
 * already launched or in the same group, and a group completes only when all its operations
 * do, so a batch must not be split where the peer's matching operation falls into a later
 * group of its own: cp_ring posts recv K, recv V, send K, send V each step; launching at the
 * first send would put recv V in the first group and send V in the second on every rank, and
 * each rank's first group would wait on the previous rank's second group around the ring
 * (deadlock). Launching at balance keeps the four together; the VAE halo's recv-up, send-up,
 * recv-down, send-down still launches as two pairs that match their neighbours' pairs. */
static int p2p_batch_complete(int nsend, int nrecv)
{
    return nsend > 0 && nsend == nrecv;
}

static cpdit_status queue_p2p(cpdit_comm *c, int send, cpdit_comm_dtype type, void *buf,
                              size_t count, int peer, cpdit_comm_request *req, cpdit_error *err)
{
    nccl_state *s = state_of(c);
    nccl_request *r = calloc(1, sizeof *r);
    if (!r)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE, "out of memory");
    if (cuda_check(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming),
                   "cudaEventCreateWithFlags", err)) {
        free(r);
        return CPDIT_ERR_RUNTIME;
    }
    if (s->npending == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        p2p_op *p = realloc(s->pending, (size_t)cap * sizeof *p);
        if (!p) {
            cudaEventDestroy(r->done);
            free(r);
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE, "out of memory");
        }
        s->pending = p;
        s->cap = cap;
    }
    s->pending[s->npending++] = (p2p_op){send, buf, count, nccl_type(type), peer, r};
    if (send)
        s->nsend++;
    else
        s->nrecv++;
    req->impl = r;
    return p2p_batch_complete(s->nsend, s->nrecv) ? flush_p2p(c, err) : CPDIT_OK;
}

static cpdit_status nccl_isend(cpdit_comm *c, cpdit_comm_dtype type, const void *buf,
                               size_t count, int peer, int tag, cpdit_comm_request *req,
                               cpdit_error *err)
{
    (void)tag; /* NCCL orders messages per pair; tags only name them here */
    return queue_p2p(c, 1, type, (void *)(uintptr_t)buf, count, peer, req, err);
}

static cpdit_status nccl_irecv(cpdit_comm *c, cpdit_comm_dtype type, void *buf, size_t count,
                               int peer, int tag, cpdit_comm_request *req, cpdit_error *err)
{
    (void)tag;
    return queue_p2p(c, 0, type, buf, count, peer, req, err);
}

static void release(cpdit_comm_request *req)
{
    nccl_request *r = req->impl;
    cudaEventDestroy(r->done); /* legal while pending: freed once the event completes */
    free(r);
    req->impl = NULL;
}

static cpdit_status nccl_test(cpdit_comm *c, cpdit_comm_request *req, int *done, cpdit_error *err)
{
    *done = 1;
    if (!req->impl)
        return CPDIT_OK;
    if (flush_p2p(c, err))
        return CPDIT_ERR_RUNTIME;
    nccl_request *r = req->impl;
    cudaError_t q = cudaEventQuery(r->done);
    if (q == cudaErrorNotReady) {
        *done = 0;
        return CPDIT_OK;
    }
    release(req);
    return cuda_check(q, "cudaEventQuery", err);
}

static cpdit_status nccl_wait(cpdit_comm *c, cpdit_comm_request *req, cpdit_error *err)
{
    if (!req->impl)
        return CPDIT_OK;
    nccl_state *s = state_of(c);
    if (flush_p2p(c, err))
        return CPDIT_ERR_RUNTIME;
    nccl_request *r = req->impl;
    cpdit_status st =
        cuda_check(cudaStreamWaitEvent(s->compute, r->done, 0), "cudaStreamWaitEvent", err);
    release(req);
    return st;
}

static cpdit_status nccl_barrier(cpdit_comm *c, cpdit_error *err)
{
    if (flush_p2p(c, err))
        return CPDIT_ERR_RUNTIME;
    cpdit_comm *m = state_of(c)->ctrl;
    return m->ops->barrier(m, err);
}

static cpdit_status nccl_allreduce(cpdit_comm *c, void *buf, size_t count, cpdit_comm_dtype type,
                                   cpdit_comm_op op, cpdit_error *err)
{
    cpdit_comm *m = state_of(c)->ctrl;
    return m->ops->allreduce(m, buf, count, type, op, err);
}

static cpdit_status nccl_bcast(cpdit_comm *c, void *buf, size_t bytes, int root, cpdit_error *err)
{
    cpdit_comm *m = state_of(c)->ctrl;
    return m->ops->bcast(m, buf, bytes, root, err);
}

static void nccl_destroy(cpdit_comm *c)
{
    nccl_state *s = state_of(c);
    if (!s)
        return;
    if (s->npending)
        flush_p2p(c, NULL);
    if (s->stream)
        cudaStreamSynchronize(s->stream);
    if (s->nccl)
        ncclCommDestroy(s->nccl);
    if (s->compute_ready)
        cudaEventDestroy(s->compute_ready);
    if (s->comm_done)
        cudaEventDestroy(s->comm_done);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    cpdit_comm_destroy(s->ctrl);
    free(s->pending);
    free(s);
    c->impl = NULL;
}

static const cpdit_comm_ops nccl_ops = {
    .name = "nccl",
    .alltoallv = nccl_alltoallv,
    .allgatherv = nccl_allgatherv,
    .isend = nccl_isend,
    .irecv = nccl_irecv,
    .test = nccl_test,
    .wait = nccl_wait,
    .barrier = nccl_barrier,
    .allreduce = nccl_allreduce,
    .bcast = nccl_bcast,
    .destroy = nccl_destroy,
};

/* Build the NCCL state on this rank; collective over ctrl (the unique id is broadcast). */
static cpdit_status nccl_start(cpdit_comm *ctrl, nccl_state *s, cpdit_error *err)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    cpdit_status st = CPDIT_OK;
    if (ctrl->rank == 0)
        st = nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", err);
    /* agree on rank 0's outcome before anyone waits inside ncclCommInitRank */
    long long failed = st != CPDIT_OK;
    if (ctrl->ops->allreduce(ctrl, &failed, 1, CPDIT_COMM_INT64, CPDIT_COMM_MAX, err))
        return CPDIT_ERR_RUNTIME;
    if (failed)
        return st != CPDIT_OK ? st
                              : cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE,
                                                "rank 0 could not create an NCCL unique id");
    if (ctrl->ops->bcast(ctrl, &id, sizeof id, 0, err))
        return CPDIT_ERR_RUNTIME;
    if (cuda_check(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags", err) ||
        cuda_check(cudaEventCreateWithFlags(&s->compute_ready, cudaEventDisableTiming),
                   "cudaEventCreateWithFlags", err) ||
        cuda_check(cudaEventCreateWithFlags(&s->comm_done, cudaEventDisableTiming),
                   "cudaEventCreateWithFlags", err))
        return CPDIT_ERR_RUNTIME;
    ncclResult_t r = ncclCommInitRank(&s->nccl, ctrl->size, id, ctrl->rank);
    if (r != ncclSuccess && s->nccl) { /* a communicator that failed to start is aborted */
        ncclCommAbort(s->nccl);
        s->nccl = NULL;
    }
    return nccl_check(r, "ncclCommInitRank", err);
}

/* Implemented in comm_staged.c. */
cpdit_status cpdit_comm_staged_create(cpdit_comm *mpi, void *compute_stream, cpdit_comm **out,
                                      cpdit_error *err);

/* 1 on every rank when two ranks of comm use one device (by UUID, lib/cp/device_ids.h), or a
 * rank cannot tell its device. Collective over comm. */
static cpdit_status ranks_share_devices(MPI_Comm comm, int *shared, cpdit_error *err)
{
    unsigned char mine[CPDIT_DEVICE_ID_BYTES];
    memset(mine, 0, sizeof mine);
    int dev = -1;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
        mine[0] = 1;
        memcpy(mine + 1, prop.uuid.bytes, CPDIT_DEVICE_ID_BYTES - 1);
    } else {
        cudaGetLastError();
    }
    int n = 0;
    MPI_Comm_size(comm, &n);
    unsigned char *all = malloc((size_t)n * CPDIT_DEVICE_ID_BYTES);
    if (!all)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE, "out of memory");
    int rc = MPI_Allgather(mine, CPDIT_DEVICE_ID_BYTES, MPI_BYTE, all, CPDIT_DEVICE_ID_BYTES,
                           MPI_BYTE, comm);
    if (rc == MPI_SUCCESS)
        *shared = cpdit_device_ids_shared(all, n);
    free(all);
    if (rc != MPI_SUCCESS)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE, "MPI_Allgather failed");
    return CPDIT_OK;
}

static cpdit_status nccl_create(MPI_Comm comm, void *compute_stream, cpdit_comm **out,
                                cpdit_error *err);

cpdit_status cpdit_comm_gpu_create(MPI_Comm comm, void *compute_stream, cpdit_comm_gpu_kind kind,
                                   cpdit_comm **out, cpdit_error *err)
{
    *out = NULL;
    const int automatic = kind == CPDIT_COMM_GPU_AUTO;
    if (automatic) {
        int shared = 0;
        if (ranks_share_devices(comm, &shared, err))
            return CPDIT_ERR_RUNTIME;
        kind = shared ? CPDIT_COMM_GPU_STAGED : CPDIT_COMM_GPU_NCCL;
    }
    if (kind == CPDIT_COMM_GPU_NCCL) {
        cpdit_status st = nccl_create(comm, compute_stream, out, err);
        if (st == CPDIT_OK || !automatic)
            return st;
        /* AUTO: NCCL could not start on some rank (all ranks agreed on that): host-staged MPI */
        int rank = 0;
        MPI_Comm_rank(comm, &rank);
        if (rank == 0)
            fprintf(stderr, "cpdit: %s: NCCL did not start (%s): using host-staged MPI\n",
                    NCCL_WHERE, err ? err->what : "no detail");
        if (err)
            cpdit_error_clear(err);
    }
    cpdit_comm *ctrl = NULL;
    if (cpdit_comm_mpi_create(comm, 0, &ctrl, err))
        return CPDIT_ERR_RUNTIME;
    return cpdit_comm_staged_create(ctrl, compute_stream, out, err);
}

/* The NCCL communicator over comm; on failure every rank of comm returns an error (collective
 * agreement), so none is left waiting inside a later collective. */
static cpdit_status nccl_create(MPI_Comm comm, void *compute_stream, cpdit_comm **out,
                                cpdit_error *err)
{
    cpdit_comm *ctrl = NULL;
    if (cpdit_comm_mpi_create(comm, 0, &ctrl, err))
        return CPDIT_ERR_RUNTIME;
    nccl_state *s = calloc(1, sizeof *s);
    cpdit_comm *c = calloc(1, sizeof *c);
    if (!s || !c) {
        free(s);
        free(c);
        cpdit_comm_destroy(ctrl);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE, "out of memory");
    }
    s->ctrl = ctrl;
    s->compute = (cudaStream_t)compute_stream;
    c->ops = &nccl_ops;
    c->impl = s;
    c->rank = ctrl->rank;
    c->size = ctrl->size;
    cpdit_status st = nccl_start(ctrl, s, err);
    /* every rank learns whether all started, so none is left inside a later collective */
    long long failed = st != CPDIT_OK;
    cpdit_error agree_err;
    cpdit_error_clear(&agree_err);
    if (ctrl->ops->allreduce(ctrl, &failed, 1, CPDIT_COMM_INT64, CPDIT_COMM_MAX, &agree_err))
        failed = 1;
    if (failed) {
        if (st == CPDIT_OK)
            cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE,
                            "NCCL could not start on another rank of the group");
        cpdit_comm_destroy(c);
        return CPDIT_ERR_RUNTIME;
    }
    *out = c;
    return CPDIT_OK;
}

cpdit_status cpdit_cuda_select_device(MPI_Comm world, int *device, int *local_rank,
                                      int *local_size, int *shared, cpdit_error *err)
{
    MPI_Comm node;
    int ndev = 0;
    if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "cuda", "MPI_Comm_split_type failed");
    MPI_Comm_rank(node, local_rank);
    MPI_Comm_size(node, local_size);
    MPI_Comm_free(&node);
    cudaError_t rc = cudaGetDeviceCount(&ndev);
    cpdit_status st;
    if (rc != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        *device = -1;
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "cuda",
                             "no CUDA device is visible to this rank (%s)",
                             rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    } else {
        *device = *local_rank % ndev;
        st = cuda_check(cudaSetDevice(*device), "cudaSetDevice", err);
    }
    /* collective: every rank takes part, also one without a device (it counts as sharing) */
    cpdit_status sh = ranks_share_devices(world, shared, st != CPDIT_OK ? NULL : err);
    return st != CPDIT_OK ? st : sh;
}
