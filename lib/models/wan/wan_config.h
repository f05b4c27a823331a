/* wan_config.h — the config of diffusers' WanTransformer3DModel (Wan 2.1 text-to-video), read
 * from a transformer/config.json.
 *
 * Missing keys (absent or null) take the defaults of WanTransformer3DModel.__init__ (the
 * 14B model's sizes: 40 heads x 128, FFN 13824, 40 layers, text_dim 4096). Wan2.1-T2V-1.3B
 * is 12 heads x 128, FFN 8960, 30 layers. Image conditioning (I2V: image_dim,
 * added_kv_proj_dim, pos_embed_seq_len) is not supported yet: a config that sets one of them
 * is an INPUT error naming the key. Errors name the file and the key, as component_config.h.
 */
#ifndef CPDIT_WAN_CONFIG_H
#define CPDIT_WAN_CONFIG_H

#include <stdbool.h>

#include "lib/core/cpdit_error.h"
#include "lib/io/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WAN_TRANSFORMER_CLASS "WanTransformer3DModel"
/* The one qk_norm diffusers builds (RMSNorm over inner_dim, before the heads are split). */
#define WAN_QK_NORM_ACROSS_HEADS "rms_norm_across_heads"
/* Bytes of the qk_norm string ("rms_norm_across_heads" is 21 characters). */
#define WAN_QK_NORM_MAX 32
/* Axes of the patch / RoPE grid: (frames, height, width). */
#define WAN_AXES 3

typedef struct wan_transformer_config {
    int patch_size[WAN_AXES];  /* (t, h, w); default (1, 2, 2) */
    int num_attention_heads;   /* default 40 */
    int attention_head_dim;    /* default 128 */
    int in_channels;           /* default 16 */
    int out_channels;          /* default 16 (None -> in_channels) */
    int text_dim;              /* default 4096 (UMT5-XXL's d_model) */
    int freq_dim;              /* default 256: sinusoidal timestep channels */
    int ffn_dim;               /* default 13824 */
    int num_layers;            /* default 40 */
    bool cross_attn_norm;      /* default true: affine LayerNorm (norm2) before attn2 */
    char qk_norm[WAN_QK_NORM_MAX]; /* default "rms_norm_across_heads" ("" for null) */
    double eps;                /* default 1e-6: every norm's */
    int rope_max_seq_len;      /* default 1024: most patches along any axis */
    int inner_dim;             /* derived: num_attention_heads * attention_head_dim */
    int rope_dims[WAN_AXES];   /* derived: head-dim columns of the (t, h, w) axes:
                                  h = w = 2 (D / 6), t = D - h - w (WanRotaryPosEmbed) */
    int patch_dim;             /* derived: in_channels * pt * ph * pw (a patch vector) */
    int out_dim;               /* derived: pt * ph * pw * out_channels (proj_out's rows) */
} wan_transformer_config;

/* diffusers' defaults (the derived fields set). */
void wan_transformer_config_defaults(wan_transformer_config *c);

/* Read c from a loaded transformer config.json (defaults for missing keys; _class_name, when
 * present, must be WanTransformer3DModel), then validate. */
cpdit_status wan_transformer_config_from(const model_config *cfg, wan_transformer_config *c,
                                         cpdit_error *err);

/* Check a filled struct (also one built in code) and set the derived fields. where: the file
 * or name for messages. Sizes must be positive (num_layers may be 0), attention_head_dim
 * even, qk_norm "rms_norm_across_heads" or "" (null: diffusers builds the same norms). */
cpdit_status wan_transformer_config_validate(wan_transformer_config *c, const char *where,
                                             cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
