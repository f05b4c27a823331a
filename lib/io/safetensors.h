/* safetensors.h — reading, validating and writing safetensors files and sharded checkpoints.
 *
 * File format: 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data
 * region. The JSON object maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (byte offsets relative to the data region) and may hold "__metadata__", a
 * string → string map.
 *
 * The reader checks everything and never reads outside the buffer, whatever the input:
 *   - N: at least 2, at most 100 MB (as the reference implementation), within the file;
 *   - the header: valid UTF-8, valid JSON (no duplicate keys), an object;
 *   - every entry: exactly the three fields, a known dtype, a shape of at most
 *     SAFETENSORS_MAX_DIMS non-negative integers, an element count and byte size that do not
 *     overflow, data_offsets = two integers with begin <= end <= data size and
 *     end - begin = elements × element size;
 *   - the tensors tile the data region exactly: no overlap, no hole, no trailing bytes. This
 *     is what huggingface/safetensors enforces ("the byte buffer must be fully indexed");
 *     a hole is reported with the byte range and the tensor after it.
 *   - "__metadata__" is an object of strings (null is accepted as "no metadata").
 * Errors are CPDIT_ERR_INPUT with where = the file path and what naming the tensor.
 *
 * Tensors are listed in name order (strcmp). Data pointers point into the file's memory map
 * and stay valid until safetensors_close(); they may be unaligned (use cpdit_dtype_to_f32 or
 * memcpy). If a mapped file is truncated by another process while open, reading its data
 * raises SIGBUS: the map cannot protect against that.
 */
#ifndef CPDIT_SAFETENSORS_H
#define CPDIT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "lib/core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_MAX_HEADER_BYTES 100000000u /* 100 MB, the reference implementation's cap */

typedef struct safetensors_tensor {
    const char *name;
    const char *file;                   /* path (or label) of the file it lives in */
    cpdit_dtype dtype;
    int ndim;                           /* 0 = scalar (one element) */
    int64_t shape[SAFETENSORS_MAX_DIMS];
    size_t nelem;                       /* product of shape */
    const void *data;                   /* nbytes bytes inside the map, any alignment */
    size_t nbytes;                      /* nelem × cpdit_dtype_size(dtype) */
    uint64_t offset;                    /* begin of data_offsets (within the data region) */
} safetensors_tensor;

typedef struct safetensors_file safetensors_file;

/* ---------------------------------------------------------------- reading one file */

/* Map the file at path read-only and validate it (see above). On success *out owns the map. */
cpdit_status safetensors_open(safetensors_file **out, const char *path, cpdit_error *err);

/* Validate a whole safetensors file held in memory: buf = len bytes (header length, header,
 * data). The result references buf, which must outlive it. label names the buffer in error
 * messages and in safetensors_tensor.file (may be NULL: "<buffer>"). Used by
 * safetensors_open and by the fuzz target. */
cpdit_status safetensors_parse_buffer(safetensors_file **out, const void *buf, size_t len,
                                      const char *label, cpdit_error *err);

/* Free f (NULL is fine) and unmap its file if it owns one. */
void safetensors_close(safetensors_file *f);

const char *safetensors_path(const safetensors_file *f);

/* A shape for messages: "[2, 3, 4]" with brackets "[]", "(2, 3, 4)" with "()" (the first and
 * second character of brackets open and close it). Returns buf (truncated to size). */
const char *safetensors_shape_text(char *buf, size_t size, const int64_t *shape, int ndim,
                                   const char *brackets);
size_t safetensors_count(const safetensors_file *f);

/* i-th tensor in name order, i < count; NULL when out of range. */
const safetensors_tensor *safetensors_tensor_at(const safetensors_file *f, size_t i);

/* The tensor with this exact name, or NULL (binary search, O(log count)). */
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

/* "__metadata__" entries in key order. get returns NULL for a missing key. */
size_t safetensors_metadata_count(const safetensors_file *f);
const char *safetensors_metadata_get(const safetensors_file *f, const char *key);
/* i-th entry, i < metadata_count; returns 0 and sets *key, *value, or -1 when out of range. */
int safetensors_metadata_at(const safetensors_file *f, size_t i, const char **key,
                            const char **value);

/* Convert tensor t to f32 into dst, which holds n floats; n must equal t->nelem. Every dtype
 * is accepted (see cpdit_dtype_to_f32). Errors: CPDIT_ERR_INPUT with where = t->file. */
cpdit_status safetensors_tensor_read_f32(const safetensors_tensor *t, float *dst, size_t n,
                                         cpdit_error *err);

/* safetensors_find + safetensors_tensor_read_f32; a missing name is CPDIT_ERR_INPUT. */
cpdit_status safetensors_read_f32(const safetensors_file *f, const char *name, float *dst,
                                  size_t n, cpdit_error *err);

/* ---------------------------------------------------------------- sharded checkpoints
 * A set is one file or all shards of a "*.safetensors.index.json" ({"metadata": {...},
 * "weight_map": {tensor: shard file}}), shard names relative to the index's folder. Opening
 * checks that every shard opens and validates, that every weight_map tensor is in its shard,
 * that no tensor is in two shards, and that every tensor of a shard is in the weight_map.
 * Shard names must be relative and must not contain "..". Other top-level keys of the index
 * are ignored. */
typedef struct safetensors_set safetensors_set;

/* path: a .safetensors file, an index .json, or a folder, in which the first of
 * diffusion_pytorch_model.safetensors, diffusion_pytorch_model.safetensors.index.json,
 * model.safetensors, model.safetensors.index.json that exists is opened. */
cpdit_status safetensors_set_open(safetensors_set **out, const char *path, cpdit_error *err);
void safetensors_set_close(safetensors_set *s);

/* The file that was opened: the single .safetensors or the index .json. */
const char *safetensors_set_path(const safetensors_set *s);

/* Tensors across all shards in name order. */
size_t safetensors_set_count(const safetensors_set *s);
const safetensors_tensor *safetensors_set_tensor_at(const safetensors_set *s, size_t i);
const safetensors_tensor *safetensors_set_find(const safetensors_set *s, const char *name);
cpdit_status safetensors_set_read_f32(const safetensors_set *s, const char *name, float *dst,
                                      size_t n, cpdit_error *err);

/* The shard files, in shard-name order (one for a single file). */
size_t safetensors_set_file_count(const safetensors_set *s);
const safetensors_file *safetensors_set_file_at(const safetensors_set *s, size_t i);

/* ---------------------------------------------------------------- writing */

typedef struct safetensors_write_tensor {
    const char *name;
    cpdit_dtype dtype;     /* stored in the file */
    int ndim;              /* 0..SAFETENSORS_MAX_DIMS */
    const int64_t *shape;  /* ndim non-negative sizes */
    const void *data;      /* nelem elements of src_dtype, row-major (NULL only if nelem = 0) */
    cpdit_dtype src_dtype; /* dtype of data: CPDIT_DTYPE_INVALID (0) or == dtype to copy bytes,
                              CPDIT_DTYPE_F32 to convert to a float dtype while writing */
} safetensors_write_tensor;

typedef struct safetensors_kv {
    const char *key;
    const char *value;
} safetensors_kv;

/* Write a safetensors file at path: header JSON with sorted keys and compact separators,
 * padded with spaces to a multiple of 8 bytes; tensor data ordered by element size (largest
 * first) then name, so that every tensor is aligned to its element size in the file. The file
 * is written to a temporary name in the same folder, fsync'ed, then renamed into place: no
 * partial file is ever visible under path. metadata: nmeta key/value pairs (may be NULL).
 * Errors: CPDIT_ERR_INPUT for bad arguments (duplicate names, "__metadata__" as a name, a bad
 * dtype or shape, missing data, an unsupported conversion), CPDIT_ERR_RUNTIME for I/O. */
cpdit_status safetensors_write(const char *path, const safetensors_write_tensor *tensors,
                               size_t ntensors, const safetensors_kv *metadata, size_t nmeta,
                               cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
