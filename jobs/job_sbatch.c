/* job_sbatch.c — the text of the sbatch script of `cpdit submit` (see job_sbatch.h). */
#include "jobs/job_sbatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s as one shell word: '...' with ' written as '\'' */
static void put_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    }
    fputc('\'', f);
}

static int has_newline(const char *s) { return s && strpbrk(s, "\n\r") != NULL; }

static void put_grid_comment(FILE *f, const job_sbatch_options *o)
{
    int planned = 0; /* the grid is left to cpdit's planner at job start */
    if (o->dp || o->ring || o->ulysses) {
        fprintf(f, "# Grid: given to `cpdit submit`:");
        if (o->dp)
            fprintf(f, " dp %d", o->dp);
        fprintf(f, " ring %d x ulysses %d per group%s (overrides the manifest's parallel:).\n",
                o->ring ? o->ring : 1, o->ulysses ? o->ulysses : 1,
                o->anything ? ", uneven splits allowed" : "");
    } else if (!o->manifest_auto) {
        fprintf(f, "# Grid: the manifest's parallel: ");
        if (o->manifest_dp)
            fprintf(f, "dp %d x ", o->manifest_dp);
        fprintf(f, "ring %d x ulysses %d per group%s%s.\n", o->manifest_ring,
                o->manifest_ulysses, o->manifest_dp ? "" : ", dp = the rest of the ranks",
                o->manifest_anything ? ", uneven splits allowed" : "");
    } else {
        planned = 1;
        if (o->topology)
            fprintf(f, "# Grid: the manifest says parallel: auto. cpdit plans the grid (dp x ring x\n"
                       "# ulysses and the attention variant) at job start from the topology file\n"
                       "# below (`cpdit probe`, `cpdit tune`): tuned winners first, else the cost\n"
                       "# model. The summary and every index line say which grid and why.\n");
        else
            fprintf(f, "# Grid: the manifest says parallel: auto and no topology file was given to\n"
                       "# `cpdit submit` (--topology, $CPDIT_TOPOLOGY). At job start cpdit takes\n"
                       "# $CPDIT_TOPOLOGY from the job's environment if set, else runs a quick probe\n"
                       "# over every rank (a few seconds) and plans on it; if the probe fails, every\n"
                       "# rank runs data-parallel. The summary and every index line say which grid\n"
                       "# and why. Pass --topology FILE to `cpdit submit` to skip the probe.\n");
    }
    if (o->topology && !planned)
        fprintf(f, "# --topology was given but the grid is fixed above, so it is not passed on.\n");
}

cpdit_status job_sbatch_script(const job_sbatch_options *o, char **out, cpdit_error *err)
{
    *out = NULL;
    const char *texts[] = {o->cpdit, o->manifest, o->output_dir, o->job_name, o->time,
                           o->partition, o->account, o->qos, o->topology, o->weight_format};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        if (has_newline(texts[i]))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, "submit", "a value with a line break: "
                                   "'%s'", texts[i]);
    for (int i = 0; i < o->n_extra; i++)
        if (has_newline(o->extra[i]))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, "submit", "an extra sbatch option with "
                                   "a line break: '%s'", o->extra[i]);
    if (o->gpus_per_node && o->ntasks_per_node && o->ntasks_per_node != o->gpus_per_node)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "submit", "--ntasks-per-node %d with "
                               "--gpus-per-node %d: cpdit runs one task per GPU (leave "
                               "--ntasks-per-node out)", o->ntasks_per_node, o->gpus_per_node);
    int tasks = o->gpus_per_node ? o->gpus_per_node : o->ntasks_per_node ? o->ntasks_per_node : 1;
    int nodes = o->nodes > 0 ? o->nodes : 1;
    int lead = o->signal_lead_s > 0 ? o->signal_lead_s : JOB_SBATCH_SIGNAL_LEAD_S;
    int array = o->array > 1;

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "submit", "out of memory");

    fprintf(f, "#!/bin/bash\n"
               "# %s — a Slurm batch script written by `cpdit submit` (cpdit %s).\n"
               "#   manifest: %s\n"
               "#   output:   %s\n"
               "# Submit it again with `sbatch %s/%s` (or run `cpdit submit` again); watch it with\n"
               "# `cpdit status %s`. Every run resumes: images already complete are skipped.\n"
               "#\n",
            JOB_SBATCH_FILE_NAME, o->version, o->manifest, o->output_dir, o->output_dir,
            JOB_SBATCH_FILE_NAME, o->output_dir);
    /* resources */
    if (o->gpus_per_node)
        fprintf(f, "# Resources: %d node%s x %d GPU%s, one task (MPI rank) per GPU = %d rank%s;\n"
                   "# each rank takes the GPU of its local rank on the node (from MPI).\n",
                nodes, nodes == 1 ? "" : "s", o->gpus_per_node, o->gpus_per_node == 1 ? "" : "s",
                nodes * tasks, nodes * tasks == 1 ? "" : "s");
    else
        fprintf(f, "# Resources: %d node%s x %d task%s (MPI ranks) on CPUs = %d rank%s.\n", nodes,
                nodes == 1 ? "" : "s", tasks, tasks == 1 ? "" : "s", nodes * tasks,
                nodes * tasks == 1 ? "" : "s");
    fprintf(f, "#SBATCH --job-name=%s\n", o->job_name ? o->job_name : "cpdit");
    if (o->nodes > 0)
        fprintf(f, "#SBATCH --nodes=%d\n", o->nodes);
    fprintf(f, "#SBATCH --ntasks-per-node=%d\n", tasks);
    if (o->gpus_per_node)
        fprintf(f, "#SBATCH --gpus-per-node=%d\n", o->gpus_per_node);
    if (o->cpus_per_task)
        fprintf(f, "#SBATCH --cpus-per-task=%d\n", o->cpus_per_task);
    if (o->time)
        fprintf(f, "#SBATCH --time=%s\n", o->time);
    if (o->partition)
        fprintf(f, "#SBATCH --partition=%s\n", o->partition);
    if (o->account)
        fprintf(f, "#SBATCH --account=%s\n", o->account);
    if (o->qos)
        fprintf(f, "#SBATCH --qos=%s\n", o->qos);
    if (array)
        fprintf(f, "# A job array of %d tasks: task k renders the items whose index is k modulo %d\n"
                   "# (disjoint shares, together the whole manifest; the same split every time).\n"
                   "#SBATCH --array=0-%d\n", o->array, o->array, o->array - 1);
    fprintf(f, "# Stop cleanly before the time limit: Slurm sends USR1 to this shell %d s before\n"
               "# the end; the trap below forwards it to the job step; cpdit finishes the current\n"
               "# sampler step, writes its stop marker and exits 3; this script then requeues.\n"
               "#SBATCH --signal=B:USR1@%d\n"
               "#SBATCH --requeue\n"
               "# Logs in the output folder, appended to across requeues.\n"
               "#SBATCH --open-mode=append\n"
               "#SBATCH --output=%s/slurm-%s.out\n",
            lead, lead, o->output_dir, array ? "%A_%a" : "%j");
    if (o->n_extra > 0) {
        fprintf(f, "# Given to `cpdit submit` after --:\n");
        for (int i = 0; i < o->n_extra;) { /* an option and the words that follow it */
            fprintf(f, "#SBATCH %s", o->extra[i++]);
            while (i < o->n_extra && o->extra[i][0] != '-')
                fprintf(f, " %s", o->extra[i++]);
            fputc('\n', f);
        }
    }

    /* the body */
    fprintf(f, "\nset -u\nCPDIT=");
    put_quoted(f, o->cpdit);
    fprintf(f, "\nMANIFEST=");
    put_quoted(f, o->manifest);
    fprintf(f, "\nOUTPUT=");
    put_quoted(f, o->output_dir);
    fprintf(f, "\n\n");
    /* the grace: the warning's lead less mpirun's TERM and KILL waits and 10 s to requeue */
    int grace = lead - 2 * JOB_SBATCH_MPIRUN_KILL_WAIT_S - 10;
    if (grace < JOB_SBATCH_STOP_GRACE_MIN_S)
        grace = JOB_SBATCH_STOP_GRACE_MIN_S;
    fprintf(f,
            "# Stopping. Slurm signals this shell: USR1 before the time limit (above; this shell\n"
            "# only), TERM on `scancel --full` (this shell's process group) or at the time limit.\n"
            "# The launcher runs in a session of its own (setsid below), so a signal sent to this\n"
            "# shell's process group reaches this shell only: on TERM srun kills the step at once,\n"
            "# and mpirun no longer passes USR1 on and kills the ranks after its kill wait (Open\n"
            "# MPI's ranks have process groups of their own: Slurm's signal never reaches them).\n"
            "# The trap records the request in STOP_REQUEST first (cpdit's group leaders look for\n"
            "# it at every sampler step, at most once a second), then sends USR1 to the launcher,\n"
            "# which passes it on to every rank at once. cpdit finishes the current sampler step\n"
            "# (or the image being written), writes STOP_MARKER and exits 3. A step still running\n"
            "# STOP_GRACE seconds after the request gets TERM (the launcher then ends the ranks;\n"
            "# every finished image is in the index): a stop never hangs. Slurm's own end of the\n"
            "# job (scancel without --full/--signal, the time limit) signals every process of the\n"
            "# job, the ranks too, whatever their session.\n"
            "STOP_REQUEST=\"$OUTPUT/%s-${SLURM_JOB_ID}\"\n"
            "STOP_MARKER=\"$OUTPUT/%s-${SLURM_JOB_ID}\"\n"
            "STOP_GRACE=\"${CPDIT_STOP_GRACE_S:-%d}\"\n"
            "rm -f \"$STOP_REQUEST\" \"$STOP_MARKER\"\n"
            "requeue() { # WHY: put the job back in the queue; the next run resumes\n"
            "    echo \"cpdit-job: $1; requeueing job ${SLURM_JOB_ID}\"\n"
            "    rm -f \"$STOP_REQUEST\" \"$STOP_MARKER\"\n"
            "    scontrol requeue \"${SLURM_JOB_ID}\"\n"
            "    exit 0\n"
            "}\n"
            "\n"
            "STEP= STOPPED= STOP_DEADLINE=\n"
            "forward() { # SIG: ask the job step to stop\n"
            "    echo \"cpdit-job: SIG$1 received, asking the job step to stop (USR1)\"\n"
            "    : > \"$STOP_REQUEST\" 2>/dev/null\n"
            "    [ -n \"$STEP\" ] && kill -s USR1 \"$STEP\" 2>/dev/null\n"
            "    [ -z \"$STOPPED\" ] && STOP_DEADLINE=$((SECONDS + STOP_GRACE))\n"
            "    STOPPED=1\n"
            "}\n"
            "trap 'forward USR1' USR1\n"
            "trap 'forward TERM' TERM\n"
            "\n",
            JOB_STOP_REQUEST_PREFIX, JOB_STOP_MARKER_PREFIX, grace);
    put_grid_comment(f, o);
    fprintf(f, "RUN_ARGS=(--output \"$OUTPUT\"");
    if (o->dp)
        fprintf(f, " --dp %d", o->dp);
    if (o->ring)
        fprintf(f, " --ring %d", o->ring);
    if (o->ulysses)
        fprintf(f, " --ulysses %d", o->ulysses);
    if (o->anything)
        fprintf(f, " --anything");
    if (o->weight_format) {
        fprintf(f, " --weight-format ");
        put_quoted(f, o->weight_format);
    }
    if (o->topology && !o->dp && !o->ring && !o->ulysses && o->manifest_auto) {
        fprintf(f, " --topology ");
        put_quoted(f, o->topology);
    }
    fprintf(f, ")\n");
    if (o->cpus_per_task)
        fprintf(f, "# Threads per rank: the CPUs of its task (srun hands -c on to the step only\n"
                   "# through SRUN_CPUS_PER_TASK since Slurm 22.05).\n"
                   "export CPDIT_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\" "
                   "SRUN_CPUS_PER_TASK=\"${SLURM_CPUS_PER_TASK:-1}\" "
                   "OMP_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n");
    fprintf(f,
            "\n"
            "# Launcher: srun with PMIx when this cluster has it, else mpirun (it takes the hosts\n"
            "# and slots from the allocation); CPDIT_LAUNCHER=mpirun in the environment of sbatch\n"
            "# forces mpirun. cpdit takes rank, local rank and node from MPI.\n"
            "if [ \"${CPDIT_LAUNCHER:-}\" != mpirun ] && srun --mpi=list 2>&1 | grep -qw pmix; then\n"
            "    LAUNCH=(srun --mpi=pmix --kill-on-bad-exit=1)\n"
            "else\n"
            "    LAUNCH=(mpirun --bind-to none)\n"
            "    # Once signalled itself (the time limit reaches every process of the job), mpirun\n"
            "    # waits this long before it passes TERM to the ranks and as long again before\n"
            "    # KILL; it also waits twice this long when a rank exits non-zero (3: stopped).\n"
            "    # Open MPI's default, 1 s, can be shorter than one sampler step; the ranks have\n"
            "    # Slurm's TERM already then and stop cleanly meanwhile.\n"
            "    export OMPI_MCA_odls_base_sigkill_timeout=\"${OMPI_MCA_odls_base_sigkill_timeout:-%d}\"\n"
            "fi\n"
            "\n"
            "[ -n \"$STOPPED\" ] && requeue \"stopped before the job step started\"\n"
            "echo \"cpdit-job: job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}) "
            "starts: ${LAUNCH[*]} $CPDIT run $MANIFEST ${RUN_ARGS[*]}\"\n"
            "# setsid: the launcher in its own session and process group (see Stopping above)\n"
            "setsid \"${LAUNCH[@]}\" \"$CPDIT\" run \"$MANIFEST\" \"${RUN_ARGS[@]}\" &\n"
            "STEP=$!\n"
            "while :; do\n"
            "    if [ -n \"$STOPPED\" ]; then # asked to stop: end the step if it takes too long\n"
            "        while kill -0 \"$STEP\" 2>/dev/null && [ $SECONDS -lt $STOP_DEADLINE ]; do sleep 1; done\n"
            "        if kill -0 \"$STEP\" 2>/dev/null; then\n"
            "            echo \"cpdit-job: the job step did not stop within $STOP_GRACE s; ending it (TERM)\"\n"
            "            kill -s TERM \"$STEP\" 2>/dev/null\n"
            "            STOP_DEADLINE=$((SECONDS + 86400))\n"
            "        fi\n"
            "    fi\n"
            "    wait \"$STEP\"\n"
            "    rc=$?\n"
            "    # wait returns early (status > 128) when a trapped signal arrives: wait again;\n"
            "    # if the step ended meanwhile, one more wait gives its own status\n"
            "    if [ $rc -gt 128 ]; then\n"
            "        if kill -0 \"$STEP\" 2>/dev/null; then continue; fi\n"
            "        wait \"$STEP\" 2>/dev/null\n"
            "        r=$?\n"
            "        [ $r -ne 127 ] && rc=$r\n"
            "    fi\n"
            "    break\n"
            "done\n"
            "\n"
            "if [ $rc -eq 3 ] || [ -e \"$STOP_MARKER\" ]; then\n"
            "    requeue \"stopped early (exit $rc)\"\n"
            "fi\n"
            "# Asked to stop, but the step ended without the marker (its ranks were ended before\n"
            "# they finished stopping: past STOP_GRACE, or by Slurm itself): requeue too; every\n"
            "# finished image is in the index, so the next run resumes from there.\n"
            "if [ -n \"$STOPPED\" ] && [ $rc -ne 0 ] && [ $rc -ne 2 ] && [ $rc -ne 4 ]; then\n"
            "    requeue \"stopped by a signal, the job step killed before it could finish (exit $rc)\"\n"
            "fi\n"
            "rm -f \"$STOP_REQUEST\"\n"
            "echo \"cpdit-job: cpdit exited with $rc (0 all done, 2 bad input or output folder in use,\"\n"
            "echo \"cpdit-job: 4 some items failed: see $OUTPUT/index*.jsonl)\"\n"
            "exit $rc\n",
            JOB_SBATCH_MPIRUN_KILL_WAIT_S);
    if (fclose(f) != 0 || !text) {
        free(text);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "submit", "out of memory");
    }
    *out = text;
    return CPDIT_OK;
}
