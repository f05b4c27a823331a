/* video_synth.h — synthetic RGB clips for the video writer tests: a smooth colour gradient
 * that drifts with time plus a red square moving across it (both easy to check by eye and
 * by mean absolute error after lossy coding). */
#ifndef CPDIT_TEST_VIDEO_SYNTH_H
#define CPDIT_TEST_VIDEO_SYNTH_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define SYNTH_SQUARE 16   /* side of the moving square, pixels */
#define SYNTH_STEP 2      /* its motion per frame, pixels */
#define SYNTH_AMPL 100.0  /* gradient amplitude around mid grey */
#define SYNTH_MID 128.0
#define SYNTH_TWO_PI 6.283185307179586

/* frame t of the clip into rgb, (h, w, 3) uint8. */
static inline void synth_frame(uint8_t *rgb, int t, int w, int h)
{
    const int sx = (t * SYNTH_STEP) % (w > SYNTH_SQUARE ? w - SYNTH_SQUARE : 1);
    const int sy = (t * SYNTH_STEP / 2) % (h > SYNTH_SQUARE ? h - SYNTH_SQUARE : 1);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            if (x >= sx && x < sx + SYNTH_SQUARE && y >= sy && y < sy + SYNTH_SQUARE) {
                p[0] = 230, p[1] = 40, p[2] = 40;
                continue;
            }
            double u = (double)x / w + t / 32.0, v = (double)y / h;
            p[0] = (uint8_t)lround(SYNTH_MID + SYNTH_AMPL * sin(SYNTH_TWO_PI * u));
            p[1] = (uint8_t)lround(SYNTH_MID + SYNTH_AMPL * cos(SYNTH_TWO_PI * v + 0.3 * t));
            p[2] = (uint8_t)lround(255.0 * (x + y) / (w + h > 2 ? w + h - 2 : 1));
        }
}

/* The whole clip, (n, h, w, 3) uint8; caller frees. */
static inline uint8_t *synth_clip(int n, int w, int h)
{
    uint8_t *c = malloc((size_t)n * w * h * 3);
    if (c)
        for (int t = 0; t < n; t++)
            synth_frame(c + (size_t)t * w * h * 3, t, w, h);
    return c;
}

#endif
