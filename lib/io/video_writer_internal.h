/* video_writer_internal.h — what video_writer.c shares with the format writers
 * (video_mp4.c, video_webp.c, video_frames.c), and the tests' switch for the
 * "format unavailable" path. Not installed. */
#ifndef CPDIT_VIDEO_WRITER_INTERNAL_H
#define CPDIT_VIDEO_WRITER_INTERNAL_H

#include "lib/io/video_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cpdit_video_writer;

/* One output format. Every function gets the writer with its checked, defaulted fields. */
typedef struct video_backend {
    /* the codec as the index line names it */
    const char *(*codec)(const struct cpdit_video_writer *w);
    /* create the temporary file (folder) and the encoder; w->state is the format's */
    cpdit_status (*open)(struct cpdit_video_writer *w, cpdit_error *err);
    /* encode one frame, rgb = (H, W, 3) uint8; w->frames is its index */
    cpdit_status (*add)(struct cpdit_video_writer *w, const uint8_t *rgb, cpdit_error *err);
    /* finish the file and move it into place; *bytes = its size. Frees w->state in every case. */
    cpdit_status (*finish)(struct cpdit_video_writer *w, long long *bytes, cpdit_error *err);
    /* remove the temporary file (folder), free w->state */
    void (*abort)(struct cpdit_video_writer *w);
    /* the library behind it, for cpdit --version ("libwebp 1.2.4") */
    void (*describe)(char *buf, size_t size);
    /* 1 when usable at run time, else 0 with why (e.g. libavcodec without libx264) */
    int (*usable)(char *why, size_t size);
} video_backend;

struct cpdit_video_writer {
    const video_backend *backend;
    void *state;
    cpdit_video_options opt; /* defaults filled in; opt.preset points at preset below */
    char *path;              /* the final path */
    char *preset;
    int width, height;
    int fps_num, fps_den; /* the frame rate as a fraction */
    int frames;           /* frames added so far */
    cpdit_video_tag *tags; /* owned deep copies */
    int n_tags;
};

#ifdef CPDIT_HAVE_FFMPEG
extern const video_backend cpdit_video_mp4_backend;
#endif
#ifdef CPDIT_HAVE_WEBP
extern const video_backend cpdit_video_webp_backend;
#endif
extern const video_backend cpdit_video_frames_backend;

/* The folder part of path ("." when there is none); caller frees. NULL when out of memory. */
char *cpdit_video_folder_of(const char *path);

/* Tests only: make formats (bit 1 << cpdit_video_format) report themselves unavailable as in
 * a build without their library, so the message path is tested in every build. 0 = none. */
void cpdit_video_pretend_unbuilt(unsigned format_mask);

#ifdef __cplusplus
}
#endif
#endif
