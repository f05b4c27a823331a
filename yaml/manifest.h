/* manifest.h — the batch manifest of `cpdit run MANIFEST.yaml`: its schema as C types and the
 * strict libyaml parser that fills them (yaml/README.md documents every key).
 *
 * Parsing is pure: manifest_parse_bytes turns the manifest's bytes into a validated struct
 * without touching the file system, so every MPI rank can parse the same broadcast bytes and
 * get the same result (jobs/job_broadcast.c). The checks that look at files (the prompts file
 * exists, the model folder exists) run on rank 0 only, through MANIFEST_CHECK_FILES.
 *
 * Errors are CPDIT_ERR_INPUT with err->where = "FILE:LINE:COL" (1-based, the position libyaml
 * reports for the offending key or value) and err->what = the message, so the CLI prints
 * "cpdit: FILE:LINE:COL: message". Errors inside a prompts file read "PROMPTS_FILE:LINE".
 *
 * The prompts themselves are not all held here: inline `prompts:` are, but a `prompts_file:`
 * (100 000+ lines) is streamed by the expansion (jobs/job_items.h).
 */
#ifndef CPDIT_MANIFEST_H
#define CPDIT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/core/cpdit_error.h"
#include "lib/pipeline/pipeline_cache.h" /* `cache:` (plain data) */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- limits and defaults
 * The one table of an item's limits: the manifest schema (manifest_schema.c) and the command
 * line of `cpdit run` (bin/cmd_run.c) both check against these. */
#define MANIFEST_SIDE_MULTIPLE 16 /* VAE factor 8 x FLUX patch 2: width/height step, pixels */
#define MANIFEST_SIDE_MIN 16      /* pixels */
#define MANIFEST_SIDE_MAX 4096    /* pixels; 4096x4096 = 65 536 image tokens */
#define MANIFEST_STEPS_MAX 1000
#define MANIFEST_SEQ_LEN_MAX 512 /* T5 tokens: the FLUX pipeline's limit */
#define MANIFEST_REPEATS_MAX 1000000
#define MANIFEST_SEEDS_MAX 1000000 /* seeds per list or count */
#define MANIFEST_SEED_MAX INT64_MAX /* seeds are 0 .. 2^63-1 (JSON-safe integers) */
#define MANIFEST_DEGREE_MAX 65536  /* dp, ring, ulysses */
#define MANIFEST_GUIDANCE_MAX 100.0 /* guidance and true_cfg: 0 .. 100 */
/* Videos (a video model such as Wan 2.1): num_frames is 4k + 1 (the VAE's temporal factor 4:
 * 1 + 4(T-1) frames from T latent frames); fps and flow_shift as the video writer and the
 * UniPC scheduler accept them. */
#define MANIFEST_FRAMES_STEP 4
#define MANIFEST_FRAMES_MAX 1001  /* 251 latent frames */
#define MANIFEST_FPS_MIN 0.01     /* frames per second: CPDIT_VIDEO_MIN_FPS */
#define MANIFEST_FPS_MAX 240.0    /* CPDIT_VIDEO_MAX_FPS */
#define MANIFEST_DEFAULT_FPS 16.0 /* Wan 2.1's export rate */
#define MANIFEST_FLOW_SHIFT_MAX 100.0 /* > 0; Wan uses 3 (480p) and 5 (720p) */
#define MANIFEST_MAX_BYTES (64u << 20) /* a manifest file larger than this is refused */
/* `cache:` / --cache (lib/pipeline/pipeline_cache.h): fbcache threshold in (0, 10] (default
 * 0.05), taylorseer ORDER 1..4 (default 1) and INTERVAL 1..100 (default 5) */
#define MANIFEST_CACHE_THRESHOLD_MAX PIPELINE_FBCACHE_THRESHOLD_MAX
#define MANIFEST_CACHE_ORDER_MAX PIPELINE_TAYLORSEER_ORDER_MAX
#define MANIFEST_CACHE_INTERVAL_MAX PIPELINE_TAYLORSEER_INTERVAL_MAX
/* Items per manifest (prompts x sizes x seeds x repeats, inline and prompts file together).
 * Counted prompt by prompt before any item is made, so a manifest over it is refused with
 * the position of the prompt that crosses it, before memory grows. A run keeps 16-64 bytes
 * per item of the manifest on every rank (the duplicate-name check) and ~500 per item of the
 * rank's own group (measured: 600 000 items on one rank, 290 MB): under 1 GB per rank. */
#define MANIFEST_ITEMS_MAX 1000000

#define MANIFEST_DEFAULT_STEPS 28
#define MANIFEST_DEFAULT_GUIDANCE 3.5
#define MANIFEST_DEFAULT_TRUE_CFG 1.0 /* 1 = off */
#define MANIFEST_DEFAULT_SIDE 1024
#define MANIFEST_DEFAULT_SEED 0
#define MANIFEST_DEFAULT_SEQ_LEN 512
#define MANIFEST_DEFAULT_OUTPUT_DIR "out"
#define MANIFEST_DEFAULT_NAME "{index:05d}-{seed}-{slug}.png"
/* A video manifest's default name: this stem + the format's extension (.mp4, .webp, none for
 * a folder of PNG frames). */
#define MANIFEST_DEFAULT_NAME_STEM "{index:05d}-{seed}-{slug}"

/* A position in the manifest (or a prompts file): 1-based line and column; col 0 = unknown
 * (JSONL prompts files report lines only). */
typedef struct manifest_mark {
    int line;
    int col;
} manifest_mark;

typedef struct manifest_size {
    int width, height; /* pixels, multiples of MANIFEST_SIDE_MULTIPLE */
} manifest_size;

/* Seeds: an explicit list (list != NULL, n entries) or the range start, start+1, ...,
 * start+n-1 (list == NULL). Use manifest_seed_at to read the k-th. */
typedef struct manifest_seeds {
    uint64_t *list;
    size_t n;
    uint64_t start;
} manifest_seeds;

/* Bits of manifest_settings.set: which fields were given. */
enum {
    MANIFEST_SET_STEPS = 1u << 0,
    MANIFEST_SET_GUIDANCE = 1u << 1,
    MANIFEST_SET_TRUE_CFG = 1u << 2,
    MANIFEST_SET_SEQ_LEN = 1u << 3,
    MANIFEST_SET_NEGATIVE = 1u << 4,
    MANIFEST_SET_SEED = 1u << 5,  /* a single `seed:` */
    MANIFEST_SET_SEEDS = 1u << 6, /* `seeds:` list or count */
    MANIFEST_SET_WIDTH = 1u << 7,
    MANIFEST_SET_HEIGHT = 1u << 8,
    MANIFEST_SET_SIZES = 1u << 9,
    MANIFEST_SET_REPEATS = 1u << 10,
    MANIFEST_SET_FRAMES = 1u << 11, /* num_frames */
    MANIFEST_SET_FPS = 1u << 12,
    MANIFEST_SET_FLOW_SHIFT = 1u << 13
};

/* Generation settings. In manifest.base every scalar field holds its value (given or
 * default); seeds/sizes/repeats hold the top-level `seeds:`, `sizes:`, `repeats:` when their
 * bit is set. In a prompt's overrides only the fields whose bit is set mean anything. */
typedef struct manifest_settings {
    unsigned set;
    int steps;
    double guidance;
    double true_cfg;
    int max_sequence_length;
    char *negative_prompt; /* NULL: none; "" = the empty prompt (true CFG on, as diffusers) */
    uint64_t seed;
    int width, height;
    manifest_seeds seeds;
    manifest_size *sizes;
    size_t n_sizes;
    int repeats;
    int num_frames;    /* video: 4k + 1; 0 in an image manifest */
    double fps;        /* video: frames per second of the file */
    double flow_shift; /* video: > 0 overrides the scheduler's; 0 = the folder's */
} manifest_settings;

/* One prompt of the inline `prompts:` list (a prompts file yields the same, one at a time). */
typedef struct manifest_prompt {
    char *text; /* UTF-8, not empty */
    manifest_settings over;
    manifest_mark mark; /* where the prompt is (manifest line:col, or prompts-file line) */
} manifest_prompt;

typedef enum manifest_prompts_format {
    MANIFEST_PROMPTS_TEXT = 0, /* one prompt per line, blank lines and # comments skipped */
    MANIFEST_PROMPTS_JSONL = 1 /* one JSON object per line: {"prompt": ..., overrides} */
} manifest_prompts_format;

typedef struct manifest_parallel {
    int is_auto;      /* `parallel: auto` (also when absent): the grid is chosen at run time */
    int dp;           /* 0 = the rest: world_size / (ring * ulysses) */
    int ring;         /* >= 1 */
    int ulysses;      /* >= 1 */
    int anything;     /* 0/1: allow uneven sequence and head splits */
} manifest_parallel;

/* output.format: what an item becomes. png for image models (the only one); mp4 (the
 * default), webp or png-frames for video models. */
typedef enum manifest_format {
    MANIFEST_FORMAT_PNG = 0,
    MANIFEST_FORMAT_MP4,
    MANIFEST_FORMAT_WEBP,
    MANIFEST_FORMAT_PNG_FRAMES
} manifest_format;

typedef struct manifest {
    char *path;     /* the manifest's path as given (for messages) */
    char *base_dir; /* its folder ("" when the path has none): relative inputs resolve here */

    char *model;          /* "builtin:NAME" or a folder path, resolved against base_dir */
    int model_is_builtin; /* 1 for "builtin:..." */
    manifest_mark model_mark;

    char *output_dir;    /* relative paths are relative to the working directory */
    manifest_mark output_dir_mark; /* of output.dir; line 0 = the default or --output */
    int output_dir_from_option;    /* 1: set by --output (manifest_apply_overrides) */
    char *name_template; /* checked: see jobs/job_items.h for the template language */
    manifest_mark name_mark;

    manifest_settings base;
    int is_video;           /* 1: the model makes videos (items have frames, fps, ...) */
    manifest_format format; /* output.format, or the model's default */
    manifest_mark format_mark; /* of output.format; line 0 = the default */

    manifest_prompt *prompts; /* inline prompts, in order */
    size_t n_prompts;

    char *prompts_file; /* NULL, or the path resolved against base_dir */
    manifest_prompts_format prompts_format; /* by extension: .jsonl / .json = JSONL */
    manifest_mark prompts_file_mark;

    manifest_parallel parallel;
    int vae_tiling; /* `vae_tiling: true`: decode in overlapping tiles on one rank (approximate,
                     * diffusers' enable_tiling; less memory); default false */
    int vae_parallel; /* `vae_parallel: on|off|world` (manifest_vae_parallel): how the decode is
                       * split; default on */
    pipeline_cache_config cache; /* `cache: fbcache[:T] | taylorseer[:ORDER,INTERVAL] | none`
                                  * for every item; default none */
} manifest;

/* `vae_parallel` / `cpdit run --vae-parallel`: on (0, the default) = split by rows over the
 * item's CP group; off = CP rank 0 alone; world = over every rank of the job, in rounds. */
typedef enum manifest_vae_parallel {
    MANIFEST_VAE_ON = 0,
    MANIFEST_VAE_OFF,
    MANIFEST_VAE_WORLD
} manifest_vae_parallel;

/* "on", "off", "world" -> the value; -1 for anything else. */
int manifest_vae_parallel_from_name(const char *name);

/* Command-line overrides for what changes between runs of the same manifest. Zero / NULL
 * fields change nothing; anything = -1 keeps the manifest's value. */
typedef struct manifest_overrides {
    const char *output_dir;
    int dp, ring, ulysses;
    int anything;
    int vae_tiling; /* 1: --vae-tiling (on whatever the manifest says) */
    const char *vae_parallel; /* NULL, or --vae-parallel on|off|world */
    const char *cache;        /* NULL, or --cache SPEC (pipeline_cache_parse) */
} manifest_overrides;
#define MANIFEST_OVERRIDES_NONE {NULL, 0, 0, 0, -1, 0, NULL, NULL}

/* Flags of manifest_parse_bytes / manifest_load. */
enum {
    MANIFEST_CHECK_FILES = 1u << 0, /* prompts_file must exist and be readable; a model path
                                     * must be a folder (rank 0 only) */
    MANIFEST_READ_MODEL = 1u << 1   /* a model folder's configs say whether it makes videos
                                     * (every rank of a run: the item names depend on it).
                                     * Without it a folder makes videos only when the manifest
                                     * gives a video key (num_frames, fps, flow_shift, a video
                                     * output.format). builtin: models are known either way. */
};

/* Parse and validate a manifest from bytes (any bytes: the parser is fuzzed). path names it
 * in messages and gives the folder relative inputs resolve against. On success *out is a new
 * manifest (free with manifest_free); on failure *out is NULL and err has
 * where = "PATH:LINE:COL". */
cpdit_status manifest_parse_bytes(const char *path, const char *bytes, size_t len,
                                  unsigned flags, manifest **out, cpdit_error *err);

/* Read the file at path (at most MANIFEST_MAX_BYTES) into a new buffer: *bytes (caller frees)
 * and *len. Errors name the path. */
cpdit_status manifest_read_file(const char *path, char **bytes, size_t *len, cpdit_error *err);

/* manifest_read_file + manifest_parse_bytes. */
cpdit_status manifest_load(const char *path, unsigned flags, manifest **out, cpdit_error *err);

/* Apply command-line overrides (checked: degrees in 1..MANIFEST_DEGREE_MAX, a non-empty
 * folder). Giving any of dp/ring/ulysses turns `parallel: auto` into explicit degrees with the
 * others at 1 (dp: the rest). Errors: CPDIT_ERR_INPUT, where = the option. */
cpdit_status manifest_apply_overrides(manifest *m, const manifest_overrides *ov,
                                      cpdit_error *err);

void manifest_free(manifest *m);

/* "png", "mp4", "webp", "png-frames". */
const char *manifest_format_name(manifest_format f);
/* The file name extension items of format f end in: ".png", ".mp4", ".webp", "" (a folder). */
const char *manifest_format_extension(manifest_format f);

/* One line of a prompts file (without its line break) into *out.
 *   TEXT:  leading/trailing spaces (and a trailing \r) are dropped; an empty line or one
 *          starting with '#' is skipped; anything else is the prompt, verbatim.
 *   JSONL: an empty line is skipped; else a JSON string (the prompt) or an object
 *          {"prompt": ..., overrides} with the keys and types of an inline prompt mapping.
 * A UTF-8 byte order mark at the start of line 1 is dropped (both formats).
 * A skipped line gives CPDIT_OK with out->text == NULL. Errors: CPDIT_ERR_INPUT with
 * where = "FILE:LINE". line_no is 1-based. Free *out with manifest_prompt_free. */
cpdit_status manifest_prompt_parse_line(manifest_prompts_format format, const char *file,
                                        int line_no, const char *line, size_t len,
                                        manifest_prompt *out, cpdit_error *err);
void manifest_prompt_free(manifest_prompt *p);

/* Items of prompt p in m: its seeds x sizes x repeats (overrides, else m->base), saturating
 * at UINT64_MAX. */
uint64_t manifest_prompt_items(const manifest *m, const manifest_prompt *p);

/* *total += manifest_prompt_items(m, p); an error (CPDIT_ERR_INPUT, where = "FILE:LINE:COL"
 * of p, or "FILE:LINE" for a prompts-file line; file names the file p is in) when the sum
 * passes MANIFEST_ITEMS_MAX. */
cpdit_status manifest_items_add(const manifest *m, const manifest_prompt *p, const char *file,
                                uint64_t *total, cpdit_error *err);

/* The k-th seed (k < s->n). */
uint64_t manifest_seed_at(const manifest_seeds *s, size_t k);

/* Resolve a relative path against the manifest's folder ("dir/rel"; absolute paths and an
 * empty base_dir give a copy of rel). Caller frees; NULL when out of memory. */
char *manifest_resolve_path(const char *base_dir, const char *rel);

#ifdef __cplusplus
}
#endif
#endif
