/* job_index.h — the JSONL index of a batch run, PNG completeness, and resume.
 *
 * THE INDEX. OUTPUT_DIR/index.jsonl gets one line per finished or failed item, written by
 * the group leader that rendered it:
 *   {"index":3,"prompt":"a red fox","seed":2,"width":208,"height":208,"steps":4,
 *    "guidance":3.5,"grid":{"dp":2,"ring":1,"ulysses":2},"seconds":1.25,"times":{...},
 *    "file":"00003-2-a-red-fox.png","status":"ok","error":null}
 * ("times": job_item_times below, on lines written by a run). A video item's line also has
 *   "frames":81,"fps":16.0,"duration":5.0625,"format":"mp4","codec":"h264"
 * before "file" (format mp4 / webp / png-frames; codec h264 / webp-lossy / png), and its
 * "guidance" is the true-CFG scale (Wan's guidance_scale).
 * status is "ok" or "failed" (then error is the reason and no PNG exists); seconds is the
 * leader's wall time for the item (render + PNG), null for a line re-made on resume (grid is
 * then null too). A line is appended with ONE write() on a descriptor opened with O_APPEND,
 * so lines of several groups never interleave on a local or POSIX-compliant parallel file
 * system (Lustre, GPFS); NFS does not promise atomic appends from several clients, so
 * leaders on other nodes write node parts (below) and array tasks their own index files
 * (jobs/job_slurm.h).
 *
 * READING tolerates what a SIGKILL can leave: trailing bytes without a final '\n' (a torn
 * line) are ignored, as is any complete line that is not a JSON object with a "file" string.
 *
 * RESUME (rank 0, before any group starts). An item is done iff its PNG (video file, frames
 * folder) exists and is complete (job_output_is_complete). Then the index is rewritten
 * (atomically, only when it changes) to hold exactly: the last "ok" line of each file whose
 * PNG is complete, in their old order, followed by a new line for each done item that had
 * none (a PNG written just before a kill). "ok" lines whose PNG is gone or damaged (those
 * items are redone), "failed" lines (those items are retried), duplicates and torn or
 * corrupt lines are dropped. So after a run that finishes, the index has exactly one line per
 * item. Stale temporary files (lib/io/atomic_file.h's ".NAME.tmp.XXXXXX") are removed from the
 * output folder first: one job per output folder at a time.
 */
#ifndef CPDIT_JOB_INDEX_H
#define CPDIT_JOB_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "jobs/job_items.h"

#ifdef __cplusplus
extern "C" {
#endif

#define JOB_INDEX_FILE_NAME "index.jsonl"

struct job_slurm_info;

/* Degrees written into "grid"; inside Slurm also the "slurm" record (jobs/job_slurm.h). */
typedef struct job_grid_info {
    int dp, ring, ulysses;
    const struct job_slurm_info *slurm; /* NULL or no job id: no "slurm" key */
    const char *node;                   /* the leader's MPI processor name (in "slurm") */
    const char *why; /* NULL, or one line: how the grid was chosen ("grid": {..., "why"}) */
    const char *vae; /* NULL, or how the VAE decode ran ("grid": {..., "vae"}: "group",
                        "rank0", "tiled", "world") */
} job_grid_info;

/* Where an item's time went (wall seconds on the group leader), written as
 *   "times":{"text_s":0.02,"sample_s":1.1,"steps":4,"step_max_s":0.3,"vae_load_s":0,
 *            "vae_s":0.1,"write_s":0.01}
 * A field < 0 was not measured (written as null). */
typedef struct job_item_times {
    double text_s;      /* text encoders */
    double sample_s;    /* all sampler steps */
    int steps;          /* steps completed */
    double step_max_s;  /* the slowest step */
    double vae_load_s;  /* loading the VAE (first decode of a run only) */
    double vae_s;       /* latents → RGB: gather, VAE decode, conversion */
    double write_s;     /* PNG encoding and writing (temp file + rename) */
    /* bytes the leader read from storage during step 1 / the later steps (pipeline_timings;
     * printed in the item's log line, not written to the index); -1: not measured */
    long long read_step1_bytes, read_later_bytes;
    /* the cache (lib/pipeline/pipeline_cache.h), written as "cache":{"spec":"fbcache:0.05",
     * "full":8,"cached":12,"saved_s":0.4,"steps":"FFFCC..."}; spec "" = none (no key) */
    char cache_spec[32];
    int cache_full, cache_cached;
    double cache_saved_s;
    long long cache_state_bytes; /* the cache's memory on the leader (its rows only) */
    char cache_steps[520];
} job_item_times;

/* Every field "not measured". */
void job_item_times_clear(job_item_times *t);

/* One index line for item, '\n'-terminated, as a new string (*len its length, may be NULL).
 * error NULL → status "ok"; else "failed" with that reason. grid NULL and seconds < 0 are
 * written as null. NULL when out of memory. */
char *job_index_line(const job_item *item, const job_grid_info *grid, double seconds,
                     const char *error, size_t *len);
/* job_index_line with the item's phase times (times NULL: no "times" key). */
char *job_index_line_timed(const job_item *item, const job_grid_info *grid, double seconds,
                           const job_item_times *times, const char *error, size_t *len);

/* Append line (len bytes, ending in '\n') to the index at path with a single write() on an
 * O_APPEND descriptor (the file is created 0666 & ~umask when missing). A short write is an
 * error (CPDIT_ERR_RUNTIME: no space, quota). */
cpdit_status job_index_append(const char *path, const char *line, size_t len,
                              cpdit_error *err);

typedef struct job_index_entry {
    char *file; /* "file" of the line */
    int ok;     /* status "ok" */
    size_t off, len; /* the line in job_index_contents.bytes, '\n' included */
} job_index_entry;

typedef struct job_index_contents {
    char *bytes; /* the whole file */
    size_t len;
    job_index_entry *entries; /* valid lines, in file order */
    size_t n;
    size_t torn_bytes; /* trailing bytes without '\n', ignored */
    size_t n_corrupt;  /* complete lines that are not index records, ignored */
} job_index_contents;

/* Read and split the index at path. A missing file is an empty index. */
cpdit_status job_index_read(const char *path, job_index_contents *out, cpdit_error *err);
/* The same for path followed by the files parts (a torn last line of one file stays a
 * separate, ignored line). */
cpdit_status job_index_read_with_parts(const char *path, char *const *parts, size_t n_parts,
                                       job_index_contents *out, cpdit_error *err);

/* NODE PARTS. Appends from several nodes to one file are not whole on NFS, so a group leader
 * on another node than world rank 0 appends to its own part file beside the run's index,
 * "<index stem>.node-HOST.jsonl" (e.g. index.node-gpu017.jsonl); the next run's resume
 * merges the parts into the index and removes them, and readers (`cpdit status`) take the
 * union of every index file. One writer per file on each node. */
void job_index_node_name(const char *index_name, const char *host, char *out, size_t size);
/* 1 when name is a node part of index_name. */
int job_index_is_node_part(const char *name, const char *index_name);
void job_index_contents_free(job_index_contents *c);

/* 1 when path is a complete PNG file (signature + final IEND chunk), else 0. */
int job_png_is_complete(const char *path);
/* 1 when an item's output at path is complete (job_output_check.c): a PNG as above; an .mp4
 * whose top-level boxes tile the file (ftyp first, moov and mdat present); a .webp whose RIFF
 * size covers the file; a folder (png-frames) of nothing but complete frame_NNNNN.png, at
 * least one. What resume, --check and `cpdit status` count as done. */
int job_output_is_complete(const char *path);

/* Remove the temporary files (atomic_file_is_temp_name) in dir; *removed = how many (may be
 * NULL). A missing folder is fine. */
cpdit_status job_remove_temp_files(const char *dir, int *removed, cpdit_error *err);

/* ---------------------------------------------------------------- resume (job_resume.c) */
typedef struct job_resume job_resume;

typedef struct job_resume_stats {
    uint64_t items;        /* items seen */
    uint64_t done;         /* items whose PNG is complete */
    uint64_t reindexed;    /* done items that had no "ok" line: a line was added */
    uint64_t dropped;      /* index lines dropped (failed, missing PNG, duplicate, corrupt) */
    size_t torn_bytes;     /* a torn last line's bytes, dropped */
    int rewritten;         /* 1 when the index file was rewritten */
} job_resume_stats;

/* Read OUT_DIR's index. */
cpdit_status job_resume_begin(const char *out_dir, job_resume **out, cpdit_error *err);
/* The same for the index file index_name (an array task's own, jobs/job_slurm.h); the "ok"
 * lines of the folder's other index*.jsonl files are read too: a complete PNG that one of
 * them lists gets no re-made line in this one. */
cpdit_status job_resume_begin_named(const char *out_dir, const char *index_name,
                                    job_resume **out, cpdit_error *err);
/* 1 when name is an index file: "index.jsonl" or "index.*.jsonl". */
int job_index_is_index_name(const char *name);
/* Call for every item of the manifest, in order: *done = 1 when its PNG is complete. */
cpdit_status job_resume_item(job_resume *r, const job_item *item, int *done,
                             cpdit_error *err);
/* Rewrite the index as described above (when it changes); stats may be NULL. */
cpdit_status job_resume_finish(job_resume *r, job_resume_stats *stats, cpdit_error *err);
void job_resume_free(job_resume *r);

/* mkdir -p dir (job_run.c). */
cpdit_status job_make_folders(const char *dir, cpdit_error *err);

/* "dir/name" as a new string (NULL when out of memory). */
char *job_path_join(const char *dir, const char *name);

#ifdef __cplusplus
}
#endif
#endif
