/* wan_vae_tiled.c — the Wan VAE's tiled decode on one rank, as diffusers'
 * AutoencoderKLWan.tiled_decode (see wan_vae.h): approximate, for a rank short of memory.
 *
 * Tile (ti, tj) covers latent rows [ti·sh, ti·sh + th) and columns [tj·sw, tj·sw + tw) (sh, sw,
 * th, tw = stride and min size / 8, clipped at the edges) and is decoded over the whole clip
 * with its own caches (wan_vae_decode_frames, unclamped). Then, in diffusers' order and in
 * place, it is blended with the (already blended) tile above over the first min_h - stride_h
 * pixel rows and with the (already blended) tile to its left over the first min_w - stride_w
 * columns, and its first stride_h x stride_w pixels land in the output at (ti·stride_h,
 * tj·stride_w). The output is clamped at the end. Two rows of tiles' clips are kept (host
 * fp32: the row above is read by the row below).
 */
#include <stdlib.h>
#include <string.h>

#include "lib/models/wan/wan_vae_internal.h"

#define TILE_DEFAULT_MIN 256
#define TILE_DEFAULT_STRIDE 192

void wan_vae_tiling_defaults(wan_vae_tiling *t)
{
    t->min_h = t->min_w = TILE_DEFAULT_MIN;
    t->stride_h = t->stride_w = TILE_DEFAULT_STRIDE;
}

typedef struct tile {
    float *px; /* (oc, F, H, W) */
    int H, W;
} tile;

typedef struct tile_sink {
    tile *t;
    int F;
} tile_sink;

static int store(void *p, int b, int f, const float *rgb, int C, int H, int W)
{
    tile_sink *s = p;
    const size_t plane = (size_t)H * W;
    (void)b;
    if (f >= s->F || H != s->t->H || W != s->t->W)
        return 1;
    for (int ch = 0; ch < C; ch++)
        memcpy(s->t->px + ((size_t)ch * s->F + f) * plane, rgb + ch * plane,
               plane * sizeof *rgb);
    return 0;
}

/* blend_v: the first e rows of b from the last e rows of a (e = min(a.H, b.H, extent)):
 * b = a (1 - y/e) + b (y/e), as float32 tensors times Python floats. n = oc·F planes. */
static void blend_v(const tile *a, tile *b, int extent, int n)
{
    const int e = extent < a->H ? (extent < b->H ? extent : b->H) : (a->H < b->H ? a->H : b->H);
    for (int y = 0; y < e; y++) {
        const float wa = (float)(1.0 - (double)y / e), wb = (float)((double)y / e);
        for (int p = 0; p < n; p++) {
            const float *ra = a->px + ((size_t)p * a->H + (a->H - e + y)) * a->W;
            float *rb = b->px + ((size_t)p * b->H + y) * b->W;
            for (int x = 0; x < b->W; x++)
                rb[x] = ra[x] * wa + rb[x] * wb;
        }
    }
}

/* blend_h: the first e columns of b from the last e columns of a (same rows). */
static void blend_h(const tile *a, tile *b, int extent, int n)
{
    const int e = extent < a->W ? (extent < b->W ? extent : b->W) : (a->W < b->W ? a->W : b->W);
    for (int x = 0; x < e; x++) {
        const float wa = (float)(1.0 - (double)x / e), wb = (float)((double)x / e);
        for (size_t r = 0; r < (size_t)n * b->H; r++) {
            const float va = a->px[r * a->W + (a->W - e + x)];
            float *vb = &b->px[r * b->W + x];
            *vb = va * wa + *vb * wb;
        }
    }
}

static void free_row(tile *row, int n)
{
    for (int j = 0; row && j < n; j++) {
        free(row[j].px);
        row[j].px = NULL;
    }
}

/* Decode tile (ti, tj) of item b over all frames into t. */
static cpdit_status decode_tile(wan_vae *d, const wan_vae_tiling *tl, const float *z, int b,
                                int T, int h, int w, int ti, int tj, float *sub, tile *t,
                                cpdit_error *err)
{
    const wan_vae_config *c = &d->cfg;
    const int f = wan_vae_upscale(c), F = wan_vae_frames(c, T), Cl = c->z_dim;
    const int r0 = ti * (tl->stride_h / f), c0 = tj * (tl->stride_w / f);
    const int rows = h - r0 < tl->min_h / f ? h - r0 : tl->min_h / f;
    const int cols = w - c0 < tl->min_w / f ? w - c0 : tl->min_w / f;
    for (int ch = 0; ch < Cl; ch++)
        for (int k = 0; k < T; k++)
            for (int y = 0; y < rows; y++)
                memcpy(sub + (((size_t)ch * T + k) * rows + y) * cols,
                       z + ((((size_t)b * Cl + ch) * T + k) * h + r0 + y) * w + c0,
                       (size_t)cols * sizeof *sub);
    t->H = rows * f;
    t->W = cols * f;
    if (!(t->px = malloc((size_t)c->out_channels * F * t->H * t->W * sizeof *t->px)))
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "wan vae", "out of memory for a tile");
    tile_sink s = {t, F};
    return wan_vae_decode_frames_clamp(d, NULL, 0, sub, 1, T, rows, cols, 0, store, &s, err);
}

/* Tile (ti, tj)'s first stride pixels into out (item b). */
static void place(const wan_vae_config *c, const wan_vae_tiling *tl, const tile *t, int F,
                  int H, int W, int b, int ti, int tj, float *out)
{
    const int y0 = ti * tl->stride_h, x0 = tj * tl->stride_w;
    int ny = t->H < tl->stride_h ? t->H : tl->stride_h;
    int nx = t->W < tl->stride_w ? t->W : tl->stride_w;
    ny = y0 + ny > H ? H - y0 : ny;
    nx = x0 + nx > W ? W - x0 : nx;
    for (int p = 0; p < c->out_channels * F; p++)
        for (int y = 0; y < ny; y++)
            memcpy(out + (((size_t)b * c->out_channels * F + p) * H + y0 + y) * W + x0,
                   t->px + ((size_t)p * t->H + y) * t->W, (size_t)nx * sizeof *out);
}

cpdit_status wan_vae_decode_tiled(wan_vae *d, const wan_vae_tiling *tiling, const float *z,
                                  int B, int T, int h, int w, float *out, cpdit_error *err)
{
    const wan_vae_config *c = &d->cfg;
    wan_vae_tiling tl;
    if (tiling)
        tl = *tiling;
    else
        wan_vae_tiling_defaults(&tl);
    const int f = wan_vae_upscale(c);
    if (tl.min_h < f || tl.min_w < f || tl.stride_h < f || tl.stride_w < f ||
        tl.stride_h > tl.min_h || tl.stride_w > tl.min_w)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "wan vae", "tiling %dx%d every %dx%d "
                               "pixels: sizes must be at least %d and strides at most the "
                               "sizes", tl.min_h, tl.min_w, tl.stride_h, tl.stride_w, f);
    if (!(w > tl.min_w / f || h > tl.min_h / f)) /* one tile: the plain decode */
        return wan_vae_decode_group(d, NULL, z, B, T, h, w, out, err);
    if (B < 1 || T < 1 || h < 1 || w < 1)
        return wan_vae_decode_group(d, NULL, z, B, T, h, w, out, err); /* its size error */
    const int sh = tl.stride_h / f, sw = tl.stride_w / f, F = wan_vae_frames(c, T);
    const int nr = (h + sh - 1) / sh, nc = (w + sw - 1) / sw, H = h * f, W = w * f;
    const int planes = c->out_channels * F;
    tile *prev = calloc((size_t)nc, sizeof *prev), *cur = calloc((size_t)nc, sizeof *cur);
    float *sub = malloc((size_t)c->z_dim * T * (tl.min_h / f) * (tl.min_w / f) * sizeof *sub);
    cpdit_status st = prev && cur && sub ? CPDIT_OK
                                         : cpdit_error_set(err, CPDIT_ERR_RUNTIME, "wan vae",
                                                           "out of memory");
    for (int b = 0; b < B && !st; b++) {
        free_row(prev, nc);
        for (int ti = 0; ti < nr && !st; ti++) {
            for (int tj = 0; tj < nc && !st; tj++) {
                st = decode_tile(d, &tl, z, b, T, h, w, ti, tj, sub, &cur[tj], err);
                if (st)
                    break;
                if (ti > 0)
                    blend_v(&prev[tj], &cur[tj], tl.min_h - tl.stride_h, planes);
                if (tj > 0)
                    blend_h(&cur[tj - 1], &cur[tj], tl.min_w - tl.stride_w, planes);
                place(c, &tl, &cur[tj], F, H, W, b, ti, tj, out);
            }
            free_row(prev, nc);
            tile *t = prev;
            prev = cur;
            cur = t;
        }
    }
    for (size_t i = 0; !st && i < (size_t)B * planes * H * W; i++) /* torch.clamp(dec, -1, 1) */
        out[i] = out[i] < -1.0f ? -1.0f : out[i] > 1.0f ? 1.0f : out[i];
    free_row(prev, nc);
    free_row(cur, nc);
    free(prev);
    free(cur);
    free(sub);
    return st;
}
