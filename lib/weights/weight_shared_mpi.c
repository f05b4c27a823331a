/* weight_shared_mpi.c — node-shared weight arenas in MPI-3 shared windows (see the header). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lib/weights/weight_shared_mpi.h"

#define SHARED_WHERE "shared weights"
/* Most arenas (models) one sharer serves at a time. */
#define SHARED_MAX_WINDOWS 8
/* Packed weights are read with aligned vector loads. */
#define SHARED_ALIGN 64

/* A rank alone on its node keeps its arena in private memory on transparent huge pages (the
 * shared window of /dev/shm has 4 KiB pages: ~270 k page faults per GiB written). */
#define SHARED_HUGE_PAGE ((size_t)2 << 20)

/* The tag of MPI_Comm_create_group for the streaming peers (disjoint groups may share it). */
#define SHARED_STREAM_TAG 4816

/* A window of streaming slots and the communicator of its peers. */
typedef struct shared_stream_win {
    MPI_Win win;
    MPI_Comm comm;
    void *base;
} shared_stream_win;

struct weight_sharer {
    MPI_Comm node;
    int rank, size;
    int world_rank;       /* in the communicator the sharer was made over */
    int *node_world;      /* [2 * size]: the world rank of each rank of the node; scratch */
    MPI_Win win[SHARED_MAX_WINDOWS];
    void *base[SHARED_MAX_WINDOWS];
    void *priv_map[SHARED_MAX_WINDOWS]; /* a lone rank's private arena: the mmap, or NULL */
    size_t priv_len[SHARED_MAX_WINDOWS];
    int n_win;
    shared_stream_win stream[SHARED_MAX_WINDOWS];
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
    s->world_rank = rank;
    s->node_world = malloc(2 * (size_t)s->size * sizeof *s->node_world);
    if (!s->node_world) {
        MPI_Comm_free(&s->node);
        free(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE, "out of memory");
    }
    MPI_Allgather(&rank, 1, MPI_INT, s->node_world, 1, MPI_INT, s->node);
    *out = s;
    return CPDIT_OK;
}

void weight_sharer_destroy(weight_sharer *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_win; i++)
        if (s->priv_map[i])
            munmap(s->priv_map[i], s->priv_len[i]);
        else if (s->base[i])
            MPI_Win_free(&s->win[i]);
    for (int i = 0; i < SHARED_MAX_WINDOWS; i++)
        if (s->stream[i].base) {
            MPI_Win_free(&s->stream[i].win);
            MPI_Comm_free(&s->stream[i].comm);
        }
    MPI_Comm_free(&s->node);
    free(s->node_world);
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
    if (s->size == 1) { /* nobody to share with: private memory on huge pages */
        const size_t len = bytes + SHARED_HUGE_PAGE;
        void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED) {
            cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE,
                            "out of memory for %zu MiB of weights", bytes >> 20);
            return NULL;
        }
        char *base = (char *)(((uintptr_t)map + SHARED_HUGE_PAGE - 1) /
                              SHARED_HUGE_PAGE * SHARED_HUGE_PAGE);
#ifdef MADV_HUGEPAGE
        const char *e = getenv("CPDIT_HUGEPAGES"); /* opt-in, as kernels/cpu's cpu_alloc */
        if (e && e[0] == '1')
            (void)madvise(base, bytes, MADV_HUGEPAGE); /* advice: ignored where THP is off */
#endif
        s->priv_map[i] = map;
        s->priv_len[i] = len;
        s->base[i] = base;
        s->n_win++;
        *fill = 1;
        return base;
    }
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
            if (s->priv_map[i])
                munmap(s->priv_map[i], s->priv_len[i]);
            else
                MPI_Win_free(&s->win[i]);
            s->base[i] = NULL;
            s->priv_map[i] = NULL;
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

/* ------------------------------------------------------------------ streaming slots */

/* The window of the streaming peers: the ranks of [first, first + count) on this node, in
 * rank order; collective over them only (MPI_Comm_create_group), so groups that are not in
 * lockstep (other dp groups) never wait for each other. */
static void *stream_alloc(void *ctx, int first, int count, int me, size_t bytes,
                          size_t zero_bytes, int *member, int *members, cpdit_error *err)
{
    weight_sharer *s = ctx;
    *member = 0;
    *members = 1;
    if (me != s->world_rank || me < first || me >= first + count)
        return NULL;
    int *ranks = s->node_world + s->size;
    int n = 0, mine = 0;
    for (int r = 0; r < s->size; r++) /* node ranks in world-rank order (the split keeps it) */
        if (s->node_world[r] >= first && s->node_world[r] < first + count) {
            if (r == s->rank)
                mine = n;
            ranks[n++] = r;
        }
    int slot = -1;
    for (int i = 0; i < SHARED_MAX_WINDOWS && slot < 0; i++)
        if (!s->stream[i].base)
            slot = i;
    if (n < 2 || slot < 0) /* every peer counts the same: none goes on */
        return NULL;
    MPI_Group node_group, peers;
    MPI_Comm_group(s->node, &node_group);
    MPI_Group_incl(node_group, n, ranks, &peers);
    MPI_Comm comm = MPI_COMM_NULL;
    const int rc = MPI_Comm_create_group(s->node, peers, SHARED_STREAM_TAG, &comm);
    MPI_Group_free(&peers);
    MPI_Group_free(&node_group);
    if (rc != MPI_SUCCESS || comm == MPI_COMM_NULL) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE,
                        "MPI_Comm_create_group of the %d streaming peers failed", n);
        *members = n;
        return NULL;
    }
    shared_stream_win *w = &s->stream[slot];
    void *mine_base = NULL;
    const MPI_Aint local = mine == 0 ? (MPI_Aint)(bytes + SHARED_ALIGN) : 0;
    if (MPI_Win_allocate_shared(local, 1, MPI_INFO_NULL, comm, &mine_base, &w->win) !=
        MPI_SUCCESS) {
        MPI_Comm_free(&comm);
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE,
                        "MPI_Win_allocate_shared of %zu MiB of streaming slots failed (is "
                        "/dev/shm big enough?)", bytes >> 20);
        *members = n;
        return NULL;
    }
    MPI_Aint size = 0;
    int disp = 0;
    void *base = NULL;
    MPI_Win_shared_query(w->win, 0, &size, &disp, &base);
    const size_t pad = base ? (SHARED_ALIGN - (uintptr_t)base % SHARED_ALIGN) % SHARED_ALIGN : 0;
    base = base ? (char *)base + pad : NULL;
    if (base && mine == 0)
        memset(base, 0, zero_bytes < bytes ? zero_bytes : bytes);
    MPI_Barrier(comm); /* the control block is zero before anyone reads it */
    if (!base || (size_t)size < bytes + pad) { /* the same on every peer */
        MPI_Win_free(&w->win);
        MPI_Comm_free(&comm);
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARED_WHERE,
                        "shared window of %zu bytes: too small for %zu", (size_t)size, bytes);
        *members = n;
        return NULL;
    }
    w->comm = comm;
    w->base = base;
    *member = mine;
    *members = n;
    return base;
}

static void stream_release(void *ctx, void *mem, size_t bytes)
{
    (void)bytes;
    weight_sharer *s = ctx;
    for (int i = 0; i < SHARED_MAX_WINDOWS; i++)
        if (s->stream[i].base && s->stream[i].base == mem) {
            MPI_Win_free(&s->stream[i].win);
            MPI_Comm_free(&s->stream[i].comm);
            s->stream[i].base = NULL;
        }
}

weight_arena_ops weight_sharer_arena(weight_sharer *s)
{
    weight_arena_ops o = {.alloc = arena_alloc, .ready = arena_ready,
                          .release = arena_release, .ctx = s, .agree = arena_agree,
                          .stream = {.alloc = stream_alloc, .release = stream_release,
                                     .ctx = s}};
    return o;
}
