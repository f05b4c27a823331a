/* atomic_file.c — temp file + fsync + rename + folder fsync (see atomic_file.h). */
#include "lib/io/atomic_file.h"
#include "lib/io/regular_file.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ".NAME" + ".tmp." + 6 random characters: what mkstemp fills in. */
#define TMP_INFIX ".tmp."
#define TMP_RANDOM "XXXXXX"
#define TMP_RANDOM_LEN 6
/* Longest file name most Linux file systems take (NAME_MAX). */
#define FILE_NAME_MAX 255
/* The action named in write errors. */
#define WRITE_ACTION "cannot write the output file"
/* Permission bits a plain fopen(path, "w") asks for before the umask. */
#define NEW_FILE_MODE 0666
/* stdio buffer of the stream: fewer, larger writes on shared file systems. */
#define WRITE_BUFFER_BYTES (256 * 1024)

/* Under af->fp: the descriptor, and the errno of the first failed write. stdio drops
 * buffered bytes after a failed write and forgets why, so the reason (ENOSPC, EDQUOT,
 * EFBIG, EIO) is kept here for commit to report. */
struct atomic_file_sink {
    int fd;
    int error;
};

static void af_zero(atomic_file *af)
{
    af->fp = NULL;
    af->final_path = NULL;
    af->tmp_path = NULL;
    af->sink = NULL;
}

static void af_release(atomic_file *af)
{
    free(af->final_path);
    free(af->tmp_path);
    free(af->sink);
    af_zero(af);
}

static ssize_t sink_write(void *cookie, const char *buf, size_t size)
{
    struct atomic_file_sink *s = cookie;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(s->fd, buf + done, size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (!s->error)
                s->error = n < 0 ? errno : EIO;
            break;
        }
        done += (size_t)n;
    }
    /* fopencookie: return the bytes taken, 0 on error (never negative). */
    return (ssize_t)done;
}

static int sink_close(void *cookie)
{
    struct atomic_file_sink *s = cookie;
    int rc = s->fd >= 0 ? close(s->fd) : 0;
    if (rc != 0 && !s->error)
        s->error = errno;
    s->fd = -1;
    return rc;
}

/* The folder part of path ("." when there is none, "/" for "/x"). Caller frees. */
static char *folder_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* Explain an errno from creating/renaming/writing in folder `dir` into err. */
static cpdit_status io_error(cpdit_error *err, const char *final_path, const char *dir,
                             const char *action, int e)
{
    switch (e) {
    case ENOENT:
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, final_path,
                               "%s: folder \"%s\" does not exist", action, dir);
    case ENOTDIR:
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, final_path,
                               "%s: a part of folder \"%s\" is not a folder", action, dir);
    case EACCES:
    case EPERM:
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, final_path,
                               "%s: permission denied in folder \"%s\"", action, dir);
    case EROFS:
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, final_path,
                               "%s: folder \"%s\" is on a read-only file system", action, dir);
    case ENOSPC:
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, final_path,
                               "%s: no space left on the device holding \"%s\"", action, dir);
#ifdef EDQUOT
    case EDQUOT:
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, final_path,
                               "%s: disk quota exceeded in folder \"%s\"", action, dir);
#endif
    case EFBIG:
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, final_path,
                               "%s: file too large (file size limit or file system limit)",
                               action);
    default:
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, final_path, "%s: %s", action,
                               strerror(e));
    }
}

/* The process umask, read without changing it where /proc allows (thread-safe), else by
 * setting and restoring it. */
static mode_t current_umask(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    if (f) {
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "Umask:", 6) == 0) {
                fclose(f);
                return (mode_t)strtoul(line + 6, NULL, 8);
            }
        }
        fclose(f);
    }
    mode_t m = umask(022);
    umask(m);
    return m;
}

cpdit_status atomic_file_begin(atomic_file *af, const char *final_path, cpdit_error *err)
{
    af_zero(af);
    size_t n = final_path ? strlen(final_path) : 0;
    if (n == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "", "output path is empty");
    if (final_path[n - 1] == '/')
        return cpdit_error_set(err, CPDIT_ERR_INPUT, final_path,
                               "output path names a folder, not a file");
    struct stat st;
    if (stat(final_path, &st) == 0 && S_ISDIR(st.st_mode))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, final_path,
                               "output path is an existing folder, not a file");
    /* a FIFO, a device node (or a link to one) is never replaced by the rename */
    cpdit_status refused = cpdit_check_output_file(final_path, WRITE_ACTION, err);
    if (refused)
        return refused;

    char *dir = folder_of(final_path);
    const char *slash = strrchr(final_path, '/');
    const char *base = slash ? slash + 1 : final_path;
    /* Keep the temporary name within FILE_NAME_MAX by shortening the copied base name. */
    size_t extra = 1 + strlen(TMP_INFIX) + TMP_RANDOM_LEN;
    size_t base_len = strlen(base);
    if (base_len + extra > FILE_NAME_MAX)
        base_len = FILE_NAME_MAX - extra;
    size_t tmp_cap = strlen(dir) + 1 + extra + base_len + 1;
    char *tmp = malloc(tmp_cap);
    char *fin = strdup(final_path);
    if (!dir || !tmp || !fin) {
        free(dir);
        free(tmp);
        free(fin);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, final_path, "out of memory");
    }
    snprintf(tmp, tmp_cap, "%s/.%.*s%s%s", dir, (int)base_len, base, TMP_INFIX, TMP_RANDOM);

    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        io_error(err, final_path, dir, "cannot create the output file", e);
        free(dir);
        free(tmp);
        free(fin);
        return CPDIT_ERR_RUNTIME;
    }
    struct atomic_file_sink *sink = calloc(1, sizeof *sink);
    cookie_io_functions_t io = {.read = NULL, .write = sink_write, .seek = NULL,
                                .close = sink_close};
    FILE *fp = NULL;
    if (sink) {
        sink->fd = fd;
        fp = fopencookie(sink, "w", io);
    }
    if (!fp) {
        close(fd);
        unlink(tmp);
        free(sink);
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, final_path, "out of memory");
        free(dir);
        free(tmp);
        free(fin);
        return CPDIT_ERR_RUNTIME;
    }
    setvbuf(fp, NULL, _IOFBF, WRITE_BUFFER_BYTES);
    free(dir);
    af->fp = fp;
    af->final_path = fin;
    af->tmp_path = tmp;
    af->sink = sink;
    return CPDIT_OK;
}

void atomic_file_abort(atomic_file *af)
{
    if (!af)
        return;
    if (af->fp)
        fclose(af->fp);
    if (af->tmp_path)
        unlink(af->tmp_path);
    af_release(af);
}

/* fsync the folder holding path so that a rename into it survives a crash. File systems
 * that cannot sync a folder (EINVAL, ENOTSUP) or folders we may not open for reading are
 * not errors: the rename has happened and is visible. */
static int sync_folder(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL && e != ENOTSUP && e != EROFS)
        return e;
    return 0;
}

cpdit_status atomic_file_commit(atomic_file *af, cpdit_error *err)
{
    if (!af || !af->fp)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, af && af->final_path ? af->final_path : "",
                               "atomic_file_commit: file is not open");
    char *dir = folder_of(af->final_path);
    if (!dir) {
        atomic_file_abort(af);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "", "out of memory");
    }
    const char *action = WRITE_ACTION;
    struct atomic_file_sink *sink = af->sink;
    int e = 0;
    int had_error = ferror(af->fp);
    if (fflush(af->fp) != 0 || had_error)
        e = sink->error ? sink->error : EIO;
    if (!e && fsync(sink->fd) != 0 && errno != EINVAL)
        e = errno;
    if (!e) {
        /* mkstemp made the file 0600; give it the mode fopen() would have given it, or
         * keep the mode of the file it replaces. */
        struct stat st;
        mode_t mode = NEW_FILE_MODE & ~current_umask();
        if (stat(af->final_path, &st) == 0 && S_ISREG(st.st_mode))
            mode = st.st_mode & 07777;
        if (fchmod(sink->fd, mode) != 0 && errno != EPERM)
            e = errno;
    }
    FILE *fp = af->fp;
    af->fp = NULL;
    if (fclose(fp) != 0 && !e) /* closes sink->fd; NFS may report write errors here */
        e = sink->error ? sink->error : EIO;
    cpdit_status refused = CPDIT_OK;
    if (!e && (refused = cpdit_check_output_file(af->final_path, action, err))) {
        /* became a FIFO or a device node since begin: refused, the temporary file goes */
        unlink(af->tmp_path);
        free(dir);
        af_release(af);
        return refused;
    }
    if (!e && rename(af->tmp_path, af->final_path) != 0) {
        e = errno;
        action = "cannot move the finished file into place";
    }
    struct stat dsb;
    if (e == ENOENT && stat(dir, &dsb) == 0 && S_ISDIR(dsb.st_mode)) {
        /* the folder is there: our temporary file is what went missing */
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, af->final_path,
                        "%s: the temporary file \"%s\" vanished before the rename (removed "
                        "by another process? one job per output folder)", action, af->tmp_path);
        free(dir);
        af_release(af);
        return CPDIT_ERR_RUNTIME;
    }
    if (e) {
        unlink(af->tmp_path);
        io_error(err, af->final_path, dir, action, e);
        free(dir);
        af_release(af);
        return CPDIT_ERR_RUNTIME;
    }
    int de = sync_folder(dir);
    if (de) {
        io_error(err, af->final_path, dir, "file written but the folder could not be synced",
                 de);
        free(dir);
        af_release(af);
        return CPDIT_ERR_RUNTIME;
    }
    free(dir);
    af_release(af);
    return CPDIT_OK;
}

cpdit_status atomic_write_buffer(const char *path, const void *data, size_t len,
                                 cpdit_error *err)
{
    atomic_file af;
    cpdit_status st = atomic_file_begin(&af, path, err);
    if (st)
        return st;
    /* A short fwrite sets the stream's error flag; commit sees it, reports the errno the
     * sink kept (ENOSPC, EFBIG, ...) and removes the temporary file. */
    if (len > 0)
        (void)fwrite(data, 1, len, af.fp);
    return atomic_file_commit(&af, err);
}

int atomic_file_is_temp_name(const char *base_name)
{
    if (!base_name || base_name[0] != '.')
        return 0;
    const char *p = NULL, *q = base_name + 1;
    while ((q = strstr(q, TMP_INFIX)) != NULL) {
        p = q;
        q++;
    }
    if (!p || p == base_name + 1)
        return 0;
    const char *rnd = p + strlen(TMP_INFIX);
    if (strlen(rnd) != TMP_RANDOM_LEN)
        return 0;
    for (int i = 0; i < TMP_RANDOM_LEN; i++)
        if (!isalnum((unsigned char)rnd[i]))
            return 0;
    return 1;
}
