/* test_probe_run.c — cpdit_probe_run() called in-process (as `parallel: auto` does), under
 * mpirun with 2..4 ranks: the document on rank 0 only, NULL elsewhere; a second transport
 * plugged into the NCCL hook (here MPI again, with counting buffers and sync) is measured
 * beside MPI and recorded under its own name; every buffer it allocated is released and its
 * sync ran. Ranks claim two hosts through CPDIT_HOSTNAME when there are 4. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm_mpi.h"
#include "tests/test_util.h"
#include "topology/probe.h"

static int allocs, releases, syncs;

static cpdit_status hook_create(MPI_Comm mpi, cpdit_comm **out, cpdit_error *err)
{
    return cpdit_comm_mpi_create(mpi, 0, out, err); /* private duplicate: mpi stays the caller's */
}

static void *hook_alloc(size_t bytes)
{
    allocs++;
    return malloc(bytes);
}

static void hook_release(void *p)
{
    releases++;
    free(p);
}

static cpdit_status hook_sync(cpdit_error *err)
{
    (void)err;
    syncs++;
    return CPDIT_OK;
}

static int count_transport(const json_t *arr, const char *name)
{
    int n = 0;
    size_t i;
    const json_t *e;
    json_array_foreach(arr, i, e)
        n += strcmp(json_string_value(json_object_get(e, "transport")), name) == 0;
    return n;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char host[32];
    snprintf(host, sizeof host, "node%d", size == 4 ? rank / 2 : 0);
    setenv("CPDIT_HOSTNAME", host, 1);

    const probe_transport hook = {"test", hook_create, hook_alloc, hook_release, hook_sync};
    cpdit_probe_options o;
    cpdit_probe_options_default(&o, 1);
    o.compute = 0;
    o.n_p2p_bytes = 2; /* 8 B and 4 KiB */
    o.n_coll_bytes = 1;
    o.nccl = &hook;
    json_t *doc = NULL;
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(cpdit_probe_run(MPI_COMM_WORLD, &o, &doc, &err) == CPDIT_OK);
    CHECK(allocs == 1 && releases == 1);
    CHECK(syncs > 0);
    if (rank != 0) {
        CHECK(doc == NULL);
    } else {
        CHECK(doc != NULL);
        const json_t *links = json_object_get(doc, "links");
        const json_t *p2p = json_object_get(links, "p2p");
        const json_t *colls = json_object_get(links, "collectives");
        const int classes = size == 4 ? 2 : 1;
        CHECK_MSG(count_transport(p2p, "mpi") == classes * 2 && count_transport(p2p, "test") == classes * 2,
                  "p2p entries: %d mpi, %d test", count_transport(p2p, "mpi"), count_transport(p2p, "test"));
        const int groups = size == 4 ? 3 : 1;
        CHECK_MSG(count_transport(colls, "mpi") == groups * 3 && count_transport(colls, "test") == groups * 3,
                  "collective entries: %d mpi, %d test", count_transport(colls, "mpi"), count_transport(colls, "test"));
        CHECK(json_object_size(json_object_get(links, "fits")) == (size_t)classes);
        CHECK(json_object_size(json_object_get(links, "fits_test")) == (size_t)classes);
        CHECK(json_object_get(json_object_get(links, "fits"), size == 4 ? "cross_node" : "same_numa") ||
              json_object_get(json_object_get(links, "fits"), "same_node") ||
              json_object_get(json_object_get(links, "fits"), "same_socket"));
        CHECK(json_array_size(json_object_get(doc, "hosts")) == (size == 4 ? 2u : 1u));
        CHECK(json_object_get(doc, "compute") == NULL);
        CHECK(strcmp(json_string_value(json_object_get(json_object_get(doc, "probe"), "transports")), "mpi+test") == 0);
    }
    json_decref(doc);
    int fails = test_failures, all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0)
        fprintf(stderr, "%d checks on rank 0, %d failed on all ranks\n", test_checks, all);
    return all ? 1 : 0;
}
