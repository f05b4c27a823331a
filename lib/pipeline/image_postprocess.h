/* image_postprocess.h — VAE output (float, [-1, 1]) to 8-bit RGB pixels, as diffusers does.
 *
 * diffusers' VaeImageProcessor.postprocess(output_type="pil") does, per value x:
 *   denormalize:   t = clamp(x / 2 + 0.5, 0, 1)          (torch, in the tensor's dtype)
 *   pt_to_numpy:   t as float32, layout (C,H,W) -> (H,W,C)
 *   numpy_to_pil:  u = uint8(round(t * 255))             (numpy, float32)
 * numpy's round() rounds halves to even (127.5 -> 128, 126.5 -> 126), which is what rintf()
 * does in the default rounding mode; every step here is float32 like numpy's, so the bytes
 * match diffusers for a float32 VAE output. (A bf16 VAE in diffusers does the denormalize
 * step in bf16 and can differ by one level; cpdit's VAE output is float32.)
 * NaN, which torch's clamp passes through and numpy turns into an unspecified byte, maps
 * to 0 here; +inf to 255, -inf to 0.
 */
#ifndef CPDIT_IMAGE_POSTPROCESS_H
#define CPDIT_IMAGE_POSTPROCESS_H

#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One VAE output value in [-1, 1] (anything else is clamped) to a byte 0..255. */
uint8_t image_value_to_u8(float x);

/* chw: (C, H, W) float32 image as the VAE decoder outputs for one batch element, values
 * nominally in [-1, 1]. rgb: (H, W, 3) uint8 output, row-major. C must be 3 (RGB) or 1
 * (grey, copied to R, G and B). Errors: CPDIT_ERR_INPUT for another C or a size <= 0. */
cpdit_status image_chw_to_rgb8(const float *chw, int channels, int height, int width,
                               uint8_t *rgb, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
