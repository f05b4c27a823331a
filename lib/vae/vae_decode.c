/* vae_decode.c — the AutoencoderKL decoder's forward pass on the CPU (see vae_decoder.h).
 *
 * Activations are (B, C, H, W) fp32. Convolutions go through im2col + SGEMM
 * (kernels/cpu/conv2d_cpu.h), GroupNorm + activation through kernels/cpu/group_norm_cpu.h and
 * the mid-block attention through the blocked online-softmax kernel
 * (kernels/cpu/attention_cpu.h), so no H·W x H·W score matrix is ever held. Each stage
 * takes its output from a small pool and gives its input back: peak memory is about three
 * activations of the largest stage plus the 64 MB column buffer.
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/conv2d_cpu.h"
#include "kernels/cpu/group_norm_cpu.h"
#include "lib/vae/vae_decoder.h"
#include "lib/vae/vae_decoder_internal.h"

#define P(d, off) ((d)->params + (off))

/* Activation buffers kept for reuse within one decode: freeing and re-allocating tens of
 * megabytes per stage costs more in page faults than the convolutions' copies. */
#define POOL_SLOTS 16

typedef struct pool_slot {
    float *p;
    size_t cap; /* floats */
    int in_use;
} pool_slot;

/* One vae_decode call: the decoder, the column buffer all its convolutions share, the
 * activation pool. */
typedef struct decode_ctx {
    const vae_decoder *d;
    conv2d_workspace ws;
    pool_slot slots[POOL_SLOTS];
} decode_ctx;

/* A buffer of at least n floats: the smallest free pooled one that fits, else a new one (the
 * free pooled buffers that are too small are released first: stages grow as the image does). */
static float *take(decode_ctx *ctx, size_t n, cpdit_error *err)
{
    pool_slot *best = NULL;
    for (int i = 0; i < POOL_SLOTS; i++) {
        pool_slot *s = &ctx->slots[i];
        if (s->p && !s->in_use && s->cap >= n && (!best || s->cap < best->cap))
            best = s;
    }
    if (!best) {
        for (int i = 0; i < POOL_SLOTS; i++) {
            pool_slot *s = &ctx->slots[i];
            if (s->p && !s->in_use) {
                free(s->p);
                s->p = NULL;
            }
        }
        for (int i = 0; i < POOL_SLOTS && !best; i++)
            if (!ctx->slots[i].p)
                best = &ctx->slots[i];
        float *p = best ? malloc((n ? n : 1) * sizeof *p) : NULL;
        if (!p) {
            cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae",
                            "out of memory for an activation of %zu floats", n);
            return NULL;
        }
        best->p = p;
        best->cap = n;
    }
    best->in_use = 1;
    return best->p;
}

/* Return a buffer from take() to the pool (NULL is fine). */
static void give(decode_ctx *ctx, float *p)
{
    for (int i = 0; p && i < POOL_SLOTS; i++)
        if (ctx->slots[i].p == p)
            ctx->slots[i].in_use = 0;
}

static void pool_release(decode_ctx *ctx)
{
    for (int i = 0; i < POOL_SLOTS; i++) {
        free(ctx->slots[i].p);
        ctx->slots[i].p = NULL;
    }
    conv2d_workspace_free(&ctx->ws);
}

static cpdit_status conv(decode_ctx *ctx, const vae_conv_p *cv, float *out, const float *in,
                         int B, int H, int W, cpdit_error *err)
{
    const vae_decoder *d = ctx->d;
    return conv2d_cpu(out, in, P(d, cv->w), P(d, cv->b), B, cv->cin, cv->cout, H, W, cv->k,
                      &ctx->ws, err);
}

static void norm_act(const decode_ctx *ctx, const vae_norm_p *n, float *y, const float *x, int B,
                     int C, size_t S, cpu_activation act)
{
    const vae_decoder *d = ctx->d;
    group_norm_cpu(y, x, P(d, n->w), P(d, n->b), B, C, S, d->config.norm_num_groups,
                   VAE_NORM_EPS, act);
}

/* ResnetBlock2D. x (B, cin, H, W) is consumed; *out (B, cout, H, W) is x itself or new. */
static cpdit_status resnet_forward(decode_ctx *ctx, const vae_resnet_p *r, float *x, int B,
                                   int H, int W, float **out, cpdit_error *err)
{
    const vae_decoder *d = ctx->d;
    const size_t S = (size_t)H * W;
    const int cmax = r->cin > r->cout ? r->cin : r->cout;
    *out = NULL;
    float *t = take(ctx, (size_t)B * cmax * S, err);
    float *h = t ? take(ctx, (size_t)B * r->cout * S, err) : NULL;
    cpdit_status st = h ? CPDIT_OK : CPDIT_ERR_RUNTIME;
    if (st == CPDIT_OK) {
        norm_act(ctx, &r->norm1, t, x, B, r->cin, S, d->act);
        st = conv(ctx, &r->conv1, h, t, B, H, W, err);
    }
    if (st == CPDIT_OK) {
        norm_act(ctx, &r->norm2, h, h, B, r->cout, S, d->act);
        st = conv(ctx, &r->conv2, t, h, B, H, W, err); /* t = the residual branch */
    }
    if (st == CPDIT_OK && r->has_shortcut)
        st = conv(ctx, &r->shortcut, h, x, B, H, W, err); /* h = shortcut(x) */
    if (st != CPDIT_OK) {
        give(ctx, t);
        give(ctx, h);
        give(ctx, x);
        return st;
    }
    const size_t n = (size_t)B * r->cout * S;
    float *base = r->has_shortcut ? h : x; /* output_scale_factor is 1 */
    for (size_t i = 0; i < n; i++)
        base[i] = base[i] + t[i];
    give(ctx, t);
    if (r->has_shortcut) {
        give(ctx, x);
        *out = h;
    } else {
        give(ctx, h);
        *out = x;
    }
    return CPDIT_OK;
}

/* Mid-block Attention in place on x (B, C, H, W): x += proj(attn(norm(x))). */
static cpdit_status attention_forward(decode_ctx *ctx, const vae_attn_p *a, float *x, int B,
                                      int H, int W, cpdit_error *err)
{
    const vae_decoder *d = ctx->d;
    const int C = a->c;
    const int S = H * W;
    const size_t plane = (size_t)C * S;
    float *n = take(ctx, plane, err);
    float *q = n ? take(ctx, plane, err) : NULL;
    float *k = q ? take(ctx, plane, err) : NULL;
    float *v = k ? take(ctx, plane, err) : NULL;
    float *o = v ? take(ctx, plane, err) : NULL;
    float *lse = o ? take(ctx, (size_t)S, err) : NULL;
    cpdit_status st = lse ? CPDIT_OK : CPDIT_ERR_RUNTIME;
    const float scale = 1.0f / sqrtf((float)C);
    for (int b = 0; b < B && st == CPDIT_OK; b++) {
        float *xb = x + (size_t)b * plane;
        norm_act(ctx, &a->norm, n, xb, 1, C, (size_t)S, CPU_ACT_NONE);
        /* tokens (S, C) = nᵀ; q = tokens · Wqᵀ + bq (and k, v) */
        const size_t wo[3] = {a->q_w, a->k_w, a->v_w}, bo[3] = {a->q_b, a->k_b, a->v_b};
        float *dst[3] = {q, k, v};
        for (int m = 0; m < 3; m++) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, S, C, C, 1.0f, n, S,
                        P(d, wo[m]), C, 0.0f, dst[m], C);
            const float *bias = P(d, bo[m]);
            for (int s = 0; s < S; s++)
                for (int c = 0; c < C; c++)
                    dst[m][(size_t)s * C + c] += bias[c];
        }
        st = attention_cpu_forward(o, lse, q, k, v, 1, S, S, 1, C, scale, err);
        if (st != CPDIT_OK)
            break;
        /* x_b (C, S) += Wo · oᵀ + bo  (the residual connection; rescale factor 1) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, C, S, C, 1.0f, P(d, a->o_w), C, o,
                    C, 1.0f, xb, S);
        const float *ob = P(d, a->o_b);
        for (int c = 0; c < C; c++)
            for (int s = 0; s < S; s++)
                xb[(size_t)c * S + s] += ob[c];
    }
    give(ctx, n);
    give(ctx, q);
    give(ctx, k);
    give(ctx, v);
    give(ctx, o);
    give(ctx, lse);
    return st;
}

/* Nearest 2x + conv 3x3: x (B, C, H, W) consumed, *out (B, C, 2H, 2W) new. */
static cpdit_status upsample_forward(decode_ctx *ctx, const vae_conv_p *cv, float *x, int B,
                                     int H, int W, float **out, cpdit_error *err)
{
    const size_t n_up = (size_t)B * cv->cin * 4 * H * W;
    *out = NULL;
    float *u = take(ctx, n_up, err);
    if (!u) {
        give(ctx, x);
        return CPDIT_ERR_RUNTIME;
    }
    upsample_nearest2x_cpu(u, x, (size_t)B * cv->cin, H, W);
    give(ctx, x);
    float *y = take(ctx, (size_t)B * cv->cout * 4 * H * W, err);
    cpdit_status st = y ? conv(ctx, cv, y, u, B, 2 * H, 2 * W, err) : CPDIT_ERR_RUNTIME;
    give(ctx, u);
    if (st != CPDIT_OK) {
        give(ctx, y);
        return st;
    }
    *out = y;
    return CPDIT_OK;
}

cpdit_status vae_decode(const vae_decoder *d, const float *z, int B, int h, int w, float *out,
                        cpdit_error *err)
{
    const autoencoder_kl_config *c = &d->config;
    const int f = vae_decoder_upscale(d);
    if (B < 1 || h < 1 || w < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "vae", "latent size (%d, %d, %d, %d) must "
                               "be positive", B, c->latent_channels, h, w);
    const int64_t out_pixels = (int64_t)h * f * w * f;
    if ((int64_t)h * f > INT32_MAX / 2 || (int64_t)w * f > INT32_MAX / 2 ||
        out_pixels > INT32_MAX)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "vae", "latent size %dx%d is too large", h,
                               w);
    const int top = c->block_out_channels[c->n_blocks - 1];
    const size_t S = (size_t)h * w;
    cpdit_status st = CPDIT_OK;
    decode_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.d = d;
    float *x = take(&ctx, (size_t)B * top * S, err);
    if (!x) {
        pool_release(&ctx);
        return CPDIT_ERR_RUNTIME;
    }
    if (d->has_post_quant) {
        float *pq = take(&ctx, (size_t)B * c->latent_channels * S, err);
        st = pq ? conv(&ctx, &d->post_quant, pq, z, B, h, w, err) : CPDIT_ERR_RUNTIME;
        if (st == CPDIT_OK)
            st = conv(&ctx, &d->conv_in, x, pq, B, h, w, err);
        give(&ctx, pq);
    } else {
        st = conv(&ctx, &d->conv_in, x, z, B, h, w, err);
    }
    int H = h, W = w;
    if (st == CPDIT_OK)
        st = resnet_forward(&ctx, &d->mid_res[0], x, B, H, W, &x, err);
    if (st == CPDIT_OK && d->has_mid_attn)
        st = attention_forward(&ctx, &d->mid_attn, x, B, H, W, err);
    if (st == CPDIT_OK)
        st = resnet_forward(&ctx, &d->mid_res[1], x, B, H, W, &x, err);
    for (int i = 0; i < d->n_up && st == CPDIT_OK; i++) {
        const vae_up_p *u = &d->up[i];
        for (int j = 0; j < u->n_resnets && st == CPDIT_OK; j++)
            st = resnet_forward(&ctx, &u->resnets[j], x, B, H, W, &x, err);
        if (st == CPDIT_OK && u->has_upsample) {
            st = upsample_forward(&ctx, &u->upsample, x, B, H, W, &x, err);
            H *= 2;
            W *= 2;
        }
    }
    if (st == CPDIT_OK) {
        const int c0 = c->block_out_channels[0];
        norm_act(&ctx, &d->norm_out, x, x, B, c0, (size_t)H * W, d->act);
        st = conv(&ctx, &d->conv_out, out, x, B, H, W, err);
    }
    pool_release(&ctx); /* every activation, x included */
    return st;
}
