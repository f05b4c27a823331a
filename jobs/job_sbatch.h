/* job_sbatch.h — the Slurm batch script that `cpdit submit` writes (OUTPUT/cpdit-job.sbatch).
 *
 * The script is plain bash with every choice visible and commented:
 *   - #SBATCH resources: --nodes, --ntasks-per-node (one task per GPU with --gpus-per-node,
 *     else the tasks per node asked for, default 1), --cpus-per-task, --time, --partition,
 *     --account, --qos, --array=0-(K-1), and the extra options given after `--`;
 *   - --signal=B:USR1@LEAD: Slurm signals the batch shell LEAD seconds before the time
 *     limit; the trap (USR1 and TERM) creates the stop-request file OUTPUT/.cpdit-stop-request-
 *     $SLURM_JOB_ID (job_slurm.h) and sends USR1 to the launcher (srun and mpirun both pass
 *     USR1 on to the ranks without ending the step); cpdit stops after the current sampler
 *     step and exits 3. The launcher runs under setsid, in a process group of its own: Slurm
 *     signals the batch shell's process group on `scancel --full` (slurmstepd's killpg), and a
 *     launcher signalled with TERM ends the step itself (srun kills it at once; mpirun stops
 *     forwarding USR1 and kills the ranks after its kill wait), while Open MPI's ranks, in
 *     process groups of their own, get nothing. A step still running STOP_GRACE seconds
 *     after the request (LEAD - 2 x the mpirun kill wait - 10 s, at least
 *     JOB_SBATCH_STOP_GRACE_MIN_S; $CPDIT_STOP_GRACE_S at job time overrides it) gets TERM,
 *     so a stop never hangs. A request that comes before the step starts requeues at once;
 *   - --requeue and --open-mode=append logs in the output folder (slurm-%j.out, or
 *     slurm-%A_%a.out for arrays);
 *   - the launcher is chosen when the job starts: `srun --mpi=pmix` when `srun --mpi=list`
 *     names pmix, else `mpirun` (which takes hosts and slots from the allocation), with
 *     OMPI_MCA_odls_base_sigkill_timeout=JOB_SBATCH_MPIRUN_KILL_WAIT_S unless set;
 *   - the grid: given (--dp/--ring/--ulysses), the manifest's, or for parallel: auto the
 *     planner at job start with --topology FILE (from `cpdit submit --topology` or
 *     $CPDIT_TOPOLOGY at submit time), else $CPDIT_TOPOLOGY at job time, else a quick probe;
 *   - after the step: exit 3, or the runner's stop marker OUTPUT/.cpdit-stopped-$SLURM_JOB_ID
 *     (mpirun returns 1, not the ranks' 3, when it was signalled itself), or a stop the trap
 *     recorded with a step killed before it finished (exit other than 0, 2, 4) → echo and
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
#define JOB_SBATCH_MPIRUN_KILL_WAIT_S 10 /* mpirun's TERM-to-KILL wait (odls_base_sigkill_timeout) */
#define JOB_SBATCH_STOP_GRACE_MIN_S 30   /* least seconds a stop may take before the step gets TERM */
#define JOB_STOP_MARKER_PREFIX ".cpdit-stopped" /* + "-JOBID" inside Slurm */
#define JOB_STOP_REQUEST_PREFIX ".cpdit-stop-request" /* + "-JOBID"; written by the script */

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
    const char *weight_format; /* --weight-format passed on to `cpdit run`, or NULL */
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
