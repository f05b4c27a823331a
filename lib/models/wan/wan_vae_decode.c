/* wan_vae_decode.c — AutoencoderKLWan's decoder forward pass, frame by frame, split by rows
 * over a CP group (see wan_vae.h).
 *
 * Streaming: one latent frame at a time goes through post_quant_conv, conv_in and the mid
 * block, then depth first through the up blocks: every op is per frame except the causal
 * convs, which keep a cache of their last WAN_VAE_CACHE_T input frames (wan_vae_internal.h),
 * and upsample3d, whose time_conv turns one frame into two (each pushed on through the rest of the
 * decoder before the next), except for the clip's first frame, which passes without it
 * (diffusers' first-chunk rule: its feat_cache holds "Rep"). Each RGB frame is gathered on one
 * CP rank (the sink: 0, or the owner of a clip in a --vae-parallel world round) and handed to
 * the caller as soon as it exists. Memory: the caches (2 frames per
 * causal conv at its level, as diffusers' feat_cache) plus a few frames in flight (pooled):
 * flat in T.
 *
 * Layout and exactness as lib/vae/vae_decode.c: each rank holds a band of rows of every frame
 * (cp_shard_balanced over the latent rows, doubled by each upsampling), NHWC with a halo row
 * above and below; before every 3x3 conv the border rows are exchanged with the neighbours
 * (zeros at the image edges); WanRMS_norm is per pixel; the mid-block attention over a
 * frame's positions runs through cp_attention (ring). One rank runs the same code with no
 * communication.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm.h"
#include "lib/cp/cp_attention.h"
#include "lib/cp/cp_shard.h"
#include "lib/models/wan/wan_vae_internal.h"

#define POOL_SLOTS 48
#define HALO_TAG_DOWN 1501 /* a row travelling to the next rank (its halo above) */
#define HALO_TAG_UP 1502   /* a row travelling to the previous rank (its halo below) */
#define GATHER_TAG 1503
/* F.normalize divides by max(||x||, 1e-12); as an RMS norm (x / sqrt(mean x² + eps)) that is
 * eps = 1e-24 / C: nothing for any norm well above 1e-12, and 0 (not NaN) for a zero pixel. */
#define NORMALIZE_EPS_SQ 1e-24
#define MAX_LATENT_SIDE 16384

typedef struct pool_slot {
    cpdit_buf *base; /* halo row, rows, halo row */
    cpdit_buf *p;    /* row 0 */
    size_t cap;      /* elements */
    int in_use;
} pool_slot;

typedef struct window {
    cpdit_buf *base, *p; /* a causal conv's cache (rows, W, (taps - 1)·cin); p = base */
    size_t n;            /* elements */
} window;

typedef struct ctx {
    wan_vae *d;
    const cpdit_backend *be;
    const cp_grid *grid;      /* NULL: one rank */
    cpdit_comm *comm;         /* grid->cp or NULL */
    cpdit_comm_dtype act_type;
    void *zeros;              /* host zeros for a device table's zero fills */
    size_t zeros_bytes;
    int rank, size, up, down;
    int sink;                 /* the CP rank that gathers the frames and calls fn */
    const int *lat_rows;      /* [size] */
    int h, w;                 /* latent size */
    void *ws;
    pool_slot slots[POOL_SLOTS];
    window *win;              /* [d->n_windows] */
    int started[WAN_VAE_MAX_LEVELS]; /* upsample3d of block i has seen the clip's first frame */
    int item, frame;          /* the item decoded, the next output frame */
    int clamp;                /* clamp the frames to [-1, 1] (0: the tiled decode blends first) */
    cpdit_buf *img, *chw;     /* the sink: one RGB frame (H·W, oc) and (oc, H·W) */
    float *host;              /* the sink: (oc, H, W) */
    wan_vae_frame_fn fn;
    void *fn_ctx;
    cpdit_error *err;
} ctx;

/* ------------------------------------------------------------------ memory */

static cpdit_status oom(ctx *c)
{
    return cpdit_error_set(c->err, CPDIT_ERR_RUNTIME, "wan vae", "out of memory");
}

/* rows x W x C elements with a halo row above and below; returns row 0 (NULL: out of memory,
 * err set). The smallest free pooled buffer that fits, else a new one (in an empty slot, or
 * in place of a free buffer too small for it when every slot is taken). */
static cpdit_buf *take(ctx *c, int rows, int W, int C)
{
    const size_t row = (size_t)W * C, n = ((size_t)rows + 2) * row;
    pool_slot *best = NULL, *empty = NULL;
    for (int i = 0; i < POOL_SLOTS; i++) {
        pool_slot *s = &c->slots[i];
        if (s->base && !s->in_use && s->cap >= n && (!best || s->cap < best->cap))
            best = s;
        if (!s->base && !empty)
            empty = s;
    }
    for (int i = 0; !best && !empty && i < POOL_SLOTS; i++) { /* recycle a free slot */
        pool_slot *s = &c->slots[i];
        if (s->base && !s->in_use) {
            c->be->free(s->base);
            s->base = NULL;
            empty = s;
        }
    }
    if (!best) {
        cpdit_buf *b = empty ? cpdit_act_alloc(c->be, n) : NULL;
        if (!b) {
            oom(c);
            return NULL;
        }
        best = empty;
        best->base = b;
        best->cap = n;
    }
    best->in_use = 1;
    best->p = cpdit_buf_at(c->be, best->base, (ptrdiff_t)row);
    return best->p;
}

static void give(ctx *c, const cpdit_buf *p)
{
    for (int i = 0; p && i < POOL_SLOTS; i++)
        if (c->slots[i].in_use && c->slots[i].p == p)
            c->slots[i].in_use = 0;
}

/* n zero activations at p. */
static cpdit_status zero(ctx *c, cpdit_buf *p, size_t n)
{
    const size_t bytes = cpdit_act_bytes(c->be, n);
    if (c->be->host_memory) {
        memset(p, 0, bytes);
        return CPDIT_OK;
    }
    if (c->zeros_bytes < bytes) {
        free(c->zeros);
        c->zeros_bytes = 0;
        if (!(c->zeros = calloc(1, bytes)))
            return oom(c);
        c->zeros_bytes = bytes;
    }
    c->be->upload(p, c->zeros, bytes);
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ convolutions */

/* y (rows, W, cout) = cv's 2D conv of x (rows, W, cin_all), halo rows exchanged first. */
static cpdit_status conv2d(ctx *c, const wv_conv *cv, cpdit_buf *y, cpdit_buf *x, int rows,
                           int W, int cin_all)
{
    const cpdit_backend *be = c->be;
    cpdit_error *err = c->err;
    if (rows == 0)
        return CPDIT_OK;
    if (cv->k == 3) {
        const size_t row = (size_t)W * cin_all;
        cpdit_buf *above = cpdit_buf_at(be, x, -(ptrdiff_t)row);
        cpdit_buf *below = cpdit_buf_at(be, x, (ptrdiff_t)((size_t)rows * row));
        cpdit_buf *last = cpdit_buf_at(be, x, (ptrdiff_t)((size_t)(rows - 1) * row));
        cpdit_comm_request rq[4] = {CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT,
                                    CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT};
        cpdit_status st = CPDIT_OK;
        if (c->up < 0)
            st = zero(c, above, row);
        else if (!(st = cpdit_comm_irecv(c->comm, c->act_type, above, row, c->up,
                                         HALO_TAG_DOWN, &rq[0], err)))
            st = cpdit_comm_isend(c->comm, c->act_type, x, row, c->up, HALO_TAG_UP, &rq[1],
                                  err);
        if (!st && c->down < 0)
            st = zero(c, below, row);
        else if (!st && !(st = cpdit_comm_irecv(c->comm, c->act_type, below, row, c->down,
                                                HALO_TAG_UP, &rq[2], err)))
            st = cpdit_comm_isend(c->comm, c->act_type, last, row, c->down, HALO_TAG_DOWN,
                                  &rq[3], err);
        for (int i = 0; i < 4 && c->comm; i++) {
            cpdit_status ws = cpdit_comm_wait(c->comm, &rq[i], err);
            if (st == CPDIT_OK)
                st = ws;
        }
        if (st)
            return st;
    }
    return be->conv2d(y, x, cv->packed, cv->b, W, cin_all, cv->cout, cv->k, 0, rows, c->ws,
                      err);
}

/* y (rows, W, cout) = the causal conv cv of the frame x (rows, W, cin) given the frames
 * before it: its cache (pixels, (taps - 1)·cin) holds the last taps - 1 input frames (oldest
 * first; zeros before the clip), stacked with x into a pooled (rows, W, taps·cin) input; then
 * the cache moves on by one frame. */
static cpdit_status causal(ctx *c, const wv_conv *cv, cpdit_buf *y, const cpdit_buf *x,
                           int rows, int W)
{
    const cpdit_backend *be = c->be;
    const size_t pixels = (size_t)rows * W;
    if (cv->taps == 1)
        return conv2d(c, cv, y, (cpdit_buf *)x, rows, W, cv->cin);
    const int all = cv->taps * cv->cin, past = all - cv->cin;
    window *wn = &c->win[cv->win];
    if (!wn->base) { /* first use in this decode */
        wn->n = pixels * past;
        if (!(wn->base = cpdit_act_alloc(be, wn->n ? wn->n : 1)))
            return oom(c);
        wn->p = wn->base;
        cpdit_status st = zero(c, wn->base, wn->n);
        if (st)
            return st;
    }
    cpdit_buf *in = take(c, rows, W, all);
    if (!in)
        return CPDIT_ERR_RUNTIME;
    if (pixels) {
        be->copy_rows(in, all, wn->p, past, pixels, past);
        be->copy_rows(cpdit_buf_at(be, in, past), all, x, cv->cin, pixels, cv->cin);
    }
    cpdit_status st = conv2d(c, cv, y, in, rows, W, all);
    give(c, in);
    if (st || !pixels)
        return st;
    for (int j = 0; j + 2 < cv->taps; j++) /* drop the oldest frame, append x */
        be->copy_rows(cpdit_buf_at(be, wn->p, (ptrdiff_t)j * cv->cin), past,
                      cpdit_buf_at(be, wn->p, (ptrdiff_t)(j + 1) * cv->cin), past, pixels,
                      cv->cin);
    be->copy_rows(cpdit_buf_at(be, wn->p, past - cv->cin), past, x, cv->cin, pixels, cv->cin);
    return CPDIT_OK;
}

/* y = WanRMS_norm(x) over C channels per pixel (then SiLU when silu), y may be x. */
static void rms(ctx *c, cpdit_buf *y, const cpdit_buf *x, const float *gamma, int rows, int W,
                int C, int silu)
{
    const size_t n = (size_t)rows * W;
    c->be->rms_norm(y, x, gamma, n, C, (float)(NORMALIZE_EPS_SQ / C));
    if (silu)
        c->be->act(CPDIT_ACT_SILU, y, y, n * C);
}

/* ------------------------------------------------------------------ blocks */

/* WanResidualBlock on one frame: x (rows, W, cin) consumed, *out (rows, W, cout). */
static cpdit_status resnet(ctx *c, const wv_res *r, cpdit_buf *x, int rows, int W,
                           cpdit_buf **out)
{
    cpdit_status st = CPDIT_OK;
    cpdit_buf *h = x, *t = NULL, *y1 = NULL, *y2 = NULL;
    *out = NULL;
    if (r->has_sc && (!(h = take(c, rows, W, r->cout)) ||
                      (st = causal(c, &r->sc, h, x, rows, W))))
        goto done;
    if (!(t = take(c, rows, W, r->cin)) || !(y1 = take(c, rows, W, r->cout)) ||
        !(y2 = take(c, rows, W, r->cout))) {
        st = CPDIT_ERR_RUNTIME;
        goto done;
    }
    rms(c, t, x, r->g1, rows, W, r->cin, 1);
    if ((st = causal(c, &r->c1, y1, t, rows, W)))
        goto done;
    rms(c, y1, y1, r->g2, rows, W, r->cout, 1);
    if ((st = causal(c, &r->c2, y2, y1, rows, W)))
        goto done;
    c->be->add(y2, y2, h, (size_t)rows * W * r->cout);
    *out = y2;
    y2 = NULL;
done:
    if (!h && st == CPDIT_OK)
        st = CPDIT_ERR_RUNTIME;
    if (h != x)
        give(c, h);
    give(c, x);
    give(c, t);
    give(c, y1);
    give(c, y2);
    return st;
}

/* Mid-block attention in place on the frame x (rows, w, C) at the latent size. */
static cpdit_status attention(ctx *c, const wv_attn *a, cpdit_buf *x, int rows)
{
    const cpdit_backend *be = c->be;
    cpdit_error *err = c->err;
    const int C = a->c, w = c->w, S = rows * w;
    cpdit_buf *n = take(c, rows, w, C), *qkv[3] = {NULL, NULL, NULL}, *o = NULL;
    cpdit_status st = n ? CPDIT_OK : CPDIT_ERR_RUNTIME;
    for (int j = 0; j < 3 && !st; j++)
        if (!(qkv[j] = take(c, rows, w, C)))
            st = CPDIT_ERR_RUNTIME;
    if (!st && !(o = take(c, rows, w, C)))
        st = CPDIT_ERR_RUNTIME;
    if (!st)
        rms(c, n, x, a->g, rows, w, C, 0);
    for (int j = 0; j < 3 && !st && S > 0; j++)
        st = be->linear(qkv[j], C, n, C, a->w[j], a->b[j], S, C, C, 0, err);
    const float scale = (float)(1.0 / sqrt((double)C));
    if (!st && c->grid) {
        cp_attention_config cfg = {CP_ATTN_RING, CP_RING_P2P, 1, be, NULL};
        int *len = malloc((size_t)c->size * sizeof *len);
        cp_seq_layout layout;
        memset(&layout, 0, sizeof layout);
        if (!len)
            st = oom(c);
        for (int r = 0; !st && r < c->size; r++)
            len[r] = c->lat_rows[r] * w;
        if (!st)
            st = cp_seq_layout_from_lengths(&layout, c->size, len, err);
        if (!st)
            st = cp_attention(&cfg, c->grid, NULL, S ? o : NULL, NULL, S ? qkv[0] : NULL,
                              S ? qkv[1] : NULL, S ? qkv[2] : NULL, &layout, 1, 1, C, scale,
                              err);
        cp_seq_layout_free(&layout);
        free(len);
    } else if (!st) {
        float *lse = be->alloc((size_t)S * sizeof *lse);
        const cp_attention_config whole = {CP_ATTN_AUTO, CP_RING_P2P, 0, be, NULL};
        st = lse ? cp_attention_whole(&whole, o, lse, qkv[0], qkv[1], qkv[2], 1, S, 1, C, scale,
                                      err)
                 : oom(c);
        be->free(lse);
    }
    if (!st && S > 0) /* x += proj(o) */
        st = be->linear(x, C, o, C, a->wo, a->bo, S, C, C, 1, err);
    give(c, n);
    for (int j = 0; j < 3; j++)
        give(c, qkv[j]);
    give(c, o);
    return st;
}

/* Nearest 2x + conv 3x3 (resample.1): x (rows, W, C) consumed, *out (2 rows, 2W, C/2). */
static cpdit_status upsample(ctx *c, const wv_conv *cv, cpdit_buf *x, int rows, int W,
                             cpdit_buf **out)
{
    *out = NULL;
    cpdit_buf *u = take(c, 2 * rows, 2 * W, cv->cin);
    if (!u) {
        give(c, x);
        return CPDIT_ERR_RUNTIME;
    }
    c->be->upsample2x(u, x, rows, W, cv->cin);
    give(c, x);
    cpdit_buf *y = take(c, 2 * rows, 2 * W, cv->cout);
    cpdit_status st = y ? conv2d(c, cv, y, u, 2 * rows, 2 * W, cv->cin) : CPDIT_ERR_RUNTIME;
    give(c, u);
    if (st) {
        give(c, y);
        return st;
    }
    *out = y;
    return CPDIT_OK;
}

/* The RGB frame y (rows, W, oc) of this rank's band: gathered on the sink, to the caller. */
static cpdit_status emit(ctx *c, const cpdit_buf *y, int rows, int W, int H)
{
    const cpdit_backend *be = c->be;
    const int oc = c->d->cfg.out_channels, f = H / c->h;
    const size_t row = (size_t)W * oc;
    cpdit_status st = CPDIT_OK;
    if (c->rank != c->sink) {
        if (rows)
            st = cpdit_comm_send(c->comm, c->act_type, y, (size_t)rows * row, c->sink,
                                 GATHER_TAG, c->err);
        c->frame++;
        return st;
    }
    for (int r = 0; r < c->size && !st; r++) {
        int s0, n0;
        cp_shard_balanced(c->h, c->size, r, &s0, &n0);
        if (r == c->rank && rows) /* its own band */
            be->copy_rows(cpdit_buf_at(be, c->img, (ptrdiff_t)((size_t)s0 * f * row)),
                          (int)row, y, (int)row, (size_t)rows, (int)row);
        else if (r != c->rank && n0)
            st = cpdit_comm_recv(c->comm, c->act_type,
                                 cpdit_buf_at(be, c->img, (ptrdiff_t)((size_t)s0 * f * row)),
                                 (size_t)n0 * f * row, r, GATHER_TAG, c->err);
    }
    if (st)
        return st;
    const size_t pix = (size_t)H * W * oc;
    be->transpose(c->chw, c->img, (size_t)H * W, (size_t)oc);
    be->download_act(c->host, c->chw, pix);
    for (size_t i = 0; c->clamp && i < pix; i++) /* torch.clamp(out, -1, 1) */
        c->host[i] = c->host[i] < -1.0f ? -1.0f : c->host[i] > 1.0f ? 1.0f : c->host[i];
    if (c->fn && c->fn(c->fn_ctx, c->item, c->frame, c->host, oc, H, W))
        st = cpdit_error_set(c->err, CPDIT_ERR_INPUT, "wan vae",
                             "the frame consumer stopped the decode at frame %d", c->frame);
    c->frame++;
    return st;
}

/* Up blocks i.. and the head on one frame x (rows, W, C) at height H (consumed). */
static cpdit_status run_up(ctx *c, int i, cpdit_buf *x, int rows, int W, int H)
{
    wan_vae *d = c->d;
    cpdit_status st = CPDIT_OK;
    for (; i < d->n_up; i++) {
        const wv_up *u = &d->up[i];
        for (int j = 0; j < u->n_res && !st; j++)
            st = resnet(c, &u->res[j], x, rows, W, &x);
        if (st)
            return st;
        if (u->mode == WV_UP_NONE)
            continue;
        if (u->mode == WV_UP_2D || !c->started[i]) {
            c->started[i] = 1; /* upsample3d: the clip's first frame skips time_conv */
            if ((st = upsample(c, &u->resample, x, rows, W, &x)))
                return st;
            rows *= 2;
            W *= 2;
            H *= 2;
            continue;
        }
        /* time_conv: one frame -> two (channels [0, C), then [C, 2C)) */
        const int C = u->time_conv.cin;
        const size_t pixels = (size_t)rows * W;
        cpdit_buf *tc = take(c, rows, W, 2 * C);
        st = tc ? causal(c, &u->time_conv, tc, x, rows, W) : CPDIT_ERR_RUNTIME;
        give(c, x);
        for (int k = 0; k < 2 && !st; k++) {
            cpdit_buf *xk = take(c, rows, W, C), *uk = NULL;
            if (!xk) {
                st = CPDIT_ERR_RUNTIME;
                break;
            }
            if (pixels)
                c->be->copy_rows(xk, C, cpdit_buf_at(c->be, tc, (ptrdiff_t)k * C), 2 * C,
                                 pixels, C);
            if (!(st = upsample(c, &u->resample, xk, rows, W, &uk)))
                st = run_up(c, i + 1, uk, 2 * rows, 2 * W, 2 * H);
        }
        give(c, tc);
        return st;
    }
    /* head: norm_out, SiLU, conv_out */
    cpdit_buf *y = take(c, rows, W, d->conv_out.cout);
    if (!y) {
        give(c, x);
        return CPDIT_ERR_RUNTIME;
    }
    rms(c, x, x, d->g_out, rows, W, d->conv_out.cin, 1);
    st = causal(c, &d->conv_out, y, x, rows, W);
    give(c, x);
    if (!st)
        st = emit(c, y, rows, W, H);
    give(c, y);
    return st;
}

/* Latent frame zt (h·w, z_dim) NHWC of the whole frame through the decoder. */
static cpdit_status decode_frame(ctx *c, const cpdit_buf *zt)
{
    wan_vae *d = c->d;
    const cpdit_backend *be = c->be;
    const int Cl = d->cfg.z_dim, w = c->w;
    int start, rows;
    cp_shard_balanced(c->h, c->size, c->rank, &start, &rows);
    cpdit_buf *z = take(c, rows, w, Cl), *pq = take(c, rows, w, Cl);
    cpdit_buf *x = take(c, rows, w, d->conv_in.cout);
    cpdit_status st = z && pq && x ? CPDIT_OK : CPDIT_ERR_RUNTIME;
    if (!st && rows)
        be->copy_rows(z, Cl, cpdit_buf_at(be, zt, (ptrdiff_t)((size_t)start * w * Cl)), Cl,
                      (size_t)rows * w, Cl);
    if (!st)
        st = causal(c, &d->post_quant, pq, z, rows, w);
    if (!st)
        st = causal(c, &d->conv_in, x, pq, rows, w);
    give(c, z);
    give(c, pq);
    if (st) {
        give(c, x);
        return st;
    }
    if ((st = resnet(c, &d->mid[0], x, rows, w, &x)))
        return st;
    if ((st = attention(c, &d->attn, x, rows))) {
        give(c, x);
        return st;
    }
    if ((st = resnet(c, &d->mid[1], x, rows, w, &x)))
        return st;
    return run_up(c, 0, x, rows, w, c->h);
}

/* ------------------------------------------------------------------ entry points */

static size_t workspace_bytes(wan_vae *d, const cpdit_backend *be, int W)
{
    wv_conv *list[4 * WAN_VAE_MAX_LEVELS * (3 * WAN_VAE_MAX_RES + 2) + 16];
    const int n = wan_vae_convs(d, list);
    size_t most = 0;
    for (int i = 0; i < n; i++) {
        const size_t b = be->conv2d_workspace_bytes(W, list[i]->taps * list[i]->cin, list[i]->k);
        most = b > most ? b : most;
    }
    return most;
}

static void release(ctx *c)
{
    for (int i = 0; i < POOL_SLOTS; i++)
        c->be->free(c->slots[i].base);
    for (int i = 0; c->win && i < c->d->n_windows; i++)
        c->be->free(c->win[i].base);
    free(c->win);
    free(c->zeros);
    c->be->free(c->ws);
    c->be->free(c->img);
    c->be->free(c->chw);
    free(c->host);
}

/* Item b's latent frame t of z (B, Cl, T, h, w) into zt (h·w, Cl) through staging. */
static void load_frame(ctx *c, const float *z, int b, int t, int T, float *stage, cpdit_buf *zin,
                       cpdit_buf *zt)
{
    const int Cl = c->d->cfg.z_dim;
    const size_t plane = (size_t)c->h * c->w;
    for (int ch = 0; ch < Cl; ch++)
        memcpy(stage + ch * plane, z + (((size_t)b * Cl + ch) * T + t) * plane,
               plane * sizeof *stage);
    c->be->upload_act(zin, stage, (size_t)Cl * plane);
    c->be->transpose(zt, zin, (size_t)Cl, plane);
}

cpdit_status wan_vae_decode_frames(wan_vae *d, const cp_grid *g, const float *z, int B, int T,
                                   int h, int w, wan_vae_frame_fn fn, void *fn_ctx,
                                   cpdit_error *err)
{
    return wan_vae_decode_frames_clamp(d, g, 0, z, B, T, h, w, 1, fn, fn_ctx, err);
}

cpdit_status wan_vae_decode_frames_to(wan_vae *d, const cp_grid *g, int sink, const float *z,
                                      int B, int T, int h, int w, wan_vae_frame_fn fn,
                                      void *fn_ctx, cpdit_error *err)
{
    return wan_vae_decode_frames_clamp(d, g, sink, z, B, T, h, w, 1, fn, fn_ctx, err);
}

cpdit_status wan_vae_decode_frames_clamp(wan_vae *d, const cp_grid *g, int sink, const float *z,
                                         int B, int T, int h, int w, int clamp,
                                         wan_vae_frame_fn fn, void *fn_ctx, cpdit_error *err)
{
    const cpdit_backend *be = d->be ? d->be : cpdit_backend_default();
    const wan_vae_config *cf = &d->cfg;
    const int f = wan_vae_upscale(cf), Cl = cf->z_dim, oc = cf->out_channels;
    if (B < 1 || T < 1 || h < 1 || w < 1 || h > MAX_LATENT_SIDE || w > MAX_LATENT_SIDE)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "wan vae",
                               "latent size (%d, %d, %d, %d, %d): B, T must be positive and "
                               "1 <= h, w <= %d", B, Cl, T, h, w, MAX_LATENT_SIDE);
    const int H = h * f, W = w * f;
    ctx c;
    memset(&c, 0, sizeof c);
    c.d = d;
    c.be = be;
    c.err = err;
    c.h = h;
    c.w = w;
    c.fn = fn;
    c.fn_ctx = fn_ctx;
    c.clamp = clamp;
    c.comm = g && g->cp_size > 1 ? g->cp : NULL;
    c.grid = c.comm ? g : NULL;
    c.act_type = cpdit_comm_act_type(be->act_dtype);
    c.rank = c.comm ? g->cp_rank : 0;
    c.size = c.comm ? g->cp_size : 1;
    if (sink < 0 || sink >= c.size)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "wan vae",
                               "frames gathered on CP rank %d of %d", sink, c.size);
    c.sink = sink;
    int *lat_rows = malloc((size_t)c.size * sizeof *lat_rows);
    if (!lat_rows)
        return oom(&c);
    for (int r = 0; r < c.size; r++) {
        int s0;
        cp_shard_balanced(h, c.size, r, &s0, &lat_rows[r]);
    }
    c.lat_rows = lat_rows;
    c.up = c.rank > 0 && lat_rows[c.rank] > 0 ? c.rank - 1 : -1;
    c.down = c.rank + 1 < c.size && lat_rows[c.rank + 1] > 0 ? c.rank + 1 : -1;
    cpdit_status st = wan_vae_prepare(d, be, err); /* the weights, made on first use */
    const size_t lat = (size_t)Cl * h * w, pix = (size_t)H * W * oc;
    float *stage = malloc(lat * sizeof *stage);
    cpdit_buf *zin = cpdit_act_alloc(be, lat), *zt = cpdit_act_alloc(be, lat);
    const size_t ws = st ? 0 : workspace_bytes(d, be, W);
    c.ws = ws ? be->alloc(ws) : NULL;
    c.win = calloc((size_t)d->n_windows, sizeof *c.win);
    if (c.rank == c.sink) {
        c.img = cpdit_act_alloc(be, pix);
        c.chw = cpdit_act_alloc(be, pix);
        c.host = malloc(pix * sizeof *c.host);
    }
    if (!st && (!stage || !zin || !zt || (ws && !c.ws) || !c.win ||
                (c.rank == c.sink && (!c.img || !c.chw || !c.host))))
        st = oom(&c);
    for (int b = 0; b < B && !st; b++) {
        c.item = b;
        c.frame = 0;
        memset(c.started, 0, sizeof c.started);
        for (int i = 0; i < d->n_windows && !st; i++) /* a new clip: no past frames */
            if (c.win[i].base)
                st = zero(&c, c.win[i].base, c.win[i].n);
        for (int t = 0; t < T && !st; t++) {
            load_frame(&c, z, b, t, T, stage, zin, zt);
            st = decode_frame(&c, zt);
        }
    }
    if (!st)
        st = be->sync(err);
    release(&c);
    be->free(zin);
    be->free(zt);
    free(stage);
    free(lat_rows);
    return st;
}

typedef struct into_out {
    float *out;
    int F;
} into_out;

static int store_frame(void *p, int b, int f, const float *rgb, int C, int H, int W)
{
    into_out *o = p;
    const size_t plane = (size_t)H * W;
    if (f >= o->F)
        return 1;
    for (int ch = 0; ch < C; ch++)
        memcpy(o->out + (((size_t)b * C + ch) * o->F + f) * plane, rgb + ch * plane,
               plane * sizeof *rgb);
    return 0;
}

cpdit_status wan_vae_decode_group(wan_vae *d, const cp_grid *g, const float *z, int B, int T,
                                  int h, int w, float *out, cpdit_error *err)
{
    into_out o = {out, wan_vae_frames(&d->cfg, T)};
    return wan_vae_decode_frames(d, g, z, B, T, h, w, out ? store_frame : NULL, &o, err);
}
