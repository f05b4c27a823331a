/* model_folder.h — the diffusers folder layout: pipeline root or single component folder.
 *
 * A pipeline root holds model_index.json (component name -> [library, class], e.g.
 * "vae": ["diffusers", "AutoencoderKL"]) and one subfolder per component: transformer/,
 * vae/, text_encoder/, text_encoder_2/, tokenizer/, tokenizer_2/, scheduler/. A component
 * folder is one of those subfolders on its own (it holds config.json). cpdit accepts
 * either wherever it takes --model DIR: for a component folder every component name
 * resolves to the folder itself, and the typed config loaders then check _class_name.
 *
 * Detection, in order: model_index.json present -> pipeline root; config.json present ->
 * component folder; no model_index.json but a known component subfolder present ->
 * pipeline root without an index (a hand-assembled folder); otherwise an error.
 */
#ifndef CPDIT_MODEL_FOLDER_H
#define CPDIT_MODEL_FOLDER_H

#include "lib/core/cpdit_error.h"
#include "lib/io/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum model_folder_kind {
    MODEL_FOLDER_PIPELINE = 0, /* root with component subfolders */
    MODEL_FOLDER_COMPONENT = 1 /* one component's folder (has config.json) */
} model_folder_kind;

typedef struct model_folder {
    char *path;              /* as given, without trailing slashes (owned) */
    model_folder_kind kind;
    model_config index;      /* model_index.json; index.root is NULL when there is none */
    model_config component;  /* COMPONENT kind: its config.json; else empty */
} model_folder;

/* Open path. Errors (INPUT): path missing or not a folder, neither layout recognised,
 * model_index.json / config.json not valid JSON (where = "file:line:col"), a
 * model_index.json entry that is not [library, class]. */
cpdit_status model_folder_open(model_folder *mf, const char *path, cpdit_error *err);

void model_folder_close(model_folder *mf);

/* The folder of component ("transformer", "vae", "text_encoder_2", ...) as a new string the
 * caller frees. Errors (INPUT): a bad component name, a component model_index.json lists
 * as null (not part of this pipeline), a subfolder that does not exist. */
cpdit_status model_folder_component_dir(const model_folder *mf, const char *component,
                                        char **dir, cpdit_error *err);

/* Path of file_name inside component's folder, as a new string; with must_exist, an error
 * (INPUT, naming the path) if it is not a regular file. */
cpdit_status model_folder_component_file(const model_folder *mf, const char *component,
                                         const char *file_name, int must_exist, char **path,
                                         cpdit_error *err);

/* Read component's config.json into cfg (free with model_config_free). */
cpdit_status model_folder_load_config(const model_folder *mf, const char *component,
                                      model_config *cfg, cpdit_error *err);

/* The [library, class] model_index.json gives component (pointers into mf). For a
 * component folder: library "diffusers" when config.json has "_diffusers_version", else
 * "transformers"; class from model_config_class_name. Either may come back NULL (null in
 * the index, or not stated). Errors: the index does not list component. */
cpdit_status model_folder_component_class(const model_folder *mf, const char *component,
                                          const char **library, const char **class_name,
                                          cpdit_error *err);

/* model_index.json's "_class_name" (e.g. "FluxPipeline"), or NULL. */
const char *model_folder_pipeline_class(const model_folder *mf);

/* Components model_index.json lists (keys not starting with '_', with a non-null
 * library), in file order: count, and the i-th name (pointer into mf). 0 / NULL without
 * an index. */
int model_folder_component_count(const model_folder *mf);
const char *model_folder_component_name(const model_folder *mf, int i);

#ifdef __cplusplus
}
#endif
#endif
