/* safetensors_read.c — opening a safetensors file (read-only mmap, then the validation of
 * safetensors_header.c) and reading tensors as f32. */
#include "lib/io/safetensors_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/io/regular_file.h"

#define HEADER_LEN_BYTES 8

cpdit_status safetensors_open(safetensors_file **out, const char *path, cpdit_error *err)
{
    safetensors_file *f;
    struct stat sb;
    cpdit_status st;
    void *map;
    int fd;

    *out = NULL;
    /* a FIFO or device in place of the file is refused without being opened */
    if ((st = cpdit_open_regular(path, "cannot open", &fd, err)))
        return st;
    if (fstat(fd, &sb) != 0) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot stat: %s", strerror(errno));
        close(fd);
        return st;
    }
    if ((uint64_t)sb.st_size < HEADER_LEN_BYTES) { /* also avoids mmap of 0 bytes */
        close(fd);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "file is %lld bytes, too short for the 8-byte header length",
                               (long long)sb.st_size);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "file too large to map");
    }
    map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping keeps the file */
    if (map == MAP_FAILED)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot mmap %lld bytes: %s",
                               (long long)sb.st_size, strerror(errno));
    f = safetensors_file_new(path);
    if (!f) {
        munmap(map, (size_t)sb.st_size);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    f->map = map;
    f->map_len = (size_t)sb.st_size;
    st = safetensors_parse_into(f, map, f->map_len, err);
    if (st != CPDIT_OK) {
        safetensors_close(f);
        return st;
    }
    *out = f;
    return CPDIT_OK;
}

cpdit_status safetensors_tensor_read_f32(const safetensors_tensor *t, float *dst, size_t n,
                                         cpdit_error *err)
{
    cpdit_status st;
    if (n != t->nelem)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, t->file,
                               "tensor \"%s\" has %zu elements but the destination holds %zu",
                               t->name, t->nelem, n);
    st = cpdit_dtype_to_f32(dst, t->data, t->dtype, n, err);
    if (st != CPDIT_OK)
        return cpdit_error_set(err, st, t->file, "tensor \"%s\": cannot convert dtype %s to F32",
                               t->name, cpdit_dtype_name(t->dtype));
    return CPDIT_OK;
}

cpdit_status safetensors_read_f32(const safetensors_file *f, const char *name, float *dst,
                                  size_t n, cpdit_error *err)
{
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, f->path, "no tensor named \"%s\"", name);
    return safetensors_tensor_read_f32(t, dst, n, err);
}
