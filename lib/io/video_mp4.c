/* video_mp4.c — MP4 (H.264 through libx264, yuv420p) with libavformat/libavcodec/libswscale
 * (video_writer.h). Built only when configure finds FFmpeg's libraries.
 *
 * The temporary file of atomic_file_begin is opened a second time by libavformat (by name,
 * "file:" protocol), which needs to seek (the mdat size) and to reread it (faststart moves
 * the moov index in front); atomic_file_commit then fsyncs the same inode and renames it. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>

#include "lib/io/atomic_file.h"
#include "lib/io/video_writer_internal.h"

#define ENCODER_NAME "libx264"
#define CODEC_NAME "h264"
/* Flags of the RGB -> yuv420p conversion: bicubic chroma downsampling, accurate rounding. */
#define SWS_CONVERT_FLAGS (SWS_BICUBIC | SWS_ACCURATE_RND)
/* swscale's fixed-point unit for brightness 0, contrast 1, saturation 1. */
#define SWS_UNIT (1 << 16)
#define OPTION_TEXT_MAX 32

typedef struct mp4_state {
    atomic_file af; /* owns the temporary file and its final name */
    AVFormatContext *oc;
    AVCodecContext *enc;
    AVStream *st;
    struct SwsContext *sws;
    AVFrame *frame;
    AVPacket *pkt;
    uint8_t *rgb_padded; /* (H, W, 3) input copy with SIMD padding after it: swscale reads
                          * a few bytes past the last pixel */
    int header_written;
} mp4_state;

static const char *mp4_codec(const cpdit_video_writer *w)
{
    (void)w;
    return CODEC_NAME;
}

static cpdit_status av_fail(cpdit_error *err, const char *path, const char *action, int rc)
{
    char msg[AV_ERROR_MAX_STRING_SIZE];
    av_strerror(rc, msg, sizeof msg);
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "mp4: %s: %s", action, msg);
}

/* libav* print warnings and x264's statistics at the default level; keep errors only, unless
 * the program chose a level itself. */
static void quiet_logs(void)
{
    if (av_log_get_level() == AV_LOG_INFO)
        av_log_set_level(AV_LOG_ERROR);
}

static int mp4_usable(char *why, size_t size)
{
    if (avcodec_find_encoder_by_name(ENCODER_NAME))
        return 1;
    if (why && size)
        snprintf(why, size,
                 "mp4 output is unavailable: the libavcodec found at run time has no %s encoder "
                 "(Debian's libavcodec has it; install libavcodec59 from Debian)",
                 ENCODER_NAME);
    return 0;
}

static void mp4_describe(char *buf, size_t size)
{
    unsigned f = avformat_version(), c = avcodec_version();
    snprintf(buf, size, "H.264 via %s, libavformat %u.%u.%u, libavcodec %u.%u.%u", ENCODER_NAME,
             AV_VERSION_MAJOR(f), AV_VERSION_MINOR(f), AV_VERSION_MICRO(f), AV_VERSION_MAJOR(c),
             AV_VERSION_MINOR(c), AV_VERSION_MICRO(c));
}

static void mp4_free(mp4_state *s)
{
    if (!s)
        return;
    if (s->oc) {
        if (s->oc->pb)
            avio_closep(&s->oc->pb);
        avformat_free_context(s->oc);
    }
    avcodec_free_context(&s->enc);
    sws_freeContext(s->sws);
    av_frame_free(&s->frame);
    av_packet_free(&s->pkt);
    av_freep(&s->rgb_padded);
    atomic_file_abort(&s->af);
    free(s);
}

/* The encoder: libx264, yuv420p, BT.709 limited range, time base 1/fps. */
static cpdit_status open_encoder(cpdit_video_writer *w, mp4_state *s, cpdit_error *err)
{
    const AVCodec *codec = avcodec_find_encoder_by_name(ENCODER_NAME);
    if (!codec)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, w->path, "mp4: no %s encoder", ENCODER_NAME);
    s->enc = avcodec_alloc_context3(codec);
    if (!s->enc)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "mp4: out of memory");
    AVCodecContext *c = s->enc;
    c->width = w->width;
    c->height = w->height;
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->time_base = (AVRational){w->fps_den, w->fps_num};
    c->framerate = (AVRational){w->fps_num, w->fps_den};
    c->sample_aspect_ratio = (AVRational){1, 1};
    c->color_range = AVCOL_RANGE_MPEG;
    c->colorspace = AVCOL_SPC_BT709;
    c->color_primaries = AVCOL_PRI_BT709;
    c->color_trc = AVCOL_TRC_BT709;
    c->thread_count = w->opt.threads;
    if (s->oc->oformat->flags & AVFMT_GLOBALHEADER)
        c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    AVDictionary *o = NULL;
    char crf[OPTION_TEXT_MAX];
    snprintf(crf, sizeof crf, "%d", w->opt.crf);
    av_dict_set(&o, "crf", crf, 0);
    av_dict_set(&o, "preset", w->opt.preset, 0);
    int rc = avcodec_open2(c, codec, &o);
    av_dict_free(&o);
    if (rc < 0) {
        if (rc == AVERROR(EINVAL) || rc == AVERROR_EXTERNAL)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, w->path,
                                   "mp4: %s refused the settings (preset \"%s\", crf %d, %dx%d); "
                                   "presets: ultrafast superfast veryfast faster fast medium slow "
                                   "slower veryslow",
                                   ENCODER_NAME, w->opt.preset, w->opt.crf, w->width, w->height);
        return av_fail(err, w->path, "cannot open the H.264 encoder", rc);
    }
    return CPDIT_OK;
}

/* The stream, its metadata, the RGB -> YUV converter and the frame buffer. */
static cpdit_status open_stream(cpdit_video_writer *w, mp4_state *s, cpdit_error *err)
{
    s->st = avformat_new_stream(s->oc, NULL);
    s->frame = av_frame_alloc();
    s->pkt = av_packet_alloc();
    s->rgb_padded = av_mallocz((size_t)w->width * w->height * 3 + AV_INPUT_BUFFER_PADDING_SIZE);
    if (!s->st || !s->frame || !s->pkt || !s->rgb_padded)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "mp4: out of memory");
    int rc = avcodec_parameters_from_context(s->st->codecpar, s->enc);
    if (rc < 0)
        return av_fail(err, w->path, "cannot set the stream parameters", rc);
    s->st->time_base = s->enc->time_base;
    s->st->avg_frame_rate = s->enc->framerate;
    s->st->r_frame_rate = s->enc->framerate;
    for (int i = 0; i < w->n_tags; i++)
        if (av_dict_set(&s->oc->metadata, w->tags[i].key, w->tags[i].value, 0) < 0)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "mp4: out of memory");

    s->frame->format = AV_PIX_FMT_YUV420P;
    s->frame->width = w->width;
    s->frame->height = w->height;
    s->frame->color_range = AVCOL_RANGE_MPEG;
    s->frame->colorspace = AVCOL_SPC_BT709;
    if ((rc = av_frame_get_buffer(s->frame, 0)) < 0)
        return av_fail(err, w->path, "cannot allocate a frame", rc);
    s->sws = sws_getContext(w->width, w->height, AV_PIX_FMT_RGB24, w->width, w->height,
                            AV_PIX_FMT_YUV420P, SWS_CONVERT_FLAGS, NULL, NULL, NULL);
    if (!s->sws)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path,
                               "mp4: cannot set up the RGB to yuv420p conversion");
    /* full-range RGB in, BT.709 limited-range YUV out (as tagged on the stream) */
    const int *bt709 = sws_getCoefficients(SWS_CS_ITU709);
    sws_setColorspaceDetails(s->sws, bt709, 1, bt709, 0, 0, SWS_UNIT, SWS_UNIT);
    return CPDIT_OK;
}

static cpdit_status mp4_open(cpdit_video_writer *w, cpdit_error *err)
{
    quiet_logs();
    mp4_state *s = calloc(1, sizeof *s);
    if (!s)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "out of memory");
    cpdit_status st = atomic_file_begin(&s->af, w->path, err);
    if (st) {
        free(s);
        return st;
    }
    char *url = NULL;
    if (asprintf(&url, "file:%s", s->af.tmp_path) < 0) {
        mp4_free(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "out of memory");
    }
    int rc = avformat_alloc_output_context2(&s->oc, NULL, "mp4", url);
    if (rc < 0 || !s->oc) {
        free(url);
        mp4_free(s);
        return av_fail(err, w->path, "cannot set up the mp4 muxer", rc < 0 ? rc : AVERROR(ENOMEM));
    }
    st = open_encoder(w, s, err);
    if (!st)
        st = open_stream(w, s, err);
    if (!st && (rc = avio_open(&s->oc->pb, url, AVIO_FLAG_WRITE)) < 0)
        st = av_fail(err, w->path, "cannot open the temporary file", rc);
    free(url);
    if (!st) {
        AVDictionary *o = NULL;
        /* every key as given (mdta keys), and the index in front of the data */
        av_dict_set(&o, "movflags", "+use_metadata_tags+faststart", 0);
        rc = avformat_write_header(s->oc, &o);
        av_dict_free(&o);
        if (rc < 0)
            st = av_fail(err, w->path, "cannot write the mp4 header", rc);
        else
            s->header_written = 1;
    }
    if (st) {
        mp4_free(s);
        return st;
    }
    w->state = s;
    return CPDIT_OK;
}

/* Send frame (NULL = flush) to the encoder and write every packet it gives back. */
static cpdit_status encode(cpdit_video_writer *w, mp4_state *s, AVFrame *frame, cpdit_error *err)
{
    int rc = avcodec_send_frame(s->enc, frame);
    if (rc < 0)
        return av_fail(err, w->path, "cannot encode a frame", rc);
    for (;;) {
        rc = avcodec_receive_packet(s->enc, s->pkt);
        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF)
            return CPDIT_OK;
        if (rc < 0)
            return av_fail(err, w->path, "cannot encode a frame", rc);
        av_packet_rescale_ts(s->pkt, s->enc->time_base, s->st->time_base);
        s->pkt->stream_index = s->st->index;
        rc = av_interleaved_write_frame(s->oc, s->pkt); /* takes the packet's data */
        if (rc < 0)
            return av_fail(err, w->path, "cannot write to the temporary file", rc);
    }
}

/* rgb: (H, W, 3) uint8, frame number w->frames. */
static cpdit_status mp4_add(cpdit_video_writer *w, const uint8_t *rgb, cpdit_error *err)
{
    mp4_state *s = w->state;
    int rc = av_frame_make_writable(s->frame);
    if (rc < 0)
        return av_fail(err, w->path, "cannot allocate a frame", rc);
    memcpy(s->rgb_padded, rgb, (size_t)w->width * w->height * 3);
    const uint8_t *src[1] = {s->rgb_padded};
    const int stride[1] = {3 * w->width};
    sws_scale(s->sws, src, stride, 0, w->height, s->frame->data, s->frame->linesize);
    s->frame->pts = w->frames;
    return encode(w, s, s->frame, err);
}

static cpdit_status mp4_finish(cpdit_video_writer *w, long long *bytes, cpdit_error *err)
{
    mp4_state *s = w->state;
    w->state = NULL;
    cpdit_status st = encode(w, s, NULL, err);
    int rc;
    if (!st && (rc = av_write_trailer(s->oc)) < 0)
        st = av_fail(err, w->path, "cannot finish the mp4 file", rc);
    if (!st && (rc = avio_closep(&s->oc->pb)) < 0)
        st = av_fail(err, w->path, "cannot write the temporary file", rc);
    if (!st) /* fsync + rename onto the final name */
        st = atomic_file_commit(&s->af, err);
    struct stat sb;
    *bytes = !st && stat(w->path, &sb) == 0 ? (long long)sb.st_size : 0;
    mp4_free(s);
    return st;
}

static void mp4_abort(cpdit_video_writer *w)
{
    mp4_free(w->state);
    w->state = NULL;
}

const video_backend cpdit_video_mp4_backend = {
    .codec = mp4_codec,
    .open = mp4_open,
    .add = mp4_add,
    .finish = mp4_finish,
    .abort = mp4_abort,
    .describe = mp4_describe,
    .usable = mp4_usable,
};
