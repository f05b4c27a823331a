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

#define SECONDS_PER_DAY 86400L

/* A whole number of 1-2 digits (or more for the first field) into *v; the rest in *end. */
static int field(const char *s, const char **end, long *v)
{
    char *e = NULL;
    if (*s < '0' || *s > '9')
        return -1;
    *v = strtol(s, &e, 10);
    *end = e;
    return 0;
}

long job_sbatch_time_s(const char *text)
{
    if (!text || !*text)
        return -1;
    if (strcmp(text, "infinite") == 0 || strcmp(text, "unlimited") == 0 ||
        strcmp(text, "UNLIMITED") == 0 || strcmp(text, "INFINITE") == 0)
        return -2;
    long f[3] = {0, 0, 0}, days = 0;
    int n = 0, has_days = 0;
    const char *p = text, *e;
    const char *dash = strchr(text, '-');
    if (dash) {
        if (field(p, &e, &days) || e != dash)
            return -1;
        has_days = 1;
        p = dash + 1;
    }
    while (n < 3) {
        if (field(p, &e, &f[n]))
            return -1;
        n++;
        if (*e == '\0')
            break;
        if (*e != ':')
            return -1;
        p = e + 1;
    }
    if (*e != '\0')
        return -1;
    long s;
    if (has_days) /* D-HH, D-HH:MM, D-HH:MM:SS */
        s = f[0] * 3600 + (n > 1 ? f[1] * 60 : 0) + (n > 2 ? f[2] : 0);
    else if (n == 1) /* MM */
        s = f[0] * 60;
    else if (n == 2) /* MM:SS */
        s = f[0] * 60 + f[1];
    else /* HH:MM:SS */
        s = f[0] * 3600 + f[1] * 60 + f[2];
    return days * SECONDS_PER_DAY + s;
}

/* The script's choices that need checking first. */
static cpdit_status check_options(const job_sbatch_options *o, int lead, cpdit_error *err)
{
    if (o->time) {
        const long t = job_sbatch_time_s(o->time);
        if (t == -1)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, "--time", "'%s': not a Slurm time "
                                   "(MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)", o->time);
        if (t >= 0 && t <= lead)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, "--time", "%s (%ld s) is not longer "
                                   "than the stop signal's lead of %d s (--signal-lead): the job "
                                   "would be told to stop before it starts; give more --time or "
                                   "a shorter --signal-lead", o->time, t, lead);
    }
    if (o->array_throttle > 0 && o->array <= 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "--array", "a throttle %%%d needs an array "
                               "of 2 or more tasks", o->array_throttle);
    const char *binds[] = {o->cpu_bind, o->gpu_bind, o->setup_path};
    for (size_t i = 0; i < sizeof binds / sizeof binds[0]; i++)
        if (binds[i] && (strpbrk(binds[i], "\n\r'\"$`\\ ") != NULL || !binds[i][0]))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, "submit", "'%s': empty, or a space, "
                                   "quote or line break in a binding or file name", binds[i]);
    return CPDIT_OK;
}

/* srun's and mpirun's process placement (see job_sbatch.h). */
static void put_launcher(FILE *f, const job_sbatch_options *o)
{
    const char *cpu = o->cpu_bind ? o->cpu_bind : "cores";
    const char *gpu = o->gpu_bind ? o->gpu_bind : "single:1";
    fprintf(f,
            "\n"
            "# Launcher: srun with PMIx when this cluster has it, else mpirun (it takes the hosts\n"
            "# and slots from the allocation); CPDIT_LAUNCHER=mpirun in the environment of sbatch\n"
            "# forces mpirun. cpdit takes rank, local rank and node from MPI.\n"
            "# Placement: %s%s", strcmp(cpu, "off") ? "each rank on its own cores (srun --cpu-bind="
                                                    : "Slurm's default CPU binding (--cpu-bind off",
            strcmp(cpu, "off") ? cpu : "");
    if (o->gpus_per_node)
        fprintf(f, ", --gpu-bind=%s: one GPU per task", gpu);
    fprintf(f, ");\n"
               "# srun -c gives each task its --cpus-per-task CPUs (Slurm >= 22.05 does not pass\n"
               "# sbatch's --cpus-per-task on to srun: without -c / SRUN_CPUS_PER_TASK all the\n"
               "# threads of a rank would share one CPU). mpirun: --bind-to core with as many\n"
               "# cores per rank (--map-by slot:PE=C) as it has threads; CPDIT_MPIRUN_BIND at job\n"
               "# time replaces these mpirun options (e.g. \"--bind-to none\").\n"
               "CPT=\"${SLURM_CPUS_PER_TASK:-1}\"\n"
               "if [ \"${CPDIT_LAUNCHER:-}\" != mpirun ] && srun --mpi=list 2>&1 | grep -qw pmix; then\n"
               "    LAUNCH=(srun --mpi=pmix --kill-on-bad-exit=1");
    if (o->cpus_per_task)
        fprintf(f, " -c \"$CPT\"");
    if (strcmp(cpu, "off") != 0)
        fprintf(f, " --cpu-bind=%s", cpu);
    if (o->gpus_per_node && strcmp(gpu, "off") != 0)
        fprintf(f, " --gpu-bind=%s", gpu);
    fprintf(f, ")\n"
               "else\n"
               "    if [ -n \"${CPDIT_MPIRUN_BIND:-}\" ]; then\n"
               "        read -r -a BIND <<< \"$CPDIT_MPIRUN_BIND\"\n"
               "    elif [ \"$CPT\" -gt 1 ]; then\n"
               "        BIND=(--bind-to core --map-by \"slot:PE=$CPT\")\n"
               "    else\n"
               "        BIND=(--bind-to core --map-by slot)\n"
               "    fi\n"
               "    LAUNCH=(mpirun \"${BIND[@]}\")\n");
}

/* The #SBATCH part: the header comment, the resources, the stop signal, the logs. */
static void put_sbatch_lines(FILE *f, const job_sbatch_options *o, int tasks, int nodes,
                             int lead, int array)
{
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
    if (o->exclusive)
        fprintf(f, "# Whole nodes: no other job's tasks share them (clean timings, all memory).\n"
                   "#SBATCH --exclusive\n");
    if (array) {
        fprintf(f, "# A job array of %d tasks: task k renders the items whose index is k modulo %d\n"
                   "# (disjoint shares, together the whole manifest; the same split every time)",
                o->array, o->array);
        if (o->array_throttle > 0)
            fprintf(f, ";\n# at most %d of them run at once", o->array_throttle);
        fprintf(f, ".\n#SBATCH --array=0-%d", o->array - 1);
        if (o->array_throttle > 0)
            fprintf(f, "%%%d", o->array_throttle);
        fputc('\n', f);
    }
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

}

/* The stopping machinery: the request and marker files, the grace, requeue() with the
 * --max-requeues cap, the USR1 / TERM trap. */
static void put_stop_section(FILE *f, const job_sbatch_options *o, int lead)
{
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
            "# Self-requeues at most MAX_REQUEUES times (--max-requeues; 0: no cap): past that\n"
            "# a stopped job ends with exit 3; `cpdit status` shows what is left.\n"
            "MAX_REQUEUES=%d\n"
            "requeue() { # WHY: put the job back in the queue; the next run resumes\n"
            "    rm -f \"$STOP_REQUEST\" \"$STOP_MARKER\"\n"
            "    if [ \"$MAX_REQUEUES\" -gt 0 ] && [ \"${SLURM_RESTART_COUNT:-0}\" -ge \"$MAX_REQUEUES\" ]; then\n"
            "        echo \"cpdit-job: $1; not requeueing: restart ${SLURM_RESTART_COUNT:-0} reached --max-requeues $MAX_REQUEUES\"\n"
            "        exit 3\n"
            "    fi\n"
            "    echo \"cpdit-job: $1; requeueing job ${SLURM_JOB_ID}\"\n"
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
            JOB_STOP_REQUEST_PREFIX, JOB_STOP_MARKER_PREFIX, grace,
            o->max_requeues > 0 ? o->max_requeues : 0);
}

/* RUN_ARGS, the threads per rank and the --setup lines: what `cpdit run` gets and the
 * environment it starts in. */
static void put_run_env(FILE *f, const job_sbatch_options *o)
{
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
        fprintf(f, "# Threads per rank: the CPUs of its task; srun takes the same count (srun\n"
                   "# hands -c on to the step only through SRUN_CPUS_PER_TASK since Slurm 22.05).\n"
                   "export CPDIT_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\" "
                   "OMP_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n"
                   "export SRUN_CPUS_PER_TASK=\"${SLURM_CPUS_PER_TASK:-1}\"\n");
    if (o->setup) {
        fprintf(f, "\n# Setup, from %s (run here, before the launcher):\n",
                o->setup_path ? o->setup_path : "--setup");
        const char *p = o->setup;
        while (*p) {
            const char *nl = strchr(p, '\n');
            const size_t k = nl ? (size_t)(nl - p) : strlen(p);
            fprintf(f, "%.*s\n", (int)k, p);
            p += k + (nl ? 1 : 0);
        }
        fprintf(f, "# (end of setup)\n");
    }
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
    cpdit_status cst = check_options(o, lead, err);
    if (cst)
        return cst;

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "submit", "out of memory");

    put_sbatch_lines(f, o, tasks, nodes, lead, array);

    /* the body */
    fprintf(f, "\nset -u\nCPDIT=");
    put_quoted(f, o->cpdit);
    fprintf(f, "\nMANIFEST=");
    put_quoted(f, o->manifest);
    fprintf(f, "\nOUTPUT=");
    put_quoted(f, o->output_dir);
    fprintf(f, "\n\n");
    put_stop_section(f, o, lead);
    put_grid_comment(f, o);
    put_run_env(f, o);
    put_launcher(f, o);
    fprintf(f,
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
