/* wan_family_decode.c — the Wan family's decoder (wan_family_internal.h): AutoencoderKLWan
 * (wan_vae.h) from vae/, its config and every decoder tensor checked at open, the weights made
 * at the first decode (only the ranks that decode pay for them). WanPipeline's latents go
 * through latents / (1 / latents_std) + latents_mean before vae.decode; the decode runs one
 * latent frame at a time, split by rows over the CP group, each output frame handed on from
 * CP rank 0 as soon as it exists (memory does not grow with the clip). */
#include <string.h>

#include "lib/models/wan/wan_family_internal.h"

/* WanPipeline's VAE: 8x in space, 4x in time (frames 4k + 1 from k + 1 latent frames). */
#define WAN_VAE_UPSCALE 8
#define WAN_VAE_TIME 4

cpdit_status wan_decoder_open(cpdit_model *m, const char *dir, cpdit_error *err)
{
    wan_model *wm = wan_model_of(m);
    cpdit_status st = wan_vae_open(&wm->vae, dir, err);
    if (st)
        return st;
    const wan_vae_config *vc = wan_vae_config_of(wm->vae);
    const wan_transformer_config *tc = wan_transformer_config_of(wm->tr);
    if (vc->z_dim != tc->in_channels || vc->out_channels != 3 ||
        wan_vae_upscale(vc) != WAN_VAE_UPSCALE || wan_vae_frames(vc, 2) != 1 + WAN_VAE_TIME)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                               "vae: z_dim %d (transformer in_channels: %d), upscale %d (Wan: "
                               "%d), frames per latent frame %d (Wan: %d), out_channels %d "
                               "(RGB: 3)", vc->z_dim, tc->in_channels, wan_vae_upscale(vc),
                               WAN_VAE_UPSCALE, wan_vae_frames(vc, 2) - 1, WAN_VAE_TIME,
                               vc->out_channels);
    wan_vae_set_backend(wm->vae, m->be);
    wan_vae_set_weight_format(wm->vae, wm->format);
    return CPDIT_OK;
}

/* The decoder's per-frame callback (item b = 0) -> the family's. */
typedef struct frame_relay {
    model_frame_fn fn;
    void *ctx;
} frame_relay;

static int relay_frame(void *ctx, int b, int f, const float *rgb, int C, int H, int W)
{
    const frame_relay *r = ctx;
    (void)b;
    return r->fn ? r->fn(r->ctx, f, rgb, C, H, W) : 0;
}

cpdit_status wan_decode_video(cpdit_model *m, const model_geometry *g, const cp_grid *grid,
                              int sink, float *latents, model_frame_fn fn, void *ctx,
                              cpdit_error *err)
{
    wan_model *wm = wan_model_of(m);
    if (!wm->vae)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, m->dir,
                               "opened without the pipeline's components: no decoder");
    const wan_vae_config *vc = wan_vae_config_of(wm->vae);
    const int T = g->latent_frames > 0 ? g->latent_frames : 1;
    wan_vae_latents_denormalize(vc, latents, 1, T, g->latent_h, g->latent_w);
    frame_relay r = {fn, ctx};
    return wan_vae_decode_frames_to(wm->vae, grid, sink, latents, 1, T, g->latent_h,
                                    g->latent_w, relay_frame, &r, err);
}
