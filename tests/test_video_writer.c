/* test_video_writer.c — lib/io/video_writer.h without outside tools (tests/video_writer.sh
 * reads the MP4s with ffprobe/ffmpeg):
 *   - format names, defaults, frame-rate fractions; bad sizes, fps, CRF, preset, metadata,
 *     empty clips and destinations (folder, FIFO, a file where frames go) refused as INPUT
 *     with nothing left behind;
 *   - "mp4/webp output is unavailable" with its exact message (the tests' switch that makes a
 *     format report itself unbuilt, or the real build without the library);
 *   - mp4: result fields (17 frames, 16/1 fps, 1.0625 s, h264, bytes = file size), ftyp then
 *     moov first (faststart), no temporary file left;
 *   - webp (libwebpdemux): frame count, canvas, loop count, timestamps, lossless frames equal
 *     to the input exactly (also at an odd size), lossy quality 90 within a stated error, the
 *     metadata in the XMP chunk;
 *   - png-frames: T files frame_00000.png..., each equal to its input frame exactly, with the
 *     metadata; a second clip replaces the first whole; foreign folders are not touched;
 *   - a writer SIGKILLed mid-clip leaves nothing under the final name, only a temporary name.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef CPDIT_HAVE_WEBPDEMUX
#include <webp/demux.h>
#endif

#include "lib/io/atomic_file.h"
#include "lib/io/png_reader.h"
#include "lib/io/video_writer.h"
#include "lib/io/video_writer_internal.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"
#include "tests/video_synth.h"

#define CLIP_T 17
#define CLIP_W 64
#define CLIP_H 64
/* Lossy WebP at quality 90 on the synthetic clip: mean absolute error bound in 8-bit levels
 * (measured 2.37 at 64x64 and 2.58 at 65x33 with libwebp 1.2.4; lossy WebP is 4:2:0 YUV,
 * whose chroma subsampling alone costs about as much on these small, colourful frames, as
 * for the MP4 in video_writer.sh). */
#define WEBP_LOSSY_MAE_MAX 4.0
#define POLL_US 20000
#define KILL_WAIT_S 20
#define CHILD_ALARM_S 120

static const cpdit_video_tag tags[] = {
    {"prompt", "a red square, \xe4\xb8\x80\xe5\x8f\xaa\xe7\x8c\xab caf\xc3\xa9 <&>"},
    {"seed", "42"},
    {"steps", "4"},
    {"model", "builtin:wan-tiny"},
    {"grid", "dp 1 ring 2 ulysses 2"},
};
#define N_TAGS ((int)(sizeof tags / sizeof tags[0]))

/* Entries of dir other than . and ..; *temps counts those with a temporary name. */
static int count_entries(const char *dir, int *temps)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (temps)
        *temps = 0;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        n++;
        if (temps && atomic_file_is_temp_name(e->d_name))
            (*temps)++;
    }
    closedir(d);
    return n;
}

static int exists(const char *p)
{
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static void test_names_and_options(void)
{
    cpdit_video_format f;
    cpdit_error err;
    CHECK(cpdit_video_format_parse("mp4", &f, "x", &err) == CPDIT_OK && f == CPDIT_VIDEO_MP4);
    CHECK(cpdit_video_format_parse("png-frames", &f, "x", &err) == CPDIT_OK &&
          f == CPDIT_VIDEO_PNG_FRAMES);
    CHECK(cpdit_video_format_parse("gif", &f, "output.format", &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "expected mp4, webp or png-frames");
    CHECK(strcmp(cpdit_video_format_name(CPDIT_VIDEO_WEBP), "webp") == 0);
    CHECK(strcmp(cpdit_video_format_extension(CPDIT_VIDEO_MP4), ".mp4") == 0);
    cpdit_video_options o;
    cpdit_video_options_init(&o, CPDIT_VIDEO_WEBP);
    CHECK(o.fps == CPDIT_VIDEO_DEFAULT_FPS && o.fps == 16.0);
    CHECK(o.crf == CPDIT_VIDEO_DEFAULT_CRF && o.webp_lossless == 0 && o.webp_loops == 0);
    CHECK(o.webp_quality == CPDIT_VIDEO_DEFAULT_WEBP_QUALITY);
    char buf[1024];
    cpdit_video_describe(buf, sizeof buf);
    CHECK_STR_CONTAINS(buf, "png-frames");
    CHECK_STR_CONTAINS(buf, "mp4");
}

/* png-frames (always built) at fps: the stored fraction. */
static void check_fps(const char *dir, double fps, int num, int den)
{
    char *p = tmp_path(dir, "fps");
    uint8_t px[3 * 2 * 2] = {0};
    cpdit_video_options o;
    cpdit_video_options_init(&o, CPDIT_VIDEO_PNG_FRAMES);
    o.fps = fps;
    cpdit_video_result r;
    cpdit_error err;
    CHECK(cpdit_video_write(p, px, 1, 2, 2, &o, NULL, 0, &r, &err) == CPDIT_OK);
    CHECK_MSG(r.fps_num == num && r.fps_den == den, "fps %g -> %d/%d, expected %d/%d", fps,
              r.fps_num, r.fps_den, num, den);
    free(p);
}

static void expect_input_error(const char *what, cpdit_status st, const cpdit_error *err,
                               const char *needle)
{
    CHECK_MSG(st == CPDIT_ERR_INPUT, "%s: status %d", what, (int)st);
    CHECK_STR_CONTAINS(err->what, needle);
}

static void test_refusals(const char *dir)
{
    uint8_t *clip = synth_clip(2, CLIP_W + 1, CLIP_H);
    cpdit_video_options o;
    cpdit_video_result r;
    cpdit_error err;
    char *p = tmp_path(dir, "bad.mp4");
    cpdit_video_options_init(&o, CPDIT_VIDEO_MP4);
    if (cpdit_video_format_available(CPDIT_VIDEO_MP4, NULL, 0)) {
        expect_input_error("odd width", cpdit_video_write(p, clip, 2, CLIP_H, CLIP_W + 1, &o, NULL,
                                                          0, &r, &err), &err, "even width");
        o.crf = 60;
        expect_input_error("crf", cpdit_video_write(p, clip, 2, CLIP_H, CLIP_W, &o, NULL, 0, &r,
                                                    &err), &err, "crf 60");
        o.crf = -1;
        o.preset = "warp-speed";
        expect_input_error("preset", cpdit_video_write(p, clip, 2, CLIP_H, CLIP_W, &o, NULL, 0,
                                                       &r, &err), &err, "warp-speed");
    }
    cpdit_video_options_init(&o, CPDIT_VIDEO_PNG_FRAMES);
    o.fps = 1000;
    expect_input_error("fps", cpdit_video_write(p, clip, 2, CLIP_H, CLIP_W, &o, NULL, 0, &r, &err),
                       &err, "fps 1000");
    o.fps = -1;
    expect_input_error("fps", cpdit_video_write(p, clip, 2, CLIP_H, CLIP_W, &o, NULL, 0, &r, &err),
                       &err, "out of range");
    o.fps = 16;
    const cpdit_video_tag bad_key = {" seed", "1"}, bad_value = {"prompt", "caf\xe9"};
    expect_input_error("key", cpdit_video_write(p, clip, 2, CLIP_H, CLIP_W, &o, &bad_key, 1, &r,
                                                &err), &err, "metadata key");
    expect_input_error("value", cpdit_video_write(p, clip, 2, CLIP_H, CLIP_W, &o, &bad_value, 1,
                                                  &r, &err), &err, "not valid UTF-8");
    expect_input_error("no frames", cpdit_video_write(p, clip, 0, CLIP_H, CLIP_W, &o, NULL, 0, &r,
                                                      &err), &err, "at least one frame");
    expect_input_error("size", cpdit_video_write(p, clip, 1, 0, CLIP_W, &o, NULL, 0, &r, &err),
                       &err, "out of range");

    /* destinations that are not regular files, for the single-file formats */
    char *fifo = tmp_path(dir, "fifo.webp"), *sub = tmp_path(dir, "sub.mp4");
    CHECK(mkfifo(fifo, 0600) == 0 && mkdir(sub, 0700) == 0);
    for (int f = CPDIT_VIDEO_MP4; f <= CPDIT_VIDEO_WEBP; f++) {
        if (!cpdit_video_format_available((cpdit_video_format)f, NULL, 0))
            continue;
        cpdit_video_options_init(&o, (cpdit_video_format)f);
        expect_input_error("fifo", cpdit_video_write(fifo, clip, 1, CLIP_H, CLIP_W, &o, NULL, 0,
                                                     &r, &err), &err, "FIFO");
        expect_input_error("folder", cpdit_video_write(sub, clip, 1, CLIP_H, CLIP_W, &o, NULL, 0,
                                                       &r, &err), &err, "folder");
    }
    struct stat sb;
    CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
    /* png-frames onto a regular file */
    char *file = tmp_path(dir, "plain");
    CHECK(atomic_write_buffer(file, "x", 1, &err) == CPDIT_OK);
    cpdit_video_options_init(&o, CPDIT_VIDEO_PNG_FRAMES);
    expect_input_error("frames on a file", cpdit_video_write(file, clip, 1, CLIP_H, CLIP_W, &o,
                                                            NULL, 0, &r, &err), &err,
                       "regular file, not a folder");
    CHECK(stat(file, &sb) == 0 && sb.st_size == 1);
    int temps;
    CHECK(count_entries(dir, &temps) >= 0 && temps == 0);
    CHECK(!exists(p));
    unlink(fifo);
    rmdir(sub);
    unlink(file);
    free(fifo);
    free(sub);
    free(file);
    free(p);
    free(clip);
}

#define MSG_MP4                                                                               \
    "mp4 output is unavailable: cpdit was built without libavcodec (install libavcodec-dev "  \
    "libavformat-dev libswscale-dev and reconfigure)"
#define MSG_WEBP                                                                              \
    "webp output is unavailable: cpdit was built without libwebp (install libwebp-dev and "   \
    "reconfigure)"

static void test_unavailable(const char *dir)
{
#ifdef CPDIT_HAVE_FFMPEG
    int real_mp4 = 0;
#else
    int real_mp4 = 1;
#endif
#ifdef CPDIT_HAVE_WEBP
    int real_webp = 0;
#else
    int real_webp = 1;
#endif
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) /* the tests' switch: as in a build without the libraries */
            cpdit_video_pretend_unbuilt(1u << CPDIT_VIDEO_MP4 | 1u << CPDIT_VIDEO_WEBP);
        else if (!real_mp4 && !real_webp)
            continue;
        static const char *const names[2] = {"clip.mp4", "clip.webp"};
        static const char *const msgs[2] = {MSG_MP4, MSG_WEBP};
        for (int f = CPDIT_VIDEO_MP4; f <= CPDIT_VIDEO_WEBP; f++) {
            if (pass == 0 && !(f == CPDIT_VIDEO_MP4 ? real_mp4 : real_webp))
                continue;
            char why[512];
            CHECK(cpdit_video_format_available((cpdit_video_format)f, why, sizeof why) == 0);
            CHECK_MSG(strcmp(why, msgs[f]) == 0, "got \"%s\"", why);
            char *p = tmp_path(dir, names[f]);
            cpdit_video_options o;
            cpdit_video_options_init(&o, (cpdit_video_format)f);
            uint8_t px[CLIP_W * CLIP_H * 3] = {0};
            cpdit_error err;
            cpdit_video_writer *w = (cpdit_video_writer *)&o; /* must be reset to NULL */
            cpdit_status st = cpdit_video_writer_open(&w, p, CLIP_W, CLIP_H, &o, NULL, 0, &err);
            CHECK(st == CPDIT_ERR_INPUT && w == NULL);
            CHECK_MSG(strcmp(err.what, msgs[f]) == 0, "got \"%s\"", err.what);
            CHECK(strcmp(err.where, p) == 0);
            CHECK(cpdit_video_write(p, px, 1, CLIP_H, CLIP_W, &o, NULL, 0, NULL, &err) ==
                  CPDIT_ERR_INPUT);
            CHECK(!exists(p));
            free(p);
        }
        char desc[1024];
        cpdit_video_describe(desc, sizeof desc);
        CHECK_STR_CONTAINS(desc, "mp4 unavailable (cpdit was built without libavcodec");
        CHECK_STR_CONTAINS(desc, "webp unavailable (cpdit was built without libwebp");
    }
    cpdit_video_pretend_unbuilt(0);
    int temps;
    CHECK(count_entries(dir, &temps) >= 0 && temps == 0);
}

static void test_mp4(const char *dir)
{
    char why[512];
    if (!cpdit_video_format_available(CPDIT_VIDEO_MP4, why, sizeof why)) {
        fprintf(stderr, "mp4 part skipped: %s\n", why);
        return;
    }
    uint8_t *clip = synth_clip(CLIP_T, CLIP_W, CLIP_H);
    char *p = tmp_path(dir, "clip.mp4");
    cpdit_video_options o;
    cpdit_video_options_init(&o, CPDIT_VIDEO_MP4);
    o.threads = 1;
    cpdit_video_result r;
    cpdit_error err;
    cpdit_status st = cpdit_video_write(p, clip, CLIP_T, CLIP_H, CLIP_W, &o, tags, N_TAGS, &r, &err);
    CHECK_MSG(st == CPDIT_OK, "%s", err.what);
    CHECK(r.frames == CLIP_T && r.width == CLIP_W && r.height == CLIP_H);
    CHECK(r.fps_num == 16 && r.fps_den == 1 && r.fps == 16.0);
    CHECK_NEAR(r.duration_s, CLIP_T / 16.0, 1e-12);
    CHECK(strcmp(r.codec, "h264") == 0 && strcmp(r.format, "mp4") == 0);
    CHECK(strcmp(r.file, p) == 0);
    struct stat sb;
    CHECK(stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && r.bytes == (long long)sb.st_size);
    unsigned char head[64] = {0};
    FILE *fp = fopen(p, "rb");
    size_t got = fp ? fread(head, 1, sizeof head, fp) : 0;
    if (fp)
        fclose(fp);
    CHECK(got == sizeof head && memcmp(head + 4, "ftyp", 4) == 0);
    unsigned ftyp = (unsigned)head[0] << 24 | head[1] << 16 | head[2] << 8 | head[3];
    CHECK_MSG(ftyp + 8 <= sizeof head && memcmp(head + ftyp + 4, "moov", 4) == 0,
              "moov is not right after ftyp (faststart)");
    int temps;
    CHECK(count_entries(dir, &temps) >= 0 && temps == 0);
    free(p);
    free(clip);
}

#ifdef CPDIT_HAVE_WEBPDEMUX
/* Decode path and compare with clip (n, h, w, 3): frames, canvas, timestamps at fps 16;
 * returns the mean absolute error in 8-bit levels (-1 on a decode failure). */
static double webp_check(const char *path, const uint8_t *clip, int n, int w, int h, int xmp)
{
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    if (!fp)
        return -1;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *bytes = malloc((size_t)len);
    CHECK(fread(bytes, 1, (size_t)len, fp) == (size_t)len);
    fclose(fp);
    WebPData data = {bytes, (size_t)len};
    WebPAnimDecoderOptions opt;
    WebPAnimDecoderOptionsInit(&opt);
    opt.color_mode = MODE_RGBA;
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, &opt);
    WebPAnimInfo info;
    CHECK(dec && WebPAnimDecoderGetInfo(dec, &info));
    CHECK((int)info.canvas_width == w && (int)info.canvas_height == h);
    CHECK((int)info.frame_count == n && info.loop_count == 0);
    double sum = 0;
    int i = 0;
    while (dec && WebPAnimDecoderHasMoreFrames(dec)) {
        uint8_t *rgba;
        int ts;
        if (!WebPAnimDecoderGetNext(dec, &rgba, &ts))
            break;
        /* end time of frame i, rounded to ms: (i + 1) * 1000 / 16 */
        CHECK_MSG(ts == (int)lround((i + 1) * 1000.0 / 16), "frame %d ends at %d ms", i, ts);
        const uint8_t *src = clip + (size_t)i * w * h * 3;
        for (int k = 0; k < w * h && i < n; k++)
            for (int c = 0; c < 3; c++)
                sum += abs((int)rgba[4 * k + c] - (int)src[3 * k + c]);
        i++;
    }
    CHECK(i == n);
    if (xmp) {
        WebPDemuxer *dm = WebPDemux(&data);
        WebPChunkIterator it;
        CHECK(dm && WebPDemuxGetChunk(dm, "XMP ", 1, &it));
        if (dm) {
            char *x = strndup((const char *)it.chunk.bytes, it.chunk.size);
            CHECK_STR_CONTAINS(x, "<cpdit:prompt>a red square, \xe4\xb8\x80\xe5\x8f\xaa\xe7\x8c\xab "
                                  "caf\xc3\xa9 &lt;&amp;&gt;</cpdit:prompt>");
            CHECK_STR_CONTAINS(x, "<cpdit:seed>42</cpdit:seed>");
            CHECK_STR_CONTAINS(x, "<cpdit:grid>dp 1 ring 2 ulysses 2</cpdit:grid>");
            free(x);
            WebPDemuxReleaseChunkIterator(&it);
            WebPDemuxDelete(dm);
        }
    }
    WebPAnimDecoderDelete(dec);
    free(bytes);
    return i == n ? sum / ((double)n * w * h * 3) : -1;
}
#endif

static void test_webp(const char *dir)
{
    char why[512];
    if (!cpdit_video_format_available(CPDIT_VIDEO_WEBP, why, sizeof why)) {
        fprintf(stderr, "webp part skipped: %s\n", why);
        return;
    }
    static const int sizes[2][3] = {{CLIP_T, CLIP_W, CLIP_H}, {5, 65, 33}};
    for (int s = 0; s < 2; s++) {
        int n = sizes[s][0], w = sizes[s][1], h = sizes[s][2];
        uint8_t *clip = synth_clip(n, w, h);
        for (int lossless = 1; lossless >= 0; lossless--) {
            char *p = tmp_path(dir, lossless ? "clip.webp" : "lossy.webp");
            cpdit_video_options o;
            cpdit_video_options_init(&o, CPDIT_VIDEO_WEBP);
            o.webp_lossless = lossless;
            o.webp_quality = lossless ? CPDIT_VIDEO_DEFAULT_WEBP_QUALITY : 90.0f;
            cpdit_video_result r;
            cpdit_error err;
            cpdit_status st = cpdit_video_write(p, clip, n, h, w, &o, tags, N_TAGS, &r, &err);
            CHECK_MSG(st == CPDIT_OK, "%s", err.what);
            CHECK(r.frames == n && strcmp(r.codec, lossless ? "webp-lossless" : "webp-lossy") == 0);
            struct stat sb;
            CHECK(stat(p, &sb) == 0 && r.bytes == (long long)sb.st_size);
#ifdef CPDIT_HAVE_WEBPDEMUX
            double mae = webp_check(p, clip, n, w, h, 1);
            fprintf(stderr, "webp %dx%d x%d %s: mean abs error %.4f levels, %lld bytes\n", w, h,
                    n, lossless ? "lossless" : "lossy q90", mae, r.bytes);
            if (lossless)
                CHECK_MSG(mae == 0.0, "lossless WebP differs from the input (%.4f)", mae);
            else
                CHECK_MSG(mae >= 0 && mae < WEBP_LOSSY_MAE_MAX, "lossy mae %.4f", mae);
#endif
            unlink(p);
            free(p);
        }
        free(clip);
    }
#ifndef CPDIT_HAVE_WEBPDEMUX
    fprintf(stderr, "webp decode checks skipped: no libwebpdemux (apt-get install libwebp-dev)\n");
#endif
    int temps;
    CHECK(count_entries(dir, &temps) >= 0 && temps == 0);
}

static void frames_check(const char *folder, const uint8_t *clip, int n, int w, int h)
{
    CHECK(count_entries(folder, NULL) == n);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "frame_%05d.png", i);
        char *p = tmp_path(folder, name);
        cpdit_png_image img;
        cpdit_error err;
        CHECK_MSG(cpdit_png_read_rgb8(p, &img, &err) == CPDIT_OK, "%s: %s", p, err.what);
        CHECK(img.width == w && img.height == h);
        CHECK_MSG(img.rgb && memcmp(img.rgb, clip + (size_t)i * w * h * 3, (size_t)w * h * 3) == 0,
                  "frame %d differs from the input", i);
        CHECK(cpdit_png_image_text(&img, "seed", NULL) &&
              strcmp(cpdit_png_image_text(&img, "seed", NULL), "42") == 0);
        CHECK(cpdit_png_image_text(&img, "prompt", NULL) &&
              strcmp(cpdit_png_image_text(&img, "prompt", NULL), tags[0].value) == 0);
        cpdit_png_image_free(&img);
        free(p);
    }
}

static void test_frames(const char *dir)
{
    char *folder = tmp_path(dir, "frames");
    cpdit_video_options o;
    cpdit_video_options_init(&o, CPDIT_VIDEO_PNG_FRAMES);
    cpdit_video_result r;
    cpdit_error err;
    uint8_t *clip = synth_clip(CLIP_T, CLIP_W, CLIP_H);
    CHECK(cpdit_video_write(folder, clip, CLIP_T, CLIP_H, CLIP_W, &o, tags, N_TAGS, &r, &err) ==
          CPDIT_OK);
    CHECK(r.frames == CLIP_T && strcmp(r.codec, "png") == 0 && r.bytes > 0);
    frames_check(folder, clip, CLIP_T, CLIP_W, CLIP_H);
    struct stat sb;
    CHECK(stat(folder, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0700) == 0700);
    /* a second, shorter clip of another size replaces the first whole */
    free(clip);
    clip = synth_clip(5, 48, 80);
    CHECK(cpdit_video_write(folder, clip, 5, 80, 48, &o, tags, N_TAGS, &r, &err) == CPDIT_OK);
    frames_check(folder, clip, 5, 48, 80);
    int temps;
    CHECK(count_entries(dir, &temps) >= 1 && temps == 0);
    /* a folder holding something else is not replaced */
    char *note = tmp_path(folder, "notes.txt");
    CHECK(atomic_write_buffer(note, "mine", 4, &err) == CPDIT_OK);
    expect_input_error("foreign folder", cpdit_video_write(folder, clip, 5, 80, 48, &o, NULL, 0,
                                                          &r, &err), &err, "notes.txt");
    CHECK(exists(note) && count_entries(folder, NULL) == 6);
    CHECK(count_entries(dir, &temps) >= 1 && temps == 0);
    /* cleanup of leftovers removes only temporary folders of frames */
    errno = 0;
    CHECK(cpdit_video_remove_temp_folder(folder) == -1 && errno == EINVAL);
    char *fake = tmp_path(dir, ".frames.tmp.AbC123"), *moved_note = tmp_path(fake, "notes.txt");
    CHECK(rename(folder, fake) == 0);
    errno = 0;
    CHECK(cpdit_video_remove_temp_folder(fake) == -1 && errno == ENOTEMPTY && exists(moved_note));
    CHECK(unlink(moved_note) == 0);
    CHECK(cpdit_video_remove_temp_folder(fake) == 0 && !exists(fake));
    free(moved_note);
    free(fake);
    free(note);
    free(clip);
    free(folder);
}

/* A child writes a long clip of format f; once it is writing, SIGKILL it: the final name must
 * not exist, a temporary name must. min_progress: bytes in the temporary file (mp4) or frame
 * files in the temporary folder (png-frames) to wait for. */
static void kill_case(const char *dir, cpdit_video_format f, int w, int h, long min_progress)
{
    char name[32];
    snprintf(name, sizeof name, "killed%s", cpdit_video_format_extension(f));
    char *final = tmp_path(dir, name);
    int fd[2];
    CHECK(pipe(fd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        alarm(CHILD_ALARM_S); /* never outlives a broken parent */
        cpdit_video_options o;
        cpdit_video_options_init(&o, f);
        o.threads = 1;
        cpdit_video_writer *vw;
        cpdit_error err;
        uint8_t *frame = malloc((size_t)w * h * 3);
        if (!frame || cpdit_video_writer_open(&vw, final, w, h, &o, tags, N_TAGS, &err))
            _exit(3);
        for (int i = 0; i < CPDIT_VIDEO_MAX_FRAMES; i++) {
            synth_frame(frame, i, w, h);
            if (cpdit_video_writer_add(vw, frame, 1, &err))
                _exit(4);
            if (i == 0 && write(fd[1], "x", 1) != 1)
                _exit(5);
        }
        _exit(cpdit_video_writer_finish(vw, NULL, &err) ? 6 : 0);
    }
    close(fd[1]);
    char c;
    CHECK_MSG(read(fd[0], &c, 1) == 1, "%s: the writer did not start", name);
    close(fd[0]);
    /* wait for the temporary file (folder) to have grown */
    char *tmp = NULL;
    time_t t0 = time(NULL);
    for (int done = 0; !done && time(NULL) - t0 < KILL_WAIT_S;) {
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL)
            if (atomic_file_is_temp_name(e->d_name) && strncmp(e->d_name + 1, name,
                                                               strlen(name)) == 0) {
                free(tmp);
                tmp = tmp_path(dir, e->d_name);
            }
        if (d)
            closedir(d);
        struct stat sb;
        if (tmp && stat(tmp, &sb) == 0)
            done = S_ISDIR(sb.st_mode) ? count_entries(tmp, NULL) >= min_progress
                                       : sb.st_size >= min_progress;
        if (!done)
            usleep(POLL_US);
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "%s: the writer ended before the kill (status 0x%x)", name, status);
    CHECK_MSG(!exists(final), "%s: a file is under the final name after SIGKILL", name);
    CHECK_MSG(tmp && exists(tmp), "%s: no temporary file seen", name);
    fprintf(stderr, "killed %s mid-write: only %s left\n", name, tmp ? strrchr(tmp, '/') + 1 : "-");
    if (tmp) { /* what a resumed job's cleanup does */
        struct stat sb;
        int is_dir = stat(tmp, &sb) == 0 && S_ISDIR(sb.st_mode);
        CHECK(is_dir ? cpdit_video_remove_temp_folder(tmp) == 0 : unlink(tmp) == 0);
        CHECK(!exists(tmp));
    }
    free(tmp);
    free(final);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    char *dir = tmpdir_make("video");
    CHECK(dir != NULL);
    if (!dir)
        TEST_MAIN_END();
    test_names_and_options();
    check_fps(dir, 16, 16, 1);
    check_fps(dir, 24000.0 / 1001, 24000, 1001);
    check_fps(dir, 23.976, 24000, 1001);
    check_fps(dir, 29.97, 30000, 1001);
    check_fps(dir, 12.5, 25, 2);
    check_fps(dir, 23.5, 47, 2);
    check_fps(dir, 0, 16, 1);
    tmpdir_remove(dir);
    mkdir(dir, 0700);
    test_refusals(dir);
    test_unavailable(dir);
    test_mp4(dir);
    test_webp(dir);
    test_frames(dir);
    if (cpdit_video_format_available(CPDIT_VIDEO_MP4, NULL, 0))
        kill_case(dir, CPDIT_VIDEO_MP4, 320, 240, 64 * 1024);
    if (cpdit_video_format_available(CPDIT_VIDEO_WEBP, NULL, 0))
        kill_case(dir, CPDIT_VIDEO_WEBP, 320, 240, 0);
    kill_case(dir, CPDIT_VIDEO_PNG_FRAMES, 320, 240, 3);
    tmpdir_remove(dir);
    free(dir);
    TEST_MAIN_END();
}
