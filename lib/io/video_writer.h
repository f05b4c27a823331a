/* video_writer.h — write a clip of 8-bit RGB frames as MP4 (H.264), animated WebP or a folder
 * of PNG frames, with the generation metadata, atomically.
 *
 * Frames are (H, W, 3) uint8, row-major, R G B per pixel, as image_postprocess.h makes them
 * from a decoder's output; a clip is T such frames back to back, (T, H, W, 3).
 *
 *   mp4         H.264 through libavformat/libavcodec with libx264, yuv420p (BT.709 matrix,
 *               limited range, tagged as such), constant frame rate `fps`; the metadata goes
 *               into the container as QuickTime "mdta" keys (movflags use_metadata_tags), so
 *               `ffprobe -show_format` lists every key as given (prompt, seed, ...); the index
 *               (moov) is moved to the front (faststart) so browsers play while loading.
 *               Width and height must be even (4:2:0 chroma); Wan sizes are multiples of 16.
 *   webp        animated WebP through libwebp's WebPAnimEncoder, lossy at a quality (default
 *               80) or lossless (the frames decode back exactly); loops forever unless told;
 *               the metadata goes into an XMP chunk. For previews browsers show inline.
 *   png-frames  a folder of frame_00000.png, frame_00001.png, ... (png_writer.h: each PNG
 *               carries the metadata as text chunks). For pipelines that want frames.
 *
 * Atomic like the PNGs (atomic_file.h): mp4 and webp are written to a hidden temporary file
 * ".NAME.tmp.XXXXXX" in the destination's folder and renamed into place when complete; frames
 * go into a hidden temporary folder of the same form, renamed into place at the end (an older
 * frames folder at the destination, holding only frame PNGs, is replaced). A writer that is
 * killed leaves only such a temporary name (atomic_file_is_temp_name), never a torn file under
 * the final name. A destination that exists and is not a regular file (a folder, a FIFO, a
 * device; for png-frames: anything but a folder of frame PNGs) is refused.
 *
 * Two ways in: cpdit_video_write() for a whole clip in memory, or open / add frames / finish
 * for a decoder that produces a few frames at a time (mp4 and png-frames then hold one frame
 * at a time; webp's encoder keeps the clip until it is assembled at the end).
 *
 * No MPI here: one process (the item's writing rank) calls these.
 */
#ifndef CPDIT_VIDEO_WRITER_H
#define CPDIT_VIDEO_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "lib/io/png_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpdit_video_format {
    CPDIT_VIDEO_MP4 = 0,
    CPDIT_VIDEO_WEBP = 1,
    CPDIT_VIDEO_PNG_FRAMES = 2
} cpdit_video_format;
#define CPDIT_VIDEO_FORMAT_COUNT 3

/* Frames per second when none is given: Wan 2.1's (diffusers' export for WanPipeline). */
#define CPDIT_VIDEO_DEFAULT_FPS 16.0
/* Frame rates accepted (frames per second). */
#define CPDIT_VIDEO_MIN_FPS 0.01
#define CPDIT_VIDEO_MAX_FPS 240.0
/* Most frames in one clip: frame_NNNNN.png has five digits. */
#define CPDIT_VIDEO_MAX_FRAMES 99999
/* Largest width or height: WebP's limit (16383); H.264 level limits are lower still for
 * most players, but libx264 encodes this. */
#define CPDIT_VIDEO_MAX_SIDE 16383
/* x264 constant rate factor used when none is given: visually lossless for most content. */
#define CPDIT_VIDEO_DEFAULT_CRF 18
#define CPDIT_VIDEO_MAX_CRF 51
/* x264 preset used when none is given. */
#define CPDIT_VIDEO_DEFAULT_PRESET "medium"
/* WebP quality (0..100) used when none is given: for lossy, the visual quality; for
 * lossless, the compression effort. Lossy at 80 is the default: a preview, about half the
 * bytes and a quarter of the time of lossless (81 frames of 832x480: 10 s against 39 s here). */
#define CPDIT_VIDEO_DEFAULT_WEBP_QUALITY 80.0f

/* One metadata entry, with the PNG text rules: key 1-79 printable ASCII characters without
 * leading, trailing or doubled spaces; value NUL-terminated UTF-8. The same entries serve all
 * three formats (prompt, seed, steps, model, grid, ...). */
typedef cpdit_png_text cpdit_video_tag;

typedef struct cpdit_video_options {
    cpdit_video_format format;
    double fps;         /* frames per second, 0.01..240; 0 = default 16.
                         * Non-integer rates are kept exactly when they are k*1000/1001
                         * within 5e-4 (23.976, 29.97), else rounded to 1/1000 */
    int crf;            /* mp4: x264 CRF 0..51 (lower = better and larger); -1 =
                         * CPDIT_VIDEO_DEFAULT_CRF */
    const char *preset; /* mp4: x264 preset (ultrafast ... veryslow); NULL = "medium" */
    int threads;        /* mp4: encoder threads; 0 = libx264's choice (about 1.5 x cores) */
    int webp_lossless;  /* webp: 1 = lossless (frames decode back exactly), 0 = lossy (default) */
    float webp_quality; /* webp: 0..100; < 0 = CPDIT_VIDEO_DEFAULT_WEBP_QUALITY */
    int webp_loops;     /* webp: times to play, 0 = forever (default) */
} cpdit_video_options;

/* Defaults for format f (fps 16, CRF 18, preset medium, lossy WebP at 80 looping forever). */
void cpdit_video_options_init(cpdit_video_options *opt, cpdit_video_format f);

/* What an index line needs about a written clip. */
#define CPDIT_VIDEO_PATH_MAX 4096
typedef struct cpdit_video_result {
    int frames;        /* T */
    int width, height; /* pixels */
    double fps;        /* frames per second, as stored (num/den) */
    int fps_num, fps_den;
    double duration_s; /* T / fps, seconds */
    char format[16];   /* "mp4", "webp", "png-frames" */
    char codec[16];    /* "h264", "webp-lossless", "webp-lossy", "png" */
    long long bytes;   /* size of the file; png-frames: of all frame files together */
    char file[CPDIT_VIDEO_PATH_MAX]; /* the final path (a folder for png-frames) */
} cpdit_video_result;

/* "mp4", "webp", "png-frames". */
const char *cpdit_video_format_name(cpdit_video_format f);
/* Parse one of those names (as output.format in a manifest). CPDIT_ERR_INPUT, naming the
 * accepted values, for any other; where is for the message. */
cpdit_status cpdit_video_format_parse(const char *name, cpdit_video_format *f, const char *where,
                                      cpdit_error *err);
/* The usual file name extension with its dot: ".mp4", ".webp", "" (a folder). */
const char *cpdit_video_format_extension(cpdit_video_format f);

/* 1 if this build (and, for mp4, the libavcodec found at run time: libx264) can write f;
 * else 0 with why filled (may be NULL), e.g. "mp4 output is unavailable: cpdit was built
 * without libavcodec (install libavcodec-dev libavformat-dev libswscale-dev and reconfigure)". */
int cpdit_video_format_available(cpdit_video_format f, char *why, size_t why_size);

/* One line for `cpdit --version`: each format with the library behind it, or why it is
 * unavailable. */
void cpdit_video_describe(char *buf, size_t size);

typedef struct cpdit_video_writer cpdit_video_writer;

/* Start a clip of width x height frames at path with opt (NULL = defaults for mp4) and
 * n_tags metadata entries (copied). The temporary file or folder is created now, so a bad
 * destination fails here. Errors: CPDIT_ERR_INPUT for an unavailable format (the message of
 * cpdit_video_format_available), a bad size (odd for mp4), fps, CRF, preset, quality or
 * metadata entry, a destination that is a folder / FIFO / device (png-frames: a file, or a
 * folder holding anything but frame PNGs); CPDIT_ERR_RUNTIME for I/O and encoder failures. */
cpdit_status cpdit_video_writer_open(cpdit_video_writer **w, const char *path, int width,
                                     int height, const cpdit_video_options *opt,
                                     const cpdit_video_tag *tags, int n_tags, cpdit_error *err);

/* Append n_frames frames, rgb = (n_frames, H, W, 3) uint8. On error the writer is still open
 * and must be aborted. */
cpdit_status cpdit_video_writer_add(cpdit_video_writer *w, const uint8_t *rgb, int n_frames,
                                    cpdit_error *err);

/* Flush the encoder, write the trailer, move the file (folder) into place and free w, in
 * every case. res (may be NULL) gets the facts of the clip. A clip of no frames is refused
 * (CPDIT_ERR_INPUT). On failure nothing new is left under the final name. */
cpdit_status cpdit_video_writer_finish(cpdit_video_writer *w, cpdit_video_result *res,
                                       cpdit_error *err);

/* Drop the clip: remove the temporary file (folder) and free w. NULL is fine. */
void cpdit_video_writer_abort(cpdit_video_writer *w);

/* Remove the temporary folder a killed png-frames writer left (path's base name has the form
 * atomic_file_is_temp_name accepts, and it holds only frame PNGs and their temporary files):
 * what a resumed job's cleanup calls where unlink() says EISDIR. Returns 0, or -1 with errno
 * (EINVAL: not a temporary name; ENOTDIR; ENOTEMPTY: it holds something else, left alone). */
int cpdit_video_remove_temp_folder(const char *path);

/* open + add(frames) + finish: frames = (n_frames, height, width, 3) uint8. */
cpdit_status cpdit_video_write(const char *path, const uint8_t *frames, int n_frames, int height,
                               int width, const cpdit_video_options *opt,
                               const cpdit_video_tag *tags, int n_tags, cpdit_video_result *res,
                               cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
