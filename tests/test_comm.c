/* test_comm.c — the MPI communicator (comm.h, comm_mpi.h) under any number of ranks.
 *
 * Every exchange carries values that encode (sender, receiver, index), so a misplaced or
 * truncated element is caught exactly. Each test runs twice: with MPI's normal limits, and with
 * the per-call element limit lowered to CHUNK_SMALL, which sends every message in several
 * chunks and turns the all-to-all / all-gather into chunked point-to-point exchanges (the path
 * that carries transfers of more than INT_MAX elements).
 * The data movers run with fp32 elements and with bf16 ones (CPDIT_COMM_BF16: 2-byte bit
 * patterns, hashed so that they include NaN and infinity patterns, which must arrive as they
 * are): odd counts at odd displacements catch any offset taken in bytes or floats instead of
 * elements, and the byte counters must count 2 bytes per bf16 element. allreduce must refuse
 * bf16, and every call an invalid element type.
 * cpdit_comm_agree (and its MPI_Comm form): all OK agrees on OK; when ranks 1 (INPUT) and the
 * last (RUNTIME) fail, each keeps its own status and message and every other rank gets rank
 * 1's (the lowest failing), marked "(failed on another rank: 1 of N)".
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
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

/* The bf16 bit pattern p sends to q at index i: a multiplicative hash of (p, q, i) (Knuth's
 * 2654435761), so every 16-bit pattern, NaNs included, turns up. */
static uint16_t val16(int p, int q, size_t i)
{
    uint32_t x = (((uint32_t)p * 131u + (uint32_t)q) * 257u + (uint32_t)i) * 2654435761u;
    return (uint16_t)(x >> 16);
}

/* Element i of buf (type FLOAT or BF16) := the value p sends q at index j. */
static void put(void *buf, cpdit_comm_dtype type, size_t i, int p, int q, size_t j)
{
    if (type == CPDIT_COMM_BF16)
        ((uint16_t *)buf)[i] = val16(p, q, j);
    else
        ((float *)buf)[i] = val(p, q, j);
}

/* 1 when element i of buf is the value p sends q at index j. */
static int is(const void *buf, cpdit_comm_dtype type, size_t i, int p, int q, size_t j)
{
    if (type == CPDIT_COMM_BF16)
        return ((const uint16_t *)buf)[i] == val16(p, q, j);
    return ((const float *)buf)[i] == val(p, q, j);
}

/* Buffers start filled with GAP_BYTE: 1 when element i of buf still holds it (not written). */
#define GAP_BYTE 0xA5
static int is_gap(const void *buf, cpdit_comm_dtype type, size_t i)
{
    const size_t es = cpdit_comm_dtype_size(type);
    const unsigned char *b = (const unsigned char *)buf + i * es;
    for (size_t k = 0; k < es; k++)
        if (b[k] != GAP_BYTE)
            return 0;
    return 1;
}

/* Uneven count from p to q, zero for some pairs. */
static size_t cnt(int p, int q)
{
    return (size_t)((p * 3 + q * 5) % 7);
}

static void test_alltoallv(cpdit_comm *c, cpdit_comm_dtype type)
{
    const int n = c->size, me = c->rank;
    const size_t es = cpdit_comm_dtype_size(type);
    size_t sc[64], sd[64], rc[64], rd[64], so = 0, ro = 0;
    for (int q = 0; q < n; q++) {
        sc[q] = cnt(me, q);
        sd[q] = so;
        so += sc[q] + 1; /* a gap: displacements are honoured */
        rc[q] = cnt(q, me);
        rd[q] = ro;
        ro += rc[q] + 2;
    }
    void *send = calloc(so + 1, es), *recv = malloc((ro + 1) * es);
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < sc[q]; i++)
            put(send, type, sd[q] + i, me, q, i);
    memset(recv, GAP_BYTE, (ro + 1) * es);
    cpdit_error e;
    cpdit_comm_reset_counters(c);
    CHECK(cpdit_comm_alltoallv(c, type, send, sc, sd, recv, rc, rd, &e) == CPDIT_OK);
    for (int p = 0; p < n; p++) {
        for (size_t i = 0; i < rc[p]; i++)
            CHECK_MSG(is(recv, type, rd[p] + i, p, me, i), "type %d from %d index %zu",
                      (int)type, p, i);
        CHECK(is_gap(recv, type, rd[p] + rc[p])); /* gap untouched */
    }
    unsigned long long want_s = 0, want_r = 0;
    for (int q = 0; q < n; q++)
        if (q != me) {
            want_s += sc[q] * es;
            want_r += rc[q] * es;
        }
    CHECK(c->bytes_sent == want_s && c->bytes_received == want_r);
    free(send);
    free(recv);
}

static void test_allgatherv(cpdit_comm *c, cpdit_comm_dtype type)
{
    const int n = c->size, me = c->rank;
    const size_t es = cpdit_comm_dtype_size(type);
    size_t rc[64], rd[64], off = 0;
    for (int p = 0; p < n; p++) {
        rc[p] = cnt(p, 1) + (p == 0 ? 0 : 1);
        rd[p] = off;
        off += rc[p] + 1; /* a gap after each rank's block: odd displacements */
    }
    void *send = malloc((rc[me] + 1) * es), *recv = malloc((off + 1) * es);
    for (size_t i = 0; i < rc[me]; i++)
        put(send, type, i, me, 0, i);
    memset(recv, GAP_BYTE, (off + 1) * es);
    cpdit_error e;
    cpdit_comm_reset_counters(c);
    CHECK(cpdit_comm_allgatherv(c, type, send, rc[me], recv, rc, rd, &e) == CPDIT_OK);
    unsigned long long want_r = 0;
    for (int p = 0; p < n; p++) {
        for (size_t i = 0; i < rc[p]; i++)
            CHECK(is(recv, type, rd[p] + i, p, 0, i));
        CHECK(is_gap(recv, type, rd[p] + rc[p]));
        want_r += p == me ? 0 : rc[p] * es;
    }
    CHECK(c->bytes_sent == (unsigned long long)rc[me] * es * (unsigned)(n - 1));
    CHECK(c->bytes_received == want_r);
    /* a count that disagrees with recv_counts is caught before any data moves */
    CHECK(cpdit_comm_allgatherv(c, type, send, rc[me] + 1, recv, rc, rd, &e) ==
          CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(e.what, "recv_counts");
    free(send);
    free(recv);
}

/* Send a message of 10 + rank elements around the ring, non-blocking, polling with test. */
static void test_p2p(cpdit_comm *c, cpdit_comm_dtype type)
{
    const int n = c->size, me = c->rank;
    const int next = (me + 1) % n, prev = (me - 1 + n) % n;
    const size_t ns = 10 + (size_t)me, nr = 10 + (size_t)prev;
    float send_mem[64], recv_mem[64]; /* room for 64 elements of either type */
    void *send = send_mem, *recv = recv_mem;
    for (size_t i = 0; i < ns; i++)
        put(send, type, i, me, next, i);
    memset(recv_mem, GAP_BYTE, sizeof recv_mem);
    cpdit_comm_request rr = CPDIT_COMM_REQUEST_INIT, sr = CPDIT_COMM_REQUEST_INIT;
    cpdit_error e;
    cpdit_comm_reset_counters(c);
    CHECK(cpdit_comm_irecv(c, type, recv, nr, prev, 5, &rr, &e) == CPDIT_OK);
    CHECK(cpdit_comm_isend(c, type, send, ns, next, 5, &sr, &e) == CPDIT_OK);
    int done = 0;
    for (int spins = 0; !done && spins < 1000000; spins++)
        CHECK(cpdit_comm_test(c, &rr, &done, &e) == CPDIT_OK);
    CHECK(done && rr.impl == NULL);
    CHECK(cpdit_comm_wait(c, &rr, &e) == CPDIT_OK); /* completed: no-op */
    CHECK(cpdit_comm_wait(c, &sr, &e) == CPDIT_OK);
    for (size_t i = 0; i < nr; i++)
        CHECK(is(recv, type, i, prev, me, i));
    CHECK(is_gap(recv, type, nr)); /* nothing past the count */
    const size_t es = cpdit_comm_dtype_size(type);
    CHECK(c->bytes_sent == (next != me ? ns * es : 0));
    CHECK(c->bytes_received == (prev != me ? nr * es : 0));
    /* blocking pair, and the argument checks */
    if (n > 1) {
        if (me == 0)
            CHECK(cpdit_comm_send(c, type, send, 4, 1, 6, &e) == CPDIT_OK);
        if (me == 1) {
            CHECK(cpdit_comm_recv(c, type, recv, 4, 0, 6, &e) == CPDIT_OK);
            CHECK(is(recv, type, 3, 0, 1, 3));
        }
    }
    CHECK(cpdit_comm_isend(c, type, send, 1, n, 5, &sr, &e) == CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(e.what, "not a rank");
    CHECK(cpdit_comm_isend(c, type, send, 1, me, CPDIT_COMM_MPI_COLLECTIVE_TAG, &sr, &e) ==
          CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(e.what, "tag");
}

/* The element types: sizes, the activation mapping, and the refusals (bf16 is never reduced;
 * an activation dtype the communicators do not know is refused by every call). */
static void test_types(cpdit_comm *c)
{
    cpdit_error e;
    CHECK(cpdit_comm_dtype_size(CPDIT_COMM_FLOAT) == 4);
    CHECK(cpdit_comm_dtype_size(CPDIT_COMM_DOUBLE) == 8);
    CHECK(cpdit_comm_dtype_size(CPDIT_COMM_INT64) == 8);
    CHECK(cpdit_comm_dtype_size(CPDIT_COMM_BF16) == 2);
    CHECK(cpdit_comm_act_type(CPDIT_DTYPE_F32) == CPDIT_COMM_FLOAT);
    CHECK(cpdit_comm_act_type(CPDIT_DTYPE_BF16) == CPDIT_COMM_BF16);
    const cpdit_comm_dtype bad = cpdit_comm_act_type(CPDIT_DTYPE_F16);
    CHECK(cpdit_comm_dtype_size(bad) == 0);
    uint16_t b[2] = {0x3f80, 0x4000};
    CHECK(cpdit_comm_allreduce(c, b, 2, CPDIT_COMM_BF16, CPDIT_COMM_SUM, &e) ==
          CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(e.what, "bf16");
    CHECK(b[0] == 0x3f80 && b[1] == 0x4000); /* untouched */
    cpdit_comm_request r = CPDIT_COMM_REQUEST_INIT;
    CHECK(cpdit_comm_isend(c, bad, b, 1, c->rank, 5, &r, &e) == CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(e.what, "invalid element type");
    CHECK(r.impl == NULL);
    size_t zeros[64] = {0};
    CHECK(cpdit_comm_allgatherv(c, bad, b, 0, b, zeros, zeros, &e) == CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(e.what, "invalid element type");
    CHECK(cpdit_comm_allreduce(c, b, 1, bad, CPDIT_COMM_SUM, &e) == CPDIT_ERR_RUNTIME);
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

/* The agreement with ranks 1 and n - 1 failing (when there are such ranks). */
static void test_agree(cpdit_comm *c, int mpi_form)
{
    const int n = c->size, me = c->rank;
    cpdit_error e;
    cpdit_error_clear(&e);
    CHECK((mpi_form ? cpdit_comm_agree_mpi(MPI_COMM_WORLD, CPDIT_OK, &e)
                    : cpdit_comm_agree(c, CPDIT_OK, &e)) == CPDIT_OK);
    CHECK(e.status == CPDIT_OK && !e.what[0]);
    cpdit_status st = CPDIT_OK;
    if (n > 1 && me == 1)
        st = cpdit_error_set(&e, CPDIT_ERR_INPUT, "here", "rank one failed");
    else if (n > 2 && me == n - 1)
        st = cpdit_error_set(&e, CPDIT_ERR_RUNTIME, "there", "the last failed");
    cpdit_status got = mpi_form ? cpdit_comm_agree_mpi(MPI_COMM_WORLD, st, &e)
                                : cpdit_comm_agree(c, st, &e);
    char want[96];
    snprintf(want, sizeof want, "rank one failed (failed on another rank: 1 of %d)", n);
    if (n == 1) {
        CHECK(got == CPDIT_OK);
    } else if (st) {
        CHECK(got == st && e.status == st);
        CHECK(strcmp(e.what, me == 1 ? "rank one failed" : "the last failed") == 0);
    } else {
        CHECK(got == CPDIT_ERR_INPUT && e.status == CPDIT_ERR_INPUT);
        CHECK(strcmp(e.where, "here") == 0 && strcmp(e.what, want) == 0);
    }
    CHECK(cpdit_comm_agree(NULL, CPDIT_ERR_RUNTIME, NULL) == CPDIT_ERR_RUNTIME);
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
        const cpdit_comm_dtype types[2] = {CPDIT_COMM_FLOAT, CPDIT_COMM_BF16};
        for (int t = 0; t < 2; t++) {
            test_alltoallv(c, types[t]);
            test_allgatherv(c, types[t]);
            test_p2p(c, types[t]);
        }
        test_small(c);
        test_types(c);
        test_agree(c, pass);
    }
    cpdit_comm_destroy(c);
    int failed = test_failures, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    test_failures += any && !failed;
    TEST_MAIN_END();
}
