/* model_defaults.h — what a run leaves to the model: size, steps, CFG, frames. The one place
 * both `cpdit run --model` (bin/cmd_run_item.c) and a manifest (yaml/manifest_schema.c) take
 * them from, so an item renders the same from either.
 *
 *   builtin:NAME   its own run defaults (lib/builtin/builtin_model.h)
 *   a Wan folder   WanPipeline.__call__'s: 832 x 480, 81 frames, guidance_scale 5 as true CFG
 *                  against negative_prompt "" (steps and flow_shift from the folder)
 *   other folders  FLUX.1's: 1024 x 1024 (steps and T5 tokens from the pipeline)
 */
#ifndef CPDIT_MODEL_DEFAULTS_H
#define CPDIT_MODEL_DEFAULTS_H

#include "lib/builtin/builtin_model.h" /* builtin_run_defaults */

#ifdef __cplusplus
extern "C" {
#endif

/* WanPipeline.__call__'s defaults. */
#define MODEL_WAN_DEFAULT_WIDTH 832  /* pixels */
#define MODEL_WAN_DEFAULT_HEIGHT 480 /* pixels */
#define MODEL_WAN_DEFAULT_FRAMES 81  /* 4k + 1 */
#define MODEL_WAN_DEFAULT_GUIDANCE 5.0
/* FLUX.1's default side for a folder. */
#define MODEL_IMAGE_DEFAULT_SIDE 1024 /* pixels */

typedef enum model_kind {
    MODEL_KIND_UNKNOWN = -1, /* a folder not looked at (read_folder 0) or unreadable */
    MODEL_KIND_IMAGE = 0,
    MODEL_KIND_VIDEO = 1
} model_kind;

/* The run defaults of model ("builtin:NAME" or a folder) into *d. read_folder 1: a folder's
 * family is read from its configs (model_family_find); 0: not (a folder is then UNKNOWN and
 * gets FLUX.1's defaults). Returns the model's kind. */
model_kind model_run_defaults(const char *model, int read_folder, builtin_run_defaults *d);

#ifdef __cplusplus
}
#endif
#endif
