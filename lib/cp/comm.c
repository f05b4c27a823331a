/* comm.c — the dispatchers of the communicator interface (see comm.h): argument checks that
 * every implementation needs, byte counters for the benchmarks, then the operation table. */
#include "lib/cp/comm.h"

#include <stdlib.h>

#define COMM_WHERE "comm"

static cpdit_status check_comm(const cpdit_comm *c, cpdit_error *err)
{
    if (!c || !c->ops)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, COMM_WHERE, "no communicator given");
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

/* counts: size entries of floats. Sum of all but this rank's entry, in bytes. */
static unsigned long long others_bytes(const cpdit_comm *c, const size_t *counts)
{
    unsigned long long n = 0;
    for (int p = 0; p < c->size; p++)
        if (p != c->rank)
            n += (unsigned long long)counts[p] * sizeof(float);
    return n;
}

cpdit_status cpdit_comm_alltoallv(cpdit_comm *c, const float *send, const size_t *send_counts,
                                  const size_t *send_displs, float *recv,
                                  const size_t *recv_counts, const size_t *recv_displs,
                                  cpdit_error *err)
{
    if (check_comm(c, err))
        return CPDIT_ERR_RUNTIME;
    cpdit_status st = c->ops->alltoallv(c, send, send_counts, send_displs, recv, recv_counts,
                                        recv_displs, err);
    if (st == CPDIT_OK) {
        c->bytes_sent += others_bytes(c, send_counts);
        c->bytes_received += others_bytes(c, recv_counts);
    }
    return st;
}

cpdit_status cpdit_comm_allgatherv(cpdit_comm *c, const float *send, size_t send_count,
                                   float *recv, const size_t *recv_counts,
                                   const size_t *recv_displs, cpdit_error *err)
{
    if (check_comm(c, err))
        return CPDIT_ERR_RUNTIME;
    if (recv_counts[c->rank] != send_count)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, COMM_WHERE,
                               "allgatherv: rank %d sends %zu floats but recv_counts[%d] = %zu",
                               c->rank, send_count, c->rank, recv_counts[c->rank]);
    cpdit_status st =
        c->ops->allgatherv(c, send, send_count, recv, recv_counts, recv_displs, err);
    if (st == CPDIT_OK) {
        /* logical volume: our block reaches every other rank, theirs reach us */
        c->bytes_sent += (unsigned long long)send_count * sizeof(float) * (unsigned)(c->size - 1);
        c->bytes_received += others_bytes(c, recv_counts);
    }
    return st;
}

cpdit_status cpdit_comm_isend(cpdit_comm *c, const float *buf, size_t count, int peer, int tag,
                              cpdit_comm_request *req, cpdit_error *err)
{
    if (check_comm(c, err) || check_peer(c, peer, "isend", err))
        return CPDIT_ERR_RUNTIME;
    cpdit_status st = c->ops->isend(c, buf, count, peer, tag, req, err);
    if (st == CPDIT_OK && peer != c->rank)
        c->bytes_sent += (unsigned long long)count * sizeof(float);
    return st;
}

cpdit_status cpdit_comm_irecv(cpdit_comm *c, float *buf, size_t count, int peer, int tag,
                              cpdit_comm_request *req, cpdit_error *err)
{
    if (check_comm(c, err) || check_peer(c, peer, "irecv", err))
        return CPDIT_ERR_RUNTIME;
    cpdit_status st = c->ops->irecv(c, buf, count, peer, tag, req, err);
    if (st == CPDIT_OK && peer != c->rank)
        c->bytes_received += (unsigned long long)count * sizeof(float);
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

cpdit_status cpdit_comm_send(cpdit_comm *c, const float *buf, size_t count, int peer, int tag,
                             cpdit_error *err)
{
    cpdit_comm_request r = CPDIT_COMM_REQUEST_INIT;
    if (cpdit_comm_isend(c, buf, count, peer, tag, &r, err))
        return err ? err->status : CPDIT_ERR_RUNTIME;
    return cpdit_comm_wait(c, &r, err);
}

cpdit_status cpdit_comm_recv(cpdit_comm *c, float *buf, size_t count, int peer, int tag,
                             cpdit_error *err)
{
    cpdit_comm_request r = CPDIT_COMM_REQUEST_INIT;
    if (cpdit_comm_irecv(c, buf, count, peer, tag, &r, err))
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
    if (check_comm(c, err))
        return CPDIT_ERR_RUNTIME;
    return c->ops->allreduce(c, buf, count, type, op, err);
}

cpdit_status cpdit_comm_bcast(cpdit_comm *c, void *buf, size_t bytes, int root,
                              cpdit_error *err)
{
    if (check_comm(c, err) || check_peer(c, root, "bcast", err))
        return CPDIT_ERR_RUNTIME;
    return c->ops->bcast(c, buf, bytes, root, err);
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
