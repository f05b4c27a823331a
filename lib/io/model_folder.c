/* model_folder.c — resolve diffusers components and read model_index.json (see model_folder.h). */
#include "lib/io/model_folder.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/io/regular_file.h"

#define MODEL_INDEX_FILE "model_index.json"
#define CONFIG_FILE "config.json"

/* Subfolders of a FLUX-style pipeline root, for recognising a root without an index. */
static const char *const KNOWN_COMPONENTS[] = {
    "transformer", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2",
    "scheduler",   "unet",
};
#define N_KNOWN_COMPONENTS (sizeof KNOWN_COMPONENTS / sizeof KNOWN_COMPONENTS[0])

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + 1 + strlen(b) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", a, b);
    return p;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int has_entry(const char *dir, const char *name, int (*test)(const char *))
{
    char *p = join(dir, name);
    int r = p && test(p);
    free(p);
    return r;
}

void model_folder_close(model_folder *mf)
{
    if (!mf)
        return;
    free(mf->path);
    mf->path = NULL;
    model_config_free(&mf->index);
    model_config_free(&mf->component);
}

/* Each non-underscore entry of model_index.json must be [library, class] (strings or
 * nulls); diffusers writes [null, null] for an optional component left out. */
static cpdit_status check_index(const model_config *idx, cpdit_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(idx->root, key, v)
    {
        if (key[0] == '_')
            continue;
        if (!json_is_array(v) || json_array_size(v) != 2 ||
            !(json_is_string(json_array_get(v, 0)) || json_is_null(json_array_get(v, 0))) ||
            !(json_is_string(json_array_get(v, 1)) || json_is_null(json_array_get(v, 1))))
            return model_config_key_error(idx, key, err,
                                          "expected [library, class], e.g. "
                                          "[\"diffusers\", \"AutoencoderKL\"]");
    }
    return CPDIT_OK;
}

cpdit_status model_folder_open(model_folder *mf, const char *path, cpdit_error *err)
{
    memset(mf, 0, sizeof *mf);
    if (!path || !path[0])
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "", "model folder path is empty");
    struct stat st;
    if (stat(path, &st) != 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "model folder: %s", strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "not a folder (expected a diffusers model folder)");
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    mf->path = strndup(path, n);
    if (!mf->path)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");

    cpdit_status rc = CPDIT_OK;
    char *index_path = join(mf->path, MODEL_INDEX_FILE);
    char *config_path = join(mf->path, CONFIG_FILE);
    if (!index_path || !config_path) {
        rc = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    } else if (is_file(index_path)) {
        mf->kind = MODEL_FOLDER_PIPELINE;
        rc = model_config_load_file(&mf->index, index_path, err);
        if (!rc)
            rc = check_index(&mf->index, err);
    } else if (is_file(config_path)) {
        mf->kind = MODEL_FOLDER_COMPONENT;
        rc = model_config_load_file(&mf->component, config_path, err);
    } else {
        mf->kind = MODEL_FOLDER_PIPELINE;
        int found = 0;
        for (size_t i = 0; i < N_KNOWN_COMPONENTS && !found; i++)
            found = has_entry(mf->path, KNOWN_COMPONENTS[i], is_dir);
        if (!found)
            rc = cpdit_error_set(err, CPDIT_ERR_INPUT, mf->path,
                                 "not a diffusers model folder: no " MODEL_INDEX_FILE
                                 " (pipeline root), no " CONFIG_FILE
                                 " (component folder) and no component subfolders "
                                 "(transformer/, vae/, ...)");
    }
    free(index_path);
    free(config_path);
    if (rc)
        model_folder_close(mf);
    return rc;
}

static cpdit_status check_component_name(const char *component, const char *where,
                                         cpdit_error *err)
{
    if (!component || !component[0] || strchr(component, '/') || strcmp(component, ".") == 0 ||
        strcmp(component, "..") == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "bad component name \"%s\" (expected e.g. transformer, vae)",
                               component ? component : "");
    return CPDIT_OK;
}

/* The index entry for component, or NULL when there is no index or it is not listed. */
static json_t *index_entry(const model_folder *mf, const char *component)
{
    if (!mf->index.root || component[0] == '_')
        return NULL;
    return json_object_get(mf->index.root, component);
}

cpdit_status model_folder_component_dir(const model_folder *mf, const char *component,
                                        char **dir, cpdit_error *err)
{
    *dir = NULL;
    cpdit_status rc = check_component_name(component, mf->path, err);
    if (rc)
        return rc;
    if (mf->kind == MODEL_FOLDER_COMPONENT) {
        *dir = strdup(mf->path);
        return *dir ? CPDIT_OK : cpdit_error_set(err, CPDIT_ERR_RUNTIME, mf->path, "out of memory");
    }
    json_t *entry = index_entry(mf, component);
    if (entry && json_is_null(json_array_get(entry, 0)))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, mf->index.path,
                               "component \"%s\" is null: not part of this pipeline", component);
    char *p = join(mf->path, component);
    if (!p)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, mf->path, "out of memory");
    struct stat sb;
    if (stat(p, &sb) != 0 && errno != ENOENT) { /* there, but unusable: say why */
        int e = errno;
        cpdit_error_set(err, CPDIT_ERR_INPUT, p, "component \"%s\": %s", component,
                        e == ELOOP ? "symbolic link loop (too many levels of symbolic links)"
                                   : strerror(e));
        free(p);
        return CPDIT_ERR_INPUT;
    }
    if (stat(p, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        cpdit_error_set(err, CPDIT_ERR_INPUT, p, "component \"%s\" is %s, not a folder",
                        component, cpdit_file_kind(sb.st_mode));
        free(p);
        return CPDIT_ERR_INPUT;
    }
    if (!is_dir(p)) {
        if (entry)
            cpdit_error_set(err, CPDIT_ERR_INPUT, p,
                            "component folder missing (" MODEL_INDEX_FILE " lists \"%s\" as %s.%s)",
                            component, json_string_value(json_array_get(entry, 0)),
                            json_is_string(json_array_get(entry, 1))
                                ? json_string_value(json_array_get(entry, 1))
                                : "?");
        else
            cpdit_error_set(err, CPDIT_ERR_INPUT, p, "no component \"%s\" in this model folder%s",
                            component,
                            mf->index.root ? " (" MODEL_INDEX_FILE " does not list it)" : "");
        free(p);
        return CPDIT_ERR_INPUT;
    }
    *dir = p;
    return CPDIT_OK;
}

cpdit_status model_folder_component_file(const model_folder *mf, const char *component,
                                         const char *file_name, int must_exist, char **path,
                                         cpdit_error *err)
{
    *path = NULL;
    char *dir = NULL;
    cpdit_status rc = model_folder_component_dir(mf, component, &dir, err);
    if (rc)
        return rc;
    char *p = join(dir, file_name);
    free(dir);
    if (!p)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, mf->path, "out of memory");
    if (must_exist && !is_file(p)) {
        cpdit_error_set(err, CPDIT_ERR_INPUT, p, "file not found");
        free(p);
        return CPDIT_ERR_INPUT;
    }
    *path = p;
    return CPDIT_OK;
}

cpdit_status model_folder_load_config(const model_folder *mf, const char *component,
                                      model_config *cfg, cpdit_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    char *p = NULL;
    cpdit_status rc = model_folder_component_file(mf, component, CONFIG_FILE, 0, &p, err);
    if (rc)
        return rc;
    rc = model_config_load_file(cfg, p, err);
    free(p);
    return rc;
}

cpdit_status model_folder_component_class(const model_folder *mf, const char *component,
                                          const char **library, const char **class_name,
                                          cpdit_error *err)
{
    *library = NULL;
    *class_name = NULL;
    cpdit_status rc = check_component_name(component, mf->path, err);
    if (rc)
        return rc;
    if (mf->kind == MODEL_FOLDER_COMPONENT) {
        *library = model_config_has(&mf->component, "_diffusers_version") ? "diffusers"
                                                                          : "transformers";
        *class_name = model_config_class_name(&mf->component);
        return CPDIT_OK;
    }
    json_t *entry = index_entry(mf, component);
    if (!entry)
        return cpdit_error_set(err, CPDIT_ERR_INPUT,
                               mf->index.path ? mf->index.path : mf->path,
                               "component \"%s\" is not listed%s", component,
                               mf->index.root ? "" : " (no " MODEL_INDEX_FILE ")");
    *library = json_string_value(json_array_get(entry, 0));
    *class_name = json_string_value(json_array_get(entry, 1));
    return CPDIT_OK;
}

const char *model_folder_pipeline_class(const model_folder *mf)
{
    return mf->index.root ? model_config_class_name(&mf->index) : NULL;
}

/* Walk the listed components; returns the i-th name, or counts them when i < 0. */
static const char *walk_components(const model_folder *mf, int i, int *count)
{
    int k = 0;
    const char *key;
    json_t *v;
    if (mf->index.root) {
        json_object_foreach(mf->index.root, key, v)
        {
            if (key[0] == '_' || json_is_null(json_array_get(v, 0)))
                continue;
            if (k == i)
                return key;
            k++;
        }
    }
    if (count)
        *count = k;
    return NULL;
}

int model_folder_component_count(const model_folder *mf)
{
    int n = 0;
    walk_components(mf, -1, &n);
    return n;
}

const char *model_folder_component_name(const model_folder *mf, int i)
{
    return i < 0 ? NULL : walk_components(mf, i, NULL);
}
