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
