/* video_frames.c — a clip as a folder of PNG frames, frame_00000.png ... (video_writer.h).
 *
 * The frames go into a hidden temporary folder ".NAME.tmp.XXXXXX" beside the destination
 * (each PNG itself written atomically by png_writer.h); at finish the folder is fsynced and
 * renamed into place. An existing destination folder that holds only frame PNGs (an earlier
 * run's) is swapped out in one step (renameat2 RENAME_EXCHANGE; where the file system lacks
 * it, moved aside first, so for a moment nothing is there) and then removed. Anything else at
 * the destination is refused and left alone. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/io/atomic_file.h"
#include "lib/io/png_writer.h"
#include "lib/io/regular_file.h"
#include "lib/io/video_writer_internal.h"

#define FRAME_PREFIX "frame_"
#define FRAME_SUFFIX ".png"
#define FRAME_DIGITS 5
#define TMP_TEMPLATE ".tmp.XXXXXX"
/* Longest file name most Linux file systems take (NAME_MAX). */
#define FILE_NAME_MAX 255
/* read bits -> search bits of the same class (r-- -> --x) */
#define READ_TO_SEARCH_SHIFT 2
#define READ_BITS 0444

typedef struct frames_state {
    char *final;   /* the destination folder, without trailing slashes */
    char *tmp;     /* the temporary folder */
    char *parent;  /* their folder */
    char *base;    /* the destination's base name */
    long long bytes;
    mode_t mode;   /* the folder's mode at finish */
} frames_state;

static const char *frames_codec(const cpdit_video_writer *w)
{
    (void)w;
    return "png";
}

/* 1 for "frame_NNNNN.png" (FRAME_DIGITS digits). */
static int is_frame_name(const char *name)
{
    size_t np = strlen(FRAME_PREFIX), ns = strlen(FRAME_SUFFIX);
    if (strlen(name) != np + FRAME_DIGITS + ns || strncmp(name, FRAME_PREFIX, np) != 0 ||
        strcmp(name + np + FRAME_DIGITS, FRAME_SUFFIX) != 0)
        return 0;
    for (int i = 0; i < FRAME_DIGITS; i++)
        if (name[np + i] < '0' || name[np + i] > '9')
            return 0;
    return 1;
}

/* Remove a flat folder of files (ours: frame PNGs and their temporary files), then the folder.
 * Returns rmdir's result. */
static int remove_flat(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char *p = NULL;
            if (asprintf(&p, "%s/%s", dir, e->d_name) >= 0) {
                unlink(p);
                free(p);
            }
        }
        closedir(d);
    }
    return rmdir(dir);
}

/* An existing destination must be a folder holding only frame PNGs (or their temporary
 * files): an earlier clip that may be replaced. CPDIT_OK when missing too. */
static cpdit_status check_destination(const char *path, cpdit_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return CPDIT_OK; /* missing (a dangling link is refused by the rename below) */
    if (!S_ISDIR(sb.st_mode))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "png-frames output: is %s, not a folder of frames; not replaced",
                               cpdit_file_kind(sb.st_mode));
    struct stat lsb;
    if (lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "png-frames output: is a symbolic link to a folder; not replaced");
    DIR *d = opendir(path);
    if (!d)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "png-frames output: cannot read the "
                               "existing folder: %s", strerror(errno));
    cpdit_status st = CPDIT_OK;
    struct dirent *e;
    while (!st && (e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || is_frame_name(n) ||
            atomic_file_is_temp_name(n))
            continue;
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                             "png-frames output: the folder exists and holds \"%s\", which is "
                             "not a frame PNG; not replaced (remove it or choose another output)",
                             n);
    }
    closedir(d);
    return st;
}

static void frames_free(frames_state *s)
{
    if (!s)
        return;
    free(s->final);
    free(s->tmp);
    free(s->parent);
    free(s->base);
    free(s);
}

static cpdit_status frames_open(cpdit_video_writer *w, cpdit_error *err)
{
    frames_state *s = calloc(1, sizeof *s);
    if (!s || !(s->final = strdup(w->path))) {
        free(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "out of memory");
    }
    size_t n = strlen(s->final);
    while (n > 1 && s->final[n - 1] == '/')
        s->final[--n] = '\0';
    cpdit_status st = check_destination(s->final, err);
    const char *slash = strrchr(s->final, '/');
    s->base = strdup(slash ? slash + 1 : s->final);
    s->parent = cpdit_video_folder_of(s->final);
    if (!st && (!s->base || !s->parent))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "out of memory");
    if (!st && (!s->base[0] || strcmp(s->base, ".") == 0 || strcmp(s->base, "..") == 0))
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, w->path,
                             "png-frames output needs a folder name of its own");
    if (!st) {
        size_t keep = strlen(s->base), extra = 1 + strlen(TMP_TEMPLATE);
        if (keep + extra > FILE_NAME_MAX)
            keep = FILE_NAME_MAX - extra;
        if (asprintf(&s->tmp, "%s/.%.*s%s", s->parent, (int)keep, s->base, TMP_TEMPLATE) < 0) {
            s->tmp = NULL;
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "out of memory");
        } else if (!mkdtemp(s->tmp)) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path,
                                 "png-frames output: cannot create a folder in \"%s\": %s",
                                 s->parent, strerror(errno));
            free(s->tmp);
            s->tmp = NULL;
        }
    }
    if (st) {
        frames_free(s);
        return st;
    }
    w->state = s;
    return CPDIT_OK;
}

/* rgb: (H, W, 3) uint8 -> tmp/frame_NNNNN.png with the clip's metadata. */
static cpdit_status frames_add(cpdit_video_writer *w, const uint8_t *rgb, cpdit_error *err)
{
    frames_state *s = w->state;
    char *p = NULL;
    if (asprintf(&p, "%s/" FRAME_PREFIX "%0*d" FRAME_SUFFIX, s->tmp, FRAME_DIGITS, w->frames) < 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "out of memory");
    cpdit_status st = cpdit_png_write_rgb8(p, rgb, w->width, w->height, w->tags, w->n_tags, err);
    struct stat sb;
    if (!st && stat(p, &sb) == 0) {
        s->bytes += (long long)sb.st_size;
        if (w->frames == 0) /* the files' mode (0666 & ~umask), plus search where readable */
            s->mode = (sb.st_mode & 0777) | ((sb.st_mode & READ_BITS) >> READ_TO_SEARCH_SHIFT);
    }
    if (st && err) {
        char what[CPDIT_ERROR_WHAT_MAX];
        snprintf(what, sizeof what, "%s", err->what);
        cpdit_error_set(err, st, w->path, "png-frames output: frame %d: %s", w->frames, what);
    }
    free(p);
    return st;
}

static int sync_folder(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    return rc != 0 && e != EINVAL && e != ENOTSUP && e != EROFS ? e : 0;
}

/* Put the finished folder s->tmp at s->final, replacing an earlier frames folder. */
static cpdit_status move_into_place(cpdit_video_writer *w, frames_state *s, cpdit_error *err)
{
    cpdit_status st = check_destination(s->final, err); /* again: it may have changed */
    if (st)
        return st;
    struct stat sb;
    if (lstat(s->final, &sb) != 0) {
        if (rename(s->tmp, s->final) != 0)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path,
                                   "png-frames output: cannot move the finished folder into "
                                   "place: %s", strerror(errno));
        return CPDIT_OK;
    }
    if (renameat2(AT_FDCWD, s->tmp, AT_FDCWD, s->final, RENAME_EXCHANGE) == 0) {
        remove_flat(s->tmp); /* the old frames, now under the temporary name */
        return CPDIT_OK;
    }
    /* no RENAME_EXCHANGE here: move the old folder aside, then the new one in */
    char *old = NULL;
    if (asprintf(&old, "%s/.%s%s", s->parent, s->base, TMP_TEMPLATE) < 0 || !mkdtemp(old) ||
        rename(s->final, old) != 0 || rename(s->tmp, s->final) != 0) {
        int e = errno;
        if (old) {
            rename(old, s->final); /* put the old one back where it was moved */
            rmdir(old);
        }
        free(old);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path,
                               "png-frames output: cannot replace the existing folder: %s",
                               strerror(e));
    }
    remove_flat(old);
    free(old);
    return CPDIT_OK;
}

static cpdit_status frames_finish(cpdit_video_writer *w, long long *bytes, cpdit_error *err)
{
    frames_state *s = w->state;
    w->state = NULL;
    *bytes = 0;
    cpdit_status st = CPDIT_OK;
    int e;
    if (chmod(s->tmp, s->mode) != 0 && errno != EPERM)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "png-frames output: chmod: %s",
                             strerror(errno));
    if (!st && (e = sync_folder(s->tmp)) != 0)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path,
                             "png-frames output: cannot sync the frames: %s", strerror(e));
    if (!st)
        st = move_into_place(w, s, err);
    if (st) {
        remove_flat(s->tmp);
    } else {
        if ((e = sync_folder(s->parent)) != 0)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path,
                                 "png-frames output: written, but the folder \"%s\" could not "
                                 "be synced: %s", s->parent, strerror(e));
        *bytes = s->bytes;
    }
    frames_free(s);
    return st;
}

static void frames_abort(cpdit_video_writer *w)
{
    frames_state *s = w->state;
    if (s && s->tmp)
        remove_flat(s->tmp);
    frames_free(s);
    w->state = NULL;
}

int cpdit_video_remove_temp_folder(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!atomic_file_is_temp_name(slash ? slash + 1 : path)) {
        errno = EINVAL;
        return -1;
    }
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int foreign = 0;
    struct dirent *e;
    while (!foreign && (e = readdir(d)) != NULL)
        foreign = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
                  !is_frame_name(e->d_name) && !atomic_file_is_temp_name(e->d_name);
    closedir(d);
    if (foreign) {
        errno = ENOTEMPTY;
        return -1;
    }
    return remove_flat(path);
}

static void frames_describe(char *buf, size_t size)
{
    snprintf(buf, size, "frame_NNNNN.png in a folder");
}

const video_backend cpdit_video_frames_backend = {
    .codec = frames_codec,
    .open = frames_open,
    .add = frames_add,
    .finish = frames_finish,
    .abort = frames_abort,
    .describe = frames_describe,
    .usable = NULL,
};
