/* alloc_cuda.c — caching device allocator (see alloc_cuda.h).
 *
 * Bookkeeping: every block handed out is in a hash table from pointer to its size class (so
 * free needs no size); free blocks sit in a hash table from size class to a singly linked
 * list. Both tables are small open-hashing arrays of linked nodes. */
#include "kernels/cuda/alloc_cuda.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SMALL_GRANULE ((size_t)512)
#define SMALL_LIMIT ((size_t)1 << 20)
#define MID_GRANULE ((size_t)1 << 20)
#define MID_LIMIT ((size_t)64 << 20)
#define LARGE_GRANULE ((size_t)8 << 20)
#define BUCKETS 1024

typedef struct node {
    void *ptr;
    size_t cls;
    struct node *next;
} node;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static node *g_used[BUCKETS];  /* by pointer */
static node *g_free[BUCKETS];  /* by class: each node one free block */
static cpdit_cuda_alloc_stats g_stats;

static size_t round_up(size_t n, size_t g)
{
    return (n + g - 1) / g * g;
}

size_t cpdit_cuda_alloc_class(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes <= SMALL_LIMIT)
        return round_up(bytes, SMALL_GRANULE);
    if (bytes <= MID_LIMIT)
        return round_up(bytes, MID_GRANULE);
    return round_up(bytes, LARGE_GRANULE);
}

static size_t hash_ptr(const void *p)
{
    return (size_t)(((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull >> 32) % BUCKETS;
}

static size_t hash_cls(size_t c)
{
    return (size_t)((c / SMALL_GRANULE) * 0x9E3779B97F4A7C15ull >> 32) % BUCKETS;
}

static void note_peak(void)
{
    size_t t = g_stats.bytes_in_use + g_stats.bytes_cached;
    if (t > g_stats.peak_bytes)
        g_stats.peak_bytes = t;
}

/* Take a cached block of class c, or NULL. Lock held. */
static node *take_cached(size_t c)
{
    node **pp = &g_free[hash_cls(c)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->cls == c) {
            node *n = *pp;
            *pp = n->next;
            return n;
        }
    return NULL;
}

static void trim_locked(void)
{
    for (int b = 0; b < BUCKETS; b++) {
        node *n = g_free[b];
        while (n) {
            node *next = n->next;
            cudaFree(n->ptr);
            g_stats.bytes_cached -= n->cls;
            free(n);
            n = next;
        }
        g_free[b] = NULL;
    }
}

void *cpdit_cuda_alloc(size_t bytes)
{
    size_t c = cpdit_cuda_alloc_class(bytes);
    pthread_mutex_lock(&g_lock);
    node *n = take_cached(c);
    if (n) {
        g_stats.cache_hits++;
        g_stats.bytes_cached -= c;
    } else {
        void *p = NULL;
        if (cudaMalloc(&p, c) != cudaSuccess) {
            cudaGetLastError(); /* clear, release the cache, retry once */
            trim_locked();
            if (cudaMalloc(&p, c) != cudaSuccess) {
                cudaGetLastError();
                pthread_mutex_unlock(&g_lock);
                return NULL;
            }
        }
        n = malloc(sizeof *n);
        if (!n) {
            cudaFree(p);
            pthread_mutex_unlock(&g_lock);
            return NULL;
        }
        n->ptr = p;
        n->cls = c;
        g_stats.device_allocs++;
    }
    size_t h = hash_ptr(n->ptr);
    n->next = g_used[h];
    g_used[h] = n;
    g_stats.bytes_in_use += c;
    note_peak();
    pthread_mutex_unlock(&g_lock);
    return n->ptr;
}

void cpdit_cuda_free(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&g_lock);
    node **pp = &g_used[hash_ptr(p)];
    while (*pp && (*pp)->ptr != p)
        pp = &(*pp)->next;
    node *n = *pp;
    if (!n) {
        pthread_mutex_unlock(&g_lock);
        fprintf(stderr, "cpdit: cuda allocator: free of %p, which it did not allocate (ignored)\n",
                p);
        return;
    }
    *pp = n->next;
    g_stats.bytes_in_use -= n->cls;
    size_t h = hash_cls(n->cls);
    n->next = g_free[h];
    g_free[h] = n;
    g_stats.bytes_cached += n->cls;
    pthread_mutex_unlock(&g_lock);
}

void cpdit_cuda_alloc_trim(void)
{
    pthread_mutex_lock(&g_lock);
    trim_locked();
    pthread_mutex_unlock(&g_lock);
}

void cpdit_cuda_alloc_get_stats(cpdit_cuda_alloc_stats *s)
{
    pthread_mutex_lock(&g_lock);
    *s = g_stats;
    pthread_mutex_unlock(&g_lock);
}
