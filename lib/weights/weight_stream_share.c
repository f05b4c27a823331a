/* weight_stream_share.c — the streaming slots of the lockstep peers of a node, shared: each
 * streamed group (a transformer block) is read and made once per node instead of once per
 * rank, into one of two slots that all the peers map (weight_stream_ops: an MPI-3 shared
 * window, lib/weights/weight_shared_mpi.c), and used by all of them.
 *
 * Protocol. The peers acquire the same groups in the same order (the ranks of one CP group:
 * every block in lockstep), so the k-th group acquired (k = 1, 2, ..., counting only acquires
 * that change the group) is the same in every process. It lives in slot k mod 2 and is made
 * by member (k - 1) mod n, "its packer" (the peers take turns: the packing CPU and the reads
 * are spread over them). A control block at the start of the memory (zero at first) holds:
 *   acquired[m]  the number k of the group member m uses now. Acquiring k means being done
 *                with k - 1, so slot k mod 2 (which held k - 2) is free once every
 *                acquired[m] >= k - 1;
 *   slot[s]      one 64-bit word (k, group, state): the packer writes FILLING, makes the
 *                group, then READY (or FAILED); the others wait for (k, g, READY | FAILED)
 *                and then use the slot in place (the backend's weight_create with fill 0).
 *                A prefetch that guessed another group is made again by its packer; nobody
 *                reads a slot whose word does not name the group they want;
 *   gen          a generation counter bumped after every change: waits sleep on it (a futex,
 *                timed, so a lost wake costs at most WS_WAIT_MS), never spin;
 *   abandon      set by a process that stops following the order (an error left the peers
 *                at different blocks, a new grid, close): every waiter wakes, and all make
 *                their groups in their own slots from then on, so none waits for a group that
 *                will never come.
 * With prefetch on, the packer of k + 1 starts a helper thread at its acquire of k: it waits
 * until slot (k + 1) mod 2 is free and makes group (g + 1) mod n_groups there while the peers
 * compute with k. The others start nothing: they find the group made when they acquire it.
 */
#include "config.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "lib/weights/weight_stream_share.h"

/* Most processes sharing one pair of slots (the ranks of a CP group on one node). */
#define WS_MAX_MEMBERS 256
/* Longest sleep of a wait before it looks again (a wake lost costs no more). */
#define WS_WAIT_MS 100
/* The control block, then the slots, each on a page boundary. */
#define WS_PAGE 4096
/* Slot word: seq << 24 | group << 4 | state. */
#define WS_GROUP_BITS 20
#define WS_STATE_BITS 4

enum { WS_EMPTY = 0, WS_FILLING, WS_READY, WS_FAILED };

typedef struct ws_ctl {
    _Atomic uint32_t gen;
    _Atomic uint32_t abandon;
    _Atomic uint64_t slot[2];
    _Atomic int64_t acquired[WS_MAX_MEMBERS];
} ws_ctl;

_Static_assert(sizeof(ws_ctl) <= WS_PAGE, "the control block fits its page");

struct weight_stream_share {
    void *mem;            /* the shared memory: control block, slot 0, slot 1 */
    size_t bytes;
    ws_ctl *ctl;
    char *slot[2];
    int member, members;
    int64_t seq;          /* k of the group this process uses now (0: none yet) */
    int broken;           /* abandoned: own slots from now on */
    /* the helper thread making group pf_group as k = pf_seq */
    pthread_t thread;
    int running;
    int64_t pf_seq;
    int pf_group;
    int pf_abandoned;     /* it stopped: the sharing was abandoned before the slot was free */
    cpdit_status pf_st;
    cpdit_error pf_err;
    double pf_seconds;
    unsigned long long pf_bytes;
    const weight_loader *wl;
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t slot_word(int64_t seq, int group, int state)
{
    return (uint64_t)seq << (WS_GROUP_BITS + WS_STATE_BITS) |
           (uint64_t)group << WS_STATE_BITS | (uint64_t)state;
}

static int64_t word_seq(uint64_t w) { return (int64_t)(w >> (WS_GROUP_BITS + WS_STATE_BITS)); }
static int word_group(uint64_t w) { return (int)(w >> WS_STATE_BITS & ((1u << WS_GROUP_BITS) - 1)); }
static int word_state(uint64_t w) { return (int)(w & ((1u << WS_STATE_BITS) - 1)); }

/* ------------------------------------------------------------------ waking and waiting */

static void ws_wake(ws_ctl *c)
{
    atomic_fetch_add(&c->gen, 1);
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)&c->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#endif
}

/* Sleep until gen moves from seen (or WS_WAIT_MS). */
static void ws_sleep(ws_ctl *c, uint32_t seen)
{
#ifdef __linux__
    struct timespec ts = {0, WS_WAIT_MS * 1000000L};
    syscall(SYS_futex, (uint32_t *)&c->gen, FUTEX_WAIT, seen, &ts, NULL, 0);
#else
    (void)seen;
    struct timespec ts = {0, 1000000L}; /* no futex: look every millisecond */
    (void)c;
    nanosleep(&ts, NULL);
#endif
}

/* Wait until slot (k mod 2) is free: every member uses k - 1 or later. 0: abandoned
 * before (a slot already free or made is used even after an abandon: a peer that finished
 * and closed leaves nobody waiting for what it made). */
static int wait_free(const struct weight_stream_share *ss, int64_t k)
{
    ws_ctl *c = ss->ctl;
    for (;;) {
        const uint32_t seen = atomic_load(&c->gen);
        int all = 1;
        for (int m = 0; m < ss->members && all; m++)
            all = atomic_load(&c->acquired[m]) >= k - 1;
        if (all)
            return 1;
        if (atomic_load(&c->abandon))
            return 0;
        ws_sleep(c, seen);
    }
}

/* Wait until slot (k mod 2) holds group g as k, made or failed: its state, or -1 when
 * abandoned before. */
static int wait_made(const struct weight_stream_share *ss, int64_t k, int g)
{
    ws_ctl *c = ss->ctl;
    for (;;) {
        const uint32_t seen = atomic_load(&c->gen);
        const uint64_t w = atomic_load(&c->slot[k & 1]);
        if (word_seq(w) == k && word_group(w) == g &&
            (word_state(w) == WS_READY || word_state(w) == WS_FAILED))
            return word_state(w);
        if (atomic_load(&c->abandon))
            return -1;
        ws_sleep(c, seen);
    }
}

/* ------------------------------------------------------------------ making a group */

/* Make group g as k into its slot (free: wait_free said so), the weights into p->w (next 0)
 * or p->next_w (next 1); publish READY or FAILED. *bytes: bytes read from the files. */
static cpdit_status fill_slot(const weight_loader *wl, struct weight_stream_share *ss,
                              int64_t k, int g, int next, unsigned long long *bytes,
                              cpdit_error *err)
{
    ws_ctl *c = ss->ctl;
    char *slot = ss->slot[k & 1];
    atomic_store(&c->slot[k & 1], slot_word(k, g, WS_FILLING));
    cpdit_status st = CPDIT_OK;
    for (size_t i = 0; i < wl->n_params && !st; i++) {
        weight_param *p = wl->params[i];
        if (p->kind != WEIGHT_MATRIX || p->group != g)
            continue;
        st = weight_param_create(wl, p, slot + p->group_offset, 1, next ? &p->next_w : &p->w,
                                 err);
        *bytes += p->nelem * cpdit_dtype_size(p->t->dtype);
    }
    atomic_store(&c->slot[k & 1], slot_word(k, g, st ? WS_FAILED : WS_READY));
    ws_wake(c);
    return st;
}

/* Group g's weights over slot (k mod 2), made by a peer (fill 0: nothing is read). */
static cpdit_status use_slot(weight_loader *wl, struct weight_stream_share *ss, int64_t k,
                             int g, cpdit_error *err)
{
    cpdit_status st = CPDIT_OK;
    for (size_t i = 0; i < wl->n_params && !st; i++) {
        weight_param *p = wl->params[i];
        if (p->kind == WEIGHT_MATRIX && p->group == g)
            st = weight_param_create(wl, p, ss->slot[k & 1] + p->group_offset, 0, &p->w, err);
    }
    return st;
}

static void free_group(weight_loader *wl, int g, int next)
{
    for (size_t i = 0; i < wl->n_params; i++) {
        weight_param *p = wl->params[i];
        cpdit_weight **w = next ? &p->next_w : &p->w;
        if (p->kind == WEIGHT_MATRIX && p->group == g && *w) {
            wl->be->weight_free(*w);
            *w = NULL;
            if (!next && p->wdst)
                *p->wdst = NULL;
        }
    }
}

static void publish_group(weight_loader *wl, int g)
{
    for (size_t i = 0; i < wl->n_params; i++) {
        weight_param *p = wl->params[i];
        if (p->kind == WEIGHT_MATRIX && p->group == g && p->wdst)
            *p->wdst = p->w;
    }
}

/* ------------------------------------------------------------------ the helper thread */

static void *helper_main(void *arg)
{
    struct weight_stream_share *ss = arg;
    if (!wait_free(ss, ss->pf_seq)) {
        ss->pf_abandoned = 1;
        return NULL;
    }
    const double t0 = now_seconds();
    ss->pf_st = fill_slot(ss->wl, ss, ss->pf_seq, ss->pf_group, 1, &ss->pf_bytes, &ss->pf_err);
    ss->pf_seconds = now_seconds() - t0;
    return NULL;
}

/* Wait for the helper and count its work (stall: the compute thread waited). */
static void helper_join(weight_loader *wl, struct weight_stream_share *ss)
{
    if (!ss->running)
        return;
    const double t0 = now_seconds();
    pthread_join(ss->thread, NULL);
    ss->running = 0;
    wl->stall_seconds += now_seconds() - t0;
    wl->create_seconds += ss->pf_seconds;
    wl->bytes_read += ss->pf_bytes;
}

/* Join and free what it made (nobody asked for it, or the sharing stopped). */
static void helper_discard(weight_loader *wl, struct weight_stream_share *ss)
{
    helper_join(wl, ss);
    if (ss->pf_group >= 0)
        free_group(wl, ss->pf_group, 1);
    ss->pf_group = -1;
    ss->pf_seq = 0;
}

static void helper_start(weight_loader *wl, struct weight_stream_share *ss, int64_t k, int g)
{
    ss->wl = wl;
    ss->pf_seq = k;
    ss->pf_group = g;
    ss->pf_abandoned = 0;
    ss->pf_st = CPDIT_OK;
    cpdit_error_clear(&ss->pf_err);
    ss->pf_seconds = 0.0;
    ss->pf_bytes = 0;
    ss->running = pthread_create(&ss->thread, NULL, helper_main, ss) == 0;
    if (!ss->running) { /* made at acquire then */
        ss->pf_group = -1;
        ss->pf_seq = 0;
    }
}

/* ------------------------------------------------------------------ the loader's side */

int weight_stream_share_wanted(const weight_loader *wl)
{
    if (wl->share)
        return !wl->share->broken;
    return !wl->share_off && wl->lockstep_count > 1 && wl->have_arena_ops &&
           wl->arena_ops.stream.alloc && wl->be->host_memory && wl->largest_group_bytes &&
           wl->n_groups < (1 << WS_GROUP_BITS);
}

static size_t page_round(size_t n)
{
    return (n + WS_PAGE - 1) / WS_PAGE * WS_PAGE;
}

/* The shared memory, collective over the peers; 0 with share_off set when there are none. */
static cpdit_status share_begin(weight_loader *wl, cpdit_error *err)
{
    const weight_stream_ops *o = &wl->arena_ops.stream;
    const size_t slot_bytes = page_round(wl->largest_group_bytes);
    const size_t bytes = WS_PAGE + 2 * slot_bytes;
    int member = 0, members = 1;
    void *mem = o->alloc(o->ctx, wl->lockstep_first, wl->lockstep_count, wl->lockstep_me,
                         bytes, WS_PAGE, &member, &members, err);
    if (!mem) {
        wl->share_off = 1;
        return members > 1 ? (err ? err->status : CPDIT_ERR_RUNTIME) : CPDIT_OK;
    }
    struct weight_stream_share *ss = calloc(1, sizeof *ss);
    if (!ss || members > WS_MAX_MEMBERS) {
        /* every peer sees the same count; a calloc failure is this process's alone: it
         * abandons, so the others do not wait for it */
        ((ws_ctl *)mem)->abandon = 1;
        ws_wake(mem);
        free(ss);
        o->release(o->ctx, mem, bytes);
        wl->share_off = 1;
        return CPDIT_OK;
    }
    ss->mem = mem;
    ss->bytes = bytes;
    ss->ctl = mem;
    ss->slot[0] = (char *)mem + WS_PAGE;
    ss->slot[1] = ss->slot[0] + slot_bytes;
    ss->member = member;
    ss->members = members;
    ss->pf_group = -1;
    wl->share = ss;
    wl->stream_sharers = members;
    return CPDIT_OK;
}

/* Stop sharing here: the helper joined, what it made freed, own slots from now on. */
static void share_stop(weight_loader *wl, struct weight_stream_share *ss)
{
    if (!ss->broken) {
        atomic_store(&ss->ctl->abandon, 1);
        ws_wake(ss->ctl);
    }
    ss->broken = 1;
    helper_discard(wl, ss);
    wl->stream_sharers = 1;
}

int weight_stream_share_acquire(weight_loader *wl, int g, cpdit_status *stp, cpdit_error *err)
{
    *stp = CPDIT_OK;
    if (!wl->share) {
        weight_loader_drop_current(wl);
        if ((*stp = share_begin(wl, err)))
            return 1;
        if (!wl->share)
            return 0;
    }
    struct weight_stream_share *ss = wl->share;
    if (ss->broken)
        return 0;
    ws_ctl *c = ss->ctl;
    const int64_t k = ss->seq + 1;
    const int packer = (int)((k - 1) % ss->members);
    weight_loader_drop_current(wl); /* done with k - 1 */
    atomic_store(&c->acquired[ss->member], k);
    ws_wake(c);
    cpdit_status st = CPDIT_OK;
    if (packer == ss->member) {
        int made = 0;
        if (ss->running || ss->pf_group >= 0) {
            const int ahead = ss->pf_seq == k && ss->pf_group == g;
            helper_join(wl, ss);
            if (ss->pf_abandoned) {
                share_stop(wl, ss);
                return 0;
            }
            if (ahead && ss->pf_st) { /* failed: the peers saw FAILED for (k, g) too */
                st = ss->pf_st;
                if (err)
                    *err = ss->pf_err;
                helper_discard(wl, ss);
            } else if (ahead) {
                for (size_t i = 0; i < wl->n_params; i++) {
                    weight_param *p = wl->params[i];
                    if (p->kind == WEIGHT_MATRIX && p->group == g) {
                        p->w = p->next_w;
                        p->next_w = NULL;
                    }
                }
                ss->pf_group = -1;
                wl->prefetched_groups++;
                made = 1;
            } else { /* it guessed another group (the order changed): made again below */
                helper_discard(wl, ss);
            }
        }
        if (!made && !st) {
            const double t0 = now_seconds();
            if (!wait_free(ss, k)) {
                share_stop(wl, ss);
                return 0;
            }
            unsigned long long bytes = 0;
            st = fill_slot(wl, ss, k, g, 0, &bytes, err);
            const double dt = now_seconds() - t0;
            wl->create_seconds += dt;
            wl->stall_seconds += dt;
            wl->bytes_read += bytes;
        }
    } else {
        const double t0 = now_seconds();
        const int state = wait_made(ss, k, g);
        wl->stall_seconds += now_seconds() - t0;
        if (state < 0) {
            share_stop(wl, ss);
            return 0;
        }
        if (state == WS_FAILED)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, wl->where,
                                 "another rank of this node failed to make a streamed block "
                                 "(its message says why)");
        else
            st = use_slot(wl, ss, k, g, err);
        if (!st)
            wl->peer_groups++;
    }
    if (st) { /* the peers may be at another point now: stop sharing, for every one */
        free_group(wl, g, 0);
        publish_group(wl, g);
        share_stop(wl, ss);
        *stp = st;
        return 1;
    }
    ss->seq = k;
    wl->current_group = g;
    publish_group(wl, g);
    if (wl->prefetch && wl->n_groups > 1 && (int)(k % ss->members) == ss->member)
        helper_start(wl, ss, k + 1, (g + 1) % wl->n_groups);
    return 1;
}

void weight_stream_share_abandon(weight_loader *wl)
{
    if (wl->share && !wl->share->broken)
        share_stop(wl, wl->share);
}

void weight_stream_share_close(weight_loader *wl)
{
    struct weight_stream_share *ss = wl->share;
    if (!ss)
        return;
    share_stop(wl, ss);
    weight_loader_drop_current(wl); /* weights over the memory about to go */
    const weight_stream_ops *o = &wl->arena_ops.stream;
    o->release(o->ctx, ss->mem, ss->bytes);
    free(ss);
    wl->share = NULL;
}

size_t weight_stream_share_bytes(const weight_loader *wl)
{
    return wl->share ? wl->share->bytes : 0;
}
