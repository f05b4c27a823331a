/* component_config.c — the AutoencoderKL config with diffusers' defaults and validation (see
 * component_config.h). */
#include "lib/io/component_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* diffusers' AutoencoderKL.__init__ defaults. */
#define VAE_DEFAULT_IN_CHANNELS 3
#define VAE_DEFAULT_OUT_CHANNELS 3
#define VAE_DEFAULT_LATENT_CHANNELS 4
static const int VAE_DEFAULT_BLOCK_OUT_CHANNELS[] = {64};
#define VAE_DEFAULT_N_BLOCKS 1
#define VAE_DEFAULT_LAYERS_PER_BLOCK 1
#define VAE_DEFAULT_NORM_NUM_GROUPS 32
#define VAE_DEFAULT_SAMPLE_SIZE 32
#define VAE_DEFAULT_SCALING_FACTOR 0.18215
#define VAE_DEFAULT_ACT_FN "silu"
#define VAE_DOWN_BLOCK_TYPE "DownEncoderBlock2D"
#define VAE_UP_BLOCK_TYPE "UpDecoderBlock2D"

/* Activations diffusers' get_activation() knows. */
static const char *const VAE_ACT_FNS[] = {"silu", "swish", "gelu", "relu", "mish"};

/* --------------------------------------------------------------------- AutoencoderKL */

void autoencoder_kl_config_defaults(autoencoder_kl_config *c)
{
    memset(c, 0, sizeof *c);
    c->in_channels = VAE_DEFAULT_IN_CHANNELS;
    c->out_channels = VAE_DEFAULT_OUT_CHANNELS;
    c->latent_channels = VAE_DEFAULT_LATENT_CHANNELS;
    c->n_blocks = VAE_DEFAULT_N_BLOCKS;
    for (int i = 0; i < VAE_DEFAULT_N_BLOCKS; i++)
        c->block_out_channels[i] = VAE_DEFAULT_BLOCK_OUT_CHANNELS[i];
    c->layers_per_block = VAE_DEFAULT_LAYERS_PER_BLOCK;
    c->norm_num_groups = VAE_DEFAULT_NORM_NUM_GROUPS;
    c->sample_size = VAE_DEFAULT_SAMPLE_SIZE;
    c->scaling_factor = VAE_DEFAULT_SCALING_FACTOR;
    c->has_shift_factor = false;
    c->shift_factor = 0.0;
    snprintf(c->act_fn, sizeof c->act_fn, "%s", VAE_DEFAULT_ACT_FN);
    c->use_quant_conv = true;
    c->use_post_quant_conv = true;
    c->mid_block_add_attention = true;
    c->force_upcast = true;
}

cpdit_status autoencoder_kl_config_validate(const autoencoder_kl_config *c, const char *where,
                                            cpdit_error *err)
{
    const struct {
        const char *key;
        int value;
    } positive[] = {
        {"in_channels", c->in_channels},         {"out_channels", c->out_channels},
        {"latent_channels", c->latent_channels}, {"layers_per_block", c->layers_per_block},
        {"norm_num_groups", c->norm_num_groups}, {"sample_size", c->sample_size},
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++)
        if (positive[i].value <= 0)
            return model_config_int_error(where, positive[i].key, err, "must be positive",
                                          positive[i].value);
    if (c->n_blocks <= 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"block_out_channels\": must not be empty");
    if (c->n_blocks > VAE_MAX_BLOCKS)
        return model_config_int_error(where, "block_out_channels", err, "has too many entries",
                                      c->n_blocks);
    for (int i = 0; i < c->n_blocks; i++) {
        int ch = c->block_out_channels[i];
        if (ch <= 0 || ch % c->norm_num_groups != 0)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "key \"block_out_channels\": entry %d is %d; each must be a "
                                   "positive multiple of norm_num_groups (%d) for GroupNorm",
                                   i, ch, c->norm_num_groups);
    }
    if (!isfinite(c->scaling_factor) || c->scaling_factor <= 0.0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"scaling_factor\": must be a positive number (got %g)",
                               c->scaling_factor);
    if (c->has_shift_factor && !isfinite(c->shift_factor))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"shift_factor\": must be a finite number");
    int known = 0;
    for (size_t i = 0; i < sizeof VAE_ACT_FNS / sizeof VAE_ACT_FNS[0]; i++)
        known |= strcmp(c->act_fn, VAE_ACT_FNS[i]) == 0;
    if (!known)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"act_fn\": unknown activation \"%s\" (expected silu, "
                               "swish, gelu, relu or mish)",
                               c->act_fn);
    return CPDIT_OK;
}

/* down_block_types / up_block_types, when given, must have one entry per level, all of
 * the one block type AutoencoderKL's encoder/decoder use. */
static cpdit_status check_block_types(const model_config *cfg, const char *key,
                                      const char *type, int n_blocks, cpdit_error *err)
{
    if (!model_config_has(cfg, key))
        return CPDIT_OK;
    const char *types[VAE_MAX_BLOCKS];
    int n = 0;
    cpdit_status rc = model_config_get_string_array(cfg, key, types, VAE_MAX_BLOCKS, &n, err);
    if (rc)
        return rc;
    if (n != n_blocks)
        return model_config_key_error(cfg, key, err,
                                      "has %d entries but block_out_channels has %d", n,
                                      n_blocks);
    for (int i = 0; i < n; i++)
        if (strcmp(types[i], type) != 0)
            return model_config_key_error(cfg, key, err, "entry %d is \"%s\"; only \"%s\" is "
                                          "supported", i, types[i], type);
    return CPDIT_OK;
}

cpdit_status autoencoder_kl_config_from(const model_config *cfg, autoencoder_kl_config *c,
                                        cpdit_error *err)
{
    autoencoder_kl_config_defaults(c);
    const char *act = NULL;
    cpdit_status rc = model_config_check_class(cfg, AUTOENCODER_KL_CLASS, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "in_channels", VAE_DEFAULT_IN_CHANNELS,
                                          &c->in_channels, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "out_channels", VAE_DEFAULT_OUT_CHANNELS,
                                          &c->out_channels, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "latent_channels", VAE_DEFAULT_LATENT_CHANNELS,
                                          &c->latent_channels, err);
    if (!rc)
        rc = model_config_get_int_array_default(cfg, "block_out_channels",
                                                VAE_DEFAULT_BLOCK_OUT_CHANNELS,
                                                VAE_DEFAULT_N_BLOCKS, c->block_out_channels,
                                                VAE_MAX_BLOCKS, &c->n_blocks, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "layers_per_block", VAE_DEFAULT_LAYERS_PER_BLOCK,
                                          &c->layers_per_block, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "norm_num_groups", VAE_DEFAULT_NORM_NUM_GROUPS,
                                          &c->norm_num_groups, err);
    if (!rc) { /* an int, or [height, width] of which diffusers' tiling uses the first */
        int hw[2], n = 0;
        if (model_config_has(cfg, "sample_size") && model_config_get_int_array(
                                                        cfg, "sample_size", hw, 2, &n, NULL) == 0)
            c->sample_size = n > 0 ? hw[0] : 0;
        else
            rc = model_config_get_int_default(cfg, "sample_size", VAE_DEFAULT_SAMPLE_SIZE,
                                              &c->sample_size, err);
    }
    if (!rc)
        rc = model_config_get_double_default(cfg, "scaling_factor", VAE_DEFAULT_SCALING_FACTOR,
                                             &c->scaling_factor, err);
    if (!rc && model_config_has(cfg, "shift_factor")) {
        c->has_shift_factor = true;
        rc = model_config_get_double(cfg, "shift_factor", &c->shift_factor, err);
    }
    if (!rc)
        rc = model_config_get_string_default(cfg, "act_fn", VAE_DEFAULT_ACT_FN, &act, err);
    if (!rc && strlen(act) >= sizeof c->act_fn)
        rc = model_config_key_error(cfg, "act_fn", err, "unknown activation \"%.40s\"", act);
    if (!rc)
        snprintf(c->act_fn, sizeof c->act_fn, "%s", act);
    if (!rc)
        rc = model_config_get_bool_default(cfg, "use_quant_conv", true, &c->use_quant_conv, err);
    if (!rc)
        rc = model_config_get_bool_default(cfg, "use_post_quant_conv", true,
                                           &c->use_post_quant_conv, err);
    if (!rc)
        rc = model_config_get_bool_default(cfg, "mid_block_add_attention", true,
                                           &c->mid_block_add_attention, err);
    if (!rc)
        rc = model_config_get_bool_default(cfg, "force_upcast", true, &c->force_upcast, err);
    if (!rc)
        rc = autoencoder_kl_config_validate(c, cfg->path, err);
    if (!rc)
        rc = check_block_types(cfg, "down_block_types", VAE_DOWN_BLOCK_TYPE, c->n_blocks, err);
    if (!rc)
        rc = check_block_types(cfg, "up_block_types", VAE_UP_BLOCK_TYPE, c->n_blocks, err);
    return rc;
}
