/* regular_file.c — stat, then open with O_NONBLOCK, then fstat (see regular_file.h). */
#include "lib/io/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cpdit_file_kind(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a folder";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "a special file";
}

/* An errno from stat/open as an error: missing files and link loops are bad input. */
static cpdit_status open_error(cpdit_error *err, const char *path, const char *what, int e)
{
    cpdit_status st = e == ENOENT || e == ELOOP || e == ENOTDIR ? CPDIT_ERR_INPUT
                                                                  : CPDIT_ERR_RUNTIME;
    const char *why = e == ELOOP ? "symbolic link loop (too many levels of symbolic links)"
                                 : strerror(e);
    return cpdit_error_set(err, st, path, "%s: %s", what, why);
}

static cpdit_status not_regular(cpdit_error *err, const char *path, const char *what,
                                mode_t mode)
{
    return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "%s: is %s, not a regular file", what,
                           cpdit_file_kind(mode));
}

cpdit_status cpdit_open_regular(const char *path, const char *what, int *fd, cpdit_error *err)
{
    *fd = -1;
    if (!what)
        what = "cannot open";
    struct stat sb;
    if (stat(path, &sb) != 0)
        return open_error(err, path, what, errno);
    if (!S_ISREG(sb.st_mode)) /* refused before any open(): a FIFO's writer is not met */
        return not_regular(err, path, what, sb.st_mode);
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0)
        return open_error(err, path, what, errno);
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return open_error(err, path, what, e);
    }
    if (!S_ISREG(sb.st_mode)) { /* swapped between stat and open */
        close(f);
        return not_regular(err, path, what, sb.st_mode);
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0)
        (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return CPDIT_OK;
}

FILE *cpdit_fopen_regular(const char *path, const char *what, cpdit_error *err)
{
    int fd;
    if (cpdit_open_regular(path, what, &fd, err))
        return NULL;
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        int e = errno;
        close(fd);
        open_error(err, path, what ? what : "cannot open", e);
    }
    return fp;
}

cpdit_status cpdit_check_output_file(const char *path, const char *what, cpdit_error *err)
{
    if (!what)
        what = "cannot write";
    struct stat sb;
    if (lstat(path, &sb) != 0 || S_ISREG(sb.st_mode))
        return CPDIT_OK; /* missing (the writer creates it) or regular: the writer reports */
    if (!S_ISLNK(sb.st_mode))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "%s: is %s, not a regular file",
                               what, cpdit_file_kind(sb.st_mode));
    struct stat target;
    if (stat(path, &target) != 0 || S_ISREG(target.st_mode))
        return CPDIT_OK; /* a dangling link is replaced; a link to a regular file is too */
    return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                           "%s: is a symbolic link to %s, not a regular file", what,
                           cpdit_file_kind(target.st_mode));
}

cpdit_status cpdit_open_output(const char *path, const char *what, int flags, mode_t mode,
                               int *fd, cpdit_error *err)
{
    *fd = -1;
    if (!what)
        what = "cannot write";
    cpdit_status st = cpdit_check_output_file(path, what, err);
    if (st)
        return st;
    int f = open(path, flags | O_NONBLOCK | O_CLOEXEC, mode);
    if (f < 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "%s: %s", what, strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "%s: %s", what, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) { /* swapped for something else since the check */
        close(f);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "%s: is %s, not a regular file",
                               what, cpdit_file_kind(sb.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0)
        (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return CPDIT_OK;
}
