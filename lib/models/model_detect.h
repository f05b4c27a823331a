/* model_detect.h — which model family a diffusers folder holds.
 *
 * The family comes from the transformer's class: `_class_name` of transformer/config.json
 * (the folder itself when it is the transformer's component folder), else the transformer
 * entry of model_index.json. A transformer config without any class name is FLUX (configs
 * written by hand or by an old diffusers; the FLUX loader accepts them too).
 *   FluxTransformer2DModel -> "flux"     WanTransformer3DModel -> "wan"
 */
#ifndef CPDIT_MODEL_DETECT_H
#define CPDIT_MODEL_DETECT_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MODEL_DETECT_NAME_MAX 16 /* = MODEL_FAMILY_NAME_MAX (model_plan.h) */

/* The family name of a transformer class, NULL for a class no family knows. */
const char *model_family_of_class(const char *class_name);

/* The family of the model in dir (pipeline root or transformer folder) into name_out
 * (MODEL_DETECT_NAME_MAX bytes). Errors (INPUT): dir is not a model folder, no transformer,
 * a class no family knows (the message names the file and the known classes). */
cpdit_status model_family_of(const char *dir, char name_out[MODEL_DETECT_NAME_MAX],
                             cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
