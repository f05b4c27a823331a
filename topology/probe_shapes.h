/* probe_shapes.h — compute timed at one model's own shapes: the linear layers (GEMMs
 * M x K x N) and attention-kernel calls (Sq x Skv, heads, head dim) that one transformer step
 * runs on a rank, for every context-parallel degree a grid of `ranks` ranks can have. The cost
 * model then prices a grid with these times instead of FLOPs / a rate measured at other
 * shapes (a 96-wide GEMM or a head dim of 16 runs far from the rate of a 1024^3 SGEMM).
 *
 * What is timed, per CP degree c (c divides ranks), from the layout the run uses
 * (model_plan_rank_tokens; rank 0's shares: tl sharded text + il image tokens, l = tl + il),
 * all read from the model's plan shape (lib/models/model_plan.h), whatever its family:
 *   one forward's linear layers (gemm[]), called in sequence as the model calls them, each
 *     over the rows it runs on: the rank's text, image or whole share, or every text token
 *     (replicated work, e.g. Wan's cross-attention K/V) — FLUX: double blocks (x Ld), per
 *     stream m in {tl, il}: 4 x (m, E, E), (m, E, F), (m, F, E); single blocks (x Ls):
 *     3 x (l, E, E), (l, E, F), (l, E + F, E); embedders and the final projection;
 *   the element-wise work of the blocks (block_ops[]: LayerNorm + modulation, RMSNorm + RoPE
 *     of q and k, GELU over l x F, the concatenation copy, gated residuals over l rows), timed
 *     on at most 1024 rows (quick: 256) and scaled (on CPUs, for a model as small as
 *     builtin:tiny, this is more time than its GEMMs);
 *   attention, for every sharded kind and every split R x U = c: G = ceil(S / R) queries of
 *     h = ceil(H / U) heads against S keys (R = 1, or the ring all-gather) and against G keys
 *     (one ring block); for every local kind (cross-attention) ceil(Sq / c) queries of all H
 *     heads against all its keys.
 * GEMMs run through the default backend's `linear` with bf16 weights (the pipeline's native
 * format), attention through its default kernel, with the threads per rank as configured.
 *
 * How: every rank runs the same things at once (as in a run: on an oversubscribed or shared
 * node the ranks share the cores). After a warm-up call of each, rounds time one window of
 * about 0.1 s (quick: 0.03 s) of each thing, a barrier before each window, in an order rotated
 * each round so that a change in the machine's load hits every shape alike; a thing's time is
 * the median window's mean call, the slowest rank's. Calls timed one by one would catch
 * moments when a rank has a shared core to itself. Shapes above PROBE_SHAPES_CAP_FLOPS per
 * call are timed on a cut (at least PROBE_SHAPES_MIN_ROWS rows, one head) and scaled
 * linearly.
 *
 * Sync cost: the GEMMs of the largest CP degree (a run's work between two sync points) timed
 * in windows without and with a small all-reduce after every call; sync_s = the difference
 * per call (0 on one rank). On a node with a free core per rank it is about the all-reduce's
 * latency; on an oversubscribed or shared node it is the wait for descheduled peers, which
 * an idle ping-pong does not see.
 *
 * JSON (one entry of the topology file's compute.shapes[], topology/README.md):
 *   {"model", "width", "height", ["frames" (video only),] "txt_tokens", "img_tokens", "ranks",
 *    "linear": [{"cp", "txt_tokens", "img_tokens", "time_s" (= gemm_s + elementwise_s),
 *                "gemm_s", "elementwise_s", "flops" (of the GEMMs), "flops_per_s"}],
 *    "attention": [{"sq", "skv", "heads", "head_dim", "time_s", "flops", "flops_per_s"}],
 *    "sync_s", "sync_chunk_s"}
 */
#ifndef CPDIT_PROBE_SHAPES_H
#define CPDIT_PROBE_SHAPES_H

#include <jansson.h>
#include <mpi.h>

#include "lib/core/cpdit_error.h"
#include "lib/models/model_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PROBE_SHAPES_MIN_ROWS 256
#define PROBE_SHAPES_CAP_FLOPS 4e8       /* per timed call: larger shapes are cut */
#define PROBE_SHAPES_CAP_FLOPS_QUICK 2e7 /* the job-start probe: seconds, not tens */

/* Collective over comm. ranks: the rank count the grids are for (usually comm's size).
 * On success *out is the entry above on rank 0 (new reference), NULL elsewhere. Local
 * failures (memory) are agreed on: every rank returns the same status and message. */
cpdit_status probe_shapes_measure(MPI_Comm comm, const model_plan_shape *s, int ranks, int quick,
                                  json_t **out, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
