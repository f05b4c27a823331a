/* image_postprocess.c — float [-1, 1] (C,H,W) to uint8 (H,W,3), diffusers' rounding
 * (see image_postprocess.h for the exact steps and why they match). */
#include "lib/pipeline/image_postprocess.h"

#include <math.h>
#include <stddef.h>

#define RGB_CHANNELS 3
#define U8_MAX_LEVEL 255.0f

uint8_t image_value_to_u8(float x)
{
    /* x / 2 is exact (a power-of-two scale), so whether the compiler fuses the multiply
     * and add or not, t is the same float32 as torch's (x / 2 + 0.5). */
    float t = x / 2.0f + 0.5f;
    if (!(t > 0.0f)) /* also NaN */
        return 0;
    if (t > 1.0f)
        t = 1.0f;
    float u = t * U8_MAX_LEVEL;   /* float32 product, as numpy's (images * 255) */
    return (uint8_t)rintf(u);     /* round half to even, as numpy's round() */
}

cpdit_status image_chw_to_rgb8(const float *chw, int channels, int height, int width,
                               uint8_t *rgb, cpdit_error *err)
{
    if (channels != RGB_CHANNELS && channels != 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "image",
                               "decoded image has %d channels; expected 3 (RGB) or 1", channels);
    if (height <= 0 || width <= 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "image", "image size %dx%d is not positive",
                               width, height);
    size_t plane = (size_t)height * (size_t)width;
    for (size_t i = 0; i < plane; i++) {
        for (int c = 0; c < RGB_CHANNELS; c++) {
            size_t src = channels == 1 ? i : (size_t)c * plane + i;
            rgb[i * RGB_CHANNELS + (size_t)c] = image_value_to_u8(chw[src]);
        }
    }
    return CPDIT_OK;
}
