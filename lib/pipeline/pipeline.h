/* pipeline.h — text-to-image for one item on one context-parallel group, for any model family
 * (lib/models/model.h); the data flow as FLUX.1's family does it:
 *
 *   prompt ─ tokenizers + CLIP-L (pooled) + T5 (tokens)          replicated on every CP rank
 *   seed ─ torch-compatible noise (B, 16, H/8, W/8) → pack 2x2 → image tokens (B, S, 64)
 *   text and image tokens sharded separately over the CP group (even or uneven)
 *   for each sigma of FLUX's schedule: transformer forward (attention through cp_attention)
 *       [true CFG: a second forward on the negative prompt, v = v_neg + c (v - v_neg)]
 *       Euler step on this rank's own image tokens (no communication)
 *   gather image tokens → unpack → z / scaling + shift → VAE decode split by rows over the
 *   CP group (vae_decode_group; or CP rank 0 alone / tiled, or over every rank of the job in
 *   rounds, see pipeline_run) → RGB8 (CP rank 0)
 *
 * Every rank of the CP group calls pipeline_generate with the same parameters; only CP rank 0
 * receives the image. Batch size is 1 per item (data-parallel groups run other items).
 */
#ifndef CPDIT_PIPELINE_H
#define CPDIT_PIPELINE_H

#include <stdint.h>

#include "lib/cp/cp_attention.h"
#include "lib/core/cpdit_error.h"
#include "lib/cp/grid.h"
#include "lib/pipeline/pipeline_cache.h"
#include "kernels/backend.h"
#include "lib/text/text_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pipeline pipeline;

/* What one item asks for. */
typedef struct pipeline_params {
    const char *prompt;
    const char *negative_prompt; /* NULL: none; "" is the empty prompt (CFG on) */
    uint64_t seed;               /* torch.Generator("cpu").manual_seed(seed) */
    int width, height;           /* pixels, multiples of 16 */
    int steps;                   /* >= 1 */
    float guidance;              /* distilled guidance (dev: embedded; ignored by schnell) */
    float true_cfg;              /* > 1 with a negative prompt: true classifier-free guidance */
    int max_sequence_length;     /* T5 tokens; 0 = 512 (dev) or 256 (schnell) */
    int frames;                  /* video frames of a video family; 0 = an image */
    double flow_shift;           /* video (Wan's UniPC): > 0 overrides the folder's flow_shift */
    pipeline_cache_config cache; /* zero: none (every block of every step) */
} pipeline_params;

/* One video frame on CP rank 0 as it is decoded: rgb (H, W, 3) uint8, frame f of n_frames.
 * Return 0 to go on, nonzero to stop (pipeline_generate fails then: INPUT from the decoder,
 * and the CP group's job must end as after any failure inside the split decode). */
typedef int (*pipeline_frame_fn)(void *ctx, int f, int n_frames, const uint8_t *rgb, int height,
                                 int width);

/* Called on CP rank 0 after each sampler step (step counts from 1); read_bytes: what this
 * process read from storage during the step (disk_reads.h), -1 where the kernel does not say. */
typedef void (*pipeline_progress_fn)(int step, int steps, double step_seconds,
                                     long long read_bytes, void *ctx);
/* Polled between steps on every rank (must give the same answer on all ranks of the group,
 * e.g. after an allreduce by the caller); non-zero = stop: pipeline_generate returns
 * CPDIT_ERR_RUNTIME with what = "stopped". */
typedef int (*pipeline_stop_fn)(void *ctx);

/* Where one item's time went, in wall seconds on this rank (pipeline_generate fills it on
 * every rank; the group leader's figures are the ones reported). */
typedef struct pipeline_timings {
    double text_s;     /* tokenizers + CLIP + T5 (both prompts with true CFG) */
    double sample_s;   /* every sampler step (transformer forwards, CFG, Euler) */
    int steps;         /* sampler steps completed */
    double step_min_s, step_max_s;
    double vae_load_s; /* loading the VAE (the first decode only; 0 after) */
    double vae_s;      /* gathering the latents, VAE decode, conversion to RGB8 */
    /* bytes this process read from storage during step 1 and during the later steps
     * (disk_reads.h); -1: the kernel does not say. Weights that fit the budget are made at
     * load, so the later steps read nothing; streamed ones may be read again at every step. */
    long long read_step1_bytes, read_later_bytes;
    pipeline_cache_stats cache; /* forwards run in full / from the cache (zero: no cache) */
} pipeline_timings;

typedef struct pipeline_run {
    const cp_grid *grid;            /* the CP group (cp_size ranks) this item runs on */
    cp_attention_config attn;       /* variant, anything (backend and kernel: the pipeline's) */
    const char *dump_dir;           /* NULL, or write noise.safetensors + schedule.json here
                                       (CP rank 0), and image.safetensors: the decoded image
                                       in fp32 (the image's owner) */
    pipeline_progress_fn progress;  /* may be NULL */
    pipeline_stop_fn should_stop;   /* may be NULL; see above */
    void *ctx;
    /* CFG-parallel (true CFG only): a 2-rank communicator joining this rank with the rank of
     * the same CP coordinates in a second group that runs the same item. Rank 0 of it computes
     * the prompt's velocity, rank 1 the negative prompt's; they swap and both apply
     * v = v_neg + c (v - v_neg), so both groups hold the same latents. NULL: one group runs
     * both forwards. Only rank 0's group gets the image. */
    struct cpdit_comm *cfg_comm;
    /* VAE decode: 0 = split by rows over the CP group when it has more than one rank (the
     * default); vae_single_rank = 1: CP rank 0 decodes alone (--vae-parallel off);
     * vae_tiling = 1: CP rank 0 decodes alone in overlapping tiles (approximate, less memory;
     * --vae-tiling / manifest vae_tiling: true). */
    int vae_single_rank;
    int vae_tiling;
    /* NULL, or a dp = 1 grid over EVERY rank of the job (--vae-parallel world): the decode
     * then runs in a round over the whole world instead of on this item's group. Collective
     * over vae_world->cp: in each round every rank of the job calls pipeline_generate (its
     * group's item) or pipeline_vae_world_idle (no item) exactly once; the round decodes the
     * images of all groups one after another, each split by rows over all ranks (exact, as
     * on a group), in world rank order of their group leaders. Not with vae_single_rank or
     * vae_tiling. */
    const cp_grid *vae_world;
    pipeline_timings *timings; /* NULL, or filled by pipeline_generate (also on failure: the
                                  phases that ran) */
    /* A video family's frames (model_family.output VIDEO): NULL = pipeline_generate returns
     * all frames in *rgb, (frames, H, W, 3) uint8; else each frame goes to on_frame on CP rank
     * 0 as soon as it is decoded (*rgb stays NULL), e.g. into a video writer. Videos are
     * decoded on the CP group (split by rows), on CP rank 0 (vae_single_rank, vae_tiling), or
     * in vae_world's round like images (every rank of the job decodes each clip, its frames
     * gathered on the clip's owner and handed on there). */
    pipeline_frame_fn on_frame;
    void *frame_ctx;
} pipeline_run;

/* Where and how the models run. Zero-initialised = the defaults. */
typedef struct pipeline_options {
    const char *backend;          /* --backend NAME; NULL or "auto": the best available */
    const char *attention_kernel; /* --attention-backend KERNEL of that backend; NULL: its
                                     default */
    cpdit_weight_format format;   /* NATIVE (default: bf16 as stored) or F32 (exact reference) */
    size_t budget;                /* bytes for the transformer's resident weights; 0 = default:
                                     weight_budget_default(1) */
    const struct weight_arena_ops *arena; /* NULL, or node-shared storage for them */
} pipeline_options;
/* The older name of pipeline_options (weights only). */
typedef pipeline_options pipeline_weight_options;

/* Open a model: a diffusers FLUX.1 folder, or "builtin:tiny" (written to a cache folder on
 * first use, then loaded like any folder), with the default options. */
cpdit_status pipeline_open(pipeline **out, const char *model, cpdit_error *err);

/* pipeline_open with options (NULL: the defaults). An unknown backend or attention kernel is
 * CPDIT_ERR_INPUT, the message listing the choices. */
cpdit_status pipeline_open_with(pipeline **out, const char *model, const pipeline_options *opt,
                                cpdit_error *err);
void pipeline_close(pipeline *p);

/* The backend every model of p runs on (grids for p: cp_grid_create_for with it). */
const cpdit_backend *pipeline_backend(const pipeline *p);

/* The transformer's weights: resident or streamed, slots shared, time and bytes spent making
 * them (the family's weight_stats, lib/models/model.h). */
struct model_weight_stats;
void pipeline_weight_stats(const pipeline *p, struct model_weight_stats *s);

/* Wall seconds this rank spent in VAE decodes as CP rank 0 of its group (the decode time of
 * its images), and how many (*count, may be NULL). */
double pipeline_decode_seconds(const pipeline *p, long *count);
/* How many decodes (images or clips, its own or others') this rank took part in: every rank of
 * a split decode counts it, CP rank 0 alone when it decodes alone. */
long pipeline_decode_shares(const pipeline *p);

/* The folder the model was loaded from (for "builtin:tiny": the cache folder). */
const char *pipeline_model_dir(const pipeline *p);
/* How the text encoders' weights are held (resident or streamed per layer) and what making
 * them cost so far, CLIP's and the T5's (text_weights.h). */
void pipeline_text_weight_stats(const pipeline *p, text_weight_stats *clip,
                                text_weight_stats *t5);
/* 1 when the transformer embeds guidance (FLUX.1-dev), 0 for schnell-like models. */
int pipeline_is_guidance_distilled(const pipeline *p);
/* The family's sampler steps for a folder without a request (FLUX.1: 28 dev, 4 schnell). */
int pipeline_default_steps(const pipeline *p);

/* Validate parameters without running (sizes multiple of 16, steps, ...): INPUT errors
 * whose where names the parameter ("width", "steps", ...). */
cpdit_status pipeline_check_params(const pipeline *p, const pipeline_params *prm,
                                   cpdit_error *err);

/* Generate one image. On CP rank 0, *rgb receives a malloc'd (height, width, 3) uint8
 * image (a video family: (frames, height, width, 3), or NULL with run->on_frame); elsewhere
 * *rgb is NULL. Collective over run->grid->cp. NaN or Inf in the sampled
 * latents or in the decoded image is a RUNTIME error on CP rank 0 ("... values are not
 * finite"), never an image. Bad inputs fail alike on every rank (INPUT); a runtime failure on
 * one rank inside a collective stage (the forward, the split decode) is CPDIT_ERR_BROKEN on
 * that rank: its peers may be waiting in a collective it will not enter, so the caller must
 * end the whole job (the library never aborts). */
cpdit_status pipeline_generate(pipeline *p, const pipeline_params *prm, const pipeline_run *run,
                               uint8_t **rgb, cpdit_error *err);

/* Join one decode round of run->vae_world with no image of this rank's own (a data-parallel
 * group without an item in this round). Collective (see pipeline_run.vae_world); a no-op when
 * run->vae_world is NULL. Returns CPDIT_OK, the VAE's load failure, or CPDIT_ERR_BROKEN (a
 * failure inside the round: end the job, as after pipeline_generate). err may be NULL. */
cpdit_status pipeline_vae_world_idle(pipeline *p, const pipeline_run *run, cpdit_error *err);

/* mkdir -p dir. INPUT for an empty or too long name, RUNTIME when a folder cannot be made. */
cpdit_status pipeline_make_dirs(const char *dir, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
