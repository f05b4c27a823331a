/* pipeline_decode.c — the decode stage of one item (pipeline_internal.h): the sampled tokens
 * unpacked to latents by the family, then the family's decoder (model_family.decoder_class):
 * AutoencoderKL for image families, split by rows over the CP group (vae_decode_group, exact),
 * on CP rank 0 alone (--vae-parallel off), tiled on CP rank 0 (approximate), or in a round over
 * every rank of the job (pipeline_vae_world.c); then RGB8 on the image's owner. A video family
 * decodes with its own decoder (model_family.decode_video: split by rows over the CP group, on
 * CP rank 0, or over the world in the same round as images), each frame converted to RGB8 as it
 * comes and handed on (pipeline_run.on_frame) or kept in one (frames, H, W, 3) buffer.
 */
#include "lib/pipeline/pipeline_internal.h"

#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm.h"
#include "lib/pipeline/image_postprocess.h"

/* One round over run->vae_world (the leader of each group owns its image or clip). */
static cpdit_status decode_world(pipeline *p, pipeline_item *it, uint8_t **rgb, int *joined,
                                 cpdit_error *err)
{
    const model_geometry *g = &it->geo;
    cpdit_status st = CPDIT_OK;
    float *z = NULL;
    if (it->cp_rank == 0 &&
        !(st = pipeline_check_finite(it->tokens, (size_t)g->tokens * g->token_dim,
                                     "latents after sampling", err))) {
        it->family->unpack(g, it->tokens, it->latents);
        z = it->latents;
    }
    *joined = 1;
    uint8_t *pix = NULL;
    cpdit_error werr;
    cpdit_error_clear(&werr);
    cpdit_status wst = pipeline_vae_world_round(p, it->run, z ? g : NULL, z, z ? &pix : NULL,
                                                &it->tm->vae_load_s, z ? err : &werr);
    if (!z && wst == CPDIT_ERR_BROKEN) /* no item of its own, but the job must end */
        *err = werr;
    if (z || wst == CPDIT_ERR_BROKEN)
        st = wst;
    *rgb = pix;
    return st;
}

/* z (C, H', W') decoded on the group (vae_par) or on CP rank 0; RGB8 into *rgb on CP rank 0. */
static cpdit_status decode_group(pipeline *p, pipeline_item *it, int vae_par, uint8_t **rgb,
                                 cpdit_error *err)
{
    const cp_grid *grid = it->run->grid;
    const model_geometry *g = &it->geo;
    const int lh = g->latent_h, lw = g->latent_w, cp_rank = it->cp_rank;
    cpdit_status st = pipeline_load_vae(p, &it->tm->vae_load_s, err);
    if (vae_par) /* a rank that cannot load the VAE must not leave the others waiting */
        st = cpdit_comm_agree(grid->cp, st, err);
    if (st)
        return st;
    const autoencoder_kl_config *vc = vae_decoder_config(p->vae);
    vae_latents_denormalize(vc, it->latents, pipeline_latent_count(g));
    const int f = vae_decoder_upscale(p->vae);
    const int H = lh * f, W = lw * f;
    uint8_t *pix = NULL;
    if (cp_rank == 0) {
        it->image = malloc(((size_t)vc->out_channels * H * W + 1) * sizeof(float));
        pix = malloc((size_t)H * W * 3);
        if (!it->image || !pix) /* before the collective decode: end the job, not hang */
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    }
    const double t_dec = pipeline_now_seconds();
    p->decode_shares++;
    if (!st) {
        if (it->run->vae_tiling)
            st = vae_decode_tiled(p->vae, it->latents, 1, lh, lw, it->image, err);
        else
            st = vae_decode_group(p->vae, vae_par ? grid : NULL, it->latents, 1, lh, lw,
                                  it->image, err);
    }
    if (st == CPDIT_ERR_RUNTIME && vae_par)
        st = pipeline_broken(err, cp_rank, "VAE decode");
    if (cp_rank == 0) {
        p->decode_seconds += pipeline_now_seconds() - t_dec;
        p->decodes++;
    }
    const size_t npix = (size_t)vc->out_channels * H * W;
    if (!st && cp_rank == 0 &&
        !(st = pipeline_check_finite(it->image, npix, "decoded image", err)))
        st = image_chw_to_rgb8(it->image, vc->out_channels, H, W, pix, err);
    if (!st && cp_rank == 0 && it->run->dump_dir)
        st = pipeline_dump_image(it->run->dump_dir, it->image, vc->out_channels, H, W, err);
    if (st || cp_rank != 0) {
        free(pix);
        return st;
    }
    *rgb = pix;
    return CPDIT_OK;
}

/* The frames of one clip on its sink rank: each converted to RGB8 and handed on, or kept. */
typedef struct video_sink {
    const pipeline_run *run;
    int n_frames, height, width;
    uint8_t *frame;   /* (H, W, 3): the frame being handed on (on_frame) */
    uint8_t *all;     /* (n_frames, H, W, 3) without on_frame */
    cpdit_error *err; /* why a frame stopped the decode */
    int failed;
} video_sink;

static int video_frame(void *ctx, int f, const float *chw, int C, int H, int W)
{
    video_sink *vs = ctx;
    const pipeline_run *run = vs->run;
    if (f < 0 || f >= vs->n_frames || H != vs->height || W != vs->width) {
        cpdit_error_set(vs->err, CPDIT_ERR_RUNTIME, "pipeline",
                        "decoder frame %d of %dx%d: expected %d frames of %dx%d", f, W, H,
                        vs->n_frames, vs->width, vs->height);
        return vs->failed = 1;
    }
    uint8_t *dst = run->on_frame ? vs->frame : vs->all + (size_t)f * H * W * 3;
    if (pipeline_check_finite(chw, (size_t)C * H * W, "decoded frame", vs->err) ||
        image_chw_to_rgb8(chw, C, H, W, dst, vs->err))
        return vs->failed = 1;
    if (run->on_frame && run->on_frame(run->frame_ctx, f, vs->n_frames, dst, H, W)) {
        if (vs->err->status == CPDIT_OK)
            cpdit_error_set(vs->err, CPDIT_ERR_RUNTIME, "pipeline", "stopped at frame %d", f);
        return vs->failed = 1;
    }
    return 0;
}

cpdit_status pipeline_decode_clip(pipeline *p, const pipeline_run *run, const model_geometry *g,
                                  const cp_grid *grid, int sink, float *latents, uint8_t **rgb,
                                  cpdit_error *err)
{
    const model_family *fam = p->m->family;
    const int H = g->height, W = g->width, me = grid ? grid->cp_rank : 0;
    const int collective = grid && grid->cp_size > 1;
    cpdit_error ferr; /* a frame's own failure (the decoder then says only "stopped") */
    cpdit_error_clear(&ferr);
    video_sink vs = {run, g->frames, H, W, NULL, NULL, &ferr, 0};
    cpdit_status st = CPDIT_OK;
    if (me == sink) {
        const size_t frame_bytes = (size_t)H * W * 3;
        if (run->on_frame)
            vs.frame = malloc(frame_bytes);
        else
            vs.all = malloc(frame_bytes * (size_t)vs.n_frames);
        if (!vs.frame && !vs.all)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
    }
    if (collective) /* a rank short of memory must not leave the others in the decode */
        st = cpdit_comm_agree(grid->cp, st, err);
    const double t_dec = pipeline_now_seconds();
    p->decode_shares++;
    if (!st)
        st = fam->decode_video(p->m, g, grid, sink, latents, me == sink ? video_frame : NULL,
                               &vs, err);
    if (vs.failed && st) { /* the frame's own reason, not "stopped" */
        if (err)
            *err = ferr;
        st = ferr.status;
    }
    if (st && st != CPDIT_ERR_BROKEN && collective)
        st = pipeline_broken(err, me, "video decode");
    if (me == sink) {
        p->decode_seconds += pipeline_now_seconds() - t_dec;
        p->decodes++;
    }
    free(vs.frame);
    if (st || me != sink || !rgb) {
        free(vs.all);
        return st;
    }
    *rgb = vs.all;
    return CPDIT_OK;
}

cpdit_status pipeline_decode(pipeline *p, pipeline_item *it, uint8_t **rgb, int *joined,
                             cpdit_error *err)
{
    if (it->family->output == MODEL_OUTPUT_VIDEO && it->family->decode_video) {
        const pipeline_run *vrun = it->run;
        if (it->cfg_rank != 0) /* the negative branch's group: no clip of its own */
            return CPDIT_OK;
        if (vrun->vae_world)
            return decode_world(p, it, rgb, joined, err);
        const int par = vrun->grid && vrun->grid->cp_size > 1 && !vrun->vae_single_rank &&
                        !vrun->vae_tiling;
        if (!par && it->cp_rank != 0)
            return CPDIT_OK;
        const model_geometry *vg = &it->geo;
        cpdit_status vst = pipeline_check_finite(it->tokens, (size_t)vg->tokens * vg->token_dim,
                                                 "latents after sampling", err);
        if (vst)
            return vst;
        it->family->unpack(vg, it->tokens, it->latents);
        return pipeline_decode_clip(p, vrun, vg, par ? vrun->grid : NULL, 0, it->latents, rgb,
                                    err);
    }
    const pipeline_run *run = it->run;
    const cp_grid *grid = run->grid;
    const model_geometry *g = &it->geo;
    if (it->family->output != MODEL_OUTPUT_IMAGE)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "pipeline",
                               "the %s family's decoder (%s) is not in the pipeline yet",
                               it->family->name, it->family->decoder_class);
    if (it->cfg_rank != 0) /* the negative branch's group: no image of its own */
        return CPDIT_OK;
    if (run->vae_world)
        return decode_world(p, it, rgb, joined, err);
    const int vae_par = grid && grid->cp_size > 1 && !run->vae_single_rank && !run->vae_tiling;
    if (!vae_par && it->cp_rank != 0)
        return CPDIT_OK;
    cpdit_status st = pipeline_check_finite(it->tokens, (size_t)g->tokens * g->token_dim,
                                            "latents after sampling", err);
    if (st)
        return st;
    it->family->unpack(g, it->tokens, it->latents); /* the noise buffer reused for z */
    return decode_group(p, it, vae_par, rgb, err);
}
