/* text_weights.h — what the CLIP text model and the T5 encoder share: load options, the
 * activation names of transformers' configs, and their parameters read from a safetensors set
 * (model.safetensors or a sharded model.safetensors.index.json) in fp32, fp16, bf16 or fp8,
 * through the one weight loader (lib/weights/weight_loader.h).
 *
 * Memory policy. Each parameter is registered with its shape (checked against the file) and a
 * kind:
 *   TEXT_PARAM_SMALL   vectors (norms, biases): converted to fp32 at load, always, and kept in
 *                      the backend's memory;
 *   TEXT_PARAM_HOST    small tables read by host code (T5's relative-bias table): fp32, host;
 *   TEXT_PARAM_MATRIX  the linear layers: backend weights (kernels/backend.h; bf16 kept as bf16
 *                      by default, options.weight_format), made at load when all of them fit in
 *                      options.cache_bytes, otherwise ("streaming") each is made just before its
 *                      use and freed after, the map pages it came from dropped, so that a model
 *                      bigger than memory (T5-XXL: 19 GB in fp32) runs with one matrix at a time;
 *   TEXT_PARAM_ROWS    embedding tables: never converted whole; the rows a forward needs are
 *                      gathered (and converted) at use.
 * A loaded text_weights is read-only: forwards may run concurrently.
 */
#ifndef CPDIT_TEXT_WEIGHTS_H
#define CPDIT_TEXT_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "kernels/backend.h"
#include "lib/io/model_config.h"
#include "lib/io/safetensors.h"
#include "lib/weights/weight_loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default cache for converted fp32 matrices: CLIP-L (123 M parameters, 0.5 GB in fp32) and
 * small T5s fit; T5-XXL (4.7 G parameters) streams. */
#define TEXT_ENCODER_DEFAULT_CACHE_BYTES ((size_t)2 << 30)

typedef struct text_encoder_options {
    const cpdit_backend *backend;  /* NULL = cpdit_backend_default() */
    const char *attention_kernel;  /* the backend's kernel name; NULL = its default */
    size_t cache_bytes;            /* see the memory policy above; 0 = always stream */
    cpdit_weight_format weight_format; /* CPDIT_WEIGHT_NATIVE (default) or CPDIT_WEIGHT_F32 */
    const weight_arena_ops *arena; /* NULL, or node-shared storage for the resident matrices
                                      (lib/weights/weight_shared_mpi.h): one copy per node;
                                      every sharing rank must load the encoders together */
} text_encoder_options;

/* backend NULL, attention_kernel NULL, cache_bytes TEXT_ENCODER_DEFAULT_CACHE_BYTES,
 * weight_format NATIVE, arena NULL. */
text_encoder_options text_encoder_options_default(void);

/* Activations by their transformers (ACT2FN) names. */
typedef enum text_act {
    TEXT_ACT_INVALID = 0,
    TEXT_ACT_RELU,       /* "relu" */
    TEXT_ACT_GELU_ERF,   /* "gelu": exact, with erf */
    TEXT_ACT_GELU_TANH,  /* "gelu_new", "gelu_pytorch_tanh": the tanh approximation */
    TEXT_ACT_QUICK_GELU, /* "quick_gelu": x sigmoid(1.702 x) */
    TEXT_ACT_SILU        /* "silu", "swish" */
} text_act;

/* The activation of a name, or TEXT_ACT_INVALID. */
text_act text_act_from_name(const char *name);
const char *text_act_name(text_act act);

/* y = act(x), n elements, in place allowed. */
void text_act_apply(const cpdit_backend *be, text_act act, float *y, const float *x, size_t n);

/* The backend of the options (NULL options or backend: cpdit_backend_default()) and its
 * attention kernel (opt->attention_kernel, NULL: the backend's default). Errors (INPUT): a
 * kernel name the backend does not have (the message lists its kernels). */
cpdit_status text_backend_resolve(const text_encoder_options *opt, const cpdit_backend **be,
                                  const cpdit_attention_kernel **attn, cpdit_error *err);

typedef enum text_param_kind {
    TEXT_PARAM_SMALL = 0,  /* fp32 in the backend's memory (norms, biases) */
    TEXT_PARAM_MATRIX,
    TEXT_PARAM_ROWS,
    TEXT_PARAM_HOST        /* fp32 in host memory: tables host code reads (T5's relative bias) */
} text_param_kind;

typedef struct text_param {
    weight_param *wp;            /* the loader's parameter */
    text_param_kind kind;
    const float *f32;            /* SMALL: fp32 values */
    const cpdit_weight *w;       /* MATRIX: the weight made at load, or NULL (streaming) */
} text_param;

typedef struct text_weights {
    safetensors_set *set;
    char *where;               /* the folder, for messages */
    weight_loader wl;
    int wl_open;
    int streaming;             /* 1: matrices are made at use */
    size_t scratch_floats;     /* always 0 (kept for callers sizing a conversion buffer) */
    size_t n_params;           /* parameters registered */
} text_weights;

/* Load dir/config.json into cfg (free with model_config_free). Errors: as
 * model_config_load_file; out of memory. */
cpdit_status text_config_load(const char *dir, model_config *cfg, cpdit_error *err);

/* Open the safetensors set of folder dir (model.safetensors or model.safetensors.index.json;
 * see safetensors_set_open); be (from text_backend_resolve) makes and holds the weights.
 * Errors: as safetensors_set_open, with where = the file. */
cpdit_status text_weights_open(text_weights *tw, const char *dir, const cpdit_backend *be,
                               cpdit_error *err);
void text_weights_close(text_weights *tw);

/* The tensor of the first name in names[0..n) that exists, or NULL. */
const safetensors_tensor *text_weights_find_any(const text_weights *tw, const char *const *names,
                                                int n);

/* Register p as the tensor `name` of shape (rows, cols) (cols 0: 1-D (rows)). Errors (INPUT,
 * where = the folder): missing tensor, other shape (both shapes in the message). */
cpdit_status text_weights_add(text_weights *tw, text_param *p, const char *name,
                              text_param_kind kind, int64_t rows, int64_t cols,
                              cpdit_error *err);

/* After all text_weights_add calls: check that every tensor of the set was registered except
 * those whose names start with one of ignore[0..n_ignore) (buffers and heads a model does not
 * use), then decide resident vs streaming (opt->cache_bytes), convert SMALL params and make
 * the resident matrices (opt->weight_format). Errors: an unexpected tensor (INPUT, named:
 * usually a config that disagrees with the checkpoint, e.g. fewer layers), a conversion
 * failure, out of memory. */
cpdit_status text_weights_finish(text_weights *tw, const text_encoder_options *opt,
                                 const char *const *ignore, int n_ignore, cpdit_error *err);

/* The load sequence both encoders share, around their own parts: the backend and attention
 * kernel of opt into *be / *attn (text_backend_resolve); dir/config.json handed to
 * read_config (the encoder's config reading and per-layer allocation); the weights set of dir
 * opened on *be into *tw; register_weights adding the encoder's parameters; and
 * text_weights_finish with ignore[0..n_ignore). `model` goes to both callbacks. On error the
 * caller frees what it allocated (its free function closes *tw). */
typedef struct text_model_parts {
    cpdit_status (*read_config)(void *model, const model_config *cfg, cpdit_error *err);
    cpdit_status (*register_weights)(void *model, cpdit_error *err);
    const char *const *ignore;
    int n_ignore;
} text_model_parts;

cpdit_status text_model_load(const char *dir, const text_encoder_options *opt,
                             const text_model_parts *parts, void *model,
                             const cpdit_backend **be, const cpdit_attention_kernel **attn,
                             text_weights *tw, cpdit_error *err);

/* The weight of a registered matrix: p->w when resident, else made now into *tmp (free it
 * with text_param_release). Errors: conversion failure (INPUT, naming the file), out of
 * memory. */
cpdit_status text_param_weight(const text_weights *tw, const text_param *p, cpdit_weight **tmp,
                               const cpdit_weight **out, cpdit_error *err);

/* Done with a matrix for now: a weight made by text_param_weight is freed. */
void text_param_release(const text_weights *tw, const text_param *p, cpdit_weight *tmp);

/* dst[r, :] = p[ids[r], :] for r < n (p a (rows, cols) table, ids checked by the caller to be
 * in [0, rows)); dst (n, cols). Errors: conversion failure. */
cpdit_status text_param_gather_rows(const text_param *p, const int32_t *ids, size_t n,
                                    float *dst, cpdit_error *err);

/* ---------------------------------------------------------------- config helpers */

/* Read an integer key (default def when missing) and check lo <= value <= hi (INPUT error
 * naming the key otherwise). */
cpdit_status text_config_int(const model_config *cfg, const char *key, int def, int lo, int hi,
                             int *out, cpdit_error *err);

/* Read a real key (default def when missing) and check 0 < value < 1 (an epsilon). */
cpdit_status text_config_eps(const model_config *cfg, const char *key, double def, float *out,
                             cpdit_error *err);

/* Check model_type (when present) is one of the n accepted names. */
cpdit_status text_config_check_type(const model_config *cfg, const char *const *accepted,
                                    int n, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
