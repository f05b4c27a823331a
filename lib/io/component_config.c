/* component_config.c — FluxTransformer2DModel and AutoencoderKL configs with diffusers'
 * defaults and validation (see component_config.h). */
#include "lib/io/component_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* diffusers' FluxTransformer2DModel.__init__ defaults. */
#define FLUX_DEFAULT_PATCH_SIZE 1
#define FLUX_DEFAULT_IN_CHANNELS 64
#define FLUX_DEFAULT_NUM_LAYERS 19
#define FLUX_DEFAULT_NUM_SINGLE_LAYERS 38
#define FLUX_DEFAULT_ATTENTION_HEAD_DIM 128
#define FLUX_DEFAULT_NUM_ATTENTION_HEADS 24
#define FLUX_DEFAULT_JOINT_ATTENTION_DIM 4096
#define FLUX_DEFAULT_POOLED_PROJECTION_DIM 768
static const int FLUX_DEFAULT_AXES_DIMS_ROPE[] = {16, 56, 56};
#define FLUX_DEFAULT_N_AXES 3
/* Sanity bound on num_attention_heads x attention_head_dim (FLUX.1 uses 3072). */
#define FLUX_MAX_INNER_DIM (1 << 20)

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

static cpdit_status key_error(const char *where, const char *key, cpdit_error *err,
                              const char *what, int value)
{
    return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "key \"%s\": %s (got %d)", key, what,
                           value);
}

static cpdit_status check_class(const model_config *cfg, const char *expected, cpdit_error *err)
{
    const char *cls = model_config_class_name(cfg);
    if (cls && strcmp(cls, expected) != 0)
        return model_config_key_error(cfg, "_class_name", err,
                                      "is \"%s\", expected \"%s\" (wrong component folder?)",
                                      cls, expected);
    return CPDIT_OK;
}

/* --------------------------------------------------------------- FluxTransformer2DModel */

void flux_transformer_config_defaults(flux_transformer_config *c)
{
    memset(c, 0, sizeof *c);
    c->patch_size = FLUX_DEFAULT_PATCH_SIZE;
    c->in_channels = FLUX_DEFAULT_IN_CHANNELS;
    c->out_channels = FLUX_DEFAULT_IN_CHANNELS;
    c->num_layers = FLUX_DEFAULT_NUM_LAYERS;
    c->num_single_layers = FLUX_DEFAULT_NUM_SINGLE_LAYERS;
    c->attention_head_dim = FLUX_DEFAULT_ATTENTION_HEAD_DIM;
    c->num_attention_heads = FLUX_DEFAULT_NUM_ATTENTION_HEADS;
    c->joint_attention_dim = FLUX_DEFAULT_JOINT_ATTENTION_DIM;
    c->pooled_projection_dim = FLUX_DEFAULT_POOLED_PROJECTION_DIM;
    c->guidance_embeds = false;
    c->n_axes = FLUX_DEFAULT_N_AXES;
    for (int i = 0; i < FLUX_DEFAULT_N_AXES; i++)
        c->axes_dims_rope[i] = FLUX_DEFAULT_AXES_DIMS_ROPE[i];
    c->inner_dim = c->num_attention_heads * c->attention_head_dim;
}

cpdit_status flux_transformer_config_validate(flux_transformer_config *c, const char *where,
                                              cpdit_error *err)
{
    /* the most each key may plausibly be (FLUX.1: 19 + 38 layers, 24 heads of 128, 4096 text
     * features): far larger means a corrupt config, refused here by name rather than as an
     * allocation of the weights failing later */
    const struct {
        const char *key;
        int value;
        int max;
    } sizes[] = {
        {"patch_size", c->patch_size, FLUX_PLAUSIBLE_PATCH_MAX},
        {"in_channels", c->in_channels, FLUX_PLAUSIBLE_WIDTH_MAX},
        {"out_channels", c->out_channels, FLUX_PLAUSIBLE_WIDTH_MAX},
        {"num_layers", c->num_layers, FLUX_PLAUSIBLE_LAYERS_MAX},
        {"num_single_layers", c->num_single_layers, FLUX_PLAUSIBLE_LAYERS_MAX},
        {"attention_head_dim", c->attention_head_dim, FLUX_PLAUSIBLE_WIDTH_MAX},
        {"num_attention_heads", c->num_attention_heads, FLUX_PLAUSIBLE_HEADS_MAX},
        {"joint_attention_dim", c->joint_attention_dim, FLUX_PLAUSIBLE_WIDTH_MAX},
        {"pooled_projection_dim", c->pooled_projection_dim, FLUX_PLAUSIBLE_WIDTH_MAX},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        /* Zero layers is a legal (if odd) model; every other size must be positive. */
        int allow_zero = !strcmp(sizes[i].key, "num_layers") ||
                         !strcmp(sizes[i].key, "num_single_layers");
        if (sizes[i].value < (allow_zero ? 0 : 1))
            return key_error(where, sizes[i].key, err,
                             allow_zero ? "must not be negative" : "must be positive",
                             sizes[i].value);
        if (sizes[i].value > sizes[i].max)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "key \"%s\": %d is implausible "
                                   "(at most %d); the config is probably corrupt",
                                   sizes[i].key, sizes[i].value, sizes[i].max);
    }
    if (c->num_layers + c->num_single_layers == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "keys \"num_layers\" and \"num_single_layers\" are both 0: the "
                               "model has no transformer blocks");
    if (c->n_axes < 1 || c->n_axes > FLUX_MAX_ROPE_AXES)
        return key_error(where, "axes_dims_rope", err, "number of entries out of range", c->n_axes);
    long sum = 0;
    for (int i = 0; i < c->n_axes; i++) {
        int d = c->axes_dims_rope[i];
        if (d <= 0 || d % 2 != 0)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "key \"axes_dims_rope\": entry %d is %d; each must be a "
                                   "positive even number (RoPE rotates pairs)",
                                   i, d);
        sum += d;
    }
    if (sum != c->attention_head_dim)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"axes_dims_rope\": entries sum to %ld but "
                               "attention_head_dim is %d; they must be equal",
                               sum, c->attention_head_dim);
    long long inner = (long long)c->num_attention_heads * c->attention_head_dim;
    if (inner > FLUX_MAX_INNER_DIM)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "num_attention_heads x attention_head_dim = %lld is implausibly "
                               "large",
                               inner);
    c->inner_dim = (int)inner;
    return CPDIT_OK;
}

cpdit_status flux_transformer_config_from(const model_config *cfg, flux_transformer_config *c,
                                          cpdit_error *err)
{
    flux_transformer_config_defaults(c);
    cpdit_status rc = check_class(cfg, FLUX_TRANSFORMER_CLASS, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "patch_size", FLUX_DEFAULT_PATCH_SIZE,
                                          &c->patch_size, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "in_channels", FLUX_DEFAULT_IN_CHANNELS,
                                          &c->in_channels, err);
    if (!rc) /* out_channels: None (absent or null) means in_channels */
        rc = model_config_get_int_default(cfg, "out_channels", c->in_channels,
                                          &c->out_channels, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "num_layers", FLUX_DEFAULT_NUM_LAYERS,
                                          &c->num_layers, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "num_single_layers",
                                          FLUX_DEFAULT_NUM_SINGLE_LAYERS,
                                          &c->num_single_layers, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "attention_head_dim",
                                          FLUX_DEFAULT_ATTENTION_HEAD_DIM,
                                          &c->attention_head_dim, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "num_attention_heads",
                                          FLUX_DEFAULT_NUM_ATTENTION_HEADS,
                                          &c->num_attention_heads, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "joint_attention_dim",
                                          FLUX_DEFAULT_JOINT_ATTENTION_DIM,
                                          &c->joint_attention_dim, err);
    if (!rc)
        rc = model_config_get_int_default(cfg, "pooled_projection_dim",
                                          FLUX_DEFAULT_POOLED_PROJECTION_DIM,
                                          &c->pooled_projection_dim, err);
    if (!rc)
        rc = model_config_get_bool_default(cfg, "guidance_embeds", false, &c->guidance_embeds,
                                           err);
    if (!rc)
        rc = model_config_get_int_array_default(cfg, "axes_dims_rope",
                                                FLUX_DEFAULT_AXES_DIMS_ROPE, FLUX_DEFAULT_N_AXES,
                                                c->axes_dims_rope, FLUX_MAX_ROPE_AXES,
                                                &c->n_axes, err);
    if (!rc)
        rc = flux_transformer_config_validate(c, cfg->path, err);
    return rc;
}

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
    if (c->in_channels <= 0)
        return key_error(where, "in_channels", err, "must be positive", c->in_channels);
    if (c->out_channels <= 0)
        return key_error(where, "out_channels", err, "must be positive", c->out_channels);
    if (c->latent_channels <= 0)
        return key_error(where, "latent_channels", err, "must be positive", c->latent_channels);
    if (c->layers_per_block <= 0)
        return key_error(where, "layers_per_block", err, "must be positive", c->layers_per_block);
    if (c->norm_num_groups <= 0)
        return key_error(where, "norm_num_groups", err, "must be positive", c->norm_num_groups);
    if (c->sample_size <= 0)
        return key_error(where, "sample_size", err, "must be positive", c->sample_size);
    if (c->n_blocks <= 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"block_out_channels\": must not be empty");
    if (c->n_blocks > VAE_MAX_BLOCKS)
        return key_error(where, "block_out_channels", err, "has too many entries",
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
    cpdit_status rc = check_class(cfg, AUTOENCODER_KL_CLASS, err);
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
