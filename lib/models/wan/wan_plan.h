/* wan_plan.h — Wan 2.1's planner shape (model_plan.h) from transformer/config.json.
 *
 * Reads the WanTransformer3DModel keys it needs itself (num_attention_heads,
 * attention_head_dim, num_layers, ffn_dim, text_dim, in_channels, out_channels, patch_size,
 * freq_dim; diffusers' defaults when absent: 40, 128, 40, 13824, 4096, 16, 16, [1, 2, 2],
 * 256) — to be reconciled with the Wan config parser (lib/models/wan/wan_config.h).
 *
 * Tokens, as WanPipeline makes them: latent frames 1 + (N - 1)/4 (the VAE's temporal
 * compression 4; N must be 4k + 1), latent H/8 x W/8 (spatial 8), patches 1 x 2 x 2:
 *   video = (1 + (N-1)/4)/pt x (H/16) x (W/16)   (480x832, 81 frames: 21 x 30 x 52 = 32760)
 * text = the request's text_tokens, default 512 (UMT5, zero-padded to the full length).
 * The video tokens are the sharded sequence (balanced over the CP ranks); every rank holds
 * all text tokens. Per block: self-attention over the video (sharded, cp_attention) and
 * cross-attention of the rank's video queries to all text tokens (local, compute only);
 * the text K/V projections and the text embedder run on every rank (replicated_flops).
 */
#ifndef CPDIT_WAN_PLAN_H
#define CPDIT_WAN_PLAN_H

#include "lib/io/model_config.h"
#include "lib/models/model_plan.h"
#include "lib/models/wan/wan_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WAN_PLAN_CLASS WAN_TRANSFORMER_CLASS
#define WAN_PLAN_VAE_TEMPORAL 4 /* AutoencoderKLWan scale_factor_temporal */
#define WAN_PLAN_VAE_SPATIAL 8  /* scale_factor_spatial */
#define WAN_PLAN_TEXT_LEN 512   /* WanPipeline max_sequence_length */

/* Fill s from c and a request (sizes: multiples of 16; frames 4k + 1; INPUT errors where =
 * "width" / "height" / "frames" / "max_sequence_length"). family, key are left to the
 * caller. */
cpdit_status wan_plan_shape(model_plan_shape *s, const wan_transformer_config *c,
                            const model_request *req, cpdit_error *err);

/* The same from a folder (pipeline root or transformer folder). */
cpdit_status wan_plan_shape_load(model_plan_shape *s, const char *dir, const model_request *req,
                                 cpdit_error *err);

/* Rank `rank` of `cp`: no sharded text, its balanced share of the video tokens. */
cpdit_status wan_plan_rank_tokens(const model_plan_shape *s, int cp, int rank, int *text,
                                  int *image, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
