/* flux_latents.c — 2x2 packing of FLUX latents into tokens, its inverse, position ids
 * (see flux_latents.h). */
#include "lib/models/flux/flux_latents.h"

#include <stddef.h>
#include <string.h>

static cpdit_status check_side(const char *name, int pixels, cpdit_error *err)
{
    if (pixels <= 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, name,
                               "must be a positive multiple of %d, got %d", FLUX_IMAGE_MULTIPLE,
                               pixels);
    if (pixels % FLUX_IMAGE_MULTIPLE != 0) {
        int below = pixels / FLUX_IMAGE_MULTIPLE * FLUX_IMAGE_MULTIPLE;
        int above = below + FLUX_IMAGE_MULTIPLE;
        if (below == 0)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, name,
                                   "%d is not a multiple of %d (nearest: %d)", pixels,
                                   FLUX_IMAGE_MULTIPLE, above);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, name,
                               "%d is not a multiple of %d (nearest: %d or %d)", pixels,
                               FLUX_IMAGE_MULTIPLE, below, above);
    }
    return CPDIT_OK;
}

cpdit_status flux_latent_dims(int height, int width, int *lat_h, int *lat_w, cpdit_error *err)
{
    cpdit_status st = check_side("height", height, err);
    if (st == CPDIT_OK)
        st = check_side("width", width, err);
    if (st != CPDIT_OK)
        return st;
    *lat_h = height / FLUX_VAE_SCALE;
    *lat_w = width / FLUX_VAE_SCALE;
    return CPDIT_OK;
}

/* Index of lat[b, c, y, x] and of the packed value holding it. */
static size_t lat_index(int b, int c, int y, int x, int C, int H, int W)
{
    return (((size_t)b * C + c) * H + y) * W + x;
}

static size_t packed_index(int b, int c, int y, int x, int C, int H, int W)
{
    const int hp = H / FLUX_PACK, wp = W / FLUX_PACK;
    const size_t token = (size_t)(y / FLUX_PACK) * wp + (size_t)(x / FLUX_PACK);
    const size_t feature = ((size_t)c * FLUX_PACK + (size_t)(y % FLUX_PACK)) * FLUX_PACK +
                           (size_t)(x % FLUX_PACK);
    return ((size_t)b * hp * wp + token) * ((size_t)C * FLUX_PACK * FLUX_PACK) + feature;
}

void flux_pack_latents(float *packed, const float *lat, int B, int C, int H, int W)
{
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    packed[packed_index(b, c, y, x, C, H, W)] = lat[lat_index(b, c, y, x, C, H, W)];
}

void flux_unpack_latents(float *lat, const float *packed, int B, int C, int H, int W)
{
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    lat[lat_index(b, c, y, x, C, H, W)] = packed[packed_index(b, c, y, x, C, H, W)];
}

void flux_latent_image_ids(float *ids, int H, int W)
{
    const int hp = H / FLUX_PACK, wp = W / FLUX_PACK;
    for (int i = 0; i < hp; i++)
        for (int j = 0; j < wp; j++) {
            float *row = ids + ((size_t)i * wp + j) * FLUX_ID_AXES;
            row[0] = 0.0f;
            row[1] = (float)i;
            row[2] = (float)j;
        }
}

void flux_text_ids(float *ids, int T)
{
    if (T > 0)
        memset(ids, 0, (size_t)T * FLUX_ID_AXES * sizeof *ids);
}
