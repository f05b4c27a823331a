/* model_shape.h — what the cost model needs to know about a FLUX-class transformer and an
 * image size: layers, heads, head dim, hidden size, token counts, parameters.
 *
 * Read from a diffusers folder (pipeline root or transformer folder: its config.json through
 * lib/io) or from "builtin:NAME" (the built-in model's folder, written to the cache on first
 * use). Tokens: image (W/16)·(H/16) (VAE 8x, 2x2 packing), text = max_sequence_length, or
 * when 0 the pipeline's default (512 for guidance-distilled models such as FLUX.1-dev, 256
 * otherwise; lib/pipeline/pipeline.c).
 */
#ifndef CPDIT_MODEL_SHAPE_H
#define CPDIT_MODEL_SHAPE_H

#include "lib/core/cpdit_error.h"
#include "lib/models/flux/flux_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MODEL_SHAPE_T5_LEN_DEV 512
#define MODEL_SHAPE_T5_LEN_SCHNELL 256
#define MODEL_SHAPE_PIXELS_PER_TOKEN 16 /* VAE downsampling 8 x packing 2 */

typedef struct model_shape {
    char key[4096];       /* "builtin:tiny" or the folder's absolute path (the tuned key) */
    int layers_double;    /* num_layers */
    int layers_single;    /* num_single_layers */
    int heads;            /* num_attention_heads */
    int head_dim;         /* attention_head_dim */
    int hidden;           /* heads * head_dim */
    int mlp;              /* MLP hidden size (4 x hidden) */
    int in_channels, out_channels, joint_dim, pooled_dim;
    int width, height;    /* pixels */
    int txt_tokens, img_tokens;
    double params;        /* transformer parameters (from the config) */
} model_shape;

/* Fill s from a transformer config and an image size (multiples of 16, else INPUT error
 * where = "width"/"height"); max_seq_len 0 = the pipeline's default. */
cpdit_status model_shape_from_config(model_shape *s, const flux_transformer_config *c,
                                     int width, int height, int max_seq_len, cpdit_error *err);

/* Fill s from --model (a folder or builtin:NAME). Unknown built-in names, missing folders and
 * bad configs are INPUT errors. */
cpdit_status model_shape_load(model_shape *s, const char *model, int width, int height,
                              int max_seq_len, cpdit_error *err);

/* Linear-layer FLOPs of one forward over txt + img tokens (as flux_transformer_linear_flops). */
double model_shape_linear_flops(const model_shape *s, double txt, double img);

#ifdef __cplusplus
}
#endif
#endif
