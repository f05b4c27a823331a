/* safetensors_write.c — writing a safetensors file atomically (safetensors.h).
 *
 * Layout written: u64 header length N (little-endian), N bytes of compact JSON with sorted
 * keys padded with spaces so that N is a multiple of 8, then the tensors back to back ordered
 * by element size (largest first) and name. Since the data region starts at a multiple of 8,
 * each tensor starts at a multiple of its element size in the file.
 *
 * Atomicity comes from atomic_file.h: the bytes go to a temporary file in the destination's
 * folder, which is fsync'ed and renamed over the destination (then the folder is fsync'ed).
 * On any failure the temporary file is removed and the destination is left as it was.
 */
#include "lib/io/safetensors.h"

#include "lib/io/atomic_file.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_LEN_BYTES 8
#define HEADER_ALIGN 8            /* N is padded to a multiple of this */
#define CONVERT_CHUNK_ELEMS 16384 /* floats converted per write() when changing dtype */
#define METADATA_KEY "__metadata__"

typedef struct write_item {
    const safetensors_write_tensor *t;
    cpdit_dtype src;   /* dtype of t->data */
    size_t nelem;
    size_t nbytes;     /* in the file */
    uint64_t begin;    /* data_offsets */
} write_item;

/* Check one tensor description and fill its item (all but begin). */
static cpdit_status check_tensor(const char *path, const safetensors_write_tensor *t,
                                 write_item *it, cpdit_error *err)
{
    uint64_t nelem = 1, nbytes;
    int d;
    if (!t->name)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "a tensor has no name");
    if (strcmp(t->name, METADATA_KEY) == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "\"%s\" cannot be a tensor name",
                               METADATA_KEY);
    if (cpdit_dtype_size(t->dtype) == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "tensor \"%s\": invalid dtype",
                               t->name);
    it->t = t;
    it->src = t->src_dtype == CPDIT_DTYPE_INVALID ? t->dtype : t->src_dtype;
    if (it->src != t->dtype && !(it->src == CPDIT_DTYPE_F32 && cpdit_dtype_is_float(t->dtype)))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "tensor \"%s\": cannot write dtype %s from %s data (only F32 "
                               "data can be converted, to float dtypes)",
                               t->name, cpdit_dtype_name(t->dtype), cpdit_dtype_name(it->src));
    if (t->ndim < 0 || t->ndim > SAFETENSORS_MAX_DIMS || (t->ndim > 0 && !t->shape))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "tensor \"%s\": bad rank %d",
                               t->name, t->ndim);
    for (d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                                   "tensor \"%s\": dimension %d is negative (%" PRId64 ")",
                                   t->name, d, t->shape[d]);
        if (__builtin_mul_overflow(nelem, (uint64_t)t->shape[d], &nelem))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                                   "tensor \"%s\": element count overflows", t->name);
    }
    if (__builtin_mul_overflow(nelem, (uint64_t)cpdit_dtype_size(t->dtype), &nbytes) ||
        nbytes > SIZE_MAX / 2)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "tensor \"%s\": byte size overflows",
                               t->name);
    if (nelem > 0 && !t->data)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "tensor \"%s\": no data", t->name);
    it->nelem = (size_t)nelem;
    it->nbytes = (size_t)nbytes;
    return CPDIT_OK;
}

static int item_name_cmp(const void *a, const void *b)
{
    return strcmp(((const write_item *)a)->t->name, ((const write_item *)b)->t->name);
}

/* Larger elements first, then by name. */
static int item_layout_cmp(const void *a, const void *b)
{
    const write_item *x = a, *y = b;
    size_t sx = cpdit_dtype_size(x->t->dtype), sy = cpdit_dtype_size(y->t->dtype);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

/* The header JSON for the items (offsets set) and metadata: a malloc'ed string (free()), or
 * NULL with err set. */
static char *build_header(const char *path, const write_item *items, size_t n,
                          const safetensors_kv *meta, size_t nmeta, cpdit_error *err)
{
    json_t *root = json_object(), *m;
    char *text = NULL;
    size_t i;
    int d;
    if (!root)
        goto oom;
    if (nmeta) {
        m = json_object();
        if (!m || json_object_set_new(root, METADATA_KEY, m) != 0)
            goto oom;
        for (i = 0; i < nmeta; i++) {
            if (!meta[i].key || !meta[i].value || json_object_get(m, meta[i].key)) {
                cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                                "metadata entry %zu: missing or duplicate key, or no value", i);
                goto fail;
            }
            if (json_object_set_new(m, meta[i].key, json_string(meta[i].value)) != 0) {
                cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                                "metadata \"%s\": key or value is not valid UTF-8", meta[i].key);
                goto fail;
            }
        }
    }
    for (i = 0; i < n; i++) {
        const safetensors_write_tensor *t = items[i].t;
        json_t *shape = json_array(), *e;
        for (d = 0; shape && d < t->ndim; d++)
            if (json_array_append_new(shape, json_integer((json_int_t)t->shape[d])) != 0)
                goto oom; /* (leaks shape only when out of memory) */
        /* "o" steals shape, also on failure */
        e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", cpdit_dtype_name(t->dtype), "shape",
                      shape, "data_offsets", (json_int_t)items[i].begin,
                      (json_int_t)(items[i].begin + items[i].nbytes));
        if (!e)
            goto oom;
        if (json_object_set_new(root, t->name, e) != 0) { /* checks the key's UTF-8 */
            cpdit_error_set(err, CPDIT_ERR_INPUT, path, "tensor name \"%s\" is not valid UTF-8",
                            t->name);
            goto fail;
        }
    }
    text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (text)
        goto done;
oom:
    cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory building the header JSON");
fail:
done:
    json_decref(root);
    return text;
}

/* Tensor data in file dtype: copied, or converted from f32 a chunk at a time into chunk
 * (CONVERT_CHUNK_ELEMS × 8 bytes). 0 on success, -1 on a write error. */
static int write_tensor_data(FILE *fp, const write_item *it, unsigned char *chunk)
{
    const float *src = it->t->data;
    const size_t es = cpdit_dtype_size(it->t->dtype);
    size_t done;
    if (it->nelem == 0)
        return 0;
    if (it->src == it->t->dtype)
        return fwrite(it->t->data, 1, it->nbytes, fp) == it->nbytes ? 0 : -1;
    for (done = 0; done < it->nelem; done += CONVERT_CHUNK_ELEMS) {
        size_t k = it->nelem - done < CONVERT_CHUNK_ELEMS ? it->nelem - done : CONVERT_CHUNK_ELEMS;
        cpdit_dtype_from_f32(chunk, it->t->dtype, src + done, k, NULL); /* checked earlier */
        if (fwrite(chunk, es, k, fp) != k)
            return -1;
    }
    return 0;
}

#define WRITE_NO_MEMORY (-2)

/* The whole file: header length, header padded with spaces, data in items order.
 * 0 on success, -1 on a write error (ferror(fp) is then set), WRITE_NO_MEMORY. */
static int write_file_body(FILE *fp, const char *header, const write_item *items, size_t n)
{
    size_t hlen = strlen(header), padded = (hlen + HEADER_ALIGN - 1) / HEADER_ALIGN * HEADER_ALIGN;
    unsigned char lenbytes[HEADER_LEN_BYTES], *chunk;
    static const char spaces[HEADER_ALIGN] = "        ";
    size_t i;
    int rc;
    for (i = 0; i < HEADER_LEN_BYTES; i++)
        lenbytes[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    chunk = malloc(CONVERT_CHUNK_ELEMS * sizeof(double));
    if (!chunk)
        return WRITE_NO_MEMORY;
    rc = fwrite(lenbytes, 1, sizeof lenbytes, fp) != sizeof lenbytes ||
         fwrite(header, 1, hlen, fp) != hlen ||
         fwrite(spaces, 1, padded - hlen, fp) != padded - hlen;
    for (i = 0; i < n && rc == 0; i++)
        rc = write_tensor_data(fp, &items[i], chunk);
    free(chunk);
    return rc ? -1 : 0;
}

cpdit_status safetensors_write(const char *path, const safetensors_write_tensor *tensors,
                               size_t ntensors, const safetensors_kv *metadata, size_t nmeta,
                               cpdit_error *err)
{
    write_item *items;
    char *header = NULL;
    uint64_t offset = 0;
    size_t i;
    cpdit_status st = CPDIT_OK;
    atomic_file af;

    items = calloc(ntensors + 1, sizeof *items);
    if (!items)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    for (i = 0; i < ntensors && st == CPDIT_OK; i++)
        st = check_tensor(path, &tensors[i], &items[i], err);
    if (st == CPDIT_OK && ntensors > 1) {
        qsort(items, ntensors, sizeof *items, item_name_cmp);
        for (i = 1; i < ntensors && st == CPDIT_OK; i++)
            if (strcmp(items[i - 1].t->name, items[i].t->name) == 0)
                st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "tensor \"%s\" given twice",
                                     items[i].t->name);
    }
    if (st != CPDIT_OK) {
        free(items);
        return st;
    }
    qsort(items, ntensors, sizeof *items, item_layout_cmp);
    for (i = 0; i < ntensors; i++) {
        items[i].begin = offset;
        offset += items[i].nbytes;
    }
    header = build_header(path, items, ntensors, metadata, nmeta, err);
    if (!header) {
        free(items);
        return err ? err->status : CPDIT_ERR_RUNTIME;
    }

    st = atomic_file_begin(&af, path, err);
    if (st == CPDIT_OK) {
        if (write_file_body(af.fp, header, items, ntensors) != WRITE_NO_MEMORY) {
            st = atomic_file_commit(&af, err); /* also reports earlier write errors on af.fp */
        } else {
            atomic_file_abort(&af);
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
        }
    }
    free(header);
    free(items);
    return st;
}
