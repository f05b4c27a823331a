/* test_weight_stream_share.c — the shared streaming slots' protocol (lib/weights/
 * weight_stream_share.c) with threads standing for the ranks of a node: each "peer" has its
 * own weight loader over the same in-memory BF16 model, streaming (budget 1 byte), and the
 * peers share one pair of slots through test stream ops (one heap block for all, the
 * collective alloc/release as a barrier). Each acquires the same sequence of groups and runs
 * every matrix of the group on a fixed input; the outputs must equal those of a resident
 * loader bitwise. Cases:
 *   A  2 peers, prefetch, FLUX's order (0, 1, ..., G-1, 0, ...): every peer uses groups made
 *      by the other, slots shared by 2;
 *   B  3 peers, prefetch, an order the prefetch guesses wrong half the time, peers at
 *      different points (random sleeps between acquires);
 *   C  2 peers, no prefetch, random sleeps;
 *   D  3 peers, prefetch, random sleeps, peer 1 abandons the sharing at step 7: no peer
 *      waits forever, all end with their own slots and the same outputs.
 * A hang fails the test (alarm).
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "lib/weights/weight_loader.h"
#include "tests/test_util.h"

#define N_GROUPS 4
#define PER_GROUP 2
#define N_MATRICES (N_GROUPS * PER_GROUP)
#define X_ROWS 3            /* rows of the input each matrix is run on */
#define MAX_PEERS 3
#define MAX_STEPS 40
#define HANG_SECONDS 120

typedef struct model {
    safetensors_tensor t[N_MATRICES];
    uint16_t *data[N_MATRICES];
    char names[N_MATRICES][32];
    float *x;               /* (X_ROWS, max cols) */
    float *ref[N_MATRICES]; /* resident outputs (X_ROWS, rows) */
} model;

static const safetensors_tensor *model_find(void *ctx, const char *name)
{
    model *m = ctx;
    for (int i = 0; i < N_MATRICES; i++)
        if (!strcmp(m->t[i].name, name))
            return &m->t[i];
    return NULL;
}

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Matrix i: (rows, cols), sizes differing per group so the slot is the largest group's. */
static void shape_of(int i, int *rows, int *cols)
{
    *rows = 16 + 8 * (i % 5);
    *cols = 32 + 16 * (i / PER_GROUP);
}

static void model_make(model *m)
{
    uint64_t s = 12345;
    for (int i = 0; i < N_MATRICES; i++) {
        int r, c;
        shape_of(i, &r, &c);
        snprintf(m->names[i], sizeof m->names[i], "m%d.weight", i);
        m->data[i] = malloc((size_t)r * c * sizeof(uint16_t));
        for (int k = 0; k < r * c; k++) /* bf16 of a float in [-1, 1) */
            m->data[i][k] = (uint16_t)(0x3c00 + rng_next(&s) % 0x300) |
                            (uint16_t)(rng_next(&s) & 1 ? 0x8000 : 0);
        safetensors_tensor *t = &m->t[i];
        memset(t, 0, sizeof *t);
        t->name = m->names[i];
        t->file = "memory";
        t->dtype = CPDIT_DTYPE_BF16;
        t->ndim = 2;
        t->shape[0] = r;
        t->shape[1] = c;
        t->nelem = (size_t)r * c;
        t->data = m->data[i];
        t->nbytes = t->nelem * 2;
    }
    const int max_cols = 32 + 16 * (N_GROUPS - 1);
    m->x = malloc((size_t)X_ROWS * max_cols * sizeof(float));
    for (int k = 0; k < X_ROWS * max_cols; k++)
        m->x[k] = (float)((int)(rng_next(&s) % 2001) - 1000) / 1000.0f;
}

/* One loader over the model: matrix i in group i / PER_GROUP, published into w[i]. */
static cpdit_status loader_open(weight_loader *wl, model *m, const cpdit_weight **w,
                                cpdit_error *err)
{
    cpdit_status st = weight_loader_open_tensors(wl, model_find, m, "test", NULL, err);
    for (int i = 0; i < N_MATRICES && !st; i++) {
        int r, c;
        shape_of(i, &r, &c);
        st = weight_loader_add(wl, i / PER_GROUP, WEIGHT_MATRIX, m->names[i], NULL, r, 0, r, c,
                               0, (void *)&w[i], NULL, "", NULL, err);
    }
    return st;
}

/* be->linear of matrix i on x: one call at a time (the test compares, it does not race).
 * x and y are host fp32: the default backend is a host fp32 table (main checks). */
static pthread_mutex_t linear_mu = PTHREAD_MUTEX_INITIALIZER;

static int run_matrix(const model *m, int i, const cpdit_weight *w, float *y)
{
    const cpdit_backend *be = cpdit_backend_default();
    int r, c;
    shape_of(i, &r, &c);
    cpdit_error err;
    cpdit_error_clear(&err);
    const int max_cols = 32 + 16 * (N_GROUPS - 1);
    pthread_mutex_lock(&linear_mu);
    const cpdit_status st = w ? be->linear(cpdit_host_buf(y), r, cpdit_host_buf(m->x), max_cols,
                                           w, NULL, X_ROWS, c, r, 0, &err)
                              : CPDIT_ERR_RUNTIME;
    pthread_mutex_unlock(&linear_mu);
    return st == CPDIT_OK;
}

/* ------------------------------------------------------------------ simulated shared memory */

typedef struct sim {
    pthread_mutex_t mu;
    pthread_barrier_t bar;
    void *mem;
    int users;
} sim;

static void *sim_alloc(void *ctx, int first, int count, int me, size_t bytes, size_t zero_bytes,
                       int *member, int *members, cpdit_error *err)
{
    (void)err;
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (!s->mem) {
        s->mem = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
        if (s->mem)
            memset(s->mem, 0, zero_bytes);
    }
    s->users++;
    pthread_mutex_unlock(&s->mu);
    pthread_barrier_wait(&s->bar);
    *member = me - first;
    *members = count;
    return s->mem;
}

static void sim_release(void *ctx, void *mem, size_t bytes)
{
    (void)mem;
    (void)bytes;
    sim *s = ctx;
    pthread_barrier_wait(&s->bar);
    pthread_mutex_lock(&s->mu);
    if (--s->users == 0) {
        free(s->mem);
        s->mem = NULL;
    }
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------------ the peers */

typedef struct peer {
    model *m;
    sim *s;
    int me, n;
    int prefetch;
    int jitter;         /* sleep up to this many microseconds before each acquire */
    int abandon_at;     /* step at which this peer abandons (-1: never) */
    const int *seq;
    int steps;
    /* results */
    int errors, bad, runs;
    int sharers_mid;    /* stream_sharers after the first acquire */
    int sharers_end;
    unsigned long long peer_groups;
} peer;

static void *peer_main(void *arg)
{
    peer *P = arg;
    weight_loader wl;
    const cpdit_weight *w[N_MATRICES] = {0};
    cpdit_error err;
    cpdit_error_clear(&err);
    weight_arena_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.stream.alloc = sim_alloc;
    ops.stream.release = sim_release;
    ops.stream.ctx = P->s;
    uint64_t rs = 777 + (uint64_t)P->me;
    cpdit_status st = loader_open(&wl, P->m, w, &err);
    if (!st) {
        weight_loader_set_arena(&wl, &ops);
        weight_loader_set_prefetch(&wl, P->prefetch);
        st = weight_loader_prepare(&wl, 1, CPDIT_WEIGHT_NATIVE, &err);
    }
    if (st || wl.resident) {
        fprintf(stderr, "peer %d: loader: %s\n", P->me, err.what);
        P->errors++;
        return NULL;
    }
    weight_loader_set_lockstep(&wl, 10, P->n, 10 + P->me);
    float y[X_ROWS * 64];
    for (int k = 0; k < P->steps; k++) {
        if (k == P->abandon_at)
            weight_loader_stream_abandon(&wl);
        if (P->jitter)
            usleep((useconds_t)(rng_next(&rs) % (uint64_t)P->jitter));
        const int g = P->seq[k];
        if (weight_loader_acquire(&wl, g, &err)) {
            fprintf(stderr, "peer %d step %d: %s\n", P->me, k, err.what);
            P->errors++;
            break;
        }
        if (k == 0)
            P->sharers_mid = wl.stream_sharers;
        for (int i = g * PER_GROUP; i < (g + 1) * PER_GROUP; i++) {
            int r, c;
            shape_of(i, &r, &c);
            if (!run_matrix(P->m, i, w[i], y) ||
                memcmp(y, P->m->ref[i], (size_t)X_ROWS * r * sizeof(float)))
                P->bad++;
            P->runs++;
        }
    }
    P->sharers_end = wl.stream_sharers;
    P->peer_groups = wl.peer_groups;
    weight_loader_close(&wl);
    return NULL;
}

/* Run n peers over seq; check the outputs; return the peers' results in out. */
static void run_case(const char *name, model *m, int n, int prefetch, int jitter,
                     int abandon_peer, int abandon_at, const int *seq, int steps, peer *out)
{
    sim s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_barrier_init(&s.bar, NULL, (unsigned)n);
    pthread_t th[MAX_PEERS];
    for (int p = 0; p < n; p++) {
        peer *P = &out[p];
        memset(P, 0, sizeof *P);
        P->m = m;
        P->s = &s;
        P->me = p;
        P->n = n;
        P->prefetch = prefetch;
        P->jitter = jitter;
        P->abandon_at = p == abandon_peer ? abandon_at : -1;
        P->seq = seq;
        P->steps = steps;
        CHECK(pthread_create(&th[p], NULL, peer_main, P) == 0);
    }
    for (int p = 0; p < n; p++)
        pthread_join(th[p], NULL);
    int bad = 0;
    for (int p = 0; p < n; p++) {
        const peer *P = &out[p];
        CHECK_MSG(P->errors == 0 && P->bad == 0 && P->runs == steps * PER_GROUP,
                  "%s: peer %d: %d errors, %d of %d matrix outputs differ from resident", name,
                  p, P->errors, P->bad, P->runs);
        bad += P->bad + P->errors;
    }
    printf("%s: %d peers, %d steps: outputs %s; groups made by another peer:", name, n, steps,
           bad ? "DIFFER from resident" : "= resident bitwise");
    for (int p = 0; p < n; p++)
        printf(" %llu", out[p].peer_groups);
    printf("; sharers at the end:");
    for (int p = 0; p < n; p++)
        printf(" %d", out[p].sharers_end);
    printf("\n");
    pthread_barrier_destroy(&s.bar);
    pthread_mutex_destroy(&s.mu);
    CHECK(s.mem == NULL); /* released by the last peer */
}

int main(void)
{
    alarm(HANG_SECONDS); /* a peer waiting forever kills the test */
    if (!cpdit_backend_host_f32(cpdit_backend_default()))
        return 77; /* the loaders' backend (the default) must take host fp32 arrays */
    model m;
    model_make(&m);
    /* resident reference outputs */
    weight_loader ref;
    const cpdit_weight *w[N_MATRICES] = {0};
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(loader_open(&ref, &m, w, &err) == CPDIT_OK);
    CHECK(weight_loader_prepare(&ref, (size_t)1 << 30, CPDIT_WEIGHT_NATIVE, &err) == CPDIT_OK);
    CHECK(ref.resident);
    for (int i = 0; i < N_MATRICES; i++) {
        int r, c;
        shape_of(i, &r, &c);
        m.ref[i] = malloc((size_t)X_ROWS * r * sizeof(float));
        CHECK(run_matrix(&m, i, w[i], m.ref[i]));
    }
    weight_loader_close(&ref);

    int flux[MAX_STEPS], odd[MAX_STEPS];
    const int steps = 3 * N_GROUPS + 1;
    for (int k = 0; k < steps; k++)
        flux[k] = k % N_GROUPS;
    /* an order that changes: consecutive groups differ, the prefetch's guess (g + 1) is
     * wrong about half the time */
    static const int odd_order[] = {0, 2, 1, 3, 0, 1, 3, 2, 0, 3, 1, 2, 1, 0, 2, 3};
    const int odd_steps = (int)(sizeof odd_order / sizeof odd_order[0]);
    memcpy(odd, odd_order, sizeof odd_order);

    peer out[MAX_PEERS];
    run_case("A", &m, 2, 1, 0, -1, -1, flux, steps, out);
    for (int p = 0; p < 2; p++)
        CHECK_MSG(out[p].sharers_end == 2 && out[p].peer_groups > 0,
                  "A: peer %d: sharers %d, %llu groups from the other", p, out[p].sharers_end,
                  out[p].peer_groups);
    CHECK(out[0].peer_groups + out[1].peer_groups == (unsigned long long)steps);
    run_case("B", &m, 3, 1, 3000, -1, -1, odd, odd_steps, out);
    for (int p = 0; p < 3; p++)
        CHECK_MSG(out[p].sharers_end == 3 && out[p].peer_groups > 0,
                  "B: peer %d: sharers %d, %llu groups from the others", p, out[p].sharers_end,
                  out[p].peer_groups);
    run_case("C", &m, 2, 0, 2000, -1, -1, flux, steps, out);
    for (int p = 0; p < 2; p++)
        CHECK(out[p].sharers_end == 2 && out[p].peer_groups > 0);
    run_case("D", &m, 3, 1, 3000, 1, 7, flux, steps, out);
    for (int p = 0; p < 3; p++)
        CHECK_MSG(out[p].sharers_mid == 3 && out[p].sharers_end == 1,
                  "D: peer %d: sharers %d after the first step, %d at the end (want 3, 1)", p,
                  out[p].sharers_mid, out[p].sharers_end);
    for (int i = 0; i < N_MATRICES; i++) {
        free(m.data[i]);
        free(m.ref[i]);
    }
    free(m.x);
    TEST_MAIN_END();
}
