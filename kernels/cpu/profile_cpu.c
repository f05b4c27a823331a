/* profile_cpu.c — the CPU kernels' op-class profile (see profile_cpu.h). */
#include "config.h"

#include "kernels/cpu/profile_cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "kernels/cpu/thread_pool.h"

typedef struct prof_row {
    long calls;
    double seconds, flops, bytes;
    long faults;
} prof_row;

static prof_row rows[CPU_PROF_N];
static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;
static int prof_state = -1; /* -1 unread, 0 off, 1 on */

static const char *const class_names[CPU_PROF_N] = {
    "linear bf16", "linear fp32", "attention", "conv2d", "norms", "element-wise", "weights (pack)"};

int cpu_prof_on(void)
{
    int s = __atomic_load_n(&prof_state, __ATOMIC_RELAXED);
    if (s < 0) {
        const char *e = getenv("CPDIT_PROFILE");
        s = e && e[0] == '1';
        __atomic_store_n(&prof_state, s, __ATOMIC_RELAXED);
    }
    return s;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long faults_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt + ru.ru_majflt;
}

void cpu_prof_begin(cpu_prof_mark *m)
{
    m->faults0 = faults_now();
    m->t0 = now_s();
}

void cpu_prof_end(const cpu_prof_mark *m, cpu_prof_class c, double flops, double bytes)
{
    const double dt = now_s() - m->t0;
    const long df = faults_now() - m->faults0;
    if ((int)c < 0 || c >= CPU_PROF_N)
        return;
    pthread_mutex_lock(&prof_lock);
    rows[c].calls++;
    rows[c].seconds += dt;
    rows[c].flops += flops;
    rows[c].bytes += bytes;
    rows[c].faults += df;
    pthread_mutex_unlock(&prof_lock);
}

void cpu_prof_report(FILE *out)
{
    if (!cpu_prof_on())
        return;
    pthread_mutex_lock(&prof_lock);
    long total_calls = 0;
    for (int c = 0; c < CPU_PROF_N; c++)
        total_calls += rows[c].calls;
    if (total_calls) {
        const prof_row *ref = &rows[CPU_PROF_LINEAR_BF16];
        const double ref_rate = ref->seconds > 0 ? ref->flops / ref->seconds : 0;
        char pool[96];
        fprintf(out, "cpdit profile (%s; %% = of the linear bf16 rate of this run):\n",
                cpu_pool_describe(pool, sizeof pool));
        fprintf(out, "%-15s %8s %9s %9s %9s %7s %9s %9s\n", "class", "calls", "time_s",
                "GFLOP", "GFLOP/s", "%bf16", "faults", "read_MiB");
        for (int c = 0; c < CPU_PROF_N; c++) {
            const prof_row *r = &rows[c];
            if (!r->calls)
                continue;
            const double rate = r->seconds > 0 ? r->flops / r->seconds : 0;
            char pct[16] = "-"; /* no bf16 linear in the run, or no flops in the class */
            if (ref_rate > 0 && r->flops > 0)
                snprintf(pct, sizeof pct, "%.0f%%", 100.0 * rate / ref_rate);
            fprintf(out, "%-15s %8ld %9.3f %9.2f %9.1f %7s %9ld %9.1f\n", class_names[c],
                    r->calls, r->seconds, r->flops * 1e-9, rate * 1e-9, pct, r->faults,
                    r->bytes / 1048576.0);
        }
    }
    pthread_mutex_unlock(&prof_lock);
}
