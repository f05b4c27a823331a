/* model_detect.c — a folder's model family from its transformer class (model_detect.h). */
#include "lib/models/model_detect.h"

#include <stdio.h>
#include <string.h>

#include "lib/io/model_folder.h"

#define TRANSFORMER_COMPONENT "transformer"
#define DEFAULT_FAMILY "flux" /* a transformer config without _class_name */

static const struct {
    const char *class_name, *family;
} families[] = {
    {"FluxTransformer2DModel", "flux"},
    {"WanTransformer3DModel", "wan"},
};
#define N_FAMILIES (sizeof families / sizeof families[0])

const char *model_family_of_class(const char *class_name)
{
    for (size_t i = 0; class_name && i < N_FAMILIES; i++)
        if (strcmp(class_name, families[i].class_name) == 0)
            return families[i].family;
    return NULL;
}

/* "FluxTransformer2DModel, WanTransformer3DModel" into buf. */
static const char *known_classes(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_FAMILIES && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "",
                                 families[i].class_name);
    return buf;
}

cpdit_status model_family_of(const char *dir, char name_out[MODEL_DETECT_NAME_MAX],
                             cpdit_error *err)
{
    name_out[0] = '\0';
    model_folder mf;
    cpdit_status st = model_folder_open(&mf, dir, err);
    if (st)
        return st;
    model_config mc;
    memset(&mc, 0, sizeof mc);
    st = model_folder_load_config(&mf, TRANSFORMER_COMPONENT, &mc, err);
    const char *cls = st ? NULL : model_config_class_name(&mc);
    char where[4200];
    snprintf(where, sizeof where, "%s", mc.path ? mc.path : dir);
    if (!st && !cls && mf.kind == MODEL_FOLDER_PIPELINE && mf.index.root) {
        const char *lib = NULL;
        if (model_folder_component_class(&mf, TRANSFORMER_COMPONENT, &lib, &cls, err))
            cls = NULL; /* not listed: the config alone decides */
    }
    if (!st) {
        const char *fam = cls ? model_family_of_class(cls) : DEFAULT_FAMILY;
        char known[128];
        if (fam)
            snprintf(name_out, MODEL_DETECT_NAME_MAX, "%s", fam);
        else
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                 "key \"_class_name\": \"%s\" is no model family cpdit knows "
                                 "(known: %s)",
                                 cls, known_classes(known, sizeof known));
    }
    model_config_free(&mc);
    model_folder_close(&mf);
    return st;
}
