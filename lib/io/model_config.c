/* model_config.c — config.json through jansson, typed getters (see model_config.h). */
#include "lib/io/model_config.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/io/regular_file.h"

/* How much of a wrong string value to quote in a message. */
#define QUOTE_MAX 40

static void cfg_zero(model_config *cfg)
{
    cfg->root = NULL;
    cfg->path = NULL;
}

void model_config_free(model_config *cfg)
{
    if (!cfg)
        return;
    if (cfg->root)
        json_decref(cfg->root);
    free(cfg->path);
    cfg_zero(cfg);
}

static cpdit_status syntax_error(cpdit_error *err, const char *name, const json_error_t *je)
{
    char where[CPDIT_ERROR_WHERE_MAX];
    if (je->line > 0 && je->column > 0)
        snprintf(where, sizeof where, "%s:%d:%d", name, je->line, je->column);
    else if (je->line > 0) /* at the end of a line (or of the file): no column to name */
        snprintf(where, sizeof where, "%s:%d", name, je->line);
    else
        snprintf(where, sizeof where, "%s", name);
    return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "invalid JSON: %s", je->text);
}

static cpdit_status adopt(model_config *cfg, json_t *root, const char *name, cpdit_error *err)
{
    if (!json_is_object(root)) {
        json_decref(root);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, name,
                               "expected a JSON object ({...}) at the top level");
    }
    cfg->path = strdup(name);
    if (!cfg->path) {
        json_decref(root);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, name, "out of memory");
    }
    cfg->root = root;
    return CPDIT_OK;
}

cpdit_status model_config_load_file(model_config *cfg, const char *path, cpdit_error *err)
{
    cfg_zero(cfg);
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "file not found");
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot read: %s", strerror(errno));
    }
    if (S_ISDIR(st.st_mode))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "is a folder, expected a JSON file");
    if (S_ISREG(st.st_mode) && st.st_size == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "the file is empty; expected a "
                               "JSON object ({...})");
    /* a FIFO or device is refused without being opened (it could block forever) */
    FILE *f = cpdit_fopen_regular(path, "cannot read", err);
    if (!f)
        return err ? err->status : CPDIT_ERR_INPUT;
    json_error_t je;
    json_t *root = json_loadf(f, 0, &je);
    fclose(f);
    if (!root)
        return syntax_error(err, path, &je);
    return adopt(cfg, root, path, err);
}

cpdit_status model_config_load_string(model_config *cfg, const char *text, const char *name,
                                      cpdit_error *err)
{
    cfg_zero(cfg);
    json_error_t je;
    json_t *root = json_loads(text ? text : "", 0, &je);
    if (!root)
        return syntax_error(err, name, &je);
    return adopt(cfg, root, name, err);
}

static json_t *lookup(const model_config *cfg, const char *key)
{
    json_t *v = cfg && cfg->root ? json_object_get(cfg->root, key) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

int model_config_has(const model_config *cfg, const char *key)
{
    return lookup(cfg, key) != NULL;
}

const char *model_config_class_name(const model_config *cfg)
{
    json_t *v = lookup(cfg, "_class_name");
    if (json_is_string(v))
        return json_string_value(v);
    v = lookup(cfg, "architectures");
    if (json_is_array(v) && json_is_string(json_array_get(v, 0)))
        return json_string_value(json_array_get(v, 0));
    return NULL;
}

cpdit_status model_config_key_error(const model_config *cfg, const char *key, cpdit_error *err,
                                    const char *fmt, ...)
{
    char msg[CPDIT_ERROR_WHAT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cpdit_error_set(err, CPDIT_ERR_INPUT, cfg && cfg->path ? cfg->path : "",
                           "key \"%s\": %s", key, msg);
}

cpdit_status model_config_int_error(const char *where, const char *key, cpdit_error *err,
                                    const char *what, int value)
{
    return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "key \"%s\": %s (got %d)", key, what,
                           value);
}

cpdit_status model_config_check_class(const model_config *cfg, const char *expected,
                                      cpdit_error *err)
{
    const char *cls = model_config_class_name(cfg);
    if (cls && strcmp(cls, expected) != 0)
        return model_config_key_error(cfg, "_class_name", err,
                                      "is \"%s\", expected \"%s\" (wrong component folder?)",
                                      cls, expected);
    return CPDIT_OK;
}

/* A short description of a JSON value for "got ..." messages. */
static void describe(const json_t *v, char *buf, size_t size)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: snprintf(buf, size, "an object"); break;
    case JSON_ARRAY: snprintf(buf, size, "an array of %zu", json_array_size(v)); break;
    case JSON_STRING:
        snprintf(buf, size, "string \"%.*s%s\"", QUOTE_MAX, json_string_value(v),
                 json_string_length(v) > QUOTE_MAX ? "..." : "");
        break;
    case JSON_INTEGER: snprintf(buf, size, "integer %lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: snprintf(buf, size, "real number %g", json_real_value(v)); break;
    case JSON_TRUE: snprintf(buf, size, "true"); break;
    case JSON_FALSE: snprintf(buf, size, "false"); break;
    default: snprintf(buf, size, "null"); break;
    }
}

static cpdit_status type_error(const model_config *cfg, const char *key, const char *expected,
                               const json_t *got, cpdit_error *err)
{
    char what[QUOTE_MAX + 64];
    if (got)
        describe(got, what, sizeof what);
    else
        snprintf(what, sizeof what, "null");
    return model_config_key_error(cfg, key, err, "expected %s, got %s", expected, what);
}

static cpdit_status missing(const model_config *cfg, const char *key, const char *expected,
                            cpdit_error *err)
{
    json_t *raw = cfg && cfg->root ? json_object_get(cfg->root, key) : NULL;
    if (raw) /* present but null */
        return type_error(cfg, key, expected, raw, err);
    return model_config_key_error(cfg, key, err, "missing (expected %s)", expected);
}

/* v (not NULL) as an int. label: the key, or "key[i]" for array elements. */
static cpdit_status to_int(const model_config *cfg, const char *label, const json_t *v,
                           int *out, cpdit_error *err)
{
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < INT_MIN || i > INT_MAX)
            return model_config_key_error(cfg, label, err, "%lld is out of range for an integer",
                                          (long long)i);
        *out = (int)i;
        return CPDIT_OK;
    }
    double d = json_is_real(v) ? json_real_value(v) : NAN;
    if (d == floor(d)) { /* an integral real; NaN (and non-reals) fail the test */
        if (d < INT_MIN || d > INT_MAX)
            return model_config_key_error(cfg, label, err, "%g is out of range for an integer", d);
        *out = (int)d;
        return CPDIT_OK;
    }
    return type_error(cfg, label, "an integer", v, err);
}

cpdit_status model_config_get_int(const model_config *cfg, const char *key, int *out,
                                  cpdit_error *err)
{
    json_t *v = lookup(cfg, key);
    if (!v)
        return missing(cfg, key, "an integer", err);
    return to_int(cfg, key, v, out, err);
}

cpdit_status model_config_get_int_default(const model_config *cfg, const char *key, int def,
                                          int *out, cpdit_error *err)
{
    json_t *v = lookup(cfg, key);
    if (!v) {
        *out = def;
        return CPDIT_OK;
    }
    return to_int(cfg, key, v, out, err);
}

static cpdit_status to_double(const model_config *cfg, const char *label, const json_t *v,
                              double *out, cpdit_error *err)
{
    if (!json_is_number(v))
        return type_error(cfg, label, "a number", v, err);
    *out = json_number_value(v);
    return CPDIT_OK;
}

cpdit_status model_config_get_double(const model_config *cfg, const char *key, double *out,
                                     cpdit_error *err)
{
    json_t *v = lookup(cfg, key);
    if (!v)
        return missing(cfg, key, "a number", err);
    return to_double(cfg, key, v, out, err);
}

cpdit_status model_config_get_double_default(const model_config *cfg, const char *key,
                                             double def, double *out, cpdit_error *err)
{
    json_t *v = lookup(cfg, key);
    if (!v) {
        *out = def;
        return CPDIT_OK;
    }
    return to_double(cfg, key, v, out, err);
}

static cpdit_status to_bool(const model_config *cfg, const char *key, const json_t *v,
                            bool *out, cpdit_error *err)
{
    if (!json_is_boolean(v))
        return type_error(cfg, key, "true or false", v, err);
    *out = json_is_true(v);
    return CPDIT_OK;
}

cpdit_status model_config_get_bool(const model_config *cfg, const char *key, bool *out,
                                   cpdit_error *err)
{
    json_t *v = lookup(cfg, key);
    if (!v)
        return missing(cfg, key, "true or false", err);
    return to_bool(cfg, key, v, out, err);
}

cpdit_status model_config_get_bool_default(const model_config *cfg, const char *key, bool def,
                                           bool *out, cpdit_error *err)
{
    json_t *v = lookup(cfg, key);
    if (!v) {
        *out = def;
        return CPDIT_OK;
    }
    return to_bool(cfg, key, v, out, err);
}

cpdit_status model_config_get_string(const model_config *cfg, const char *key, const char **out,
                                     cpdit_error *err)
{
    json_t *v = lookup(cfg, key);
    if (!v)
        return missing(cfg, key, "a string", err);
    if (!json_is_string(v))
        return type_error(cfg, key, "a string", v, err);
    *out = json_string_value(v);
    return CPDIT_OK;
}

cpdit_status model_config_get_string_default(const model_config *cfg, const char *key,
                                             const char *def, const char **out,
                                             cpdit_error *err)
{
    if (!lookup(cfg, key)) {
        *out = def;
        return CPDIT_OK;
    }
    return model_config_get_string(cfg, key, out, err);
}

/* Shared array walk: check the array and its length, then convert each element. */
typedef cpdit_status (*element_fn)(const model_config *cfg, const char *label, const json_t *v,
                                   void *out, size_t index, cpdit_error *err);

static cpdit_status get_array(const model_config *cfg, const char *key, const char *expected,
                              element_fn fn, void *out, int max, int *n, cpdit_error *err)
{
    json_t *v = lookup(cfg, key);
    if (!v)
        return missing(cfg, key, expected, err);
    if (!json_is_array(v))
        return type_error(cfg, key, expected, v, err);
    size_t len = json_array_size(v);
    if (len > (size_t)(max < 0 ? 0 : max))
        return model_config_key_error(cfg, key, err, "has %zu elements; at most %d supported",
                                      len, max);
    for (size_t i = 0; i < len; i++) {
        char label[256];
        snprintf(label, sizeof label, "%s[%zu]", key, i);
        cpdit_status st = fn(cfg, label, json_array_get(v, i), out, i, err);
        if (st)
            return st;
    }
    *n = (int)len;
    return CPDIT_OK;
}

static cpdit_status int_element(const model_config *cfg, const char *label, const json_t *v,
                                void *out, size_t index, cpdit_error *err)
{
    return to_int(cfg, label, v, (int *)out + index, err);
}

static cpdit_status double_element(const model_config *cfg, const char *label, const json_t *v,
                                   void *out, size_t index, cpdit_error *err)
{
    return to_double(cfg, label, v, (double *)out + index, err);
}

static cpdit_status string_element(const model_config *cfg, const char *label, const json_t *v,
                                   void *out, size_t index, cpdit_error *err)
{
    if (!json_is_string(v))
        return type_error(cfg, label, "a string", v, err);
    ((const char **)out)[index] = json_string_value(v);
    return CPDIT_OK;
}

cpdit_status model_config_get_int_array(const model_config *cfg, const char *key, int *out,
                                        int max, int *n, cpdit_error *err)
{
    return get_array(cfg, key, "an array of integers", int_element, out, max, n, err);
}

cpdit_status model_config_get_int_array_default(const model_config *cfg, const char *key,
                                                const int *def, int n_def, int *out, int max,
                                                int *n, cpdit_error *err)
{
    if (lookup(cfg, key))
        return model_config_get_int_array(cfg, key, out, max, n, err);
    if (n_def > max)
        return model_config_key_error(cfg, key, err, "default has %d elements; at most %d",
                                      n_def, max);
    for (int i = 0; i < n_def; i++)
        out[i] = def[i];
    *n = n_def;
    return CPDIT_OK;
}

cpdit_status model_config_get_double_array(const model_config *cfg, const char *key,
                                           double *out, int max, int *n, cpdit_error *err)
{
    return get_array(cfg, key, "an array of numbers", double_element, out, max, n, err);
}

cpdit_status model_config_get_string_array(const model_config *cfg, const char *key,
                                           const char **out, int max, int *n, cpdit_error *err)
{
    return get_array(cfg, key, "an array of strings", string_element, out, max, n, err);
}
