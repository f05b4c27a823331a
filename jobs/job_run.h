/* job_run.h — the MPI batch runner of `cpdit run MANIFEST.yaml`, its `--check` plan, the
 * manifest broadcast, and the stop flag (SIGUSR1 / SIGTERM).
 *
 * FLOW (job_run, collective over world):
 *   1. degrees: the manifest's parallel settings (or hooks->choose_grid for `auto`, decided
 *      on rank 0 and broadcast) → cp_grid_create: dp groups of ring x ulysses ranks.
 *   2. rank 0: refuse a file in the output folder's place (INPUT), create the folder, prove
 *      it writable with a probe file (RUNTIME before anything is rendered), remove stale
 *      temporary files, read the index. Folders created here are removed again when the
 *      start fails (a refused manifest leaves no empty folder).
 *   3. every rank expands the manifest (prompts-file bytes read on rank 0 and broadcast),
 *      keeping the items of its group (item i → group i mod dp, jobs/job_items.h); rank 0
 *      checks which PNGs are complete, rewrites the index to match (job_index.h) and
 *      broadcasts the "done" bits; done items are skipped.
 *   4. each group renders its items in index order: hooks->render_item on every rank of the
 *      group; the group leader (cp_rank 0) writes the PNG (temp file + rename, text chunks
 *      prompt/seed/steps/guidance/model...) and then appends the item's index line. A video
 *      item streams its frames into the leader's writer instead (VIDEOS below). A failing
 *      item (the hook fails on any rank of the group, or the PNG cannot be written) gets a
 *      "failed" index line with the reason and the group goes on. A failure to append to the
 *      index stops that group and fails the job (exit 1) at the end.
 *   5. rank 0 prints the summary table; every rank returns the same status and summary.
 *
 * STOPPING. SIGUSR1 and SIGTERM (Slurm's warning signal and its time limit) only set a flag.
 * Before each item, and after an item whose render failed, the ranks of a group agree
 * (allreduce) whether any of them saw it; then the group stops: nothing partial is written
 * (PNGs are atomic; an interrupted item gets no index line and is redone by the next run),
 * the summary is printed and job_exit_code gives JOB_EXIT_REQUEUE (3). A sampler may call
 * job_stop_agreed between steps (collective over the group!) and fail the render early: an
 * item whose render fails while the group agrees a stop was requested is left for the next
 * run, not recorded as failed. A crashed rank is mpirun's/srun's business: they kill the job.
 * A stop may come at any moment: while MPI starts or the model opens (the CLI installs the
 * handlers before MPI_Init and agrees over the world after the open, so all ranks stop before
 * the first item), between sampler steps, or while a VAE decodes or a PNG is written (that
 * item is finished, the next one is not begun). Inside Slurm the group leaders also watch the
 * sbatch script's stop-request file (job_stop_watch_file). World rank 0 writes the stop
 * marker and releases the lock BEFORE the final broadcast of the summary, so no rank can
 * exit (and make mpirun kill the others) before both are done.
 *
 * EXIT CODES (job_exit_code): 0 all items done; 1 runtime failure; 2 bad input (manifest);
 * 3 stopped by a signal, requeue me; 4 finished, but some items failed (see the index; a rerun
 * retries them).
 */
#ifndef CPDIT_JOB_RUN_H
#define CPDIT_JOB_RUN_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/core/cpdit_error.h"
#include "lib/cp/grid_mpi.h"
#include "jobs/job_index.h"
#include "jobs/job_items.h"
#include "yaml/manifest.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    JOB_EXIT_OK = 0,
    JOB_EXIT_RUNTIME = 1,
    JOB_EXIT_INPUT = 2,
    JOB_EXIT_REQUEUE = 3,
    JOB_EXIT_ITEMS_FAILED = 4
};

/* Seconds between plain progress lines when the log is not a terminal. */
#define JOB_PROGRESS_INTERVAL_DEFAULT 30.0

/* Render one item on its group: called on every rank of the group with the same item. On
 * the group leader (g->cp_rank == 0), on success, *rgb must be (*h, *w, 3) uint8 pixels
 * allocated with malloc (job_run frees them); other ranks leave *rgb NULL. times arrives
 * cleared (job_item_times_clear); the hook fills the phases it measured (the runner adds
 * write_s) for the index line, the summary and --verbose. Return CPDIT_OK, or an error (err
 * filled) to mark the item failed. */
typedef cpdit_status (*job_render_fn)(const job_item *item, const cp_grid *g, uint8_t **rgb,
                                      int *w, int *h, job_item_times *times, void *ctx,
                                      cpdit_error *err);

/* CFG-parallel inside a batch: render one item with true CFG on a pair of groups in lockstep.
 * Called on every rank of both groups with the same item; cfg_comm joins this rank with the
 * rank of the same CP coordinates in the other group; cfg_rank 0 computes the prompt's branch
 * and its leader returns the image, cfg_rank 1 the negative prompt's (no image). */
struct cpdit_comm;
typedef cpdit_status (*job_render_pair_fn)(const job_item *item, const cp_grid *g,
                                           struct cpdit_comm *cfg_comm, int cfg_rank,
                                           uint8_t **rgb, int *w, int *h, job_item_times *times,
                                           void *ctx, cpdit_error *err);
/* VIDEOS (a manifest whose model makes videos: items with frames > 0). The group leader
 * opens the clip's writer before the render; render_video runs on every rank of the group and
 * passes frames->on_frame (and frames->ctx) to the pipeline (pipeline_run.on_frame), which
 * calls it on CP rank 0 with each frame as it is decoded, so no rank holds the whole clip.
 * The leader then moves the file into place (temporary name + rename: an interrupted item
 * leaves no file under its name) and appends the index line with "frames", "fps",
 * "duration", "format" and "codec". Resume counts a video done when its file is complete
 * (job_output_is_complete). */
typedef struct job_frame_sink {
    int (*on_frame)(void *ctx, int f, int n_frames, const uint8_t *rgb, int height, int width);
    void *ctx;
} job_frame_sink;
typedef cpdit_status (*job_render_video_fn)(const job_item *item, const cp_grid *g,
                                            const job_frame_sink *frames,
                                            job_item_times *times, void *ctx,
                                            cpdit_error *err);

/* Pick degrees for `parallel: auto` (called on rank 0 only; the answer is broadcast). */
typedef cpdit_status (*job_choose_grid_fn)(const manifest *m, int world_size, int *dp,
                                           int *ring, int *ulysses, void *ctx,
                                           cpdit_error *err);

typedef struct job_runner_hooks {
    job_render_fn render_item;      /* required */
    job_render_video_fn render_video; /* required for a video manifest (VIDEOS above) */
    job_choose_grid_fn choose_grid; /* NULL: `auto` means dp = all ranks, ring = ulysses = 1 */
    void *ctx;                      /* passed to both */
    FILE *log;                      /* rank 0's progress and summary; NULL = stderr */
    double progress_interval_s;     /* plain progress lines; <= 0: JOB_PROGRESS_INTERVAL_DEFAULT */
    const char *grid_reason;        /* NULL, or one line: why this grid (summary and index) */
    int verbose;                    /* each group leader prints one line per item: where its
                                       time went (plain text on stderr / log) */
    const struct cpdit_backend *backend; /* whose memory the grid's communicators move
                                            (cp_grid_create_for); NULL: host memory (MPI) */
    /* NULL: each group renders its items at its own pace. Set: LOCKSTEP ROUNDS (the VAE
     * decoded by every rank of the job, --vae-parallel world): round k is every group's k-th
     * remaining item; before each round the whole world agrees whether to stop (a stop or a
     * fatal error seen anywhere ends the run for all groups at the same round); a group
     * without a k-th item calls idle_round on each of its ranks instead of render_item, so
     * that render_item may contain a collective over the world (one per round). */
    void (*idle_round)(const cp_grid *g, void *ctx);
    const char *vae; /* NULL, or how images are decoded, for the index line ("grid":{"vae"}) */
    /* NULL, or CFG PAIRS: on an even number of groups (and without idle_round), groups 2j and
     * 2j + 1 take the same items (item i to pair i mod dp/2) and render each item with true
     * CFG together through render_pair (the first group writes its PNG and index line; both
     * report their time per item in the summary); an item without true CFG is rendered by
     * the first group alone (render_item) while the second waits. Stop and failure are agreed
     * over both groups before each item, so resume and stop work as without pairs. */
    job_render_pair_fn render_pair;
} job_runner_hooks;

typedef struct job_summary {
    uint64_t items;        /* items of this run: the manifest's, or an array task's share */
    uint64_t manifest_items; /* items in the whole manifest */
    int share, shares;     /* array task share of shares (shares = 1: no array) */
    uint64_t already_done; /* complete PNGs found at the start: skipped */
    uint64_t done;         /* rendered and written by this run */
    uint64_t failed;       /* recorded as failed by this run */
    uint64_t left;         /* not attempted: the run was stopped */
    int stopped;           /* a stop signal ended the run early */
    int stop_signal;       /* the signal rank 0 saw (0 if none) */
    double seconds;        /* wall time of job_run */
    int dp, ring, ulysses;
    /* where the time went: sums over the items rendered by this run (group leaders' clocks;
     * items without a measured phase do not add to it) */
    double text_s, sample_s, vae_s, write_s;
    uint64_t steps;
    uint64_t cache_full, cache_cached; /* transformer forwards, full / from the cache */
    double cache_saved_s;
} job_summary;

/* Run the batch (collective over world). summary may be NULL. Returns the same status on
 * every rank: CPDIT_OK also when stopped or when items failed (see summary / job_exit_code);
 * CPDIT_ERR_INPUT for a bad manifest or grid; CPDIT_ERR_RUNTIME when the output folder or
 * index cannot be written. */
cpdit_status job_run(const manifest *m, const job_runner_hooks *hooks, MPI_Comm world,
                     job_summary *summary, cpdit_error *err);

/* The process exit code for job_run's result (see EXIT CODES). */
int job_exit_code(cpdit_status st, const job_summary *s);

/* Rank 0 reads and parses path (with MANIFEST_CHECK_FILES and job_check_model_name) and
 * broadcasts the bytes; every rank parses them and applies ov (may be NULL); rank 0 then
 * checks the output folder (job_check_output_dir), so a bad one fails before a model loads.
 * Collective; every rank gets the same status; rank 0 has the message (print it there). The prompts file is not read here: job_run streams it
 * from rank 0 (only rank 0 needs to see it; the model folder and the output folder must be
 * reachable from every rank / every group leader). */
cpdit_status manifest_load_world(const char *path, const manifest_overrides *ov,
                                 MPI_Comm world, manifest **out, cpdit_error *err);

/* `cpdit run MANIFEST --check`: parse (with file checks), apply ov, expand every item (the
 * same checks as a run) and print the plan to out: item count, grid, output folder, how many
 * items are already done, the first items. Writes nothing. No MPI. */
cpdit_status manifest_check_command(const char *path, const manifest_overrides *ov, FILE *out,
                                    cpdit_error *err);

/* `cpdit status OUTPUT_DIR` (output_dir given: the manifest comes from the folder's
 * .cpdit-run.json) or `cpdit run MANIFEST --status` (manifest_path given, ov applied): for
 * each array task and in total, items done (complete PNG), failed (a "failed" index line, no
 * PNG) and left; index lines over all index files and duplicates; live locks and stop
 * markers. Writes nothing (job_status.c). */
cpdit_status job_status_command(const char *output_dir, const char *manifest_path,
                                const manifest_overrides *ov, FILE *out, cpdit_error *err);
/* The same, with the totals (items, done, failed, left) in totals[4] (may be NULL). */
cpdit_status job_status_totals(const char *output_dir, const char *manifest_path,
                               const manifest_overrides *ov, FILE *out, uint64_t totals[4],
                               cpdit_error *err);
/* The exit code of `cpdit status` for totals: JOB_EXIT_ITEMS_FAILED (4) when any item
 * failed, else JOB_EXIT_REQUEUE (3: rerun or requeue to finish) when any is left, else 0. */
int job_status_exit_code(const uint64_t totals[4]);

/* ---------------------------------------------------------------- preflight (job_preflight.c)
 * Checks before anything is written or rendered (rank 0 of a run, and --check). */
/* A "builtin:NAME" model must name a known built-in model. Error: INPUT at "FILE:LINE:COL"
 * of model:. */
cpdit_status job_check_model_name(const manifest *m, cpdit_error *err);
/* A video manifest's output.format must be one this build can write (mp4 needs libavcodec
 * with libx264). Error: INPUT at output.format (or model: for the default mp4), with why. */
cpdit_status job_check_output_format(const manifest *m, cpdit_error *err);
/* The output folder: *exists = 1 when it is there. Errors at "FILE:LINE:COL" of output.dir
 * (or "--output"): a file or anything else that is not a folder, a part of the path that is
 * a file, a link loop (INPUT); an existing folder this process may not write into
 * (RUNTIME, "the output folder ... is not writable: Permission denied"). */
cpdit_status job_check_output_dir(const manifest *m, int *exists, cpdit_error *err);
/* Create and remove a temporary file in the (existing) output folder, and open an existing
 * index for appending: the run's proof that PNGs and index lines can be written, made
 * before the first item is rendered. Error: RUNTIME, as above. */
cpdit_status job_probe_output_dir(const manifest *m, cpdit_error *err);

/* ---------------------------------------------------------------- stop flag (job_signal.c) */
/* Install handlers for SIGUSR1 and SIGTERM that set the flag. job_run does this itself and
 * restores the previous handlers when it returns; a caller that loads a model first should
 * install them before MPI_Init (a signal before that would kill the rank) and uninstall at
 * the end. Calls nest: the handlers go when the last install is undone. */
cpdit_status job_stop_install(cpdit_error *err);
void job_stop_uninstall(void);
int job_stop_requested(void); /* this rank saw a stop signal (or job_stop_request) */
int job_stop_signal_number(void); /* which signal, 0 for none or job_stop_request */
void job_stop_request(void);
void job_stop_clear(void);
/* Collective over g's CP group: 1 when any rank of the group has seen a stop request. */
int job_stop_agreed(const cp_grid *g);
/* Collective over world: 1 when any rank has seen a stop request; then every rank's flag is
 * set (used after the model is opened, so a signal that reached one rank during the open
 * stops them all before the first item). */
int job_stop_agree_world(MPI_Comm world);
/* The stop relay, between these two calls (job_run: around the groups' rendering; collective
 * over world, every rank calls both): a stop that one rank sees (its signal, the request
 * file) is sent to every other rank of the job at its next poll, and a rank that receives it
 * stops as if signalled (with the same signal number), at its own next poll: between
 * sampler steps (job_stop_agreed) or before its next item. So a signal to one rank stops
 * every group within about one sampler step, not only the signalled rank's group. */
void job_stop_relay_begin(MPI_Comm world);
void job_stop_relay_end(void);
/* Also count the file path as a stop request (NULL: stop watching): job_stop_requested
 * stat()s it at most once a second. job_run watches the sbatch script's stop-request file
 * (job_slurm.h) on group leaders, so a signal that arrived before the handlers were
 * installed, or that srun/mpirun could not pass on, still stops the run. */
void job_stop_watch_file(const char *path);
/* Tests only: when CPDIT_TEST_HOLD is "POINT:FILE" for this point and FILE exists, print
 * "[cpdit] test hold at POINT: rank R pid P ..." to stderr and wait until FILE is removed
 * (at most 2 minutes). Points: "open" (before the model is opened, every rank), "write"
 * (a group leader, before the PNG of each item is written). */
void job_test_hold(const char *point, int rank);

/* A job_byte_source over MPI (job_broadcast.c): rank 0 reads path, every read is broadcast
 * over comm, so every rank sees the same bytes. Open and every read are collective. */
typedef struct job_bcast_source {
    MPI_Comm comm;
    int rank;
    FILE *fp; /* rank 0 */
    const char *path;
} job_bcast_source;
cpdit_status job_bcast_source_open(job_bcast_source *s, const char *path, MPI_Comm comm,
                                   cpdit_error *err);
job_byte_source job_bcast_source_reader(job_bcast_source *s);
void job_bcast_source_close(job_bcast_source *s);

/* Broadcast a status and error record from root over comm (collective); returns the status.
 * Every rank leaves with root's err. */
cpdit_status job_bcast_status(MPI_Comm comm, int root, cpdit_status st, cpdit_error *err);
/* Agree on a status (collective): when any rank failed, every rank returns the status and
 * error of the lowest failing rank; else CPDIT_OK. */
cpdit_status job_agree_status(MPI_Comm comm, cpdit_status st, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
