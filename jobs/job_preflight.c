/* job_preflight.c — checks of a parsed manifest that need more than the manifest's bytes,
 * made on rank 0 (and by --check) before anything is written or rendered: the built-in
 * model's name, and the output folder (not a file, writable). See job_run.h. */
#include "jobs/job_run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobs/job_index.h" /* job_path_join */
#include "lib/builtin/builtin_model.h"
#include "lib/io/regular_file.h"
#include "lib/io/video_writer.h" /* cpdit_video_format_available */

/* The probe's name matches lib/io/atomic_file.h's temporary files, so a leftover (a kill
 * between create and unlink) is removed by the next run like any stale temporary file. */
#define PROBE_NAME ".cpdit-write-probe.tmp.XXXXXX"
#define KNOWN_LIST_MAX 256

/* err := code at "FILE:LINE:COL" of output.dir, or "--output", or the manifest. */
/* What the index check names (its message continues ": is a FIFO ..."). */
#define INDEX_WHAT "the index"

static cpdit_status output_error(const manifest *m, cpdit_status code, cpdit_error *err,
                                 const char *fmt, const char *a, const char *b)
{
    char where[CPDIT_ERROR_WHERE_MAX];
    const char *key = "output.dir";
    if (m->output_dir_mark.line > 0)
        snprintf(where, sizeof where, "%s:%d:%d", m->path, m->output_dir_mark.line,
                 m->output_dir_mark.col);
    else if (m->output_dir_from_option)
        snprintf(where, sizeof where, "--output"), key = "";
    else
        snprintf(where, sizeof where, "%s", m->path), key = "output.dir (default)";
    char what[CPDIT_ERROR_WHAT_MAX];
    snprintf(what, sizeof what, fmt, a, b);
    return cpdit_error_set(err, code, where, "%s%s%s", key, key[0] ? ": " : "", what);
}

cpdit_status job_check_output_format(const manifest *m, cpdit_error *err)
{
    static const cpdit_video_format to_video[] = {CPDIT_VIDEO_MP4, CPDIT_VIDEO_MP4,
                                                  CPDIT_VIDEO_WEBP, CPDIT_VIDEO_PNG_FRAMES};
    if (m->format == MANIFEST_FORMAT_PNG)
        return CPDIT_OK;
    char why[512], where[CPDIT_ERROR_WHERE_MAX];
    if (cpdit_video_format_available(to_video[m->format], why, sizeof why))
        return CPDIT_OK;
    const manifest_mark at = m->format_mark.line ? m->format_mark : m->model_mark;
    snprintf(where, sizeof where, "%s:%d:%d", m->path, at.line, at.col);
    return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "output.format%s: %s",
                           m->format_mark.line ? "" : " (the video default mp4)", why);
}

cpdit_status job_check_model_name(const manifest *m, cpdit_error *err)
{
    if (!m->model_is_builtin)
        return CPDIT_OK;
    const char *name = m->model + strlen(BUILTIN_SPEC_PREFIX);
    char known[KNOWN_LIST_MAX] = "";
    for (size_t i = 0; i < builtin_model_count(); i++) {
        if (!strcmp(builtin_model_name_at(i), name))
            return CPDIT_OK;
        strncat(known, i ? ", builtin:" : "builtin:", sizeof known - strlen(known) - 1);
        strncat(known, builtin_model_name_at(i), sizeof known - strlen(known) - 1);
    }
    char where[CPDIT_ERROR_WHERE_MAX];
    snprintf(where, sizeof where, "%s:%d:%d", m->path, m->model_mark.line, m->model_mark.col);
    return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "model: no built-in model \"%s\" "
                           "(known: %s; `cpdit builtin list`)", name, known);
}

cpdit_status job_check_output_dir(const manifest *m, int *exists, cpdit_error *err)
{
    const char *dir = m->output_dir;
    struct stat sb;
    *exists = 0;
    if (stat(dir, &sb) != 0) {
        int e = errno;
        if (e == ENOENT) /* created by the run (mkdir -p) */
            return CPDIT_OK;
        if (e == ENOTDIR)
            return output_error(m, CPDIT_ERR_INPUT, err, "\"%s\": a part of the path is a "
                                "file, not a folder%s", dir, "");
        if (e == ELOOP)
            return output_error(m, CPDIT_ERR_INPUT, err, "\"%s\": symbolic link loop%s", dir,
                                "");
        return output_error(m, CPDIT_ERR_RUNTIME, err, "\"%s\": %s", dir, strerror(e));
    }
    if (!S_ISDIR(sb.st_mode))
        return output_error(m, CPDIT_ERR_INPUT, err, "\"%s\" is %s, not a folder", dir,
                            cpdit_file_kind(sb.st_mode));
    *exists = 1;
    if (access(dir, W_OK | X_OK) != 0)
        return output_error(m, CPDIT_ERR_RUNTIME, err, "the output folder \"%s\" is not "
                            "writable: %s", dir, strerror(errno));
    /* an index that is a FIFO or a device node (or a link to one) is never appended to */
    char *index = job_path_join(dir, JOB_INDEX_FILE_NAME);
    cpdit_status st = CPDIT_OK;
    if (index && cpdit_check_output_file(index, INDEX_WHAT, err))
        st = output_error(m, CPDIT_ERR_INPUT, err, "the index \"%s\"%s", index,
                          err->what + strlen(INDEX_WHAT));
    free(index);
    return st;
}

cpdit_status job_probe_output_dir(const manifest *m, cpdit_error *err)
{
    char *probe = job_path_join(m->output_dir, PROBE_NAME);
    if (!probe)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, m->output_dir, "out of memory");
    int fd = mkostemp(probe, O_CLOEXEC);
    cpdit_status st = CPDIT_OK;
    if (fd < 0) {
        st = output_error(m, CPDIT_ERR_RUNTIME, err, "the output folder \"%s\" is not "
                          "writable: %s", m->output_dir, strerror(errno));
    } else {
        close(fd);
        unlink(probe);
    }
    free(probe);
    /* an existing index must take appends too: else the first item would be rendered and
     * then have no line to record it */
    char *index = st ? NULL : job_path_join(m->output_dir, JOB_INDEX_FILE_NAME);
    if (index) {
        fd = open(index, O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0)
            close(fd);
        else if (errno != ENOENT)
            st = output_error(m, CPDIT_ERR_RUNTIME, err, "the index \"%s\" is not writable: "
                              "%s", index, strerror(errno));
        free(index);
    }
    return st;
}
