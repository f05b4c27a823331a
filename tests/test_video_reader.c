/* test_video_reader.c — lib/io/video_reader.h on clips written by video_writer.h:
 *   - png-frames and lossless WebP: frames 0, 8, 16 (and 8 again, out of order) of a
 *     17-frame synthetic clip equal the source frames exactly (also at an odd size, 65x33);
 *   - mp4 (CRF 18): the same frames within a mean absolute error of MP4_MAE_MAX levels (the
 *     bound tests/video_writer.sh holds ffmpeg's own decode to), the size right;
 *   - the frame count reported; frame 17 of 17 refused as INPUT naming the count, nothing
 *     left in the output; an unknown extension, a missing path and a folder without frames
 *     INPUT; a torn MP4 (first half of the file) RUNTIME or a short count, never a crash.
 * Formats this build lacks are skipped with a note. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/io/video_reader.h"
#include "lib/io/video_writer.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"
#include "tests/video_synth.h"

#define CLIP_T 17
#define MP4_MAE_MAX 4.0

static const int which[] = {0, 8, 16, 8};
#define N_WHICH 4

/* Mean absolute error of the frames read vs the clip's frames which[], -1 if a size is off. */
static double frames_mae(const cpdit_png_image *im, const uint8_t *clip, int w, int h)
{
    double sum = 0;
    for (int i = 0; i < N_WHICH; i++) {
        if (im[i].width != w || im[i].height != h || !im[i].rgb)
            return -1;
        const uint8_t *src = clip + (size_t)which[i] * w * h * 3;
        for (size_t k = 0; k < (size_t)w * h * 3; k++)
            sum += abs((int)im[i].rgb[k] - (int)src[k]);
    }
    return sum / ((double)N_WHICH * w * h * 3);
}

static void free_all(cpdit_png_image *im)
{
    for (int i = 0; i < N_WHICH; i++)
        cpdit_png_image_free(&im[i]);
}

/* Write the synthetic clip at w x h in format f (webp: lossless) under dir/name and read
 * frames which[] back; mae_max 0 = exact. */
static void round_trip(const char *dir, const char *name, cpdit_video_format f, int w, int h,
                       double mae_max)
{
    char why[512];
    if (!cpdit_video_format_available(f, why, sizeof why)) {
        fprintf(stderr, "%s skipped: %s\n", name, why);
        return;
    }
    uint8_t *clip = synth_clip(CLIP_T, w, h);
    char *p = tmp_path(dir, name);
    cpdit_video_options o;
    cpdit_video_options_init(&o, f);
    o.threads = 1;
    o.webp_lossless = 1;
    cpdit_video_result r;
    cpdit_error err;
    CHECK_MSG(cpdit_video_write(p, clip, CLIP_T, h, w, &o, NULL, 0, &r, &err) == CPDIT_OK, "%s",
              err.what);
    cpdit_png_image im[N_WHICH];
    int frames = -1;
    cpdit_status st = cpdit_video_read_frames(p, which, N_WHICH, im, &frames, &err);
#if !defined(CPDIT_HAVE_WEBPDEMUX)
    if (f == CPDIT_VIDEO_WEBP) {
        CHECK(st == CPDIT_ERR_INPUT && strstr(err.what, "libwebpdemux"));
        fprintf(stderr, "%s: reading skipped: %s\n", name, err.what);
        free(p);
        free(clip);
        return;
    }
#endif
    CHECK_MSG(st == CPDIT_OK, "%s: %s", name, err.what);
    CHECK_MSG(frames == CLIP_T, "%s: %d frames", name, frames);
    if (st == CPDIT_OK) {
        const double mae = frames_mae(im, clip, w, h);
        fprintf(stderr, "%s %dx%d: frames 0, 8, 16, 8: mean abs error %.3f levels (bound %g)\n",
                name, w, h, mae, mae_max);
        CHECK_MSG(mae >= 0 && (mae_max == 0 ? mae == 0 : mae < mae_max), "%s: mae %.3f", name,
                  mae);
        free_all(im);
    }
    /* one past the end: refused, naming the count, nothing left */
    const int past[2] = {3, CLIP_T};
    cpdit_png_image two[2];
    st = cpdit_video_read_frames(p, past, 2, two, NULL, &err);
    CHECK(st == CPDIT_ERR_INPUT && strstr(err.what, "has 17 frames") && !two[0].rgb &&
          !two[1].rgb);
    if (f == CPDIT_VIDEO_MP4) { /* the first half of the file: an error or fewer frames */
        struct stat sb;
        char *torn = tmp_path(dir, "torn.mp4");
        FILE *in = fopen(p, "rb"), *out = fopen(torn, "wb");
        CHECK(in && out && stat(p, &sb) == 0);
        for (long k = 0; in && out && k < sb.st_size / 2; k++)
            fputc(fgetc(in), out);
        if (in)
            fclose(in);
        if (out)
            fclose(out);
        st = cpdit_video_read_frames(torn, which, N_WHICH, im, &frames, &err);
        CHECK(st == CPDIT_ERR_RUNTIME || st == CPDIT_ERR_INPUT);
        fprintf(stderr, "torn mp4: %s\n", st ? err.what : "read");
        free(torn);
    }
    free(p);
    free(clip);
}

int main(void)
{
    char *dir = tmpdir_make("video-reader");
    CHECK(dir != NULL);
    if (!dir)
        TEST_MAIN_END();
    round_trip(dir, "frames", CPDIT_VIDEO_PNG_FRAMES, 64, 64, 0);
    round_trip(dir, "odd", CPDIT_VIDEO_PNG_FRAMES, 65, 33, 0);
    round_trip(dir, "clip.webp", CPDIT_VIDEO_WEBP, 64, 64, 0);
    round_trip(dir, "odd.webp", CPDIT_VIDEO_WEBP, 65, 33, 0);
    round_trip(dir, "clip.mp4", CPDIT_VIDEO_MP4, 64, 64, MP4_MAE_MAX);
    round_trip(dir, "wide.mp4", CPDIT_VIDEO_MP4, 96, 48, MP4_MAE_MAX);

    cpdit_png_image im[N_WHICH];
    cpdit_error err;
    char *p = tmp_path(dir, "clip.avi");
    FILE *f = fopen(p, "w");
    if (f)
        fclose(f);
    CHECK(cpdit_video_read_frames(p, which, N_WHICH, im, NULL, &err) == CPDIT_ERR_INPUT &&
          strstr(err.what, "not a clip"));
    free(p);
    p = tmp_path(dir, "missing.mp4");
    CHECK(cpdit_video_read_frames(p, which, N_WHICH, im, NULL, &err) == CPDIT_ERR_INPUT);
    free(p);
    p = tmp_path(dir, "empty");
    mkdir(p, 0700);
    CHECK(cpdit_video_read_frames(p, which, N_WHICH, im, NULL, &err) == CPDIT_ERR_INPUT &&
          strstr(err.what, "frame_00000.png"));
    free(p);
    tmpdir_remove(dir);
    free(dir);
    TEST_MAIN_END();
}
