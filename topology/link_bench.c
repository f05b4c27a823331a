/* link_bench.c — ping-pong and collective timings through a cpdit_comm (see link_bench.h).
 * The payload is opaque bytes counted as fp32 elements (CPDIT_COMM_FLOAT): the timings are
 * per byte, whatever dtype a model would move. */
#include "topology/link_bench.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WHERE_LINK "probe: links"
#define LINK_TAG 17               /* data tag of the ping-pong (below the comm's own tags) */
#define LINK_CTL_TAG 4711         /* iteration count a -> b, on ctl */
#define QUIET_POLL_NS 20000L      /* sleeping barrier: poll every 20 us */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

const char *link_coll_op_name(link_coll_op op)
{
    switch (op) {
    case LINK_ALLTOALL: return "alltoall";
    case LINK_ALLGATHER: return "allgather";
    case LINK_SENDRECV_RING: return "sendrecv_ring";
    }
    return "?";
}

int link_quiet_barrier(MPI_Comm ctl)
{
    MPI_Request r;
    int done = 0;
    if (MPI_Ibarrier(ctl, &r) != MPI_SUCCESS)
        return -1;
    const struct timespec ts = {0, QUIET_POLL_NS};
    while (!done) {
        if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return -1;
        if (!done)
            nanosleep(&ts, NULL);
    }
    return 0;
}

static int clamp_iters(double per_iter_s, double budget_s, int max_iters)
{
    if (!(per_iter_s > 0))
        return max_iters;
    const double n = budget_s / per_iter_s;
    if (n < 1)
        return 1;
    return n > max_iters ? max_iters : (int)n;
}

/* n round trips from a's side (send then receive) or b's (receive then send), then the
 * transport's sync (asynchronous transports). */
static cpdit_status round_trips(cpdit_comm *c, int me_first, int peer, float *buf, size_t count,
                                int n, const link_bench_opts *o, cpdit_error *err)
{
    const cpdit_comm_dtype f = CPDIT_COMM_FLOAT;
    for (int i = 0; i < n; i++) {
        cpdit_status st = me_first ? cpdit_comm_send(c, f, buf, count, peer, LINK_TAG, err)
                                   : cpdit_comm_recv(c, f, buf, count, peer, LINK_TAG, err);
        if (st == CPDIT_OK)
            st = me_first ? cpdit_comm_recv(c, f, buf, count, peer, LINK_TAG, err)
                          : cpdit_comm_send(c, f, buf, count, peer, LINK_TAG, err);
        if (st != CPDIT_OK)
            return st;
    }
    return o->sync ? o->sync(err) : CPDIT_OK;
}

cpdit_status link_bench_pingpong(cpdit_comm *c, MPI_Comm ctl, int a, int b, size_t bytes,
                                 float *buf, const link_bench_opts *o, link_times *out,
                                 cpdit_error *err)
{
    const size_t count = bytes / sizeof(float) ? bytes / sizeof(float) : 1;
    double res[4] = {0, 0, 0, 0}; /* min, avg, max, iters */
    cpdit_status st = CPDIT_OK;
    const int me = c->rank, warmup = o->warmup > 0 ? o->warmup : 1;
    const int trials = o->trials > 0 ? o->trials : 1;
    if (me == a) {
        double t0 = now_s();
        st = round_trips(c, 1, b, buf, count, warmup, o, err);
        const double rt = (now_s() - t0) / warmup;
        int iters = clamp_iters(rt, o->target_s / trials, o->max_iters);
        if (st == CPDIT_OK && MPI_Send(&iters, 1, MPI_INT, b, LINK_CTL_TAG, ctl) != MPI_SUCCESS)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_LINK, "MPI_Send to rank %d failed",
                                 b);
        res[0] = 1e300;
        for (int t = 0; t < trials && st == CPDIT_OK; t++) {
            t0 = now_s();
            st = round_trips(c, 1, b, buf, count, iters, o, err);
            const double one_way = (now_s() - t0) / (2.0 * iters);
            res[0] = one_way < res[0] ? one_way : res[0];
            res[1] += one_way / trials;
            res[2] = one_way > res[2] ? one_way : res[2];
        }
        res[3] = iters;
    } else if (me == b) {
        int iters = 0;
        st = round_trips(c, 0, a, buf, count, warmup, o, err);
        if (st == CPDIT_OK &&
            MPI_Recv(&iters, 1, MPI_INT, a, LINK_CTL_TAG, ctl, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_LINK,
                                 "MPI_Recv from rank %d failed", a);
        for (int t = 0; t < trials && st == CPDIT_OK; t++)
            st = round_trips(c, 0, a, buf, count, iters, o, err);
    }
    if (st != CPDIT_OK)
        return st;
    if (link_quiet_barrier(ctl) != 0 || MPI_Bcast(res, 4, MPI_DOUBLE, a, ctl) != MPI_SUCCESS)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_LINK, "MPI barrier/broadcast failed");
    out->min_s = res[0];
    out->avg_s = res[1];
    out->max_s = res[2];
    out->iters = (int)res[3];
    out->bytes = count * sizeof(float);
    return CPDIT_OK;
}

/* Floats per peer (alltoall) or per rank (allgather, sendrecv) for bytes. */
static size_t unit_floats(link_coll_op op, int n, size_t bytes)
{
    const size_t f = op == LINK_ALLTOALL ? bytes / sizeof(float) / (size_t)n : bytes / sizeof(float);
    return f ? f : 1;
}

size_t link_bench_collective_floats(link_coll_op op, int n, size_t bytes)
{
    const size_t u = unit_floats(op, n, bytes);
    switch (op) {
    case LINK_ALLTOALL: return 2 * u * (size_t)n;  /* send + receive */
    case LINK_ALLGATHER: return u * ((size_t)n + 1); /* own block + everybody's */
    case LINK_SENDRECV_RING: return 2 * u;
    }
    return 0;
}

typedef struct coll_plan {
    link_coll_op op;
    size_t unit;
    float *send, *recv;
    size_t *counts, *displs; /* n each */
} coll_plan;

static cpdit_status coll_once(cpdit_comm *c, const coll_plan *p, cpdit_error *err)
{
    const int n = c->size, r = c->rank;
    switch (p->op) {
    case LINK_ALLTOALL:
        return cpdit_comm_alltoallv(c, CPDIT_COMM_FLOAT, p->send, p->counts, p->displs, p->recv,
                                    p->counts, p->displs, err);
    case LINK_ALLGATHER:
        return cpdit_comm_allgatherv(c, CPDIT_COMM_FLOAT, p->send, p->unit, p->recv, p->counts,
                                     p->displs, err);
    case LINK_SENDRECV_RING: {
        cpdit_comm_request rs = CPDIT_COMM_REQUEST_INIT, rr = CPDIT_COMM_REQUEST_INIT;
        cpdit_status st = cpdit_comm_irecv(c, CPDIT_COMM_FLOAT, p->recv, p->unit, (r + n - 1) % n,
                                           LINK_TAG, &rr, err);
        if (st == CPDIT_OK)
            st = cpdit_comm_isend(c, CPDIT_COMM_FLOAT, p->send, p->unit, (r + 1) % n, LINK_TAG,
                                  &rs, err);
        cpdit_status st2 = cpdit_comm_wait(c, &rr, err);
        cpdit_status st3 = cpdit_comm_wait(c, &rs, err);
        return st != CPDIT_OK ? st : st2 != CPDIT_OK ? st2 : st3;
    }
    }
    return CPDIT_ERR_RUNTIME;
}

cpdit_status link_bench_collective(cpdit_comm *c, link_coll_op op, size_t bytes, float *buf,
                                   const link_bench_opts *o, link_times *out, cpdit_error *err)
{
    const int n = c->size, warmup = o->warmup > 0 ? o->warmup : 1;
    coll_plan p = {op, unit_floats(op, n, bytes), buf, NULL, NULL, NULL};
    size_t *arrays = malloc(2 * (size_t)n * sizeof *arrays);
    if (!arrays)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_LINK, "out of memory");
    p.counts = arrays;
    p.displs = arrays + n;
    for (int i = 0; i < n; i++) {
        p.counts[i] = p.unit;
        p.displs[i] = (size_t)i * p.unit;
    }
    p.recv = buf + (op == LINK_ALLTOALL ? p.unit * (size_t)n : p.unit);

    cpdit_status st = CPDIT_OK;
    double t0 = now_s();
    for (int i = 0; i < warmup && st == CPDIT_OK; i++)
        st = coll_once(c, &p, err);
    if (st == CPDIT_OK && o->sync)
        st = o->sync(err);
    double per_call = (now_s() - t0) / warmup;
    if (st == CPDIT_OK)
        st = cpdit_comm_allreduce(c, &per_call, 1, CPDIT_COMM_DOUBLE, CPDIT_COMM_MAX, err);
    const int iters = clamp_iters(per_call, o->target_s, o->max_iters);
    if (st == CPDIT_OK)
        st = cpdit_comm_barrier(c, err);
    t0 = now_s();
    for (int i = 0; i < iters && st == CPDIT_OK; i++)
        st = coll_once(c, &p, err);
    if (st == CPDIT_OK && o->sync)
        st = o->sync(err);
    const double mine = (now_s() - t0) / iters;
    double mn = mine, mx = mine, sum = mine;
    if (st == CPDIT_OK)
        st = cpdit_comm_allreduce(c, &mn, 1, CPDIT_COMM_DOUBLE, CPDIT_COMM_MIN, err);
    if (st == CPDIT_OK)
        st = cpdit_comm_allreduce(c, &mx, 1, CPDIT_COMM_DOUBLE, CPDIT_COMM_MAX, err);
    if (st == CPDIT_OK)
        st = cpdit_comm_allreduce(c, &sum, 1, CPDIT_COMM_DOUBLE, CPDIT_COMM_SUM, err);
    free(arrays);
    if (st != CPDIT_OK)
        return st;
    out->min_s = mn;
    out->avg_s = sum / n;
    out->max_s = mx;
    out->iters = iters;
    out->bytes = op == LINK_ALLTOALL ? p.unit * (size_t)n * sizeof(float) : p.unit * sizeof(float);
    return CPDIT_OK;
}

double link_algbw(link_coll_op op, int n, const link_times *t)
{
    if (!(t->avg_s > 0))
        return 0;
    const double b = (double)t->bytes;
    return op == LINK_ALLGATHER ? b * n / t->avg_s : b / t->avg_s;
}

double link_busbw(link_coll_op op, int n, const link_times *t)
{
    const double alg = link_algbw(op, n, t);
    return op == LINK_SENDRECV_RING || n < 2 ? alg : alg * (n - 1) / n;
}
