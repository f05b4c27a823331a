/* video_reader.c — chosen frames of a png-frames folder, an MP4 or an animated WebP back as
 * RGB (video_reader.h). Each format's decoder hands its frames in order to keep_frame(),
 * which copies the wanted ones. */
#include "config.h"

#include "lib/io/video_reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef CPDIT_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#endif
#ifdef CPDIT_HAVE_WEBPDEMUX
#include <webp/demux.h>
#endif

#define FRAME_NAME_FORMAT "%s/frame_%05d.png" /* as video_frames.c writes them */
#define MAX_FRAMES 100000                     /* frame_NNNNN: five digits */
#define PATH_LEN 4352
#define SWS_UNIT (1 << 16) /* swscale's fixed-point 1.0 (brightness 0, contrast, saturation) */
#define ROW_ALIGN 64       /* bytes: swscale's SIMD writes whole vectors per row */

typedef struct keep_state {
    const int *which;
    int n;
    cpdit_png_image *out;
    int frames; /* frames seen so far */
} keep_state;

static int wanted(const keep_state *ks, int k)
{
    for (int i = 0; i < ks->n; i++)
        if (ks->which[i] == k)
            return 1;
    return 0;
}

/* Frame ks->frames of the clip, rgb = (h, w, px) with px = 3 (RGB) or 4 (RGBA, alpha
 * dropped) bytes per pixel and rows `stride` bytes apart: copied into every out[i] that asks
 * for it. */
static cpdit_status keep_frame(keep_state *ks, const uint8_t *rgb, size_t stride, int px, int w,
                               int h, const char *path, cpdit_error *err)
{
    const int k = ks->frames++;
    for (int i = 0; i < ks->n; i++) {
        if (ks->which[i] != k)
            continue;
        cpdit_png_image *o = &ks->out[i];
        o->rgb = malloc((size_t)w * h * 3);
        if (!o->rgb)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory (frame %d)", k);
        o->width = w;
        o->height = h;
        for (int y = 0; y < h; y++) {
            const uint8_t *src = rgb + (size_t)y * stride;
            uint8_t *dst = o->rgb + (size_t)y * w * 3;
            if (px == 3)
                memcpy(dst, src, (size_t)w * 3);
            else
                for (int x = 0; x < w; x++)
                    memcpy(dst + 3 * x, src + (size_t)px * x, 3);
        }
    }
    return CPDIT_OK;
}

static cpdit_status read_png_frames(const char *dir, keep_state *ks, cpdit_error *err)
{
    char path[PATH_LEN];
    struct stat sb;
    for (int k = 0; k < MAX_FRAMES; k++) {
        snprintf(path, sizeof path, FRAME_NAME_FORMAT, dir, k);
        if (stat(path, &sb) != 0)
            break;
        if (!wanted(ks, k)) {
            ks->frames++;
            continue;
        }
        cpdit_png_image im = {0};
        cpdit_status st = cpdit_png_read_rgb8(path, &im, err);
        if (!st)
            st = keep_frame(ks, im.rgb, (size_t)im.width * 3, 3, im.width, im.height, path, err);
        cpdit_png_image_free(&im);
        if (st)
            return st;
    }
    if (ks->frames == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir, "no frame_00000.png: not a png-frames "
                               "clip");
    return CPDIT_OK;
}

#ifdef CPDIT_HAVE_FFMPEG
static cpdit_status av_fail(cpdit_error *err, const char *path, const char *action, int rc)
{
    char msg[AV_ERROR_MAX_STRING_SIZE];
    av_strerror(rc, msg, sizeof msg);
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "mp4: %s: %s", action, msg);
}

typedef struct mp4_reader {
    AVFormatContext *ic;
    AVCodecContext *dec;
    AVPacket *pkt;
    AVFrame *frame;
    struct SwsContext *sws;
    uint8_t *rgb; /* (h, stride) converted frame */
    size_t stride;
    int stream;
} mp4_reader;

/* frame (any YUV/RGB format the decoder gives) -> full-range RGB24 in r->rgb. */
static cpdit_status mp4_convert(mp4_reader *r, const AVFrame *f, const char *path,
                                cpdit_error *err)
{
    const int w = f->width, h = f->height;
    if (!r->rgb) {
        r->stride = ((size_t)w * 3 + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
        r->rgb = malloc(r->stride * h + ROW_ALIGN);
        r->sws = sws_getContext(w, h, f->format, w, h, AV_PIX_FMT_RGB24,
                                SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL,
                                NULL);
        if (!r->rgb || !r->sws)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "mp4: cannot convert %s "
                                   "frames to RGB", av_get_pix_fmt_name(f->format));
        /* the matrix and range the stream is tagged with (cpdit: BT.709, limited) */
        const int space = f->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_ITU709 : f->colorspace;
        const int *coef = sws_getCoefficients(space);
        sws_setColorspaceDetails(r->sws, coef, f->color_range == AVCOL_RANGE_JPEG, coef, 1, 0,
                                 SWS_UNIT, SWS_UNIT);
    }
    uint8_t *dst[4] = {r->rgb, NULL, NULL, NULL};
    int dst_stride[4] = {(int)r->stride, 0, 0, 0};
    sws_scale(r->sws, (const uint8_t *const *)f->data, f->linesize, 0, h, dst, dst_stride);
    return CPDIT_OK;
}

/* Every frame the decoder has ready. */
static cpdit_status mp4_drain(mp4_reader *r, keep_state *ks, const char *path, cpdit_error *err)
{
    for (;;) {
        int rc = avcodec_receive_frame(r->dec, r->frame);
        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF)
            return CPDIT_OK;
        if (rc < 0)
            return av_fail(err, path, "decoding", rc);
        cpdit_status st = CPDIT_OK;
        if (wanted(ks, ks->frames)) {
            st = mp4_convert(r, r->frame, path, err);
            if (!st)
                st = keep_frame(ks, r->rgb, r->stride, 3, r->frame->width, r->frame->height, path,
                                err);
        } else {
            ks->frames++;
        }
        av_frame_unref(r->frame);
        if (st)
            return st;
    }
}

static cpdit_status read_mp4(const char *path, keep_state *ks, cpdit_error *err)
{
    mp4_reader r = {0};
    const AVCodec *codec = NULL;
    cpdit_status st = CPDIT_OK;
    av_log_set_level(AV_LOG_QUIET); /* its errors come back in the message */
    int rc = avformat_open_input(&r.ic, path, NULL, NULL);
    if (rc < 0)
        return av_fail(err, path, "cannot open it", rc);
    if ((rc = avformat_find_stream_info(r.ic, NULL)) < 0)
        st = av_fail(err, path, "reading its streams", rc);
    else if ((r.stream = av_find_best_stream(r.ic, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0)) < 0)
        st = av_fail(err, path, "no video stream", r.stream);
    if (!st && !(r.dec = avcodec_alloc_context3(codec)))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    if (!st && (rc = avcodec_parameters_to_context(r.dec, r.ic->streams[r.stream]->codecpar)) < 0)
        st = av_fail(err, path, "decoder parameters", rc);
    if (!st && (rc = avcodec_open2(r.dec, codec, NULL)) < 0)
        st = av_fail(err, path, "opening the decoder", rc);
    if (!st && (!(r.pkt = av_packet_alloc()) || !(r.frame = av_frame_alloc())))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    while (!st && (rc = av_read_frame(r.ic, r.pkt)) >= 0) {
        if (r.pkt->stream_index == r.stream && (rc = avcodec_send_packet(r.dec, r.pkt)) < 0)
            st = av_fail(err, path, "decoding", rc);
        av_packet_unref(r.pkt);
        if (!st)
            st = mp4_drain(&r, ks, path, err);
    }
    if (!st && rc != AVERROR_EOF)
        st = av_fail(err, path, "reading", rc);
    if (!st && (rc = avcodec_send_packet(r.dec, NULL)) < 0) /* flush the delayed frames */
        st = av_fail(err, path, "flushing the decoder", rc);
    if (!st)
        st = mp4_drain(&r, ks, path, err);
    sws_freeContext(r.sws);
    free(r.rgb);
    av_frame_free(&r.frame);
    av_packet_free(&r.pkt);
    avcodec_free_context(&r.dec);
    avformat_close_input(&r.ic);
    return st;
}
#endif

#ifdef CPDIT_HAVE_WEBPDEMUX
static cpdit_status read_webp(const char *path, keep_state *ks, cpdit_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot open it: %s",
                               strerror(errno));
    uint8_t *bytes = NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (bytes = malloc((size_t)len)) && fread(bytes, 1, (size_t)len, f) != (size_t)len) {
        free(bytes);
        bytes = NULL;
    }
    fclose(f);
    if (!bytes)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot read it");
    WebPData data = {bytes, (size_t)len};
    WebPAnimDecoderOptions opt;
    WebPAnimDecoderOptionsInit(&opt);
    opt.color_mode = MODE_RGBA; /* the animation decoder's modes all have alpha */
    opt.use_threads = 0;
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, &opt);
    WebPAnimInfo info;
    cpdit_status st = CPDIT_OK;
    if (!dec || !WebPAnimDecoderGetInfo(dec, &info))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "webp: not an animated WebP "
                             "libwebpdemux can read");
    while (!st && WebPAnimDecoderHasMoreFrames(dec)) {
        uint8_t *rgb;
        int ms;
        if (!WebPAnimDecoderGetNext(dec, &rgb, &ms))
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "webp: frame %d is corrupt",
                                 ks->frames);
        else
            st = keep_frame(ks, rgb, (size_t)info.canvas_width * 4, 4, (int)info.canvas_width,
                            (int)info.canvas_height, path, err);
    }
    WebPAnimDecoderDelete(dec);
    free(bytes);
    return st;
}
#endif

static int ends_with(const char *s, const char *tail)
{
    const size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

cpdit_status cpdit_video_read_frames(const char *path, const int *which, int n,
                                     cpdit_png_image *out, int *frames, cpdit_error *err)
{
    memset(out, 0, (size_t)n * sizeof *out);
    keep_state ks = {which, n, out, 0};
    struct stat sb;
    cpdit_status st;
    if (stat(path, &sb) != 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "cannot read it: %s",
                               strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        st = read_png_frames(path, &ks, err);
    } else if (ends_with(path, ".mp4")) {
#ifdef CPDIT_HAVE_FFMPEG
        st = read_mp4(path, &ks, err);
#else
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "cannot read mp4: cpdit was built "
                             "without libavcodec (install libavcodec-dev libavformat-dev "
                             "libswscale-dev and reconfigure)");
#endif
    } else if (ends_with(path, ".webp")) {
#ifdef CPDIT_HAVE_WEBPDEMUX
        st = read_webp(path, &ks, err);
#else
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "cannot read webp: cpdit was built "
                             "without libwebpdemux (install libwebp-dev and reconfigure)");
#endif
    } else {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "not a clip: a png-frames folder, "
                             ".mp4 or .webp file");
    }
    const int decoded = st == CPDIT_OK; /* the whole clip was read: its count is known */
    for (int i = 0; !st && i < n; i++)
        if (!out[i].rgb)
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "frame %d asked for, the clip has "
                                 "%d frames (0..%d)", which[i], ks.frames, ks.frames - 1);
    if (frames && decoded)
        *frames = ks.frames;
    if (st) {
        for (int i = 0; i < n; i++)
            cpdit_png_image_free(&out[i]);
        return st;
    }
    return CPDIT_OK;
}
