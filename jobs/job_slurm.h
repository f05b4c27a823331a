/* job_slurm.h — what a batch run takes from Slurm, and the files that keep two runs from
 * writing the same output folder at once.
 *
 * SLURM ENVIRONMENT (read on world rank 0 and broadcast; rank, local rank and node come from
 * MPI, never from SLURM_PROCID, which is wrong under mpirun): SLURM_JOB_ID,
 * SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT and
 * SLURM_RESTART_COUNT. Every index line of a run inside Slurm records them
 * ("slurm": {"job_id", "array_job_id", "array_task_id", "array_task_count", "restart_count",
 * "node"}; node = the group leader's MPI processor name).
 *
 * ARRAY SHARES. A job array of K tasks: task k (= SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN)
 * renders the items whose index is k modulo K — disjoint, together the whole manifest, the
 * same split for the same manifest. Inside a task, item i goes to dp group (i div K) mod dp.
 *
 * FILES IN THE OUTPUT FOLDER (NAME = "" for a whole run, ".task-k-of-K" for an array task):
 *   index.jsonl / index.task-k-of-K.jsonl   the index lines of that run (one writer per
 *        file across array tasks; job_index.h). Readers (resume, `cpdit status`) take the
 *        union of every index*.jsonl; resume re-makes a line for a complete PNG only when no
 *        index file has one. Group leaders on other nodes than world rank 0 append to node
 *        parts of it, merged by the next run (job_index.h, NODE PARTS).
 *   .cpdit-lock NAME   the lock (below).
 *   .cpdit-stopped-JOBID (.cpdit-stopped outside Slurm)   the stop marker: written when a
 *        stop signal ended the run early, removed when the next run of that job starts. The
 *        sbatch script requeues on it as well as on exit 3 (mpirun exits 1 when signalled).
 *   .cpdit-stop-request-JOBID (inside Slurm only)   the sbatch script's record of a stop
 *        signal: its trap creates it before passing the signal on, and removes it before the
 *        step starts and after it ends. Group leaders watch it (job_stop_watch_file): a
 *        signal that came before cpdit's handlers were installed is not lost.
 *   .cpdit-run.json   {"manifest": ABSOLUTE PATH, "array_task_count": K}: what `cpdit
 *        status OUTPUT` needs to count the items.
 *
 * THE LOCK. World rank 0 creates a unique file beside the lock, writes "host pid job_id
 * restart_count time" into it and link()s it to the lock name (atomic on NFS too; a
 * link that reports failure but raised the link count to 2 counts as success). A thread
 * refreshes the lock's time stamp every JOB_LOCK_REFRESH_S seconds. A lock is stale when it
 * has not been refreshed for JOB_LOCK_STALE_S seconds, when its process is gone (same host),
 * or when it belongs to an earlier run of the same Slurm job (a requeue); a stale lock is
 * taken over. A whole run conflicts with every live lock; an array task conflicts with the
 * whole-run lock and with task locks of another task count (overlapping shares). A conflict
 * is CPDIT_ERR_INPUT (exit 2) naming the holder: host, pid, job id, age.
 */
#ifndef CPDIT_JOB_SLURM_H
#define CPDIT_JOB_SLURM_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define JOB_LOCK_REFRESH_S 10 /* seconds between time-stamp refreshes */
#define JOB_LOCK_STALE_S 60   /* a lock older than this (not refreshed) is stale */
#define JOB_LOCK_PREFIX ".cpdit-lock"
#define JOB_RUN_RECORD_NAME ".cpdit-run.json"
#define JOB_SLURM_ID_MAX 32
/* The most array tasks a run record may name: more tasks than MANIFEST_ITEMS_MAX items
 * (yaml/manifest.h) would leave tasks without work; a larger count is a corrupt record. */
#define JOB_ARRAY_TASKS_MAX 1000000

typedef struct job_slurm_info {
    char job_id[JOB_SLURM_ID_MAX];       /* "" outside Slurm */
    char array_job_id[JOB_SLURM_ID_MAX]; /* "" when not an array */
    long long array_task_id;             /* -1: none */
    long long array_task_count;          /* 0: none */
    long long restart_count;             /* -1: none */
    int share, shares;                   /* this run's share k of K (K = 1: all items) */
} job_slurm_info;

/* Fill s from the environment (see above). */
void job_slurm_info_from_env(job_slurm_info *s);

/* 1 when item index belongs to s's share. */
int job_slurm_in_share(const job_slurm_info *s, uint64_t index);

/* The file names of this run (see above), into out (size bytes). */
void job_slurm_index_name(const job_slurm_info *s, char *out, size_t size);
void job_slurm_stop_marker_name(const job_slurm_info *s, char *out, size_t size);
/* The stop-request file's name; "" outside Slurm (no job id): nothing is watched. */
void job_slurm_stop_request_name(const job_slurm_info *s, char *out, size_t size);

/* ---------------------------------------------------------------- the lock (job_lock.c) */
typedef struct job_lock job_lock;

/* Take the output folder's lock for s's share (see above). Errors: CPDIT_ERR_INPUT naming
 * the holder; CPDIT_ERR_RUNTIME when the folder cannot be written. */
cpdit_status job_lock_acquire(const char *dir, const job_slurm_info *s, job_lock **out,
                              cpdit_error *err);
/* Stop refreshing and remove the lock (NULL is fine). */
void job_lock_release(job_lock *l);

/* What `cpdit status` shows of the lock file at path, judged as a starting run would judge
 * it (age, host + pid, Slurm restart count): 1 live, 0 stale (its holder is gone), -1 not
 * readable (or not a regular file). line gets its first line ("host=... pid=..."). */
int job_lock_is_live(const char *path, char *line, size_t size);

#ifdef __cplusplus
}
#endif
#endif
