/* weight_shared_mpi.c — node-shared weight arenas in MPI-3 shared windows (see the header). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/weights/weight_shared_mpi.h"

#define SHARED_WHERE "shared weights"
/* Most arenas (models) one sharer serves at a time. */
#define SHARED_MAX_WINDOWS 8
/* Packed weights are read with aligned vector loads. */
#define SHARED_ALIGN 64

struct weight_sharer {
    MPI_Comm node;
    int rank, size;
    MPI_Win win[SHARED_MAX_WINDOWS];
    void *base[SHARED_MAX_WINDOWS];
    int n_win;
};

cpdit_status weight_sharer_create(weight_sharer **out, MPI_Comm comm, cpdit_error *err)
{
    *out = NULL;
    weight_sharer *s = calloc(1, sizeof *s);
    if (!s)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE, "out of memory");
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &s->node) !=
        MPI_SUCCESS) {
        free(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE,
                               "MPI_Comm_split_type(SHARED) failed");
    }
    MPI_Comm_rank(s->node, &s->rank);
    MPI_Comm_size(s->node, &s->size);
    *out = s;
    return CPDIT_OK;
}

void weight_sharer_destroy(weight_sharer *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_win; i++)
        if (s->base[i])
            MPI_Win_free(&s->win[i]);
    MPI_Comm_free(&s->node);
    free(s);
}

int weight_sharer_node_size(const weight_sharer *s)
{
    return s->size;
}

int weight_sharer_node_rank(const weight_sharer *s)
{
    return s->rank;
}

static void *arena_alloc(void *ctx, size_t bytes, int *fill, cpdit_error *err)
{
    weight_sharer *s = ctx;
    if (s->n_win == SHARED_MAX_WINDOWS) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE, "more than %d shared arenas",
                        SHARED_MAX_WINDOWS);
        return NULL;
    }
    const int i = s->n_win;
    void *mine = NULL;
    /* room to align: the segment starts a few bytes into a page, the same in every process */
    const MPI_Aint local = s->rank == 0 ? (MPI_Aint)(bytes + SHARED_ALIGN) : 0;
    if (MPI_Win_allocate_shared(local, 1, MPI_INFO_NULL, s->node, &mine, &s->win[i]) !=
        MPI_SUCCESS) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE,
                        "MPI_Win_allocate_shared of %zu MiB failed (is /dev/shm big enough?)",
                        bytes >> 20);
        return NULL;
    }
    MPI_Aint size = 0;
    int disp = 0;
    void *base = NULL;
    MPI_Win_shared_query(s->win[i], 0, &size, &disp, &base);
    const size_t pad = base ? (SHARED_ALIGN - (uintptr_t)base % SHARED_ALIGN) % SHARED_ALIGN : 0;
    base = base ? (char *)base + pad : NULL;
    if (!base || (size_t)size < bytes + pad) {
        MPI_Win_free(&s->win[i]);
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE,
                        "shared window of %zu bytes: too small for %zu", (size_t)size,
                        bytes);
        return NULL;
    }
    s->base[i] = base;
    s->n_win++;
    *fill = s->rank == 0;
    return base;
}

/* The node's ranks meet; a failure on any (err NULL marks a local one) fails all. */
static int arena_ready(void *ctx, cpdit_error *err)
{
    weight_sharer *s = ctx;
    int mine = err ? 0 : 1, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, s->node);
    if (any && err) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE,
                        "another rank of this node failed to load the shared weights (its "
                        "message says why)");
        return -1;
    }
    return any ? -1 : 0;
}

static void arena_release(void *ctx, void *mem, size_t bytes)
{
    (void)bytes;
    weight_sharer *s = ctx;
    for (int i = 0; i < s->n_win; i++)
        if (s->base[i] == mem) {
            MPI_Win_free(&s->win[i]);
            s->base[i] = NULL;
        }
}

/* Resident only when every rank of the node says so. */
static int arena_agree(void *ctx, int resident)
{
    weight_sharer *s = ctx;
    int all = resident;
    MPI_Allreduce(&resident, &all, 1, MPI_INT, MPI_MIN, s->node);
    return all;
}

weight_arena_ops weight_sharer_arena(weight_sharer *s)
{
    weight_arena_ops o = {.alloc = arena_alloc, .ready = arena_ready,
                          .release = arena_release, .ctx = s, .agree = arena_agree};
    return o;
}
