/* pipeline_cache.h — fewer transformer evaluations between sampler steps: a first-block cache
 * and a TaylorSeer-style forecaster, run through the family's block hooks
 * (lib/models/model_hooks.h) for any family with block_hooks.
 *
 * fbcache[:THRESHOLD] (diffusers' FirstBlockCache, ParaAttention's first-block cache): every
 *   forward runs the embeddings and the first block; r = its output minus its input on the
 *   sampler tokens' rows. With r_full the same residual at the last full evaluation,
 *   diff = mean|r - r_full| / mean|r_full|; diff > THRESHOLD (default 0.05, diffusers'
 *   FirstBlockCacheConfig) runs the remaining blocks and keeps their residual
 *   (hN - h1, all rows); otherwise h1 + that residual stands for hN and the remaining blocks
 *   are skipped. The first forward of an item is always full. Under context parallelism the
 *   two sums are reduced over the CP group (one allreduce of 2 doubles) before deciding, so
 *   every rank of the group takes the same decision; data-parallel groups decide alone.
 * taylorseer[:ORDER,INTERVAL] (diffusers' TaylorSeerCache defaults: max_order 1,
 *   cache_interval 5, disable_cache_before_step 3): full evaluations at steps 0 .. 2 and at
 *   every step i with (i - 3 - 1) % INTERVAL == 0 keep finite differences of the block
 *   stack's output hN up to ORDER (divided by the step distance); the other steps forecast
 *   hN = sum_k F_k d^k / k! (d: steps since the last full one) and run no block. The
 *   decision depends on the step index only (the same on every rank, no communication).
 *
 * With true CFG the prompt and the negative prompt keep separate states (diffusers' "cond"
 * and "uncond" cache contexts). Every state is per rank and holds only this rank's rows
 * (sharded like the tokens): state_bytes says how much.
 */
#ifndef CPDIT_PIPELINE_CACHE_H
#define CPDIT_PIPELINE_CACHE_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pipeline_cache_kind {
    PIPELINE_CACHE_NONE = 0,
    PIPELINE_CACHE_FBCACHE,
    PIPELINE_CACHE_TAYLORSEER
} pipeline_cache_kind;

#define PIPELINE_FBCACHE_THRESHOLD_DEFAULT 0.05f
#define PIPELINE_FBCACHE_THRESHOLD_MAX 10.0f
#define PIPELINE_TAYLORSEER_ORDER_DEFAULT 1
#define PIPELINE_TAYLORSEER_ORDER_MAX 4
#define PIPELINE_TAYLORSEER_INTERVAL_DEFAULT 5
#define PIPELINE_TAYLORSEER_INTERVAL_MAX 100
#define PIPELINE_TAYLORSEER_WARMUP 3 /* full steps before the first forecast */
/* Steps recorded in a pattern ('F' full, 'C' cached / forecast per forward), per branch */
#define PIPELINE_CACHE_PATTERN_MAX 256

/* Zero-initialised = no cache. */
typedef struct pipeline_cache_config {
    pipeline_cache_kind kind;
    float threshold; /* fbcache */
    int order;       /* taylorseer */
    int interval;    /* taylorseer */
} pipeline_cache_config;

/* "none", "fbcache", "fbcache:0.1", "taylorseer", "taylorseer:2,4" -> *c. INPUT error whose
 * where is `where` ("--cache", "cache" of a manifest) naming the bad part. */
cpdit_status pipeline_cache_parse(const char *spec, const char *where, pipeline_cache_config *c,
                                  cpdit_error *err);
/* The canonical spelling ("none", "fbcache:0.05", "taylorseer:1,5") into buf (n bytes). */
void pipeline_cache_describe(const pipeline_cache_config *c, char *buf, size_t n);

/* What a cache did for one item on this rank (pipeline_timings.cache). */
typedef struct pipeline_cache_stats {
    int full, cached;          /* transformer forwards run in full / from the cache */
    double full_s, cached_s;   /* their wall seconds */
    size_t state_bytes;        /* cache memory on this rank (its rows only) */
    /* one letter per forward in order: 'F' full, 'C' cached; with sequential CFG the
     * prompt's forwards, '/', the negative prompt's (truncated at the size) */
    char pattern[2 * PIPELINE_CACHE_PATTERN_MAX + 2];
} pipeline_cache_stats;

/* Seconds the cached forwards saved against full ones: cached x (mean full - mean cached);
 * 0 without both kinds. */
double pipeline_cache_saved_s(const pipeline_cache_stats *s);

#ifdef __cplusplus
}
#endif
#endif
