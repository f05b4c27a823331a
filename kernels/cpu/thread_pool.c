/* thread_pool.c — the rank's persistent worker pool (see thread_pool.h).
 *
 * Protocol: the caller of a run writes the job (fn, ctx, workers) and the count of helpers it
 * waits for under `mtx`, then bumps `generation` and wakes the workers. A worker spins a short
 * while on `generation` (a run follows the last one within microseconds inside a forward),
 * then sleeps on cv_start; it reads the job under `mtx` (so a late worker never mixes two
 * jobs), runs its share when its index is below the job's worker count, and the last helper to
 * finish wakes the caller (cv_done). Only one run is in flight: `run_lock` is taken with
 * trylock, and a caller that cannot take it (another thread's run, or a nested run from a
 * task) runs the job inline with one worker.
 */
#include "config.h"

#include "kernels/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/blas_runtime.h"

/* Spins (pause instructions, ~40-140 cycles each) before a waiting thread sleeps. */
#define POOL_SPINS 4096

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_start = PTHREAD_COND_INITIALIZER;
static pthread_cond_t cv_done = PTHREAD_COND_INITIALIZER;

static int pool_threads;  /* 0 until made */
static int pool_requested; /* cpu_pool_set_size's n, 0 = the environment */
static int pool_pinned;
static int mask_cpus[CPU_POOL_MAX_THREADS];
static int n_mask, n_online;
static pthread_t tid[CPU_POOL_MAX_THREADS];
static int n_started; /* helper threads running (indices 1..n_started) */
static pthread_t owner; /* the thread that made the pool: only its runs use the workers */

static long generation;
static long start_generation; /* generation when the workers were made */
static cpu_pool_fn job_fn;
static void *job_ctx;
static int job_workers;
static int remaining; /* helpers of the current run not finished */
static int quit;

static __thread int in_task;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* ------------------------------------------------------------------ sizing */

/* A positive integer from environment variable name, else 0. */
static int env_count(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end = NULL;
    const long v = strtol(s, &end, 10);
    return end && *end == '\0' && v > 0 && v <= CPU_POOL_MAX_THREADS ? (int)v : 0;
}

/* The first of the named variables that holds a positive count, else 0. */
static int env_first(const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const int v = env_count(names[i]);
        if (v)
            return v;
    }
    return 0;
}

static int local_ranks(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                         "SLURM_NTASKS_PER_NODE"};
    const int v = env_first(names, sizeof names / sizeof names[0]);
    return v ? v : 1;
}

static int local_rank(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                        "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *s = getenv(names[i]);
        if (s && *s)
            return atoi(s);
    }
    return 0;
}

static void read_mask(void)
{
    cpu_set_t set;
    n_mask = 0;
    n_online = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_online < 1)
        n_online = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE && n_mask < CPU_POOL_MAX_THREADS; c++)
            if (CPU_ISSET(c, &set))
                mask_cpus[n_mask++] = c;
    if (n_mask == 0) { /* no affinity interface: the online CPUs */
        for (int c = 0; c < n_online && c < CPU_POOL_MAX_THREADS; c++)
            mask_cpus[c] = c;
        n_mask = n_online < CPU_POOL_MAX_THREADS ? n_online : CPU_POOL_MAX_THREADS;
    }
}

/* The thread count the environment asks for (thread_pool.h, steps 2-5). */
static int size_from_env(void)
{
    static const char *const names[] = {"CPDIT_THREADS", "SLURM_CPUS_PER_TASK",
                                        "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"};
    const int v = env_first(names, sizeof names / sizeof names[0]);
    if (v)
        return v;
    const int share = n_mask >= n_online ? n_mask / local_ranks() : n_mask;
    return share > 0 ? share : 1;
}

/* Once per process, on rank 0 of the node: the binding leaves cores idle, or the pool has
 * more threads than the binding has CPUs. */
static void warn_binding(int threads)
{
    static int warned;
    if (warned || local_rank() != 0 || env_count("CPDIT_QUIET_BINDING"))
        return;
    warned = 1;
    const int ranks = local_ranks();
    const int node = env_count("SLURM_CPUS_ON_NODE") ? env_count("SLURM_CPUS_ON_NODE")
                                                     : n_online;
    if ((long)n_mask * ranks < node)
        fprintf(stderr,
                "cpdit: each rank is bound to %d CPU%s; %d rank%s on this node leave%s %ld of "
                "its %d CPUs idle. Give each rank its cores: mpirun --bind-to none (or "
                "--map-by slot:PE=N), srun -c N, then --threads N or CPDIT_THREADS=N\n",
                n_mask, n_mask == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s",
                ranks == 1 ? "s" : "", node - (long)n_mask * ranks, node);
    else if (threads > n_mask)
        fprintf(stderr,
                "cpdit: %d threads per rank on a binding of %d CPU%s: they share cores "
                "(mpirun --bind-to none or --map-by slot:PE=%d, srun -c %d)\n",
                threads, n_mask, n_mask == 1 ? "" : "s", threads, threads);
}

/* ------------------------------------------------------------------ workers */

static void run_share(cpu_pool_fn fn, void *ctx, int w, int n)
{
    const int was = in_task;
    in_task = 1;
    fn(ctx, w, n);
    in_task = was;
}

static void *worker_main(void *arg)
{
    const int me = (int)(size_t)arg;
    long seen = start_generation; /* a run posted before this thread got going is still seen */
    for (;;) {
        for (int s = 0; s < POOL_SPINS; s++) {
            if (__atomic_load_n(&generation, __ATOMIC_ACQUIRE) != seen)
                break;
            cpu_relax();
        }
        pthread_mutex_lock(&mtx);
        while (generation == seen && !quit)
            pthread_cond_wait(&cv_start, &mtx);
        if (quit) {
            pthread_mutex_unlock(&mtx);
            break;
        }
        seen = generation;
        const cpu_pool_fn fn = job_fn;
        void *ctx = job_ctx;
        const int n = job_workers;
        pthread_mutex_unlock(&mtx);
        if (me >= n)
            continue;
        run_share(fn, ctx, me, n);
        if (__atomic_sub_fetch(&remaining, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&mtx);
            pthread_cond_signal(&cv_done);
            pthread_mutex_unlock(&mtx);
        }
    }
    return NULL;
}

static void pin_thread(pthread_t t, int i)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(mask_cpus[i % n_mask], &one);
    (void)pthread_setaffinity_np(t, sizeof one, &one);
}

static void stop_workers(void)
{
    pthread_mutex_lock(&mtx);
    quit = 1;
    pthread_cond_broadcast(&cv_start);
    pthread_mutex_unlock(&mtx);
    for (int i = 0; i < n_started; i++)
        pthread_join(tid[i + 1], NULL);
    n_started = 0;
    quit = 0;
}

/* A forked child has none of the workers: it makes its own pool on first use. */
static void pool_after_fork_child(void)
{
    pthread_mutex_init(&init_lock, NULL);
    pthread_mutex_init(&run_lock, NULL);
    pthread_mutex_init(&mtx, NULL);
    pthread_cond_init(&cv_start, NULL);
    pthread_cond_init(&cv_done, NULL);
    pool_threads = 0;
    n_started = 0;
    in_task = 0;
}

/* Make the pool (init_lock held). */
static void pool_make(void)
{
    static int atfork_done;
    if (!atfork_done)
        atfork_done = pthread_atfork(NULL, NULL, pool_after_fork_child) == 0;
    read_mask();
    int n = pool_requested > 0 ? pool_requested : size_from_env();
    if (n > CPU_POOL_MAX_THREADS)
        n = CPU_POOL_MAX_THREADS;
    const int pin_env = getenv("CPDIT_PIN") ? atoi(getenv("CPDIT_PIN")) : -1;
    const int owns_mask = n_mask < n_online || local_ranks() == 1;
    pool_pinned = pin_env == 1 || (pin_env != 0 && n == n_mask && owns_mask && n > 1);
    owner = pthread_self();
    start_generation = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    for (int i = 1; i < n; i++) {
        if (pthread_create(&tid[i], NULL, worker_main, (void *)(size_t)i) != 0)
            break; /* fewer threads is still correct */
        if (pool_pinned)
            pin_thread(tid[i], i);
        n_started = i;
    }
    __atomic_store_n(&pool_threads, n_started + 1, __ATOMIC_RELEASE);
    /* OpenBLAS runs inside the pool's workers (cpu_par_sgemm, attention): one thread each */
    blas_runtime_set_num_threads(1);
    warn_binding(n);
}

int cpu_pool_size(void)
{
    int n = __atomic_load_n(&pool_threads, __ATOMIC_ACQUIRE);
    if (n)
        return n;
    pthread_mutex_lock(&init_lock);
    if (!pool_threads)
        pool_make();
    n = pool_threads;
    pthread_mutex_unlock(&init_lock);
    return n;
}

void cpu_pool_set_size(int n)
{
    pthread_mutex_lock(&init_lock);
    pthread_mutex_lock(&run_lock);
    if (pool_threads)
        stop_workers();
    __atomic_store_n(&pool_threads, 0, __ATOMIC_RELEASE);
    pool_requested = n > 0 ? n : 0;
    pool_make();
    pthread_mutex_unlock(&run_lock);
    pthread_mutex_unlock(&init_lock);
}

int cpu_pool_in_task(void)
{
    return in_task || (__atomic_load_n(&pool_threads, __ATOMIC_ACQUIRE) &&
                       !pthread_equal(pthread_self(), owner));
}

/* ------------------------------------------------------------------ runs */

void cpu_pool_run(int workers, cpu_pool_fn fn, void *ctx)
{
    const int size = cpu_pool_size();
    int n = workers <= 0 || workers > size ? size : workers;
    /* another thread (the loader's prefetch helper, a test's thread) runs inline: the forward
     * on the owning thread keeps every worker */
    if (n <= 1 || in_task || !pthread_equal(pthread_self(), owner) ||
        pthread_mutex_trylock(&run_lock) != 0) {
        run_share(fn, ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&mtx);
    job_fn = fn;
    job_ctx = ctx;
    job_workers = n;
    __atomic_store_n(&remaining, n - 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&cv_start);
    pthread_mutex_unlock(&mtx);

    run_share(fn, ctx, 0, n);

    for (int s = 0; s < POOL_SPINS; s++) {
        if (__atomic_load_n(&remaining, __ATOMIC_ACQUIRE) == 0)
            break;
        cpu_relax();
    }
    pthread_mutex_lock(&mtx);
    while (__atomic_load_n(&remaining, __ATOMIC_ACQUIRE) != 0)
        pthread_cond_wait(&cv_done, &mtx);
    pthread_mutex_unlock(&mtx);
    pthread_mutex_unlock(&run_lock);
}

typedef struct range_job {
    size_t n;
    cpu_pool_range_fn fn;
    void *ctx;
} range_job;

static void range_share(void *arg, int w, int workers)
{
    const range_job *j = arg;
    const size_t i0 = j->n * (size_t)w / (size_t)workers;
    const size_t i1 = j->n * (size_t)(w + 1) / (size_t)workers;
    if (i1 > i0)
        j->fn(j->ctx, i0, i1);
}

void cpu_pool_for(size_t n, size_t grain, cpu_pool_range_fn fn, void *ctx)
{
    if (n == 0)
        return;
    if (grain < 1)
        grain = 1;
    const size_t most = n / grain;
    const int size = cpu_pool_size();
    const int workers = most < (size_t)size ? (int)(most ? most : 1) : size;
    if (workers <= 1) {
        fn(ctx, 0, n);
        return;
    }
    range_job j = {n, fn, ctx};
    cpu_pool_run(workers, range_share, &j);
}

const char *cpu_pool_describe(char *buf, size_t n)
{
    const int size = cpu_pool_size();
    snprintf(buf, n, "%d thread%s (affinity mask %d CPU%s of %d%s)", size,
             size == 1 ? "" : "s", n_mask, n_mask == 1 ? "" : "s", n_online,
             pool_pinned ? ", pinned" : "");
    return buf;
}
