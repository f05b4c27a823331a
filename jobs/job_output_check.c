/* job_output_check.c — is an item's output complete? (job_index.h: job_output_is_complete).
 * Every writer renames its file (folder) into place only when it is whole, so this check is
 * about damage and foreign files under the name, not about a run that was killed: what a
 * kill leaves is a temporary name (lib/io/atomic_file.h), removed by the next run's cleanup.
 * Cost: a few small reads per file (one per top-level MP4 box; two per PNG frame). */
#include "jobs/job_index.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/io/regular_file.h"

#define BOX_HEADER 8        /* ISO BMFF box: size (u32 BE) + type (4 chars) */
#define BOX_LARGE_HEADER 16 /* size 1: a u64 size follows the type */
#define MP4_BOXES_MAX 4096  /* top-level boxes walked before giving up */
#define RIFF_HEADER 12      /* "RIFF" + size (u32 LE) + "WEBP" */
#define FRAME_PREFIX "frame_"
#define FRAME_SUFFIX ".png"
#define FRAME_DIGITS 5      /* frame_00000.png (lib/io/video_writer.h) */

static uint64_t be32(const unsigned char *p)
{
    return (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16 | (uint64_t)p[2] << 8 | p[3];
}

/* The top-level boxes of an MP4 tile the file exactly, the first is ftyp, and moov and mdat
 * are there (a torn file fails the tiling or lacks moov). */
static int mp4_complete(int fd, off_t size)
{
    unsigned char h[BOX_LARGE_HEADER];
    off_t at = 0;
    int moov = 0, mdat = 0;
    for (int n = 0; at < size && n < MP4_BOXES_MAX; n++) {
        if (size - at < BOX_HEADER || pread(fd, h, BOX_HEADER, at) != BOX_HEADER)
            return 0;
        uint64_t len = be32(h);
        if (n == 0 && memcmp(h + 4, "ftyp", 4) != 0)
            return 0;
        if (len == 1) { /* 64-bit size */
            if (size - at < BOX_LARGE_HEADER ||
                pread(fd, h + BOX_HEADER, BOX_HEADER, at + BOX_HEADER) != BOX_HEADER)
                return 0;
            len = be32(h + 8) << 32 | be32(h + 12);
        } else if (len == 0) { /* to the end of the file */
            len = (uint64_t)(size - at);
        }
        if (len < BOX_HEADER || len > (uint64_t)(size - at))
            return 0;
        moov |= memcmp(h + 4, "moov", 4) == 0;
        mdat |= memcmp(h + 4, "mdat", 4) == 0;
        at += (off_t)len;
    }
    return at == size && moov && mdat;
}

/* RIFF "WEBP" whose size field covers the file (plus the pad byte of an odd size). */
static int webp_complete(int fd, off_t size)
{
    unsigned char h[RIFF_HEADER];
    if (size < RIFF_HEADER || pread(fd, h, RIFF_HEADER, 0) != RIFF_HEADER ||
        memcmp(h, "RIFF", 4) != 0 || memcmp(h + 8, "WEBP", 4) != 0)
        return 0;
    uint64_t riff = (uint64_t)h[4] | (uint64_t)h[5] << 8 | (uint64_t)h[6] << 16 |
                    (uint64_t)h[7] << 24;
    return riff + 8 == (uint64_t)size || riff + 9 == (uint64_t)size;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

/* A png-frames folder: at least one frame, and nothing but complete frame_NNNNN.png. */
static int frames_complete(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int ok = 1, frames = 0;
    struct dirent *e;
    char file[4096 + 64];
    while (ok && (e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        size_t len = strlen(n);
        ok = len == strlen(FRAME_PREFIX) + FRAME_DIGITS + strlen(FRAME_SUFFIX) &&
             !strncmp(n, FRAME_PREFIX, strlen(FRAME_PREFIX)) && ends_with(n, FRAME_SUFFIX);
        for (size_t i = 0; ok && i < FRAME_DIGITS; i++)
            ok = n[strlen(FRAME_PREFIX) + i] >= '0' && n[strlen(FRAME_PREFIX) + i] <= '9';
        if (ok && snprintf(file, sizeof file, "%s/%s", path, n) < (int)sizeof file)
            ok = job_png_is_complete(file);
        frames += ok;
    }
    closedir(d);
    return ok && frames > 0;
}

int job_output_is_complete(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return 0;
    if (S_ISDIR(sb.st_mode))
        return frames_complete(path);
    if (!ends_with(path, ".mp4") && !ends_with(path, ".webp"))
        return job_png_is_complete(path);
    int fd;
    cpdit_error ignored;
    if (cpdit_open_regular(path, NULL, &fd, &ignored)) /* a FIFO is not opened: no hang */
        return 0;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
             (ends_with(path, ".mp4") ? mp4_complete(fd, st.st_size)
                                      : webp_complete(fd, st.st_size));
    close(fd);
    return ok;
}
