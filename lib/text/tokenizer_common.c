/* tokenizer_common.c — file reading and id lists shared by the tokenizers. */
#include "lib/text/tokenizer_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOK_IDS_MIN_CAP 64

int tok_ids_push(tok_ids *a, int32_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : TOK_IDS_MIN_CAP;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

static char *join_path(const char *dir, const char *name)
{
    size_t dl = strlen(dir), nl = strlen(name);
    char *p = malloc(dl + nl + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, dl);
    size_t k = dl;
    if (dl > 0 && dir[dl - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, nl + 1);
    return p;
}

int tokenizer_file_exists(const char *dir, const char *name)
{
    char *path = join_path(dir, name);
    struct stat sb;
    int ok = path && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
    free(path);
    return ok;
}

cpdit_status tokenizer_read_file(const char *dir, const char *name, char **data, size_t *len,
                                 cpdit_error *err)
{
    *data = NULL;
    *len = 0;
    char *path = join_path(dir, name);
    if (!path)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, name, "out of memory");
    cpdit_status st = CPDIT_OK;
    char *buf = NULL;
    struct stat sb;
    FILE *f = NULL;
    if (stat(path, &sb) != 0) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "missing (%s)", strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "not a regular file");
        goto done;
    }
    f = fopen(path, "rb");
    if (!f) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "cannot open: %s", strerror(errno));
        goto done;
    }
    size_t size = (size_t)sb.st_size;
    buf = malloc(size + 1);
    if (!buf) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory (%zu bytes)", size);
        goto done;
    }
    size_t got = fread(buf, 1, size, f);
    if (got != size || ferror(f)) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "read %zu of %zu bytes", got, size);
        goto done;
    }
    buf[size] = '\0';
    *data = buf;
    *len = size;
    buf = NULL;
done:
    if (f)
        fclose(f);
    free(buf);
    free(path);
    return st;
}
