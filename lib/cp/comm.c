/* comm.c — the dispatchers of the communicator interface (see comm.h): argument checks that
 * every implementation needs, byte counters for the benchmarks, then the operation table. */
#include "lib/cp/comm.h"

#include <stdlib.h>

#define COMM_WHERE "comm"

/* Element bytes of the types (comm.h); 0 marks a value outside the enum. */
#define COMM_FLOAT_BYTES 4
#define COMM_DOUBLE_BYTES 8
#define COMM_INT64_BYTES 8
#define COMM_BF16_BYTES 2
/* What cpdit_comm_act_type returns for an activation dtype the communicators cannot move
 * (outside the enum: every dispatcher refuses it with a message). */
#define COMM_TYPE_INVALID ((cpdit_comm_dtype)-1)

size_t cpdit_comm_dtype_size(cpdit_comm_dtype type)
{
    switch (type) {
    case CPDIT_COMM_FLOAT: return COMM_FLOAT_BYTES;
    case CPDIT_COMM_DOUBLE: return COMM_DOUBLE_BYTES;
    case CPDIT_COMM_INT64: return COMM_INT64_BYTES;
    case CPDIT_COMM_BF16: return COMM_BF16_BYTES;
    }
    return 0;
}

cpdit_comm_dtype cpdit_comm_act_type(cpdit_dtype dtype)
{
    if (dtype == CPDIT_DTYPE_F32)
        return CPDIT_COMM_FLOAT;
    if (dtype == CPDIT_DTYPE_BF16)
        return CPDIT_COMM_BF16;
    return COMM_TYPE_INVALID;
}

static cpdit_status check_comm(const cpdit_comm *c, cpdit_error *err)
{
    if (!c || !c->ops)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, COMM_WHERE, "no communicator given");
    return CPDIT_OK;
}

/* The communicator and a data mover's element type. */
static cpdit_status check_mover(const cpdit_comm *c, cpdit_comm_dtype type, const char *what,
                                cpdit_error *err)
{
    if (check_comm(c, err))
        return CPDIT_ERR_RUNTIME;
    if (cpdit_comm_dtype_size(type) == 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, COMM_WHERE,
                               "%s: invalid element type %d (an activation dtype other than "
                               "F32 and BF16 given to cpdit_comm_act_type?)",
                               what, (int)type);
    return CPDIT_OK;
}

static cpdit_status check_peer(const cpdit_comm *c, int peer, const char *what,
                               cpdit_error *err)
{
    if (peer < 0 || peer >= c->size)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, COMM_WHERE,
                               "%s: peer %d is not a rank of this %d-rank %s communicator", what,
                               peer, c->size, c->ops->name);
    return CPDIT_OK;
}

/* counts: size entries of elements of esize bytes. Sum of all but this rank's entry, in
 * bytes. */
static unsigned long long others_bytes(const cpdit_comm *c, const size_t *counts, size_t esize)
{
    unsigned long long n = 0;
    for (int p = 0; p < c->size; p++)
        if (p != c->rank)
            n += (unsigned long long)counts[p] * esize;
    return n;
}

cpdit_status cpdit_comm_alltoallv(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                  const size_t *send_counts, const size_t *send_displs,
                                  void *recv, const size_t *recv_counts,
                                  const size_t *recv_displs, cpdit_error *err)
{
    if (check_mover(c, type, "alltoallv", err))
        return CPDIT_ERR_RUNTIME;
    const size_t esize = cpdit_comm_dtype_size(type);
    cpdit_status st = c->ops->alltoallv(c, type, send, send_counts, send_displs, recv,
                                        recv_counts, recv_displs, err);
    if (st == CPDIT_OK) {
        c->bytes_sent += others_bytes(c, send_counts, esize);
        c->bytes_received += others_bytes(c, recv_counts, esize);
    }
    return st;
}

cpdit_status cpdit_comm_allgatherv(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                   size_t send_count, void *recv, const size_t *recv_counts,
                                   const size_t *recv_displs, cpdit_error *err)
{
    if (check_mover(c, type, "allgatherv", err))
        return CPDIT_ERR_RUNTIME;
    const size_t esize = cpdit_comm_dtype_size(type);
    if (recv_counts[c->rank] != send_count)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, COMM_WHERE,
                               "allgatherv: rank %d sends %zu elements but recv_counts[%d] = "
                               "%zu",
                               c->rank, send_count, c->rank, recv_counts[c->rank]);
    cpdit_status st =
        c->ops->allgatherv(c, type, send, send_count, recv, recv_counts, recv_displs, err);
    if (st == CPDIT_OK) {
        /* logical volume: our block reaches every other rank, theirs reach us */
        c->bytes_sent += (unsigned long long)send_count * esize * (unsigned)(c->size - 1);
        c->bytes_received += others_bytes(c, recv_counts, esize);
    }
    return st;
}

cpdit_status cpdit_comm_isend(cpdit_comm *c, cpdit_comm_dtype type, const void *buf,
                              size_t count, int peer, int tag, cpdit_comm_request *req,
                              cpdit_error *err)
{
    if (check_mover(c, type, "isend", err) || check_peer(c, peer, "isend", err))
        return CPDIT_ERR_RUNTIME;
    cpdit_status st = c->ops->isend(c, type, buf, count, peer, tag, req, err);
    if (st == CPDIT_OK && peer != c->rank)
        c->bytes_sent += (unsigned long long)count * cpdit_comm_dtype_size(type);
    return st;
}

cpdit_status cpdit_comm_irecv(cpdit_comm *c, cpdit_comm_dtype type, void *buf, size_t count,
                              int peer, int tag, cpdit_comm_request *req, cpdit_error *err)
{
    if (check_mover(c, type, "irecv", err) || check_peer(c, peer, "irecv", err))
        return CPDIT_ERR_RUNTIME;
    cpdit_status st = c->ops->irecv(c, type, buf, count, peer, tag, req, err);
    if (st == CPDIT_OK && peer != c->rank)
        c->bytes_received += (unsigned long long)count * cpdit_comm_dtype_size(type);
    return st;
}

cpdit_status cpdit_comm_test(cpdit_comm *c, cpdit_comm_request *req, int *done,
                             cpdit_error *err)
{
    if (check_comm(c, err))
        return CPDIT_ERR_RUNTIME;
    if (!req || !req->impl) {
        *done = 1;
        return CPDIT_OK;
    }
    return c->ops->test(c, req, done, err);
}

cpdit_status cpdit_comm_wait(cpdit_comm *c, cpdit_comm_request *req, cpdit_error *err)
{
    if (check_comm(c, err))
        return CPDIT_ERR_RUNTIME;
    if (!req || !req->impl)
        return CPDIT_OK;
    return c->ops->wait(c, req, err);
}

cpdit_status cpdit_comm_send(cpdit_comm *c, cpdit_comm_dtype type, const void *buf,
                             size_t count, int peer, int tag, cpdit_error *err)
{
    cpdit_comm_request r = CPDIT_COMM_REQUEST_INIT;
    if (cpdit_comm_isend(c, type, buf, count, peer, tag, &r, err))
        return err ? err->status : CPDIT_ERR_RUNTIME;
    return cpdit_comm_wait(c, &r, err);
}

cpdit_status cpdit_comm_recv(cpdit_comm *c, cpdit_comm_dtype type, void *buf, size_t count,
                             int peer, int tag, cpdit_error *err)
{
    cpdit_comm_request r = CPDIT_COMM_REQUEST_INIT;
    if (cpdit_comm_irecv(c, type, buf, count, peer, tag, &r, err))
        return err ? err->status : CPDIT_ERR_RUNTIME;
    return cpdit_comm_wait(c, &r, err);
}

cpdit_status cpdit_comm_barrier(cpdit_comm *c, cpdit_error *err)
{
    if (check_comm(c, err))
        return CPDIT_ERR_RUNTIME;
    return c->ops->barrier(c, err);
}

cpdit_status cpdit_comm_allreduce(cpdit_comm *c, void *buf, size_t count, cpdit_comm_dtype type,
                                  cpdit_comm_op op, cpdit_error *err)
{
    if (check_mover(c, type, "allreduce", err))
        return CPDIT_ERR_RUNTIME;
    if (type == CPDIT_COMM_BF16)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, COMM_WHERE,
                               "allreduce: bf16 elements are moved, never reduced (reduce in "
                               "fp32: CPDIT_COMM_FLOAT)");
    if (op != CPDIT_COMM_SUM && op != CPDIT_COMM_MAX && op != CPDIT_COMM_MIN)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, COMM_WHERE,
                               "allreduce: invalid reduction %d", (int)op);
    return c->ops->allreduce(c, buf, count, type, op, err);
}

cpdit_status cpdit_comm_bcast(cpdit_comm *c, void *buf, size_t bytes, int root,
                              cpdit_error *err)
{
    if (check_comm(c, err) || check_peer(c, root, "bcast", err))
        return CPDIT_ERR_RUNTIME;
    return c->ops->bcast(c, buf, bytes, root, err);
}

/* What one rank contributes to the agreement (reduced with MAX): its status, and
 * size - rank when it failed (0 when not), so that the maximum names the lowest failing rank. */
enum { AGREE_STATUS, AGREE_FIRST, AGREE_N };

cpdit_status cpdit_comm_agree(cpdit_comm *c, cpdit_status st, cpdit_error *err)
{
    if (!c || c->size <= 1)
        return st;
    cpdit_error local, cerr;
    if (!err) {
        cpdit_error_clear(&local);
        err = &local;
    }
    cpdit_error_clear(&cerr);
    long long v[AGREE_N] = {(long long)st, st != CPDIT_OK ? (long long)(c->size - c->rank) : 0};
    if (cpdit_comm_allreduce(c, v, AGREE_N, CPDIT_COMM_INT64, CPDIT_COMM_MAX, &cerr))
        return st ? st : cpdit_error_set(err, CPDIT_ERR_BROKEN, cerr.where,
                                         "agreeing on the ranks' status: %s", cerr.what);
    if (v[AGREE_FIRST] == 0)
        return CPDIT_OK;
    const int first = c->size - (int)v[AGREE_FIRST];
    cpdit_error theirs;
    cpdit_error_clear(&theirs);
    if (c->rank == first) {
        theirs = *err;
        theirs.status = st;
    }
    if (cpdit_comm_bcast(c, &theirs, sizeof theirs, first, &cerr))
        return st ? st : cpdit_error_set(err, CPDIT_ERR_BROKEN, cerr.where,
                                         "receiving the failed rank's message: %s", cerr.what);
    if (st != CPDIT_OK)
        return st;
    if (theirs.status == CPDIT_OK) /* a failing rank that did not fill its error */
        theirs.status = (cpdit_status)v[AGREE_STATUS];
    theirs.what[CPDIT_ERROR_WHAT_MAX - 1] = '\0';
    theirs.where[CPDIT_ERROR_WHERE_MAX - 1] = '\0';
    return cpdit_error_set(err, theirs.status, theirs.where,
                           "%s (failed on another rank: %d of %d)", theirs.what, first, c->size);
}

void cpdit_comm_reset_counters(cpdit_comm *c)
{
    if (!c)
        return;
    c->bytes_sent = 0;
    c->bytes_received = 0;
}

void cpdit_comm_destroy(cpdit_comm *c)
{
    if (!c)
        return;
    if (c->ops && c->ops->destroy)
        c->ops->destroy(c);
    free(c);
}
