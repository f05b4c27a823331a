/* pipeline_cache.c — the first-block cache and the TaylorSeer forecaster (pipeline_cache.h):
 * the spec parser and the per-item state behind the family's block hooks (model_hooks.h). */
#include "lib/pipeline/pipeline_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm.h"

#define CACHE_BRANCHES 2

/* ------------------------------------------------------------------ the spec */

static cpdit_status bad_spec(cpdit_error *err, const char *where, const char *spec,
                             const char *why)
{
    return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                           "'%s': %s (fbcache[:THRESHOLD] with 0 < THRESHOLD <= %g, "
                           "taylorseer[:ORDER,INTERVAL] with ORDER 1..%d and INTERVAL 1..%d, "
                           "or none)",
                           spec, why, (double)PIPELINE_FBCACHE_THRESHOLD_MAX,
                           PIPELINE_TAYLORSEER_ORDER_MAX, PIPELINE_TAYLORSEER_INTERVAL_MAX);
}

/* A whole decimal integer in [lo, hi] from s up to end (exclusive). */
static int parse_int_range(const char *s, const char *end, int lo, int hi, int *out)
{
    char buf[32];
    const size_t n = (size_t)(end - s);
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *e;
    const long v = strtol(buf, &e, 10);
    if (*e || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

cpdit_status pipeline_cache_parse(const char *spec, const char *where, pipeline_cache_config *c,
                                  cpdit_error *err)
{
    memset(c, 0, sizeof *c);
    if (!spec || !strcmp(spec, "none"))
        return CPDIT_OK;
    const char *colon = strchr(spec, ':');
    const size_t name_len = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *args = colon ? colon + 1 : NULL;
    if (name_len == strlen("fbcache") && !strncmp(spec, "fbcache", name_len)) {
        c->kind = PIPELINE_CACHE_FBCACHE;
        c->threshold = PIPELINE_FBCACHE_THRESHOLD_DEFAULT;
        if (args) {
            char *e;
            const double t = strtod(args, &e);
            if (!*args || *e || !(t > 0) || t > PIPELINE_FBCACHE_THRESHOLD_MAX)
                return bad_spec(err, where, spec, "the threshold is not a number in range");
            c->threshold = (float)t;
        }
        return CPDIT_OK;
    }
    if (name_len == strlen("taylorseer") && !strncmp(spec, "taylorseer", name_len)) {
        c->kind = PIPELINE_CACHE_TAYLORSEER;
        c->order = PIPELINE_TAYLORSEER_ORDER_DEFAULT;
        c->interval = PIPELINE_TAYLORSEER_INTERVAL_DEFAULT;
        if (args) {
            const char *comma = strchr(args, ',');
            if (!comma ||
                parse_int_range(args, comma, 1, PIPELINE_TAYLORSEER_ORDER_MAX, &c->order) ||
                parse_int_range(comma + 1, comma + 1 + strlen(comma + 1), 1,
                                PIPELINE_TAYLORSEER_INTERVAL_MAX, &c->interval))
                return bad_spec(err, where, spec, "ORDER,INTERVAL are not integers in range");
        }
        return CPDIT_OK;
    }
    return bad_spec(err, where, spec, "unknown cache");
}

void pipeline_cache_describe(const pipeline_cache_config *c, char *buf, size_t n)
{
    if (!c || c->kind == PIPELINE_CACHE_NONE)
        snprintf(buf, n, "none");
    else if (c->kind == PIPELINE_CACHE_FBCACHE)
        snprintf(buf, n, "fbcache:%g", (double)c->threshold);
    else
        snprintf(buf, n, "taylorseer:%d,%d", c->order, c->interval);
}

double pipeline_cache_saved_s(const pipeline_cache_stats *s)
{
    if (s->full < 1 || s->cached < 1)
        return 0.0;
    const double d = s->full_s / s->full - s->cached_s / s->cached;
    return d > 0 ? d * s->cached : 0.0;
}

/* ------------------------------------------------------------------ the state */

/* One branch's state (the prompt's or the negative prompt's); rows (rows, dim) of this rank. */
typedef struct cache_branch {
    struct pipeline_cache *owner;
    model_block_hooks hooks;
    long long rows, probe_start, probe_rows;
    int dim;
    float *buf;      /* (rows, dim): the hooks' buffer */
    float *h0;       /* fbcache (probe_rows, dim): this forward's first-block input */
    float *head_res; /* fbcache (probe_rows, dim): the first block's residual, last full one */
    float *h1;       /* fbcache (rows, dim): this full forward's first-block output */
    float *tail_res; /* fbcache (rows, dim): hN - h1 of the last full forward */
    float *factors;  /* taylorseer (order + 1, rows, dim): F_0 = hN, F_k the k-th difference */
    int n_factors;   /* taylorseer: valid factors */
    int last_full;   /* taylorseer: the step of the last full forward (-1: none) */
    int step;        /* the step of the forward in flight */
    int full;        /* 1: the forward in flight ran every block */
    int n_forwards, n_full, n_cached;
    double full_s, cached_s;
    char pattern[PIPELINE_CACHE_PATTERN_MAX + 1];
} cache_branch;

struct pipeline_cache {
    pipeline_cache_config cfg;
    cpdit_comm *group; /* the CP group (NULL: one rank) */
    cache_branch br[CACHE_BRANCHES];
};

static size_t floats_of(long long rows, int dim)
{
    return (size_t)rows * (size_t)dim;
}

static void branch_free(cache_branch *b)
{
    float *all[] = {b->buf, b->h0, b->head_res, b->h1, b->tail_res, b->factors};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* The state's arrays for rows x dim (the first call of a forward; the shape never changes
 * within an item). */
static float *hook_buffer(void *ctx, long long rows, int dim)
{
    cache_branch *b = ctx;
    if (b->buf && (b->rows != rows || b->dim != dim))
        return NULL; /* an item's shape is fixed */
    if (b->buf)
        return b->buf;
    b->rows = rows;
    b->dim = dim;
    b->buf = malloc((floats_of(rows, dim) ? floats_of(rows, dim) : 1) * sizeof(float));
    return b->buf;
}

static float *lazy(float **p, size_t n)
{
    if (!*p)
        *p = malloc((n ? n : 1) * sizeof(float));
    return *p;
}

static cpdit_status no_memory(cpdit_error *err)
{
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "cache", "out of memory (cache state)");
}

/* fbcache at the first block: decide over the group; skip with h1 + the tail residual. */
static cpdit_status fb_head(cache_branch *b, model_hidden *hs, int *skip, cpdit_error *err)
{
    const size_t np = floats_of(hs->probe_rows, hs->dim), n = floats_of(hs->rows, hs->dim);
    const float *h1p = hs->h + (size_t)hs->probe_start * hs->dim;
    int compute = 1;
    if (b->head_res) {
        double sums[2] = {0.0, 0.0}; /* sum |r - r_full|, sum |r_full| */
        for (size_t k = 0; k < np; k++) {
            const double r = (double)h1p[k] - b->h0[k];
            sums[0] += fabs(r - b->head_res[k]);
            sums[1] += fabs((double)b->head_res[k]);
        }
        if (b->owner->group) {
            cpdit_status st = cpdit_comm_allreduce(b->owner->group, sums, 2, CPDIT_COMM_DOUBLE,
                                                   CPDIT_COMM_SUM, err);
            if (st)
                return st;
        }
        compute = !(sums[1] > 0) || sums[0] / sums[1] > b->owner->cfg.threshold;
    }
    if (!compute) {
        for (size_t k = 0; k < n; k++)
            hs->h[k] += b->tail_res[k];
        *skip = 1;
        b->full = 0;
        return CPDIT_OK;
    }
    if (!lazy(&b->head_res, np) || !lazy(&b->h1, n) || !lazy(&b->tail_res, n))
        return no_memory(err);
    for (size_t k = 0; k < np; k++)
        b->head_res[k] = h1p[k] - b->h0[k];
    memcpy(b->h1, hs->h, n * sizeof(float));
    b->full = 1;
    return CPDIT_OK;
}

/* taylorseer: is step i a full one (diffusers' schedule)? */
static int ts_full_step(const pipeline_cache_config *c, int i)
{
    return i < PIPELINE_TAYLORSEER_WARMUP || (i - PIPELINE_TAYLORSEER_WARMUP - 1) % c->interval == 0;
}

/* taylorseer after the last block: F_0 = hN, F_{j+1} = (F_j(new) - F_j(old)) / d. */
static cpdit_status ts_update(cache_branch *b, const model_hidden *hs, cpdit_error *err)
{
    const int max_f = b->owner->cfg.order + 1;
    const size_t n = floats_of(hs->rows, hs->dim);
    if (!lazy(&b->factors, n * (size_t)max_f))
        return no_memory(err);
    const int have = b->last_full < 0 ? 0 : b->n_factors;
    const float d = (float)(b->step - b->last_full);
    const int next = have + 1 < max_f ? have + 1 : max_f;
    for (size_t e = 0; e < n; e++) {
        float cur = hs->h[e];
        for (int j = 0; j < next; j++) {
            float *f = b->factors + (size_t)j * n + e;
            const float prev = *f;
            *f = cur;
            if (j < have)
                cur = (cur - prev) / d;
        }
    }
    b->n_factors = next;
    b->last_full = b->step;
    return CPDIT_OK;
}

/* taylorseer forecast: hN = sum_k F_k d^k / k!. */
static void ts_predict(const cache_branch *b, model_hidden *hs)
{
    const size_t n = floats_of(hs->rows, hs->dim);
    const double d = b->step - b->last_full;
    double coef[PIPELINE_TAYLORSEER_ORDER_MAX + 1];
    coef[0] = 1.0;
    for (int k = 1; k < b->n_factors; k++)
        coef[k] = coef[k - 1] * d / k;
    for (size_t e = 0; e < n; e++) {
        float v = 0.0f;
        for (int k = 0; k < b->n_factors; k++)
            v += b->factors[(size_t)k * n + e] * (float)coef[k];
        hs->h[e] = v;
    }
}

static cpdit_status hook_at(void *ctx, model_hook_point point, model_hidden *hs, int *skip,
                            cpdit_error *err)
{
    cache_branch *b = ctx;
    const pipeline_cache_config *c = &b->owner->cfg;
    *skip = 0;
    b->probe_start = hs->probe_start;
    b->probe_rows = hs->probe_rows;
    if (c->kind == PIPELINE_CACHE_FBCACHE) {
        const size_t np = floats_of(hs->probe_rows, hs->dim);
        switch (point) {
        case MODEL_HOOK_EMBEDDED:
            if (!lazy(&b->h0, np))
                return no_memory(err);
            memcpy(b->h0, hs->h + (size_t)hs->probe_start * hs->dim, np * sizeof(float));
            return CPDIT_OK;
        case MODEL_HOOK_HEAD:
            return fb_head(b, hs, skip, err);
        case MODEL_HOOK_TAIL:
            for (size_t k = 0; k < floats_of(hs->rows, hs->dim); k++)
                b->tail_res[k] = hs->h[k] - b->h1[k];
            return CPDIT_OK;
        }
        return CPDIT_OK;
    }
    if (point == MODEL_HOOK_EMBEDDED) {
        b->full = b->n_factors == 0 || ts_full_step(c, b->step);
        if (!b->full) {
            ts_predict(b, hs);
            *skip = 1;
        }
        return CPDIT_OK;
    }
    return point == MODEL_HOOK_TAIL ? ts_update(b, hs, err) : CPDIT_OK;
}

cpdit_status pipeline_cache_open(const pipeline_cache_config *cfg, cpdit_comm *group,
                                 pipeline_cache **out, cpdit_error *err)
{
    *out = NULL;
    if (!cfg || cfg->kind == PIPELINE_CACHE_NONE)
        return CPDIT_OK;
    pipeline_cache *c = calloc(1, sizeof *c);
    if (!c)
        return no_memory(err);
    c->cfg = *cfg;
    c->group = group;
    for (int k = 0; k < CACHE_BRANCHES; k++) {
        cache_branch *b = &c->br[k];
        b->owner = c;
        b->last_full = -1;
        b->hooks.ctx = b;
        b->hooks.buffer = hook_buffer;
        b->hooks.at = hook_at;
        b->hooks.points = cfg->kind == PIPELINE_CACHE_FBCACHE
                              ? MODEL_HOOK_BIT(MODEL_HOOK_EMBEDDED) |
                                    MODEL_HOOK_BIT(MODEL_HOOK_HEAD) |
                                    MODEL_HOOK_BIT(MODEL_HOOK_TAIL)
                              : MODEL_HOOK_BIT(MODEL_HOOK_EMBEDDED) |
                                    MODEL_HOOK_BIT(MODEL_HOOK_TAIL);
    }
    *out = c;
    return CPDIT_OK;
}

const model_block_hooks *pipeline_cache_hooks(pipeline_cache *c, int branch, int step)
{
    if (!c || branch < 0 || branch >= CACHE_BRANCHES)
        return NULL;
    cache_branch *b = &c->br[branch];
    b->step = step;
    b->full = 1; /* until a hook says otherwise */
    return &b->hooks;
}

void pipeline_cache_done(pipeline_cache *c, int branch, double seconds)
{
    if (!c || branch < 0 || branch >= CACHE_BRANCHES)
        return;
    cache_branch *b = &c->br[branch];
    if (b->full) {
        b->n_full++;
        b->full_s += seconds;
    } else {
        b->n_cached++;
        b->cached_s += seconds;
    }
    if (b->n_forwards < PIPELINE_CACHE_PATTERN_MAX)
        b->pattern[b->n_forwards] = b->full ? 'F' : 'C';
    b->n_forwards++;
}

void pipeline_cache_stats_of(const pipeline_cache *c, pipeline_cache_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!c)
        return;
    size_t at = 0;
    for (int k = 0; k < CACHE_BRANCHES; k++) {
        const cache_branch *b = &c->br[k];
        s->full += b->n_full;
        s->cached += b->n_cached;
        s->full_s += b->full_s;
        s->cached_s += b->cached_s;
        const size_t n = floats_of(b->rows, b->dim), np = floats_of(b->probe_rows, b->dim);
        s->state_bytes += sizeof(float) *
                          ((b->buf ? n : 0) + (b->h0 ? np : 0) + (b->head_res ? np : 0) +
                           (b->h1 ? n : 0) + (b->tail_res ? n : 0) +
                           (b->factors ? n * (size_t)(c->cfg.order + 1) : 0));
        if (!b->n_forwards)
            continue;
        if (at)
            s->pattern[at++] = '/';
        const size_t len = strlen(b->pattern);
        memcpy(s->pattern + at, b->pattern, len);
        at += len;
    }
    s->pattern[at] = 0;
}

void pipeline_cache_close(pipeline_cache *c)
{
    if (!c)
        return;
    for (int k = 0; k < CACHE_BRANCHES; k++)
        branch_free(&c->br[k]);
    free(c);
}
