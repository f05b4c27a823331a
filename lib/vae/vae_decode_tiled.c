/* vae_decode_tiled.c — tiled decode for one rank with little memory, as diffusers'
 * AutoencoderKL.enable_tiling() / tiled_decode (APPROXIMATE: each tile is decoded on its own,
 * GroupNorm statistics and the mid-block attention see only the tile, and the overlaps are
 * blended linearly; see vae_decoder.h).
 *
 * diffusers' parameters: tile_sample_min_size = config sample_size (pixels),
 * tile_latent_min_size = sample_size / f, overlap factor 0.25:
 *   latent tiles of T_l x T_l start every int(T_l · 0.75) latent rows / columns;
 *   each decoded tile is blended with the tile above (blend_v) and to the left (blend_h) over
 *   blend = int(T_s · 0.25) pixels: b[y] = a[y - blend + T_a] (1 - y / blend) + b[y] (y / blend)
 *   (a already blended), then cropped to row_limit = T_s - blend pixels and concatenated.
 * A latent no larger than one tile is decoded whole (as diffusers).
 */
#include <stdlib.h>
#include <string.h>

#include "lib/vae/vae_decoder.h"
#include "lib/vae/vae_decoder_internal.h"

#define TILE_OVERLAP_FACTOR 0.25

typedef struct tile {
    float *p; /* (C, th, tw) decoded pixels */
    int th, tw;
} tile;

/* b (C, bh, bw) rows 0..e-1 blended with the last e rows of a (C, ah, aw), aw == bw. */
static void blend_v(const tile *a, tile *b, int C, int extent)
{
    int e = a->th < b->th ? a->th : b->th;
    e = e < extent ? e : extent;
    for (int c = 0; c < C; c++)
        for (int y = 0; y < e; y++) {
            const float *ar = a->p + ((size_t)c * a->th + (a->th - e + y)) * a->tw;
            float *br = b->p + ((size_t)c * b->th + y) * b->tw;
            const float t = (float)y / (float)e;
            for (int x = 0; x < b->tw && x < a->tw; x++)
                br[x] = ar[x] * (1.0f - t) + br[x] * t;
        }
}

/* b columns 0..e-1 blended with the last e columns of a (same heights). */
static void blend_h(const tile *a, tile *b, int C, int extent)
{
    int e = a->tw < b->tw ? a->tw : b->tw;
    e = e < extent ? e : extent;
    for (int c = 0; c < C; c++)
        for (int y = 0; y < b->th && y < a->th; y++) {
            const float *ar = a->p + ((size_t)c * a->th + y) * a->tw;
            float *br = b->p + ((size_t)c * b->th + y) * b->tw;
            for (int x = 0; x < e; x++) {
                const float t = (float)x / (float)e;
                br[x] = ar[a->tw - e + x] * (1.0f - t) + br[x] * t;
            }
        }
}

cpdit_status vae_decode_tiled(const vae_decoder *d, const float *z, int B, int h, int w,
                              float *out, cpdit_error *err)
{
    const autoencoder_kl_config *c = vae_decoder_config(d);
    const int f = vae_decoder_upscale(d), Cl = c->latent_channels, oc = c->out_channels;
    const int Ts = c->sample_size, Tl = Ts / f;
    if (B < 1 || h < 1 || w < 1 || Tl < 1 || (h <= Tl && w <= Tl))
        return vae_decode(d, z, B, h, w, out, err);
    const int step = (int)(Tl * (1.0 - TILE_OVERLAP_FACTOR));
    const int blend = (int)(Ts * TILE_OVERLAP_FACTOR), limit = Ts - blend;
    if (step < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "vae", "tiling: sample_size %d gives "
                               "latent tiles of %d, too small to overlap", Ts, Tl);
    const int ni = (h + step - 1) / step, nj = (w + step - 1) / step;
    const int H = h * f, W = w * f;
    tile *tiles = calloc((size_t)ni * nj, sizeof *tiles);
    float *zt = malloc((size_t)Cl * Tl * Tl * sizeof *zt);
    cpdit_status st = tiles && zt ? CPDIT_OK
                                  : cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae",
                                                    "out of memory for the tiles");
    for (int b = 0; b < B && st == CPDIT_OK; b++) {
        const float *zb = z + (size_t)b * Cl * h * w;
        float *ob = out + (size_t)b * oc * H * W;
        for (int i = 0; i < ni && st == CPDIT_OK; i++)
            for (int j = 0; j < nj && st == CPDIT_OK; j++) {
                const int y0 = i * step, x0 = j * step;
                const int th = h - y0 < Tl ? h - y0 : Tl, tw = w - x0 < Tl ? w - x0 : Tl;
                for (int ch = 0; ch < Cl; ch++)
                    for (int y = 0; y < th; y++)
                        memcpy(zt + ((size_t)ch * th + y) * tw,
                               zb + ((size_t)ch * h + y0 + y) * w + x0, (size_t)tw * sizeof *zt);
                tile *t = &tiles[(size_t)i * nj + j];
                t->th = th * f;
                t->tw = tw * f;
                t->p = malloc((size_t)oc * t->th * t->tw * sizeof *t->p);
                st = t->p ? vae_decode(d, zt, 1, th, tw, t->p, err)
                          : cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae", "out of memory");
            }
        for (int i = 0; i < ni && st == CPDIT_OK; i++)
            for (int j = 0; j < nj; j++) {
                tile *t = &tiles[(size_t)i * nj + j];
                if (i > 0)
                    blend_v(&tiles[(size_t)(i - 1) * nj + j], t, oc, blend);
                if (j > 0)
                    blend_h(&tiles[(size_t)i * nj + j - 1], t, oc, blend);
            }
        for (int i = 0; i < ni && st == CPDIT_OK; i++) /* crop and place */
            for (int j = 0; j < nj; j++) {
                const tile *t = &tiles[(size_t)i * nj + j];
                const int y0 = i * limit, x0 = j * limit;
                const int rh = t->th < limit ? t->th : limit, rw = t->tw < limit ? t->tw : limit;
                for (int ch = 0; ch < oc; ch++)
                    for (int y = 0; y < rh && y0 + y < H; y++)
                        memcpy(ob + ((size_t)ch * H + y0 + y) * W + x0,
                               t->p + ((size_t)ch * t->th + y) * t->tw,
                               (size_t)(x0 + rw <= W ? rw : W - x0) * sizeof *ob);
            }
        for (int k = 0; tiles && k < ni * nj; k++) {
            free(tiles[k].p);
            tiles[k].p = NULL;
        }
    }
    for (int k = 0; tiles && k < ni * nj; k++)
        free(tiles[k].p);
    free(tiles);
    free(zt);
    return st;
}
