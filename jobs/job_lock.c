/* job_lock.c — one run per output folder (or per array share): a lock file made with link(),
 * refreshed by a thread, taken over when stale (the rules are in job_slurm.h). */
#include "jobs/job_slurm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "jobs/job_index.h"
#include "lib/io/regular_file.h"

#define LOCK_TEXT_MAX 512
#define HOST_MAX 256
#define LOCK_FILE_MODE 0644
#define TAKEOVER_TRIES 3

struct job_lock {
    char *path;
    ino_t ino;
    pthread_t thread;
    int have_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
};

/* What a lock file says about its holder. */
typedef struct lock_holder {
    char host[HOST_MAX];
    long pid;
    char job[JOB_SLURM_ID_MAX];
    long long restart;
    double age_s; /* since the last refresh */
    int parsed;
} lock_holder;

static void my_host(char *out, size_t size)
{
    if (gethostname(out, size) != 0)
        snprintf(out, size, "unknown");
    out[size - 1] = '\0';
}

/* The lock name of share s: ".cpdit-lock" or ".cpdit-lock.task-k-of-K". */
static void lock_name(const job_slurm_info *s, char *out, size_t size)
{
    if (s->shares > 1)
        snprintf(out, size, "%s.task-%d-of-%d", JOB_LOCK_PREFIX, s->share, s->shares);
    else
        snprintf(out, size, "%s", JOB_LOCK_PREFIX);
}

/* Read the lock at path; 0 when it exists. */
static int read_holder(const char *path, lock_holder *h)
{
    memset(h, 0, sizeof *h);
    int fd;
    cpdit_error ignored;
    if (cpdit_open_regular(path, NULL, &fd, &ignored)) /* never blocks on a FIFO */
        return -1;
    struct stat sb;
    char text[LOCK_TEXT_MAX];
    ssize_t n = fstat(fd, &sb) == 0 ? read(fd, text, sizeof text - 1) : -1;
    close(fd);
    if (n < 0)
        return -1;
    text[n] = '\0';
    h->age_s = difftime(time(NULL), sb.st_mtime);
    h->restart = -1;
    h->parsed = sscanf(text, "host=%255s pid=%ld job=%31s restart=%lld", h->host, &h->pid,
                       h->job, &h->restart) == 4;
    if (strcmp(h->job, "-") == 0)
        h->job[0] = '\0';
    return 0;
}

/* Is pid gone: no such process, or a zombie (killed, not yet reaped: a run whose mpirun died
 * leaves its ranks to an init that may never reap them; /proc/PID/stat's state Z or X)? */
static int process_is_gone(long pid)
{
    if (kill((pid_t)pid, 0) != 0)
        return errno == ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces */
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

static int holder_is_stale(const lock_holder *h, const job_slurm_info *s)
{
    if (h->age_s > JOB_LOCK_STALE_S)
        return 1;
    if (!h->parsed)
        return 0;
    if (s->job_id[0] && strcmp(h->job, s->job_id) == 0 && h->restart < s->restart_count)
        return 1; /* an earlier run of this job: Slurm requeued it */
    char host[HOST_MAX];
    my_host(host, sizeof host);
    if (strcmp(host, h->host) == 0 && h->pid > 0 && process_is_gone(h->pid))
        return 1;
    return 0;
}

static cpdit_status held_error(const char *dir, const char *name, const lock_holder *h,
                               cpdit_error *err)
{
    char job[64] = "another cpdit run";
    if (h->job[0])
        snprintf(job, sizeof job, "Slurm job %s", h->job);
    return cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                           "the output folder is in use by %s (host %s, pid %ld; lock %s "
                           "refreshed %.0f s ago): one job per output folder; wait for it, "
                           "cancel it, or choose another --output", job,
                           h->host[0] ? h->host : "?", h->pid, name, h->age_s);
}

static void *refresher(void *arg)
{
    job_lock *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += JOB_LOCK_REFRESH_S;
        pthread_cond_timedwait(&l->cv, &l->mu, &until);
        struct stat sb;
        if (!l->stop && stat(l->path, &sb) == 0 && sb.st_ino == l->ino)
            utimensat(AT_FDCWD, l->path, NULL, 0);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Another live lock that overlaps this share? (0 none, else held_error) */
static cpdit_status check_others(const char *dir, const char *own, const job_slurm_info *s,
                                 cpdit_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot list the output folder: %s",
                               strerror(errno));
    size_t plen = strlen(JOB_LOCK_PREFIX);
    cpdit_status st = CPDIT_OK;
    struct dirent *e;
    while (!st && (e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strncmp(n, JOB_LOCK_PREFIX, plen) != 0 || strcmp(n, own) == 0)
            continue;
        int k, K;
        int whole = n[plen] == '\0';
        int task = sscanf(n + plen, ".task-%d-of-%d", &k, &K) == 2;
        if (!whole && !task) /* our temporary files, a stale lock being removed */
            continue;
        if (s->shares > 1 && task && K == s->shares)
            continue; /* another task of the same split: a disjoint share */
        char *p = job_path_join(dir, n);
        lock_holder h;
        if (p && read_holder(p, &h) == 0 && !holder_is_stale(&h, s))
            st = held_error(dir, n, &h, err);
        free(p);
    }
    closedir(d);
    return st;
}

/* Write our record into a new unique file beside the lock; its path into tmp. */
static cpdit_status write_record(const char *dir, const job_slurm_info *s, char *tmp,
                                 size_t size, cpdit_error *err)
{
    char host[HOST_MAX], text[LOCK_TEXT_MAX];
    my_host(host, sizeof host);
    snprintf(tmp, size, "%s/%s.tmp-%s-%ld", dir, JOB_LOCK_PREFIX, host, (long)getpid());
    int n = snprintf(text, sizeof text, "host=%s pid=%ld job=%s restart=%lld time=%lld\n", host,
                     (long)getpid(), s->job_id[0] ? s->job_id : "-", s->restart_count,
                     (long long)time(NULL));
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, LOCK_FILE_MODE);
    if (fd < 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot create the lock file: %s",
                               strerror(errno));
    ssize_t w = write(fd, text, (size_t)n);
    int e = errno;
    if (close(fd) != 0 || w != n) {
        unlink(tmp);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot write the lock file: %s",
                               strerror(w < 0 ? e : EIO));
    }
    return CPDIT_OK;
}

cpdit_status job_lock_acquire(const char *dir, const job_slurm_info *s, job_lock **out,
                              cpdit_error *err)
{
    *out = NULL;
    char name[64], tmp[PATH_MAX];
    lock_name(s, name, sizeof name);
    char *path = job_path_join(dir, name);
    if (!path)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    /* a FIFO or a device node named as the lock is neither read, taken over nor removed */
    cpdit_status st = cpdit_check_output_file(path, "the lock", err);
    int linked = 0;
    for (int attempt = 0; !st && !linked && attempt < TAKEOVER_TRIES; attempt++) {
        if ((st = write_record(dir, s, tmp, sizeof tmp, err)))
            break;
        struct stat sb;
        linked = link(tmp, path) == 0 || (stat(tmp, &sb) == 0 && sb.st_nlink == 2);
        int e = errno;
        unlink(tmp);
        if (linked)
            break;
        if (e != EEXIST) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot create the lock %s: %s",
                                 name, strerror(e));
            break;
        }
        lock_holder h;
        if (read_holder(path, &h) != 0)
            continue; /* released meanwhile: try again */
        if (!holder_is_stale(&h, s)) {
            st = held_error(dir, name, &h, err);
            break;
        }
        /* take the stale lock over: move it aside (one winner), then remove it */
        char aside[PATH_MAX];
        snprintf(aside, sizeof aside, "%s.stale-%ld", path, (long)getpid());
        if (rename(path, aside) == 0)
            unlink(aside);
    }
    if (!st && !linked) {
        lock_holder h;
        st = read_holder(path, &h) == 0 ? held_error(dir, name, &h, err)
                                         : cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir,
                                                           "cannot take the lock %s", name);
    }
    if (!st && (st = check_others(dir, name, s, err)))
        unlink(path);
    job_lock *l = NULL;
    if (!st && !(l = calloc(1, sizeof *l))) {
        unlink(path);
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    }
    if (st) {
        free(path);
        return st;
    }
    struct stat sb;
    l->path = path;
    l->ino = stat(path, &sb) == 0 ? sb.st_ino : 0;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    /* the refresher must not take the stop signals meant for the main thread */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    l->have_thread = pthread_create(&l->thread, NULL, refresher, l) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    *out = l;
    return CPDIT_OK;
}

void job_lock_release(job_lock *l)
{
    if (!l)
        return;
    if (l->have_thread) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
    }
    struct stat sb;
    if (stat(l->path, &sb) == 0 && sb.st_ino == l->ino)
        unlink(l->path);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l->path);
    free(l);
}

int job_lock_is_live(const char *path, char *line, size_t size)
{
    lock_holder h;
    line[0] = '\0';
    if (read_holder(path, &h) != 0)
        return -1;
    char host[HOST_MAX];
    my_host(host, sizeof host);
    snprintf(line, size, "host=%s pid=%ld job=%s", h.host[0] ? h.host : "?", h.pid,
             h.job[0] ? h.job : "-");
    job_slurm_info me;
    job_slurm_info_from_env(&me); /* within the same Slurm job, a requeue marks older runs */
    return !holder_is_stale(&h, &me);
}
