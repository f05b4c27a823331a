/* alloc_cuda.h — a caching allocator for device memory (--with-cuda).
 *
 * The CUDA backend's alloc/free: blocks are rounded up to a size class (512 B granules below
 * 1 MiB, then 1 MiB granules up to 64 MiB, then 8 MiB steps) and freed blocks are kept on a free
 * list per class, so that after the first sampler step every activation request is served
 * from the cache and no step calls cudaMalloc (which synchronises the device). When cudaMalloc
 * fails, the cache is released (cudaFree of every cached block) and the request retried once.
 * Thread-safe (one mutex). Blocks are 256-byte aligned, as cudaMalloc returns them.
 * Reuse is safe without synchronisation because all activation work is ordered on the one
 * compute stream (the communicators make the compute stream wait for their transfers).
 */
#ifndef CPDIT_ALLOC_CUDA_H
#define CPDIT_ALLOC_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A block of at least bytes bytes of device memory on the current device; NULL when the
 * device is out of memory even after releasing the cache. bytes = 0 gives a valid block. */
void *cpdit_cuda_alloc(size_t bytes);
/* Return a block to the cache (NULL is fine). Freeing a pointer that did not come from
 * cpdit_cuda_alloc is a programming error: it is reported on stderr and ignored. */
void cpdit_cuda_free(void *p);
/* cudaFree every cached (free) block; blocks in use stay. */
void cpdit_cuda_alloc_trim(void);

typedef struct cpdit_cuda_alloc_stats {
    size_t device_allocs;  /* cudaMalloc calls so far */
    size_t cache_hits;     /* requests served from the cache */
    size_t bytes_in_use;   /* size-class bytes handed out and not freed */
    size_t bytes_cached;   /* size-class bytes on free lists */
    size_t peak_bytes;     /* max of in_use + cached */
} cpdit_cuda_alloc_stats;

void cpdit_cuda_alloc_get_stats(cpdit_cuda_alloc_stats *s);

/* The size class of a request (exposed for tests): bytes rounded up as described above. */
size_t cpdit_cuda_alloc_class(size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
