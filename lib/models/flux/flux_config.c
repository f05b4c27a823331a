/* flux_config.c — the FluxTransformer2DModel config with diffusers' defaults and validation
 * (see flux_config.h). */
#include "lib/models/flux/flux_config.h"

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
            return model_config_int_error(where, sizes[i].key, err,
                                          allow_zero ? "must not be negative"
                                                     : "must be positive",
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
        return model_config_int_error(where, "axes_dims_rope", err,
                                      "number of entries out of range", c->n_axes);
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
    cpdit_status rc = model_config_check_class(cfg, FLUX_TRANSFORMER_CLASS, err);
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
