/* comm.h — the one communicator interface of cpdit.
 *
 * Attention code talks to its peers only through a cpdit_comm: a table of operations (ops)
 * plus the implementation's opaque state (impl). The MPI implementation lives in comm_mpi.c;
 * an NCCL one plugs in later with its own table, without changing any caller.
 *
 * Units: every count and displacement is in elements of the given type (the data movers take
 * it as their second argument: CPDIT_COMM_BF16 for a bf16 table's activations), never bytes.
 * Counts are size_t; an implementation whose native counts are narrower (MPI: int) must split
 * large transfers or fail with a clear error, never truncate.
 *
 * Call through the cpdit_comm_* functions below, not through ops directly: they keep the byte
 * counters (bytes_sent / bytes_received: payload exchanged with OTHER ranks; a rank's copy to
 * itself inside an all-to-all is not counted) that the benchmarks report.
 *
 * Non-blocking point-to-point: isend/irecv fill a cpdit_comm_request (caller-owned storage,
 * start it as CPDIT_COMM_REQUEST_INIT); test/wait complete it. Waiting on a request that was
 * never started (or already completed) returns CPDIT_OK at once. Every started request must be
 * waited on (or tested until done) before its buffer is reused or freed.
 */
#ifndef CPDIT_COMM_H
#define CPDIT_COMM_H

#include <stddef.h>
#include "lib/core/cpdit_error.h"
#include "lib/core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cpdit_comm cpdit_comm;

/* An in-flight non-blocking operation; impl belongs to the implementation. */
typedef struct cpdit_comm_request {
    void *impl;
} cpdit_comm_request;
#define CPDIT_COMM_REQUEST_INIT {0}

/* Element types (of the data movers and of allreduce) and reductions (allreduce). */
typedef enum cpdit_comm_dtype {
    CPDIT_COMM_FLOAT = 0,
    CPDIT_COMM_DOUBLE,
    CPDIT_COMM_INT64, /* long long */
    CPDIT_COMM_BF16   /* 2-byte bf16 activations: moved, never reduced (allreduce refuses it) */
} cpdit_comm_dtype;

/* Bytes of one element of type (4, 8, 8, 2); 0 for a value outside the enum. */
size_t cpdit_comm_dtype_size(cpdit_comm_dtype type);
/* The comm type of activations stored as dtype (CPDIT_DTYPE_F32 -> FLOAT, BF16 -> BF16), as
 * a backend's act_dtype: cpdit_comm_act_type(be->act_dtype). Any other dtype is a programming
 * error (no table stores activations so): the result is then a value outside the enum, which
 * every cpdit_comm_* call refuses with CPDIT_ERR_RUNTIME ("invalid element type"), the same
 * on every rank, so the group fails together instead of moving wrong bytes. */
cpdit_comm_dtype cpdit_comm_act_type(cpdit_dtype dtype);

typedef enum cpdit_comm_op { CPDIT_COMM_SUM = 0, CPDIT_COMM_MAX, CPDIT_COMM_MIN } cpdit_comm_op;

/* The operation table. Each returns CPDIT_OK, or CPDIT_ERR_RUNTIME with err filled. */
typedef struct cpdit_comm_ops {
    const char *name; /* "mpi", "nccl", ... */

    /* All-to-all with per-peer counts. send: segment for peer p is send_counts[p] elements of
     * type at send + send_displs[p]; recv: segment from peer p is recv_counts[p] elements at
     * recv + recv_displs[p]. Arrays have size entries. recv_counts[p] must equal what p
     * sends to this rank. */
    cpdit_status (*alltoallv)(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                              const size_t *send_counts, const size_t *send_displs, void *recv,
                              const size_t *recv_counts, const size_t *recv_displs,
                              cpdit_error *err);

    /* All-gather with per-rank counts: this rank contributes send_count elements (must equal
     * recv_counts[rank]); rank p's contribution lands at recv + recv_displs[p]. */
    cpdit_status (*allgatherv)(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                               size_t send_count, void *recv, const size_t *recv_counts,
                               const size_t *recv_displs, cpdit_error *err);

    /* Non-blocking point-to-point of count elements of type with peer (a rank of this
     * communicator). Messages between one pair with one tag arrive in the order they were
     * sent. */
    cpdit_status (*isend)(cpdit_comm *c, cpdit_comm_dtype type, const void *buf, size_t count,
                          int peer, int tag, cpdit_comm_request *req, cpdit_error *err);
    cpdit_status (*irecv)(cpdit_comm *c, cpdit_comm_dtype type, void *buf, size_t count,
                          int peer, int tag, cpdit_comm_request *req, cpdit_error *err);
    /* *done = 1 when the request completed (it is then released), else 0. Calling test also
     * lets the implementation progress transfers in the background of a computation. */
    cpdit_status (*test)(cpdit_comm *c, cpdit_comm_request *req, int *done, cpdit_error *err);
    cpdit_status (*wait)(cpdit_comm *c, cpdit_comm_request *req, cpdit_error *err);

    cpdit_status (*barrier)(cpdit_comm *c, cpdit_error *err);
    /* In-place reduction of count elements over all ranks (for small things: timings,
     * agreement checks). FLOAT, DOUBLE and INT64 only: the dispatcher refuses BF16. */
    cpdit_status (*allreduce)(cpdit_comm *c, void *buf, size_t count, cpdit_comm_dtype type,
                              cpdit_comm_op op, cpdit_error *err);
    /* Broadcast bytes bytes from root. */
    cpdit_status (*bcast)(cpdit_comm *c, void *buf, size_t bytes, int root, cpdit_error *err);

    /* Release impl (and the underlying handle if the comm owns it). */
    void (*destroy)(cpdit_comm *c);
} cpdit_comm_ops;

struct cpdit_comm {
    const cpdit_comm_ops *ops;
    void *impl;
    int rank; /* this process's rank in the communicator, 0..size-1 */
    int size; /* number of ranks */
    /* payload exchanged with other ranks through the cpdit_comm_* calls, in bytes */
    unsigned long long bytes_sent;
    unsigned long long bytes_received;
};

/* Dispatchers (comm.c): validate arguments that every implementation would check, count the
 * bytes, call the table. Shapes and units as in cpdit_comm_ops. */
cpdit_status cpdit_comm_alltoallv(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                  const size_t *send_counts, const size_t *send_displs,
                                  void *recv, const size_t *recv_counts,
                                  const size_t *recv_displs, cpdit_error *err);
cpdit_status cpdit_comm_allgatherv(cpdit_comm *c, cpdit_comm_dtype type, const void *send,
                                   size_t send_count, void *recv, const size_t *recv_counts,
                                   const size_t *recv_displs, cpdit_error *err);
cpdit_status cpdit_comm_isend(cpdit_comm *c, cpdit_comm_dtype type, const void *buf,
                              size_t count, int peer, int tag, cpdit_comm_request *req,
                              cpdit_error *err);
cpdit_status cpdit_comm_irecv(cpdit_comm *c, cpdit_comm_dtype type, void *buf, size_t count,
                              int peer, int tag, cpdit_comm_request *req, cpdit_error *err);
cpdit_status cpdit_comm_test(cpdit_comm *c, cpdit_comm_request *req, int *done,
                             cpdit_error *err);
cpdit_status cpdit_comm_wait(cpdit_comm *c, cpdit_comm_request *req, cpdit_error *err);
/* Blocking send / receive: isend or irecv followed by wait. */
cpdit_status cpdit_comm_send(cpdit_comm *c, cpdit_comm_dtype type, const void *buf,
                             size_t count, int peer, int tag, cpdit_error *err);
cpdit_status cpdit_comm_recv(cpdit_comm *c, cpdit_comm_dtype type, void *buf, size_t count,
                             int peer, int tag, cpdit_error *err);
cpdit_status cpdit_comm_barrier(cpdit_comm *c, cpdit_error *err);
cpdit_status cpdit_comm_allreduce(cpdit_comm *c, void *buf, size_t count, cpdit_comm_dtype type,
                                  cpdit_comm_op op, cpdit_error *err);
cpdit_status cpdit_comm_bcast(cpdit_comm *c, void *buf, size_t bytes, int root,
                              cpdit_error *err);
/* Did every rank of c succeed? Collective over c: one small allreduce, and when some rank
 * failed, one broadcast of the lowest failing rank's error, so that one rank's failure never
 * leaves the others waiting in the next collective. A failing rank (st != OK) keeps its own
 * status and message and returns st; every other rank returns the lowest failing rank's
 * status with its message in err, marked "(failed on another rank: R of N)". CPDIT_OK when
 * every rank passed CPDIT_OK. c NULL or of one rank: returns st. When the agreement itself
 * cannot communicate: st if this rank failed, else CPDIT_ERR_BROKEN (the group cannot be
 * trusted any more). err may be NULL. */
cpdit_status cpdit_comm_agree(cpdit_comm *c, cpdit_status st, cpdit_error *err);
/* Zero the byte counters. */
void cpdit_comm_reset_counters(cpdit_comm *c);
/* Destroy c (NULL is fine) and free the struct. */
void cpdit_comm_destroy(cpdit_comm *c);

#ifdef __cplusplus
}
#endif
#endif
