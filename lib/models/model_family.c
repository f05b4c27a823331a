/* model_family.c — the family table (model.h): one extern and one line per family. A family
 * is found by its transformer class (lib/models/model_detect.h reads it from the folder). */
#include "lib/models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/models/model_detect.h"

extern const model_family flux_family;
extern const model_family wan_family;

static const model_family *const families[] = {
    &flux_family,
    &wan_family,
};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

#define SAFETENSORS_SUFFIX ".safetensors"

const model_family *const *model_families(int *n)
{
    *n = N_FAMILIES;
    return families;
}

const model_family *model_family_by_class(const char *class_name)
{
    for (int i = 0; class_name && i < N_FAMILIES; i++)
        if (strcmp(families[i]->transformer_class, class_name) == 0)
            return families[i];
    return NULL;
}

static const model_family *by_name(const char *name)
{
    for (int i = 0; i < N_FAMILIES; i++)
        if (strcmp(families[i]->name, name) == 0)
            return families[i];
    return NULL;
}

/* path is a regular file named *.safetensors: a lone transformer checkpoint. */
static int is_single_file(const char *path)
{
    struct stat sb;
    const size_t n = strlen(path), k = strlen(SAFETENSORS_SUFFIX);
    return n > k && strcmp(path + n - k, SAFETENSORS_SUFFIX) == 0 && stat(path, &sb) == 0 &&
           S_ISREG(sb.st_mode);
}

cpdit_status model_family_find(const char *path, const model_family **out, cpdit_error *err)
{
    *out = NULL;
    if (is_single_file(path)) {
        for (int i = 0; i < N_FAMILIES; i++)
            if (families[i]->single_file) {
                *out = families[i];
                return CPDIT_OK;
            }
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "no model family opens a single .safetensors file");
    }
    char name[MODEL_DETECT_NAME_MAX];
    cpdit_status st = model_family_of(path, name, err);
    if (st)
        return st;
    *out = by_name(name);
    if (!*out)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "the %s family is known but not built into this cpdit yet", name);
    return CPDIT_OK;
}

cpdit_status model_open(cpdit_model **out, const char *dir, const model_open_options *o,
                        cpdit_error *err)
{
    *out = NULL;
    model_open_options def;
    memset(&def, 0, sizeof def);
    if (!o)
        o = &def;
    const model_family *f = NULL;
    cpdit_status st = model_family_find(dir, &f, err);
    if (st)
        return st;
    cpdit_model *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "model", "out of memory");
    }
    m->family = f;
    m->be = o->backend ? o->backend : cpdit_backend_default();
    m->attn_kernel = o->attention_kernel;
    if ((st = f->open(m, dir, o, err))) {
        model_close(m);
        return st;
    }
    *out = m;
    return CPDIT_OK;
}

void model_close(cpdit_model *m)
{
    if (!m)
        return;
    if (m->family && m->family->close)
        m->family->close(m);
    free(m->dir);
    free(m);
}

void model_schedule_free(model_schedule *s)
{
    if (s && s->free)
        s->free(s);
}
