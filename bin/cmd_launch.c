/* cmd_launch.c — `cpdit launch COMMAND...`: run a launcher (mpirun -np N cpdit run MANIFEST
 * ...) so that a stop request ends it with exit 3, "stopped, resumable".
 *
 * A plain mpirun that gets SIGTERM forwards it to the ranks and, after its kill timeout,
 * kills them; it then exits 1 whatever the ranks did, although cpdit stopped cleanly and
 * wrote its stop marker. So launch runs COMMAND in a process group of its own (a TERM to
 * launch's group, as `kill -TERM -PGID`, Ctrl-C or a batch system sends it, does not reach
 * mpirun) and turns the first TERM, INT, HUP or USR1 it gets into one SIGUSR1 to COMMAND:
 * mpirun passes USR1 on to every rank and does not kill them; cpdit stops after the current
 * sampler step (the stop reaches every rank), writes its stop marker and exits 3, and mpirun
 * with it. A second such signal is passed on as SIGTERM to COMMAND's group (stop now).
 * Exit status: COMMAND's; 128 + N when it died of signal N; and 3 when the run's stop marker
 * (OUTPUT/.cpdit-stopped, -JOBID inside Slurm) appeared or changed while COMMAND ran, so a
 * launcher that reports a stopped run as a failure still reads "stopped, resumable". The
 * output folder is the one of COMMAND's `run MANIFEST [--output DIR]`.
 */
#include "bin/cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jobs/job_index.h"
#include "jobs/job_run.h"
#include "jobs/job_sbatch.h"
#include "jobs/job_slurm.h"
#include "yaml/manifest.h"

#define SUB "launch"
#define EXIT_SIGNAL_BASE 128 /* a child killed by signal N: 128 + N, as shells report it */
#define EXEC_FAILED 127      /* COMMAND could not be started, as shells report it */

static volatile sig_atomic_t stops_seen = 0;
static volatile sig_atomic_t child_done = 0;

static void on_stop(int sig)
{
    (void)sig;
    stops_seen++;
}

static void on_child(int sig)
{
    (void)sig;
    child_done = 1;
}

/* The output folder of the command's `run MANIFEST [--output DIR]` (caller frees), or NULL
 * when the command runs no manifest. */
static char *output_of(char **cmd)
{
    int i = 0;
    while (cmd[i] && strcmp(cmd[i], "run") != 0)
        i++;
    if (!cmd[i])
        return NULL;
    const char *mpath = NULL, *out = NULL;
    for (int k = i + 1; cmd[k]; k++) {
        if (!strcmp(cmd[k], "--output") && cmd[k + 1])
            out = cmd[++k];
        else if (!strncmp(cmd[k], "--output=", strlen("--output=")))
            out = cmd[k] + strlen("--output=");
        else if (cmd[k][0] != '-' && !mpath && (k == i + 1 || cmd[k - 1][0] != '-'))
            mpath = cmd[k];
    }
    if (out)
        return strdup(out);
    if (!mpath)
        return NULL;
    manifest *m = NULL;
    cpdit_error err;
    char *dir = NULL;
    if (manifest_load(mpath, 0, &m, &err) == CPDIT_OK)
        dir = strdup(m->output_dir);
    manifest_free(m);
    return dir;
}

/* The stop marker's modification time in ns since the epoch, 0 when there is none. */
static long long marker_stamp(const char *marker)
{
    struct stat sb;
    if (!marker || stat(marker, &sb) != 0)
        return 0;
    return (long long)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
}

static char *marker_path(const char *dir)
{
    if (!dir)
        return NULL;
    job_slurm_info sl;
    job_slurm_info_from_env(&sl);
    char name[128];
    job_slurm_stop_marker_name(&sl, name, sizeof name);
    return job_path_join(dir, name);
}

/* Start cmd in a process group of its own with the signals launch blocked unblocked again. */
static pid_t start_child(char **cmd, const sigset_t *orig)
{
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        sigprocmask(SIG_SETMASK, orig, NULL);
        execvp(cmd[0], cmd);
        fprintf(stderr, "cpdit: %s: cannot run %s: %s\n", SUB, cmd[0], strerror(errno));
        _exit(EXEC_FAILED);
    }
    if (pid > 0)
        setpgid(pid, pid); /* also here: no race with the first forwarded signal */
    return pid;
}

/* Wait for the child, passing the first stop signal on as USR1 and the next as TERM. */
static int wait_child(pid_t pid, const sigset_t *orig)
{
    int forwarded = 0, ws = 0;
    for (;;) {
        while (!child_done && stops_seen == forwarded)
            sigsuspend(orig); /* the signals are blocked outside it: none is missed */
        if (stops_seen > forwarded) {
            forwarded = stops_seen;
            if (forwarded == 1) {
                fprintf(stderr, "cpdit: %s: stop requested: SIGUSR1 to %ld (the ranks stop "
                                "after the current step; again to end them now)\n",
                        SUB, (long)pid);
                kill(pid, SIGUSR1);
            } else {
                fprintf(stderr, "cpdit: %s: second stop request: SIGTERM to the launcher\n",
                        SUB);
                kill(-pid, SIGTERM);
            }
        }
        if (child_done) {
            child_done = 0;
            pid_t w = waitpid(pid, &ws, WNOHANG);
            if (w == pid)
                break;
            if (w < 0 && errno != EINTR)
                return EXEC_FAILED;
        }
    }
    return WIFEXITED(ws) ? WEXITSTATUS(ws)
                         : WIFSIGNALED(ws) ? EXIT_SIGNAL_BASE + WTERMSIG(ws) : 1;
}

int cmd_launch(int argc, char **argv)
{
    char **cmd = argv + 1;
    if (argc > 1 && !strcmp(argv[1], "--"))
        cmd++;
    if (!cmd[0])
        return cli_usage_error(SUB, "missing the command to run (e.g. mpirun -np 4 cpdit run "
                                    "MANIFEST)");
    char *dir = output_of(cmd);
    char *marker = marker_path(dir);
    const long long before = marker_stamp(marker);

    sigset_t block, orig;
    sigemptyset(&block);
    int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaddset(&block, sigs[i]);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, &orig);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);

    pid_t pid = start_child(cmd, &orig);
    int code;
    if (pid < 0) {
        fprintf(stderr, "cpdit: %s: fork: %s\n", SUB, strerror(errno));
        code = CLI_EXIT_RUNTIME;
    } else {
        code = wait_child(pid, &orig);
    }
    const long long after = marker_stamp(marker);
    if (pid > 0 && code != JOB_EXIT_REQUEUE && after != 0 && after != before) {
        fprintf(stderr, "cpdit: %s: %s exited with %d, but the run stopped cleanly (stop "
                        "marker %s): exit %d, resumable\n",
                SUB, cmd[0], code, marker, JOB_EXIT_REQUEUE);
        code = JOB_EXIT_REQUEUE;
    }
    free(marker);
    free(dir);
    return code;
}
