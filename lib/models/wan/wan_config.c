/* wan_config.c — WanTransformer3DModel's config.json: diffusers' defaults, reading, checks. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "lib/models/wan/wan_config.h"

/* WanTransformer3DModel.__init__'s defaults. */
static const int WAN_DEFAULT_PATCH_SIZE[WAN_AXES] = {1, 2, 2};
#define WAN_DEFAULT_HEADS 40
#define WAN_DEFAULT_HEAD_DIM 128
#define WAN_DEFAULT_IN_CHANNELS 16
#define WAN_DEFAULT_TEXT_DIM 4096
#define WAN_DEFAULT_FREQ_DIM 256
#define WAN_DEFAULT_FFN_DIM 13824
#define WAN_DEFAULT_NUM_LAYERS 40
#define WAN_DEFAULT_EPS 1e-6
#define WAN_DEFAULT_ROPE_MAX_SEQ_LEN 1024
/* Guards against configs whose products overflow an int. */
#define WAN_MAX_INNER_DIM (1 << 20)
#define WAN_MAX_SIZE (1 << 24)
/* WanRotaryPosEmbed: h and w get 2 * (D / RATIO) columns each, t the rest. */
#define WAN_ROPE_HW_RATIO 6

/* Image-conditioning keys (Wan 2.1 I2V / FLF2V) this port does not run yet. */
static const char *const WAN_UNSUPPORTED_KEYS[] = {"image_dim", "added_kv_proj_dim",
                                                   "pos_embed_seq_len"};

static void derive(wan_transformer_config *c)
{
    const int D = c->attention_head_dim;
    c->inner_dim = c->num_attention_heads * D;
    c->rope_dims[1] = c->rope_dims[2] = 2 * (D / WAN_ROPE_HW_RATIO);
    c->rope_dims[0] = D - c->rope_dims[1] - c->rope_dims[2];
    const int p = c->patch_size[0] * c->patch_size[1] * c->patch_size[2];
    c->patch_dim = c->in_channels * p;
    c->out_dim = c->out_channels * p;
}

void wan_transformer_config_defaults(wan_transformer_config *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < WAN_AXES; i++)
        c->patch_size[i] = WAN_DEFAULT_PATCH_SIZE[i];
    c->num_attention_heads = WAN_DEFAULT_HEADS;
    c->attention_head_dim = WAN_DEFAULT_HEAD_DIM;
    c->in_channels = WAN_DEFAULT_IN_CHANNELS;
    c->out_channels = WAN_DEFAULT_IN_CHANNELS;
    c->text_dim = WAN_DEFAULT_TEXT_DIM;
    c->freq_dim = WAN_DEFAULT_FREQ_DIM;
    c->ffn_dim = WAN_DEFAULT_FFN_DIM;
    c->num_layers = WAN_DEFAULT_NUM_LAYERS;
    c->cross_attn_norm = true;
    snprintf(c->qk_norm, sizeof c->qk_norm, "%s", WAN_QK_NORM_ACROSS_HEADS);
    c->eps = WAN_DEFAULT_EPS;
    c->rope_max_seq_len = WAN_DEFAULT_ROPE_MAX_SEQ_LEN;
    derive(c);
}

cpdit_status wan_transformer_config_validate(wan_transformer_config *c, const char *where,
                                             cpdit_error *err)
{
    const struct {
        const char *key;
        int value;
        int min;
    } sizes[] = {
        {"patch_size", c->patch_size[0], 1},   {"patch_size", c->patch_size[1], 1},
        {"patch_size", c->patch_size[2], 1},   {"num_attention_heads", c->num_attention_heads, 1},
        {"attention_head_dim", c->attention_head_dim, 2}, {"in_channels", c->in_channels, 1},
        {"out_channels", c->out_channels, 1},  {"text_dim", c->text_dim, 1},
        {"freq_dim", c->freq_dim, 2},          {"ffn_dim", c->ffn_dim, 1},
        {"num_layers", c->num_layers, 0},      {"rope_max_seq_len", c->rope_max_seq_len, 1},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (sizes[i].value < sizes[i].min || sizes[i].value > WAN_MAX_SIZE)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "key \"%s\": %d is out of range (%d to %d)", sizes[i].key,
                                   sizes[i].value, sizes[i].min, WAN_MAX_SIZE);
    }
    if (c->attention_head_dim % 2)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"attention_head_dim\": %d is odd; RoPE rotates pairs of "
                               "the head dim, which must be even",
                               c->attention_head_dim);
    if (c->freq_dim % 2)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"freq_dim\": %d is odd; the sinusoidal embedding has cos "
                               "and sin halves",
                               c->freq_dim);
    if (c->qk_norm[0] && strcmp(c->qk_norm, WAN_QK_NORM_ACROSS_HEADS))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"qk_norm\": \"%s\" is not supported; WanTransformer3DModel "
                               "normalises q and k with \"%s\"",
                               c->qk_norm, WAN_QK_NORM_ACROSS_HEADS);
    if (!(c->eps > 0) || c->eps > 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "key \"eps\": %g is out of range (0, 1]", c->eps);
    const long long inner = (long long)c->num_attention_heads * c->attention_head_dim;
    const long long patch = (long long)c->patch_size[0] * c->patch_size[1] * c->patch_size[2];
    if (inner > WAN_MAX_INNER_DIM || patch * c->in_channels > WAN_MAX_SIZE ||
        patch * c->out_channels > WAN_MAX_SIZE)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "num_attention_heads x attention_head_dim = %lld or the patch "
                               "vector (%lld x %d channels) is implausibly large",
                               inner, patch, c->in_channels);
    derive(c);
    return CPDIT_OK;
}

static cpdit_status read_patch_size(const model_config *cfg, wan_transformer_config *c,
                                    cpdit_error *err)
{
    int n = 0;
    cpdit_status st = model_config_get_int_array_default(cfg, "patch_size",
                                                         WAN_DEFAULT_PATCH_SIZE, WAN_AXES,
                                                         c->patch_size, WAN_AXES, &n, err);
    if (st)
        return st;
    if (n != WAN_AXES)
        return model_config_key_error(cfg, "patch_size", err,
                                      "has %d entries; expected 3 (t, h, w)", n);
    return CPDIT_OK;
}

cpdit_status wan_transformer_config_from(const model_config *cfg, wan_transformer_config *c,
                                         cpdit_error *err)
{
    wan_transformer_config_defaults(c);
    cpdit_status st = model_config_check_class(cfg, WAN_TRANSFORMER_CLASS, err);
    if (st)
        return st;
    for (size_t i = 0; i < sizeof WAN_UNSUPPORTED_KEYS / sizeof WAN_UNSUPPORTED_KEYS[0]; i++)
        if (model_config_has(cfg, WAN_UNSUPPORTED_KEYS[i]))
            return model_config_key_error(cfg, WAN_UNSUPPORTED_KEYS[i], err,
                                          "is set: image conditioning (Wan I2V) is not "
                                          "supported yet; only text-to-video models run");
    const struct {
        const char *key;
        int *dst;
    } ints[] = {
        {"num_attention_heads", &c->num_attention_heads},
        {"attention_head_dim", &c->attention_head_dim},
        {"in_channels", &c->in_channels},
        {"text_dim", &c->text_dim},
        {"freq_dim", &c->freq_dim},
        {"ffn_dim", &c->ffn_dim},
        {"num_layers", &c->num_layers},
        {"rope_max_seq_len", &c->rope_max_seq_len},
    };
    st = read_patch_size(cfg, c, err);
    for (size_t i = 0; !st && i < sizeof ints / sizeof ints[0]; i++)
        st = model_config_get_int_default(cfg, ints[i].key, *ints[i].dst, ints[i].dst, err);
    /* out_channels: None means in_channels */
    if (!st)
        st = model_config_get_int_default(cfg, "out_channels", c->in_channels, &c->out_channels,
                                          err);
    if (!st)
        st = model_config_get_bool_default(cfg, "cross_attn_norm", true, &c->cross_attn_norm,
                                           err);
    if (!st)
        st = model_config_get_double_default(cfg, "eps", WAN_DEFAULT_EPS, &c->eps, err);
    /* absent or null: the default (diffusers builds the same norms for any value) */
    const char *qk = NULL;
    if (!st && model_config_has(cfg, "qk_norm")) {
        st = model_config_get_string(cfg, "qk_norm", &qk, err);
        if (!st && strlen(qk) >= sizeof c->qk_norm)
            return model_config_key_error(cfg, "qk_norm", err, "\"%s\" is not supported", qk);
        if (!st)
            snprintf(c->qk_norm, sizeof c->qk_norm, "%s", qk);
    }
    if (st)
        return st;
    return wan_transformer_config_validate(c, cfg->path, err);
}
