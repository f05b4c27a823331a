/* atomic_file.h — write a file so that it appears complete or not at all.
 *
 * The bytes go to a temporary file in the same folder as the final path, named
 * ".NAME.tmp.XXXXXX" (hidden, and recognisable by atomic_file_is_temp_name so a resumed
 * job can remove leftovers of a killed run). Commit flushes, fsyncs, gives the file the
 * mode a plain fopen() would have (0666 & ~umask), renames it onto the final name (which
 * replaces an existing file in one step) and fsyncs the folder so the rename itself is
 * durable. Any failure removes the temporary file and reports the final path with the
 * reason (no space left, permission denied, folder missing, ...); an existing file at the
 * final path is then left as it was.
 *
 * Typical use:
 *   atomic_file af;
 *   if (atomic_file_begin(&af, "out/0001.png", err)) return err->status;
 *   ... fwrite(..., af.fp) ...            (or hand af.fp to libpng)
 *   return atomic_file_commit(&af, err);  (on an error path: atomic_file_abort(&af))
 *
 * Several processes may write the same final path at once: each has its own temporary
 * file and the last rename wins, so a reader always sees one complete version.
 */
#ifndef CPDIT_ATOMIC_FILE_H
#define CPDIT_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct atomic_file_sink;

typedef struct atomic_file {
    FILE *fp;         /* write here between begin and commit/abort; NULL when not open */
    char *final_path; /* owned copy of the final path */
    char *tmp_path;   /* owned: the temporary file, in the same folder */
    struct atomic_file_sink *sink; /* owned: the file descriptor under fp and the first
                                    * write error (errno) seen on it */
} atomic_file;

/* Create the temporary file for final_path and open af->fp on it ("wb").
 * Errors (af is left closed, nothing on disk): the folder is missing or not a folder,
 * permission denied, read-only file system, out of space, final_path empty or a folder;
 * final_path an existing FIFO, device node or socket, or a symbolic link to one (INPUT, as
 * cpdit_check_output_file in regular_file.h: such a node is never replaced by the rename;
 * commit checks again just before the rename). */
cpdit_status atomic_file_begin(atomic_file *af, const char *final_path, cpdit_error *err);

/* Flush + fsync + close the temporary file, rename it onto the final path and fsync the
 * folder. Detects write errors that happened earlier on af->fp (ferror) as well as those
 * of the final flush (ENOSPC, EDQUOT, EFBIG, EIO). On failure the temporary file is
 * removed and the final path is untouched. af is closed afterwards in both cases. */
cpdit_status atomic_file_commit(atomic_file *af, cpdit_error *err);

/* Close and remove the temporary file; the final path is untouched. Safe to call on a
 * closed or zeroed atomic_file, and more than once. */
void atomic_file_abort(atomic_file *af);

/* Write len bytes from data to path atomically (begin + fwrite + commit). */
cpdit_status atomic_write_buffer(const char *path, const void *data, size_t len,
                                 cpdit_error *err);

/* 1 if a file's base name (no folder part) has the form of one of our temporary files,
 * ".NAME.tmp.XXXXXX" with six characters after the last ".tmp.", else 0. */
int atomic_file_is_temp_name(const char *base_name);

#ifdef __cplusplus
}
#endif
#endif
