/* pipeline_internal.h — what pipeline.c shares with pipeline_vae_world.c: the pipeline's
 * state and the helpers both use. Not installed; nothing outside lib/pipeline includes it. */
#ifndef CPDIT_PIPELINE_INTERNAL_H
#define CPDIT_PIPELINE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/cp/cp_attention.h"
#include "lib/models/flux/flux_transformer.h"
#include "lib/pipeline/flow_schedule.h"
#include "lib/pipeline/pipeline.h"
#include "lib/text/text_encode.h"
#include "lib/vae/vae_decoder.h"

struct pipeline {
    char *model_dir;
    flux_transformer *transformer;
    vae_decoder *vae;          /* loaded on the first decode (only decoding ranks need it) */
    autoencoder_kl_config vae_cfg;
    text_encoders *text;
    flow_schedule_config sched;
    int latent_channels;       /* transformer in_channels / 4 */
    const cpdit_backend *be;   /* every model runs on it */
    const cpdit_attention_kernel *attn_kernel;
    cpdit_weight_format weight_format; /* of every model (pipeline_options.format) */
    cp_attention_ws attn_ws;   /* CP attention's workspace, kept between steps */
    double decode_seconds;     /* VAE decodes of this rank's images: wall time, count */
    long decodes;
};

/* Monotonic wall clock, seconds. */
double pipeline_now_seconds(void);

/* RUNTIME error naming `what` when x (n floats) holds NaN or Inf; CPDIT_OK otherwise. */
cpdit_status pipeline_check_finite(const float *x, size_t n, const char *what, cpdit_error *err);

/* --dump: DIR/image.safetensors, tensor "image" (1, C, H, W) fp32 = the decoded image before
 * the conversion to 8 bits. */
cpdit_status pipeline_dump_image(const char *dir, const float *image, int C, int H, int W,
                                 cpdit_error *err);

/* A runtime failure (err) on this rank while its peers may be inside a collective: err becomes
 * CPDIT_ERR_BROKEN, its message naming the rank and the stage ("(rank 1 of the group, VAE
 * decode)"). Returns CPDIT_ERR_BROKEN. err may be NULL. */
cpdit_status pipeline_broken(cpdit_error *err, int rank, const char *what);

/* Load p's VAE on this rank if it is not loaded yet (weight format and backend: p's);
 * *load_s += the seconds it took (load_s may be NULL). */
cpdit_status pipeline_load_vae(pipeline *p, double *load_s, cpdit_error *err);

/* One decode round over run->vae_world (collective over run->vae_world->cp; see
 * pipeline_run.vae_world): z (latent_channels, lh, lw), the sampled latents before
 * denormalisation, on the rank whose image it is (its group's CP rank 0); NULL on every other
 * rank. Every image of the round is decoded by all ranks, in world rank order; each owner
 * gets its (lh·8, lw·8, 3) RGB8 pixels in *rgb (malloc'd) and its decode time added to
 * p->decode_seconds. Returns the owner's item status (a VAE that cannot be loaded on some rank
 * fails every image of the round); on a rank without an image: CPDIT_OK, or the load failure.
 * A failure inside the decode (a collective may then be broken) is CPDIT_ERR_BROKEN, on every
 * rank where it happened: the program must end the job, as after a failed forward. */
cpdit_status pipeline_vae_world_round(pipeline *p, const pipeline_run *run, const float *z,
                                      int lh, int lw, uint8_t **rgb, double *load_s,
                                      cpdit_error *err);

#endif
