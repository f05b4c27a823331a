/* job_signal.c — the stop flag: SIGUSR1 / SIGTERM set it, the runner and the sampler poll it
 * (see job_run.h). The handler only stores to volatile sig_atomic_t variables, which is all a
 * signal handler may safely do. A watched stop-request file (the sbatch script's record of a
 * signal, which survives a signal that came before the handler was installed) sets the flag
 * too; it is looked at no more often than JOB_STOP_FILE_POLL_S. A test hold point
 * (CPDIT_TEST_HOLD) lets tests signal a run at a chosen moment. While job_run runs, a stop
 * one rank sees is relayed to every other rank (job_stop_relay_begin): a point-to-point
 * message on a duplicate of the world, tested on every poll. */
#include "jobs/job_run.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/cp/comm.h"

#define JOB_STOP_FILE_POLL_S 1.0   /* seconds between looks at the stop-request file */
#define TEST_HOLD_POLL_US 20000    /* microseconds between looks at the hold file */
#define TEST_HOLD_MAX_S 120.0      /* a hold never lasts longer than this */

static volatile sig_atomic_t stop_flag = 0;
static volatile sig_atomic_t stop_signal = 0;
static struct sigaction old_usr1, old_term;
static int installed = 0; /* nesting depth: the CLI may install before job_run does */
static char *watch_path = NULL;
static double watch_last = -1e300;

static void on_stop_signal(int sig)
{
    stop_flag = 1;
    stop_signal = sig;
}

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

cpdit_status job_stop_install(cpdit_error *err)
{
    struct sigaction sa;
    if (installed) {
        installed++;
        return CPDIT_OK;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a signal must not make file writes fail with EINTR */
    if (sigaction(SIGUSR1, &sa, &old_usr1) != 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "signals", "sigaction(SIGUSR1): %s",
                               strerror(errno));
    if (sigaction(SIGTERM, &sa, &old_term) != 0) {
        int e = errno;
        sigaction(SIGUSR1, &old_usr1, NULL);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "signals", "sigaction(SIGTERM): %s",
                               strerror(e));
    }
    installed = 1;
    return CPDIT_OK;
}

void job_stop_uninstall(void)
{
    if (!installed || --installed > 0)
        return;
    sigaction(SIGUSR1, &old_usr1, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    installed = 0;
}

void job_stop_watch_file(const char *path)
{
    free(watch_path);
    watch_path = path ? strdup(path) : NULL;
    watch_last = -1e300;
}

/* ---- the relay: a stop seen by one rank reaches every rank of the job (job_run.h) */
#define RELAY_TAG 7411             /* on the relay's own duplicate of the world */

static MPI_Comm relay_comm = MPI_COMM_NULL;
static MPI_Request relay_recv = MPI_REQUEST_NULL;
static MPI_Request *relay_sends = NULL;
static int relay_nsends = 0;
static int relay_in = 0;   /* the signal number the relaying rank saw */
static int relay_out = 0;
static int relay_done = 0; /* this rank has sent the relay or received one */

/* Between steps and items (main thread): a stop this rank saw itself is sent to every other
 * rank (a one-int message each, eager, so the sends complete at once); a relay received from
 * another rank sets this rank's flag. One MPI_Test per call otherwise. */
static void relay_poll(void)
{
    if (relay_comm == MPI_COMM_NULL || relay_done)
        return;
    if (stop_flag) {
        int rank = 0, size = 1;
        MPI_Comm_rank(relay_comm, &rank);
        MPI_Comm_size(relay_comm, &size);
        relay_done = 1;
        relay_out = (int)stop_signal;
        relay_sends = calloc((size_t)(size > 1 ? size - 1 : 1), sizeof *relay_sends);
        for (int r = 0; relay_sends && r < size; r++)
            if (r != rank)
                MPI_Isend(&relay_out, 1, MPI_INT, r, RELAY_TAG, relay_comm,
                          &relay_sends[relay_nsends++]);
        if (size > 1)
            fprintf(stderr, "[cpdit] rank %d: stop relayed to the other %d ranks\n", rank,
                    size - 1);
        return;
    }
    int got = 0;
    if (MPI_Test(&relay_recv, &got, MPI_STATUS_IGNORE) == MPI_SUCCESS && got) {
        relay_done = 1;
        if (!stop_signal)
            stop_signal = relay_in;
        stop_flag = 1;
    }
}

void job_stop_relay_begin(MPI_Comm world)
{
    job_stop_relay_end();
    if (MPI_Comm_dup(world, &relay_comm) != MPI_SUCCESS) {
        relay_comm = MPI_COMM_NULL;
        return;
    }
    relay_done = 0;
    if (MPI_Irecv(&relay_in, 1, MPI_INT, MPI_ANY_SOURCE, RELAY_TAG, relay_comm,
                  &relay_recv) != MPI_SUCCESS) {
        MPI_Comm_free(&relay_comm);
        relay_comm = MPI_COMM_NULL;
    }
}

void job_stop_relay_end(void)
{
    if (relay_comm == MPI_COMM_NULL)
        return;
    if (relay_recv != MPI_REQUEST_NULL) {
        int got = 0;
        MPI_Test(&relay_recv, &got, MPI_STATUS_IGNORE);
        if (!got) {
            MPI_Cancel(&relay_recv);
            MPI_Wait(&relay_recv, MPI_STATUS_IGNORE);
        }
    }
    if (relay_nsends)
        MPI_Waitall(relay_nsends, relay_sends, MPI_STATUSES_IGNORE);
    free(relay_sends);
    relay_sends = NULL;
    relay_nsends = 0;
    MPI_Comm_free(&relay_comm);
    relay_comm = MPI_COMM_NULL;
    relay_recv = MPI_REQUEST_NULL;
}

int job_stop_requested(void)
{
    relay_poll();
    if (stop_flag)
        return 1;
    if (watch_path) {
        double now = mono_now();
        if (now - watch_last >= JOB_STOP_FILE_POLL_S) {
            watch_last = now;
            struct stat sb;
            if (stat(watch_path, &sb) == 0) {
                stop_flag = 1;
                relay_poll(); /* the request file's stop reaches the other groups too */
            }
        }
    }
    return stop_flag != 0;
}
int job_stop_signal_number(void) { return (int)stop_signal; }
void job_stop_request(void) { stop_flag = 1; }

void job_stop_clear(void)
{
    stop_flag = 0;
    stop_signal = 0;
}

int job_stop_agreed(const cp_grid *g)
{
    long long v = job_stop_requested();
    if (!g || g->cp_size <= 1)
        return (int)v;
    cpdit_error err;
    if (cpdit_comm_allreduce(g->cp, &v, 1, CPDIT_COMM_INT64, CPDIT_COMM_MAX, &err) != CPDIT_OK)
        return 1; /* the group cannot talk: stopping is the safe answer */
    return v != 0;
}

int job_stop_agree_world(MPI_Comm world)
{
    int v = job_stop_requested(), any = v;
    if (MPI_Allreduce(&v, &any, 1, MPI_INT, MPI_MAX, world) != MPI_SUCCESS)
        any = 1; /* the ranks cannot talk: stopping is the safe answer */
    if (any)
        job_stop_request();
    return any;
}

void job_test_hold(const char *point, int rank)
{
    const char *spec = getenv("CPDIT_TEST_HOLD");
    size_t n = point ? strlen(point) : 0;
    if (!spec || !n || strncmp(spec, point, n) != 0 || spec[n] != ':' || !spec[n + 1])
        return;
    const char *file = spec + n + 1;
    struct stat sb;
    if (stat(file, &sb) != 0)
        return;
    fprintf(stderr, "[cpdit] test hold at %s: rank %d pid %ld waits while %s exists\n", point,
            rank, (long)getpid(), file);
    fflush(stderr);
    for (double t0 = mono_now(); stat(file, &sb) == 0 && mono_now() - t0 < TEST_HOLD_MAX_S;) {
        (void)job_stop_requested(); /* a stop signalled during the hold is relayed at once */
        usleep(TEST_HOLD_POLL_US);
    }
}
