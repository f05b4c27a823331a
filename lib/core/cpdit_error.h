/* cpdit_error.h — the one error convention of libcpdit.
 *
 * Library functions return a cpdit_status and, on failure, fill a cpdit_error with
 * where the problem is (a file, "file:line:col", a tensor name, an option) and what
 * it is. The CLI prints "cpdit: <where>: <what>" and exits with the status:
 * 2 for bad input (the user can fix it), 1 for a runtime failure. Nothing in the
 * library calls abort() or exit() on bad input.
 */
#ifndef CPDIT_ERROR_H
#define CPDIT_ERROR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpdit_status {
    CPDIT_OK = 0,
    CPDIT_ERR_RUNTIME = 1, /* I/O failure, out of memory, MPI/CUDA failure */
    CPDIT_ERR_INPUT = 2,   /* malformed file, bad option, unsupported shape */
    /* A runtime failure after which a collective may be broken: peers of this rank may be
     * waiting in a collective it will never enter (a failed forward or decode on one rank of
     * a group). The library returns it and never aborts; the program must end the whole job
     * (bin/: MPI_Abort) instead of going on to the next item or waiting in the next
     * collective. Exit code as RUNTIME. */
    CPDIT_ERR_BROKEN = 3
} cpdit_status;

#define CPDIT_ERROR_WHERE_MAX 512
#define CPDIT_ERROR_WHAT_MAX 1024

typedef struct cpdit_error {
    cpdit_status status;
    char where[CPDIT_ERROR_WHERE_MAX];
    char what[CPDIT_ERROR_WHAT_MAX];
} cpdit_error;

/* Clear an error record (status CPDIT_OK, empty strings). err may be NULL. */
void cpdit_error_clear(cpdit_error *err);

/* Fill err (may be NULL) and return status, so callers can write
 *   return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "header length %llu exceeds file size", n);
 */
cpdit_status cpdit_error_set(cpdit_error *err, cpdit_status status, const char *where,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
cpdit_status cpdit_error_vset(cpdit_error *err, cpdit_status status, const char *where,
                              const char *fmt, va_list ap);

/* Prefix the existing message's `where` with an outer context ("transformer/config.json" →
 * "model/transformer/config.json"), keeping the status. Returns err->status. */
cpdit_status cpdit_error_prefix_where(cpdit_error *err, const char *outer);

/* Format "cpdit: <where>: <what>" (or "cpdit: <what>" when where is empty) into buf. */
const char *cpdit_error_format(const cpdit_error *err, char *buf, unsigned long size);

#ifdef __cplusplus
}
#endif
#endif
