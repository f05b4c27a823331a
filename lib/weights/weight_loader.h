/* weight_loader.h — the one weight loader of the models (FLUX transformer, CLIP, T5, the VAE
 * decoder): names,
 * shapes and dtypes checked against a safetensors set (one file or a sharded index), weights
 * created once by the backend (kernels/backend.h weight_create) within a memory budget, and
 * streamed group by group (one transformer block, ...) when they do not fit.
 *
 * Use:
 *   weight_loader_open(&wl, set, where, be)           set and be outlive the loader
 *   weight_loader_add(&wl, group, kind, ...)          per parameter: the tensor (or a row range
 *                                                     of one: BFL's fused q|k|v), its shape
 *   weight_loader_add_conv(&wl, name, ...)             a convolution's weight (Cout, Cin, K, K)
 *   weight_loader_first_unused(&wl, ignore, n)         a checkpoint tensor nobody asked for
 *   weight_loader_prepare(&wl, budget, format)         vectors to fp32; matrices created now
 *                                                     when all fit in budget ("resident"),
 *                                                     else created per group at acquire
 *   weight_loader_acquire(&wl, g) / release(&wl, g)    around the use of group g
 *   weight_loader_set_prefetch(&wl, 1)                 streaming: while group g is in use, a
 *                                                     helper thread reads and converts group
 *                                                     (g + 1) mod n_groups (the FLUX order)
 *   weight_loader_set_lockstep(&wl, first, n, me)      streaming: the ranks of one CP group
 *                                                     (acquiring the same groups in the same
 *                                                     order) on one node share the two slots,
 *                                                     each group made once per node
 * Kinds:
 *   WEIGHT_VECTOR  norms, biases: fp32 in the backend's memory (kernels/backend.h), always
 *                  loaded; on a host-memory backend in place from the map when the file holds
 *                  aligned fp32, on a device backend uploaded once into one block;
 *   WEIGHT_HOST_VECTOR  small tables that host code reads (T5's relative-bias table): fp32 in
 *                  host memory whatever the backend;
 *   WEIGHT_MATRIX  the linear layers: backend weights (bf16 packed on the CPU by default);
 *   WEIGHT_ROWS    embedding tables: never loaded whole, rows gathered at use;
 *   WEIGHT_CONV    convolution weights: packed by the backend from the stored dtype
 *                  (be->conv2d_pack_stored: bf16 stays bf16 in the native format, no fp32 copy
 *                  on the way), always made at prepare (never streamed), in be's memory.
 * The tensors come from a safetensors set (a checkpoint's map: pages dropped once a weight is
 * made from them) or, with weight_loader_open_tensors, from the caller's host memory (a model
 * built in memory for tests and benchmarks: used as a checkpoint of those dtypes would be).
 * Resident weights live in one block (the "arena"), which may be memory shared by the ranks of
 * a node (weight_loader_set_arena): one rank fills it, the others use it (host-memory backends
 * only; a device backend allocates its weights itself).
 * The backend owns the weights: every matrix is made by be->weight_create and every vector
 * lives in be's memory, so a GPU backend holds the whole model on its device.
 */
#ifndef CPDIT_WEIGHT_LOADER_H
#define CPDIT_WEIGHT_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "lib/core/cpdit_error.h"
#include "lib/io/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weight_kind {
    WEIGHT_VECTOR = 0,  /* read by the backend's ops: fp32 in the backend's memory */
    WEIGHT_MATRIX,
    WEIGHT_ROWS,
    WEIGHT_HOST_VECTOR, /* read by host code (T5's relative-bias table): fp32 host memory */
    WEIGHT_CONV         /* a convolution's weight: the backend's packed form (conv2d) */
} weight_kind;

/* The tensor named name of a caller's set of host tensors, or NULL (weight_loader_open_tensors). */
typedef const safetensors_tensor *(*weight_tensor_find)(void *ctx, const char *name);

typedef struct weight_param {
    char name[128];                /* the model's name, for messages */
    const safetensors_tensor *t;
    size_t elem_offset, nelem;     /* the range of t holding it */
    int swap_halves;               /* the range's two halves are stored in the other order */
    int rows, cols;                /* cols 0: a vector of rows; CONV: Cout, Cin */
    int conv_k;                    /* CONV: the kernel size K */
    weight_kind kind;
    int group;
    const cpdit_weight **wdst;     /* MATRIX: filled with its weight while usable (or NULL) */
    const float **fdst;            /* VECTOR: filled with its fp32 values (or NULL) */
    const float **cdst;            /* CONV: filled with its packed weights (or NULL) */
    float *conv;                   /* CONV: the packed weights (be->free) while they exist */
    cpdit_weight *w;               /* MATRIX: the weight while it exists */
    cpdit_weight *next_w;          /* MATRIX: made ahead by the prefetch thread (its group's) */
    const float *f32;              /* VECTOR: fp32 values */
    size_t arena_offset;           /* MATRIX: offset of its storage in the arena */
    size_t group_offset;           /* MATRIX: offset of its storage in its group's slot */
} weight_param;

/* Storage of the resident weights, given by a caller that shares it (lib/cp/node_shared.h):
 * alloc returns bytes of memory and whether this process writes it (*fill = 1) or another
 * does (*fill = 0); ready is called after this process created its weights and before any
 * is used (a barrier of the sharing processes, after which the fillers' writes are visible);
 * release frees it. Each returns 0 on success (alloc NULL = failure, err filled). */
/* Streaming slots shared by processes that acquire the same groups in the same order (the
 * ranks of one CP group on one node; lib/weights/weight_stream_share.c has the protocol,
 * lib/weights/weight_shared_mpi.c the memory). alloc is collective over the processes of
 * [first, first + count) of the sharing communicator that are on this process's node (me is
 * this process's rank there): bytes of memory mapped by all of them, its first zero_bytes
 * zero, and this process's index among them (*member) and their number (*members). When
 * fewer than two of them are on the node (or me is not this process) it returns NULL with
 * *members = 1 and no error: nothing to share. release frees it (collective over the same
 * processes). alloc NULL: not set. */
typedef struct weight_stream_ops {
    void *(*alloc)(void *ctx, int first, int count, int me, size_t bytes, size_t zero_bytes,
                   int *member, int *members, cpdit_error *err);
    void (*release)(void *ctx, void *mem, size_t bytes);
    void *ctx;
} weight_stream_ops;

typedef struct weight_arena_ops {
    void *(*alloc)(void *ctx, size_t bytes, int *fill, cpdit_error *err);
    int (*ready)(void *ctx, cpdit_error *err);
    void (*release)(void *ctx, void *mem, size_t bytes);
    void *ctx;
    /* May be NULL. Called by every sharing process in prepare with its own decision (1 = the
     * weights fit its budget: resident in the shared arena); returns the decision of all of
     * them (1 only when all said 1), so that no process waits alone in alloc when their
     * budgets (free memory, read at slightly different times) disagree. */
    int (*agree)(void *ctx, int resident);
    /* Streaming slots shared the same way (zero: each process has its own; used only once
     * the loader knows its lockstep peers, weight_loader_set_lockstep). */
    weight_stream_ops stream;
} weight_arena_ops;

struct weight_stream_share;

typedef struct weight_loader {
    safetensors_set *set;          /* NULL: the caller's tensors (find) */
    weight_tensor_find find;
    void *find_ctx;
    char *where;                   /* for messages */
    const cpdit_backend *be;
    weight_param **params;         /* stable pointers */
    size_t n_params, cap_params;
    unsigned char *used;           /* [safetensors_set_count] */
    int n_groups;                  /* 1 + largest group index */
    size_t n_values;               /* parameters registered */
    /* after prepare */
    int prepared;
    int resident;                  /* 1: all matrices exist; 0: streamed per group */
    cpdit_weight_format format;
    float *vectors;                /* converted vectors (host) */
    void *be_vectors;              /* WEIGHT_VECTORs in the backend's memory (device backends) */
    size_t be_vector_bytes;
    void *arena;                   /* resident matrices, or the streamed group's */
    size_t arena_bytes;
    int arena_shared;              /* arena from arena_ops */
    weight_arena_ops arena_ops;
    int have_arena_ops;
    int current_group;             /* streaming: the group whose matrices exist, or -1 */
    /* streaming: two slots of largest_group_bytes of backend memory, made on first use and
     * reused by every block (the current group in one, the prefetched one in the other), so
     * streaming allocates and faults in no memory per block */
    void *slot[2];
    int current_slot;              /* the slot of current_group */
    size_t matrix_bytes;           /* all matrices in the backend's form */
    size_t largest_group_bytes;
    /* streaming with prefetch (weight_loader_set_prefetch) */
    int prefetch;                  /* 1: make the next group ahead on a helper thread */
    struct weight_prefetch *pf;    /* the helper's state (NULL until first used) */
    /* statistics */
    double create_seconds;         /* time spent reading and converting matrices (on the
                                      compute thread or the prefetch thread) */
    double stall_seconds;          /* time acquire waited for them on the compute thread */
    unsigned long long bytes_read; /* bytes of matrices read from the map (counted per read) */
    unsigned long long prefetched_groups; /* groups that were ready (or in the making) ahead */
    /* streaming slots shared with the lockstep peers on this node (weight_stream_share.c) */
    int lockstep_first, lockstep_count, lockstep_me; /* set_lockstep; count 0: not set */
    int share_off;                 /* 1: never share the slots (nothing to share, or stopped) */
    struct weight_stream_share *share; /* NULL until the first shared streaming acquire */
    int stream_sharers;            /* processes using the same slots (1: own slots) */
    unsigned long long peer_groups; /* groups made by another process of the node */
} weight_loader;

/* be: the backend that makes and holds the weights (NULL: cpdit_backend_default()).
 * Errors: out of memory (RUNTIME). */
cpdit_status weight_loader_open(weight_loader *wl, safetensors_set *set, const char *where,
                                const cpdit_backend *be, cpdit_error *err);
void weight_loader_close(weight_loader *wl);

/* A loader over the caller's host tensors instead of a set: find(ctx, name) looks them up;
 * their data must stay valid and unchanged while the loader lives (weights may use it in
 * place). Nothing of it is dropped. Errors as weight_loader_open. */
cpdit_status weight_loader_open_tensors(weight_loader *wl, weight_tensor_find find, void *ctx,
                                        const char *where, const cpdit_backend *be,
                                        cpdit_error *err);

/* Register parameter `name` (the model's name) of shape (rows, cols) (cols 0: (rows)) found as
 * rows [row_off, row_off + rows) of tensor disk_name, which must have shape (disk_rows, cols);
 * swap: the two halves of that range are stored in the opposite order. dst: where the loader
 * publishes it (const cpdit_weight ** for MATRIX, const float ** for VECTOR, NULL for ROWS).
 * needs: how the message names the expectation ("this config needs", "config.json implies");
 * hint: appended to a shape error (or ""). *out (may be NULL) receives the parameter.
 * A MATRIX may be stored as a 1x1 convolution's weight (rows, cols, 1, 1) (the VAE's deprecated
 * attention projections).
 * Errors (INPUT, where = the loader's where): missing tensor (with " (holds '<name>')" when
 * the names differ), other shape (both in the message), not a float dtype. */
cpdit_status weight_loader_add(weight_loader *wl, int group, weight_kind kind, const char *name,
                               const char *disk_name, int64_t disk_rows, int64_t row_off,
                               int64_t rows, int64_t cols, int swap, void *dst,
                               const char *needs, const char *hint, weight_param **out,
                               cpdit_error *err);

/* Register tensor `name` stored with exactly shape[0..ndim) as a MATRIX (rows, cols) or a
 * VECTOR (rows) (cols 0) of the same values in the same order: a Conv3d whose kernel equals
 * its stride as the linear (Cout, Cin*kt*kh*kw) over patch vectors, a (1, 6, dim) modulation
 * table as a vector. Errors as weight_loader_add (the shape message shows `shape`). */
cpdit_status weight_loader_add_shaped(weight_loader *wl, int group, weight_kind kind,
                                      const char *name, const int64_t *shape, int ndim,
                                      int64_t rows, int64_t cols, void *dst, const char *needs,
                                      const char *hint, cpdit_error *err);

/* Register the convolution weight `name` of shape (cout, cin, k, k), stored as disk_name (NULL:
 * name); dst (may be NULL) receives the backend's packed weights for be->conv2d at prepare.
 * Errors as weight_loader_add. */
cpdit_status weight_loader_add_conv(weight_loader *wl, const char *name, const char *disk_name,
                                    int cout, int cin, int k, const float **dst,
                                    const char *needs, weight_param **out, cpdit_error *err);

/* The name of the first tensor of the set not registered and not starting with one of
 * ignore[0..n_ignore), or NULL. */
const char *weight_loader_first_unused(const weight_loader *wl, const char *const *ignore,
                                       int n_ignore);

/* Change the backend before prepare (models that learn it at their first forward); be NULL or
 * the current one: nothing. Errors (INPUT): the weights were already made for another. */
cpdit_status weight_loader_set_backend(weight_loader *wl, const cpdit_backend *be,
                                       cpdit_error *err);

/* Share the resident arena (call before prepare). */
void weight_loader_set_arena(weight_loader *wl, const weight_arena_ops *ops);

/* Streaming: processes [first, first + count) of the communicator that shares the arena (ranks
 * of one CP group; me = this one) acquire this loader's groups in the same order, one group
 * at a time (acquire(g) means the previous group is no longer used). Those on one node then
 * share the two streaming slots (with arena ops that have stream ops, on a host-memory
 * backend): each group is read and made once per node, by the processes in turn, into a
 * free slot, and used by all. The first shared acquire is collective over them (they must all
 * make it, with nothing failed before). count <= 1: no peers. A later change (another grid)
 * stops the sharing for good: own slots from then on. */
void weight_loader_set_lockstep(weight_loader *wl, int first, int count, int me);

/* This process stops following the lockstep order (an error left the peers at different
 * groups): every sharer makes its groups in its own slots from its next acquire on (none
 * waits for a group that will never come). Nothing when the slots are not shared. */
void weight_loader_stream_abandon(weight_loader *wl);

/* Convert the vectors; when all matrices fit in budget bytes (in the backend's form for
 * format), create them all now (resident), else plan streaming. Idempotent after success.
 * Errors: conversion failures (INPUT, naming the file), out of memory (RUNTIME). */
cpdit_status weight_loader_prepare(weight_loader *wl, size_t budget, cpdit_weight_format format,
                                   cpdit_error *err);

/* Make group g's matrices usable (streaming: create them, freeing the previous group's; with
 * prefetch on, take them from the helper thread when it made them, then start it on group
 * (g + 1) mod n_groups). A prefetch that failed reports its error here, when its group is
 * acquired. */
cpdit_status weight_loader_acquire(weight_loader *wl, int g, cpdit_error *err);

/* Streaming only (resident weights need nothing ahead): on = 1 makes acquire overlap the next
 * group's read and conversion with the use of the current one, at the cost of holding two
 * groups' matrices at once. The backend's weight_create must be safe to call from a second
 * thread while the first computes (the CPU backend's is). Without threads, or when the
 * thread cannot start, acquire makes every group itself. */
void weight_loader_set_prefetch(weight_loader *wl, int on);

/* A weight of p made now for the caller, freed with be->weight_free (streaming users that run
 * forwards concurrently). */
cpdit_status weight_loader_make(const weight_loader *wl, const weight_param *p,
                                cpdit_weight **out, cpdit_error *err);

/* dst[r, :] = p[ids[r], :] for r < n, fp32 (p a ROWS (rows, cols) table; ids in [0, rows)). */
cpdit_status weight_loader_gather_rows(const weight_param *p, const int32_t *ids, size_t n,
                                       float *dst, cpdit_error *err);

/* Bytes the loader holds now for weights (vectors, arena; not the convolutions, whose packed
 * size only the backend knows). */
size_t weight_loader_bytes(const weight_loader *wl);

/* Drop the map pages of [p, p + bytes) (whole pages inside): file-backed, read-only, they come
 * back from the page cache (or the disk) when read again. */
void weight_drop_pages(const void *p, size_t bytes);

/* The default weight budget: the machine's available memory (MemAvailable) less a reserve for
 * activations, divided among the processes that do not share (ranks_sharing = 1 when the
 * node's ranks share one copy, else the ranks on this node). */
size_t weight_budget_default(int ranks_not_sharing);

/* This process's proportional set size (Linux smaps_rollup "Pss": pages shared by n processes
 * count 1/n), bytes; 0 when unknown. */
size_t weight_process_pss_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
