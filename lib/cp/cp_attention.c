/* cp_attention.c — the entry point of context-parallel attention: configuration names,
 * validation with messages that name the fix, workspace, group agreement, variant dispatch.
 *
 * One call:
 *   1. validate (pure, identical verdict on every rank, so all ranks fail together);
 *   2. size and allocate the variant's workspace (one block of backend memory, kept in the
 *      caller's cp_attention_ws);
 *   3. one small allreduce over the CP group: did every rank allocate, and did every rank pass
 *      the same config / layout / shapes (a hash)? Otherwise all ranks return an error
 *      instead of waiting forever in a mismatched exchange;
 *   4. run the variant;
 *   5. one more small allreduce: a kernel failure on any rank becomes an error on all ranks.
 * A communication failure in step 4 returns at once (MPI reports its own errors).
 */
#include "lib/cp/cp_attention.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/cp/cp_internal.h"

#define CP_WHERE "cp-attention"
#define NS_PER_S 1e9

static const struct {
    const char *name;
    cp_attention_variant variant;
    cp_ring_mode mode;
} cp_names[] = {
    {"auto", CP_ATTN_AUTO, CP_RING_P2P},
    {"ring", CP_ATTN_RING, CP_RING_P2P},
    {"ring-allgather", CP_ATTN_RING, CP_RING_ALLGATHER},
    {"ulysses", CP_ATTN_ULYSSES, CP_RING_P2P},
    {"unified", CP_ATTN_UNIFIED, CP_RING_P2P},
    {"unified-allgather", CP_ATTN_UNIFIED, CP_RING_ALLGATHER},
};
#define CP_NNAMES (sizeof cp_names / sizeof cp_names[0])

cpdit_status cp_attention_config_parse(const char *name, cp_attention_config *cfg,
                                       cpdit_error *err)
{
    for (size_t i = 0; name && i < CP_NNAMES; i++) {
        if (strcmp(name, cp_names[i].name) == 0) {
            cfg->variant = cp_names[i].variant;
            cfg->ring_mode = cp_names[i].mode;
            return CPDIT_OK;
        }
    }
    return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                           "unknown attention variant '%s'; use one of auto, ring, "
                           "ring-allgather, ulysses, unified, unified-allgather",
                           name ? name : "(null)");
}

const char *cp_attention_config_name(const cp_attention_config *cfg)
{
    cp_ring_mode mode = cfg->variant == CP_ATTN_ULYSSES ? CP_RING_P2P : cfg->ring_mode;
    for (size_t i = 0; i < CP_NNAMES; i++)
        if (cp_names[i].variant == cfg->variant && cp_names[i].mode == mode)
            return cp_names[i].name;
    return "auto";
}

double cp_attention_flops(int B, long long S, int H, int D)
{
    return 4.0 * B * (double)S * (double)S * H * D;
}

void cp_heads_split(int H, int n, int *count, int *start)
{
    for (int c = 0; c < n; c++)
        cp_shard_balanced(H, n, c, &start[c], &count[c]);
}

void cp_local_call(const cp_problem *p, cpdit_buf *out, float *lse, const cpdit_buf *q,
                   const cpdit_buf *k, const cpdit_buf *v, int B, int Sq, int Skv)
{
    cpdit_error e;
    struct timespec t0, t1;
    cpdit_error_clear(&e);
    const cpdit_attention_args a = {.B = B, .Sq = Sq, .Skv = Skv, .H = p->H, .D = p->D,
                                    .scale = p->scale};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (p->kernel->forward(out, lse, q, k, v, &a, &e) != CPDIT_OK &&
        p->cerr->status == CPDIT_OK)
        *p->cerr = e;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *p->kernel_seconds +=
        (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / NS_PER_S;
}

void cp_copy_f32_rows(const cpdit_backend *be, float *dst, size_t dst_stride, const float *src,
                      size_t src_stride, size_t n, size_t W)
{
    if (W == 0 || n == 0)
        return;
    /* elements per float: 1 (fp32), 2 (bf16); cp_attention refuses tables where it is not
     * whole. The casts reinterpret fp32 bytes as that many activation elements, which
     * copy_rows moves unchanged. */
    const size_t per = sizeof(float) / be->act_size;
    be->copy_rows((cpdit_buf *)(void *)dst, (int)(dst_stride * per),
                  (const cpdit_buf *)(const void *)src, (int)(src_stride * per), n,
                  (int)(W * per));
}

/* The Ulysses degree a variant splits heads over on a ring x ulysses grid. */
static int ulysses_degree(cp_attention_variant v, int ring, int ulysses)
{
    if (v == CP_ATTN_RING)
        return 1;
    if (v == CP_ATTN_ULYSSES)
        return ring * ulysses;
    return ulysses;
}

/* "2,2,1,1" — the uneven head shares --anything would use — into buf. */
static void shares_text(int H, int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int c = 0; c < n && used + 16 < size; c++) {
        int start, len;
        cp_shard_balanced(H, n, c, &start, &len);
        used += (size_t)snprintf(buf + used, size - used, "%s%d", c ? "," : "", len);
    }
}

cpdit_status cp_attention_validate(const cp_attention_config *cfg, int ring, int ulysses,
                                   const cp_seq_layout *layout, int B, int H, int D,
                                   cpdit_error *err)
{
    if (!cfg || cfg->variant < CP_ATTN_AUTO || cfg->variant > CP_ATTN_UNIFIED ||
        cfg->ring_mode < CP_RING_P2P || cfg->ring_mode > CP_RING_ALLGATHER)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE, "invalid attention config");
    if (ring < 1 || ulysses < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                               "ring and ulysses degrees must be >= 1 (got ring %d, ulysses "
                               "%d); use 1 for no parallelism along that axis",
                               ring, ulysses);
    const int n = ring * ulysses;
    if (!layout || layout->nranks != n)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                               "the sequence layout is for %d ranks but the CP group has ring "
                               "%d x ulysses %d = %d ranks",
                               layout ? layout->nranks : 0, ring, ulysses, n);
    if (B < 1 || H < 1 || D < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                               "batch, heads and head dim must be >= 1 (got B %d, H %d, D %d)",
                               B, H, D);
    const int total = cp_seq_layout_total(layout);
    if (total < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE, "empty sequence (0 tokens)");
    if (!cfg->anything) {
        if (total < n)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                                   "%d tokens over %d ranks: more ranks than tokens; pass "
                                   "--anything to let ranks hold no tokens, or use at most %d "
                                   "ranks",
                                   total, n, total);
        if (!cp_seq_layout_is_even(layout)) {
            int lo = layout->len[0], hi = layout->len[0];
            for (int r = 1; r < n; r++) {
                lo = layout->len[r] < lo ? layout->len[r] : lo;
                hi = layout->len[r] > hi ? layout->len[r] : hi;
            }
            return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                                   "%d tokens (text %d + image %d) do not split evenly over %d "
                                   "ranks (local lengths %d to %d); pass --anything for uneven "
                                   "sequence lengths",
                                   total, layout->txt_total, layout->img_total, n, lo, hi);
        }
    }
    const int U = ulysses_degree(cfg->variant, ring, ulysses);
    if (!cfg->anything && U > 1 && H % U) {
        char shares[256];
        shares_text(H, U, shares, sizeof shares);
        if (H < U)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                                   "%d heads over %d Ulysses ranks: more Ulysses ranks than "
                                   "heads; pass --anything to let some ranks hold no heads "
                                   "(shares %s), or use a ulysses degree that divides %d",
                                   H, U, shares, H);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                               "%d heads do not divide over %d Ulysses ranks (%d %% %d = %d); "
                               "pass --anything for uneven head shares (%s), or use a ulysses "
                               "degree that divides %d",
                               H, U, H, U, H % U, shares, H);
    }
    return CPDIT_OK;
}

/* FNV-1a over what every rank must agree on (the activation dtype too: ranks of different
 * tables would exchange blocks of different sizes); kept below 2^62 so it can be negated. */
static long long agreement_hash(const cp_attention_config *cfg, const cp_seq_layout *layout,
                                cpdit_dtype act_dtype, int B, int H, int D, float scale)
{
    uint64_t h = 1469598103934665603ull;
    uint32_t sbits;
    memcpy(&sbits, &scale, sizeof sbits);
    long long vals[] = {cfg->variant, cfg->ring_mode, cfg->anything, act_dtype, B, H, D, sbits,
                        layout->nranks, layout->txt_total, layout->img_total};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0] + (size_t)layout->nranks; i++) {
        uint64_t x = i < sizeof vals / sizeof vals[0]
                         ? (uint64_t)vals[i]
                         : (uint64_t)layout->len[i - sizeof vals / sizeof vals[0]];
        for (int byte = 0; byte < 8; byte++) {
            h ^= (x >> (8 * byte)) & 0xff;
            h *= 1099511628211ull;
        }
    }
    return (long long)(h >> 2);
}

static size_t workspace_bytes(cp_attention_variant v, const cp_attention_config *cfg,
                              const cp_grid *g, const cp_seq_layout *layout, int B, int H,
                              int D, size_t esize, int workers)
{
    const int me = g->cp_rank;
    if (v == CP_ATTN_RING)
        return cp_ring_ws_bytes(cfg->ring_mode, g->cp_size, layout->len, me, B, H, D, esize,
                                workers);
    if (v == CP_ATTN_ULYSSES)
        return cp_ulysses_ws_bytes(g->cp_size, layout->len, me, B, H, D, CP_RING_P2P, 1, NULL,
                                   0, esize, workers);
    return cp_unified_ws_bytes(g, cfg->ring_mode, layout, B, H, D, esize, workers);
}

void cp_attention_ws_release(cp_attention_ws *ws)
{
    if (ws)
        cpdit_scratch_release(&ws->mem);
}

/* Steps 3 to 5 of a call whose workspace is ready (ws.base NULL when allocation failed). */
static cpdit_status attend(const cp_attention_config *cfg, const cp_grid *g,
                           cp_attention_variant variant, const cpdit_backend *be,
                           const cpdit_attention_kernel *kernel, cp_ws ws, cpdit_buf *out,
                           float *lse, const cpdit_buf *q, const cpdit_buf *k,
                           const cpdit_buf *v, const cp_seq_layout *layout, int B, int H, int D,
                           float scale, double *kernel_seconds, cpdit_error *err)
{
    const size_t L = (size_t)layout->len[g->cp_rank];
    if (!lse && L > 0 && ws.base)
        lse = cp_ws_take(&ws, (size_t)B * L * H * sizeof(float));

    /* 3. agreement: allocation and inputs */
    const long long hash = agreement_hash(cfg, layout, be->act_dtype, B, H, D, scale);
    long long agree[3] = {ws.cap && !ws.base ? 1 : 0, hash, -hash};
    if (cpdit_comm_allreduce(g->cp, agree, 3, CPDIT_COMM_INT64, CPDIT_COMM_MAX, err)) {
        return CPDIT_ERR_RUNTIME;
    }
    if (agree[0]) {
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CP_WHERE,
                               "out of memory for the attention workspace (%zu bytes on this "
                               "rank; failed on at least one rank of the CP group)",
                               ws.cap);
    }
    if (agree[1] != -agree[2]) {
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                               "the ranks of the CP group passed different attention configs, "
                               "layouts, shapes (B, H, D, scale) or activation dtypes");
    }

    /* 4. run */
    cpdit_error cerr;
    cpdit_error_clear(&cerr);
    *kernel_seconds = 0.0;
    cp_problem p = {.B = B,
                    .H = H,
                    .D = D,
                    .scale = scale,
                    .be = be,
                    .act = cpdit_comm_act_type(be->act_dtype),
                    .kernel = kernel,
                    .workers = be->workers(),
                    .cerr = &cerr,
                    .kernel_seconds = kernel_seconds};
    cpdit_status st;
    if (variant == CP_ATTN_RING)
        st = cp_ring_attend(g->cp, cfg->ring_mode, layout->len, &p, out, lse, q, k, v, &ws,
                            err);
    else if (variant == CP_ATTN_ULYSSES)
        st = cp_ulysses_attend(g->cp, layout->len, NULL, CP_RING_P2P, NULL, &p, out, lse, q, k,
                               v, &ws, err);
    else
        st = cp_unified_attend(g, cfg->ring_mode, layout, &p, out, lse, q, k, v, &ws, err);
    if (st != CPDIT_OK)
        return st;

    /* 5. agreement: kernel failures anywhere */
    long long failed = cerr.status != CPDIT_OK;
    if (cpdit_comm_allreduce(g->cp, &failed, 1, CPDIT_COMM_INT64, CPDIT_COMM_MAX, err))
        return CPDIT_ERR_RUNTIME;
    if (cerr.status != CPDIT_OK) {
        if (err)
            *err = cerr;
        return cerr.status;
    }
    if (failed)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, CP_WHERE,
                               "the local attention kernel failed on another rank of the CP "
                               "group");
    return CPDIT_OK;
}

cpdit_status cp_attention(const cp_attention_config *cfg, const cp_grid *g, cp_attention_ws *ws,
                          cpdit_buf *out, float *lse, const cpdit_buf *q, const cpdit_buf *k,
                          const cpdit_buf *v, const cp_seq_layout *layout, int B, int H, int D,
                          float scale, cpdit_error *err)
{
    if (!g)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE, "no grid given");
    if (cp_attention_validate(cfg, g->ring, g->ulysses, layout, B, H, D, err))
        return err ? err->status : CPDIT_ERR_INPUT;
    const cp_attention_variant variant =
        cfg->variant == CP_ATTN_AUTO ? CP_ATTN_UNIFIED : cfg->variant;
    const cpdit_backend *be = cfg->backend ? cfg->backend : cpdit_backend_cpu(); /* host buffers */
    const cpdit_attention_kernel *kernel = cfg->kernel ? cfg->kernel : be->attention_kernels[0];
    const size_t L = (size_t)layout->len[g->cp_rank];
    if (be->act_size == 0 || sizeof(float) % be->act_size ||
        cpdit_comm_dtype_size(cpdit_comm_act_type(be->act_dtype)) != be->act_size)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                               "the %s backend's activations (%zu-byte elements) are neither "
                               "fp32 nor bf16, which context-parallel attention moves",
                               be->name, be->act_size);
    /* where the buffers live, not their element type: MPI moves host memory of any dtype
     * (cpu-bf16 included), device memory needs the grid's GPU communicators */
    if (!be->host_memory && g->cp_size > 1 && g->cp && !strcmp(g->cp->ops->name, "mpi"))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, CP_WHERE,
                               "the %s backend's buffers are device memory but the grid's "
                               "communicators are MPI over host memory; make the grid with "
                               "cp_grid_create_for(..., backend, ...)",
                               be->name);

    /* 2. workspace, plus the LSE when the caller does not want it */
    const size_t bytes =
        workspace_bytes(variant, cfg, g, layout, B, H, D, be->act_size, be->workers());
    const size_t lse_bytes = lse ? 0 : cp_ws_round((size_t)B * L * H * sizeof(float));
    cp_attention_ws own = {{be, NULL, 0}, 0.0};
    cp_attention_ws *w = ws ? ws : &own;
    if (!w->mem.be || w->mem.be != be) { /* first use, or another backend than last time */
        cpdit_scratch_release(&w->mem);
        w->mem.be = be;
    }
    cp_ws cw = {NULL, bytes + lse_bytes, 0};
    if (cw.cap)
        cw.base = cpdit_scratch_get(&w->mem, cw.cap);
    cpdit_status st = attend(cfg, g, variant, be, kernel, cw, out, lse, q, k, v, layout, B, H,
                             D, scale, &w->last_kernel_seconds, err);
    if (!ws)
        cpdit_scratch_release(&own.mem);
    return st;
}

cpdit_status cp_attention_whole(const cp_attention_config *cfg, cpdit_buf *out, float *lse,
                                const cpdit_buf *q, const cpdit_buf *k, const cpdit_buf *v,
                                int B, int S, int H, int D, float scale, cpdit_error *err)
{
    const cpdit_backend *be = cfg && cfg->backend ? cfg->backend : cpdit_backend_cpu();
    const cpdit_attention_kernel *kernel =
        cfg && cfg->kernel ? cfg->kernel : be->attention_kernels[0];
    const cpdit_attention_args a = {.B = B, .Sq = S, .Skv = S, .H = H, .D = D, .scale = scale};
    return kernel->forward(out, lse, q, k, v, &a, err);
}
