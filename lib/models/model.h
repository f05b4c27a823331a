/* model.h — the model-family interface: what a diffusion model family (FLUX.1, Wan 2.1, ...)
 * gives the pipeline, `cpdit forward`, `cpdit tune` and the planner, so that none of them
 * names a family. lib/models/README.md is the one page on it (aesthetics, how to add a
 * family, which files).
 *
 * A family is one static table (model_family) in its folder lib/models/NAME/ and one line in
 * the family table (model_family.c). It is found from a diffusers folder by the `_class_name`
 * of transformer/config.json (or model_index.json's transformer entry): model_family_find.
 *
 * The life of one item, as the pipeline drives it (every rank of the CP group, same calls):
 *
 *   model_open(dir)                    config, transformer weights through the one weight loader,
 *                                      text encoders, scheduler and decoder configs checked
 *   geometry(w, h, frames, L)          latent shape (C, F', H', W'), S sequence tokens the
 *                                      sampler updates, token_dim features each
 *   encode_text(prompt) -> model_text  replicated on every rank
 *   noise (1, C, [F',] H', W') -> pack -> tokens (S, token_dim)      (pack / unpack)
 *   schedule_open(steps) -> model_schedule   sigmas, timesteps, the update rule
 *   shard_open(grid, texts) -> model_shard   this rank's token range [start, start + len) of
 *                                      the S tokens, its text share and position ids
 *   per step: forward(shard, text k, x_local, step) -> v_local;  schedule->step(x, v)
 *   gather(shard, x_local) -> tokens (S, token_dim) on every rank;  unpack -> latents
 *   decode: the decoder named by decoder_class (the pipeline's decode stage)
 *
 * Shapes are row-major fp32 host arrays. Every op returns cpdit_status and fills cpdit_error
 * (INPUT: a request or file the model cannot take, naming the key; RUNTIME: memory, I/O,
 * communication); ops over a grid are collective over its CP group and agree before their
 * first collective, so that bad input fails alike on every rank.
 */
#ifndef CPDIT_MODEL_H
#define CPDIT_MODEL_H

#include <stddef.h>

#include "kernels/backend.h"
#include "lib/core/cpdit_error.h"
#include "lib/cp/cp_attention.h"
#include "lib/cp/grid.h"
#include "lib/models/model_hooks.h"
#include "lib/text/text_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct model_family model_family;
typedef struct cpdit_model cpdit_model;
typedef struct model_text model_text;   /* one prompt's embeddings, the family's layout */
typedef struct model_shard model_shard; /* one item's tokens on this rank of a CP group */
typedef struct model_schedule model_schedule;
struct model_plan_shape;                /* lib/models/model_plan.h (the planner's) */
struct model_request;
struct weight_arena_ops;
struct cpdit_comm;

/* What the decoder makes. */
typedef enum model_output_kind {
    MODEL_OUTPUT_IMAGE = 0, /* (3, H, W) */
    MODEL_OUTPUT_VIDEO = 1  /* (3, F, H, W) */
} model_output_kind;

/* One decoded video frame on CP rank 0: chw (C, H, W) host fp32 in [-1, 1], frame f (0-based)
 * of the clip. Return 0 to go on, nonzero to stop (the decode then fails with INPUT). */
typedef int (*model_frame_fn)(void *ctx, int f, const float *chw, int C, int H, int W);

/* How a model is opened. Zero-initialised = transformer only, the defaults. */
typedef struct model_open_options {
    const cpdit_backend *backend;                   /* NULL: the default backend */
    const cpdit_attention_kernel *attention_kernel; /* NULL: the backend's default */
    cpdit_weight_format format;                     /* NATIVE or F32 (every component) */
    size_t budget;       /* bytes for resident transformer weights; 0: weight_budget_default(1) */
    const struct weight_arena_ops *arena; /* NULL, or node-shared storage for them */
    int no_prefetch;     /* streaming: make each block when it is needed */
    int text_encoders;   /* 1: load the text encoders (in what the budget leaves) and check the
                            scheduler and decoder configs (the pipeline); 0: transformer only */
} model_open_options;

/* What the weight loader did with the transformer's weights (lib/weights). */
typedef struct model_weight_stats {
    int resident;               /* 1: made once and kept */
    int shared;                 /* 1: in memory shared by the node's ranks */
    size_t matrix_bytes;        /* linear layers in the backend's form */
    size_t largest_group_bytes; /* the largest block's */
    double create_seconds;      /* reading + converting so far */
    double stall_seconds;       /* of which the forward waited for (streaming) */
    unsigned long long prefetched_groups, bytes_read, peer_groups;
    int stream_sharers;         /* streaming: ranks sharing the two slots (1: its own) */
} model_weight_stats;

/* One item's shapes. */
typedef struct model_geometry {
    int width, height, frames;  /* the request: pixels; frames 0 = an image */
    int latent_channels;        /* C */
    int latent_frames;          /* F' (0 for an image: latents (1, C, H', W')) */
    int latent_h, latent_w;     /* H', W' */
    int patch_t, patch_h, patch_w; /* latent values per token along (F', H', W') (FLUX: 1, 2, 2) */
    long long tokens;           /* S: the sequence tokens the sampler updates */
    int token_dim;              /* features per token */
    int text_tokens;            /* L: text tokens per prompt */
} model_geometry;

/* What one sampler step hands the forward. */
typedef struct model_step {
    int index;      /* 0 .. steps - 1 */
    float sigma;    /* the schedule's sigma_i */
    float timestep; /* the forward's timestep, in the family's units (schedule->timesteps[i]) */
    float guidance; /* distilled guidance (FLUX.1-dev embeds it); ignored without */
    /* NULL, or a cache's hooks (model_hooks.h: the residual stream after the embeddings, the
     * first block, the last block; skip the rest): only for a family with block_hooks */
    const model_block_hooks *hooks;
} model_step;

/* The scheduler a family samples with (FLUX: flow-match Euler; Wan: UniPC). */
struct model_schedule {
    int steps;
    const float *sigmas;    /* steps + 1, the last one 0 */
    const float *timesteps; /* steps: what the forward gets at step i */
    void *impl;
    /* x (n floats, any layout shared with v) <- the update of step i with the model output v */
    void (*step)(model_schedule *s, int i, float *x, const float *v, size_t n);
    /* {"sigmas": [...], "timesteps": [...]} as a new string (free()), the --dump file */
    cpdit_status (*to_json)(const model_schedule *s, char **json, cpdit_error *err);
    void (*free)(model_schedule *s);
};
void model_schedule_free(model_schedule *s); /* NULL is fine */

/* `cpdit forward --component transformer` on an inputs file (diffusers' argument names). */
typedef struct model_forward_file {
    const char *model, *inputs, *output; /* folder or file; IN.safetensors; OUT.safetensors */
    struct cpdit_comm *world;            /* every rank of the job (collective over it) */
    int ring, ulysses;
    cp_attention_config attn;            /* variant, anything, backend and kernel */
    const char *weight_format;           /* NULL: native */
    size_t weight_memory;                /* 0: unlimited */
    int no_weight_sharing, no_prefetch;
} model_forward_file;
/* What it did on this rank (for --verbose). */
typedef struct model_forward_result {
    double load_s, forward_s;  /* wall seconds: opening + loading weights and inputs; forward */
    int batch;                 /* B */
    long long text_tokens, tokens; /* of the inputs (text, image/video) */
    size_t params;
    size_t pss_bytes;          /* this process's PSS with the weights still held */
    model_weight_stats ws;
    char grid[128];            /* "dp 1 x ring 2 x ulysses 1" */
} model_forward_result;

struct model_family {
    const char *name;              /* "flux", "wan": --verbose, the planner's family */
    const char *transformer_class; /* _class_name of transformer/config.json */
    const char *decoder_class;     /* the decoder the pipeline runs ("AutoencoderKL") */
    model_output_kind output;
    int single_file;               /* 1: also opens a lone .safetensors transformer file */
    int block_hooks;               /* 1: forward honours model_step.hooks (caches can run) */

    /* ---- config, weights, text encoders (open fills m->impl) */
    cpdit_status (*open)(cpdit_model *m, const char *dir, const model_open_options *o,
                         cpdit_error *err);
    void (*close)(cpdit_model *m);
    void (*weight_stats)(const cpdit_model *m, model_weight_stats *s);
    size_t (*param_count)(const cpdit_model *m);
    /* the text encoders' weights (first and second encoder; zeroed when absent) */
    void (*text_weight_stats)(const cpdit_model *m, text_weight_stats *a, text_weight_stats *b);
    int (*default_steps)(const cpdit_model *m);  /* sampler steps of a folder without a request */
    int (*guidance_distilled)(const cpdit_model *m);

    /* ---- one item: geometry, text, latents, schedule */
    /* text_tokens 0: the family's default. INPUT errors name "width", "height", "frames",
     * "max_sequence_length". */
    cpdit_status (*geometry)(const cpdit_model *m, int width, int height, int frames, int text_tokens,
                             model_geometry *g, cpdit_error *err);
    cpdit_status (*encode_text)(cpdit_model *m, const char *prompt, int text_tokens, model_text **out,
                                cpdit_error *err);
    /* embeddings of the right shapes filled from a fixed hash (timing: tune, bench) */
    cpdit_status (*text_synthetic)(const cpdit_model *m, int text_tokens, unsigned seed,
                                   model_text **out, cpdit_error *err);
    void (*text_free)(model_text *t);
    /* latents (1, C, [F',] H', W') <-> tokens (S, token_dim); no aliasing */
    void (*pack)(const model_geometry *g, const float *latents, float *tokens);
    void (*unpack)(const model_geometry *g, const float *tokens, float *latents);
    /* flow_shift > 0: the request's shift (Wan's UniPC flow_shift); 0: the folder's scheduler
     * config (families without a static shift ignore it) */
    cpdit_status (*schedule_open)(const cpdit_model *m, const model_geometry *g, int steps,
                                  double flow_shift, model_schedule **out, cpdit_error *err);

    /* ---- the transformer on a CP-sharded token set */
    /* grid NULL: this rank holds everything. texts[n_texts]: the prompts the forwards may
     * use (positive, negative), each sharded as the family shards text. attn: variant and
     * anything (backend and kernel: the model's); uneven shares switch on "anything". */
    cpdit_status (*shard_open)(cpdit_model *m, const model_geometry *g, const cp_grid *grid,
                               const cp_attention_config *attn, const model_text *const *texts,
                               int n_texts, model_shard **out, cpdit_error *err);
    /* this rank's share [start, start + len) of the S sampler tokens */
    void (*shard_range)(const model_shard *s, long long *start, long long *len);
    /* v (len, token_dim) = the transformer on x (len, token_dim) with texts[text];
     * step->hooks (block_hooks families): the cache's view of the blocks (model_hooks.h) */
    cpdit_status (*forward)(cpdit_model *m, model_shard *s, int text, const float *x,
                            const model_step *step, float *v, cpdit_error *err);
    /* tokens (S, token_dim) on every rank of the group from each rank's x (len, token_dim) */
    cpdit_status (*gather)(model_shard *s, const float *x, float *tokens, cpdit_error *err);
    void (*shard_close)(model_shard *s);

    /* ---- video families (output VIDEO; NULL for images, which the pipeline decodes with
     * lib/vae): latents (C, F', H', W') as sampled, de-normalised here as the family's
     * pipeline does, decoded over grid (NULL: this rank alone; collective over grid->cp),
     * each frame handed to fn on CP rank sink (0 without a grid) as soon as it is decoded
     * (the same frames whatever sink; fn matters there only). latents may be
     * overwritten. A failure inside the split decode may leave peers waiting (as the image
     * VAE's): the caller ends the job. */
    cpdit_status (*decode_video)(cpdit_model *m, const model_geometry *g, const cp_grid *grid,
                                 int sink, float *latents, model_frame_fn fn, void *ctx,
                                 cpdit_error *err);

    /* ---- `cpdit forward --component transformer` (NULL: not yet for this family) */
    cpdit_status (*forward_file)(const model_forward_file *a, model_forward_result *r,
                                 cpdit_error *err);
    /* ---- the planner's shapes (lib/models/model_plan.h; NULL until it lands) */
    cpdit_status (*plan_shape)(struct model_plan_shape *s, const char *dir,
                               const struct model_request *req, cpdit_error *err);
};

/* An opened model. */
struct cpdit_model {
    const model_family *family;
    char *dir;                 /* the folder it was opened from */
    const cpdit_backend *be;   /* every component runs on it */
    const cpdit_attention_kernel *attn_kernel;
    void *impl;                /* the family's state */
};

/* ---- the family table (model_family.c) */

/* The family whose transformer class is class_name; NULL when none. */
const model_family *model_family_by_class(const char *class_name);
/* The family of a diffusers folder (pipeline root or transformer component folder) or a
 * single .safetensors transformer file (FLUX, the only family with such files). INPUT error
 * naming the file and the class when no family takes it, listing the known classes. */
cpdit_status model_family_find(const char *path, const model_family **out, cpdit_error *err);
/* The table itself: n families. */
const model_family *const *model_families(int *n);

/* Open the model at dir (builtin:NAME resolved by the caller) with its family's open; *out
 * NULL on failure. Free with model_close. */
cpdit_status model_open(cpdit_model **out, const char *dir, const model_open_options *o,
                        cpdit_error *err);
void model_close(cpdit_model *m); /* NULL is fine */

#ifdef __cplusplus
}
#endif
#endif
