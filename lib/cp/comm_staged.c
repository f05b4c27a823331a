/* comm_staged.c — host-staged MPI for device buffers (the "staged" kind of comm_nccl.h).
 *
 * Device data is copied to host memory, moved by the MPI communicator's own operations, and
 * copied back; CUDA-aware MPI is not assumed. Every copy is queued on the compute stream and
 * waited for (cudaMemcpyAsync + cudaStreamSynchronize): a copy out then sees all the compute
 * work queued before it, and a copy in lands before any later compute work and never while
 * earlier queued kernels still read the destination (the compute stream is non-blocking, so a
 * plain cudaMemcpy on the legacy stream would be ordered with neither; and a pageable
 * cudaMemcpy host-to-device may return before the DMA has landed). So this path is for
 * correctness on shared GPUs (several ranks, one device), not for speed. Control collectives
 * (barrier, allreduce, bcast) pass straight to MPI on host memory.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm_nccl.h"

#define STAGED_WHERE "comm/staged"

typedef struct staged_state {
    cpdit_comm *mpi;
    cudaStream_t compute;
    char *host_send, *host_recv; /* grown on demand, kept for the next call */
    size_t send_cap, recv_cap;   /* in bytes */
} staged_state;

/* A staged point-to-point request: the MPI request plus its host copy. */
typedef struct staged_request {
    cpdit_comm_request inner;
    void *host;
    void *device_dst; /* receive: where the data goes on completion; NULL for a send */
    size_t bytes;
} staged_request;

static staged_state *state_of(cpdit_comm *c)
{
    return (staged_state *)c->impl;
}

static cpdit_status cuda_check(cudaError_t rc, const char *call, cpdit_error *err)
{
    if (rc == cudaSuccess)
        return CPDIT_OK;
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, STAGED_WHERE, "%s failed: %s", call,
                           cudaGetErrorString(rc));
}

/* *buf holds at least need bytes. */
static cpdit_status grow(char **buf, size_t *cap, size_t need, cpdit_error *err)
{
    if (need <= *cap)
        return CPDIT_OK;
    char *p = realloc(*buf, need);
    if (!p)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, STAGED_WHERE,
                               "out of host memory staging %zu bytes", need);
    *buf = p;
    *cap = need;
    return CPDIT_OK;
}

/* Extent in elements of a (counts, displs) layout over n peers. */
static size_t extent(const size_t *counts, const size_t *displs, int n)
{
    size_t e = 0;
    for (int p = 0; p < n; p++)
        if (counts[p] && displs[p] + counts[p] > e)
            e = displs[p] + counts[p];
    return e;
}

/* One copy of bytes bytes on the compute stream, complete (and ordered after the work queued
 * before it) on return. */
static cpdit_status copy_sync(staged_state *s, void *dst, const void *src, size_t bytes,
                              enum cudaMemcpyKind kind, cpdit_error *err)
{
    if (bytes == 0)
        return CPDIT_OK;
    if (cuda_check(cudaMemcpyAsync(dst, src, bytes, kind, s->compute),
                   "cudaMemcpyAsync", err))
        return CPDIT_ERR_RUNTIME;
    return cuda_check(cudaStreamSynchronize(s->compute), "cudaStreamSynchronize", err);
}

static cpdit_status to_host(staged_state *s, void *host, const void *dev, size_t bytes,
                            cpdit_error *err)
{
    return copy_sync(s, host, dev, bytes, cudaMemcpyDeviceToHost, err);
}

static cpdit_status to_device(staged_state *s, void *dev, const void *host, size_t bytes,
                              cpdit_error *err)
{
    return copy_sync(s, dev, host, bytes, cudaMemcpyHostToDevice, err);
}

/* Counts and displacements are elements of type (esz bytes each); the staging is in bytes. */
static cpdit_status staged_alltoallv(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                     const size_t *send_counts, const size_t *send_displs,
                                     void *recv, const size_t *recv_counts,
                                     const size_t *recv_displs, cpdit_error *err)
{
    staged_state *s = state_of(c);
    const size_t esz = cpdit_comm_dtype_size(type);
    size_t ns = extent(send_counts, send_displs, c->size) * esz;
    size_t nr = extent(recv_counts, recv_displs, c->size) * esz;
    if (grow(&s->host_send, &s->send_cap, ns, err) || grow(&s->host_recv, &s->recv_cap, nr, err) ||
        to_host(s, s->host_send, send, ns, err))
        return CPDIT_ERR_RUNTIME;
    if (s->mpi->ops->alltoallv(s->mpi, type, s->host_send, send_counts, send_displs,
                               s->host_recv, recv_counts, recv_displs, err))
        return CPDIT_ERR_RUNTIME;
    /* copy back only the received segments: the rest of recv is not ours to overwrite */
    for (int p = 0; p < c->size; p++)
        if (to_device(s, (char *)recv + recv_displs[p] * esz, s->host_recv + recv_displs[p] * esz,
                      recv_counts[p] * esz, err))
            return CPDIT_ERR_RUNTIME;
    return CPDIT_OK;
}

static cpdit_status staged_allgatherv(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                      size_t send_count, void *recv, const size_t *recv_counts,
                                      const size_t *recv_displs, cpdit_error *err)
{
    staged_state *s = state_of(c);
    const size_t esz = cpdit_comm_dtype_size(type);
    size_t nr = extent(recv_counts, recv_displs, c->size) * esz;
    if (grow(&s->host_send, &s->send_cap, send_count * esz, err) ||
        grow(&s->host_recv, &s->recv_cap, nr, err) ||
        to_host(s, s->host_send, send, send_count * esz, err))
        return CPDIT_ERR_RUNTIME;
    if (s->mpi->ops->allgatherv(s->mpi, type, s->host_send, send_count, s->host_recv,
                                recv_counts, recv_displs, err))
        return CPDIT_ERR_RUNTIME;
    for (int p = 0; p < c->size; p++)
        if (to_device(s, (char *)recv + recv_displs[p] * esz, s->host_recv + recv_displs[p] * esz,
                      recv_counts[p] * esz, err))
            return CPDIT_ERR_RUNTIME;
    return CPDIT_OK;
}

static cpdit_status post(cpdit_comm *c, int send, cpdit_comm_dtype type, void *buf,
                         size_t count, int peer, int tag, cpdit_comm_request *req,
                         cpdit_error *err)
{
    staged_state *s = state_of(c);
    const size_t bytes = count * cpdit_comm_dtype_size(type);
    staged_request *r = calloc(1, sizeof *r);
    void *host = malloc(bytes ? bytes : 1);
    if (!r || !host) {
        free(r);
        free(host);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, STAGED_WHERE, "out of host memory");
    }
    r->host = host;
    r->bytes = bytes;
    cpdit_status st;
    if (send) {
        st = to_host(s, host, buf, bytes, err);
        if (st == CPDIT_OK)
            st = s->mpi->ops->isend(s->mpi, type, host, count, peer, tag, &r->inner, err);
    } else {
        r->device_dst = buf;
        st = s->mpi->ops->irecv(s->mpi, type, host, count, peer, tag, &r->inner, err);
    }
    if (st != CPDIT_OK) {
        free(host);
        free(r);
        return st;
    }
    req->impl = r;
    return CPDIT_OK;
}

static cpdit_status staged_isend(cpdit_comm *c, cpdit_comm_dtype type, const void *buf,
                                 size_t count, int peer, int tag, cpdit_comm_request *req,
                                 cpdit_error *err)
{
    return post(c, 1, type, (void *)(uintptr_t)buf, count, peer, tag, req, err);
}

static cpdit_status staged_irecv(cpdit_comm *c, cpdit_comm_dtype type, void *buf, size_t count,
                                 int peer, int tag, cpdit_comm_request *req, cpdit_error *err)
{
    return post(c, 0, type, buf, count, peer, tag, req, err);
}

/* The MPI part finished: land a receive on the device and release the request. */
static cpdit_status finish(staged_state *s, cpdit_comm_request *req, cpdit_error *err)
{
    staged_request *r = req->impl;
    cpdit_status st =
        r->device_dst ? to_device(s, r->device_dst, r->host, r->bytes, err) : CPDIT_OK;
    free(r->host);
    free(r);
    req->impl = NULL;
    return st;
}

static cpdit_status staged_test(cpdit_comm *c, cpdit_comm_request *req, int *done,
                                cpdit_error *err)
{
    *done = 1;
    if (!req->impl)
        return CPDIT_OK;
    staged_request *r = req->impl;
    cpdit_comm *m = state_of(c)->mpi;
    if (m->ops->test(m, &r->inner, done, err))
        return CPDIT_ERR_RUNTIME;
    return *done ? finish(state_of(c), req, err) : CPDIT_OK;
}

static cpdit_status staged_wait(cpdit_comm *c, cpdit_comm_request *req, cpdit_error *err)
{
    if (!req->impl)
        return CPDIT_OK;
    staged_request *r = req->impl;
    cpdit_comm *m = state_of(c)->mpi;
    if (m->ops->wait(m, &r->inner, err))
        return CPDIT_ERR_RUNTIME;
    return finish(state_of(c), req, err);
}

static cpdit_status staged_barrier(cpdit_comm *c, cpdit_error *err)
{
    cpdit_comm *m = state_of(c)->mpi;
    return m->ops->barrier(m, err);
}

static cpdit_status staged_allreduce(cpdit_comm *c, void *buf, size_t count,
                                     cpdit_comm_dtype type, cpdit_comm_op op, cpdit_error *err)
{
    cpdit_comm *m = state_of(c)->mpi;
    return m->ops->allreduce(m, buf, count, type, op, err);
}

static cpdit_status staged_bcast(cpdit_comm *c, void *buf, size_t bytes, int root,
                                 cpdit_error *err)
{
    cpdit_comm *m = state_of(c)->mpi;
    return m->ops->bcast(m, buf, bytes, root, err);
}

static void staged_destroy(cpdit_comm *c)
{
    staged_state *s = state_of(c);
    if (!s)
        return;
    cpdit_comm_destroy(s->mpi);
    free(s->host_send);
    free(s->host_recv);
    free(s);
    c->impl = NULL;
}

static const cpdit_comm_ops staged_ops = {
    .name = "staged",
    .alltoallv = staged_alltoallv,
    .allgatherv = staged_allgatherv,
    .isend = staged_isend,
    .irecv = staged_irecv,
    .test = staged_test,
    .wait = staged_wait,
    .barrier = staged_barrier,
    .allreduce = staged_allreduce,
    .bcast = staged_bcast,
    .destroy = staged_destroy,
};

/* Wrap an MPI communicator (taken over: destroyed with the result). */
cpdit_status cpdit_comm_staged_create(cpdit_comm *mpi, void *compute_stream, cpdit_comm **out,
                                      cpdit_error *err);
cpdit_status cpdit_comm_staged_create(cpdit_comm *mpi, void *compute_stream, cpdit_comm **out,
                                      cpdit_error *err)
{
    *out = NULL;
    staged_state *s = calloc(1, sizeof *s);
    cpdit_comm *c = calloc(1, sizeof *c);
    if (!s || !c) {
        free(s);
        free(c);
        cpdit_comm_destroy(mpi);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, STAGED_WHERE, "out of memory");
    }
    s->mpi = mpi;
    s->compute = (cudaStream_t)compute_stream;
    c->ops = &staged_ops;
    c->impl = s;
    c->rank = mpi->rank;
    c->size = mpi->size;
    *out = c;
    return CPDIT_OK;
}
