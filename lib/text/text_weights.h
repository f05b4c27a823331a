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
 *                      options.cache_bytes ("resident"), otherwise ("streaming") made one
 *                      encoder layer at a time (the loader's groups, weight_loader.h): a forward
 *                      takes layer i (text_weights_use_layer) while a helper thread reads and
 *                      packs layer i + 1 (after the last layer: layer 0, the next forward's
 *                      first), the map pages dropped once packed, so that a model bigger than
 *                      memory (T5-XXL: 9.5 GB in bf16) runs with two layers' matrices in memory
 *                      (two slots of the largest layer: 2 x 386 MB for T5-XXL in bf16);
 *   TEXT_PARAM_ROWS    embedding tables: never converted whole; the rows a forward needs are
 *                      gathered (and converted) at use.
 * A loaded text_weights is read-only when resident: forwards may run concurrently. Streaming,
 * the loader's state changes during a forward: text_weights_begin / text_weights_end take a
 * lock, so concurrent forwards run one after the other.
 */
#ifndef CPDIT_TEXT_WEIGHTS_H
#define CPDIT_TEXT_WEIGHTS_H

#include <pthread.h>
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

/* Default budget for the matrices in the backend's form: CLIP-L (123 M parameters) and small
 * T5s fit; T5-XXL (4.7 G parameters, 9.5 GB in bf16) streams. */
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

/* y = act(x), n activations of be (cpdit_buf), in place allowed. */
void text_act_apply(const cpdit_backend *be, text_act act, cpdit_buf *y, const cpdit_buf *x,
                    size_t n);

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
    const cpdit_weight *w;       /* MATRIX: the weight while usable (resident: always;
                                    streaming: while its layer is the one in use) */
} text_param;

typedef struct text_weights {
    safetensors_set *set;
    char *where;               /* the folder, for messages */
    weight_loader wl;
    int wl_open;
    int streaming;             /* 1: matrices are made per layer at use */
    size_t n_params;           /* parameters registered */
    pthread_mutex_t lock;      /* streaming: held from text_weights_begin to _end */
    int lock_made;
} text_weights;

/* What the weights of an encoder cost (text_weights_stats). */
typedef struct text_weight_stats {
    int streaming;                 /* 1: per layer, 0: resident */
    int prefetch;                  /* streaming: the next layer is made during the current one */
    size_t bytes;                  /* held now: vectors, resident matrices or the two slots */
    double create_s;               /* reading and packing matrices, on any thread */
    double stall_s;                /* the forwards' wait for them (compute thread) */
    unsigned long long bytes_read; /* of matrices, from the checkpoint */
    unsigned long long prefetched; /* layers that were made ahead */
} text_weight_stats;

void text_weights_stats(const text_weights *tw, text_weight_stats *out);

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

/* Register p as the tensor `name` of shape (rows, cols) (cols 0: 1-D (rows)), used by encoder
 * layer `layer` (the streaming unit; 0 for parameters outside the layers: only matrices are
 * streamed, and the encoders have none outside). Errors (INPUT, where = the folder): missing
 * tensor, other shape (both shapes in the message). */
cpdit_status text_weights_add(text_weights *tw, text_param *p, int layer, const char *name,
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

/* Around one forward: begin takes the lock when streaming (nothing when resident); end gives
 * it back. The matrices of a layer stay made after end (the next forward's first layer is
 * made ahead), so two slots stay allocated while the encoder lives. */
void text_weights_begin(const text_weights *tw);
void text_weights_end(const text_weights *tw);

/* Between begin and end: make the matrices of encoder layer `layer` usable (p->w of its
 * params; streaming: they replace the previous layer's, and the next layer's are started on
 * the helper thread). Resident: nothing. Errors: conversion failure (INPUT, naming the file),
 * out of memory (RUNTIME). */
cpdit_status text_weights_use_layer(const text_weights *tw, int layer, cpdit_error *err);

/* The usable weight of a registered matrix, or NULL with the error (RUNTIME) filled when its
 * layer is not the one in use (a bug in the caller). */
const cpdit_weight *text_param_weight(const text_weights *tw, const text_param *p,
                                      cpdit_error *err);

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
