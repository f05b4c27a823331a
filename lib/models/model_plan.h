/* model_plan.h — what the planner (topology/: the cost model, the probe of a model's shapes,
 * `cpdit plan`, `cpdit tune`, `parallel: auto`) needs to know about one forward of a model
 * family's transformer at one requested size, without naming the family.
 *
 * A family fills a model_plan_shape from its config (lib/models/flux_plan.c,
 * lib/models/wan_plan.c); model_plan_shape_load finds the family of a folder
 * (model_detect.h) and calls it. Everything downstream reads only this struct:
 *   - tokens: seq_tokens are sharded over the context-parallel group (FLUX: text + image;
 *     Wan: the video tokens); text_tokens are either part of that sequence (text_sharded = 1)
 *     or held whole by every rank (text_sharded = 0: Wan's cross-attention context);
 *   - attention: a list of kinds, each `count` calls per forward, either self-attention over
 *     the sharded sequence (cp_attention: communication per CP variant) or local attention of
 *     the rank's queries to replicated keys / values (cross-attention: compute only);
 *   - linear layers: total FLOPs (linear_flops) and the part of it that every rank repeats
 *     (replicated_flops: projections of the replicated text tokens), and the GEMMs by shape
 *     (gemm[]: what the probe times);
 *   - element-wise work per block kind (block_ops[]: what the probe times beside the GEMMs);
 *   - parameters (memory per rank).
 * The struct holds no pointers: it is broadcast between ranks as bytes.
 */
#ifndef CPDIT_MODEL_PLAN_H
#define CPDIT_MODEL_PLAN_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MODEL_FAMILY_NAME_MAX 16
#define MODEL_PLAN_KEY_MAX 4096
#define MODEL_PLAN_MAX_ATTN 4
#define MODEL_PLAN_MAX_GEMM 16
#define MODEL_PLAN_MAX_BLOCK_KINDS 4
#define MODEL_PLAN_MAX_SIDE 16384    /* pixels */
#define MODEL_PLAN_MAX_FRAMES 100000 /* video frames */

/* What one item asks for, family-neutral. */
typedef struct model_request {
    int width, height; /* pixels */
    int frames;        /* video frames (0/1: an image) */
    int text_tokens;   /* 0: the family's default (FLUX: 512 dev / 256 schnell; Wan: 512) */
    int cfg;           /* 1: two transformer forwards per step (true CFG / negative prompt) */
    int steps;         /* sampler steps (0: the family's default) */
} model_request;

/* One kind of attention call of a forward, as the cost model prices it. */
typedef struct model_attention_kind {
    int count;          /* calls per forward */
    long long q_tokens; /* queries (the whole sequence over the CP group) */
    long long kv_tokens; /* keys/values */
    int heads, head_dim;
    int sharded;        /* 1: self-attention over the CP-sharded sequence (cp_attention:
                           communication); 0: local per rank (cross-attention to the
                           replicated text: compute only, queries sharded) */
} model_attention_kind;

/* The rows a GEMM runs over on one rank of a CP group (model_plan_rank_tokens). */
typedef enum model_rows {
    MODEL_ROWS_TEXT = 0, /* the rank's share of the sharded text tokens (FLUX's text stream) */
    MODEL_ROWS_IMAGE,    /* the rank's share of the image / video tokens */
    MODEL_ROWS_SEQ,      /* the rank's whole share (text + image: a joint stream) */
    MODEL_ROWS_TEXT_ALL  /* every text token, on every rank (replicated work) */
} model_rows;

/* y (m, n) = x (m, k) W^T, `count` times per forward, m from `rows`. */
typedef struct model_gemm {
    int rows; /* model_rows */
    int k, n, count;
} model_gemm;

/* Element-wise backend calls of one block of a kind, over the rank's rows (per call: E wide
 * unless said otherwise). */
typedef struct model_block_ops {
    int count;          /* blocks of this kind per forward */
    int norm_mod;       /* LayerNorm + modulation (shift, scale) */
    int qk_norm_rope;   /* RMSNorm + RoPE of q or of k (H x D) */
    int gelu;           /* GELU-tanh over the MLP width F */
    int concat;         /* an E-wide copy into an (E + F)-wide row (FLUX single blocks) */
    int gated_residual; /* x += gate * y */
} model_block_ops;

typedef struct model_plan_shape {
    char family[MODEL_FAMILY_NAME_MAX]; /* "flux", "wan" */
    char key[MODEL_PLAN_KEY_MAX];       /* builtin:NAME or the folder's absolute path */
    char blocks_text[32];               /* the blocks as the tables print them: "19+38", "30" */
    int heads, head_dim, hidden;        /* hidden = heads * head_dim (E) */
    int mlp;                            /* MLP hidden size (F) */
    int blocks;                         /* transformer blocks (FLUX: double + single) */
    long long seq_tokens;               /* sharded over the CP group */
    long long text_tokens, image_tokens; /* image_tokens = image or video tokens */
    int text_sharded;                   /* 1: text is part of seq_tokens; 0: replicated */
    int width, height, frames;          /* the request (frames 1 for an image) */
    int forwards_per_step;              /* 2 with true CFG, else 1 */
    int n_attn;
    model_attention_kind attn[MODEL_PLAN_MAX_ATTN];
    double linear_flops;     /* per forward on one rank holding every token, 2 per MAC */
    double replicated_flops; /* the part of linear_flops every CP rank repeats (replicated
                                text tokens), 0 when everything is sharded */
    double params;           /* transformer parameters */
    int n_gemm;
    model_gemm gemm[MODEL_PLAN_MAX_GEMM];
    int n_block_kinds;
    model_block_ops block_ops[MODEL_PLAN_MAX_BLOCK_KINDS];
} model_plan_shape;

/* What a family provides to the planner (the family table's plan_shape entry; FLUX:
 * flux_plan_shape_load, Wan: wan_plan_shape_load): fill s for the model folder dir (pipeline
 * root or transformer folder) and req; and the tokens CP rank `rank` of `cp` holds. */
typedef cpdit_status (*model_plan_shape_fn)(model_plan_shape *s, const char *dir,
                                            const model_request *req, cpdit_error *err);
typedef cpdit_status (*model_plan_rank_tokens_fn)(const model_plan_shape *s, int cp, int rank,
                                                  int *text, int *image, cpdit_error *err);

/* A request with every field 0 (the family's defaults; frames 0 = an image). */
void model_request_defaults(model_request *r);

/* Fill s for --model (a folder: pipeline root or transformer folder, or builtin:NAME) and
 * req: the family from _class_name (model_family_of), then that family's plan shape. Unknown
 * built-in names, missing folders, bad configs, unknown families and sizes the family cannot
 * make are INPUT errors naming the file / key / option. */
cpdit_status model_plan_shape_load(model_plan_shape *s, const char *model,
                                   const model_request *req, cpdit_error *err);

/* The text and image tokens CP rank `rank` of `cp` ranks holds, as the family's runtime
 * splits them (FLUX: flux_shard_layout; Wan: the video balanced, no text). */
cpdit_status model_plan_rank_tokens(const model_plan_shape *s, int cp, int rank, int *text,
                                    int *image, cpdit_error *err);

/* Linear-layer FLOPs of one forward on one rank of a CP group over `share` of the sequence's
 * tokens (l / seq_tokens): the sharded part scaled, the replicated part whole. */
double model_plan_rank_linear_flops(const model_plan_shape *s, double share);

/* Rows of a GEMM on a rank holding `text` sharded text and `image` tokens. */
int model_plan_gemm_rows(const model_plan_shape *s, const model_gemm *g, int text, int image);

/* Append to s (silently ignored past the MODEL_PLAN_MAX_* limits: the families stay below). */
void model_plan_add_attention(model_plan_shape *s, int count, long long q, long long kv,
                              int sharded);
void model_plan_add_gemm(model_plan_shape *s, model_rows rows, int k, int n, int count);
void model_plan_add_block_ops(model_plan_shape *s, model_block_ops ops);

/* Check a request's size: width / height multiples of `multiple` in [multiple,
 * MODEL_PLAN_MAX_SIDE] (INPUT error where = "width" / "height"), text_tokens in
 * [0, max_text] (where = "max_sequence_length"), frames in [0, MODEL_PLAN_MAX_FRAMES]. */
cpdit_status model_plan_check_request(const model_request *req, int multiple, int max_text,
                                      cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
