/* tokenizer_common.h — small pieces both tokenizers use: reading a file of a tokenizer folder
 * into memory, and a growable list of token ids. */
#ifndef CPDIT_TOKENIZER_COMMON_H
#define CPDIT_TOKENIZER_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A growable array of token ids; start it as {0}, free .v when done. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

/* Append id; 0, or -1 when out of memory (the list is unchanged then). */
int tok_ids_push(tok_ids *a, int32_t id);

/* Read dir/name whole into a new NUL-terminated buffer (*data, *len bytes without the NUL;
 * the caller frees it). Errors (INPUT, where = the path): missing, not a regular file, or
 * unreadable; out of memory (RUNTIME). */
cpdit_status tokenizer_read_file(const char *dir, const char *name, char **data, size_t *len,
                                 cpdit_error *err);

/* 1 when dir/name exists as a regular file. */
int tokenizer_file_exists(const char *dir, const char *name);

#ifdef __cplusplus
}
#endif
#endif
