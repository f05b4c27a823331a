/* cmd_run.h — the pieces of `cpdit run`: option parsing (cmd_run.c), one item without a
 * manifest (cmd_run_item.c), and a manifest batch (cmd_run_batch.c). */
#ifndef CPDIT_CMD_RUN_H
#define CPDIT_CMD_RUN_H

#include <stddef.h>
#include <stdint.h>

typedef struct run_item_options {
    const char *model;           /* folder or builtin:tiny */
    const char *prompt;
    const char *negative_prompt;
    uint64_t seed;
    int width, height, steps;    /* 0: defaults of the model (run_item_model_defaults) */
    float guidance, true_cfg;
    int true_cfg_given;          /* --true-cfg was given (else the model's default) */
    int max_sequence_length;     /* 0: the model's default */
    const char *output;          /* folder */
    const char *dump;            /* NULL or folder */
    int ring, ulysses, anything;
    const char *variant;         /* --attention: cm_variant_parse spelling (cp names,
                                    +anything) */
    const char *topology;        /* NULL: $CPDIT_TOPOLOGY (grid choice without grid flags) */
    const char *backend;         /* --backend NAME; NULL = the best available */
    const char *attention_kernel; /* --attention-backend KERNEL; NULL = the backend's default */
    int vae_single_rank;         /* --vae-parallel off: CP rank 0 decodes alone */
    int vae_world;               /* --vae-parallel world: every rank of the job decodes */
    const char *vae_parallel;    /* the --vae-parallel word (NULL: not given) */
    int vae_tiling;              /* --vae-tiling: tiled decode on CP rank 0 (approximate) */
    int verbose;                 /* --verbose: a plain line per sampler step and per item */
    int guidance_given;          /* --guidance was given */
    /* video families (Wan): 0 / NULL = the model's defaults (81 frames, 16 fps, the folder's
     * flow_shift, mp4) */
    int frames;                  /* --frames N (4k + 1) */
    double fps;                  /* --fps F */
    double flow_shift;           /* --flow-shift S */
    const char *video_format;    /* --format mp4|webp|png-frames */
    int is_video;                /* set by run_item_model_defaults: the model makes videos */
    const char *cache;           /* --cache SPEC (lib/pipeline/pipeline_cache.h); NULL: none */
} run_item_options;

void run_item_defaults(run_item_options *o);
/* Fill what o leaves to the model: width, height (0), max_sequence_length (0), true_cfg and
 * negative_prompt (each when not given) from a built-in model's run defaults (lib/builtin); a folder
 * keeps FLUX.1's (1024 x 1024; steps and T5 tokens from the pipeline). Steps are filled at
 * pipeline_open (they depend on whether the model is guidance-distilled). */
void run_item_model_defaults(run_item_options *o);

/* cmd_run_video.c: one clip of `cpdit run --frames`, written as its frames are decoded. */
struct cpdit_video_writer;
typedef struct run_video {
    struct cpdit_video_writer *w; /* NULL on ranks that do not write */
    struct cpdit_error *err;      /* why writing a frame failed */
    int failed;
    double encode_s; /* seconds inside the writer while frames were added (during the decode) */
    double finish_s; /* seconds finishing the file (last packets, trailer, rename) */
} run_video;
/* The video's file name: NNNNN-SEED-SLUG + the format's extension. INPUT for an unknown or
 * unavailable --format. */
int run_video_name(const run_item_options *o, const char *slug, char *name, size_t n,
                   struct cpdit_error *err);
/* Open the writer of OUTPUT/name for prm's clip (metadata: prompt, seed, steps, ...). */
struct pipeline_params;
int run_video_open(run_video *v, const run_item_options *o, const struct pipeline_params *prm,
                   const char *path, struct cpdit_error *err);
/* pipeline_run.on_frame for a run_video (ctx). */
int run_video_frame(void *ctx, int f, int n_frames, const uint8_t *rgb, int height, int width);
/* Finish the clip (or abort it when st != 0); prints the path on stdout and one line
 * "cpdit: video: frames N, fps F, duration D s, codec C, file PATH" on stderr. */
int run_video_finish(run_video *v, int st, struct cpdit_error *err);

/* --weight-format / --weight-memory of `cpdit run` (item and manifest alike). */
typedef struct run_weight_options {
    const char *format;   /* NULL, "native" or "fp32" */
    size_t memory;        /* bytes; 0 = default from the free memory */
    int no_share;         /* --no-weight-sharing: each rank holds its own copy */
} run_weight_options;
extern run_weight_options run_weights;
struct pipeline;
struct cpdit_error;
/* pipeline_open_with run_weights and o's backend and attention kernel. */
int run_open_pipeline(struct pipeline **out, const char *model, const run_item_options *o,
                      struct cpdit_error *err);
/* Runs under MPI (after MPI_Init); returns the exit code, the same on every rank. */
int run_item(const run_item_options *o);
struct manifest_overrides;
/* `cpdit run MANIFEST`: runs under MPI; returns the exit code (jobs/job_run.h EXIT CODES). */
/* Uses o->variant, o->backend, o->attention_kernel and o->dump. */
int run_batch(const char *path, const struct manifest_overrides *ov, const run_item_options *o);
/* `cpdit run MANIFEST --check`: no MPI needed. */
int check_batch(const char *path, const struct manifest_overrides *ov);
#endif
