/* safetensors_internal.h — the layout of safetensors_file, shared by the header parser
 * (safetensors_header.c) and the file reader (safetensors_read.c). Not installed. */
#ifndef CPDIT_SAFETENSORS_INTERNAL_H
#define CPDIT_SAFETENSORS_INTERNAL_H

#include "lib/io/safetensors.h"

struct json_t;

struct safetensors_file {
    char *path;                  /* label used in messages and in safetensors_tensor.file */
    void *map;                   /* our mmap of the file, NULL for a caller's buffer */
    size_t map_len;
    struct json_t *root;         /* parsed header: owns the name/key/value strings */
    safetensors_tensor *tensors; /* count entries, sorted by name */
    size_t count;
    safetensors_kv *meta;        /* nmeta entries, sorted by key */
    size_t nmeta;
    uint64_t header_len;         /* N, the JSON's byte length */
    size_t data_len;             /* bytes of the data region */
};

/* Validate buf (len bytes: header length, header, data) into the already allocated f, whose
 * path is set. On failure f holds partial state that safetensors_close() releases. */
cpdit_status safetensors_parse_into(safetensors_file *f, const unsigned char *buf, size_t len,
                                    cpdit_error *err);

/* Allocate an empty file record labelled label (NULL → "<buffer>"); NULL when out of memory. */
safetensors_file *safetensors_file_new(const char *label);

#endif
