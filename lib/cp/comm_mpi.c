/* comm_mpi.c — cpdit_comm over MPI (see comm.h, comm_mpi.h).
 *
 * MPI counts and displacements are int. Transfers that do not fit are never truncated:
 * point-to-point messages are split into chunks of at most max_count elements (same split on
 * both sides, so chunk i of a send matches chunk i of the receive: MPI keeps the order of
 * messages between one pair with one tag), and all-to-all / all-gather calls whose counts or
 * displacements do not fit run as chunked point-to-point exchanges instead of one collective.
 * Every count, displacement and chunk is in elements of the call's type (mpi_type_of); bf16
 * travels as MPI_UINT16_T, bits as they are (it is never reduced).
 */
#include "lib/cp/comm_mpi.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MPI_WHERE "comm/mpi"

typedef struct mpi_state {
    MPI_Comm comm;
} mpi_state;

/* A possibly chunked non-blocking operation: n MPI requests. */
typedef struct mpi_request {
    int n;
    MPI_Request r[];
} mpi_request;

static size_t g_max_count = INT_MAX;

void cpdit_comm_mpi_set_max_count(size_t n)
{
    g_max_count = (n == 0 || n > (size_t)INT_MAX) ? (size_t)INT_MAX : n;
}

size_t cpdit_comm_mpi_max_count(void)
{
    return g_max_count;
}

static MPI_Comm comm_of(const cpdit_comm *c)
{
    return ((const mpi_state *)c->impl)->comm;
}

/* The MPI datatype of a comm element type (the dispatchers in comm.c refuse other values). */
static MPI_Datatype mpi_type_of(cpdit_comm_dtype type)
{
    switch (type) {
    case CPDIT_COMM_FLOAT: return MPI_FLOAT;
    case CPDIT_COMM_DOUBLE: return MPI_DOUBLE;
    case CPDIT_COMM_INT64: return MPI_LONG_LONG;
    case CPDIT_COMM_BF16: return MPI_UINT16_T;
    }
    return MPI_DATATYPE_NULL;
}

/* Bytes at element offset n of a buffer of type (displacements and chunk offsets). */
static char *at(void *buf, cpdit_comm_dtype type, size_t n)
{
    return (char *)buf + n * cpdit_comm_dtype_size(type);
}

/* Turn an MPI return code into a cpdit error. Returns CPDIT_OK for MPI_SUCCESS. */
static cpdit_status mpi_check(int rc, const char *call, cpdit_error *err)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (rc == MPI_SUCCESS)
        return CPDIT_OK;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error code %d", rc);
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE, "%s failed: %s", call, msg);
}

static size_t chunks_of(size_t count)
{
    return count == 0 ? 1 : (count + g_max_count - 1) / g_max_count;
}

/* Post count elements of type as chunked isend (send = 1) or irecv (send = 0) into
 * reqs[0..chunks). */
static cpdit_status post_chunks(MPI_Comm comm, int send, cpdit_comm_dtype type, void *buf,
                                size_t count, int peer, int tag, MPI_Request *reqs,
                                cpdit_error *err)
{
    const MPI_Datatype dt = mpi_type_of(type);
    size_t n = chunks_of(count);
    for (size_t i = 0; i < n; i++) {
        size_t off = i * g_max_count;
        size_t len = count - off < g_max_count ? count - off : g_max_count;
        void *p = at(buf, type, off);
        int rc = send ? MPI_Isend(p, (int)len, dt, peer, tag, comm, &reqs[i])
                      : MPI_Irecv(p, (int)len, dt, peer, tag, comm, &reqs[i]);
        if (rc != MPI_SUCCESS) {
            /* let the chunks already posted finish before reporting */
            MPI_Waitall((int)i, reqs, MPI_STATUSES_IGNORE);
            return mpi_check(rc, send ? "MPI_Isend" : "MPI_Irecv", err);
        }
    }
    return CPDIT_OK;
}

static cpdit_status p2p_start(cpdit_comm *c, int send, cpdit_comm_dtype type, void *buf,
                              size_t count, int peer, int tag, cpdit_comm_request *req,
                              cpdit_error *err)
{
    size_t n = chunks_of(count);
    if (tag < 0 || tag >= CPDIT_COMM_MPI_COLLECTIVE_TAG)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE,
                               "tag %d out of range 0..%d", tag,
                               CPDIT_COMM_MPI_COLLECTIVE_TAG - 1);
    if (n > (size_t)INT_MAX)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE,
                               "message of %zu elements needs too many chunks", count);
    mpi_request *r = malloc(sizeof *r + n * sizeof(MPI_Request));
    if (!r)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE, "out of memory");
    r->n = (int)n;
    if (post_chunks(comm_of(c), send, type, buf, count, peer, tag, r->r, err)) {
        free(r);
        return CPDIT_ERR_RUNTIME;
    }
    req->impl = r;
    return CPDIT_OK;
}

static cpdit_status mpi_isend(cpdit_comm *c, cpdit_comm_dtype type, const void *buf,
                              size_t count, int peer, int tag, cpdit_comm_request *req,
                              cpdit_error *err)
{
    /* MPI_Isend takes a const buffer since MPI-3; the cast only feeds the shared helper */
    return p2p_start(c, 1, type, (void *)(uintptr_t)buf, count, peer, tag, req, err);
}

static cpdit_status mpi_irecv(cpdit_comm *c, cpdit_comm_dtype type, void *buf, size_t count,
                              int peer, int tag, cpdit_comm_request *req, cpdit_error *err)
{
    return p2p_start(c, 0, type, buf, count, peer, tag, req, err);
}

static cpdit_status mpi_test(cpdit_comm *c, cpdit_comm_request *req, int *done,
                             cpdit_error *err)
{
    mpi_request *r = req->impl;
    int flag = 0;
    int rc = MPI_Testall(r->n, r->r, &flag, MPI_STATUSES_IGNORE);
    *done = 0;
    if (rc != MPI_SUCCESS) {
        free(r);
        req->impl = NULL;
        return mpi_check(rc, "MPI_Testall", err);
    }
    if (flag) {
        free(r);
        req->impl = NULL;
        *done = 1;
    }
    return CPDIT_OK;
}

static cpdit_status mpi_wait(cpdit_comm *c, cpdit_comm_request *req, cpdit_error *err)
{
    mpi_request *r = req->impl;
    int rc = MPI_Waitall(r->n, r->r, MPI_STATUSES_IGNORE);
    free(r);
    req->impl = NULL;
    return mpi_check(rc, "MPI_Waitall", err);
}

/* 1 when every entry of the n-entry arrays fits one MPI call. */
static int fits_int(const size_t *counts, const size_t *displs, int n)
{
    for (int p = 0; p < n; p++)
        if (counts[p] > g_max_count || displs[p] > g_max_count)
            return 0;
    return 1;
}

/* The large-message path of the collectives: every rank p sends its segment for q
 * (send_counts[p]... as seen from p) with chunked isend, receives with chunked irecv,
 * copies its own segment locally, then waits for everything. */
static cpdit_status exchange_p2p(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                 const size_t *send_counts, const size_t *send_displs,
                                 void *recv, const size_t *recv_counts,
                                 const size_t *recv_displs, cpdit_error *err)
{
    MPI_Comm comm = comm_of(c);
    size_t total = 0;
    for (int p = 0; p < c->size; p++)
        if (p != c->rank)
            total += chunks_of(send_counts[p]) + chunks_of(recv_counts[p]);
    MPI_Request *reqs = malloc((total ? total : 1) * sizeof *reqs);
    if (!reqs)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE, "out of memory");
    size_t nr = 0;
    cpdit_status st = CPDIT_OK;
    for (int p = 0; p < c->size && st == CPDIT_OK; p++) {
        if (p == c->rank)
            continue;
        st = post_chunks(comm, 0, type, at(recv, type, recv_displs[p]), recv_counts[p], p,
                         CPDIT_COMM_MPI_COLLECTIVE_TAG, reqs + nr, err);
        if (st == CPDIT_OK)
            nr += chunks_of(recv_counts[p]);
    }
    for (int p = 0; p < c->size && st == CPDIT_OK; p++) {
        if (p == c->rank)
            continue;
        st = post_chunks(comm, 1, type, at((void *)(uintptr_t)send, type, send_displs[p]),
                         send_counts[p], p, CPDIT_COMM_MPI_COLLECTIVE_TAG, reqs + nr, err);
        if (st == CPDIT_OK)
            nr += chunks_of(send_counts[p]);
    }
    if (st == CPDIT_OK && send_counts[c->rank] != recv_counts[c->rank])
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE,
                             "rank %d sends %zu elements to itself but expects %zu", c->rank,
                             send_counts[c->rank], recv_counts[c->rank]);
    if (st == CPDIT_OK && send_counts[c->rank])
        memmove(at(recv, type, recv_displs[c->rank]),
                at((void *)(uintptr_t)send, type, send_displs[c->rank]),
                send_counts[c->rank] * cpdit_comm_dtype_size(type));
    int rc = MPI_Waitall((int)nr, reqs, MPI_STATUSES_IGNORE);
    free(reqs);
    if (st == CPDIT_OK)
        st = mpi_check(rc, "MPI_Waitall (chunked exchange)", err);
    return st;
}

/* Copy n size_t values into int (caller checked they fit). */
static void to_int(int *dst, const size_t *src, int n)
{
    for (int p = 0; p < n; p++)
        dst[p] = (int)src[p];
}

static cpdit_status mpi_alltoallv(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                  const size_t *send_counts, const size_t *send_displs,
                                  void *recv, const size_t *recv_counts,
                                  const size_t *recv_displs, cpdit_error *err)
{
    int n = c->size;
    const MPI_Datatype dt = mpi_type_of(type);
    if (!fits_int(send_counts, send_displs, n) || !fits_int(recv_counts, recv_displs, n))
        return exchange_p2p(c, type, send, send_counts, send_displs, recv, recv_counts,
                            recv_displs, err);
    int *iv = malloc(4 * (size_t)n * sizeof *iv);
    if (!iv)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE, "out of memory");
    to_int(iv, send_counts, n);
    to_int(iv + n, send_displs, n);
    to_int(iv + 2 * n, recv_counts, n);
    to_int(iv + 3 * n, recv_displs, n);
    int rc = MPI_Alltoallv(send, iv, iv + n, dt, recv, iv + 2 * n, iv + 3 * n, dt, comm_of(c));
    free(iv);
    return mpi_check(rc, "MPI_Alltoallv", err);
}

static cpdit_status mpi_allgatherv(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                   size_t send_count, void *recv, const size_t *recv_counts,
                                   const size_t *recv_displs, cpdit_error *err)
{
    int n = c->size;
    const MPI_Datatype dt = mpi_type_of(type);
    if (!fits_int(recv_counts, recv_displs, n)) {
        /* as an all-to-all that sends the same block to everyone */
        size_t *sc = malloc(2 * (size_t)n * sizeof *sc);
        if (!sc)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE, "out of memory");
        for (int p = 0; p < n; p++) {
            sc[p] = send_count;
            sc[n + p] = 0;
        }
        cpdit_status st =
            exchange_p2p(c, type, send, sc, sc + n, recv, recv_counts, recv_displs, err);
        free(sc);
        return st;
    }
    int *iv = malloc(2 * (size_t)n * sizeof *iv);
    if (!iv)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE, "out of memory");
    to_int(iv, recv_counts, n);
    to_int(iv + n, recv_displs, n);
    int rc = MPI_Allgatherv(send, (int)send_count, dt, recv, iv, iv + n, dt, comm_of(c));
    free(iv);
    return mpi_check(rc, "MPI_Allgatherv", err);
}

static cpdit_status mpi_barrier(cpdit_comm *c, cpdit_error *err)
{
    return mpi_check(MPI_Barrier(comm_of(c)), "MPI_Barrier", err);
}

static cpdit_status mpi_allreduce(cpdit_comm *c, void *buf, size_t count, cpdit_comm_dtype type,
                                  cpdit_comm_op op, cpdit_error *err)
{
    const MPI_Datatype dt = mpi_type_of(type);
    MPI_Op mop = op == CPDIT_COMM_MAX ? MPI_MAX : op == CPDIT_COMM_MIN ? MPI_MIN : MPI_SUM;
    if (type == CPDIT_COMM_BF16 || dt == MPI_DATATYPE_NULL) /* comm.c refuses these first */
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE,
                               "allreduce: element type %d cannot be reduced", (int)type);
    if (count > (size_t)INT_MAX)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE,
                               "allreduce of %zu elements: meant for small things", count);
    return mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, dt, mop, comm_of(c)),
                     "MPI_Allreduce", err);
}

static cpdit_status mpi_bcast(cpdit_comm *c, void *buf, size_t bytes, int root,
                              cpdit_error *err)
{
    char *p = buf;
    size_t off = 0;
    do { /* at least one call, so that a 0-byte broadcast still synchronises like MPI's */
        size_t len = bytes - off < g_max_count ? bytes - off : g_max_count;
        int rc = MPI_Bcast(p + off, (int)len, MPI_BYTE, root, comm_of(c));
        if (rc != MPI_SUCCESS)
            return mpi_check(rc, "MPI_Bcast", err);
        off += len;
    } while (off < bytes);
    return CPDIT_OK;
}

static void mpi_destroy(cpdit_comm *c)
{
    mpi_state *s = c->impl;
    if (!s)
        return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && s->comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->comm);
    free(s);
    c->impl = NULL;
}

static const cpdit_comm_ops mpi_ops = {
    .name = "mpi",
    .alltoallv = mpi_alltoallv,
    .allgatherv = mpi_allgatherv,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .test = mpi_test,
    .wait = mpi_wait,
    .barrier = mpi_barrier,
    .allreduce = mpi_allreduce,
    .bcast = mpi_bcast,
    .destroy = mpi_destroy,
};

cpdit_status cpdit_comm_mpi_create(MPI_Comm comm, int take_ownership, cpdit_comm **out,
                                   cpdit_error *err)
{
    *out = NULL;
    if (comm == MPI_COMM_NULL)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE, "MPI_COMM_NULL given");
    cpdit_comm *c = calloc(1, sizeof *c);
    mpi_state *s = calloc(1, sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        if (take_ownership)
            MPI_Comm_free(&comm);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, MPI_WHERE, "out of memory");
    }
    if (take_ownership) {
        s->comm = comm;
    } else {
        int rc = MPI_Comm_dup(comm, &s->comm);
        if (rc != MPI_SUCCESS) {
            free(c);
            free(s);
            return mpi_check(rc, "MPI_Comm_dup", err);
        }
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    c->ops = &mpi_ops;
    c->impl = s;
    MPI_Comm_rank(s->comm, &c->rank);
    MPI_Comm_size(s->comm, &c->size);
    *out = c;
    return CPDIT_OK;
}

MPI_Comm cpdit_comm_mpi_handle(const cpdit_comm *c)
{
    if (!c || c->ops != &mpi_ops || !c->impl)
        return MPI_COMM_NULL;
    return comm_of(c);
}

cpdit_status cpdit_comm_agree_mpi(MPI_Comm comm, cpdit_status st, cpdit_error *err)
{
    mpi_state s = {comm};
    cpdit_comm c;
    memset(&c, 0, sizeof c);
    c.ops = &mpi_ops;
    c.impl = &s;
    if (MPI_Comm_rank(comm, &c.rank) != MPI_SUCCESS || MPI_Comm_size(comm, &c.size) != MPI_SUCCESS)
        return st ? st : cpdit_error_set(err, CPDIT_ERR_BROKEN, MPI_WHERE,
                                         "MPI_Comm_rank/size failed while agreeing on errors");
    return cpdit_comm_agree(&c, st, err);
}
