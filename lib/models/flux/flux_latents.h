/* flux_latents.h — FLUX's latent layout: the VAE latents (B, C, H', W') and the transformer's
 * token sequence (B, (H'/2)(W'/2), 4C), and the image position ids.
 *
 * As FluxPipeline does it (diffusers):
 *   _pack_latents:   view (B, C, H'/2, 2, W'/2, 2) → permute (0, 2, 4, 1, 3, 5) → reshape
 *                    (B, (H'/2)(W'/2), C·4). So token t = i·(W'/2) + j holds, at feature
 *                    c·4 + di·2 + dj, the latent value [b, c, 2i + di, 2j + dj].
 *   _unpack_latents: the inverse.
 *   _prepare_latent_image_ids: ((H'/2)(W'/2), 3) rows [0, i, j] for token t = i·(W'/2) + j
 *                    (the text ids are all zero: (T, 3) zeros).
 * H' = H/8 and W' = W/8 for an image of H x W pixels; FluxPipeline computes
 * 2·(H // 16), so H and W must be multiples of 16 for the image to keep its size.
 */
#ifndef CPDIT_FLUX_LATENTS_H
#define CPDIT_FLUX_LATENTS_H

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLUX_VAE_SCALE 8         /* pixels per latent value along each axis */
#define FLUX_PACK 2              /* latent values per token along each axis */
#define FLUX_IMAGE_MULTIPLE 16   /* FLUX_VAE_SCALE · FLUX_PACK */
#define FLUX_ID_AXES 3           /* position id components: (0, row, column) */

/* Latent size (lat_h, lat_w) = (height/8, width/8) of an image. Errors (INPUT, where =
 * "height" or "width"): not a positive multiple of 16, e.g. "500 is not a multiple of 16
 * (nearest: 496 or 512)". */
cpdit_status flux_latent_dims(int height, int width, int *lat_h, int *lat_w, cpdit_error *err);

/* packed (B, (H/2)(W/2), 4C) from lat (B, C, H, W); H and W even. No aliasing. */
void flux_pack_latents(float *packed, const float *lat, int B, int C, int H, int W);

/* lat (B, C, H, W) from packed (B, (H/2)(W/2), 4C); the exact inverse of flux_pack_latents. */
void flux_unpack_latents(float *lat, const float *packed, int B, int C, int H, int W);

/* ids ((H/2)(W/2), 3) = [0, i, j] for token i·(W/2) + j, as floats; H and W are the LATENT
 * size (H', W'), even. */
void flux_latent_image_ids(float *ids, int H, int W);

/* ids (T, 3) = 0: the text tokens' position ids. */
void flux_text_ids(float *ids, int T);

#ifdef __cplusplus
}
#endif
#endif
