/* flux_config.h — the typed config of FLUX's transformer (diffusers' FluxTransformer2DModel)
 * from its config.json.
 *
 * Missing keys (absent or null) take the defaults of FluxTransformer2DModel.__init__, so a
 * config.json written by an older diffusers (e.g. without out_channels) loads as diffusers
 * would load it. Values are then validated: sizes must be positive, sum(axes_dims_rope) must
 * equal attention_head_dim, ... Errors name the file and the key. A "_class_name" other than
 * FluxTransformer2DModel is an error too.
 */
#ifndef CPDIT_FLUX_CONFIG_H
#define CPDIT_FLUX_CONFIG_H

#include <stdbool.h>

#include "lib/core/cpdit_error.h"
#include "lib/io/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLUX_TRANSFORMER_CLASS "FluxTransformer2DModel"

/* Most RoPE axes a config may have. */
#define FLUX_MAX_ROPE_AXES 8
/* The largest plausible transformer config values (flux_transformer_config_validate). */
#define FLUX_PLAUSIBLE_LAYERS_MAX 1024  /* num_layers, num_single_layers (FLUX.1: 19, 38) */
#define FLUX_PLAUSIBLE_HEADS_MAX 1024   /* num_attention_heads (FLUX.1: 24) */
#define FLUX_PLAUSIBLE_WIDTH_MAX 65536  /* channels, head and text dims (FLUX.1: <= 4096) */
#define FLUX_PLAUSIBLE_PATCH_MAX 64     /* patch_size (FLUX.1: 1) */

typedef struct flux_transformer_config {
    int patch_size;            /* default 1 */
    int in_channels;           /* default 64 (16 latent channels x 2x2 packing) */
    int out_channels;          /* default None -> in_channels */
    int num_layers;            /* default 19: dual-stream (MMDiT) blocks */
    int num_single_layers;     /* default 38: single-stream blocks */
    int attention_head_dim;    /* default 128 */
    int num_attention_heads;   /* default 24 */
    int joint_attention_dim;   /* default 4096: T5 hidden size (encoder_hidden_states) */
    int pooled_projection_dim; /* default 768: CLIP pooled size */
    bool guidance_embeds;      /* default false (true for FLUX.1-dev) */
    int n_axes;                /* default 3 */
    int axes_dims_rope[FLUX_MAX_ROPE_AXES]; /* default (16, 56, 56) */
    int inner_dim;             /* derived: num_attention_heads * attention_head_dim */
} flux_transformer_config;

/* Fill c with diffusers' defaults. */
void flux_transformer_config_defaults(flux_transformer_config *c);
/* Read c from a loaded config.json (defaults for missing keys), then validate. */
cpdit_status flux_transformer_config_from(const model_config *cfg, flux_transformer_config *c,
                                          cpdit_error *err);
/* Validate a filled struct (also for configs built in code, e.g. builtin:tiny) and set
 * derived fields. where: the file or name for messages. */
cpdit_status flux_transformer_config_validate(flux_transformer_config *c, const char *where,
                                              cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
