/* video_writer.c — checks, defaults and dispatch to the format writers (video_writer.h). */
#include "config.h"

#include "lib/io/video_writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/core/utf8.h"
#include "lib/io/regular_file.h"
#include "lib/io/video_writer_internal.h"

/* NTSC-style rates k*1000/1001 are kept exact; other fractions are stored in 1/1000 steps. */
#define NTSC_NUM_SCALE 1000
#define NTSC_DEN 1001
#define FPS_DEN_FINE 1000
#define FPS_EXACT_TOL 1e-9
/* 23.976, 29.97, 59.94 as people write them are NTSC rates */
#define FPS_NTSC_TOL 5e-4
/* Metadata keys follow the PNG keyword rules (1-79 bytes). */
#define TAG_KEY_MAX 79
#define WEBP_QUALITY_MAX 100.0f

static unsigned pretend_unbuilt_mask;

void cpdit_video_pretend_unbuilt(unsigned format_mask)
{
    pretend_unbuilt_mask = format_mask;
}

static const char *const format_names[CPDIT_VIDEO_FORMAT_COUNT] = {"mp4", "webp", "png-frames"};

const char *cpdit_video_format_name(cpdit_video_format f)
{
    return (unsigned)f < CPDIT_VIDEO_FORMAT_COUNT ? format_names[f] : "unknown";
}

const char *cpdit_video_format_extension(cpdit_video_format f)
{
    switch (f) {
    case CPDIT_VIDEO_MP4:
        return ".mp4";
    case CPDIT_VIDEO_WEBP:
        return ".webp";
    default:
        return "";
    }
}

cpdit_status cpdit_video_format_parse(const char *name, cpdit_video_format *f, const char *where,
                                      cpdit_error *err)
{
    for (int i = 0; i < CPDIT_VIDEO_FORMAT_COUNT; i++)
        if (name && strcmp(name, format_names[i]) == 0) {
            *f = (cpdit_video_format)i;
            return CPDIT_OK;
        }
    return cpdit_error_set(err, CPDIT_ERR_INPUT, where ? where : "",
                           "unknown video format \"%s\" (expected mp4, webp or png-frames)",
                           name ? name : "(null)");
}

void cpdit_video_options_init(cpdit_video_options *opt, cpdit_video_format f)
{
    memset(opt, 0, sizeof *opt);
    opt->format = f;
    opt->fps = CPDIT_VIDEO_DEFAULT_FPS;
    opt->crf = CPDIT_VIDEO_DEFAULT_CRF;
    opt->preset = NULL;
    opt->threads = 0;
    opt->webp_lossless = 0;
    opt->webp_quality = CPDIT_VIDEO_DEFAULT_WEBP_QUALITY;
    opt->webp_loops = 0;
}

/* The backend of f in this build, or NULL with why. */
static const video_backend *backend_of(cpdit_video_format f, char *why, size_t why_size)
{
    const video_backend *b = NULL;
    const char *missing = NULL;
    switch (f) {
    case CPDIT_VIDEO_MP4:
#ifdef CPDIT_HAVE_FFMPEG
        b = &cpdit_video_mp4_backend;
#endif
        missing = "libavcodec (install libavcodec-dev libavformat-dev libswscale-dev and "
                  "reconfigure)";
        break;
    case CPDIT_VIDEO_WEBP:
#ifdef CPDIT_HAVE_WEBP
        b = &cpdit_video_webp_backend;
#endif
        missing = "libwebp (install libwebp-dev and reconfigure)";
        break;
    case CPDIT_VIDEO_PNG_FRAMES:
        b = &cpdit_video_frames_backend;
        break;
    default:
        if (why && why_size)
            snprintf(why, why_size, "unknown video format %d", (int)f);
        return NULL;
    }
    if (pretend_unbuilt_mask & (1u << f))
        b = NULL;
    if (!b && why && why_size)
        snprintf(why, why_size, "%s output is unavailable: cpdit was built without %s",
                 cpdit_video_format_name(f), missing);
    return b;
}

int cpdit_video_format_available(cpdit_video_format f, char *why, size_t why_size)
{
    if (why && why_size)
        why[0] = '\0';
    const video_backend *b = backend_of(f, why, why_size);
    if (!b)
        return 0;
    return b->usable ? b->usable(why, why_size) : 1;
}

void cpdit_video_describe(char *buf, size_t size)
{
    size_t used = 0;
    if (size == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < CPDIT_VIDEO_FORMAT_COUNT && used + 1 < size; i++) {
        char why[512], lib[256];
        const video_backend *b = backend_of((cpdit_video_format)i, NULL, 0);
        int ok = cpdit_video_format_available((cpdit_video_format)i, why, sizeof why);
        lib[0] = '\0';
        if (ok && b && b->describe)
            b->describe(lib, sizeof lib);
        int n = snprintf(buf + used, size - used, "%s%s", i ? "; " : "",
                         cpdit_video_format_name((cpdit_video_format)i));
        if (n > 0)
            used += (size_t)n;
        if (used + 1 >= size)
            break;
        if (ok)
            n = snprintf(buf + used, size - used, "%s%s%s", lib[0] ? " (" : "", lib,
                         lib[0] ? ")" : "");
        else /* the "why" already starts with the format name */
            n = snprintf(buf + used, size - used, " unavailable (%s)",
                         strstr(why, ": ") ? strstr(why, ": ") + 2 : why);
        if (n > 0)
            used += (size_t)n;
    }
    if (used >= size)
        buf[size - 1] = '\0';
}

char *cpdit_video_folder_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* fps (frames per second) as num/den: integers exactly, k*1000/1001 exactly, else 1/1000. */
static void fps_fraction(double fps, int *num, int *den)
{
    double r = floor(fps + 0.5);
    if (fabs(fps - r) < FPS_EXACT_TOL) {
        *num = (int)r;
        *den = 1;
        return;
    }
    double k = floor(fps * NTSC_DEN / NTSC_NUM_SCALE + 0.5);
    if (fabs(fps - k * NTSC_NUM_SCALE / NTSC_DEN) < FPS_NTSC_TOL) {
        *num = (int)k * NTSC_NUM_SCALE;
        *den = NTSC_DEN;
        return;
    }
    int n = (int)floor(fps * FPS_DEN_FINE + 0.5), d = FPS_DEN_FINE;
    int a = n, b = d; /* reduce by the greatest common divisor */
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    if (a > 1) {
        n /= a;
        d /= a;
    }
    *num = n;
    *den = d;
}

static cpdit_status check_tag(const cpdit_video_tag *t, const char *where, cpdit_error *err)
{
    if (!t->key || !t->key[0])
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "video metadata key is empty");
    size_t n = strlen(t->key);
    if (n > TAG_KEY_MAX)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "video metadata key \"%.20s...\" is %zu bytes long; at most %d",
                               t->key, n, TAG_KEY_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t->key[i];
        if (c < ' ' || c > '~' || (c == ' ' && (i == 0 || i == n - 1 || t->key[i + 1] == ' ')))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "video metadata key \"%s\": byte %zu is not allowed (printable "
                                   "ASCII, no leading, trailing or doubled spaces)",
                                   t->key, i);
    }
    if (!t->value || !cpdit_utf8_valid(t->value))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "video metadata key \"%s\": value is %s", t->key,
                               t->value ? "not valid UTF-8" : "missing");
    return CPDIT_OK;
}

/* Check opt and the size for w's format; fill w->opt with defaults applied. */
static cpdit_status check_options(cpdit_video_writer *w, const cpdit_video_options *opt,
                                  cpdit_error *err)
{
    const char *p = w->path;
    cpdit_video_options o;
    if (opt)
        o = *opt;
    else
        cpdit_video_options_init(&o, CPDIT_VIDEO_MP4);
    const char *fmt = cpdit_video_format_name(o.format);
    if (w->width < 1 || w->height < 1 || w->width > CPDIT_VIDEO_MAX_SIDE ||
        w->height > CPDIT_VIDEO_MAX_SIDE)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, p,
                               "%s: frame size %dx%d is out of range (1..%d per side)", fmt,
                               w->width, w->height, CPDIT_VIDEO_MAX_SIDE);
    if (o.format == CPDIT_VIDEO_MP4 && (w->width % 2 || w->height % 2))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, p,
                               "mp4 (H.264, yuv420p) needs an even width and height; got %dx%d "
                               "(Wan sizes are multiples of 16; webp and png-frames take any size)",
                               w->width, w->height);
    if (o.fps == 0)
        o.fps = CPDIT_VIDEO_DEFAULT_FPS;
    if (!(o.fps >= CPDIT_VIDEO_MIN_FPS && o.fps <= CPDIT_VIDEO_MAX_FPS)) /* NaN fails too */
        return cpdit_error_set(err, CPDIT_ERR_INPUT, p, "%s: fps %g is out of range %g..%g",
                               fmt, o.fps, CPDIT_VIDEO_MIN_FPS, CPDIT_VIDEO_MAX_FPS);
    if (o.crf < 0)
        o.crf = CPDIT_VIDEO_DEFAULT_CRF;
    if (o.crf > CPDIT_VIDEO_MAX_CRF)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, p, "mp4: crf %d is out of range 0..%d",
                               o.crf, CPDIT_VIDEO_MAX_CRF);
    if (o.threads < 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, p, "mp4: threads %d is negative", o.threads);
    if (o.webp_quality < 0)
        o.webp_quality = CPDIT_VIDEO_DEFAULT_WEBP_QUALITY;
    if (!(o.webp_quality <= WEBP_QUALITY_MAX))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, p, "webp: quality %g is out of range 0..100",
                               (double)o.webp_quality);
    if (o.webp_loops < 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, p, "webp: loops %d is negative",
                               o.webp_loops);
    w->preset = strdup(o.preset ? o.preset : CPDIT_VIDEO_DEFAULT_PRESET);
    if (!w->preset)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, p, "out of memory");
    o.preset = w->preset;
    w->opt = o;
    fps_fraction(o.fps, &w->fps_num, &w->fps_den);
    return CPDIT_OK;
}

static void writer_free(cpdit_video_writer *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n_tags; i++) {
        free((char *)w->tags[i].key);
        free((char *)w->tags[i].value);
    }
    free(w->tags);
    free(w->preset);
    free(w->path);
    free(w);
}

static cpdit_status copy_tags(cpdit_video_writer *w, const cpdit_video_tag *tags, int n_tags,
                              cpdit_error *err)
{
    if (n_tags < 0 || (n_tags > 0 && !tags))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, w->path, "bad metadata list (%d entries)",
                               n_tags);
    for (int i = 0; i < n_tags; i++) {
        cpdit_status st = check_tag(&tags[i], w->path, err);
        if (st)
            return st;
    }
    if (n_tags == 0)
        return CPDIT_OK;
    w->tags = calloc((size_t)n_tags, sizeof *w->tags);
    if (!w->tags)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "out of memory");
    for (int i = 0; i < n_tags; i++) {
        w->tags[i].key = strdup(tags[i].key);
        w->tags[i].value = strdup(tags[i].value);
        w->n_tags = i + 1;
        if (!w->tags[i].key || !w->tags[i].value)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "out of memory");
    }
    return CPDIT_OK;
}

cpdit_status cpdit_video_writer_open(cpdit_video_writer **out, const char *path, int width,
                                     int height, const cpdit_video_options *opt,
                                     const cpdit_video_tag *tags, int n_tags, cpdit_error *err)
{
    *out = NULL;
    if (!path || !path[0])
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "", "video output path is empty");
    if (strlen(path) >= CPDIT_VIDEO_PATH_MAX)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "", "video output path is too long");
    cpdit_video_format f = opt ? opt->format : CPDIT_VIDEO_MP4;
    char why[512];
    if (!cpdit_video_format_available(f, why, sizeof why))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "%s", why);
    struct stat sb; /* atomic_file refuses these too; say it before any encoder starts */
    if (f != CPDIT_VIDEO_PNG_FRAMES && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "%s output: is %s, not a regular file; not replaced",
                               cpdit_video_format_name(f), cpdit_file_kind(sb.st_mode));
    cpdit_video_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    w->width = width;
    w->height = height;
    w->backend = backend_of(f, NULL, 0);
    cpdit_status st = check_options(w, opt, err);
    if (!st)
        st = copy_tags(w, tags, n_tags, err);
    if (!st)
        st = w->backend->open(w, err);
    if (st) {
        writer_free(w);
        return st;
    }
    *out = w;
    return CPDIT_OK;
}

cpdit_status cpdit_video_writer_add(cpdit_video_writer *w, const uint8_t *rgb, int n_frames,
                                    cpdit_error *err)
{
    if (!w)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "", "video writer is not open");
    if (n_frames < 0 || (n_frames > 0 && !rgb))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, w->path, "bad frame batch (%d frames)",
                               n_frames);
    const size_t frame_bytes = (size_t)w->width * (size_t)w->height * 3;
    for (int i = 0; i < n_frames; i++) {
        if (w->frames >= CPDIT_VIDEO_MAX_FRAMES)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, w->path,
                                   "clip has more than %d frames", CPDIT_VIDEO_MAX_FRAMES);
        cpdit_status st = w->backend->add(w, rgb + (size_t)i * frame_bytes, err);
        if (st)
            return st;
        w->frames++;
    }
    return CPDIT_OK;
}

void cpdit_video_writer_abort(cpdit_video_writer *w)
{
    if (!w)
        return;
    w->backend->abort(w);
    writer_free(w);
}

cpdit_status cpdit_video_writer_finish(cpdit_video_writer *w, cpdit_video_result *res,
                                       cpdit_error *err)
{
    if (!w)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "", "video writer is not open");
    if (w->frames == 0) {
        cpdit_error_set(err, CPDIT_ERR_INPUT, w->path, "%s: a clip needs at least one frame",
                        cpdit_video_format_name(w->opt.format));
        cpdit_video_writer_abort(w);
        return CPDIT_ERR_INPUT;
    }
    cpdit_video_result r;
    memset(&r, 0, sizeof r);
    r.frames = w->frames;
    r.width = w->width;
    r.height = w->height;
    r.fps_num = w->fps_num;
    r.fps_den = w->fps_den;
    r.fps = (double)w->fps_num / w->fps_den;
    r.duration_s = w->frames / r.fps;
    snprintf(r.format, sizeof r.format, "%s", cpdit_video_format_name(w->opt.format));
    snprintf(r.codec, sizeof r.codec, "%s", w->backend->codec(w));
    snprintf(r.file, sizeof r.file, "%s", w->path);
    cpdit_status st = w->backend->finish(w, &r.bytes, err);
    writer_free(w);
    if (!st && res)
        *res = r;
    return st;
}

cpdit_status cpdit_video_write(const char *path, const uint8_t *frames, int n_frames, int height,
                               int width, const cpdit_video_options *opt,
                               const cpdit_video_tag *tags, int n_tags, cpdit_video_result *res,
                               cpdit_error *err)
{
    cpdit_video_writer *w;
    cpdit_status st = cpdit_video_writer_open(&w, path, width, height, opt, tags, n_tags, err);
    if (st)
        return st;
    st = cpdit_video_writer_add(w, frames, n_frames, err);
    if (st) {
        cpdit_video_writer_abort(w);
        return st;
    }
    return cpdit_video_writer_finish(w, res, err);
}
