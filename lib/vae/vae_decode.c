/* vae_decode.c — the AutoencoderKL decoder's forward pass, split by rows over a CP group
 * (see vae_decoder.h).
 *
 * Layout: each rank holds a contiguous band of image rows, NHWC (rows, W, C), with one spare
 * row above and one below every activation (the halo rows a 3x3 convolution reads). The
 * latent's h rows are split balanced over the group (cp_shard_balanced: the first h % n ranks
 * get one more; with h < n the last ranks hold nothing and only take part in the
 * collectives); every 2x upsampling doubles each band, so the split stays aligned.
 *
 * Exactness: everything is per pixel except
 *   - 3x3 convolutions: before each, a rank sends its first row up and its last row down and
 *     receives its halo rows (zeros at the image edges) non-blocking, computes the output rows
 *     that need no halo meanwhile, then the two border rows;
 *   - GroupNorm: per-group sums (double) are all-reduced over the group, then the sums of
 *     squared deviations from the global mean: the single-rank two-pass statistics to
 *     rounding;
 *   - the mid-block attention over all latent pixels: cp_attention (ring over the group;
 *     one head of C channels, tokens = this rank's pixels);
 * and the RGB rows are gathered on CP rank 0 at the end. One rank (no grid) runs the same
 * code with no communication.
 *
 * All ops go through the backend table (kernels/backend.h); activations (cpdit_buf, elements
 * of the table's act_dtype: fp32 on "cpu", bf16 on "cpu-bf16" and "cuda"; every count and
 * offset below is in elements) come from a small pool of backend buffers that stages take from
 * and give back to. Halo rows and the gathered RGB rows travel as activations
 * (cpdit_comm_act_type); GroupNorm moments stay double, the attention LSE fp32.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm.h"
#include "lib/cp/cp_attention.h"
#include "lib/cp/cp_shard.h"
#include "lib/vae/vae_decoder.h"
#include "lib/vae/vae_decoder_internal.h"

#define POOL_SLOTS 16
#define HALO_TAG_DOWN 1401 /* a row travelling to the next rank (its halo above) */
#define HALO_TAG_UP 1402   /* a row travelling to the previous rank (its halo below) */
#define GATHER_TAG 1403
/* Interior rows of a convolution are computed in this many chunks, with the halo requests
 * tested in between so that the transfers progress during the computation. */
#define CONV_INTERIOR_CHUNKS 4

typedef struct pool_slot {
    cpdit_buf *base; /* the allocation: halo row, rows, halo row */
    cpdit_buf *p;    /* row 0 */
    size_t cap;      /* elements of base */
    int in_use;
} pool_slot;

typedef struct decode_ctx {
    const vae_decoder *d;
    const cpdit_backend *be;
    const cp_grid *grid;   /* NULL: one rank */
    cpdit_comm *comm;      /* grid->cp or NULL */
    cpdit_comm_dtype act_type; /* the comm type of be's activations */
    void *zeros;           /* a device table's zero halo row: zeros_bytes of host zeros */
    size_t zeros_bytes;
    int rank, size;        /* in the group */
    int up, down;          /* neighbouring ranks holding rows, or -1 */
    const int *lat_rows;   /* [size] latent rows of each rank */
    void *ws;              /* convolution workspace */
    pool_slot slots[POOL_SLOTS];
    cpdit_error *err;
} decode_ctx;

/* ------------------------------------------------------------------ activation pool */

/* An activation of rows x W x C elements with a halo row above and below; returns row 0. The
 * smallest free pooled buffer that fits, else a new one (free pooled buffers too small for it
 * are released first: stages grow as the image does). */
static cpdit_buf *take(decode_ctx *ctx, int rows, int W, int C)
{
    const size_t row = (size_t)W * C, n = ((size_t)rows + 2) * row;
    pool_slot *best = NULL;
    for (int i = 0; i < POOL_SLOTS; i++) {
        pool_slot *s = &ctx->slots[i];
        if (s->base && !s->in_use && s->cap >= n && (!best || s->cap < best->cap))
            best = s;
    }
    if (!best) {
        for (int i = 0; i < POOL_SLOTS; i++) {
            pool_slot *s = &ctx->slots[i];
            if (s->base && !s->in_use) {
                ctx->be->free(s->base);
                s->base = NULL;
            }
        }
        for (int i = 0; i < POOL_SLOTS && !best; i++)
            if (!ctx->slots[i].base)
                best = &ctx->slots[i];
        cpdit_buf *b = best ? cpdit_act_alloc(ctx->be, n) : NULL;
        if (!b) {
            cpdit_error_set(ctx->err, CPDIT_ERR_RUNTIME, "vae",
                            "out of memory for an activation of %zu elements", n);
            return NULL;
        }
        best->base = b;
        best->cap = n;
    }
    best->in_use = 1;
    best->p = cpdit_buf_at(ctx->be, best->base, (ptrdiff_t)row);
    return best->p;
}

static void give(decode_ctx *ctx, const cpdit_buf *p)
{
    for (int i = 0; p && i < POOL_SLOTS; i++)
        if (ctx->slots[i].in_use && ctx->slots[i].p == p)
            ctx->slots[i].in_use = 0;
}

static void pool_release(decode_ctx *ctx)
{
    for (int i = 0; i < POOL_SLOTS; i++) {
        ctx->be->free(ctx->slots[i].base);
        ctx->slots[i].base = NULL;
    }
    free(ctx->zeros);
    ctx->zeros = NULL;
    ctx->zeros_bytes = 0;
}

/* Zero one halo row of n elements at p (an image edge). Host tables: memset; a device table:
 * an upload of host zeros (all-zero bytes are 0.0 in fp32 and bf16 alike). */
static cpdit_status zero_row(decode_ctx *ctx, cpdit_buf *p, size_t n)
{
    const size_t bytes = cpdit_act_bytes(ctx->be, n);
    if (ctx->be->host_memory) {
        memset(p, 0, bytes);
        return CPDIT_OK;
    }
    if (ctx->zeros_bytes < bytes) {
        free(ctx->zeros);
        ctx->zeros_bytes = 0;
        if (!(ctx->zeros = calloc(1, bytes)))
            return cpdit_error_set(ctx->err, CPDIT_ERR_RUNTIME, "vae", "out of memory");
        ctx->zeros_bytes = bytes;
    }
    ctx->be->upload(p, ctx->zeros, bytes);
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ the three split ops */

/* Convolution of x (rows, W, cin) into y (rows, W, cout). 3x3: halo exchange overlapped with
 * the interior rows. */
static cpdit_status conv(decode_ctx *ctx, const vae_conv_p *cv, cpdit_buf *y, cpdit_buf *x,
                         int rows, int W)
{
    const cpdit_backend *be = ctx->be;
    const float *b = cv->b;
    cpdit_error *err = ctx->err;
    if (rows == 0)
        return CPDIT_OK;
    if (cv->k == 1)
        return be->conv2d(y, x, cv->packed, b, W, cv->cin, cv->cout, 1, 0, rows, NULL, err);
    const size_t row = (size_t)W * cv->cin; /* elements of one row */
    const cpdit_comm_dtype t = ctx->act_type;
    cpdit_buf *above = cpdit_buf_at(be, x, -(ptrdiff_t)row);
    cpdit_buf *below = cpdit_buf_at(be, x, (ptrdiff_t)((size_t)rows * row));
    cpdit_comm_request rq[4] = {CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT,
                                CPDIT_COMM_REQUEST_INIT, CPDIT_COMM_REQUEST_INIT};
    cpdit_status st = CPDIT_OK;
    if (ctx->up < 0)
        st = zero_row(ctx, above, row);
    else if (!(st = cpdit_comm_irecv(ctx->comm, t, above, row, ctx->up, HALO_TAG_DOWN, &rq[0],
                                     err)))
        st = cpdit_comm_isend(ctx->comm, t, x, row, ctx->up, HALO_TAG_UP, &rq[1], err);
    if (st)
        return st;
    if (ctx->down < 0)
        st = zero_row(ctx, below, row);
    else if ((st = cpdit_comm_irecv(ctx->comm, t, below, row, ctx->down, HALO_TAG_UP, &rq[2],
                                    err)) ||
             (st = cpdit_comm_isend(ctx->comm, t,
                                    cpdit_buf_at(be, x, (ptrdiff_t)((size_t)(rows - 1) * row)),
                                    row, ctx->down, HALO_TAG_DOWN, &rq[3], err)))
        return st;
    /* interior rows 1 .. rows-2 need no halo */
    const int n_in = rows - 2, step = n_in > CONV_INTERIOR_CHUNKS ? n_in / CONV_INTERIOR_CHUNKS : 1;
    for (int r = 1; r < rows - 1 && st == CPDIT_OK; r += step) {
        const int r1 = r + step < rows - 1 ? r + step : rows - 1;
        st = be->conv2d(y, x, cv->packed, b, W, cv->cin, cv->cout, 3, r, r1, ctx->ws, err);
        for (int i = 0; i < 4 && st == CPDIT_OK && ctx->comm; i++) {
            int done;
            st = cpdit_comm_test(ctx->comm, &rq[i], &done, err);
        }
    }
    for (int i = 0; i < 4 && ctx->comm; i++) {
        cpdit_status ws = cpdit_comm_wait(ctx->comm, &rq[i], err);
        if (st == CPDIT_OK)
            st = ws;
    }
    if (st == CPDIT_OK)
        st = be->conv2d(y, x, cv->packed, b, W, cv->cin, cv->cout, 3, 0, 1, ctx->ws, err);
    if (st == CPDIT_OK && rows > 1)
        st = be->conv2d(y, x, cv->packed, b, W, cv->cin, cv->cout, 3, rows - 1, rows, ctx->ws,
                        err);
    return st;
}

/* GroupNorm (+ activation) of x (rows, W, C) into y (may be x); total_pixels over the group. */
static cpdit_status norm_act(decode_ctx *ctx, const vae_norm_p *n, cpdit_buf *y,
                             const cpdit_buf *x, int rows, int W, int C, size_t total_pixels,
                             cpdit_activation act)
{
    const int G = ctx->d->config.norm_num_groups;
    const size_t pixels = (size_t)rows * W;
    double *mom = calloc(3 * (size_t)G, sizeof *mom); /* sums, then squared deviations; rstd */
    if (!mom)
        return cpdit_error_set(ctx->err, CPDIT_ERR_RUNTIME, "vae", "out of memory");
    double *mean = mom, *dev = mom + G, *rstd = mom + 2 * G;
    const double count = (double)total_pixels * (C / G);
    cpdit_status st = CPDIT_OK;
    if (pixels)
        ctx->be->group_moments(mean, x, pixels, C, G, NULL);
    if (ctx->comm)
        st = cpdit_comm_allreduce(ctx->comm, mean, (size_t)G, CPDIT_COMM_DOUBLE, CPDIT_COMM_SUM,
                                  ctx->err);
    for (int g = 0; g < G; g++)
        mean[g] /= count;
    if (st == CPDIT_OK && pixels)
        ctx->be->group_moments(dev, x, pixels, C, G, mean);
    if (st == CPDIT_OK && ctx->comm)
        st = cpdit_comm_allreduce(ctx->comm, dev, (size_t)G, CPDIT_COMM_DOUBLE, CPDIT_COMM_SUM,
                                  ctx->err);
    for (int g = 0; g < G; g++)
        rstd[g] = 1.0 / sqrt(dev[g] / count + (double)VAE_NORM_EPS);
    if (st == CPDIT_OK && pixels)
        ctx->be->group_norm_apply(y, x, pixels, C, G, mean, rstd, n->w, n->b,
                                  act);
    free(mom);
    return st;
}

/* Mid-block attention in place on x (rows, w, C) at the latent size: x += proj(attn(norm x)).
 * Tokens are this rank's pixels; one head of C channels. */
static cpdit_status attention(decode_ctx *ctx, const vae_attn_p *a, cpdit_buf *x, int rows,
                              int w, int h)
{
    const cpdit_backend *be = ctx->be;
    cpdit_error *err = ctx->err;
    const int C = a->c, S = rows * w;
    cpdit_buf *n = take(ctx, rows, w, C);
    cpdit_buf *q = n ? take(ctx, rows, w, C) : NULL;
    cpdit_buf *k = q ? take(ctx, rows, w, C) : NULL;
    cpdit_buf *v = k ? take(ctx, rows, w, C) : NULL;
    cpdit_buf *o = v ? take(ctx, rows, w, C) : NULL;
    cpdit_status st = o ? CPDIT_OK : CPDIT_ERR_RUNTIME;
    if (st == CPDIT_OK)
        st = norm_act(ctx, &a->norm, n, x, rows, w, C, (size_t)h * w, CPDIT_ACT_NONE);
    const cpdit_weight *wt[3] = {a->wq, a->wk, a->wv};
    const float *bo[3] = {a->q_b, a->k_b, a->v_b};
    cpdit_buf *dst[3] = {q, k, v};
    for (int m = 0; m < 3 && st == CPDIT_OK && S > 0; m++)
        st = be->linear(dst[m], C, n, C, wt[m], bo[m], S, C, C, 0, err);
    const float scale = (float)(1.0 / sqrt((double)C));
    if (st == CPDIT_OK && ctx->grid) {
        /* ring over the group; uneven and empty bands allowed */
        cp_attention_config cfg = {CP_ATTN_RING, CP_RING_P2P, 1, be, NULL};
        int *len = malloc((size_t)ctx->size * sizeof *len);
        cp_seq_layout layout;
        memset(&layout, 0, sizeof layout);
        if (!len)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae", "out of memory");
        for (int r = 0; st == CPDIT_OK && r < ctx->size; r++)
            len[r] = ctx->lat_rows[r] * w;
        if (st == CPDIT_OK)
            st = cp_seq_layout_from_lengths(&layout, ctx->size, len, err);
        if (st == CPDIT_OK)
            st = cp_attention(&cfg, ctx->grid, NULL, S ? o : NULL, NULL, S ? q : NULL,
                              S ? k : NULL, S ? v : NULL, &layout, 1, 1, C, scale, err);
        cp_seq_layout_free(&layout);
        free(len);
    } else if (st == CPDIT_OK) {
        float *lse = be->alloc((size_t)S * sizeof *lse); /* (S) fp32 */
        const cp_attention_config whole = {CP_ATTN_AUTO, CP_RING_P2P, 0, be, NULL};
        st = lse ? cp_attention_whole(&whole, o, lse, q, k, v, 1, S, 1, C, scale, err)
                 : cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae", "out of memory");
        be->free(lse);
    }
    /* x (S, C) += o Wo^T + bo: the residual connection (rescale factor 1) */
    if (st == CPDIT_OK && S > 0)
        st = be->linear(x, C, o, C, a->wo, a->o_b, S, C, C, 1, err);
    give(ctx, n);
    give(ctx, q);
    give(ctx, k);
    give(ctx, v);
    give(ctx, o);
    return st;
}

/* ------------------------------------------------------------------ blocks */

/* ResnetBlock2D: x (rows, W, cin) is consumed; *out (rows, W, cout) is x itself or new.
 * H: the image's total rows (GroupNorm counts). */
static cpdit_status resnet(decode_ctx *ctx, const vae_resnet_p *r, cpdit_buf *x, int rows,
                           int W, int H, cpdit_buf **out)
{
    const vae_decoder *d = ctx->d;
    const size_t total = (size_t)H * W;
    const int cmax = r->cin > r->cout ? r->cin : r->cout;
    *out = NULL;
    cpdit_buf *t = take(ctx, rows, W, cmax);
    cpdit_buf *h = t ? take(ctx, rows, W, r->cout) : NULL;
    cpdit_status st = h ? CPDIT_OK : CPDIT_ERR_RUNTIME;
    if (st == CPDIT_OK)
        st = norm_act(ctx, &r->norm1, t, x, rows, W, r->cin, total, d->act);
    if (st == CPDIT_OK)
        st = conv(ctx, &r->conv1, h, t, rows, W);
    if (st == CPDIT_OK)
        st = norm_act(ctx, &r->norm2, h, h, rows, W, r->cout, total, d->act);
    if (st == CPDIT_OK)
        st = conv(ctx, &r->conv2, t, h, rows, W); /* t = the residual branch */
    if (st == CPDIT_OK && r->has_shortcut)
        st = conv(ctx, &r->shortcut, h, x, rows, W); /* h = shortcut(x) */
    if (st != CPDIT_OK) {
        give(ctx, t);
        give(ctx, h);
        give(ctx, x);
        return st;
    }
    cpdit_buf *base = r->has_shortcut ? h : x; /* output_scale_factor is 1 */
    ctx->be->add(base, base, t, (size_t)rows * W * r->cout);
    give(ctx, t);
    give(ctx, r->has_shortcut ? x : h);
    *out = base;
    return CPDIT_OK;
}

/* Nearest 2x + conv 3x3: x (rows, W, C) consumed, *out (2 rows, 2W, C) new. */
static cpdit_status upsample(decode_ctx *ctx, const vae_conv_p *cv, cpdit_buf *x, int rows,
                             int W, cpdit_buf **out)
{
    *out = NULL;
    cpdit_buf *u = take(ctx, 2 * rows, 2 * W, cv->cin);
    if (!u) {
        give(ctx, x);
        return CPDIT_ERR_RUNTIME;
    }
    ctx->be->upsample2x(u, x, rows, W, cv->cin);
    give(ctx, x);
    cpdit_buf *y = take(ctx, 2 * rows, 2 * W, cv->cout);
    cpdit_status st = y ? conv(ctx, cv, y, u, 2 * rows, 2 * W) : CPDIT_ERR_RUNTIME;
    give(ctx, u);
    if (st != CPDIT_OK) {
        give(ctx, y);
        return st;
    }
    *out = y;
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ setup */

static size_t workspace_bytes(vae_decoder *d, const cpdit_backend *be, int w_max)
{
    const int n = vae_decoder_convs(d, NULL);
    vae_conv_p **list = malloc((size_t)n * sizeof *list);
    size_t most = 0;
    if (!list)
        return 0;
    vae_decoder_convs(d, list);
    for (int i = 0; i < n; i++) {
        const size_t b = be->conv2d_workspace_bytes(w_max, list[i]->cin, list[i]->k);
        most = b > most ? b : most;
    }
    free(list);
    return most;
}

static cpdit_status check_sizes(const vae_decoder *d, int B, int h, int w, cpdit_error *err)
{
    const int f = vae_decoder_upscale(d);
    if (B < 1 || h < 1 || w < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "vae", "latent size (%d, %d, %d, %d) must "
                               "be positive", B, d->config.latent_channels, h, w);
    const int64_t out_pixels = (int64_t)h * f * w * f;
    if ((int64_t)h * f > INT32_MAX / 2 || (int64_t)w * f > INT32_MAX / 2 ||
        out_pixels > INT32_MAX)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "vae", "latent size %dx%d is too large", h,
                               w);
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ one image */

/* Decode item z_b (Cl, h, w) on this rank's band; the RGB rows land in img (H, W, out_ch) on
 * rank 0 (NULL elsewhere). */
static cpdit_status decode_one(decode_ctx *ctx, const cpdit_buf *zt, int h, int w,
                               cpdit_buf *img)
{
    const vae_decoder *d = ctx->d;
    const autoencoder_kl_config *c = &d->config;
    const cpdit_backend *be = ctx->be;
    const int Cl = c->latent_channels, top = c->block_out_channels[c->n_blocks - 1];
    int start, rows;
    cp_shard_balanced(h, ctx->size, ctx->rank, &start, &rows);
    cpdit_status st = CPDIT_OK;
    cpdit_buf *z = take(ctx, rows, w, Cl);
    if (!z)
        return CPDIT_ERR_RUNTIME;
    if (rows)
        be->copy_rows(z, Cl, cpdit_buf_at(be, zt, (ptrdiff_t)((size_t)start * w * Cl)), Cl,
                      (size_t)rows * w, Cl);
    if (d->has_post_quant) {
        cpdit_buf *pq = take(ctx, rows, w, Cl);
        st = pq ? conv(ctx, &d->post_quant, pq, z, rows, w) : CPDIT_ERR_RUNTIME;
        give(ctx, z);
        z = pq;
    }
    cpdit_buf *x = st == CPDIT_OK ? take(ctx, rows, w, top) : NULL;
    if (st == CPDIT_OK && !x)
        st = CPDIT_ERR_RUNTIME;
    if (st == CPDIT_OK)
        st = conv(ctx, &d->conv_in, x, z, rows, w);
    give(ctx, z);
    int H = h, W = w;
    if (st == CPDIT_OK)
        st = resnet(ctx, &d->mid_res[0], x, rows, W, H, &x);
    if (st == CPDIT_OK && d->has_mid_attn)
        st = attention(ctx, &d->mid_attn, x, rows, W, H);
    if (st == CPDIT_OK)
        st = resnet(ctx, &d->mid_res[1], x, rows, W, H, &x);
    for (int i = 0; i < d->n_up && st == CPDIT_OK; i++) {
        const vae_up_p *u = &d->up[i];
        for (int j = 0; j < u->n_resnets && st == CPDIT_OK; j++)
            st = resnet(ctx, &u->resnets[j], x, rows, W, H, &x);
        if (st == CPDIT_OK && u->has_upsample) {
            st = upsample(ctx, &u->upsample, x, rows, W, &x);
            rows *= 2;
            H *= 2;
            W *= 2;
        }
    }
    const int c0 = c->block_out_channels[0], oc = c->out_channels;
    cpdit_buf *y = st == CPDIT_OK ? take(ctx, rows, W, oc) : NULL;
    if (st == CPDIT_OK && !y)
        st = CPDIT_ERR_RUNTIME;
    if (st == CPDIT_OK)
        st = norm_act(ctx, &d->norm_out, x, x, rows, W, c0, (size_t)H * W, d->act);
    if (st == CPDIT_OK)
        st = conv(ctx, &d->conv_out, y, x, rows, W);
    give(ctx, x);
    /* gather the RGB rows on rank 0 */
    const size_t row = (size_t)W * oc;
    const int f = H / h;
    if (st == CPDIT_OK && ctx->rank == 0) {
        be->copy_rows(img, (int)row, y, (int)row, (size_t)rows, (int)row);
        for (int r = 1; r < ctx->size && st == CPDIT_OK; r++) {
            int s0, n0;
            cp_shard_balanced(h, ctx->size, r, &s0, &n0);
            if (n0)
                st = cpdit_comm_recv(ctx->comm, ctx->act_type,
                                     cpdit_buf_at(be, img, (ptrdiff_t)((size_t)s0 * f * row)),
                                     (size_t)n0 * f * row, r, GATHER_TAG, ctx->err);
        }
    } else if (st == CPDIT_OK && rows) {
        st = cpdit_comm_send(ctx->comm, ctx->act_type, y, (size_t)rows * row, 0, GATHER_TAG,
                             ctx->err);
    }
    give(ctx, y);
    return st;
}

/* ------------------------------------------------------------------ entry points */

cpdit_status vae_decode_group(const vae_decoder *dc, const cp_grid *g, const float *z, int B,
                              int h, int w, float *out, cpdit_error *err)
{
    vae_decoder *d = (vae_decoder *)dc; /* packs its weights on first use */
    const cpdit_backend *be = d->be ? d->be : cpdit_backend_default();
    cpdit_status st = check_sizes(d, B, h, w, err);
    if (st != CPDIT_OK)
        return st;
    const autoencoder_kl_config *c = &d->config;
    const int f = vae_decoder_upscale(d), Cl = c->latent_channels, oc = c->out_channels;
    const int H = h * f, W = w * f;
    decode_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.d = d;
    ctx.be = be;
    ctx.err = err;
    ctx.grid = g;
    ctx.comm = g && g->cp_size > 1 ? g->cp : NULL;
    ctx.act_type = cpdit_comm_act_type(be->act_dtype);
    ctx.rank = g ? g->cp_rank : 0;
    ctx.size = g ? g->cp_size : 1;
    if (!ctx.comm)
        ctx.grid = g && g->cp_size == 1 ? g : NULL;
    int *lat_rows = malloc((size_t)ctx.size * sizeof *lat_rows);
    if (!lat_rows)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae", "out of memory");
    for (int r = 0; r < ctx.size; r++) {
        int s0;
        cp_shard_balanced(h, ctx.size, r, &s0, &lat_rows[r]);
    }
    ctx.lat_rows = lat_rows;
    ctx.up = ctx.rank > 0 && lat_rows[ctx.rank] > 0 ? ctx.rank - 1 : -1;
    ctx.down = ctx.rank + 1 < ctx.size && lat_rows[ctx.rank + 1] > 0 ? ctx.rank + 1 : -1;
    const size_t ws_bytes = workspace_bytes(d, be, W);
    const size_t lat = (size_t)Cl * h * w, pix = (size_t)H * W * oc;
    cpdit_buf *zin = cpdit_act_alloc(be, lat), *zt = cpdit_act_alloc(be, lat);
    cpdit_buf *img = ctx.rank == 0 ? cpdit_act_alloc(be, pix) : NULL;
    cpdit_buf *chw = ctx.rank == 0 ? cpdit_act_alloc(be, pix) : NULL;
    ctx.ws = ws_bytes ? be->alloc(ws_bytes) : NULL;
    if (!zin || !zt || (ctx.rank == 0 && (!img || !chw)) || (ws_bytes && !ctx.ws))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae", "out of memory for the decode");
    if (st == CPDIT_OK)
        st = vae_decoder_prepare(d, be, err); /* the weights, made on first use */
    for (int b = 0; b < B && st == CPDIT_OK; b++) {
        be->upload_act(zin, z + (size_t)b * lat, lat);
        be->transpose(zt, zin, (size_t)Cl, (size_t)h * w); /* (h·w, Cl): NHWC */
        st = decode_one(&ctx, zt, h, w, img);
        if (st == CPDIT_OK && ctx.rank == 0 && out) {
            be->transpose(chw, img, (size_t)H * W, (size_t)oc);
            be->download_act(out + (size_t)b * pix, chw, pix);
        }
    }
    if (st == CPDIT_OK)
        st = be->sync(err); /* a device op that failed since the last status says so here */
    pool_release(&ctx);
    be->free(ctx.ws);
    be->free(zin);
    be->free(zt);
    be->free(img);
    be->free(chw);
    free(lat_rows);
    return st;
}

cpdit_status vae_decode(const vae_decoder *d, const float *z, int B, int h, int w, float *out,
                        cpdit_error *err)
{
    return vae_decode_group(d, NULL, z, B, h, w, out, err);
}

/* 2·pixels·Cin·Cout·K² per convolution, plus the attention (4 linears, 4·S²·C). */
double vae_decode_flops(const vae_decoder *dc, int h, int w)
{
    vae_decoder *d = (vae_decoder *)dc;
    const int n = vae_decoder_convs(d, NULL);
    vae_conv_p **list = malloc((size_t)n * sizeof *list);
    if (!list)
        return 0.0;
    vae_decoder_convs(d, list);
    double flops = 0.0, pixels = (double)h * w; /* at the current level */
    for (int i = 0; i < n; i++) {
        const vae_conv_p *cv = list[i];
        for (int u = 0; u < d->n_up; u++) /* an upsampler's conv runs at the new size */
            if (d->up[u].has_upsample && cv == &d->up[u].upsample)
                pixels *= 4.0;
        flops += 2.0 * pixels * cv->cin * cv->cout * cv->k * cv->k;
    }
    free(list);
    if (d->has_mid_attn) {
        const double S = (double)h * w, C = d->mid_attn.c;
        flops += 4.0 * 2.0 * S * C * C + 4.0 * S * S * C;
    }
    return flops;
}
