/* model_config.h — one component's config.json (diffusers / transformers) with typed getters.
 *
 * A config is a JSON object read through jansson. Getters check the JSON type and report
 * errors as  where = the file's path,  what = "key \"num_layers\": expected an integer,
 * got string \"19\"". A JSON syntax error is reported as where = "path:line:col".
 *
 * "Missing" means the key is absent or its value is null (Python's None, as diffusers
 * writes e.g. "out_channels": null). The plain getters fail on a missing key; the
 * *_default getters return the default for it; both fail on a value of the wrong type.
 * Integers accept JSON reals with an integral value (2.0); reals accept integers.
 */
#ifndef CPDIT_MODEL_CONFIG_H
#define CPDIT_MODEL_CONFIG_H

#include <stdbool.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct json_t;

typedef struct model_config {
    struct json_t *root; /* the top-level JSON object (owned) */
    char *path;          /* the file it came from, or a name given by the caller (owned) */
} model_config;

/* Read path (a JSON object). Errors: file missing/unreadable (RUNTIME), invalid JSON or
 * not an object (INPUT, where = "path:line:col"). On error cfg is empty. */
cpdit_status model_config_load_file(model_config *cfg, const char *path, cpdit_error *err);

/* Parse JSON text held in memory; name stands in for the path in messages (built-in
 * configs, tests). */
cpdit_status model_config_load_string(model_config *cfg, const char *text, const char *name,
                                      cpdit_error *err);

void model_config_free(model_config *cfg);

/* 1 if key is present with a non-null value, else 0. */
int model_config_has(const model_config *cfg, const char *key);

/* "_class_name" (diffusers) or the first of "architectures" (transformers), else NULL. */
const char *model_config_class_name(const model_config *cfg);

cpdit_status model_config_get_int(const model_config *cfg, const char *key, int *out,
                                  cpdit_error *err);
cpdit_status model_config_get_int_default(const model_config *cfg, const char *key, int def,
                                          int *out, cpdit_error *err);
cpdit_status model_config_get_double(const model_config *cfg, const char *key, double *out,
                                     cpdit_error *err);
cpdit_status model_config_get_double_default(const model_config *cfg, const char *key,
                                             double def, double *out, cpdit_error *err);
cpdit_status model_config_get_bool(const model_config *cfg, const char *key, bool *out,
                                   cpdit_error *err);
cpdit_status model_config_get_bool_default(const model_config *cfg, const char *key, bool def,
                                           bool *out, cpdit_error *err);
/* *out points into cfg and lives until model_config_free. */
cpdit_status model_config_get_string(const model_config *cfg, const char *key, const char **out,
                                     cpdit_error *err);
cpdit_status model_config_get_string_default(const model_config *cfg, const char *key,
                                             const char *def, const char **out,
                                             cpdit_error *err);

/* An array of integers into out[0..max); *n gets its length. Errors: missing, not an array,
 * an element not an integer, more than max elements. */
cpdit_status model_config_get_int_array(const model_config *cfg, const char *key, int *out,
                                        int max, int *n, cpdit_error *err);
/* Same, but a missing key gives def[0..n_def). */
cpdit_status model_config_get_int_array_default(const model_config *cfg, const char *key,
                                                const int *def, int n_def, int *out, int max,
                                                int *n, cpdit_error *err);
cpdit_status model_config_get_double_array(const model_config *cfg, const char *key,
                                           double *out, int max, int *n, cpdit_error *err);
/* Strings point into cfg. */
cpdit_status model_config_get_string_array(const model_config *cfg, const char *key,
                                           const char **out, int max, int *n,
                                           cpdit_error *err);

/* Report a bad value of key found in cfg: where = cfg's path, what = "key \"KEY\": ...".
 * For validation code outside this file. Always returns CPDIT_ERR_INPUT. */
cpdit_status model_config_key_error(const model_config *cfg, const char *key, cpdit_error *err,
                                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Report a bad integer value of key in a config validated away from its file:
 * where = the config's path, what = "key \"KEY\": WHAT (got VALUE)". Returns CPDIT_ERR_INPUT. */
cpdit_status model_config_int_error(const char *where, const char *key, cpdit_error *err,
                                    const char *what, int value);

/* CPDIT_OK when cfg's class name (model_config_class_name) is absent or equals expected;
 * else CPDIT_ERR_INPUT naming "_class_name", what it is and what was expected. */
cpdit_status model_config_check_class(const model_config *cfg, const char *expected,
                                      cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
