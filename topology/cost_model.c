/* cost_model.c — per-step time and memory of each dp x ring x ulysses grid (cost_model.h;
 * the formulas and their assumptions are written out in topology/COST-MODEL.md). */
#include "topology/cost_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FLOAT_BYTES 4.0
/* Bytes of one activation (a cpdit_buf element) on the table a grid runs on: the default
 * backend is "cuda" wherever there is a device, which stores bf16 (kernels/backend.h), and
 * "cpu" (fp32) elsewhere. The attention LSE stays fp32 on both. */
static double act_bytes(int gpu)
{
    return gpu ? 2.0 : 4.0;
}
#define TIE_REL 1e-9 /* scores closer than this (relative) are a tie: more dp wins */

/* ------------------------------------------------------------------ placement */
/* The rank map for N ranks: the file's own entries, or for more ranks than the file
 * describes, the file's cluster repeated (copy k on hosts k*n_hosts ...). */
static topo_rank place(const topology *t, int r)
{
    topo_rank x = t->rank_map[r % t->ranks];
    x.host += (r / t->ranks) * t->n_hosts;
    return x;
}

static topo_class pair_class(const topology *t, int a, int b)
{
    topo_rank x = place(t, a), y = place(t, b);
    if (x.host != y.host)
        return TOPO_CROSS_NODE;
    if (x.package >= 0 && x.package == y.package)
        return x.numa >= 0 && x.numa == y.numa ? TOPO_SAME_NUMA : TOPO_SAME_SOCKET;
    if (x.package < 0 && x.numa >= 0 && x.numa == y.numa)
        return TOPO_SAME_NUMA;
    return TOPO_SAME_NODE;
}

static long gcd_l(long a, long b)
{
    while (b) {
        long r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Widest class among the deg members first + i*stride of one group (pairs, as pair_class). */
static topo_class group_class(const topology *t, int first, int stride, int deg)
{
    topo_class w = TOPO_SAME_NUMA;
    for (int i = 0; i < deg && w < TOPO_CROSS_NODE; i++)
        for (int j = i + 1; j < deg && w < TOPO_CROSS_NODE; j++) {
            topo_class c = pair_class(t, first + i * stride, first + j * stride);
            w = c > w ? c : w;
        }
    return w;
}

/* Widest class over the groups of one axis: ring groups {b + o + i*U : i < R} and ulysses
 * groups {b + o*U + i : i < U}, b a multiple of cp = R*U. The rank map repeats every T =
 * t->ranks ranks (place), so a group's classes depend only on its first member modulo T:
 * only the groups of one period are priced (at most T of them, however large N is), and a
 * group spanning T ranks or more reaches across two copies of the file's cluster, i.e.
 * across hosts, at once. */
static int axis_class(const topology *t, int N, int R, int U, int ring_axis)
{
    const int deg = ring_axis ? R : U, stride = ring_axis ? U : 1;
    if (deg <= 1)
        return -1;
    const long T = t->ranks;
    if ((long)(deg - 1) * stride >= T)
        return TOPO_CROSS_NODE; /* first and last member in different copies */
    topo_class w = TOPO_SAME_NUMA;
    if (!ring_axis) { /* groups [kU, kU + U): first members kU repeat mod T every T/gcd */
        const long groups = N / U, period = T / gcd_l(U, T);
        for (long k = 0; k < groups && k < period && w < TOPO_CROSS_NODE; k++) {
            topo_class c = group_class(t, (int)(k * U), 1, U);
            w = c > w ? c : w;
        }
        return (int)w;
    }
    const long cp = (long)R * U, blocks = N / cp, period = T / gcd_l(cp, T);
    for (long b = 0; b < blocks && b < period && w < TOPO_CROSS_NODE; b++)
        for (int o = 0; o < U && w < TOPO_CROSS_NODE; o++) {
            topo_class c = group_class(t, (int)(b * cp + o), U, R);
            w = c > w ? c : w;
        }
    return (int)w;
}

/* Most ranks on one host (they share its network link). */
static int ranks_per_host(const topology *t, int N)
{
    int best = 1;
    for (int h = 0; h < t->n_hosts; h++)
        best = t->hosts[h].nranks > best ? t->hosts[h].nranks : best;
    return N < best ? N : best;
}

static int uses_gpus(const topology *t)
{
    return t->rank_map[0].gpu >= 0;
}

/* ------------------------------------------------------------------ names */
const char *cm_variant_name(const cm_config *c, char *buf, size_t n)
{
    const char *base;
    if (c->ring == 1 && c->ulysses == 1)
        base = "local";
    else if (c->ring == 1)
        base = "ulysses";
    else if (c->ulysses == 1)
        base = c->ring_mode == CP_RING_ALLGATHER ? "ring-allgather" : "ring";
    else
        base = c->ring_mode == CP_RING_ALLGATHER ? "unified-allgather" : "unified";
    snprintf(buf, n, "%s%s", base, c->anything ? "+anything" : "");
    return buf;
}

cpdit_status cm_variant_parse(const char *name, cp_attention_config *cfg, cpdit_error *err)
{
    char base[40];
    const char *plus = name ? strchr(name, '+') : NULL;
    if (!name || strlen(name) >= sizeof base)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "variant", "missing or too long");
    snprintf(base, sizeof base, "%.*s", plus ? (int)(plus - name) : (int)strlen(name), name);
    if (plus && strcmp(plus, "+anything") != 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "variant",
                               "'%s': the only suffix is +anything", name);
    cpdit_status st = cp_attention_config_parse(strcmp(base, "local") == 0 ? "unified" : base,
                                                cfg, err);
    if (!st)
        cfg->anything = plus != NULL;
    return st;
}

/* ------------------------------------------------------------------ the model */
static double ceil_div(double a, double b)
{
    return ceil(a / b);
}

/* All-to-all over U ranks of class cls, per-rank send size m bytes: the measured collective
 * when the file has it for this group size and class, else a pairwise exchange priced by
 * the class's alpha-beta fit (bandwidth divided by share ranks using one link). */
static double alltoall_s(const topology *t, int U, topo_class cls, double m, double share)
{
    double tm = topo_coll_time(t, TOPO_ALLTOALL, U, cls, m);
    if (tm > 0)
        return tm;
    topo_fit f = topo_fit_for(t, cls, NULL);
    return (U - 1) * f.alpha_s + m * (U - 1) / U / (f.beta_Bps / share);
}

/* What one grid shares between the attention kinds of a forward. */
typedef struct cm_ctx {
    const topology *t;
    const topo_shapes *ms; /* times at the model's shapes, or NULL */
    const cm_config *c;
    int R, U, cp, gpu;
    double AB;             /* activation bytes */
    double nic_share;      /* ranks sharing a host's network links */
    int ring_class, ulysses_class;
} cm_ctx;

/* One call of an attention kind on a rank: kernel time, exposed and hidden communication,
 * workspace elements, and whether the kernel time was measured at its shape. */
typedef struct cm_call {
    double kernel, comm, hidden, ws;
    int at_shapes;
} cm_call;

/* Self-attention over the sharded sequence (cp_attention): S tokens, H heads of D. */
static void sharded_call(const cm_ctx *x, const model_attention_kind *a, cm_call *k)
{
    const topology *t = x->t;
    const int R = x->R, U = x->U, cp = x->cp;
    const double S = (double)a->q_tokens, H = a->heads, D = a->head_dim, AB = x->AB;
    const double l = ceil_div(S, cp);       /* tokens per rank (balanced, ceil) */
    const double G = ceil_div(S, R);        /* tokens per ring group after the all-to-all */
    const double h = ceil_div(H, U);        /* heads per rank after the all-to-all */
    const double att_full = topo_shapes_attn_s(x->ms, (int)G, (int)S, (int)h, (int)D);
    const double att_block = topo_shapes_attn_s(x->ms, (int)G, (int)G, (int)h, (int)D);
    memset(k, 0, sizeof *k);
    k->at_shapes = R == 1 || x->c->ring_mode == CP_RING_ALLGATHER ? att_full > 0 : att_block > 0;
    double attn_call = 0, comm_call = 0, hidden_call = 0;
    if (R == 1) {
        attn_call = att_full > 0 ? att_full : 4 * G * S * h * D / t->attention_flops;
    } else {
        int used;
        topo_fit f = topo_fit_for(t, (topo_class)x->ring_class, &used);
        const double share = x->ring_class == TOPO_CROSS_NODE ? x->nic_share : 1;
        const double bytes = 2 * G * h * D * AB; /* one K/V block */
        const double tx = f.alpha_s + bytes / (f.beta_Bps / share);
        if (x->c->ring_mode == CP_RING_ALLGATHER) {
            attn_call = att_full > 0 ? att_full : 4 * G * S * h * D / t->attention_flops;
            double tm = topo_coll_time(t, TOPO_ALLGATHER, R, (topo_class)x->ring_class, bytes);
            comm_call += tm > 0 ? tm : (R - 1) * tx;
        } else {
            const double tc = att_block > 0 ? att_block : 4 * G * G * h * D / t->attention_flops;
            const double eta = (x->gpu || x->ring_class == TOPO_CROSS_NODE) ? CM_OVERLAP_DMA
                                                                            : CM_OVERLAP_SHM;
            const double hide = eta * (tc < tx ? tc : tx);
            attn_call = R * tc;
            comm_call += (R - 1) * (tx - hide);
            hidden_call = (R - 1) * hide;
        }
    }
    if (U > 1) {
        const topo_class uc = (topo_class)x->ulysses_class;
        const double share = uc == TOPO_CROSS_NODE ? x->nic_share : 1;
        comm_call += alltoall_s(t, U, uc, 3 * l * H * D * AB, share); /* q, k, v */
        comm_call += alltoall_s(t, U, uc, l * H * D * AB, share);     /* out */
        comm_call += alltoall_s(t, U, uc, l * H * FLOAT_BYTES, share); /* lse (fp32) */
    }
    if (cp > 1) { /* cp_attention's two small agreement all-reduces */
        int wide = x->ring_class > x->ulysses_class ? x->ring_class : x->ulysses_class;
        topo_fit f = topo_fit_for(t, (topo_class)wide, NULL);
        comm_call += 2 * ceil(log2((double)cp)) * f.alpha_s;
        /* every sync point waits for peers that a shared node has descheduled (measured with
         * the model's shapes): the agreements, the all-to-alls, the ring's steps */
        if (x->ms && x->ms->sync_s > 0) {
            /* a collective measured by the probe (all ranks calling) already holds its wait */
            const int a2a_measured =
                U > 1 && topo_coll_time(t, TOPO_ALLTOALL, U, (topo_class)x->ulysses_class,
                                        3 * l * H * D * AB) > 0;
            const int ag_measured =
                R > 1 && x->c->ring_mode == CP_RING_ALLGATHER &&
                topo_coll_time(t, TOPO_ALLGATHER, R, (topo_class)x->ring_class,
                               2 * G * h * D * AB) > 0;
            const int syncs = 2 + (U > 1 && !a2a_measured ? 2 : 0) +
                              (R > 1 ? (x->c->ring_mode == CP_RING_ALLGATHER ? !ag_measured
                                                                              : R - 1)
                                     : 0);
            comm_call += syncs * x->ms->sync_s;
        }
    }
    k->kernel = attn_call;
    k->comm = comm_call;
    k->hidden = hidden_call;
    double ws = 0;
    if (U > 1)
        ws += 3 * l * H * D + 3 * G * h * D + 4 * G * h * D + G * h;
    if (R > 1)
        ws += x->c->ring_mode == CP_RING_ALLGATHER ? 3 * S * h * D : 4 * G * h * D + G * h;
    k->ws = ws;
}

/* Local attention (cross-attention): the rank's ceil(q / cp) queries against all kv tokens,
 * every head, no communication; workspace: the K and V of all kv tokens and the LSE. */
static void local_call(const cm_ctx *x, const model_attention_kind *a, cm_call *k)
{
    const double lq = ceil_div((double)a->q_tokens, x->cp), kv = (double)a->kv_tokens;
    const double H = a->heads, D = a->head_dim;
    const double att = topo_shapes_attn_s(x->ms, (int)lq, (int)kv, (int)H, (int)D);
    memset(k, 0, sizeof *k);
    k->at_shapes = att > 0;
    k->kernel = att > 0 ? att : 4 * lq * kv * H * D / x->t->attention_flops;
    k->ws = 2 * kv * H * D + lq * H;
}

/* Memory per rank (bytes) into p: weights, activations, the attention workspace ws
 * (elements). */
static void predict_memory(const topology *t, const model_plan_shape *s, int N, double l,
                           double ws, int gpu, cm_prediction *p)
{
    const double AB = act_bytes(gpu), E = s->hidden, F = s->mlp;
    const int rph = ranks_per_host(t, N);
    p->mem_weights = s->params * CM_WEIGHT_BYTES_PER_PARAM;
    if (!gpu) /* the CPU pipeline's fp32 weight cache */
        p->mem_weights += fmin(s->params * FLOAT_BYTES, CM_CPU_WEIGHT_CACHE_BYTES);
    /* x n q k v o + mlp (E + F); a replicated text context (E wide) on every rank */
    p->mem_acts = l * (7 * E + F) * AB + (s->text_sharded ? 0 : (double)s->text_tokens * E * AB);
    p->mem_attn = ws * AB; /* (the few LSE terms counted at the activation size) */
    p->mem_total = p->mem_weights + p->mem_acts + p->mem_attn;
    const topo_host *host = &t->hosts[t->rank_map[0].host];
    p->fits = 1;
    if (gpu && host->gpu_memory_bytes > 0)
        p->fits = p->mem_total <= host->gpu_memory_bytes;
    else if (!gpu && host->memory_bytes > 0) /* the bf16 file is mapped once per host */
        p->fits = s->params * CM_WEIGHT_BYTES_PER_PARAM +
                      rph * (p->mem_total - s->params * CM_WEIGHT_BYTES_PER_PARAM) <=
                  host->memory_bytes;
}

void cm_predict(const topology *t, const model_plan_shape *s, const cm_options *o,
                const cm_config *c, cm_prediction *p)
{
    memset(p, 0, sizeof *p);
    p->cfg = *c;
    const int N = o->ranks > 0 ? o->ranks : t->ranks;
    const int R = c->ring, U = c->ulysses, cp = R * U;
    const double S = (double)s->seq_tokens;
    const double l = ceil_div(S, cp); /* sequence tokens per rank (balanced, ceil) */
    const int rph = ranks_per_host(t, N);
    const int nics = t->hosts[t->rank_map[0].host].nnics;
    cm_ctx x = {t, NULL, c, R, U, cp, uses_gpus(t), 0, 0, 0, 0};
    x.AB = act_bytes(x.gpu);
    /* ranks of a host that send across nodes at once share its network links */
    x.nic_share = nics > 0 ? ceil_div(rph, nics) : rph;
    p->ulysses_class = x.ulysses_class = axis_class(t, N, R, U, 0);
    p->ring_class = x.ring_class = axis_class(t, N, R, U, 1);
    cm_variant_name(c, p->variant, sizeof p->variant);

    /* compute: times measured at this model's shapes when the file has them (compute.shapes,
     * probe_shapes.h), else FLOPs over the generic rates */
    x.ms = topo_find_shapes(t, s->key, s->width, s->height, (int)s->text_tokens,
                            (int)s->image_tokens);
    const double lin_m = topo_shapes_linear_s(x.ms, cp);
    p->linear_s = lin_m > 0 ? lin_m : model_plan_rank_linear_flops(s, l / S) / t->sgemm_flops;
    p->at_shapes = lin_m > 0;
    double ws = 0;
    for (int i = 0; i < s->n_attn; i++) {
        const model_attention_kind *a = &s->attn[i];
        cm_call k;
        if (a->sharded)
            sharded_call(&x, a, &k);
        else
            local_call(&x, a, &k);
        p->attn_s += a->count * k.kernel;
        p->comm_s += a->count * k.comm;
        p->hidden_s += a->count * k.hidden;
        p->at_shapes = p->at_shapes && k.at_shapes;
        ws = k.ws > ws ? k.ws : ws; /* one call at a time: the workspace is reused */
    }
    p->compute_s = p->linear_s + p->attn_s;
    p->step_s = p->compute_s + p->comm_s;
    /* CFG pairs (cpdit run: true CFG on an even number of dp groups): groups 2j and 2j + 1
     * run the two forwards of each step of the same item at once, swapping the velocities
     * (a send/recv of the local latent shard, small next to a forward: not priced) — half
     * the latency of an item, the same images per hour */
    const int fps = s->forwards_per_step > 1 ? s->forwards_per_step : 1;
    p->cfg_pairs = fps == 2 && c->dp >= 2 && c->dp % 2 == 0;
    const int units = p->cfg_pairs ? c->dp / 2 : c->dp; /* items in flight */
    p->latency_s = o->steps * (p->cfg_pairs ? 1 : fps) * p->step_s;
    p->images_per_hour = units * 3600.0 / p->latency_s;
    p->score_s = ceil_div(o->images, units) * p->latency_s;
    predict_memory(t, s, N, l, ws, x.gpu, p);
}

/* ------------------------------------------------------------------ ranking */
static double key_of(const cm_prediction *p, int by_measured, const cm_options *o)
{
    if (!p->fits)
        return INFINITY;
    if (by_measured)
        return p->measured_s > 0 ? ceil_div(o->images, p->cfg.dp) * o->steps * p->measured_s
                                 : INFINITY;
    return p->score_s;
}

static const cm_options *sort_opts;
static int sort_measured;

static int cmp_pred(const void *a, const void *b)
{
    const cm_prediction *x = a, *y = b;
    double kx = key_of(x, sort_measured, sort_opts), ky = key_of(y, sort_measured, sort_opts);
    if (sort_measured && isinf(kx) && isinf(ky)) { /* unmeasured: by prediction */
        kx = key_of(x, 0, sort_opts);
        ky = key_of(y, 0, sort_opts);
    }
    if (isinf(kx) != isinf(ky)) /* measured (or fitting) before the rest */
        return isinf(kx) ? 1 : -1;
    if (!isinf(kx) && fabs(kx - ky) > TIE_REL * fmax(kx, ky))
        return kx < ky ? -1 : 1;
    if (x->cfg.dp != y->cfg.dp)
        return y->cfg.dp - x->cfg.dp;          /* more throughput */
    if (x->cfg.anything != y->cfg.anything)
        return x->cfg.anything - y->cfg.anything;
    if (x->cfg.ulysses != y->cfg.ulysses)
        return y->cfg.ulysses - x->cfg.ulysses;
    return (int)x->cfg.ring_mode - (int)y->cfg.ring_mode;
}

/* The divisors of n >= 1 in increasing order (caller frees), *count of them; NULL when out
 * of memory. O(sqrt n). */
static int *divisors(int n, int *count)
{
    int small = 0, cap = 2;
    for (long d = 1; d * d <= n; d++)
        cap += n % d == 0 ? 2 : 0;
    int *out = malloc((size_t)cap * sizeof *out);
    if (!out)
        return NULL;
    for (long d = 1; d * d <= n; d++)
        if (n % d == 0)
            out[small++] = (int)d;
    int total = small;
    for (int i = small - 1; i >= 0; i--)
        if ((long)out[i] * out[i] != n)
            out[total++] = n / out[i];
    *count = total;
    return out;
}

cpdit_status cm_rank(const topology *t, const model_plan_shape *s, const cm_options *o,
                     const topo_tuned *tuned, cm_prediction **out, int *n, cpdit_error *err)
{
    const int N = o->ranks > 0 ? o->ranks : t->ranks;
    *out = NULL;
    *n = 0;
    if (N < 1 || o->steps < 1 || o->images < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "plan",
                               "ranks, steps and images must be >= 1");
    const long long S = s->seq_tokens;
    /* the divisors of N in O(sqrt N); grids dp x R x U = N are pairs of them: O(divisors^2)
     * grids, each priced in O(1) of N (axis_class is bounded by the file's ranks) */
    int nd = 0, *div = divisors(N, &nd);
    cm_prediction *p = div ? calloc((size_t)nd * nd * 2 + 1, sizeof *p) : NULL;
    if (!p) {
        free(div);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "plan", "out of memory");
    }
    int k = 0, any_measured = 0;
    for (int a = 0; a < nd; a++) {
        const int dp = div[a];
        for (int b = 0; b < nd && div[b] <= N / dp; b++) {
            const int R = div[b];
            if ((N / dp) % R)
                continue;
            const int U = N / dp / R;
            cm_config c = {dp, R, U, CP_RING_P2P, 0};
            c.anything = (S % (R * U)) != 0 || S < R * U || (U > 1 && s->heads % U) != 0;
            for (int mode = 0; mode < (R > 1 ? 2 : 1); mode++) {
                c.ring_mode = (cp_ring_mode)mode;
                cm_prediction *q = &p[k++];
                cm_predict(t, s, o, &c, q);
                for (int m = 0; tuned && m < tuned->n_measured; m++) {
                    const topo_grid_time *g = &tuned->measured[m];
                    if (g->dp == dp && g->ring == R && g->ulysses == U &&
                        strcmp(g->variant, q->variant) == 0 && g->step_s > 0) {
                        q->measured_s = g->step_s;
                        any_measured = 1;
                    }
                }
            }
        }
    }
    free(div);
    sort_opts = o;
    sort_measured = any_measured;
    qsort(p, (size_t)k, sizeof *p, cmp_pred);
    /* tune's choice for this very job (same images) first: it already weighed the spread of
     * the measurements and broke ties towards the simpler grid */
    for (int i = 1; any_measured && tuned && tuned->images == o->images && i < k; i++) {
        const topo_grid_time *g = &tuned->chosen;
        if (p[i].measured_s > 0 && p[i].cfg.dp == g->dp && p[i].cfg.ring == g->ring &&
            p[i].cfg.ulysses == g->ulysses && strcmp(p[i].variant, g->variant) == 0) {
            const cm_prediction x = p[i];
            memmove(p + 1, p, (size_t)i * sizeof *p);
            p[0] = x;
            break;
        }
    }
    *out = p;
    *n = k;
    return CPDIT_OK;
}

const char *cm_reason(const cm_prediction *b, const cm_options *o, const model_plan_shape *s,
                      const char *source, char *buf, size_t n)
{
    const char *item = s && s->frames > 1 ? "video" : "image";
    char goal[64];
    if (o->images == 1)
        snprintf(goal, sizeof goal, "the fastest single %s", item);
    else
        snprintf(goal, sizeof goal, "the shortest job");
    if (b->measured_s > 0)
        snprintf(buf, n, "measured by cpdit tune (%s): %s, %.3g s/step", source, goal,
                 b->measured_s);
    else
        snprintf(buf, n, "predicted from %s: %s (%d %s%s), %.3g s/step, %.0f%% communication",
                 source, goal, o->images, item, o->images == 1 ? "" : "s", b->step_s,
                 100.0 * b->comm_s / b->step_s);
    return buf;
}

/* ------------------------------------------------------------------ output */
static const char *mib(double bytes, char *buf, size_t n)
{
    if (bytes >= 1024.0 * 1024 * 1024 * 10)
        snprintf(buf, n, "%.0f GiB", bytes / (1024.0 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, n, "%.1f MiB", bytes / (1024.0 * 1024));
    return buf;
}

double cm_cost_per_1000(const cm_prediction *p, const cm_options *o, const char **unit)
{
    const int ranks = p->cfg.dp * p->cfg.ring * p->cfg.ulysses;
    const int per_rank = o->gpus ? 1 : o->threads > 0 ? o->threads : 1;
    if (unit)
        *unit = o->gpus ? "GPU-h" : "core-h";
    return p->images_per_hour > 0 ? 1000.0 * ranks * per_rank / p->images_per_hour : 0;
}

void cm_print_table(FILE *f, const cm_prediction *p, int n, const cm_options *o,
                    const model_plan_shape *s)
{
    const int video = s->frames > 1;
    const char *item = video ? "video" : "image";
    fprintf(f, "model %s: %s blocks, %d heads x %d, %lld text%s + %lld %s tokens (%dx%d", s->key,
            s->blocks_text, s->heads, s->head_dim, s->text_tokens,
            s->text_sharded ? "" : " (on every rank)", s->image_tokens, item, s->width,
            s->height);
    if (video)
        fprintf(f, ", %d frames", s->frames);
    fprintf(f, "), %.3g parameters\n", s->params);
    for (int i = 0; i < s->n_attn; i++)
        if (!s->attn[i].sharded)
            fprintf(f, "attention: %d local calls per forward (%lld queries x %lld keys: "
                       "cross-attention, no communication)\n",
                    s->attn[i].count, s->attn[i].q_tokens, s->attn[i].kv_tokens);
    fprintf(f, "objective: %s%s (%d %s%s, %d steps each",
            o->images == 1 ? "latency of one " : "throughput: time of the whole job",
            o->images == 1 ? item : "", o->images, item, o->images == 1 ? "" : "s", o->steps);
    if (s->forwards_per_step > 1)
        fprintf(f, " of %d forwards; with an even dp, pairs of groups run them at once",
                s->forwards_per_step);
    fprintf(f, ")\n");
    const char *unit = "core-h";
    cm_cost_per_1000(n > 0 ? &p[0] : NULL, o, &unit);
    char cost_head[24];
    snprintf(cost_head, sizeof cost_head, "%s/1k", unit);
    fprintf(f, "%4s %4s %4s %4s %-24s %11s %9s %9s %8s %10s %11s %10s %11s %s\n", "#", "dp",
            "ring", "uly", "variant", "s/step", "compute", "comm", "hidden", "mem/rank",
            video ? "videos/h" : "images/h", cost_head, "measured", "");
    for (int i = 0; i < n; i++) {
        const cm_prediction *q = &p[i];
        char m[32], meas[32] = "-";
        if (q->measured_s > 0)
            snprintf(meas, sizeof meas, "%.4g", q->measured_s);
        fprintf(f, "%4d %4d %4d %4d %-24s %11.4g %8.0f%% %8.0f%% %8.2g %10s %11.4g %10.4g %11s "
                   "%s\n",
                i + 1, q->cfg.dp, q->cfg.ring, q->cfg.ulysses, q->variant, q->step_s,
                100 * q->compute_s / q->step_s, 100 * q->comm_s / q->step_s, q->hidden_s,
                mib(q->mem_total, m, sizeof m), q->images_per_hour,
                cm_cost_per_1000(q, o, NULL), meas, q->fits ? "" : "(does not fit in memory)");
    }
    if (n > 0)
        fprintf(f, "chosen: dp %d ring %d ulysses %d %s\n", p[0].cfg.dp, p[0].cfg.ring,
                p[0].cfg.ulysses, p[0].variant);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

void cm_print_json(FILE *f, const cm_prediction *p, int n, const cm_options *o,
                   const model_plan_shape *s, const char *reason)
{
    fprintf(f, "{\"model\": ");
    json_str(f, s->key);
    fprintf(f, ", \"width\": %d, \"height\": %d, ", s->width, s->height);
    if (s->frames > 1) /* video: the family and frames; images keep the original keys */
        fprintf(f, "\"family\": \"%s\", \"frames\": %d, ", s->family, s->frames);
    fprintf(f, "\"txt_tokens\": %lld, \"img_tokens\": %lld, "
               "\"ranks\": %d, \"steps\": %d, \"images\": %d, \"objective\": \"%s\","
               "\n \"candidates\": [",
            s->text_tokens, s->image_tokens,
            n > 0 ? p[0].cfg.dp * p[0].cfg.ring * p[0].cfg.ulysses : o->ranks, o->steps,
            o->images, o->images == 1 ? "latency" : "throughput");
    for (int i = 0; i < n; i++) {
        const cm_prediction *q = &p[i];
        fprintf(f, "%s\n  {\"dp\": %d, \"ring\": %d, \"ulysses\": %d, \"variant\": \"%s\", "
                   "\"predicted_s\": %.6g, \"compute_s\": %.6g, \"comm_s\": %.6g, "
                   "\"hidden_s\": %.6g, \"memory_bytes\": %.0f, \"fits\": %s, "
                   "\"images_per_hour\": %.6g, \"latency_s\": %.6g",
                i ? "," : "", q->cfg.dp, q->cfg.ring, q->cfg.ulysses, q->variant, q->step_s,
                q->compute_s, q->comm_s, q->hidden_s, q->mem_total, q->fits ? "true" : "false",
                q->images_per_hour, q->latency_s);
        const double cost = cm_cost_per_1000(q, o, NULL);
        fprintf(f, ", \"%s_per_1000\": %.6g", o->gpus ? "gpu_hours" : "core_hours", cost);
        if (q->measured_s > 0)
            fprintf(f, ", \"measured_s\": %.6g", q->measured_s);
        fputc('}', f);
    }
    fprintf(f, "\n ]");
    if (n > 0) {
        fprintf(f, ",\n \"chosen\": {\"dp\": %d, \"ring\": %d, \"ulysses\": %d, \"variant\": "
                   "\"%s\"}, \"reason\": ",
                p[0].cfg.dp, p[0].cfg.ring, p[0].cfg.ulysses, p[0].variant);
        json_str(f, reason ? reason : "");
    }
    fprintf(f, "}\n");
}
