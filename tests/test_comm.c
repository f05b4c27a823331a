/* test_comm.c — the MPI communicator (comm.h, comm_mpi.h) under any number of ranks.
 *
 * Every exchange carries values that encode (sender, receiver, index), so a misplaced or
 * truncated element is caught exactly. Each test runs twice: with MPI's normal limits, and with
 * the per-call element limit lowered to CHUNK_SMALL, which sends every message in several
 * chunks and turns the all-to-all / all-gather into chunked point-to-point exchanges (the path
 * that carries transfers of more than INT_MAX elements).
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm.h"
#include "lib/cp/comm_mpi.h"
#include "tests/test_util.h"

#define CHUNK_SMALL 3

/* Value p sends to q at index i. */
static float val(int p, int q, size_t i)
{
    return (float)(p * 10000 + q * 100) + (float)i;
}

/* Uneven count from p to q, zero for some pairs. */
static size_t cnt(int p, int q)
{
    return (size_t)((p * 3 + q * 5) % 7);
}

static void test_alltoallv(cpdit_comm *c)
{
    const int n = c->size, me = c->rank;
    size_t sc[64], sd[64], rc[64], rd[64], so = 0, ro = 0;
    for (int q = 0; q < n; q++) {
        sc[q] = cnt(me, q);
        sd[q] = so;
        so += sc[q] + 1; /* a gap: displacements are honoured */
        rc[q] = cnt(q, me);
        rd[q] = ro;
        ro += rc[q] + 2;
    }
    float *send = calloc(so + 1, sizeof(float)), *recv = calloc(ro + 1, sizeof(float));
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < sc[q]; i++)
            send[sd[q] + i] = val(me, q, i);
    for (size_t i = 0; i < ro; i++)
        recv[i] = -1.0f;
    cpdit_error e;
    cpdit_comm_reset_counters(c);
    CHECK(cpdit_comm_alltoallv(c, send, sc, sd, recv, rc, rd, &e) == CPDIT_OK);
    for (int p = 0; p < n; p++) {
        for (size_t i = 0; i < rc[p]; i++)
            CHECK(recv[rd[p] + i] == val(p, me, i));
        CHECK(recv[rd[p] + rc[p]] == -1.0f); /* gap untouched */
    }
    unsigned long long want = 0;
    for (int q = 0; q < n; q++)
        if (q != me)
            want += sc[q] * sizeof(float);
    CHECK(c->bytes_sent == want);
    free(send);
    free(recv);
}

static void test_allgatherv(cpdit_comm *c)
{
    const int n = c->size, me = c->rank;
    size_t rc[64], rd[64], off = 0;
    for (int p = 0; p < n; p++) {
        rc[p] = cnt(p, 1) + (p == 0 ? 0 : 1);
        rd[p] = off;
        off += rc[p];
    }
    float *send = malloc((rc[me] + 1) * sizeof(float)), *recv = malloc((off + 1) * sizeof(float));
    for (size_t i = 0; i < rc[me]; i++)
        send[i] = val(me, 0, i);
    cpdit_error e;
    CHECK(cpdit_comm_allgatherv(c, send, rc[me], recv, rc, rd, &e) == CPDIT_OK);
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < rc[p]; i++)
            CHECK(recv[rd[p] + i] == val(p, 0, i));
    /* a count that disagrees with recv_counts is caught before any data moves */
    CHECK(cpdit_comm_allgatherv(c, send, rc[me] + 1, recv, rc, rd, &e) == CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(e.what, "recv_counts");
    free(send);
    free(recv);
}

/* Send a message of 10 + rank floats around the ring, non-blocking, polling with test. */
static void test_p2p(cpdit_comm *c)
{
    const int n = c->size, me = c->rank;
    const int next = (me + 1) % n, prev = (me - 1 + n) % n;
    const size_t ns = 10 + (size_t)me, nr = 10 + (size_t)prev;
    float send[64], recv[64];
    for (size_t i = 0; i < ns; i++)
        send[i] = val(me, next, i);
    cpdit_comm_request rr = CPDIT_COMM_REQUEST_INIT, sr = CPDIT_COMM_REQUEST_INIT;
    cpdit_error e;
    CHECK(cpdit_comm_irecv(c, recv, nr, prev, 5, &rr, &e) == CPDIT_OK);
    CHECK(cpdit_comm_isend(c, send, ns, next, 5, &sr, &e) == CPDIT_OK);
    int done = 0;
    for (int spins = 0; !done && spins < 1000000; spins++)
        CHECK(cpdit_comm_test(c, &rr, &done, &e) == CPDIT_OK);
    CHECK(done && rr.impl == NULL);
    CHECK(cpdit_comm_wait(c, &rr, &e) == CPDIT_OK); /* completed: no-op */
    CHECK(cpdit_comm_wait(c, &sr, &e) == CPDIT_OK);
    for (size_t i = 0; i < nr; i++)
        CHECK(recv[i] == val(prev, me, i));
    /* blocking pair, and the argument checks */
    if (n > 1) {
        if (me == 0)
            CHECK(cpdit_comm_send(c, send, 4, 1, 6, &e) == CPDIT_OK);
        if (me == 1) {
            CHECK(cpdit_comm_recv(c, recv, 4, 0, 6, &e) == CPDIT_OK);
            CHECK(recv[3] == val(0, 1, 3));
        }
    }
    CHECK(cpdit_comm_isend(c, send, 1, n, 5, &sr, &e) == CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(e.what, "not a rank");
    CHECK(cpdit_comm_isend(c, send, 1, me, CPDIT_COMM_MPI_COLLECTIVE_TAG, &sr, &e) ==
          CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(e.what, "tag");
}

static void test_small(cpdit_comm *c)
{
    const int n = c->size, me = c->rank;
    cpdit_error e;
    double d[2] = {(double)me, 1.5};
    CHECK(cpdit_comm_allreduce(c, d, 2, CPDIT_COMM_DOUBLE, CPDIT_COMM_SUM, &e) == CPDIT_OK);
    CHECK_NEAR(d[0], n * (n - 1) / 2.0, 0.0);
    CHECK_NEAR(d[1], 1.5 * n, 0.0);
    long long x[2] = {me, -me};
    CHECK(cpdit_comm_allreduce(c, x, 2, CPDIT_COMM_INT64, CPDIT_COMM_MAX, &e) == CPDIT_OK);
    CHECK(x[0] == n - 1 && x[1] == 0);
    float f = (float)me;
    CHECK(cpdit_comm_allreduce(c, &f, 1, CPDIT_COMM_FLOAT, CPDIT_COMM_MIN, &e) == CPDIT_OK);
    CHECK(f == 0.0f);
    char msg[16] = {0};
    if (me == n - 1)
        strcpy(msg, "from the last");
    CHECK(cpdit_comm_bcast(c, msg, sizeof msg, n - 1, &e) == CPDIT_OK);
    CHECK(strcmp(msg, "from the last") == 0);
    CHECK(cpdit_comm_barrier(c, &e) == CPDIT_OK);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 64) {
        MPI_Finalize();
        TEST_SKIP("test_comm supports at most 64 ranks");
    }
    cpdit_comm *c = NULL;
    cpdit_error e;
    CHECK(cpdit_comm_mpi_create(MPI_COMM_WORLD, 0, &c, &e) == CPDIT_OK);
    CHECK(strcmp(c->ops->name, "mpi") == 0 && c->size == size);
    CHECK(cpdit_comm_mpi_handle(c) != MPI_COMM_NULL && cpdit_comm_mpi_handle(c) != MPI_COMM_WORLD);
    for (int pass = 0; pass < 2; pass++) {
        cpdit_comm_mpi_set_max_count(pass ? CHUNK_SMALL : 0);
        CHECK(cpdit_comm_mpi_max_count() == (pass ? (size_t)CHUNK_SMALL : (size_t)2147483647));
        test_alltoallv(c);
        test_allgatherv(c);
        test_p2p(c);
        test_small(c);
    }
    cpdit_comm_destroy(c);
    int failed = test_failures, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    test_failures += any && !failed;
    TEST_MAIN_END();
}
