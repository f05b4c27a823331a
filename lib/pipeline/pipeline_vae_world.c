/* pipeline_vae_world.c — the VAE decode over every rank of the job (--vae-parallel world):
 * one round decodes the latents of every group that finished an item in it, one image after
 * the other, each split by rows over all ranks (vae_decode_group on the dp = 1 grid
 * pipeline_run.vae_world). Ranks of groups without an image (an idle data-parallel group, the
 * negative branch of CFG-parallel, a failed or stopped item, CP ranks other than 0) join with
 * nothing of their own. The image of owner o: its latents are broadcast from o, decoded (the
 * RGB rows gathered on world rank 0 as in any vae_decode_group), then sent to o as floats;
 * o checks them and converts to RGB8. The result is the single-rank decode to rounding, as on
 * a CP group (the decode is exact for any row split). A video family's clip goes the same way:
 * its geometry and latents broadcast from o, the family's decoder split over all ranks, each
 * frame gathered on o itself (the decoder's sink) and handed on there as it comes.
 */
#include "lib/pipeline/pipeline_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm.h"
#include "lib/pipeline/image_postprocess.h"

/* Message tag of an image sent from world rank 0 to its owner. */
#define VAE_WORLD_TAG 78
/* Per rank in the round's table: has an image or clip, its latent height and width. */
enum { INFO_HAS, INFO_LH, INFO_LW, INFO_N };

/* A failure inside the round: collectives are pending on the other ranks and it cannot be
 * reported to them, so it is CPDIT_ERR_BROKEN (the program ends the job, as after a failed
 * forward). e NULL: out of memory. */
static cpdit_status world_broken(cpdit_error *err, const cpdit_error *e, int rank,
                                 const char *what)
{
    char msg[CPDIT_ERROR_WHAT_MAX];
    snprintf(msg, sizeof msg, "%s", e ? e->what : "out of memory");
    return cpdit_error_set(err, CPDIT_ERR_BROKEN, e ? e->where : "pipeline",
                           "%s (rank %d of the world, VAE decode: %s)", msg, rank, what);
}

/* Decode the image of owner o (latents (C, olh, olw) on o: z) with every rank of the world;
 * the owner checks it and converts it to RGB8 (*rgb). *mine: the owner's item status. */
static cpdit_status world_decode_one(pipeline *p, const pipeline_run *run, int o, const float *z,
                                     int olh, int olw, uint8_t **rgb, cpdit_status *mine,
                                     cpdit_error *err)
{
    const cp_grid *w = run->vae_world;
    const int me = w->cp_rank, n = w->cp_size;
    const autoencoder_kl_config *vc = vae_decoder_config(p->vae);
    const int C = vc->latent_channels, f = vae_decoder_upscale(p->vae), oc = vc->out_channels;
    const size_t nz = (size_t)C * olh * olw, npix = (size_t)oc * olh * f * olw * f;
    cpdit_error cerr;
    cpdit_error_clear(&cerr);
    cpdit_status st = CPDIT_OK;
    float *zb = malloc(nz * sizeof *zb);
    float *img = me == 0 || me == o ? malloc(npix * sizeof *img) : NULL;
    if (!zb || ((me == 0 || me == o) && !img)) {
        st = world_broken(err, NULL, me, "latents or image buffer");
        goto done;
    }
    if (me == o)
        memcpy(zb, z, nz * sizeof *zb);
    if (n > 1 && cpdit_comm_bcast(w->cp, zb, nz * sizeof *zb, o, &cerr)) {
        st = world_broken(err, &cerr, me, "broadcasting the latents");
        goto done;
    }
    vae_latents_denormalize(vc, zb, nz);
    const double t0 = pipeline_now_seconds();
    p->decode_shares++;
    if (vae_decode_group(p->vae, w, zb, 1, olh, olw, me == 0 ? img : NULL, &cerr)) {
        st = world_broken(err, &cerr, me, "the decode");
        goto done;
    }
    /* the decoded image: host fp32 */
    if (o != 0 && me == 0 &&
        cpdit_comm_send(w->cp, CPDIT_COMM_FLOAT, img, npix, o, VAE_WORLD_TAG, &cerr)) {
        st = world_broken(err, &cerr, me, "sending the image to its owner");
        goto done;
    }
    if (o != 0 && me == o &&
        cpdit_comm_recv(w->cp, CPDIT_COMM_FLOAT, img, npix, 0, VAE_WORLD_TAG, &cerr)) {
        st = world_broken(err, &cerr, me, "receiving the image");
        goto done;
    }
    if (me == o) {
        p->decode_seconds += pipeline_now_seconds() - t0;
        p->decodes++;
        uint8_t *pix = malloc((size_t)olh * f * olw * f * 3);
        if (!pix)
            *mine = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "pipeline", "out of memory");
        if (!*mine)
            *mine = pipeline_check_finite(img, npix, "decoded image", err);
        if (!*mine)
            *mine = image_chw_to_rgb8(img, oc, olh * f, olw * f, pix, err);
        if (!*mine && run->dump_dir)
            *mine = pipeline_dump_image(run->dump_dir, img, oc, olh * f, olw * f, err);
        if (!*mine && rgb)
            *rgb = pix;
        else
            free(pix);
    }
done:
    free(img);
    free(zb);
    return st;
}

/* Decode the clip of owner o (geometry og and latents z on o) with every rank of the world;
 * its frames are gathered on o and handed on there (pipeline_decode_clip). */
static cpdit_status world_decode_clip(pipeline *p, const pipeline_run *run, int o,
                                      const model_geometry *og, const float *z, uint8_t **rgb,
                                      cpdit_error *err)
{
    const cp_grid *w = run->vae_world;
    const int me = w->cp_rank, n = w->cp_size;
    cpdit_error cerr;
    cpdit_error_clear(&cerr);
    model_geometry g;
    memset(&g, 0, sizeof g);
    if (me == o)
        g = *og;
    if (n > 1 && cpdit_comm_bcast(w->cp, &g, sizeof g, o, &cerr))
        return world_broken(err, &cerr, me, "broadcasting the clip's geometry");
    const size_t nz = pipeline_latent_count(&g);
    float *zb = malloc(nz * sizeof *zb);
    if (!zb)
        return world_broken(err, NULL, me, "the clip's latents");
    if (me == o)
        memcpy(zb, z, nz * sizeof *zb);
    cpdit_status st = CPDIT_OK;
    if (n > 1 && cpdit_comm_bcast(w->cp, zb, nz * sizeof *zb, o, &cerr))
        st = world_broken(err, &cerr, me, "broadcasting the latents");
    else
        st = pipeline_decode_clip(p, run, &g, w, o, zb, me == o ? rgb : NULL,
                                  me == o ? err : &cerr);
    if (st && me != o && err) /* this rank's own view of the broken round */
        *err = cerr;
    free(zb);
    return st;
}

cpdit_status pipeline_vae_world_round(pipeline *p, const pipeline_run *run,
                                      const model_geometry *g, const float *z, uint8_t **rgb,
                                      double *load_s, cpdit_error *err)
{
    const cp_grid *w = run->vae_world;
    const int me = w->cp_rank, n = w->cp_size;
    if (rgb)
        *rgb = NULL;
    cpdit_error cerr;
    cpdit_error_clear(&cerr);
    /* 1. who has an image, of which size (every rank fills its own slot) */
    long long *info = calloc((size_t)n * INFO_N, sizeof *info);
    if (!info)
        return world_broken(err, NULL, me, "the round's table");
    if (z) {
        info[(size_t)me * INFO_N + INFO_HAS] = 1;
        info[(size_t)me * INFO_N + INFO_LH] = g->latent_h;
        info[(size_t)me * INFO_N + INFO_LW] = g->latent_w;
    }
    cpdit_status st = CPDIT_OK;
    if (n > 1 && cpdit_comm_allreduce(w->cp, info, (size_t)n * INFO_N, CPDIT_COMM_INT64,
                                      CPDIT_COMM_SUM, &cerr)) {
        free(info);
        return world_broken(err, &cerr, me, "the round's table");
    }
    int owners = 0;
    for (int r = 0; r < n; r++)
        owners += info[(size_t)r * INFO_N + INFO_HAS] != 0;
    if (!owners) {
        free(info);
        return CPDIT_OK;
    }
    /* 2. every rank decodes: the VAE on all of them, or on none (a video family's decoder is
     * part of its model, loaded with it) */
    const model_family *fam = p->m->family;
    const int video = fam->output == MODEL_OUTPUT_VIDEO && fam->decode_video;
    st = cpdit_comm_agree(w->cp, video ? CPDIT_OK : pipeline_load_vae(p, load_s, err), err);
    if (st) {
        free(info);
        return st;
    }
    cpdit_status mine = CPDIT_OK;
    /* 3. each image in world rank order, decoded by all ranks */
    for (int o = 0; !st && o < n; o++) {
        const long long *in = info + (size_t)o * INFO_N;
        if (in[INFO_HAS] && video)
            st = world_decode_clip(p, run, o, g, z, rgb, err);
        else if (in[INFO_HAS])
            st = world_decode_one(p, run, o, z, (int)in[INFO_LH], (int)in[INFO_LW], rgb, &mine,
                                  err);
    }
    free(info);
    return st ? st : mine;
}
