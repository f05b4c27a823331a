/* job_sbatch.h — the Slurm batch script that `cpdit submit` writes (OUTPUT/cpdit-job.sbatch).
 *
 * The script is plain bash with every choice visible and commented:
 *   - #SBATCH resources: --nodes, --ntasks-per-node (one task per GPU with --gpus-per-node,
 *     else the tasks per node asked for, default 1), --cpus-per-task, --time, --partition,
 *     --account, --qos, --array=0-(K-1), and the extra options given after `--`;
 *   - --signal=B:USR1@LEAD: Slurm signals the batch shell LEAD seconds before the time
 *     limit; a trap forwards the signal to the job step (srun and mpirun both forward USR1
 *     to the ranks), cpdit stops after the current sampler step and exits 3;
 *   - --requeue and --open-mode=append logs in the output folder (slurm-%j.out, or
 *     slurm-%A_%a.out for arrays);
 *   - the launcher is chosen when the job starts: `srun --mpi=pmix` when `srun --mpi=list`
 *     names pmix, else `mpirun` (which takes hosts and slots from the allocation);
 *   - after the step: exit 3, or the runner's stop marker OUTPUT/.cpdit-stopped-$SLURM_JOB_ID
 *     (needed because mpirun returns 1, not the ranks' 3, when it was signalled), → echo and
 *     `scontrol requeue $SLURM_JOB_ID`; otherwise the script exits with the step's status.
 * The text depends only on the options (no dates, no host names), so it can be compared
 * with golden files.
 */
#ifndef CPDIT_JOB_SBATCH_H
#define CPDIT_JOB_SBATCH_H

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define JOB_SBATCH_FILE_NAME "cpdit-job.sbatch"
#define JOB_SBATCH_SIGNAL_LEAD_S 120 /* seconds of warning before the time limit */
#define JOB_STOP_MARKER_PREFIX ".cpdit-stopped" /* + "-JOBID" inside Slurm */

typedef struct job_sbatch_options {
    const char *cpdit;      /* absolute path of the cpdit program */
    const char *manifest;   /* absolute path of the manifest */
    const char *output_dir; /* absolute path of the output folder */
    const char *version;    /* cpdit's version, for the header comment */
    const char *job_name;   /* NULL: "cpdit" */
    int nodes;              /* 0: not given (Slurm's default, 1) */
    int ntasks_per_node;    /* 0: GPUs per node with GPUs, else 1 */
    int gpus_per_node;      /* 0: CPU job */
    int cpus_per_task;      /* 0: not given */
    const char *time, *partition, *account, *qos; /* NULL: not given */
    int array;              /* tasks of a job array; <= 1: no array */
    const char *topology;   /* --topology FILE, or NULL */
    int dp, ring, ulysses;  /* grid given to submit; 0: the manifest's */
    int anything;           /* --anything given to submit */
    /* the manifest's parallel: settings, for the comment */
    int manifest_auto, manifest_dp, manifest_ring, manifest_ulysses, manifest_anything;
    int signal_lead_s;      /* <= 0: JOB_SBATCH_SIGNAL_LEAD_S */
    char *const *extra;     /* extra sbatch options (after `--`) */
    int n_extra;
} job_sbatch_options;

/* The script as a new string (caller frees). Errors: CPDIT_ERR_INPUT for options that
 * contradict (--ntasks-per-node other than --gpus-per-node, a value with a newline). */
cpdit_status job_sbatch_script(const job_sbatch_options *o, char **out, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
