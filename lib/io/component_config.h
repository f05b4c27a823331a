/* component_config.h — the typed config of the VAE (AutoencoderKL), from config.json (the FLUX
 * transformer's is lib/models/flux/flux_config.h).
 *
 * Missing keys (absent or null) take the defaults of diffusers' AutoencoderKL.__init__
 * (checked against diffusers' source and API docs), so a config.json written by an older
 * diffusers (e.g. without use_quant_conv) loads as diffusers would load it. Values are then
 * validated: sizes must be positive, block_out_channels must be non-empty and divisible by
 * norm_num_groups, ... Errors name the file and the key:
 *   "vae/config.json: key \"block_out_channels\": must not be empty".
 * A "_class_name" other than the expected class is an error too.
 */
#ifndef CPDIT_COMPONENT_CONFIG_H
#define CPDIT_COMPONENT_CONFIG_H

#include <stdbool.h>

#include "lib/core/cpdit_error.h"
#include "lib/io/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AUTOENCODER_KL_CLASS "AutoencoderKL"

/* Most VAE resolution levels a config may have. */
#define VAE_MAX_BLOCKS 8
#define VAE_ACT_FN_MAX 16

typedef struct autoencoder_kl_config {
    int in_channels;              /* default 3 */
    int out_channels;             /* default 3 */
    int latent_channels;          /* default 4 (16 for FLUX) */
    int n_blocks;                 /* len(block_out_channels) */
    int block_out_channels[VAE_MAX_BLOCKS]; /* default (64,) */
    int layers_per_block;         /* default 1 */
    int norm_num_groups;          /* default 32 */
    int sample_size;              /* default 32; the first element when given as [h, w] */
    double scaling_factor;        /* default 0.18215 */
    bool has_shift_factor;        /* shift_factor given (default None) */
    double shift_factor;          /* 0 when not given */
    char act_fn[VAE_ACT_FN_MAX];  /* default "silu" */
    bool use_quant_conv;          /* default true */
    bool use_post_quant_conv;     /* default true */
    bool mid_block_add_attention; /* default true */
    bool force_upcast;            /* default true */
} autoencoder_kl_config;

/* Fill c with diffusers' defaults. */
void autoencoder_kl_config_defaults(autoencoder_kl_config *c);

/* Read c from a loaded config.json (defaults for missing keys), then validate. */
cpdit_status autoencoder_kl_config_from(const model_config *cfg, autoencoder_kl_config *c,
                                        cpdit_error *err);

/* Validate a filled struct (also for configs built in code, e.g. builtin:tiny) and set
 * derived fields. where: the file or name for messages. */
cpdit_status autoencoder_kl_config_validate(const autoencoder_kl_config *c, const char *where,
                                            cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
