/* topo_file.c — read a topology file (format 1) for the planner; rewrite its "tuned" section.
 * See topo_file.h. */
#include "topology/topo_file.h"

#include <jansson.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/atomic_file.h"
#include "lib/io/regular_file.h"
#include "topology/topo_validate.h"

static const char *const class_names[TOPO_NCLASS] = {"same_numa", "same_socket", "same_node",
                                                     "cross_node"};

const char *topo_class_name(topo_class c)
{
    return c >= 0 && c < TOPO_NCLASS ? class_names[c] : NULL;
}

int topo_class_parse(const char *name)
{
    for (int c = 0; name && c < TOPO_NCLASS; c++)
        if (strcmp(name, class_names[c]) == 0)
            return c;
    return -1;
}

static cpdit_status bad(cpdit_error *err, const topology *t, const char *fmt, const char *key)
{
    return cpdit_error_set(err, CPDIT_ERR_INPUT, t->path, fmt, key);
}

/* A number (integer or real) at obj[key]; 0 when absent. Returns -1 for a wrong type. */
static int get_num(json_t *obj, const char *key, double *out)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return -1;
    *out = json_number_value(v);
    return 1;
}

static int get_int(json_t *obj, const char *key, int def)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    return v && json_is_integer(v) ? (int)json_integer_value(v) : def;
}

/* Element i of an array of integers; -1 when absent. */
static int get_int_at(json_t *arr, size_t i)
{
    json_t *v = json_is_array(arr) ? json_array_get(arr, i) : NULL;
    return v && json_is_integer(v) ? (int)json_integer_value(v) : -1;
}

static void read_grid_time(json_t *o, topo_grid_time *g)
{
    memset(g, 0, sizeof *g);
    g->dp = get_int(o, "dp", 0);
    g->ring = get_int(o, "ring", 0);
    g->ulysses = get_int(o, "ulysses", 0);
    json_t *v = json_object_get(o, "variant");
    snprintf(g->variant, sizeof g->variant, "%s", json_is_string(v) ? json_string_value(v) : "");
    get_num(o, "step_s", &g->step_s);
}

/* The key fields after (model, width, height, ranks); -1 / "" when absent (older files). */
static void read_key_rest(json_t *e, topo_tuned *d)
{
    d->frames = get_int(e, "frames", -1);
    d->text_tokens = get_int(e, "text_tokens", -1);
    d->cfg = get_int(e, "cfg", -1);
    d->threads = get_int(e, "threads_per_rank", -1);
    d->images = get_int(e, "images", 0);
    json_t *b = json_object_get(e, "backend"), *y = json_object_get(e, "dtype");
    snprintf(d->backend, sizeof d->backend, "%s", json_is_string(b) ? json_string_value(b) : "");
    snprintf(d->dtype, sizeof d->dtype, "%s", json_is_string(y) ? json_string_value(y) : "");
}

static void free_tuned(topology *t)
{
    for (int i = 0; i < t->n_tuned; i++) {
        free(t->tuned[i].model);
        free(t->tuned[i].measured);
    }
    free(t->tuned);
    t->tuned = NULL;
    t->n_tuned = 0;
}

static cpdit_status read_tuned(topology *t, json_t *root, cpdit_error *err)
{
    json_t *arr = json_object_get(root, "tuned");
    free_tuned(t);
    if (!arr || json_is_null(arr))
        return CPDIT_OK;
    if (!json_is_array(arr))
        return bad(err, t, "key \"%s\": expected an array", "tuned");
    size_t n = json_array_size(arr);
    t->tuned = calloc(n ? n : 1, sizeof *t->tuned);
    if (!t->tuned)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i), *m = json_object_get(e, "model");
        if (!json_is_object(e) || !json_is_string(m))
            return bad(err, t, "key \"%s\": every entry needs a \"model\" string", "tuned");
        topo_tuned *d = &t->tuned[t->n_tuned++];
        d->model = strdup(json_string_value(m));
        d->width = get_int(e, "width", 0);
        d->height = get_int(e, "height", 0);
        d->ranks = get_int(e, "ranks", 0);
        read_key_rest(e, d);
        read_grid_time(json_object_get(e, "chosen"), &d->chosen);
        json_t *ms = json_object_get(e, "measured");
        size_t k = json_is_array(ms) ? json_array_size(ms) : 0;
        d->measured = calloc(k ? k : 1, sizeof *d->measured);
        if (!d->model || !d->measured)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
        for (size_t j = 0; j < k; j++)
            read_grid_time(json_array_get(ms, j), &d->measured[d->n_measured++]);
    }
    return CPDIT_OK;
}

static void free_shapes(topology *t)
{
    for (int i = 0; i < t->n_shapes; i++) {
        free(t->shapes[i].model);
        free(t->shapes[i].linear);
        free(t->shapes[i].attn);
    }
    free(t->shapes);
    t->shapes = NULL;
    t->n_shapes = 0;
}

/* compute.shapes[] (probe_shapes.h); entries without a model string are skipped. */
static cpdit_status read_shapes(topology *t, json_t *root, cpdit_error *err)
{
    json_t *arr = json_object_get(json_object_get(root, "compute"), "shapes");
    free_shapes(t);
    size_t n = json_is_array(arr) ? json_array_size(arr) : 0;
    t->shapes = calloc(n ? n : 1, sizeof *t->shapes);
    if (!t->shapes)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i), *m = json_object_get(e, "model");
        json_t *lin = json_object_get(e, "linear"), *att = json_object_get(e, "attention");
        if (!json_is_string(m))
            continue;
        topo_shapes *d = &t->shapes[t->n_shapes++];
        d->model = strdup(json_string_value(m));
        d->width = get_int(e, "width", 0);
        d->height = get_int(e, "height", 0);
        d->txt_tokens = get_int(e, "txt_tokens", 0);
        d->img_tokens = get_int(e, "img_tokens", 0);
        d->ranks = get_int(e, "ranks", 0);
        get_num(e, "sync_s", &d->sync_s);
        size_t nl = json_is_array(lin) ? json_array_size(lin) : 0;
        size_t na = json_is_array(att) ? json_array_size(att) : 0;
        d->linear = calloc(nl ? nl : 1, sizeof *d->linear);
        d->attn = calloc(na ? na : 1, sizeof *d->attn);
        if (!d->model || !d->linear || !d->attn)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
        for (size_t j = 0; j < nl; j++) {
            json_t *x = json_array_get(lin, j);
            topo_shape_linear *y = &d->linear[d->n_linear];
            y->cp = get_int(x, "cp", 0);
            get_num(x, "time_s", &y->time_s);
            d->n_linear += y->cp > 0 && y->time_s > 0;
        }
        for (size_t j = 0; j < na; j++) {
            json_t *x = json_array_get(att, j);
            topo_shape_attn *y = &d->attn[d->n_attn];
            y->sq = get_int(x, "sq", 0);
            y->skv = get_int(x, "skv", 0);
            y->heads = get_int(x, "heads", 0);
            y->head_dim = get_int(x, "head_dim", 0);
            get_num(x, "time_s", &y->time_s);
            d->n_attn += y->sq > 0 && y->skv > 0 && y->time_s > 0;
        }
    }
    return CPDIT_OK;
}

const topo_shapes *topo_find_shapes(const topology *t, const char *model, int width, int height,
                                    int txt_tokens, int img_tokens)
{
    for (int i = 0; i < t->n_shapes; i++) {
        const topo_shapes *e = &t->shapes[i];
        if (e->width == width && e->height == height && e->txt_tokens == txt_tokens &&
            e->img_tokens == img_tokens && strcmp(e->model, model) == 0)
            return e;
    }
    return NULL;
}

double topo_shapes_linear_s(const topo_shapes *e, int cp)
{
    for (int i = 0; e && i < e->n_linear; i++)
        if (e->linear[i].cp == cp)
            return e->linear[i].time_s;
    return 0;
}

double topo_shapes_attn_s(const topo_shapes *e, int sq, int skv, int heads, int head_dim)
{
    for (int i = 0; e && i < e->n_attn; i++) {
        const topo_shape_attn *a = &e->attn[i];
        if (a->sq == sq && a->skv == skv && a->heads == heads && a->head_dim == head_dim)
            return a->time_s;
    }
    return 0;
}

cpdit_status topo_file_add_shapes(topology *t, void *entry_, cpdit_error *err)
{
    json_t *entry = entry_, *root = t->json;
    json_t *comp = json_object_get(root, "compute");
    if (!json_is_object(entry) || !json_is_object(comp)) {
        json_decref(entry);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path,
                               "no compute section to add the model's shapes to");
    }
    json_t *arr = json_object_get(comp, "shapes");
    if (!json_is_array(arr)) {
        arr = json_array();
        if (!arr || json_object_set_new(comp, "shapes", arr)) {
            json_decref(entry);
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
        }
    }
    static const char *const keys[] = {"width", "height", "txt_tokens", "img_tokens"};
    size_t at = json_array_size(arr);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *x = json_array_get(arr, i);
        int same = json_equal(json_object_get(x, "model"), json_object_get(entry, "model"));
        for (int k = 0; k < 4; k++)
            same &= get_int(x, keys[k], -1) == get_int(entry, keys[k], -2);
        if (same)
            at = i;
    }
    if (at < json_array_size(arr))
        json_array_set_new(arr, at, entry);
    else
        json_array_append_new(arr, entry);
    return read_shapes(t, root, err);
}

static cpdit_status read_hosts(topology *t, json_t *root, cpdit_error *err)
{
    json_t *hosts = json_object_get(root, "hosts");
    size_t n = json_is_array(hosts) ? json_array_size(hosts) : 0;
    int maxhost = -1;
    for (int r = 0; r < t->ranks; r++)
        maxhost = t->rank_map[r].host > maxhost ? t->rank_map[r].host : maxhost;
    if ((size_t)(maxhost + 1) > n)
        n = (size_t)(maxhost + 1);
    t->hosts = calloc(n ? n : 1, sizeof *t->hosts);
    if (!t->hosts)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
    t->n_hosts = (int)n;
    for (size_t i = 0; i < n; i++) {
        topo_host *h = &t->hosts[i];
        json_t *o = json_is_array(hosts) ? json_array_get(hosts, i) : NULL;
        json_t *name = json_object_get(o, "name"), *hw = json_object_get(o, "hwloc");
        char buf[32];
        snprintf(buf, sizeof buf, "host%zu", i);
        h->name = strdup(json_is_string(name) ? json_string_value(name) : buf);
        if (!h->name)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
        get_num(hw, "memory_bytes", &h->memory_bytes);
        json_t *gpus = json_object_get(hw, "gpus");
        h->ngpus = json_is_array(gpus) ? (int)json_array_size(gpus) : 0;
        json_t *nics = json_object_get(hw, "nics");
        h->nnics = json_is_array(nics) ? (int)json_array_size(nics) : 0;
        for (int g = 0; g < h->ngpus; g++) {
            double mb = 0;
            get_num(json_array_get(gpus, (size_t)g), "memory_bytes", &mb);
            if (mb > 0 && (h->gpu_memory_bytes == 0 || mb < h->gpu_memory_bytes))
                h->gpu_memory_bytes = mb;
        }
    }
    for (int r = 0; r < t->ranks; r++)
        t->hosts[t->rank_map[r].host].nranks++;
    return CPDIT_OK;
}

static cpdit_status read_rank_map(topology *t, json_t *root, cpdit_error *err)
{
    json_t *rm = json_object_get(root, "rank_map");
    if (!json_is_array(rm))
        return bad(err, t, "key \"%s\": missing or not an array (one entry per rank)",
                   "rank_map");
    t->rank_map = malloc((size_t)t->ranks * sizeof *t->rank_map);
    if (!t->rank_map)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
    for (int r = 0; r < t->ranks; r++)
        t->rank_map[r].host = -2; /* not seen yet */
    for (size_t i = 0; i < json_array_size(rm); i++) {
        json_t *e = json_array_get(rm, i);
        int r = get_int(e, "rank", -1), h = get_int(e, "host", -1);
        if (r < 0 || r >= t->ranks || h < 0)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, t->path,
                                   "key \"rank_map\": entry %zu needs \"rank\" in 0..%d and "
                                   "\"host\" >= 0",
                                   i, t->ranks - 1);
        topo_rank *d = &t->rank_map[r];
        d->host = h;
        d->local_rank = get_int(e, "local_rank", -1);
        d->package = get_int(e, "package", -1);
        d->numa = get_int(e, "numa", -1);
        d->gpu = get_int(e, "gpu", -1);
    }
    for (int r = 0; r < t->ranks; r++)
        if (t->rank_map[r].host == -2)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, t->path,
                                   "key \"rank_map\": rank %d is missing (the file describes "
                                   "%d ranks)",
                                   r, t->ranks);
    return CPDIT_OK;
}

static cpdit_status read_links(topology *t, json_t *root, cpdit_error *err)
{
    json_t *links = json_object_get(root, "links");
    json_t *fits = json_object_get(links, "fits");
    for (int c = 0; c < TOPO_NCLASS; c++) {
        json_t *f = json_object_get(fits, class_names[c]);
        topo_fit *d = &t->fits[c];
        if (!json_is_object(f))
            continue;
        if (get_num(f, "alpha_s", &d->alpha_s) != 1 || get_num(f, "beta_Bps", &d->beta_Bps) != 1 ||
            d->alpha_s < 0 || d->beta_Bps <= 0)
            return bad(err, t, "key \"links.fits.%s\": needs alpha_s >= 0 and beta_Bps > 0",
                       class_names[c]);
        d->samples = get_int(f, "samples", 0);
        d->measured = 1;
    }
    json_t *p2p = json_object_get(links, "p2p");
    size_t n = json_is_array(p2p) ? json_array_size(p2p) : 0;
    t->p2p = calloc(n ? n : 1, sizeof *t->p2p);
    if (!t->p2p)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(p2p, i);
        json_t *cl = json_object_get(e, "class");
        int c = topo_class_parse(json_is_string(cl) ? json_string_value(cl) : NULL);
        topo_p2p *d = &t->p2p[t->n_p2p];
        if (c < 0)
            continue;
        d->cls = (topo_class)c;
        get_num(e, "bytes", &d->bytes);
        get_num(e, "time_s_avg", &d->time_s_avg);
        get_num(e, "bw_Bps", &d->bw_Bps);
        get_num(e, "time_s_min", &d->time_s_min);
        json_t *pr = json_object_get(e, "ranks");
        d->rank_a = get_int_at(pr, 0), d->rank_b = get_int_at(pr, 1);
        if (d->bw_Bps <= 0 && d->time_s_avg > 0)
            d->bw_Bps = d->bytes / d->time_s_avg;
        if (d->bytes > 0 && d->bw_Bps > 0)
            t->n_p2p++;
    }
    json_t *coll = json_object_get(links, "collectives");
    n = json_is_array(coll) ? json_array_size(coll) : 0;
    t->coll = calloc(n ? n : 1, sizeof *t->coll);
    if (!t->coll)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
    static const char *const ops[] = {"alltoall", "allgather", "sendrecv_ring"};
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(coll, i), *op = json_object_get(e, "op");
        json_t *g = json_object_get(e, "group_ranks");
        topo_coll *d = &t->coll[t->n_coll];
        int o = -1;
        for (int k = 0; k < 3 && json_is_string(op); k++)
            if (strcmp(json_string_value(op), ops[k]) == 0)
                o = k;
        if (o < 0 || !json_is_array(g) || json_array_size(g) < 1)
            continue;
        d->op = (topo_coll_op)o;
        d->group_size = (int)json_array_size(g);
        d->cls = TOPO_SAME_NUMA;
        int ok = 1;
        for (size_t a = 0; a < json_array_size(g); a++)
            for (size_t b = a + 1; b < json_array_size(g); b++) {
                json_t *x = json_array_get(g, a), *y = json_array_get(g, b);
                int ra = json_is_integer(x) ? (int)json_integer_value(x) : -1;
                int rb = json_is_integer(y) ? (int)json_integer_value(y) : -1;
                if (ra < 0 || rb < 0 || ra >= t->ranks || rb >= t->ranks) {
                    ok = 0;
                    continue;
                }
                topo_class c = topo_pair_class(t, ra, rb);
                d->cls = c > d->cls ? c : d->cls;
            }
        get_num(e, "bytes", &d->bytes);
        get_num(e, "time_s_avg", &d->time_s_avg);
        get_num(e, "time_s_min", &d->time_s_min);
        get_num(e, "algbw_Bps", &d->algbw_Bps);
        get_num(e, "busbw_Bps", &d->busbw_Bps);
        if (ok && d->bytes > 0 && d->time_s_avg > 0)
            t->n_coll++;
    }
    return CPDIT_OK;
}

double topo_coll_time(const topology *t, topo_coll_op op, int group_size, topo_class cls,
                      double bytes)
{
    /* the two rows nearest below and above bytes (or the two nearest on one side) */
    const topo_coll *lo = NULL, *hi = NULL, *lo2 = NULL, *hi2 = NULL;
    for (int i = 0; i < t->n_coll; i++) {
        const topo_coll *c = &t->coll[i];
        if (c->op != op || c->group_size != group_size || c->cls != cls)
            continue;
        if (c->bytes <= bytes) {
            if (!lo || c->bytes > lo->bytes)
                lo2 = lo, lo = c;
            else if (!lo2 || c->bytes > lo2->bytes)
                lo2 = c;
        } else {
            if (!hi || c->bytes < hi->bytes)
                hi2 = hi, hi = c;
            else if (!hi2 || c->bytes < hi2->bytes)
                hi2 = c;
        }
    }
    const topo_coll *a = lo, *b = hi;
    if (!a)
        a = hi, b = hi2;
    else if (!b)
        b = lo, a = lo2;
    if (!a && !b)
        return 0;
    if (!a || !b || a->bytes == b->bytes) { /* one size measured: scale with bytes */
        const topo_coll *c = a ? a : b;
        return bytes > c->bytes ? c->time_s_avg * bytes / c->bytes : c->time_s_avg;
    }
    double tm = a->time_s_avg + (b->time_s_avg - a->time_s_avg) * (bytes - a->bytes) /
                                    (b->bytes - a->bytes);
    double floor_t = a->time_s_avg < b->time_s_avg ? a->time_s_avg : b->time_s_avg;
    return tm > floor_t ? tm : floor_t;
}

static cpdit_status read_doc(topology *t, json_t *root, cpdit_error *err)
{
    if (!json_is_object(root))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, t->path, "not a JSON object");
    json_t *fmt = json_object_get(root, "format");
    if (!json_is_integer(fmt))
        return bad(err, t, "key \"%s\": missing or not an integer; is this a cpdit topology "
                           "file (cpdit probe --output FILE)?", "format");
    if (json_integer_value(fmt) != TOPO_FORMAT)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, t->path,
                               "topology format %lld: this cpdit reads format %d only; rerun "
                               "`cpdit probe` with this cpdit to write a format %d file",
                               (long long)json_integer_value(fmt), TOPO_FORMAT, TOPO_FORMAT);
    cpdit_status vst = topo_file_validate(root, t->path, err); /* ranges, references */
    if (vst)
        return vst;
    t->ranks = get_int(root, "ranks", 0);
    if (t->ranks < 1)
        return bad(err, t, "key \"%s\": missing or not a positive integer", "ranks");
    cpdit_status st = read_rank_map(t, root, err);
    if (!st)
        st = read_hosts(t, root, err);
    if (!st)
        st = read_links(t, root, err);
    if (st)
        return st;
    json_t *comp = json_object_get(root, "compute");
    if (!comp || json_is_null(comp)) { /* cpdit probe --no-compute */
        t->sgemm_flops = t->attention_flops = TOPO_DEFAULT_FLOPS;
        t->threads_per_rank = 1;
        return read_tuned(t, root, err);
    }
    t->compute_measured = 1;
    if (get_num(comp, "sgemm_flops", &t->sgemm_flops) != 1 || t->sgemm_flops <= 0)
        return bad(err, t, "key \"%s\": missing or not a positive number", "compute.sgemm_flops");
    if (get_num(comp, "attention_flops", &t->attention_flops) < 0)
        return bad(err, t, "key \"%s\": not a number", "compute.attention_flops");
    if (t->attention_flops <= 0)
        t->attention_flops = t->sgemm_flops; /* not measured: assume SGEMM speed */
    t->threads_per_rank = get_int(comp, "threads_per_rank", 1);
    cpdit_status sst = read_shapes(t, root, err);
    return sst ? sst : read_tuned(t, root, err);
}

cpdit_status topo_file_parse(topology *t, const char *text, const char *name, cpdit_error *err)
{
    memset(t, 0, sizeof *t);
    t->path = strdup(name ? name : "topology");
    if (!t->path)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "topology", "out of memory");
    json_error_t je;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, t->path, "line %d column %d: %s", je.line,
                               je.column, je.text);
    t->json = root;
    cpdit_status st = read_doc(t, root, err);
    if (st)
        topo_file_free(t);
    return st;
}

cpdit_status topo_file_load(topology *t, const char *path, cpdit_error *err)
{
    memset(t, 0, sizeof *t);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "cannot open the topology file "
                                                           "(make one with `cpdit probe`)");
    /* a FIFO is refused unopened (no hang), a device (/dev/zero) unread */
    FILE *fp = cpdit_fopen_regular(path, "the topology file", err);
    if (!fp)
        return err->status;
    json_error_t je;
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
    fclose(fp);
    if (!root)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "line %d column %d: %s", je.line,
                               je.column, je.text);
    t->path = strdup(path);
    t->json = root;
    if (!t->path) {
        json_decref(root);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    cpdit_status st = read_doc(t, root, err);
    if (st)
        topo_file_free(t);
    return st;
}

void topo_file_free(topology *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_hosts; i++)
        free(t->hosts[i].name);
    free(t->hosts);
    free(t->rank_map);
    free(t->p2p);
    free(t->coll);
    free_tuned(t);
    free_shapes(t);
    if (t->json)
        json_decref((json_t *)t->json);
    free(t->path);
    memset(t, 0, sizeof *t);
}

topo_class topo_pair_class(const topology *t, int a, int b)
{
    const topo_rank *x = &t->rank_map[a], *y = &t->rank_map[b];
    if (x->host != y->host)
        return TOPO_CROSS_NODE;
    if (x->package >= 0 && x->package == y->package) {
        if (x->numa >= 0 && x->numa == y->numa)
            return TOPO_SAME_NUMA;
        return TOPO_SAME_SOCKET;
    }
    if (x->package < 0 && x->numa >= 0 && x->numa == y->numa)
        return TOPO_SAME_NUMA;
    return TOPO_SAME_NODE;
}

topo_class topo_group_class(const topology *t, const int *group, int n)
{
    topo_class w = TOPO_SAME_NUMA;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            topo_class c = topo_pair_class(t, group[i], group[j]);
            w = c > w ? c : w;
        }
    return w;
}

topo_fit topo_fit_for(const topology *t, topo_class c, int *used)
{
    for (int k = c; k < TOPO_NCLASS; k++)
        if (t->fits[k].measured) {
            if (used)
                *used = k;
            return t->fits[k];
        }
    if (used)
        *used = -1;
    topo_fit f = {0, TOPO_DEFAULT_INTRA_ALPHA_S, TOPO_DEFAULT_INTRA_BETA_BPS, 0};
    if (c == TOPO_CROSS_NODE)
        f.alpha_s = TOPO_DEFAULT_CROSS_ALPHA_S, f.beta_Bps = TOPO_DEFAULT_CROSS_BETA_BPS;
    return f;
}

void topo_tuned_key_of(const topo_tuned *e, topo_tuned_key *k)
{
    *k = (topo_tuned_key){e->model,       e->width, e->height,  e->frames, e->text_tokens,
                          e->cfg,         e->ranks, e->threads, e->backend, e->dtype};
}

static int same_key(const topo_tuned_key *a, const topo_tuned_key *b)
{
    return a->width == b->width && a->height == b->height && a->frames == b->frames &&
           a->text_tokens == b->text_tokens && a->cfg == b->cfg && a->ranks == b->ranks &&
           a->threads == b->threads && a->model && b->model && strcmp(a->model, b->model) == 0 &&
           a->backend && b->backend && a->backend[0] && strcmp(a->backend, b->backend) == 0 &&
           a->dtype && b->dtype && strcmp(a->dtype, b->dtype) == 0;
}

const topo_tuned *topo_find_tuned(const topology *t, const topo_tuned_key *k)
{
    for (int i = 0; i < t->n_tuned; i++) {
        topo_tuned_key ek;
        topo_tuned_key_of(&t->tuned[i], &ek);
        if (same_key(&ek, k))
            return &t->tuned[i];
    }
    return NULL;
}

static json_t *grid_json(const topo_grid_time *g, int with_time)
{
    json_t *o = json_pack("{s:i, s:i, s:i, s:s}", "dp", g->dp, "ring", g->ring, "ulysses",
                          g->ulysses, "variant", g->variant);
    if (o && with_time)
        json_object_set_new(o, "step_s", json_real(g->step_s));
    return o;
}

cpdit_status topo_file_save_tuned(topology *t, const topo_tuned *e, cpdit_error *err)
{
    json_t *root = t->json;
    json_t *arr = json_object_get(root, "tuned");
    if (!json_is_array(arr)) {
        arr = json_array();
        if (!arr || json_object_set_new(root, "tuned", arr))
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
    }
    json_t *ent = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:i}", "model",
                            e->model, "width", e->width, "height", e->height, "frames", e->frames,
                            "text_tokens", e->text_tokens, "cfg", e->cfg, "ranks", e->ranks,
                            "backend", e->backend, "dtype", e->dtype, "threads_per_rank",
                            e->threads);
    if (ent && e->images > 0)
        json_object_set_new(ent, "images", json_integer(e->images));
    json_t *ms = json_array();
    if (!ent || !ms)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
    json_object_set_new(ent, "chosen", grid_json(&e->chosen, 0));
    for (int i = 0; i < e->n_measured; i++)
        json_array_append_new(ms, grid_json(&e->measured[i], 1));
    json_object_set_new(ent, "measured", ms);
    size_t at = json_array_size(arr);
    topo_tuned_key want;
    topo_tuned_key_of(e, &want);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *x = json_array_get(arr, i), *m = json_object_get(x, "model");
        if (!json_is_string(m))
            continue;
        topo_tuned have;
        memset(&have, 0, sizeof have);
        have.model = (char *)json_string_value(m);
        have.width = get_int(x, "width", 0);
        have.height = get_int(x, "height", 0);
        have.ranks = get_int(x, "ranks", 0);
        read_key_rest(x, &have);
        topo_tuned_key hk;
        topo_tuned_key_of(&have, &hk);
        if (same_key(&hk, &want))
            at = i;
    }
    if (at < json_array_size(arr))
        json_array_set_new(arr, at, ent);
    else
        json_array_append_new(arr, ent);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!text)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->path, "out of memory");
    cpdit_status st = atomic_write_buffer(t->path, text, strlen(text), err);
    free(text);
    if (st)
        return st;
    return read_tuned(t, root, err);
}
