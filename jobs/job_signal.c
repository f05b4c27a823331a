/* job_signal.c — the stop flag: SIGUSR1 / SIGTERM set it, the runner and the sampler poll it
 * (see job_run.h). The handler only stores to volatile sig_atomic_t variables, which is all a
 * signal handler may safely do. */
#include "jobs/job_run.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

#include "lib/cp/comm.h"

static volatile sig_atomic_t stop_flag = 0;
static volatile sig_atomic_t stop_signal = 0;
static struct sigaction old_usr1, old_term;
static int installed = 0; /* nesting depth: the CLI may install before job_run does */

static void on_stop_signal(int sig)
{
    stop_flag = 1;
    stop_signal = sig;
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

int job_stop_requested(void) { return stop_flag != 0; }
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
