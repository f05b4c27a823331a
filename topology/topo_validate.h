/* topo_validate.h — ranges and cross-references of a topology file (format 1), checked
 * before the planner reads it, so that a hand-edited or corrupt file is refused with
 * "FILE: key: message" (CPDIT_ERR_INPUT, exit 2) instead of planning on nonsense
 * ("inf s/step", a rank on a host that does not exist).
 *
 * Checked: "ranks" 1..TOPO_RANKS_MAX; "hosts" (when present) a non-empty array of objects;
 * every rank_map entry's "rank" once, its "host" naming an entry of "hosts"; links.fits
 * alpha_s in [0, TOPO_ALPHA_MAX_S] and beta_Bps in [TOPO_BETA_MIN_BPS, TOPO_BETA_MAX_BPS];
 * links.p2p and links.collectives: bytes, time_s_avg, bw_Bps not negative (nor NaN);
 * compute.sgemm_flops / attention_flops in [TOPO_FLOPS_MIN, TOPO_FLOPS_MAX] when given;
 * compute.threads_per_rank >= 1 when given; hosts[].hwloc.memory_bytes not negative.
 * Duplicate object keys are refused by the JSON reader (JSON_REJECT_DUPLICATES).
 */
#ifndef CPDIT_TOPO_VALIDATE_H
#define CPDIT_TOPO_VALIDATE_H

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TOPO_RANKS_MAX 1048576   /* as many ranks as `cpdit plan --ranks` takes */
#define TOPO_ALPHA_MAX_S 1.0     /* a link latency of a second is a broken measurement */
#define TOPO_BETA_MIN_BPS 1e3    /* 1 kB/s */
#define TOPO_BETA_MAX_BPS 1e15   /* 1 PB/s */
#define TOPO_FLOPS_MIN 1e6       /* 1 MFLOP/s per rank: slower than any machine that runs us */
#define TOPO_FLOPS_MAX 1e18      /* 1 EFLOP/s per rank */

/* root: the parsed document (a jansson json_t *); path names the file in messages. */
cpdit_status topo_file_validate(const void *root, const char *path, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
