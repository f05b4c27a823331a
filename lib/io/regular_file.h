/* regular_file.h — open input files that must be regular files (weights, configs, prompts
 * files) without ever blocking on a FIFO or reading a device.
 *
 * A FIFO opened for reading waits for a writer (forever, if none comes), and takes the data
 * of a one-shot writer meant for someone else; /dev/zero never ends. So the path is stat()ed
 * first and anything but a regular file is refused WITHOUT being opened; then it is opened
 * with O_NONBLOCK (a no-op for regular files) and checked again with fstat(), so a file
 * swapped for a FIFO between the two calls is refused too. O_NONBLOCK is cleared before the
 * descriptor is returned.
 */
#ifndef CPDIT_REGULAR_FILE_H
#define CPDIT_REGULAR_FILE_H

#include <stdio.h>
#include <sys/types.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "a folder", "a FIFO (named pipe)", "a character device", "a block device", "a socket",
 * "a symbolic link", "a regular file" or "a special file", for messages. */
const char *cpdit_file_kind(mode_t mode);

/* Open path read-only (O_CLOEXEC) when it is a regular file: *fd gets the descriptor.
 * Errors, with where = path and what = "WHAT: ...": missing (INPUT), not a regular file
 * (INPUT: "is a FIFO (named pipe), not a regular file"), symbolic link loop (INPUT), any
 * other open/stat failure (RUNTIME, strerror). what may be NULL ("cannot open"). */
cpdit_status cpdit_open_regular(const char *path, const char *what, int *fd, cpdit_error *err);

/* cpdit_open_regular + fdopen(fd, "rb"). NULL with err filled on failure. */
FILE *cpdit_fopen_regular(const char *path, const char *what, cpdit_error *err);

/* The one check of every writer (atomic files, the index, the folder lock, ...) before it
 * creates, replaces or appends to path: CPDIT_OK when path does not exist, is a regular file,
 * or is a symbolic link whose target is missing or a regular file. Anything else that exists
 * (a FIFO, a device node, a socket, a folder), or a link to one, is refused WITHOUT being
 * opened, so that a rename never replaces a device node and an open never blocks on a FIFO
 * or writes into a device:
 *   CPDIT_ERR_INPUT, where = path, what = "WHAT: is a character device, not a regular file"
 *   (or "WHAT: is a symbolic link to a FIFO (named pipe), not a regular file").
 * what may be NULL ("cannot write"). */
cpdit_status cpdit_check_output_file(const char *path, const char *what, cpdit_error *err);

/* Open path for writing (flags: O_WRONLY plus O_APPEND / O_CREAT / O_TRUNC as wanted,
 * mode for O_CREAT) after cpdit_check_output_file; opened with O_NONBLOCK and checked again
 * with fstat so that a file swapped for a FIFO meanwhile is refused too (the descriptor is
 * closed, nothing written). *fd gets the descriptor (O_NONBLOCK cleared). Errors: those of
 * cpdit_check_output_file, and open failures as RUNTIME "WHAT: strerror". */
cpdit_status cpdit_open_output(const char *path, const char *what, int flags, mode_t mode,
                               int *fd, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
