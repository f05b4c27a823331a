/* probe_shapes.c — linear-layer and attention times at one model's own shapes
 * (probe_shapes.h). */
#include "topology/probe_shapes.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/job_run.h"
#include "kernels/backend.h"

#define WHERE_SHAPES "probe: model shapes"
#define REPS 5
#define REPS_QUICK 3
#define MAX_REPS 16
#define MAX_CALLS 100000
#define TARGET_S 0.1 /* per timed window: several scheduler slices, so shared cores average */
#define TARGET_S_QUICK 0.03
#define SEQ_MAX 16    /* distinct GEMMs of one forward */
#define MAX_CP 64
#define MAX_ATTN 256
#define MAX_WEIGHTS 64
#define ELEM_MAX_ROWS 1024 /* element-wise work timed on at most this many rows, scaled */
#define ELEM_MAX_ROWS_QUICK 256

/* One GEMM of a forward: y (m, n) = x (m, k) W^T, `count` times per forward. */
typedef struct gemm_step {
    int m, k, n, count;
    int m_cut;             /* rows timed */
    const cpdit_weight *w;
} gemm_step;

/* The linear layers of one forward on a rank of a CP group of cp ranks, and the element-wise
 * work of its blocks (norms, modulation, RoPE, GELU, residuals) over rows_cut of its rows. */
typedef struct linseq {
    int cp, tl, il;        /* rank 0's sharded text and image tokens (model_plan_rank_tokens) */
    gemm_step g[SEQ_MAX];
    int n;
    double flops, flops_cut, t;
    int rows_cut;          /* element-wise rows timed (<= tl + il) */
    double t_elem;         /* element-wise time of the whole forward */
    int E, F, H, D;
    int n_kinds;
    model_block_ops ops[MODEL_PLAN_MAX_BLOCK_KINDS]; /* element-wise work per block kind */
} linseq;

typedef struct attn_shape {
    int sq, skv, h;
    int sq_cut, h_cut;
    double t;
} attn_shape;

typedef struct shape_list {
    linseq lin[MAX_CP];
    int nl;
    attn_shape a[MAX_ATTN];
    int na;
    double chunk_s, sync_s; /* sync: per small all-reduce between chunks of chunk_s work */
} shape_list;

static void seq_add(linseq *q, int m, int k, int n, int count)
{
    if (m <= 0 || count <= 0 || q->n >= SEQ_MAX)
        return;
    q->g[q->n++] = (gemm_step){m, k, n, count, m, NULL};
}

static void add_attn(shape_list *L, int sq, int skv, int h)
{
    if (sq <= 0 || skv <= 0)
        return;
    for (int i = 0; i < L->na; i++)
        if (L->a[i].sq == sq && L->a[i].skv == skv && L->a[i].h == h)
            return;
    if (L->na < MAX_ATTN)
        L->a[L->na++] = (attn_shape){sq, skv, h, sq, h, 0};
}

/* Rows of a GEMM actually timed: all, or enough for cap FLOPs (at least
 * PROBE_SHAPES_MIN_ROWS). */
static int gemm_cut(const gemm_step *g, double cap)
{
    const double per_row = 2.0 * g->k * g->n;
    int m = g->m;
    if (per_row * m > cap) {
        m = (int)(cap / per_row);
        m = m < PROBE_SHAPES_MIN_ROWS ? PROBE_SHAPES_MIN_ROWS : m;
        m = m > g->m ? g->m : m;
    }
    return m;
}

/* Heads and query rows of an attention call actually timed: all, or one head and enough rows
 * for cap FLOPs. */
static void attn_cut(attn_shape *a, int D, double cap)
{
    const double per_row_head = 4.0 * a->skv * D;
    a->h_cut = a->h;
    a->sq_cut = a->sq;
    if (per_row_head * a->sq * a->h > cap) {
        a->h_cut = 1;
        if (per_row_head * a->sq > cap) {
            int sq = (int)(cap / per_row_head);
            sq = sq < PROBE_SHAPES_MIN_ROWS ? PROBE_SHAPES_MIN_ROWS : sq;
            a->sq_cut = sq > a->sq ? a->sq : sq;
        }
    }
}

static cpdit_status collect(shape_list *L, const model_plan_shape *s, int ranks, double cap,
                            cpdit_error *err)
{
    memset(L, 0, sizeof *L);
    const int E = s->hidden, F = s->mlp, H = s->heads;
    for (int c = 1; c <= ranks && L->nl < MAX_CP; c++) {
        if (ranks % c)
            continue;
        linseq *q = &L->lin[L->nl++];
        q->cp = c;
        cpdit_status st = model_plan_rank_tokens(s, c, 0, &q->tl, &q->il, err);
        if (st)
            return st;
        for (int i = 0; i < s->n_gemm; i++) {
            const model_gemm *g = &s->gemm[i];
            seq_add(q, model_plan_gemm_rows(s, g, q->tl, q->il), g->k, g->n, g->count);
        }
        q->E = E, q->F = F, q->H = H, q->D = s->head_dim;
        q->n_kinds = s->n_block_kinds;
        memcpy(q->ops, s->block_ops, sizeof q->ops);
        const int max_rows = cap < PROBE_SHAPES_CAP_FLOPS ? ELEM_MAX_ROWS_QUICK : ELEM_MAX_ROWS;
        q->rows_cut = q->tl + q->il < max_rows ? q->tl + q->il : max_rows;
        for (int i = 0; i < q->n; i++) {
            gemm_step *g = &q->g[i];
            g->m_cut = gemm_cut(g, cap);
            q->flops += 2.0 * g->m * g->k * g->n * g->count;
            q->flops_cut += 2.0 * g->m_cut * g->k * g->n * g->count;
        }
        for (int k = 0; k < s->n_attn; k++) { /* self-attention over the sharded sequence */
            const model_attention_kind *a = &s->attn[k];
            const int S = (int)a->q_tokens;
            for (int R = 1; a->sharded && R <= c; R++) {
                if (c % R)
                    continue;
                const int U = c / R, h = (H + U - 1) / U, G = (S + R - 1) / R;
                add_attn(L, G, S, h); /* R = 1 (Ulysses or local), or the ring all-gather */
                if (R > 1)
                    add_attn(L, G, G, h); /* one ring block */
            }
        }
        for (int k = 0; k < s->n_attn; k++) { /* local: the rank's queries, every head */
            const model_attention_kind *a = &s->attn[k];
            if (!a->sharded)
                add_attn(L, (int)((a->q_tokens + c - 1) / c), (int)a->kv_tokens, a->heads);
        }
    }
    for (int i = 0; i < L->na; i++)
        attn_cut(&L->a[i], s->head_dim, cap);
    return CPDIT_OK;
}

static double now_s(void)
{
    return MPI_Wtime();
}

/* n values in [-1, 1) from an LCG. */
static void fill(float *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((int64_t)(seed >> 40) - (1 << 23)) / (float)(1 << 23);
    }
}

typedef struct bufs {
    const cpdit_backend *be;
    float *host; /* random values, host memory */
    size_t host_n;
    cpdit_buf *x, *y, *q, *k, *v, *o; /* backend memory: activations (be->act_dtype) */
    cpdit_buf *avec;                  /* modulation shift, scale and gate (activations) */
    float *lse, *cos, *sin, *vec;     /* fp32: the LSE, RoPE tables, norm weights */
    int wk[MAX_WEIGHTS], wn[MAX_WEIGHTS]; /* one weight per distinct (k, n) */
    cpdit_weight *w[MAX_WEIGHTS];
    int nw;
} bufs;

static void bufs_free(bufs *b)
{
    free(b->host);
    if (!b->be)
        return;
    for (int i = 0; i < b->nw; i++)
        b->be->weight_free(b->w[i]);
    b->be->free(b->x);
    b->be->free(b->y);
    b->be->free(b->q);
    b->be->free(b->k);
    b->be->free(b->v);
    b->be->free(b->o);
    b->be->free(b->lse);
    b->be->free(b->cos);
    b->be->free(b->sin);
    b->be->free(b->vec);
    b->be->free(b->avec);
}

/* The weight (n, k): random bf16 values in the backend's native form, made once. */
static cpdit_status weight_for(bufs *b, int k, int n, const cpdit_weight **out,
                               cpdit_error *err)
{
    for (int i = 0; i < b->nw; i++)
        if (b->wk[i] == k && b->wn[i] == n) {
            *out = b->w[i];
            return CPDIT_OK;
        }
    if (b->nw >= MAX_WEIGHTS)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_SHAPES, "too many weight shapes");
    uint16_t *w16 = malloc((size_t)k * n * sizeof *w16);
    if (!w16)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_SHAPES, "out of memory");
    for (size_t i = 0; i < (size_t)k * n; i++)
        w16[i] = cpdit_f32_to_bf16(b->host[i % b->host_n] * 0.05f);
    cpdit_weight_desc d = {CPDIT_DTYPE_BF16, n, k, w16, 0, CPDIT_WEIGHT_NATIVE, NULL, 0};
    cpdit_weight *w = NULL;
    cpdit_status st = b->be->weight_create(&w, &d, err);
    free(w16);
    if (st)
        return st;
    b->wk[b->nw] = k, b->wn[b->nw] = n, b->w[b->nw] = w;
    b->nw++;
    *out = w;
    return CPDIT_OK;
}

/* Backend buffers big enough for every (cut) shape, and the weights. */
static cpdit_status alloc_bufs(bufs *b, shape_list *L, int D, cpdit_error *err)
{
    size_t xn = 1, yn = 1, qn = 1, kvn = 1;
    for (int i = 0; i < L->nl; i++)
        for (int j = 0; j < L->lin[i].n; j++) {
            const gemm_step *g = &L->lin[i].g[j];
            const size_t m = (size_t)g->m_cut;
            xn = m * g->k > xn ? m * g->k : xn;
            yn = m * g->n > yn ? m * g->n : yn;
        }
    for (int i = 0; i < L->nl; i++) { /* element-wise: (rows, F) activations */
        const size_t e = (size_t)L->lin[i].rows_cut * (L->lin[i].F + L->lin[i].E);
        xn = e > xn ? e : xn;
        yn = e > yn ? e : yn;
    }
    for (int i = 0; i < L->na; i++) {
        const size_t q = (size_t)L->a[i].sq_cut * L->a[i].h_cut;
        const size_t kv = (size_t)L->a[i].skv * L->a[i].h_cut;
        qn = q > qn ? q : qn;
        kvn = kv > kvn ? kv : kvn;
    }
    b->be = cpdit_backend_default();
    b->host_n = 1u << 16;
    b->host = malloc(b->host_n * sizeof *b->host);
    b->x = cpdit_act_alloc(b->be, xn);
    b->y = cpdit_act_alloc(b->be, yn);
    b->q = cpdit_act_alloc(b->be, qn * D);
    b->o = cpdit_act_alloc(b->be, qn * D);
    b->k = cpdit_act_alloc(b->be, kvn * D);
    b->v = cpdit_act_alloc(b->be, kvn * D);
    b->lse = b->be->alloc(qn * sizeof(float));
    size_t rd = 1, vec = 1;
    for (int i = 0; i < L->nl; i++) {
        const size_t r = (size_t)L->lin[i].rows_cut * L->lin[i].D;
        rd = r > rd ? r : rd;
        vec = (size_t)3 * L->lin[i].E > vec ? (size_t)3 * L->lin[i].E : vec;
    }
    b->cos = b->be->alloc(rd * sizeof(float));
    b->sin = b->be->alloc(rd * sizeof(float));
    b->vec = b->be->alloc(vec * sizeof(float));
    b->avec = cpdit_act_alloc(b->be, vec);
    if (!b->host || !b->x || !b->y || !b->q || !b->o || !b->k || !b->v || !b->lse || !b->cos ||
        !b->sin || !b->vec || !b->avec)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_SHAPES,
                               "out of memory for the model's shapes");
    fill(b->host, b->host_n, 42);
    cpdit_buf *act_in[] = {b->x, b->q, b->k, b->v, b->avec, b->y};
    const size_t act_sizes[] = {xn, qn * D, kvn * D, kvn * D, vec, yn};
    for (int i = 0; i < 6; i++) /* inputs: the random block repeated */
        for (size_t off = 0; off < act_sizes[i]; off += b->host_n) {
            const size_t n = act_sizes[i] - off < b->host_n ? act_sizes[i] - off : b->host_n;
            b->be->upload_act(cpdit_buf_at(b->be, act_in[i], (ptrdiff_t)off), b->host, n);
        }
    float *par_in[] = {b->cos, b->sin, b->vec};
    const size_t par_sizes[] = {rd, rd, vec};
    for (int i = 0; i < 3; i++)
        for (size_t off = 0; off < par_sizes[i]; off += b->host_n) {
            const size_t n = par_sizes[i] - off < b->host_n ? par_sizes[i] - off : b->host_n;
            b->be->upload(par_in[i] + off, b->host, n * sizeof(float));
        }
    cpdit_status st = CPDIT_OK;
    for (int i = 0; !st && i < L->nl; i++)
        for (int j = 0; !st && j < L->lin[i].n; j++)
            st = weight_for(b, L->lin[i].g[j].k, L->lin[i].g[j].n, &L->lin[i].g[j].w, err);
    return st;
}

/* One timed thing: a forward's linear layers (seq), its element-wise work (seq, elem), or one
 * attention call (kern). */
typedef struct timed {
    const linseq *seq;
    int elem;
    int sync;     /* a small all-reduce over the ranks after every call (a run's sync point) */
    const cpdit_attention_kernel *kern;
    cpdit_attention_args args;
    double scale; /* full shape / cut */
    double win[MAX_REPS];
} timed;

static cpdit_status call_once(bufs *b, const timed *x, cpdit_error *err)
{
    float sink;
    cpdit_status st = CPDIT_OK;
    if (x->kern) {
        st = x->kern->forward(b->o, b->lse, b->q, b->k, b->v, &x->args, err);
        b->be->download_act(&sink, b->o, 1);
        return st;
    }
    if (x->elem) { /* as the family's blocks call them (model_block_ops), on rows_cut rows */
        const linseq *q = x->seq;
        const cpdit_backend *be = b->be;
        const size_t r = (size_t)q->rows_cut;
        const cpdit_buf *shift = b->avec, *scale = cpdit_buf_at(be, b->avec, q->E),
                        *gate = cpdit_buf_at(be, b->avec, 2 * (ptrdiff_t)q->E);
        for (int kind = 0; kind < q->n_kinds; kind++) {
            const model_block_ops *op = &q->ops[kind];
            for (int blk = 0; blk < op->count; blk++) {
                for (int i = 0; i < op->norm_mod; i++) {
                    be->layer_norm(b->y, b->x, NULL, NULL, r, q->E, 1e-6f);
                    be->modulate(b->y, b->y, shift, scale, r, q->E);
                }
                for (int i = 0; i < op->qk_norm_rope; i++) { /* q, k */
                    be->rms_norm(b->y, b->y, b->vec, r * q->H, q->D, 1e-6f);
                    be->rope(b->y, b->cos, b->sin, (int)r, q->H, q->D);
                }
                for (int i = 0; i < op->gelu; i++)
                    be->act(CPDIT_ACT_GELU_TANH, b->y, b->y, r * q->F);
                for (int i = 0; i < op->concat; i++)
                    be->copy_rows(b->y, q->E + q->F, b->x, q->E, r, q->E);
                for (int i = 0; i < op->gated_residual; i++)
                    be->gated_residual(b->x, q->E, b->y, q->E, gate, r, q->E);
            }
        }
        b->be->download_act(&sink, b->y, 1);
        return st;
    }
    for (int i = 0; !st && i < x->seq->n; i++) {
        const gemm_step *g = &x->seq->g[i];
        for (int c = 0; !st && c < g->count; c++)
            st = b->be->linear(b->y, g->n, b->x, g->k, g->w, NULL, g->m_cut, g->k, g->n, 0,
                               err);
    }
    b->be->download_act(&sink, b->y, 1); /* finished (asynchronous backends) */
    return st;
}

/* What cp_attention's agreement does between two pieces of work: a small all-reduce (here
 * of a stop flag: 1 when any rank says 1). */
static int sync_point(MPI_Comm comm, int flag)
{
    long v = flag;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_LONG, MPI_MAX, comm);
    return v != 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The time of one call of each of the n things as a run sees it, every rank busy with the
 * same work: a warm-up call of each, then reps rounds; a round times one window of every
 * thing (calls until about target_s has passed: a sync thing's ranks agree in its all-reduce
 * when to stop, so that they make the same calls), a barrier before each window (the ranks
 * share the cores as in a run), in an order rotated by one each round so that a change in
 * the machine's load hits every shape alike; the median window's mean call. Short calls
 * timed one by one would catch moments when a rank has a shared core to itself. Collective:
 * every rank makes the same MPI calls even after a failure (then skips the work); returns
 * the first failure. */
static cpdit_status time_all(MPI_Comm comm, bufs *b, timed *x, int n, int reps, double target_s,
                             double *out, cpdit_error *err)
{
    cpdit_status st = CPDIT_OK;
    reps = reps > MAX_REPS ? MAX_REPS : reps;
    for (int i = 0; i < n; i++) {
        MPI_Barrier(comm);
        if (!st)
            st = call_once(b, &x[i], err);
        if (x[i].sync)
            sync_point(comm, 1);
    }
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < n; k++) {
            timed *y = &x[(k + r) % n];
            MPI_Barrier(comm);
            const double t0 = now_s();
            long calls = 0;
            for (int stop = 0; !stop;) {
                if (!st)
                    st = call_once(b, y, err);
                calls++;
                stop = now_s() - t0 >= target_s || calls >= MAX_CALLS;
                if (y->sync) /* even after a failure: the others wait in it */
                    stop = sync_point(comm, stop);
            }
            y->win[r] = (now_s() - t0) / (double)calls;
        }
    for (int i = 0; i < n; i++) {
        qsort(x[i].win, (size_t)reps, sizeof x[i].win[0], cmp_double);
        out[i] = x[i].win[reps / 2] * x[i].scale;
    }
    return st;
}

static json_t *entry_json(const shape_list *L, const model_plan_shape *s, int ranks)
{
    json_t *e = json_object(), *lin = json_array(), *att = json_array();
    json_object_set_new(e, "model", json_string(s->key));
    json_object_set_new(e, "width", json_integer(s->width));
    json_object_set_new(e, "height", json_integer(s->height));
    if (s->frames > 1)
        json_object_set_new(e, "frames", json_integer(s->frames));
    json_object_set_new(e, "txt_tokens", json_integer(s->text_tokens));
    json_object_set_new(e, "img_tokens", json_integer(s->image_tokens));
    json_object_set_new(e, "ranks", json_integer(ranks));
    for (int i = 0; i < L->nl; i++) {
        const linseq *q = &L->lin[i];
        json_array_append_new(lin, json_pack("{s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f}", "cp", q->cp,
                                             "txt_tokens", q->tl, "img_tokens", q->il,
                                             "time_s", q->t + q->t_elem, "gemm_s", q->t,
                                             "elementwise_s", q->t_elem, "flops", q->flops,
                                             "flops_per_s", q->flops / q->t));
    }
    for (int i = 0; i < L->na; i++) {
        const attn_shape *a = &L->a[i];
        const double f = 4.0 * a->sq * a->skv * a->h * s->head_dim;
        json_array_append_new(att, json_pack("{s:i,s:i,s:i,s:i,s:f,s:f,s:f}", "sq", a->sq,
                                             "skv", a->skv, "heads", a->h, "head_dim",
                                             s->head_dim, "time_s", a->t, "flops", f,
                                             "flops_per_s", f / a->t));
    }
    json_object_set_new(e, "linear", lin);
    json_object_set_new(e, "attention", att);
    json_object_set_new(e, "sync_s", json_real(L->sync_s));
    json_object_set_new(e, "sync_chunk_s", json_real(L->chunk_s));
    return e;
}

cpdit_status probe_shapes_measure(MPI_Comm comm, const model_plan_shape *s, int ranks, int quick,
                                  json_t **out, cpdit_error *err)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    *out = NULL;
    shape_list *L = calloc(1, sizeof *L);
    timed *x = NULL;
    double *t = NULL;
    bufs b;
    memset(&b, 0, sizeof b);
    const double cap = quick ? PROBE_SHAPES_CAP_FLOPS_QUICK : PROBE_SHAPES_CAP_FLOPS;
    const int reps = quick ? REPS_QUICK : REPS, D = s->head_dim;
    cpdit_status st = L ? collect(L, s, ranks > 0 ? ranks : 1, cap, err)
                        : cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_SHAPES, "out of memory");
    /* linear, element-wise per cp; attention; a chunk of work without and with a sync */
    const int n = st ? 0 : 2 * L->nl + L->na + 2;
    if (!st)
        st = alloc_bufs(&b, L, D, err);
    if (!st) {
        x = calloc((size_t)n + 1, sizeof *x);
        t = calloc((size_t)n + 1, sizeof *t);
        if (!x || !t)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_SHAPES, "out of memory");
    }
    for (int i = 0; !st && i < L->nl; i++) {
        x[i].seq = &L->lin[i];
        x[i].scale = L->lin[i].flops / L->lin[i].flops_cut;
        x[L->nl + i].seq = &L->lin[i];
        x[L->nl + i].elem = 1;
        x[L->nl + i].scale = (double)(L->lin[i].tl + L->lin[i].il) / L->lin[i].rows_cut;
    }
    for (int i = 0; !st && i < L->na; i++) {
        const attn_shape *a = &L->a[i];
        timed *y = &x[2 * L->nl + i];
        const int h = a->h_cut;
        y->kern = b.be->attention_kernels[0];
        y->args = (cpdit_attention_args){1, a->sq_cut, a->skv, h, D, h * D, h * D, h * D,
                                         1.0f / sqrtf((float)D), NULL, 0};
        y->scale = ((double)a->sq / a->sq_cut) * ((double)a->h / h);
    }
    if (!st) { /* the GEMMs of the largest CP degree: the work between a run's sync points */
        timed *c = &x[2 * L->nl + L->na];
        c[0].seq = c[1].seq = &L->lin[L->nl - 1];
        c[0].scale = c[1].scale = 1;
        c[1].sync = ranks > 1;
    }
    if ((st = job_agree_status(comm, st, err)))
        goto out;
    /* every rank: the same things in the same order, in step; then the slowest rank's time */
    st = time_all(comm, &b, x, n, reps, quick ? TARGET_S_QUICK : TARGET_S, t, err);
    if ((st = job_agree_status(comm, st, err)))
        goto out;
    MPI_Allreduce(MPI_IN_PLACE, t, n, MPI_DOUBLE, MPI_MAX, comm);
    for (int i = 0; i < L->nl; i++) {
        L->lin[i].t = t[i];
        L->lin[i].t_elem = t[L->nl + i];
    }
    for (int i = 0; i < L->na; i++)
        L->a[i].t = t[2 * L->nl + i];
    L->chunk_s = t[2 * L->nl + L->na];
    L->sync_s = t[2 * L->nl + L->na + 1] - L->chunk_s;
    int size;
    MPI_Comm_size(comm, &size);
    L->sync_s = L->sync_s > 0 && size > 1 ? L->sync_s : 0;
    if (rank == 0)
        *out = entry_json(L, s, ranks);
out:
    bufs_free(&b);
    free(x);
    free(t);
    free(L);
    return st;
}
