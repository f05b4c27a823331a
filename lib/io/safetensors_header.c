/* safetensors_header.c — validating a safetensors buffer (header length, JSON header, tensor
 * table, data tiling) and looking tensors and metadata up in the result.
 *
 * Nothing here touches the file system: safetensors_read.c maps a file and calls
 * safetensors_parse_into(); the fuzz target calls safetensors_parse_buffer() on raw input.
 * Every offset is checked against the buffer before use, in 64-bit arithmetic with explicit
 * overflow checks, so no input can make the parser or a later read leave the buffer.
 */
#include "lib/io/safetensors_internal.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HEADER_LEN_BYTES 8    /* little-endian u64 before the JSON */
#define HEADER_MIN_BYTES 2    /* "{}" */
#define METADATA_KEY "__metadata__"
#define SHAPE_TEXT_MAX 160    /* "[a, b, ...]" in messages */

#define FAIL(...) cpdit_error_set(err, CPDIT_ERR_INPUT, f->path, __VA_ARGS__)

safetensors_file *safetensors_file_new(const char *label)
{
    safetensors_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->path = strdup(label ? label : "<buffer>");
    if (!f->path) {
        free(f);
        return NULL;
    }
    return f;
}

void safetensors_close(safetensors_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    if (f->root)
        json_decref(f->root);
    free(f->tensors);
    free(f->meta);
    free(f->path);
    free(f);
}

/* Length in bytes of the valid UTF-8 prefix of s[0..n); n when all of it is valid. Rejects
 * overlong forms, UTF-16 surrogates and code points above U+10FFFF. */
static size_t utf8_valid_prefix(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len, k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1fu; }
        else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0fu; }
        else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07u; }
        else return i;
        if (n - i < len)
            return i;
        for (k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return i;
            cp = (cp << 6) | (s[i + k] & 0x3fu);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
            return i;
        i += len;
    }
    return n;
}

const char *safetensors_shape_text(char *buf, size_t size, const int64_t *shape, int ndim,
                                   const char *brackets)
{
    size_t used = 0;
    int d;
    used += (size_t)snprintf(buf, size, "%c", brackets[0]);
    for (d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (used < size)
        snprintf(buf + used, size - used, "%c", brackets[1]);
    return buf;
}

/* Read a JSON non-negative integer into *out; 0 when it is not one. */
static int json_nonneg_int(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

/* The "shape" field → t->ndim, t->shape, t->nelem; nelem × element size must fit size_t. */
static cpdit_status parse_shape(safetensors_file *f, const char *name, const json_t *shape,
                                safetensors_tensor *t, cpdit_error *err)
{
    size_t i, n;
    uint64_t nelem = 1, nbytes;
    if (!json_is_array(shape))
        return FAIL("tensor \"%s\": \"shape\" must be a list of non-negative integers", name);
    n = json_array_size(shape);
    if (n > SAFETENSORS_MAX_DIMS)
        return FAIL("tensor \"%s\": \"shape\" has %zu dimensions, more than the %d supported",
                    name, n, SAFETENSORS_MAX_DIMS);
    for (i = 0; i < n; i++) {
        const json_t *v = json_array_get(shape, i);
        uint64_t dim;
        if (!json_is_integer(v))
            return FAIL("tensor \"%s\": \"shape\"[%zu] is not an integer", name, i);
        if (!json_nonneg_int(v, &dim))
            return FAIL("tensor \"%s\": \"shape\"[%zu] = %" JSON_INTEGER_FORMAT " is negative",
                        name, i, json_integer_value(v));
        t->shape[i] = (int64_t)dim;
        if (__builtin_mul_overflow(nelem, dim, &nelem))
            return FAIL("tensor \"%s\": the element count of its shape overflows 64 bits", name);
    }
    t->ndim = (int)n;
    if (__builtin_mul_overflow(nelem, (uint64_t)cpdit_dtype_size(t->dtype), &nbytes) ||
        nbytes > SIZE_MAX)
        return FAIL("tensor \"%s\": the byte size of its shape overflows", name);
    t->nelem = (size_t)nelem;
    t->nbytes = (size_t)nbytes;
    return CPDIT_OK;
}

/* One tensor entry {"dtype", "shape", "data_offsets"} → *t, with offsets checked against the
 * data region [data, data + data_len). */
static cpdit_status parse_entry(safetensors_file *f, const char *name, const json_t *entry,
                                const unsigned char *data, safetensors_tensor *t,
                                cpdit_error *err)
{
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    const char *key, *dtype_name;
    const json_t *value, *dtype, *shape, *offsets;
    uint64_t begin, end;
    char shp[SHAPE_TEXT_MAX];
    size_t i;
    cpdit_status st;

    t->name = name;
    t->file = f->path;
    if (!json_is_object(entry))
        return FAIL("tensor \"%s\": entry must be an object with \"dtype\", \"shape\" and "
                    "\"data_offsets\"", name);
    json_object_foreach((json_t *)entry, key, value) {
        int known = 0;
        for (i = 0; i < sizeof fields / sizeof fields[0]; i++)
            known |= strcmp(key, fields[i]) == 0;
        if (!known)
            return FAIL("tensor \"%s\": unexpected field \"%s\" (allowed: dtype, shape, "
                        "data_offsets)", name, key);
    }
    for (i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!json_object_get(entry, fields[i]))
            return FAIL("tensor \"%s\": missing field \"%s\"", name, fields[i]);
    dtype = json_object_get(entry, "dtype");
    shape = json_object_get(entry, "shape");
    offsets = json_object_get(entry, "data_offsets");

    if (!json_is_string(dtype))
        return FAIL("tensor \"%s\": \"dtype\" must be a string", name);
    dtype_name = json_string_value(dtype);
    t->dtype = cpdit_dtype_from_name(dtype_name);
    if (t->dtype == CPDIT_DTYPE_INVALID)
        return FAIL("tensor \"%s\": unknown dtype \"%s\"", name, dtype_name);
    if ((st = parse_shape(f, name, shape, t, err)) != CPDIT_OK)
        return st;

    if (!json_is_array(offsets) || json_array_size(offsets) != 2 ||
        !json_nonneg_int(json_array_get(offsets, 0), &begin) ||
        !json_nonneg_int(json_array_get(offsets, 1), &end))
        return FAIL("tensor \"%s\": \"data_offsets\" must be [begin, end], two non-negative "
                    "integers", name);
    if (end < begin)
        return FAIL("tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] end before begin",
                    name, begin, end);
    if (end > f->data_len)
        return FAIL("tensor \"%s\": data_offsets end %" PRIu64 " is past the end of the data "
                    "region (%zu bytes)", name, end, f->data_len);
    if (end - begin != t->nbytes)
        return FAIL("tensor \"%s\": shape %s of dtype %s needs %zu bytes but data_offsets "
                    "[%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
                    name, safetensors_shape_text(shp, sizeof shp, t->shape, t->ndim, "[]"),
                    cpdit_dtype_name(t->dtype), t->nbytes, begin, end, end - begin);
    t->offset = begin;
    t->data = data + begin;
    return CPDIT_OK;
}

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const safetensors_kv *)a)->key, ((const safetensors_kv *)b)->key);
}

/* "__metadata__": an object of strings (or null) → f->meta sorted by key. */
static cpdit_status parse_metadata(safetensors_file *f, const json_t *meta, cpdit_error *err)
{
    const char *key;
    json_t *value;
    if (json_is_null(meta))
        return CPDIT_OK;
    if (!json_is_object(meta))
        return FAIL("\"%s\" must be an object mapping strings to strings", METADATA_KEY);
    f->meta = calloc(json_object_size(meta) + 1, sizeof *f->meta);
    if (!f->meta)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, f->path, "out of memory");
    json_object_foreach((json_t *)meta, key, value) {
        if (!json_is_string(value))
            return FAIL("\"%s\" value for key \"%s\" is not a string", METADATA_KEY, key);
        f->meta[f->nmeta].key = key;
        f->meta[f->nmeta].value = json_string_value(value);
        f->nmeta++;
    }
    qsort(f->meta, f->nmeta, sizeof *f->meta, kv_cmp);
    return CPDIT_OK;
}

static int tensor_name_cmp(const void *a, const void *b)
{
    return strcmp(((const safetensors_tensor *)a)->name, ((const safetensors_tensor *)b)->name);
}

static int tensor_offset_cmp(const void *a, const void *b)
{
    const safetensors_tensor *x = *(const safetensors_tensor *const *)a;
    const safetensors_tensor *y = *(const safetensors_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The tensors must tile [0, data_len) exactly: sorted by offset, each begins where the
 * previous one ended. Zero-byte tensors may sit at any boundary. */
static cpdit_status check_tiling(safetensors_file *f, cpdit_error *err)
{
    const safetensors_tensor **order;
    const safetensors_tensor *prev = NULL;
    uint64_t covered = 0;
    size_t i;
    cpdit_status st = CPDIT_OK;
    if (f->count == 0) {
        if (f->data_len)
            return FAIL("bytes [0, %zu) of the data region belong to no tensor (the header "
                        "lists none)", f->data_len);
        return CPDIT_OK;
    }
    order = malloc(f->count * sizeof *order);
    if (!order)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, f->path, "out of memory");
    for (i = 0; i < f->count; i++)
        order[i] = &f->tensors[i];
    qsort(order, f->count, sizeof *order, tensor_offset_cmp);
    for (i = 0; i < f->count && st == CPDIT_OK; i++) {
        const safetensors_tensor *t = order[i];
        if (t->offset < covered)
            st = FAIL("tensors \"%s\" [%" PRIu64 ", %" PRIu64 ") and \"%s\" [%" PRIu64
                      ", %" PRIu64 ") overlap in the data region",
                      prev->name, prev->offset, prev->offset + prev->nbytes, t->name,
                      t->offset, t->offset + t->nbytes);
        else if (t->offset > covered)
            st = FAIL("bytes [%" PRIu64 ", %" PRIu64 ") of the data region belong to no tensor "
                      "(a hole before tensor \"%s\"); safetensors files must be fully indexed",
                      covered, t->offset, t->name);
        covered = t->offset + t->nbytes;
        if (t->nbytes)
            prev = t;
        else if (!prev)
            prev = t;
    }
    if (st == CPDIT_OK && covered != f->data_len)
        st = FAIL("bytes [%" PRIu64 ", %zu) at the end of the data region belong to no tensor; "
                  "safetensors files must be fully indexed", covered, f->data_len);
    free(order);
    return st;
}

cpdit_status safetensors_parse_into(safetensors_file *f, const unsigned char *buf, size_t len,
                                    cpdit_error *err)
{
    const unsigned char *header;
    uint64_t n = 0;
    size_t ok_prefix, ntensors, i = 0;
    json_error_t jerr;
    const char *key;
    json_t *value;
    cpdit_status st;

    if (len < HEADER_LEN_BYTES)
        return FAIL("file is %zu bytes, too short for the 8-byte header length", len);
    for (i = 0; i < HEADER_LEN_BYTES; i++)
        n |= (uint64_t)buf[i] << (8 * i);
    if (n < HEADER_MIN_BYTES)
        return FAIL("header length %" PRIu64 " is too small to hold a JSON object", n);
    if (n > SAFETENSORS_MAX_HEADER_BYTES)
        return FAIL("header length %" PRIu64 " exceeds the limit of %u bytes", n,
                    SAFETENSORS_MAX_HEADER_BYTES);
    if (n > len - HEADER_LEN_BYTES)
        return FAIL("header length %" PRIu64 " runs past the end of the file (%zu bytes)", n,
                    len);
    header = buf + HEADER_LEN_BYTES;
    f->header_len = n;
    f->data_len = len - HEADER_LEN_BYTES - (size_t)n;

    ok_prefix = utf8_valid_prefix(header, (size_t)n);
    if (ok_prefix != n)
        return FAIL("header is not valid UTF-8 (bad byte 0x%02x at header offset %zu)",
                    header[ok_prefix], ok_prefix);
    f->root = json_loadb((const char *)header, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->root)
        return FAIL("header is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                    jerr.column);
    if (!json_is_object(f->root))
        return FAIL("header must be a JSON object, not %s",
                    json_is_array(f->root) ? "an array" : "a scalar");

    ntensors = json_object_size(f->root);
    if (json_object_get(f->root, METADATA_KEY))
        ntensors--;
    f->tensors = calloc(ntensors + 1, sizeof *f->tensors);
    if (!f->tensors)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, f->path, "out of memory");
    json_object_foreach(f->root, key, value) {
        if (strcmp(key, METADATA_KEY) == 0)
            st = parse_metadata(f, value, err);
        else
            st = parse_entry(f, key, value, header + n, &f->tensors[f->count++], err);
        if (st != CPDIT_OK)
            return st;
    }
    qsort(f->tensors, f->count, sizeof *f->tensors, tensor_name_cmp);
    return check_tiling(f, err);
}

cpdit_status safetensors_parse_buffer(safetensors_file **out, const void *buf, size_t len,
                                      const char *label, cpdit_error *err)
{
    safetensors_file *f;
    cpdit_status st;
    *out = NULL;
    f = safetensors_file_new(label);
    if (!f)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, label, "out of memory");
    st = safetensors_parse_into(f, (const unsigned char *)buf, buf ? len : 0, err);
    if (st != CPDIT_OK) {
        safetensors_close(f);
        return st;
    }
    *out = f;
    return CPDIT_OK;
}

/* ---------------------------------------------------------------- lookups */

const char *safetensors_path(const safetensors_file *f)
{
    return f->path;
}

size_t safetensors_count(const safetensors_file *f)
{
    return f->count;
}

const safetensors_tensor *safetensors_tensor_at(const safetensors_file *f, size_t i)
{
    return i < f->count ? &f->tensors[i] : NULL;
}

const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name)
{
    safetensors_tensor key;
    if (!name || f->count == 0)
        return NULL;
    key.name = name;
    return bsearch(&key, f->tensors, f->count, sizeof *f->tensors, tensor_name_cmp);
}

size_t safetensors_metadata_count(const safetensors_file *f)
{
    return f->nmeta;
}

const char *safetensors_metadata_get(const safetensors_file *f, const char *key)
{
    safetensors_kv k;
    const safetensors_kv *hit;
    if (!key || f->nmeta == 0)
        return NULL;
    k.key = key;
    hit = bsearch(&k, f->meta, f->nmeta, sizeof *f->meta, kv_cmp);
    return hit ? hit->value : NULL;
}

int safetensors_metadata_at(const safetensors_file *f, size_t i, const char **key,
                            const char **value)
{
    if (i >= f->nmeta)
        return -1;
    *key = f->meta[i].key;
    *value = f->meta[i].value;
    return 0;
}
