/* job_run_internal.h — pieces of the batch runner shared between its files: rank 0's
 * progress display (job_progress.c) and the per-group statistics of the summary table. */
#ifndef CPDIT_JOB_RUN_INTERNAL_H
#define CPDIT_JOB_RUN_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "jobs/job_run.h"
#include "jobs/job_slurm.h"

/* One group's result, sent by every rank to rank 0 at the end (only leaders' count). */
typedef struct job_group_stats {
    long long todo;   /* items this run had to do */
    long long done;
    long long failed;
    long long left;   /* not attempted (stopped) */
    long long stopped;
    long long fatal;  /* a cpdit_status: the group could not go on */
    double seconds;   /* leader's time spent on items */
    double text_s, sample_s, vae_s, write_s; /* leader's phase sums (job_item_times) */
    long long steps;
    long long cache_full, cache_cached; /* forwards (job_item_times.cache_*) */
    long long cfg_partner; /* 1: the second group of a CFG pair (its items are its partner's:
                              not counted again in the totals) */
    double cache_saved_s;
    cpdit_error error; /* when fatal */
} job_group_stats;

/* What expand() hands back. */
typedef struct job_plan {
    job_item *mine; /* this group's items that are not done yet, in index order */
    size_t n_mine, cap_mine;
    uint64_t n_items, already_done; /* n_items: the whole manifest; already_done: share */
    uint64_t n_share;               /* items of this run's share (all without an array) */
    job_resume_stats resume; /* rank 0 */
    int temp_removed;        /* rank 0 */
    off_t index_size;        /* rank 0: the index's size before any group appends */
} job_plan;

struct job_progress;

/* The CFG pair of a run with hooks->render_pair on an even number of groups (job_run_group.c):
 * groups 2j and 2j + 1 render the same items, the first the prompt's branch (and writes), the
 * second the negative prompt's. NULL comms without pairs. */
typedef struct job_cfg_pair {
    int on;
    int role;            /* 0: the writing group, 1: its partner (dp_index % 2) */
    MPI_Comm both;       /* the pair's 2 x cp_size ranks */
    struct cpdit_comm *cfg; /* this rank and its partner of the same CP coordinates */
} job_cfg_pair;

/* Pairs when hooks ask for them and the grid has an even number >= 2 of groups, without
 * lockstep rounds; collective over world. p->on 0 otherwise. */
cpdit_status job_cfg_pair_open(const job_runner_hooks *hooks, const cp_grid *g, MPI_Comm world,
                               job_cfg_pair *p, cpdit_error *err);
void job_cfg_pair_close(job_cfg_pair *p);

/* Render every remaining item of this group (job_run_group.c). */
void job_run_group(const manifest *m, const job_runner_hooks *hooks, MPI_Comm world,
                   cp_grid *g, const job_slurm_info *sl, const char *node,
                   const job_plan *plan, const job_cfg_pair *pair, const char *index_path,
                   struct job_progress *progress, job_group_stats *gs);

/* Rank 0's progress: it counts the lines other groups append to the index files (the index
 * is the one place every group writes), so it needs no messages from them. The files are the
 * run's index and the node parts that group leaders on other nodes append to (job_index.h). */
typedef struct job_progress_file {
    char *path;
    off_t offset;     /* bytes already counted */
} job_progress_file;

typedef struct job_progress {
    FILE *log;
    int tty;          /* a live line (\r) instead of periodic lines */
    double interval;  /* seconds between periodic lines */
    double t_start, t_last;
    job_progress_file *files; /* [0]: the run's index */
    int n_files;
    uint64_t todo;    /* items this run has to do, all groups */
    uint64_t finished, failed;
    int line_open;    /* a live line is on the terminal */
} job_progress;

double job_now(void); /* monotonic seconds */
/* Count index_path's lines from byte offset on. */
void job_progress_init(job_progress *p, FILE *log, const char *index_path, off_t offset,
                       uint64_t todo, double interval);
/* Count path's lines too (from its start; a node part of this run). */
void job_progress_add_file(job_progress *p, const char *path);
/* Count new index lines; print when due (force: print now). */
void job_progress_poll(job_progress *p, int force);
void job_progress_free(job_progress *p);

/* The summary table (rank 0): one row per group, a total row, and what happened. */
/* Add an item's measured phases (fields >= 0) to the group's sums. */
void job_times_add(job_group_stats *gs, const job_item_times *t);
/* --verbose: one plain line for a finished item: where its time went. result: 0 done,
 * 1 failed, -1 index not written. */
void job_print_item_times(FILE *log, const job_item *x, const job_item_times *t,
                          double seconds, int result);
void job_print_summary(FILE *log, const manifest *m, const job_group_stats *groups, int dp,
                       int cp_size, const job_summary *s, const char *index_path,
                       const char *grid_reason);

/* A video item on its group (job_video.c). The leader's writer, open from before the render
 * until the record step. */
struct cpdit_video_writer;
typedef struct job_video {
    struct cpdit_video_writer *w; /* the leader, while the clip is being written */
    int failed;                   /* a frame could not be written: error says why */
    cpdit_error error;
} job_video;
/* On every rank of the group: the leader opens the writer of x's file (the group agrees that
 * it did), then hooks->render_video runs with a sink that feeds the leader's writer. On a
 * failure the writer stays for job_video_record / job_video_abort to drop. */
cpdit_status job_video_render(const manifest *m, const job_runner_hooks *hooks,
                              const job_item *x, const cp_grid *g, const job_grid_info *gi,
                              job_video *v, job_item_times *times, cpdit_error *err);
/* Drop the clip (its temporary file or folder); fine when none is open. */
void job_video_abort(job_video *v);
/* The leader, as leader_record for a PNG: finish the clip (rename into place) unless failure,
 * then append the index line ("failed" with the reason when either failed). Returns 0 done,
 * 1 failed, -1 when the index line could not be appended (*fatal set). */
int job_video_record(const manifest *m, const job_item *x, const job_grid_info *gi,
                     job_video *v, const char *failure, double t0, job_item_times *times,
                     const char *index_path, cpdit_status *fatal, cpdit_error *fatal_err);

#endif
