/* safetensors_index.c — sharded checkpoints: a set of safetensors files described by a
 * "*.safetensors.index.json" ({"metadata": {...}, "weight_map": {tensor: shard}}), or a single
 * file seen as a set of one, with lookup of tensors by name across shards (safetensors.h).
 */
#include "lib/io/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/io/regular_file.h"

#define PATH_BYTES 4096

/* Files looked for, in this order, when safetensors_set_open is given a folder (the names
 * diffusers and transformers save under). */
static const char *const folder_candidates[] = {
    "diffusion_pytorch_model.safetensors",
    "diffusion_pytorch_model.safetensors.index.json",
    "model.safetensors",
    "model.safetensors.index.json",
};

struct safetensors_set {
    char *path;                       /* the file that was opened */
    safetensors_file **files;         /* nfiles shards, in shard-name order */
    size_t nfiles;
    const safetensors_tensor **all;   /* count tensors of all shards, in name order */
    size_t count;
};

void safetensors_set_close(safetensors_set *s)
{
    size_t i;
    if (!s)
        return;
    for (i = 0; i < s->nfiles; i++)
        safetensors_close(s->files[i]);
    free(s->files);
    free(s->all);
    free(s->path);
    free(s);
}

static int tensor_ptr_cmp(const void *a, const void *b)
{
    return strcmp((*(const safetensors_tensor *const *)a)->name,
                  (*(const safetensors_tensor *const *)b)->name);
}

/* s->all = every tensor of every file, sorted by name; a name in two files is an error. */
static cpdit_status collect_tensors(safetensors_set *s, cpdit_error *err)
{
    size_t i, j, total = 0;
    for (i = 0; i < s->nfiles; i++)
        total += safetensors_count(s->files[i]);
    s->all = calloc(total + 1, sizeof *s->all);
    if (!s->all)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, s->path, "out of memory");
    for (i = 0; i < s->nfiles; i++)
        for (j = 0; j < safetensors_count(s->files[i]); j++)
            s->all[s->count++] = safetensors_tensor_at(s->files[i], j);
    qsort(s->all, s->count, sizeof *s->all, tensor_ptr_cmp);
    for (i = 1; i < s->count; i++)
        if (strcmp(s->all[i - 1]->name, s->all[i]->name) == 0)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, s->path,
                                   "tensor \"%s\" is present in two shards: %s and %s",
                                   s->all[i]->name, s->all[i - 1]->file, s->all[i]->file);
    return CPDIT_OK;
}

/* A shard name must stay inside the index's folder: relative, no ".." component. */
static int shard_name_ok(const char *name)
{
    const char *p = name;
    if (!name[0] || name[0] == '/')
        return 0;
    while (*p) {
        size_t len = strcspn(p, "/");
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return 0;
        p += len;
        if (*p == '/')
            p++;
    }
    return 1;
}

static int str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Open each distinct shard named in weight_map (names sorted, unique → s->files). */
static cpdit_status open_shards(safetensors_set *s, json_t *weight_map, const char *dir,
                                const char ***names_out, cpdit_error *err)
{
    const char **names, *key;
    json_t *value;
    size_t n = 0, i, k;
    cpdit_status st;
    names = calloc(json_object_size(weight_map) + 1, sizeof *names);
    *names_out = names;
    if (!names)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, s->path, "out of memory");
    json_object_foreach(weight_map, key, value) {
        if (!json_is_string(value))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, s->path,
                                   "weight_map entry for tensor \"%s\" is not a file name", key);
        if (!shard_name_ok(json_string_value(value)))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, s->path,
                                   "weight_map entry for tensor \"%s\": shard \"%s\" must be a "
                                   "relative path without \"..\"", key, json_string_value(value));
        names[n++] = json_string_value(value);
    }
    qsort(names, n, sizeof *names, str_ptr_cmp);
    for (i = 0, k = 0; i < n; i++) /* unique */
        if (k == 0 || strcmp(names[k - 1], names[i]) != 0)
            names[k++] = names[i];
    s->files = calloc(k + 1, sizeof *s->files);
    if (!s->files)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, s->path, "out of memory");
    for (i = 0; i < k; i++) {
        char shard_path[PATH_BYTES];
        struct stat sb;
        if ((size_t)snprintf(shard_path, sizeof shard_path, "%s%s", dir, names[i]) >=
            sizeof shard_path)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, s->path, "shard path too long: %s%s",
                                   dir, names[i]);
        if (stat(shard_path, &sb) != 0)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, s->path,
                                   "shard file %s listed in the weight_map cannot be opened: %s",
                                   shard_path, strerror(errno));
        st = safetensors_open(&s->files[i], shard_path, err);
        if (st != CPDIT_OK)
            return st;
        s->nfiles++;
    }
    names[k] = NULL;
    return CPDIT_OK;
}

/* Read and check an index .json, open its shards and cross-check them with the weight_map. */
static cpdit_status open_index(safetensors_set *s, cpdit_error *err)
{
    json_error_t jerr;
    json_t *root, *weight_map, *meta, *value;
    const char **shard_names = NULL, *key, *slash = strrchr(s->path, '/');
    char dir[PATH_BYTES];
    size_t i;
    cpdit_status st;

    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - s->path + 1) : 0, s->path);
    FILE *fp = cpdit_fopen_regular(s->path, "cannot open", err); /* never waits on a FIFO */
    if (!fp)
        return err ? err->status : CPDIT_ERR_INPUT;
    root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
    fclose(fp);
    if (!root)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, s->path,
                               "not a valid index: %s (line %d, column %d)", jerr.text,
                               jerr.line, jerr.column);
    weight_map = json_object_get(root, "weight_map");
    meta = json_object_get(root, "metadata");
    if (!json_is_object(root))
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, s->path, "index must be a JSON object");
    else if (!json_is_object(weight_map))
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, s->path,
                             "index has no \"weight_map\" object (tensor name → shard file)");
    else if (meta && !json_is_object(meta) && !json_is_null(meta))
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, s->path, "index \"metadata\" must be an object");
    else
        st = open_shards(s, weight_map, dir, &shard_names, err);
    if (st == CPDIT_OK)
        st = collect_tensors(s, err);
    if (st == CPDIT_OK) { /* every weight_map entry is in the shard it names */
        json_object_foreach(weight_map, key, value) {
            const char **hit = bsearch(&(const char *){json_string_value(value)}, shard_names,
                                       s->nfiles, sizeof *shard_names, str_ptr_cmp);
            const safetensors_file *f = s->files[hit - shard_names];
            if (!safetensors_find(f, key)) {
                st = cpdit_error_set(err, CPDIT_ERR_INPUT, s->path,
                                     "tensor \"%s\" is mapped to shard %s, which does not contain "
                                     "it", key, safetensors_path(f));
                break;
            }
        }
    }
    for (i = 0; st == CPDIT_OK && i < s->count; i++) /* and every shard tensor is listed */
        if (!json_object_get(weight_map, s->all[i]->name))
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, s->path,
                                 "tensor \"%s\" of shard %s is not listed in the weight_map",
                                 s->all[i]->name, s->all[i]->file);
    free(shard_names);
    json_decref(root);
    return st;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Resolve path (file or folder) to the file to open → s->path. */
static cpdit_status resolve_path(safetensors_set *s, const char *path, cpdit_error *err)
{
    struct stat sb;
    size_t i;
    if (stat(path, &sb) != 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "cannot open: %s", strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        s->path = strdup(path);
        return s->path ? CPDIT_OK : cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    for (i = 0; i < sizeof folder_candidates / sizeof folder_candidates[0]; i++) {
        char cand[PATH_BYTES];
        size_t len = strlen(path);
        snprintf(cand, sizeof cand, "%s%s%s", path, len && path[len - 1] == '/' ? "" : "/",
                 folder_candidates[i]);
        if (stat(cand, &sb) == 0 && S_ISREG(sb.st_mode)) {
            s->path = strdup(cand);
            return s->path ? CPDIT_OK
                           : cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
        }
        if (errno == ELOOP) /* there, but links in a circle: say so, not "no such file" */
            return cpdit_error_set(err, CPDIT_ERR_INPUT, cand, "symbolic link loop (too many "
                                   "levels of symbolic links)");
    }
    return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                           "folder has no %s, %s, %s or %s", folder_candidates[0],
                           folder_candidates[1], folder_candidates[2], folder_candidates[3]);
}

cpdit_status safetensors_set_open(safetensors_set **out, const char *path, cpdit_error *err)
{
    safetensors_set *s;
    cpdit_status st;
    *out = NULL;
    s = calloc(1, sizeof *s);
    if (!s)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    st = resolve_path(s, path, err);
    if (st == CPDIT_OK && ends_with(s->path, ".json")) {
        st = open_index(s, err);
    } else if (st == CPDIT_OK) {
        s->files = calloc(1, sizeof *s->files);
        if (!s->files)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
        else if ((st = safetensors_open(&s->files[0], s->path, err)) == CPDIT_OK)
            s->nfiles = 1;
        if (st == CPDIT_OK)
            st = collect_tensors(s, err);
    }
    if (st != CPDIT_OK) {
        safetensors_set_close(s);
        return st;
    }
    *out = s;
    return CPDIT_OK;
}

const char *safetensors_set_path(const safetensors_set *s)
{
    return s->path;
}

size_t safetensors_set_count(const safetensors_set *s)
{
    return s->count;
}

const safetensors_tensor *safetensors_set_tensor_at(const safetensors_set *s, size_t i)
{
    return i < s->count ? s->all[i] : NULL;
}

const safetensors_tensor *safetensors_set_find(const safetensors_set *s, const char *name)
{
    safetensors_tensor key;
    const safetensors_tensor *kp = &key, *const *hit;
    if (!name || s->count == 0)
        return NULL;
    key.name = name;
    hit = bsearch(&kp, s->all, s->count, sizeof *s->all, tensor_ptr_cmp);
    return hit ? *hit : NULL;
}

cpdit_status safetensors_set_read_f32(const safetensors_set *s, const char *name, float *dst,
                                      size_t n, cpdit_error *err)
{
    const safetensors_tensor *t = safetensors_set_find(s, name);
    if (!t)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, s->path, "no tensor named \"%s\"", name);
    return safetensors_tensor_read_f32(t, dst, n, err);
}

size_t safetensors_set_file_count(const safetensors_set *s)
{
    return s->nfiles;
}

const safetensors_file *safetensors_set_file_at(const safetensors_set *s, size_t i)
{
    return i < s->nfiles ? s->files[i] : NULL;
}
