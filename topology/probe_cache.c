/* probe_cache.c — the job-start probe kept per hosts, hardware and rank layout
 * (probe_cache.h). */
#include "config.h"

#include "topology/probe_cache.h"

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/host_runtime.h"
#include "jobs/job_index.h"
#include "lib/io/atomic_file.h"

#define CACHE_HOST_MAX 64
#define CACHE_MAX_BYTES (16 << 20)
#define FNV_OFFSET 1469598103934665603ull
#define FNV_PRIME 1099511628211ull

typedef struct rank_hw {
    char host[CACHE_HOST_MAX];
    long cpus, affinity, threads;
    long long memory_bytes;
} rank_hw;

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

void probe_cache_path(MPI_Comm comm, const char *dir, const char *backend, char *path,
                      size_t n)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    path[0] = '\0';
    const char *env = getenv(PROBE_CACHE_ENV);
    const char *where = env && env[0] ? env : dir;
    int on = where && where[0];
    MPI_Bcast(&on, 1, MPI_INT, 0, comm);
    if (!on)
        return;
    rank_hw me;
    memset(&me, 0, sizeof me);
    if (gethostname(me.host, sizeof me.host - 1) != 0)
        snprintf(me.host, sizeof me.host, "?");
    me.cpus = sysconf(_SC_NPROCESSORS_ONLN);
    me.memory_bytes = (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
    cpu_set_t set;
    CPU_ZERO(&set);
    me.affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
    me.threads = cpdit_host_gemm_threads();
    rank_hw *all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
    int ok = rank != 0 || all;
    MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
    if (!ok)
        return;
    MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0, comm);
    if (rank == 0) {
        uint64_t h = FNV_OFFSET;
        for (int r = 0; r < size; r++) {
            char line[CACHE_HOST_MAX + 96];
            const int k = snprintf(line, sizeof line, "%d %s %ld %lld %ld %ld;", r, all[r].host,
                                   all[r].cpus, all[r].memory_bytes, all[r].affinity,
                                   all[r].threads);
            h = fnv1a(h, line, (size_t)k);
        }
        h = fnv1a(h, backend ? backend : "", strlen(backend ? backend : ""));
        snprintf(path, n, "%s/%s%016llx.json", where, PROBE_CACHE_PREFIX, (unsigned long long)h);
        free(all);
    }
    int len = rank == 0 ? (int)strlen(path) + 1 : 0;
    MPI_Bcast(&len, 1, MPI_INT, 0, comm);
    MPI_Bcast(path, len, MPI_CHAR, 0, comm);
}

char *probe_cache_read(const char *path)
{
    struct stat sb;
    if (!path[0] || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0 ||
        sb.st_size > CACHE_MAX_BYTES)
        return NULL;
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc((size_t)sb.st_size + 1) : NULL;
    size_t k = buf ? fread(buf, 1, (size_t)sb.st_size, f) : 0;
    if (f)
        fclose(f);
    if (!buf || k != (size_t)sb.st_size) {
        free(buf);
        return NULL;
    }
    buf[k] = '\0';
    return buf;
}

void probe_cache_write(const char *path, const char *text)
{
    if (!path[0] || !text)
        return;
    cpdit_error err;
    cpdit_error_clear(&err);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    if ((slash && job_make_folders(dir, &err)) || atomic_write_buffer(path, text, strlen(text), &err))
        fprintf(stderr, "cpdit: warning: the job-start probe was not cached (%s: %s)\n",
                err.where, err.what);
}
