/* probe_cache.h — the quick probe that `cpdit run` makes at job start when it has no topology
 * file, kept for the runs after it (requeues, reruns): its document is saved as
 * DIR/.cpdit-probe-KEY.json (DIR: the run's output folder, or $CPDIT_PROBE_CACHE when set),
 * KEY a hash of what the measurement depends on: every rank's host name, online CPUs,
 * physical memory, CPU affinity and threads, in rank order (the rank layout), and the
 * backend. Another partition, node list, hardware, --cpus-per-task or rank count gives
 * another key, so a stale measurement is never reused; the same job requeued reuses it and
 * skips the probe's seconds.
 */
#ifndef CPDIT_PROBE_CACHE_H
#define CPDIT_PROBE_CACHE_H

#include <mpi.h>
#include <stddef.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PROBE_CACHE_PREFIX ".cpdit-probe-"
#define PROBE_CACHE_ENV "CPDIT_PROBE_CACHE"

/* Collective over comm: the cache file's path for folder dir (NULL or "": $CPDIT_PROBE_CACHE,
 * and without that no cache: path[0] = '\0'), the same on every rank. */
void probe_cache_path(MPI_Comm comm, const char *dir, const char *backend, char *path,
                      size_t n);

/* Rank 0: the cached document's text (malloc'd; caller frees), or NULL when there is none. */
char *probe_cache_read(const char *path);

/* Rank 0: save the document's text at path atomically; a failure only warns (to stderr). */
void probe_cache_write(const char *path, const char *text);

#ifdef __cplusplus
}
#endif
#endif
