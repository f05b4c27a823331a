/* comm_nccl.c — cpdit_comm over NCCL on a communication stream (see comm_nccl.h).
 *
 * Data movers take device pointers (floats); control collectives run over an MPI duplicate of
 * the communicator on host memory. Ordering against the compute stream uses events only: a
 * launch makes the comm stream wait for the compute stream, and completion makes the compute
 * stream wait for the comm stream, so nothing here blocks the host inside a sampler step.
 */
#include "lib/cp/comm_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm_mpi.h"

#define NCCL_WHERE "comm/nccl"

/* A queued point-to-point operation, launched with the next group. */
typedef struct p2p_op {
    int send;
    float *buf;
    size_t count;
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

/* One rank's copy to itself inside a collective: a device-to-device copy on the comm stream. */
static cpdit_status self_copy(nccl_state *s, float *dst, const float *src, size_t count,
                              cpdit_error *err)
{
    if (count == 0 || dst == src)
        return CPDIT_OK;
    return cuda_check(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice,
                                      s->stream),
                      "cudaMemcpyAsync", err);
}

/* Launch the queued point-to-point operations as one NCCL group. */
static cpdit_status flush_p2p(cpdit_comm *c, cpdit_error *err)
{
    nccl_state *s = state_of(c);
    if (s->npending == 0)
        return CPDIT_OK;
    cpdit_status st = after_compute(s, err);
    if (st == CPDIT_OK)
        st = nccl_check(ncclGroupStart(), "ncclGroupStart", err);
    for (int i = 0; st == CPDIT_OK && i < s->npending; i++) {
        p2p_op *op = &s->pending[i];
        if (op->count == 0)
            continue;
        st = op->send ? nccl_check(ncclSend(op->buf, op->count, ncclFloat, op->peer, s->nccl,
                                            s->stream),
                                   "ncclSend", err)
                      : nccl_check(ncclRecv(op->buf, op->count, ncclFloat, op->peer, s->nccl,
                                            s->stream),
                                   "ncclRecv", err);
    }
    cpdit_status end = nccl_check(ncclGroupEnd(), "ncclGroupEnd", st == CPDIT_OK ? err : NULL);
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

static cpdit_status nccl_alltoallv(cpdit_comm *c, const float *send, const size_t *send_counts,
                                   const size_t *send_displs, float *recv,
                                   const size_t *recv_counts, const size_t *recv_displs,
                                   cpdit_error *err)
{
    nccl_state *s = state_of(c);
    if (flush_p2p(c, err) || after_compute(s, err))
        return CPDIT_ERR_RUNTIME;
    cpdit_status st = self_copy(s, recv + recv_displs[c->rank], send + send_displs[c->rank],
                                send_counts[c->rank], err);
    if (st == CPDIT_OK)
        st = nccl_check(ncclGroupStart(), "ncclGroupStart", err);
    for (int p = 0; st == CPDIT_OK && p < c->size; p++) {
        if (p == c->rank)
            continue;
        if (send_counts[p])
            st = nccl_check(ncclSend(send + send_displs[p], send_counts[p], ncclFloat, p,
                                     s->nccl, s->stream),
                            "ncclSend", err);
        if (st == CPDIT_OK && recv_counts[p])
            st = nccl_check(ncclRecv(recv + recv_displs[p], recv_counts[p], ncclFloat, p,
                                     s->nccl, s->stream),
                            "ncclRecv", err);
    }
    cpdit_status end = nccl_check(ncclGroupEnd(), "ncclGroupEnd", st == CPDIT_OK ? err : NULL);
    if (st == CPDIT_OK)
        st = end;
    return st == CPDIT_OK ? before_compute(s, err) : st;
}

static cpdit_status nccl_allgatherv(cpdit_comm *c, const float *send, size_t send_count,
                                    float *recv, const size_t *recv_counts,
                                    const size_t *recv_displs, cpdit_error *err)
{
    nccl_state *s = state_of(c);
    if (flush_p2p(c, err) || after_compute(s, err))
        return CPDIT_ERR_RUNTIME;
    cpdit_status st = self_copy(s, recv + recv_displs[c->rank], send, send_count, err);
    if (st == CPDIT_OK)
        st = nccl_check(ncclGroupStart(), "ncclGroupStart", err);
    for (int p = 0; st == CPDIT_OK && p < c->size; p++) {
        if (p == c->rank)
            continue;
        if (send_count)
            st = nccl_check(ncclSend(send, send_count, ncclFloat, p, s->nccl, s->stream),
                            "ncclSend", err);
        if (st == CPDIT_OK && recv_counts[p])
            st = nccl_check(ncclRecv(recv + recv_displs[p], recv_counts[p], ncclFloat, p,
                                     s->nccl, s->stream),
                            "ncclRecv", err);
    }
    cpdit_status end = nccl_check(ncclGroupEnd(), "ncclGroupEnd", st == CPDIT_OK ? err : NULL);
    if (st == CPDIT_OK)
        st = end;
    return st == CPDIT_OK ? before_compute(s, err) : st;
}

static cpdit_status queue_p2p(cpdit_comm *c, int send, float *buf, size_t count, int peer,
                              cpdit_comm_request *req, cpdit_error *err)
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
    s->pending[s->npending++] = (p2p_op){send, buf, count, peer, r};
    if (send)
        s->nsend++;
    else
        s->nrecv++;
    req->impl = r;
    /* a send and a receive are queued: launch them together (the ring's step) */
    return (s->nsend > 0 && s->nrecv > 0) ? flush_p2p(c, err) : CPDIT_OK;
}

static cpdit_status nccl_isend(cpdit_comm *c, const float *buf, size_t count, int peer, int tag,
                               cpdit_comm_request *req, cpdit_error *err)
{
    (void)tag; /* NCCL orders messages per pair; tags only name them here */
    return queue_p2p(c, 1, (float *)buf, count, peer, req, err);
}

static cpdit_status nccl_irecv(cpdit_comm *c, float *buf, size_t count, int peer, int tag,
                               cpdit_comm_request *req, cpdit_error *err)
{
    (void)tag;
    return queue_p2p(c, 0, buf, count, peer, req, err);
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
    return nccl_check(ncclCommInitRank(&s->nccl, ctrl->size, id, ctrl->rank), "ncclCommInitRank",
                      err);
}

/* Implemented in comm_staged.c. */
cpdit_status cpdit_comm_staged_create(cpdit_comm *mpi, void *compute_stream, cpdit_comm **out,
                                      cpdit_error *err);

/* 1 on every rank when some node holds more ranks of comm than it has devices. */
static cpdit_status ranks_share_devices(MPI_Comm comm, int *shared, cpdit_error *err)
{
    MPI_Comm node;
    int local_size = 0, ndev = 0;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE, "MPI_Comm_split_type failed");
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) {
        cudaGetLastError();
        ndev = 0;
    }
    int mine = local_size > ndev, any = 0;
    if (MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, NCCL_WHERE, "MPI_Allreduce failed");
    *shared = any;
    return CPDIT_OK;
}

cpdit_status cpdit_comm_gpu_create(MPI_Comm comm, void *compute_stream, cpdit_comm_gpu_kind kind,
                                   cpdit_comm **out, cpdit_error *err)
{
    *out = NULL;
    if (kind == CPDIT_COMM_GPU_AUTO) {
        int shared = 0;
        if (ranks_share_devices(comm, &shared, err))
            return CPDIT_ERR_RUNTIME;
        kind = shared ? CPDIT_COMM_GPU_STAGED : CPDIT_COMM_GPU_NCCL;
    }
    cpdit_comm *ctrl = NULL;
    if (cpdit_comm_mpi_create(comm, 0, &ctrl, err))
        return CPDIT_ERR_RUNTIME;
    if (kind == CPDIT_COMM_GPU_STAGED)
        return cpdit_comm_staged_create(ctrl, compute_stream, out, err);

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
    if (rc != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "cuda",
                               "no CUDA device is visible to this rank (%s)",
                               rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    }
    *device = *local_rank % ndev;
    *shared = *local_size > ndev;
    return cuda_check(cudaSetDevice(*device), "cudaSetDevice", err);
}
