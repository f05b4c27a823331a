/* model_defaults.c — the run defaults of a model (model_defaults.h). */
#include "lib/models/model_defaults.h"

#include <string.h>

#include "lib/models/model.h"

model_kind model_run_defaults(const char *model, int read_folder, builtin_run_defaults *d)
{
    const builtin_run_defaults image = {MODEL_IMAGE_DEFAULT_SIDE, MODEL_IMAGE_DEFAULT_SIDE, 0, 0,
                                        1.0, NULL, 0};
    *d = image;
    if (builtin_model_is_spec(model))
        return builtin_model_run_defaults(model, d) && d->frames > 0 ? MODEL_KIND_VIDEO
                                                                     : MODEL_KIND_IMAGE;
    if (!read_folder)
        return MODEL_KIND_UNKNOWN;
    const model_family *f = NULL;
    cpdit_error e;
    cpdit_error_clear(&e);
    if (model_family_find(model, &f, &e) != CPDIT_OK)
        return MODEL_KIND_UNKNOWN;
    if (f->output != MODEL_OUTPUT_VIDEO)
        return MODEL_KIND_IMAGE;
    d->width = MODEL_WAN_DEFAULT_WIDTH;
    d->height = MODEL_WAN_DEFAULT_HEIGHT;
    d->frames = MODEL_WAN_DEFAULT_FRAMES;
    d->true_cfg = MODEL_WAN_DEFAULT_GUIDANCE;
    d->negative_prompt = "";
    return MODEL_KIND_VIDEO;
}
