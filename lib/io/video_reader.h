/* video_reader.h — read chosen frames of a clip cpdit wrote back as 8-bit RGB (for the
 * contact sheet of a folder of clips and for tests), the inverse of video_writer.h:
 *   png-frames  a folder of frame_00000.png ... (exact);
 *   mp4         decoded with libavformat/libavcodec, converted from its yuv420p (BT.709,
 *               limited range, as cpdit tags it; other tags as the stream says) to full-range
 *               RGB with libswscale (lossy: what a player shows);
 *   webp        an animated WebP through libwebpdemux's WebPAnimDecoder (the composed canvas).
 * The format comes from the path: a folder is png-frames, otherwise the extension (.mp4,
 * .webp). Builds without a library say which package is missing (CPDIT_ERR_INPUT).
 *
 * The whole clip is decoded in order (clips are short; a decoder holds one frame at a time),
 * so memory is the chosen frames plus one frame. */
#ifndef CPDIT_VIDEO_READER_H
#define CPDIT_VIDEO_READER_H

#include "lib/core/cpdit_error.h"
#include "lib/io/png_reader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Frames which[0..n) of the clip at path (0-based; any order, repeats allowed) into
 * out[0..n) (each freed with cpdit_png_image_free; n_text 0), and the clip's frame count in
 * *frames (may be NULL). A frame number past the end is an error naming the count
 * (CPDIT_ERR_INPUT; *frames is still set to the count found), as is an unknown extension or
 * a format this build cannot read; unreadable or corrupt files are CPDIT_ERR_RUNTIME. On
 * error nothing is left in out. */
cpdit_status cpdit_video_read_frames(const char *path, const int *which, int n,
                                     cpdit_png_image *out, int *frames, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
