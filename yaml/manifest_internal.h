/* manifest_internal.h — the small document tree between the parsers and the schema.
 *
 * manifest_parse.c builds it from libyaml events (with 1-based line:col marks), the JSONL
 * prompts reader builds it from jansson values (line only), and manifest_schema.c checks it
 * against the schema and fills a manifest. Scalars carry their resolved type: quoted YAML
 * scalars are strings; plain ones are typed by the YAML 1.2 core schema (null, true/false,
 * decimal integers, floats), everything else is a string.
 */
#ifndef CPDIT_MANIFEST_INTERNAL_H
#define CPDIT_MANIFEST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "yaml/manifest.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Deepest nesting accepted (the schema needs 4: top / prompts / prompt / sizes / size). */
#define MF_DEPTH_MAX 32
/* Longest piece of a value quoted back in an error message, characters. */
#define MF_QUOTE_MAX 40

typedef enum mf_kind {
    MF_NULL = 0,
    MF_BOOL,
    MF_INT,
    MF_FLOAT,
    MF_STRING,
    MF_MAP, /* items: key0, value0, key1, value1, ... (keys are scalars) */
    MF_SEQ
} mf_kind;

typedef struct mf_node {
    mf_kind kind;
    manifest_mark mark;
    char *text; /* scalars: NUL-terminated value (strings) or the text as written */
    size_t len; /* bytes of text */
    struct mf_node *items;
    size_t n_items; /* MAP: 2 x pairs */
    size_t cap_items;
} mf_node;

/* Where errors point: the file name and the error record. */
typedef struct mf_ctx {
    const char *file;
    cpdit_error *err;
} mf_ctx;

/* ---- tree (manifest_node.c) */
void mf_node_free(mf_node *n); /* frees what n owns, not n itself */
/* Append a zeroed child to a MAP/SEQ node; NULL when out of memory. */
mf_node *mf_node_push(mf_node *parent);
size_t mf_map_size(const mf_node *map);
const mf_node *mf_map_key(const mf_node *map, size_t i);
const mf_node *mf_map_value(const mf_node *map, size_t i);
/* The type of a plain (unquoted) YAML scalar. */
mf_kind mf_plain_kind(const char *text, size_t len);

/* A jansson value (json_t *) as a tree; every mark is (line, 0). Depth-limited. */
cpdit_status mf_node_from_json(const void *json, int line, mf_node *out, mf_ctx *c);

/* ---- errors and typed reads (manifest_node.c) */
/* err := CPDIT_ERR_INPUT, where "FILE:LINE:COL" (or "FILE:LINE" when col is 0). */
cpdit_status mf_error(mf_ctx *c, manifest_mark at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* At most MF_QUOTE_MAX characters of s (n bytes) for a message, quotes and control bytes
 * escaped, "..." when cut; buf needs 4 * MF_QUOTE_MAX + 8 bytes. */
void mf_quote(const char *s, size_t n, char *buf, size_t size);
/* "string \"abc\"", "integer 5", "number 2.5", "boolean true", "null", "a mapping", "a list". */
const char *mf_describe(const mf_node *n, char *buf, size_t size);
/* Integer in [lo, hi]. "expected an integer, got ..." / "... must be between lo and hi". */
cpdit_status mf_get_int(mf_ctx *c, const mf_node *n, const char *what, int64_t lo, int64_t hi,
                        int64_t *out);
/* Finite number in [lo, hi] (integers accepted). */
cpdit_status mf_get_number(mf_ctx *c, const mf_node *n, const char *what, double lo, double hi,
                           double *out);
cpdit_status mf_get_bool(mf_ctx *c, const mf_node *n, const char *what, int *out);
/* Text of a string, integer or float scalar (not null, not boolean): a new copy. */
cpdit_status mf_get_string(mf_ctx *c, const mf_node *n, const char *what, char **out);
/* n must be of kind k (MF_MAP or MF_SEQ): "expected a mapping, got ...". */
cpdit_status mf_expect(mf_ctx *c, const mf_node *n, mf_kind k, const char *what);

/* The closest of names[0..count) to word by edit distance, or NULL when none is close. */
const char *mf_closest(const char *word, const char *const *names, size_t count);

/* ---- YAML (manifest_parse.c) */
/* Bytes → tree: pre-checks (UTF-8, NUL, tabs), then libyaml events; rejects anchors,
 * aliases, tags, non-scalar keys, more than one document, an empty stream. */
cpdit_status mf_parse_yaml(const char *bytes, size_t len, mf_node *root, mf_ctx *c);

/* ---- schema (manifest_schema.c) */
/* Fill m (already zeroed, with path/base_dir set) from the document root. */
cpdit_status mf_schema_manifest(const mf_node *root, manifest *m, unsigned flags, mf_ctx *c);
/* One prompt: a string scalar, or a mapping with `prompt:` and overrides. */
cpdit_status mf_schema_prompt(const mf_node *n, manifest_prompt *out, mf_ctx *c);
void mf_settings_free(manifest_settings *s);
void mf_prompt_free(manifest_prompt *p);

#ifdef __cplusplus
}
#endif
#endif
