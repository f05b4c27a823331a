/* wan_vae.h — the decoder half of diffusers' AutoencoderKLWan (the `vae/` of the Wan 2.1
 * diffusers repos) through the backend table, one rank or split by rows over a CP group.
 *
 *   vae.decode(z (B, z_dim, T, h, w)):
 *     post_quant_conv (causal conv 1x1x1, z_dim -> z_dim), then WanDecoder3d one latent frame
 *     at a time (diffusers' feat_cache: every causal conv keeps the last CACHE_T = 2 frames of
 *     its input, so memory does not grow with T), then clamp to [-1, 1]:
 *     conv_in (causal 3x3x3, z_dim -> dims[0])
 *     mid block: residual block, attention, residual block
 *     up blocks i = 0..n-1 (n = len(dim_mult)): num_res_blocks + 1 residual blocks
 *       (in -> out for the first), then, except for the last block, a resample:
 *       upsample3d (temperal_upsample[i]): time_conv (causal 3x1x1, C -> 2C) on every frame
 *         but the clip's first, each frame becoming two (channels [0, C) then [C, 2C)), then
 *         nearest 2x + conv 3x3 (C -> C/2) per frame;
 *       upsample2d: nearest 2x + conv 3x3 (C -> C/2) per frame;
 *     norm_out, SiLU, conv_out (causal 3x3x3, dims[-1] -> out_channels)
 *   dims = base_dim · [dim_mult[-1], reversed(dim_mult)...]; block i > 0 takes dims[i] / 2
 *   channels (the previous resample halved them); temperal_upsample = reversed
 *   temperal_downsample.
 *   Residual block: h = shortcut(x) (causal 1x1x1 when the channel count changes, else x);
 *     x = conv2(silu(norm2(conv1(silu(norm1(x)))))) + h.
 *   Causal conv (kt, 3, 3): zero padding of kt - 1 frames on the past side only, "same"
 *     spatial padding; decoding frame by frame with the last kt - 1 input frames kept equals
 *     the conv over the whole clip.
 *   WanRMS_norm: x / ||x||_2 over the channels of each pixel · sqrt(C) · gamma (no bias in
 *     Wan 2.1's decoder).
 *   Attention (per frame, over its h·w positions, one head of C channels): norm, to_qkv
 *     (1x1, C -> 3C: q, k, v in that order), softmax(q kᵀ / sqrt(C)) v, proj (1x1), + x.
 * Frames: T latent frames decode to 1 + 2^k (T - 1) frames, k = the number of upsample3d
 * (k = 2 for Wan 2.1: 1 + 4 (T - 1)); pixels 2^(n-1) = 8 per latent value along each side.
 * WanPipeline maps its latents to the decoder's input first: wan_vae_latents_denormalize.
 *
 * Split over ranks (wan_vae_decode_group) exactly as the FLUX VAE (lib/vae/vae_decode.c): each
 * rank holds a band of rows of every frame (cp_shard_balanced over the latent rows, doubled
 * by each upsampling), halo rows exchanged before every 3x3 convolution, the attention over
 * all positions of a frame through cp_attention (ring); RMS norms are per pixel (no
 * reduction). The frames' RGB rows are gathered on CP rank 0.
 *
 * Weights use diffusers' state-dict names (post_quant_conv.*, decoder.conv_in.*,
 * decoder.mid_block.resnets.N.{norm1.gamma,conv1.*,norm2.gamma,conv2.*,conv_shortcut.*},
 * decoder.mid_block.attentions.0.{norm.gamma,to_qkv.*,proj.*},
 * decoder.up_blocks.I.resnets.J.*, decoder.up_blocks.I.upsamplers.0.{resample.1.*,time_conv.*},
 * decoder.norm_out.gamma, decoder.conv_out.*); encoder.* and quant_conv.* are ignored. Any
 * float dtype on disk; activations in the backend's act_dtype; latents in and pixels out are
 * host fp32.
 */
#ifndef CPDIT_WAN_VAE_H
#define CPDIT_WAN_VAE_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/backend.h"
#include "lib/core/cpdit_error.h"
#include "lib/cp/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WAN_VAE_CLASS "AutoencoderKLWan"
#define WAN_VAE_MAX_LEVELS 8   /* entries of dim_mult */
#define WAN_VAE_MAX_Z 64       /* z_dim */
#define WAN_VAE_CACHE_T 2      /* diffusers' CACHE_T: past frames a causal 3-tap conv keeps */

typedef struct wan_vae_config {
    int base_dim;                          /* 96 */
    int decoder_base_dim;                  /* base_dim unless set */
    int z_dim;                             /* 16 */
    int n_levels;                          /* len(dim_mult) */
    int dim_mult[WAN_VAE_MAX_LEVELS];      /* 1, 2, 4, 4 */
    int num_res_blocks;                    /* 2 */
    bool temperal_downsample[WAN_VAE_MAX_LEVELS]; /* n_levels - 1: false, true, true */
    int out_channels;                      /* 3 */
    float latents_mean[WAN_VAE_MAX_Z];     /* z_dim values (diffusers' defaults) */
    float latents_std[WAN_VAE_MAX_Z];
} wan_vae_config;

/* diffusers' AutoencoderKLWan.__init__ defaults (Wan 2.1). */
void wan_vae_config_defaults(wan_vae_config *c);
/* Read and validate model_dir's vae/config.json (a pipeline root or the vae folder itself).
 * Errors (INPUT, naming the file and key): bad values; is_residual, patch_size (Wan 2.2)
 * "not supported yet". */
cpdit_status wan_vae_config_load(const char *model_dir, wan_vae_config *c, cpdit_error *err);
/* 1 when model_dir's vae/config.json names AutoencoderKLWan (0 otherwise, also when unreadable). */
int wan_vae_is_wan(const char *model_dir);

typedef struct wan_vae wan_vae;

/* Config and weights of a model folder (pipeline root with vae/, or the vae folder): every
 * decoder tensor's name, shape and dtype checked now, the backend's weights made at the first
 * decode. Errors: config (INPUT), a missing or misshapen tensor (INPUT, naming the file and
 * the tensor), files (INPUT/RUNTIME). */
cpdit_status wan_vae_open(wan_vae **out, const char *model_dir, cpdit_error *err);
void wan_vae_free(wan_vae *d);
const wan_vae_config *wan_vae_config_of(const wan_vae *d);
/* The backend (NULL: the default) and weight format (CPDIT_WEIGHT_F32 by default: the exact
 * path; NATIVE: the backend's fast form, bf16 convolutions for bf16 weights on the CPU). Call
 * before a decode; a change makes the weights again. */
void wan_vae_set_backend(wan_vae *d, const cpdit_backend *be);
void wan_vae_set_weight_format(wan_vae *d, cpdit_weight_format format);

/* Output frames of T latent frames (1 + 2^k (T - 1)) and pixels per latent value (2^(n-1)). */
int wan_vae_frames(const wan_vae_config *c, int T);
int wan_vae_upscale(const wan_vae_config *c);

/* WanPipeline before vae.decode: z = z / (1 / latents_std[c]) + latents_mean[c] in float32,
 * z (B, z_dim, T, h, w). */
void wan_vae_latents_denormalize(const wan_vae_config *c, float *z, int B, int T, int h, int w);

/* One decoded frame on CP rank 0: rgb (out_channels, H, W) host fp32, clamped to [-1, 1],
 * frame index f of item b. Return 0 to go on, nonzero to stop (the decode returns INPUT). */
typedef int (*wan_vae_frame_fn)(void *ctx, int b, int f, const float *rgb, int C, int H, int W);

/* vae.decode split by rows over the CP group of g (collective; g NULL or 1 rank: this rank
 * alone). Every rank passes the same z (B, z_dim, T, h, w); each output frame goes to fn on CP
 * rank 0 as soon as it is decoded (fn NULL: frames dropped). Equals the one-rank decode to
 * rounding. Errors: sizes (INPUT), memory (RUNTIME); as for the FLUX VAE, a failure on one
 * rank (fn stopping on rank 0 included) may leave the others waiting: callers end the job. */
cpdit_status wan_vae_decode_frames(wan_vae *d, const cp_grid *g, const float *z, int B, int T,
                                   int h, int w, wan_vae_frame_fn fn, void *ctx,
                                   cpdit_error *err);
/* The same with the frames gathered on CP rank sink of g instead of 0 (fn called there; the
 * --vae-parallel world round hands each clip's frames to its owner this way). The result does
 * not depend on sink. INPUT when sink is not a rank of the group (0 without a group). */
cpdit_status wan_vae_decode_frames_to(wan_vae *d, const cp_grid *g, int sink, const float *z,
                                      int B, int T, int h, int w, wan_vae_frame_fn fn, void *ctx,
                                      cpdit_error *err);
/* The same into out (B, out_channels, F, H, W) on CP rank 0 (NULL elsewhere). */
cpdit_status wan_vae_decode_group(wan_vae *d, const cp_grid *g, const float *z, int B, int T,
                                  int h, int w, float *out, cpdit_error *err);

/* Tiles of diffusers' AutoencoderKLWan.enable_tiling, in pixels: tiles of min_h x min_w
 * starting every stride_h / stride_w (defaults 256, 256, 192, 192). */
typedef struct wan_vae_tiling {
    int min_h, min_w, stride_h, stride_w;
} wan_vae_tiling;
void wan_vae_tiling_defaults(wan_vae_tiling *t);

/* Tiled decode on this rank, as diffusers' AutoencoderKLWan.tiled_decode: APPROXIMATE (each
 * tile's convs and attention see only the tile), for a rank short of memory: caches of one
 * tile instead of the whole frame, plus two rows of tiles' decoded clips (host). Latent tiles
 * of min / 8 rows and columns every stride / 8, each decoded over all T frames, blended with
 * the tile above and the one to the left over min - stride pixels (in place, in diffusers'
 * order), cropped to stride, clamped. A latent no larger than one tile is decoded whole
 * (exactly wan_vae_decode_group on one rank). tiling NULL: the defaults. out (B, out_channels,
 * F, H, W). Errors as wan_vae_decode_group; a bad tiling (INPUT). */
cpdit_status wan_vae_decode_tiled(wan_vae *d, const wan_vae_tiling *tiling, const float *z,
                                  int B, int T, int h, int w, float *out, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
