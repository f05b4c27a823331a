/* vae_decoder.h — the decoder half of diffusers' AutoencoderKL (FLUX's VAE) through the
 * backend table, one rank or split by rows over a CP group (vae_decode.c).
 *
 *   vae.decode(z):  [post_quant_conv 1x1 when use_post_quant_conv]  then Decoder:
 *     conv_in 3x3 (latent_channels → ch[-1])
 *     mid block: ResnetBlock2D, Attention (when mid_block_add_attention), ResnetBlock2D
 *     up blocks i = 0..n-1 over reversed block_out_channels ch': layers_per_block + 1
 *        ResnetBlock2D each (ch'[i-1] → ch'[i] for the first), then, except for the last block,
 *        nearest 2x upsampling + conv 3x3
 *     GroupNorm (eps 1e-6) → act_fn → conv_out 3x3 (ch[0] → out_channels)
 *   ResnetBlock2D (no time embedding): h = conv2(act(norm2(conv1(act(norm1(x)))))),
 *     out = shortcut(x) + h, shortcut = 1x1 conv when the channel count changes, else x.
 *   Attention: one head over the H·W positions of each image, channels C as the head size:
 *     GroupNorm → q, k, v = Linear(C, C) → softmax(q kᵀ / sqrt(C)) v → Linear(C, C) → + x.
 *   All GroupNorms have norm_num_groups groups and eps 1e-6; dropout is inference-off.
 * Output size: (B, out_channels, h·f, w·f) with f = 2^(len(block_out_channels) - 1) (8 for
 * FLUX). The pipeline maps latents to the decoder's input first with vae_latents_denormalize
 * (z / scaling_factor + shift_factor, FluxPipeline does it before vae.decode); vae_decode and
 * `cpdit forward --component vae` (bin/cmd_forward_vae.c) are the raw vae.decode.
 *
 * Weights use diffusers' state-dict names: post_quant_conv.weight, decoder.conv_in.weight,
 * decoder.mid_block.resnets.0.norm1.weight, decoder.mid_block.attentions.0.to_q.weight (or the
 * deprecated names query / key / value / proj_attn, weights (C, C) or (C, C, 1, 1)),
 * decoder.up_blocks.0.resnets.0.conv_shortcut.weight, decoder.up_blocks.0.upsamplers.0.conv.*,
 * decoder.conv_norm_out.*, decoder.conv_out.*. Other tensors (encoder.*, quant_conv.*) are
 * ignored. Any float dtype on disk; activations (NHWC images) in the backend's act_dtype (fp32
 * on "cpu", bf16 on "cpu-bf16" and "cuda"); latents in and pixels out are host fp32.
 *
 * Weights go through the models' one loader (lib/weights/weight_loader.h): the checkpoint stays
 * mapped in its stored dtype and the backend makes each weight from it at the first decode
 * (convolutions packed by be->conv2d_pack_stored, the attention's Linear(C, C) by
 * be->weight_create, norms and biases fp32 in the backend's memory): no fp32 copy of a bf16
 * checkpoint is kept beside the backend's weights. A decoder made by vae_decoder_create holds
 * fp32 values in host memory instead (tests, benchmarks), used as an fp32 checkpoint would be.
 */
#ifndef CPDIT_VAE_DECODER_H
#define CPDIT_VAE_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "lib/core/cpdit_error.h"
#include "lib/cp/grid.h"
#include "lib/io/component_config.h"
#include "lib/io/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* diffusers' AutoencoderKL decoder constants */
#define VAE_NORM_EPS 1e-6f
#define VAE_PARAM_MAX_DIMS 4
#define VAE_PARAM_NAME_MAX 96

typedef struct vae_decoder vae_decoder;

typedef struct vae_param_info {
    const char *name;                 /* diffusers' state-dict name */
    int ndim;
    int64_t shape[VAE_PARAM_MAX_DIMS];
    float *data;                      /* count floats inside the decoder's one allocation
                                         (vae_decoder_create); NULL for a decoder loaded from
                                         a checkpoint (its weights stay as stored) */
    size_t count;
} vae_param_info;

/* A decoder for config c with all weights zero (fill them with vae_decoder_param_at or
 * vae_decoder_load_weights). Errors: an invalid config (INPUT), allocation (RUNTIME). */
cpdit_status vae_decoder_create(vae_decoder **out, const autoencoder_kl_config *c,
                                cpdit_error *err);
void vae_decoder_free(vae_decoder *d);

const autoencoder_kl_config *vae_decoder_config(const vae_decoder *d);
/* The backend the decodes run on (kernels/backend.h; NULL, the initial value: the default
 * backend). Its ops get the weights in its own memory (packed on the first decode). */
void vae_decoder_set_backend(vae_decoder *d, const cpdit_backend *be);
/* Pixels per latent value along each axis: 2^(n_blocks - 1). */
int vae_decoder_upscale(const vae_decoder *d);

/* The parameters, in a fixed order (post_quant_conv first, decoder modules in forward order). */
size_t vae_decoder_param_count(const vae_decoder *d);
/* Fill info for parameter i < count; returns 0, or -1 when i is out of range. Writing through
 * info->data is allowed until the next decode (which makes the backend's weights again). */
int vae_decoder_param_at(vae_decoder *d, size_t i, vae_param_info *info);

/* Take the weights from s (d owns s from now on, also after an error: closed by
 * vae_decoder_free); d's host values, if any, are dropped. Names, shapes and dtypes are checked
 * now, the backend's weights made from s at the first decode. Errors (INPUT, where = the file):
 * a missing tensor, a shape that is not the expected one (both shapes), a dtype that is not a
 * float dtype. */
cpdit_status vae_decoder_load_weights(vae_decoder *d, safetensors_set *s, cpdit_error *err);

/* How the convolutions compute (kernels/backend.h): CPDIT_WEIGHT_F32 (the default here: fp32
 * weights, SGEMM, the exact reference) or CPDIT_WEIGHT_NATIVE (the backend's fast form, the
 * CPU's bf16 GEMM for weights stored as bf16 or fp8: inputs rounded to bf16, ~1e-3 relative
 * per convolution; weights stored as fp32 or fp16, and a decoder made by vae_decoder_create,
 * stay fp32). Call before a decode; changing it makes the weights again. */
void vae_decoder_set_weight_format(vae_decoder *d, cpdit_weight_format format);

/* Config (vae/config.json) and weights of a model folder: a pipeline root with vae/, or the
 * VAE's own folder. */
/* Read and validate model_dir's vae/config.json (a pipeline root or the vae folder itself)
 * without loading weights. */
cpdit_status vae_config_load(const char *model_dir, autoencoder_kl_config *c, cpdit_error *err);

cpdit_status vae_decoder_load(vae_decoder **out, const char *model_dir, cpdit_error *err);

/* z[i] = z[i] / scaling_factor + shift_factor (shift 0 when the config has none), in float32
 * as torch computes `latents / scaling_factor + shift_factor`. */
void vae_latents_denormalize(const autoencoder_kl_config *c, float *z, size_t n);

/* out (B, out_channels, h·f, w·f) = vae.decode(z (B, latent_channels, h, w)). Errors: sizes
 * below 1 or too large (INPUT), allocation (RUNTIME). */
cpdit_status vae_decode(const vae_decoder *d, const float *z, int B, int h, int w, float *out,
                        cpdit_error *err);

/* vae_decode split by rows over the CP group of g (collective over g->cp; g NULL or a
 * 1-rank group: this rank alone). Every rank passes the same z (B, latent_channels, h, w) and
 * sizes; out (B, out_channels, h·f, w·f) is written on CP rank 0 only (NULL elsewhere; NULL
 * on rank 0 too: decode and drop the image, e.g. a warm-up).
 * The result equals the one-rank decode to rounding (≤ 1e-5 relative): halo rows are
 * exchanged for every 3x3 convolution, GroupNorm moments reduced in double, the mid-block
 * attention runs through cp_attention (ring). Any h works on any group size (with h below
 * the group size the last ranks hold no rows). Errors: as vae_decode; a runtime failure on one
 * rank may leave the others waiting (callers abort the job, as after a failed forward). */
cpdit_status vae_decode_group(const vae_decoder *d, const cp_grid *g, const float *z, int B,
                              int h, int w, float *out, cpdit_error *err);

/* Tiled decode on this rank, as diffusers' AutoencoderKL.enable_tiling(): APPROXIMATE (each
 * tile's GroupNorm and attention see only the tile; overlaps blended linearly), for a rank
 * short of memory: activations of one tile (config sample_size pixels, 1024 for FLUX) instead
 * of the whole image. Tiles of sample_size / f latent rows and columns start every 3/4 tile;
 * blended over sample_size / 4 pixels. A latent no larger than one tile is decoded whole
 * (exactly vae_decode). Sizes and errors as vae_decode. Never the default. */
cpdit_status vae_decode_tiled(const vae_decoder *d, const float *z, int B, int h, int w,
                              float *out, cpdit_error *err);

/* FLUX.1's VAE config (block_out_channels 128/256/512/512, 2 layers per block, 32 groups, 16
 * latent channels, no (post-)quant conv, sample_size 1024, scaling 0.3611, shift 0.1159). */
void vae_config_flux(autoencoder_kl_config *c);
/* Fill every parameter with deterministic pseudo-random values (the same for the same seed on
 * every rank): weights uniform with unit variance through each layer (± sqrt(3 / fan_in)),
 * biases ± 0.1, norm weights 1 ± 0.1. For tests and benchmarks; a decoder made by
 * vae_decoder_create (a loaded one keeps its checkpoint's weights). */
void vae_decoder_fill_random(vae_decoder *d, uint64_t seed);

/* Floating-point operations of one decode of an h x w latent (convolutions and attention). */
double vae_decode_flops(const vae_decoder *d, int h, int w);

#ifdef __cplusplus
}
#endif
#endif
