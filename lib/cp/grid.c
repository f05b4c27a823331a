/* grid.c — build the dp x ring x ulysses process grid and its sub-communicators (grid.h). */
#include "lib/cp/grid_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "lib/cp/comm_mpi.h"
#ifdef CPDIT_HAVE_CUDA
#include "kernels/cuda/backend_cuda.h"
#include "lib/cp/comm_nccl.h"
#endif

#define GRID_WHERE "grid"

/* Write the divisors of n as "1, 2, 4, 8" into buf. */
static void divisors_text(int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 1; d <= n && used < size; d++) {
        if (n % d)
            continue;
        int w = snprintf(buf + used, size - used, "%s%d", used ? ", " : "", d);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

cpdit_status cp_grid_resolve(int world_size, int dp, int ring, int ulysses, int *dp_out,
                             cpdit_error *err)
{
    char div[256];
    if (world_size < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, GRID_WHERE, "world of %d ranks",
                               world_size);
    if (ring < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, GRID_WHERE,
                               "ring degree must be >= 1 (got %d); use --ring 1 for no ring "
                               "parallelism",
                               ring);
    if (ulysses < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, GRID_WHERE,
                               "ulysses degree must be >= 1 (got %d); use --ulysses 1 for no "
                               "Ulysses parallelism",
                               ulysses);
    if (dp < 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, GRID_WHERE,
                               "data-parallel degree must be >= 1, or 0 for \"the rest of the "
                               "ranks\" (got %d)",
                               dp);
    long long cp = (long long)ring * ulysses;
    if (cp > world_size || world_size % cp) {
        divisors_text(world_size, div, sizeof div);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, GRID_WHERE,
                               "ring %d x ulysses %d = %lld does not divide %d ranks; use a ring "
                               "x ulysses product that divides %d (%s) or run on a multiple of "
                               "%lld ranks",
                               ring, ulysses, cp, world_size, world_size, div, cp);
    }
    int rest = world_size / (int)cp;
    if (dp != 0 && dp != rest)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, GRID_WHERE,
                               "dp %d x ring %d x ulysses %d = %lld ranks but %d are running; "
                               "use dp %d, or dp 0 for \"the rest\"",
                               dp, ring, ulysses, (long long)dp * cp, world_size, rest);
    *dp_out = rest;
    return CPDIT_OK;
}

void cp_grid_coords(int world_rank, int ring, int ulysses, int *dp_index, int *ring_index,
                    int *ulysses_index)
{
    int cp = ring * ulysses;
    int in_group = world_rank % cp;
    *dp_index = world_rank / cp;
    *ring_index = in_group / ulysses;
    *ulysses_index = in_group % ulysses;
}

int cp_grid_rank_of(int dp_index, int ring_index, int ulysses_index, int ring, int ulysses)
{
    return dp_index * (ring * ulysses) + ring_index * ulysses + ulysses_index;
}

/* A communicator over sub for be's memory (see cp_grid_create_for). What decides is where the
 * buffers live (host_memory), not their element type: MPI moves host memory of every
 * activation dtype ("cpu" fp32 and "cpu-bf16" alike, the callers give the element type). */
static cpdit_status wrap_for(MPI_Comm sub, const cpdit_backend *be, cpdit_comm **out,
                             cpdit_error *err)
{
    if (!be || be->host_memory)
        return cpdit_comm_mpi_create(sub, 1, out, err);
#ifdef CPDIT_HAVE_CUDA
    if (be == cpdit_backend_cuda()) {
        void *stream = cpdit_cuda_compute_stream(err);
        if (!stream) {
            MPI_Comm_free(&sub);
            return CPDIT_ERR_RUNTIME;
        }
        const char *force = getenv("CPDIT_COMM_GPU");
        cpdit_comm_gpu_kind kind = CPDIT_COMM_GPU_AUTO;
        if (force && !strcmp(force, "nccl"))
            kind = CPDIT_COMM_GPU_NCCL;
        else if (force && !strcmp(force, "staged"))
            kind = CPDIT_COMM_GPU_STAGED;
        /* the GPU communicator works on its own duplicate of sub (MPI_Comm_dup inside), so
         * sub is freed here: kept, every grid would leak a communicator */
        cpdit_status st = cpdit_comm_gpu_create(sub, stream, kind, out, err);
        MPI_Comm_free(&sub);
        return st;
    }
#endif
    MPI_Comm_free(&sub);
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, GRID_WHERE,
                           "the %s backend's memory needs GPU communicators, which this build "
                           "does not have",
                           be->name);
}

/* MPI_Comm_split + wrap (ownership passes to the cpdit_comm). */
static cpdit_status split_wrap(MPI_Comm world, int color, int key, const cpdit_backend *be,
                               cpdit_comm **out, cpdit_error *err)
{
    MPI_Comm sub = MPI_COMM_NULL;
    int rc = MPI_Comm_split(world, color, key, &sub);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, GRID_WHERE, "MPI_Comm_split: %s", msg);
    }
    return wrap_for(sub, be, out, err);
}

cpdit_status cp_grid_create(MPI_Comm world, int dp, int ring, int ulysses, cp_grid **out,
                            cpdit_error *err)
{
    return cp_grid_create_for(world, dp, ring, ulysses, NULL, out, err);
}

cpdit_status cp_grid_create_for(MPI_Comm world, int dp, int ring, int ulysses,
                                const cpdit_backend *be, cp_grid **out, cpdit_error *err)
{
    int rank = 0, size = 0, dp_resolved = 0;
    *out = NULL;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    if (cp_grid_resolve(size, dp, ring, ulysses, &dp_resolved, err))
        return err ? err->status : CPDIT_ERR_INPUT;
    cp_grid *g = calloc(1, sizeof *g);
    if (!g)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, GRID_WHERE, "out of memory");
    g->world_rank = rank;
    g->world_size = size;
    g->dp = dp_resolved;
    g->ring = ring;
    g->ulysses = ulysses;
    cp_grid_coords(rank, ring, ulysses, &g->dp_index, &g->ring_index, &g->ulysses_index);
    g->cp_size = ring * ulysses;
    g->cp_rank = g->ring_index * ulysses + g->ulysses_index;

    /* All four splits run on every rank even if one fails, so no rank is left waiting in a
     * collective the others skipped. */
    cpdit_error e[4];
    cpdit_status st[4];
    for (int i = 0; i < 4; i++)
        cpdit_error_clear(&e[i]);
    st[0] = split_wrap(world, g->dp_index, g->cp_rank, be, &g->cp, &e[0]);
    st[1] = split_wrap(world, g->dp_index * ulysses + g->ulysses_index, g->ring_index, be,
                       &g->ring_comm, &e[1]);
    st[2] = split_wrap(world, g->dp_index * ring + g->ring_index, g->ulysses_index, be,
                       &g->ulysses_comm, &e[2]);
    st[3] = split_wrap(world, g->cp_rank, g->dp_index, be, &g->dp_comm, &e[3]);
    for (int i = 0; i < 4; i++) {
        if (st[i] != CPDIT_OK) {
            if (err)
                *err = e[i];
            cp_grid_destroy(g);
            return st[i];
        }
    }
    *out = g;
    return CPDIT_OK;
}

void cp_grid_destroy(cp_grid *g)
{
    if (!g)
        return;
    cpdit_comm_destroy(g->cp);
    cpdit_comm_destroy(g->ring_comm);
    cpdit_comm_destroy(g->ulysses_comm);
    cpdit_comm_destroy(g->dp_comm);
    free(g);
}

const char *cp_grid_describe(const cp_grid *g, char *buf, size_t n)
{
    snprintf(buf, n, "dp %d x ring %d x ulysses %d (%d ranks)", g->dp, g->ring, g->ulysses,
             g->world_size);
    return buf;
}
