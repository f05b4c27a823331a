/* test_comm_gpu.c — the GPU communicators (comm_nccl.h) move device data exactly as the MPI one
 * moves host data: uneven all-to-all, all-gather(v), and the ring's isend/irecv steps (one message
 * each way, and cp_ring's K and V pattern: two receives then two sends), for the
 * host-staged kind always and for NCCL when every rank has a device of its own; in fp32
 * (CPDIT_COMM_FLOAT) and as the "cuda" table's bf16 activations (CPDIT_COMM_BF16: 2-byte
 * elements, counts and displacements in elements, bits moved exactly).
 * Run under MPI with any number of ranks (several may share one GPU). Skips (77) without a GPU.
 */
#include "config.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_runtime_info.h"
#include "lib/cp/comm_nccl.h"
#include "tests/test_util.h"

/* Element i of what rank `from` sends to rank `to`: exact in fp32. */
static float val(int from, int to, size_t i)
{
    return (float)(from * 1000 + to * 37) + (float)i * 0.5f;
}

static float *dev_alloc(size_t n)
{
    float *p = NULL;
    CHECK(cudaMalloc((void **)&p, (n ? n : 1) * sizeof(float)) == cudaSuccess);
    return p;
}

/* Element i of what rank from sends to rank to, as a bf16 bit pattern (distinct, finite). */
static uint16_t val16(int from, int to, size_t i)
{
    return (uint16_t)(0x3C00u + ((unsigned)(from * 97 + to * 13) + (unsigned)i * 3u) % 0x3000u);
}

/* Uneven all-to-all of bf16 elements: displacements in elements, 2 bytes each. */
static void test_alltoallv_bf16(cpdit_comm *c)
{
    const int n = c->size, me = c->rank;
    size_t sc[64], sd[64], rc[64], rd[64], ts = 0, tr = 0;
    for (int p = 0; p < n; p++) {
        sc[p] = (size_t)((me + 3 * p) % 7); /* uneven, some zero, odd (2-byte alignment) */
        rc[p] = (size_t)((p + 3 * me) % 7);
        sd[p] = ts;
        rd[p] = tr;
        ts += sc[p];
        tr += rc[p];
    }
    uint16_t *hs = malloc((ts + 1) * 2), *hr = malloc((tr + 1) * 2);
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < sc[p]; i++)
            hs[sd[p] + i] = val16(me, p, i);
    void *ds = dev_alloc(ts), *dr = dev_alloc(tr);
    cudaMemcpy(ds, hs, ts * 2, cudaMemcpyHostToDevice);
    cpdit_error e;
    CHECK(cpdit_comm_alltoallv(c, CPDIT_COMM_BF16, ds, sc, sd, dr, rc, rd, &e) == CPDIT_OK);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(hr, dr, tr * 2, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < rc[p]; i++)
            bad += hr[rd[p] + i] != val16(p, me, i);
    CHECK_MSG(bad == 0, "bf16 alltoallv: %d wrong elements", bad);
    cudaFree(ds);
    cudaFree(dr);
    free(hs);
    free(hr);
}

/* cp_ring's K/V step on bf16 blocks (odd element counts). */
static void test_ring_kv_bf16(cpdit_comm *c)
{
    const int n = c->size, me = c->rank, next = (me + 1) % n, prev = (me - 1 + n) % n;
    const size_t len = 90001 + (size_t)me, plen = 90001 + (size_t)prev;
    uint16_t *hk = malloc(len * 2), *hr = malloc(plen * 2);
    for (size_t i = 0; i < len; i++)
        hk[i] = val16(me, next, i);
    void *dk = dev_alloc(len), *dv = dev_alloc(len), *rk = dev_alloc(plen), *rv = dev_alloc(plen);
    cudaMemcpy(dk, hk, len * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, hk, len * 2, cudaMemcpyHostToDevice);
    cpdit_comm_request r[4] = {CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT,
                               CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT};
    cpdit_error e;
    CHECK(cpdit_comm_irecv(c, CPDIT_COMM_BF16, rk, plen, prev, 21, &r[0], &e) == CPDIT_OK);
    CHECK(cpdit_comm_irecv(c, CPDIT_COMM_BF16, rv, plen, prev, 22, &r[1], &e) == CPDIT_OK);
    CHECK(cpdit_comm_isend(c, CPDIT_COMM_BF16, dk, len, next, 21, &r[2], &e) == CPDIT_OK);
    CHECK(cpdit_comm_isend(c, CPDIT_COMM_BF16, dv, len, next, 22, &r[3], &e) == CPDIT_OK);
    for (int i = 0; i < 4; i++)
        CHECK(cpdit_comm_wait(c, &r[i], &e) == CPDIT_OK);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    int bad = 0;
    cudaMemcpy(hr, rk, plen * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < plen; i++)
        bad += hr[i] != val16(prev, me, i);
    cudaMemcpy(hr, rv, plen * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < plen; i++)
        bad += hr[i] != val16(prev, me, i);
    CHECK_MSG(bad == 0, "bf16 ring K/V step: %d wrong values", bad);
    cudaFree(dk), cudaFree(dv), cudaFree(rk), cudaFree(rv);
    free(hk), free(hr);
}

static void test_alltoallv(cpdit_comm *c)
{
    const int n = c->size, me = c->rank;
    size_t sc[64], sd[64], rc[64], rd[64], ts = 0, tr = 0;
    for (int p = 0; p < n; p++) {
        sc[p] = (size_t)((me + 2 * p) % 5); /* uneven, some zero */
        rc[p] = (size_t)((p + 2 * me) % 5);
        sd[p] = ts;
        rd[p] = tr;
        ts += sc[p];
        tr += rc[p];
    }
    float *hs = malloc((ts + 1) * sizeof(float)), *hr = malloc((tr + 1) * sizeof(float));
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < sc[p]; i++)
            hs[sd[p] + i] = val(me, p, i);
    float *ds = dev_alloc(ts), *dr = dev_alloc(tr);
    cudaMemcpy(ds, hs, ts * sizeof(float), cudaMemcpyHostToDevice);
    cpdit_error e;
    CHECK(cpdit_comm_alltoallv(c, CPDIT_COMM_FLOAT, ds, sc, sd, dr, rc, rd, &e) == CPDIT_OK);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(hr, dr, tr * sizeof(float), cudaMemcpyDeviceToHost);
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < rc[p]; i++)
            CHECK(hr[rd[p] + i] == val(p, me, i));
    cudaFree(ds);
    cudaFree(dr);
    free(hs);
    free(hr);
}

static void test_allgatherv(cpdit_comm *c)
{
    const int n = c->size, me = c->rank;
    size_t rc[64], rd[64], tr = 0;
    for (int p = 0; p < n; p++) {
        rc[p] = (size_t)(3 + p % 4);
        rd[p] = tr;
        tr += rc[p];
    }
    float hs[16], *hr = malloc(tr * sizeof(float));
    for (size_t i = 0; i < rc[me]; i++)
        hs[i] = val(me, 0, i);
    float *ds = dev_alloc(rc[me]), *dr = dev_alloc(tr);
    cudaMemcpy(ds, hs, rc[me] * sizeof(float), cudaMemcpyHostToDevice);
    cpdit_error e;
    CHECK(cpdit_comm_allgatherv(c, CPDIT_COMM_FLOAT, ds, rc[me], dr, rc, rd, &e) == CPDIT_OK);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(hr, dr, tr * sizeof(float), cudaMemcpyDeviceToHost);
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < rc[p]; i++)
            CHECK(hr[rd[p] + i] == val(p, 0, i));
    cudaFree(ds);
    cudaFree(dr);
    free(hr);
}

/* Three ring steps: send to next, receive from previous, as cp_ring does. */
static void test_ring(cpdit_comm *c)
{
    const int n = c->size, me = c->rank, next = (me + 1) % n, prev = (me - 1 + n) % n;
    const size_t len = 1000 + (size_t)me, plen = 1000 + (size_t)prev;
    float *hs = malloc(len * sizeof(float)), *hr = malloc(plen * sizeof(float));
    for (size_t i = 0; i < len; i++)
        hs[i] = val(me, next, i);
    float *ds = dev_alloc(len), *dr = dev_alloc(plen);
    cudaMemcpy(ds, hs, len * sizeof(float), cudaMemcpyHostToDevice);
    for (int step = 0; step < 3; step++) {
        cpdit_comm_request sr = CPDIT_COMM_REQUEST_INIT, rr = CPDIT_COMM_REQUEST_INIT;
        cpdit_error e;
        CHECK(cpdit_comm_isend(c, CPDIT_COMM_FLOAT, ds, len, next, 7, &sr, &e) == CPDIT_OK);
        CHECK(cpdit_comm_irecv(c, CPDIT_COMM_FLOAT, dr, plen, prev, 7, &rr, &e) == CPDIT_OK);
        CHECK(cpdit_comm_wait(c, &rr, &e) == CPDIT_OK);
        CHECK(cpdit_comm_wait(c, &sr, &e) == CPDIT_OK);
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        cudaMemcpy(hr, dr, plen * sizeof(float), cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < plen; i++)
            CHECK(hr[i] == val(prev, me, i));
    }
    cudaFree(ds);
    cudaFree(dr);
    free(hs);
    free(hr);
}

/* cp_ring's step: receive K and V from the previous rank, then send K and V to the next, then
 * wait for all four; on NCCL the four must launch as one group (a split that puts receive V
 * before send V in another group deadlocks around the ring, even on one rank). */
static void test_ring_kv(cpdit_comm *c)
{
    const int n = c->size, me = c->rank, next = (me + 1) % n, prev = (me - 1 + n) % n;
    const size_t len = 70000 + (size_t)me, plen = 70000 + (size_t)prev; /* > NCCL's buffers */
    float *hk = malloc(len * sizeof(float)), *hv = malloc(len * sizeof(float)),
          *hr = malloc(plen * sizeof(float));
    for (size_t i = 0; i < len; i++) {
        hk[i] = val(me, next, i);
        hv[i] = -val(me, next, i);
    }
    float *dk = dev_alloc(len), *dv = dev_alloc(len), *rk = dev_alloc(plen), *rv = dev_alloc(plen);
    cudaMemcpy(dk, hk, len * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dv, hv, len * sizeof(float), cudaMemcpyHostToDevice);
    for (int step = 0; step < 2; step++) {
        cpdit_comm_request r[4] = {CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT,
                                   CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT};
        cpdit_error e;
        CHECK(cpdit_comm_irecv(c, CPDIT_COMM_FLOAT, rk, plen, prev, 11, &r[0], &e) == CPDIT_OK);
        CHECK(cpdit_comm_irecv(c, CPDIT_COMM_FLOAT, rv, plen, prev, 12, &r[1], &e) == CPDIT_OK);
        CHECK(cpdit_comm_isend(c, CPDIT_COMM_FLOAT, dk, len, next, 11, &r[2], &e) == CPDIT_OK);
        CHECK(cpdit_comm_isend(c, CPDIT_COMM_FLOAT, dv, len, next, 12, &r[3], &e) == CPDIT_OK);
        for (int i = 0; i < 4; i++)
            CHECK(cpdit_comm_wait(c, &r[i], &e) == CPDIT_OK);
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        cudaMemcpy(hr, rk, plen * sizeof(float), cudaMemcpyDeviceToHost);
        int bad = 0;
        for (size_t i = 0; i < plen; i++)
            bad += hr[i] != val(prev, me, i);
        cudaMemcpy(hr, rv, plen * sizeof(float), cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < plen; i++)
            bad += hr[i] != -val(prev, me, i);
        CHECK_MSG(bad == 0, "ring K/V step %d: %d wrong values", step, bad);
    }
    cudaFree(dk), cudaFree(dv), cudaFree(rk), cudaFree(rv);
    free(hk), free(hv), free(hr);
}

static void run_kind(cpdit_comm_gpu_kind kind, const char *name)
{
    cpdit_comm *c = NULL;
    cpdit_error e;
    cpdit_error_clear(&e);
    cpdit_status st = cpdit_comm_gpu_create(MPI_COMM_WORLD, NULL, kind, &c, &e);
    if (st != CPDIT_OK)
        fprintf(stderr, "%s: %s: %s\n", name, e.where, e.what);
    CHECK(st == CPDIT_OK);
    if (!c)
        return;
    CHECK(strcmp(c->ops->name, name) == 0);
    test_alltoallv(c);
    test_allgatherv(c);
    test_ring(c);
    test_ring_kv(c);
    test_alltoallv_bf16(c);
    test_ring_kv_bf16(c);
    long long x = c->rank;
    CHECK(cpdit_comm_allreduce(c, &x, 1, CPDIT_COMM_INT64, CPDIT_COMM_MAX, &e) == CPDIT_OK);
    CHECK(x == c->size - 1);
    cpdit_comm_destroy(c);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size, have = cpdit_cuda_device_count() > 0, all = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all || size > 64) {
        MPI_Finalize();
        if (!all)
            TEST_SKIP("no CUDA device on every rank");
        TEST_SKIP("test_comm_gpu supports at most 64 ranks");
    }
    int device, local_rank, local_size, shared;
    cpdit_error e;
    CHECK(cpdit_cuda_select_device(MPI_COMM_WORLD, &device, &local_rank, &local_size, &shared,
                                   &e) == CPDIT_OK);
    run_kind(CPDIT_COMM_GPU_STAGED, "staged");
    int any_shared = 0;
    MPI_Allreduce(&shared, &any_shared, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any_shared)
        run_kind(CPDIT_COMM_GPU_NCCL, "nccl");
    else if (local_rank == 0)
        fprintf(stderr, "ranks share a GPU: NCCL not tested (it refuses one device twice)\n");
    /* AUTO: NCCL when no two ranks use one device (UUIDs compared), else host-staged */
    run_kind(CPDIT_COMM_GPU_AUTO, any_shared ? "staged" : "nccl");
    int failed = test_failures, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    test_failures += any && !failed;
    TEST_MAIN_END();
}
