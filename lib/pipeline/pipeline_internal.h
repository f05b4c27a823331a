/* pipeline_internal.h — what pipeline.c shares with pipeline_vae_world.c: the pipeline's
 * state and the helpers both use. Not installed; nothing outside lib/pipeline includes it. */
#ifndef CPDIT_PIPELINE_INTERNAL_H
#define CPDIT_PIPELINE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/cp/cp_attention.h"
#include "lib/models/model.h"
#include "lib/pipeline/pipeline.h"
#include "lib/vae/vae_decoder.h"

struct pipeline {
    char *model_dir;
    cpdit_model *m;                  /* the family's model: transformer, text encoders, scheduler */
    vae_decoder *vae;          /* loaded on the first decode (only decoding ranks need it) */
    const cpdit_backend *be;   /* every model runs on it */
    const cpdit_attention_kernel *attn_kernel;
    cpdit_weight_format weight_format; /* of every model (pipeline_options.format) */
    double decode_seconds;     /* VAE decodes of this rank's images: wall time, count */
    long decodes;
    long decode_shares;        /* decodes this rank took part in (pipeline_decode_shares) */
};

/* How true CFG runs (the strategy of the step stage). */
typedef enum pipeline_cfg_mode {
    PIPELINE_CFG_NONE = 0,   /* one forward per step */
    PIPELINE_CFG_SEQUENTIAL, /* two forwards per step on this group: prompt, negative prompt */
    PIPELINE_CFG_PARALLEL,   /* one each on two groups (run->cfg_comm), velocities swapped */
    PIPELINE_CFG_MODES
} pipeline_cfg_mode;

/* One item in flight: what the stages prepare -> shard -> step -> gather -> decode hand on.
 * Freed in one place (pipeline_item_free). */
typedef struct pipeline_item {
    const model_family *family;
    const pipeline_params *prm;
    const pipeline_run *run;
    pipeline_timings *tm;
    model_geometry geo;
    pipeline_cfg_mode cfg;
    int cfg_rank;              /* CFG-parallel: 0 computes the prompt's branch, 1 the negative */
    int cp_rank;
    model_text *texts[2];      /* the prompt, the negative prompt (CFG) */
    model_schedule *sched;
    model_shard *shard;
    long long start, len;      /* this rank's share of the S sampler tokens */
    float *latents;            /* (C, [F',] H', W'): the noise, then z for the decoder */
    float *tokens;             /* (S, token_dim): the packed noise, then the gathered result */
    float *x, *v, *v_neg;      /* (len, token_dim) this rank's tokens and velocities */
    float *image;              /* (3, H, W) decoded, on the image's owner */
    struct pipeline_cache *cache; /* NULL, or the item's cache state (pipeline_cache.h) */
} pipeline_item;

/* Latent values of one item: C·max(F', 1)·H'·W'. */
size_t pipeline_latent_count(const model_geometry *g);
void pipeline_item_free(pipeline_item *it);

/* The stages (pipeline_sample.c, pipeline_decode.c); each returns a status, collective over
 * the CP group (and the CFG pair) where it says so. */
/* text embeddings, noise, packed tokens, schedule, --dump files (CP rank 0); local */
cpdit_status pipeline_prepare(pipeline *p, pipeline_item *it, cpdit_error *err);
/* this rank's tokens of the CP-sharded sequence; local (the caller agrees after) */
cpdit_status pipeline_shard(pipeline *p, pipeline_item *it, cpdit_error *err);
/* every sampler step; collective. A runtime failure of a forward on a grid of more than one
 * rank or CFG-parallel: CPDIT_ERR_BROKEN */
cpdit_status pipeline_sample(pipeline *p, pipeline_item *it, cpdit_error *err);
/* the sampled tokens of every rank, in order, on every rank of the group; collective */
cpdit_status pipeline_gather(pipeline *p, pipeline_item *it, cpdit_error *err);
/* unpack, decode (group / CP rank 0 / tiled / world round), RGB8 on the owner (*rgb);
 * *joined = 1 once this rank took part in run->vae_world's round */
cpdit_status pipeline_decode(pipeline *p, pipeline_item *it, uint8_t **rgb, int *joined,
                             cpdit_error *err);

/* The cache of one item (pipeline_cache.c). */
typedef struct pipeline_cache pipeline_cache;
/* *out NULL for kind none; group: the CP group its decisions are reduced over (NULL: one
 * rank). */
cpdit_status pipeline_cache_open(const pipeline_cache_config *cfg, struct cpdit_comm *group,
                                 pipeline_cache **out, cpdit_error *err);
/* The hooks of branch (0 prompt, 1 negative prompt) for its forward at step (NULL without a
 * cache); then pipeline_cache_done with the forward's wall seconds. */
const model_block_hooks *pipeline_cache_hooks(pipeline_cache *c, int branch, int step);
void pipeline_cache_done(pipeline_cache *c, int branch, double seconds);
void pipeline_cache_stats_of(const pipeline_cache *c, pipeline_cache_stats *s);
void pipeline_cache_close(pipeline_cache *c); /* NULL is fine */

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

/* One clip (a video family's latents (C, F', H', W') of geometry g, before denormalisation)
 * decoded over grid (NULL: this rank alone; collective over grid->cp), its frames gathered on
 * CP rank sink of grid and converted to RGB8 there: handed to run->on_frame, or all of them in
 * *rgb ((frames, H, W, 3), malloc'd; rgb may be NULL on other ranks). The sink's decode time
 * goes to p->decode_seconds. A failure on a grid of more than one rank is CPDIT_ERR_BROKEN.
 * latents may be overwritten. */
cpdit_status pipeline_decode_clip(pipeline *p, const pipeline_run *run, const model_geometry *g,
                                  const cp_grid *grid, int sink, float *latents, uint8_t **rgb,
                                  cpdit_error *err);

/* One decode round over run->vae_world (collective over run->vae_world->cp; see
 * pipeline_run.vae_world): z, the sampled latents before denormalisation ((C, H', W') of an
 * image family, (C, F', H', W') of a video family), of geometry g, on the rank whose image or
 * clip it is (its group's CP rank 0); g and z NULL on every other rank. Every image or clip of
 * the round is decoded by all ranks, in world rank order; each owner gets its (H, W, 3) RGB8
 * pixels in *rgb (malloc'd; a clip: its frames handed to run->on_frame as they come, or all
 * of them in *rgb) and its decode time added to p->decode_seconds. Returns the owner's item
 * status (a VAE that cannot be loaded on some rank fails every image of the round); on a rank
 * without an image: CPDIT_OK, or the load failure. A failure inside the decode (a collective
 * may then be broken) is CPDIT_ERR_BROKEN, on every rank where it happened: the program must
 * end the job, as after a failed forward. */
cpdit_status pipeline_vae_world_round(pipeline *p, const pipeline_run *run,
                                      const model_geometry *g, const float *z, uint8_t **rgb,
                                      double *load_s, cpdit_error *err);

#endif
