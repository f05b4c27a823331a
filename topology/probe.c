/* probe.c — cpdit_probe_run: who shares what, each host's hardware, compute rates, measured
 * links and their alpha-beta fits, as the topology document (format 1, topology/README.md). */
#include "config.h"

#include "topology/probe.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/host_runtime.h"
#include "lib/core/version.h"
#include "lib/cp/comm_mpi.h"
#include "lib/io/atomic_file.h"
#include "topology/link_bench.h"
#include "topology/link_fit.h"
#include "topology/probe_shapes.h"
#include "topology/topology_hwloc.h"

#define WHERE_PROBE "probe"
#define HOST_NAME_MAX_LEN 256
#define PROBE_MAX_BUFFER_BYTES (1ull << 30) /* collective sizes needing more are skipped */

const char *probe_class_name(probe_class c)
{
    static const char *names[] = {"same_numa", "same_socket", "same_node", "cross_node"};
    return c >= 0 && c < PROBE_N_CLASSES ? names[c] : "?";
}

probe_class probe_pair_class(const probe_place *a, const probe_place *b)
{
    if (a->host != b->host)
        return PROBE_CROSS_NODE;
    if (a->numa >= 0 && a->numa == b->numa)
        return PROBE_SAME_NUMA;
    if (a->package >= 0 && a->package == b->package)
        return PROBE_SAME_SOCKET;
    return PROBE_SAME_NODE;
}

void cpdit_probe_options_default(cpdit_probe_options *o, int quick)
{
    static const size_t p2p_full[] = {8, 64, 512, 4096, 32768, 262144, 1048576, 4194304,
                                      16777216};
    static const size_t p2p_quick[] = {8, 4096, 262144, 2097152};
    static const size_t coll_full[] = {16384, 262144, 4194304, 33554432};
    static const size_t coll_quick[] = {262144, 4194304};
    memset(o, 0, sizeof *o);
    o->quick = quick;
    o->links = 1;
    o->compute = 1;
    o->pairs_per_class = quick ? 1 : 2;
    const size_t *p = quick ? p2p_quick : p2p_full, *c = quick ? coll_quick : coll_full;
    o->n_p2p_bytes = quick ? 4 : 9;
    o->n_coll_bytes = quick ? 2 : 4;
    memcpy(o->p2p_bytes, p, (size_t)o->n_p2p_bytes * sizeof *p);
    memcpy(o->coll_bytes, c, (size_t)o->n_coll_bytes * sizeof *c);
    o->warmup = quick ? 2 : 5;
    o->trials = quick ? 3 : 5;
    o->max_iters = quick ? 200 : 1000;
    o->target_s = quick ? 0.03 : 0.25;
}

/* ---------------------------------------------------------------- agreement */

/* A failed transfer: the peer may wait on it forever, so end the job. */
static void fatal(MPI_Comm ctl, const cpdit_error *err)
{
    char buf[CPDIT_ERROR_WHERE_MAX + CPDIT_ERROR_WHAT_MAX + 16];
    fprintf(stderr, "%s (aborting the job: peers may be waiting on this rank)\n",
            cpdit_error_format(err, buf, sizeof buf));
    MPI_Abort(ctl, 1);
}

/* ---------------------------------------------------------------- identity, places */

typedef struct probe_state {
    MPI_Comm ctl;
    int rank, size, n_hosts;
    probe_place *place; /* size entries */
    int *local_rank;    /* size entries */
    int *host_first;    /* n_hosts entries: first rank of each host */
    char *names;        /* n_hosts x HOST_NAME_MAX_LEN */
    const cpdit_probe_options *o;
} probe_state;

static void host_name(char *out)
{
    const char *env = getenv("CPDIT_HOSTNAME");
    memset(out, 0, HOST_NAME_MAX_LEN);
    if (env && *env) {
        snprintf(out, HOST_NAME_MAX_LEN, "%s", env);
        return;
    }
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS || len <= 0)
        snprintf(name, sizeof name, "unknown");
    name[len > 0 && len < MPI_MAX_PROCESSOR_NAME ? len : MPI_MAX_PROCESSOR_NAME - 1] = '\0';
    snprintf(out, HOST_NAME_MAX_LEN, "%s", name);
}

/* Host of every rank from the gathered names (n x HOST_NAME_MAX_LEN). */
static cpdit_status assign_hosts(probe_state *s, const char *all, cpdit_error *err)
{
    s->host_first = malloc((size_t)s->size * sizeof *s->host_first);
    s->names = malloc((size_t)s->size * HOST_NAME_MAX_LEN);
    if (!s->host_first || !s->names)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
    s->n_hosts = 0;
    for (int r = 0; r < s->size; r++) {
        const char *name = all + (size_t)r * HOST_NAME_MAX_LEN;
        int h = 0;
        while (h < s->n_hosts && strcmp(s->names + (size_t)h * HOST_NAME_MAX_LEN, name) != 0)
            h++;
        if (h == s->n_hosts) {
            memcpy(s->names + (size_t)h * HOST_NAME_MAX_LEN, name, HOST_NAME_MAX_LEN);
            s->host_first[h] = r;
            s->n_hosts++;
        }
        s->place[r].host = h;
        int local = 0;
        for (int q = 0; q < r; q++)
            local += s->place[q].host == h;
        s->local_rank[r] = local;
    }
    return CPDIT_OK;
}

/* Names, places, and each host's hwloc summary (as JSON text, on the host's first rank). */
static cpdit_status find_places(probe_state *s, char **summary_text, cpdit_error *err)
{
    char me[HOST_NAME_MAX_LEN];
    char *all = malloc((size_t)s->size * HOST_NAME_MAX_LEN);
    s->place = calloc((size_t)s->size, sizeof *s->place);
    s->local_rank = calloc((size_t)s->size, sizeof *s->local_rank);
    cpdit_status st = all && s->place && s->local_rank
                          ? CPDIT_OK
                          : cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
    if ((st = cpdit_comm_agree_mpi(s->ctl, st, err)) != CPDIT_OK) {
        free(all);
        return st;
    }
    host_name(me);
    MPI_Allgather(me, HOST_NAME_MAX_LEN, MPI_CHAR, all, HOST_NAME_MAX_LEN, MPI_CHAR, s->ctl);
    st = assign_hosts(s, all, err);
    free(all);
    if ((st = cpdit_comm_agree_mpi(s->ctl, st, err)) != CPDIT_OK)
        return st;

    const int leader = s->host_first[s->place[s->rank].host] == s->rank;
    hwloc_topology_t topo = NULL;
    int mine[2] = {-1, -1};
    st = topo_hwloc_load_local(&topo, leader, err);
    if (st == CPDIT_OK) {
        topo_hwloc_locality(topo, &mine[0], &mine[1]);
        if (leader) {
            topo_nvml_info *nvml = malloc(sizeof *nvml);
            json_t *sum = NULL;
            if (!nvml)
                st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
            else
                topo_nvml_query(nvml);
            if (st == CPDIT_OK)
                st = topo_hwloc_summary(topo, nvml, &sum, err);
            if (st == CPDIT_OK && !(*summary_text = json_dumps(sum, JSON_COMPACT)))
                st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
            json_decref(sum);
            free(nvml);
        }
        hwloc_topology_destroy(topo);
    }
    if ((st = cpdit_comm_agree_mpi(s->ctl, st, err)) != CPDIT_OK)
        return st;
    int *pl = malloc(2 * (size_t)s->size * sizeof *pl);
    st = pl ? CPDIT_OK : cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
    if ((st = cpdit_comm_agree_mpi(s->ctl, st, err)) != CPDIT_OK)
        return st;
    MPI_Allgather(mine, 2, MPI_INT, pl, 2, MPI_INT, s->ctl);
    for (int r = 0; r < s->size; r++) {
        s->place[r].package = pl[2 * r];
        s->place[r].numa = pl[2 * r + 1];
    }
    free(pl);
    return CPDIT_OK;
}

/* Rank 0 gets every host's summary text (hosts[h]); the others send theirs. */
static cpdit_status gather_summaries(probe_state *s, char *mine, json_t *hosts, cpdit_error *err)
{
    int len = mine ? (int)strlen(mine) + 1 : 0;
    int *lens = NULL, *displs = NULL;
    char *all = NULL;
    cpdit_status st = CPDIT_OK;
    if (s->rank == 0) {
        lens = malloc((size_t)s->size * sizeof *lens);
        displs = malloc((size_t)s->size * sizeof *displs);
        if (!lens || !displs)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
    }
    if ((st = cpdit_comm_agree_mpi(s->ctl, st, err)) != CPDIT_OK)
        goto out;
    MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, s->ctl);
    if (s->rank == 0) {
        long long total = 0;
        for (int r = 0; r < s->size; r++) {
            displs[r] = (int)total;
            total += lens[r];
        }
        if (total > INT_MAX || !(all = malloc((size_t)total + 1)))
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE,
                                 "host summaries too large (%lld bytes)", total);
    }
    if ((st = cpdit_comm_agree_mpi(s->ctl, st, err)) != CPDIT_OK)
        goto out;
    MPI_Gatherv(mine, len, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, s->ctl);
    for (int h = 0; s->rank == 0 && h < s->n_hosts && st == CPDIT_OK; h++) {
        json_error_t jerr;
        json_t *hw = json_loads(all + displs[s->host_first[h]], 0, &jerr);
        json_t *host = json_object(), *ranks = json_array();
        for (int r = 0; r < s->size; r++)
            if (s->place[r].host == h)
                json_array_append_new(ranks, json_integer(r));
        if (!hw || !host || !ranks ||
            json_object_set_new(host, "name",
                                json_string(s->names + (size_t)h * HOST_NAME_MAX_LEN)) ||
            json_object_set_new(host, "ranks", ranks) || json_object_set_new(host, "hwloc", hw) ||
            json_array_append_new(hosts, host))
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE,
                                 "cannot assemble the summary of host %d", h);
    }
    st = cpdit_comm_agree_mpi(s->ctl, st, err);
out:
    free(lens);
    free(displs);
    free(all);
    return st;
}

/* ---------------------------------------------------------------- JSON helpers */

static json_t *int_array(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static void set_times(json_t *e, const link_times *t)
{
    json_object_set_new(e, "bytes", json_integer((json_int_t)t->bytes));
    json_object_set_new(e, "time_s_min", json_real(t->min_s));
    json_object_set_new(e, "time_s_avg", json_real(t->avg_s));
    json_object_set_new(e, "time_s_max", json_real(t->max_s));
}

/* ---------------------------------------------------------------- links */

/* Up to k pairs of class c, preferring pairs that share no rank with pairs already chosen. */
static int choose_pairs(const probe_state *s, probe_class c, int k, int (*pairs)[2])
{
    int n = 0;
    char *used = calloc((size_t)s->size, 1);
    for (int pass = 0; pass < 2 && n < k; pass++)
        for (int a = 0; a < s->size && n < k; a++)
            for (int b = a + 1; b < s->size && n < k; b++) {
                if (probe_pair_class(&s->place[a], &s->place[b]) != c)
                    continue;
                int dup = 0;
                for (int i = 0; i < n; i++)
                    dup |= pairs[i][0] == a && pairs[i][1] == b;
                if (dup || (pass == 0 && used && (used[a] || used[b])))
                    continue;
                pairs[n][0] = a;
                pairs[n][1] = b;
                if (used)
                    used[a] = used[b] = 1;
                n++;
            }
    free(used);
    return n;
}

static size_t max_size(const size_t *v, int n)
{
    size_t m = 0;
    for (int i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static link_bench_opts bench_opts(const cpdit_probe_options *o, const probe_transport *tr)
{
    link_bench_opts b = {o->warmup, o->trials, o->max_iters, o->target_s, tr ? tr->sync : NULL};
    return b;
}

/* Ping-pongs per class into p2p (rank 0), fits into fits. */
static void measure_p2p(probe_state *s, cpdit_comm *c, const probe_transport *tr, float *buf,
                        json_t *p2p, json_t *fits)
{
    const cpdit_probe_options *o = s->o;
    const link_bench_opts bo = bench_opts(o, tr);
    const char *transport = tr ? tr->name : "mpi";
    cpdit_error err;
    cpdit_error_clear(&err);
    int(*pairs)[2] = malloc((size_t)(o->pairs_per_class > 0 ? o->pairs_per_class : 1) *
                            sizeof *pairs);
    if (!pairs) {
        cpdit_error_set(&err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
        fatal(s->ctl, &err);
    }
    for (int cl = 0; cl < PROBE_N_CLASSES; cl++) {
        const int np = choose_pairs(s, (probe_class)cl, o->pairs_per_class, pairs);
        double *xs = malloc((size_t)(np * o->n_p2p_bytes + 1) * 2 * sizeof *xs);
        double *ys = xs ? xs + np * o->n_p2p_bytes + 1 : NULL;
        int n_samples = 0;
        if (!xs) {
            cpdit_error_set(&err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
            fatal(s->ctl, &err);
        }
        for (int p = 0; p < np; p++) {
            if (s->rank == 0 && o->log)
                fprintf(o->log, "probe: %s ping-pong, ranks %d-%d (%s), %d sizes\n",
                        probe_class_name((probe_class)cl), pairs[p][0], pairs[p][1], transport,
                        o->n_p2p_bytes);
            for (int i = 0; i < o->n_p2p_bytes; i++) {
                link_times t;
                if (link_bench_pingpong(c, s->ctl, pairs[p][0], pairs[p][1], o->p2p_bytes[i], buf,
                                        &bo, &t, &err) != CPDIT_OK)
                    fatal(s->ctl, &err);
                xs[n_samples] = (double)t.bytes;
                ys[n_samples++] = t.min_s; /* the best trial: what load disturbs least */
                if (s->rank != 0)
                    continue;
                json_t *e = json_object();
                json_object_set_new(e, "class", json_string(probe_class_name((probe_class)cl)));
                json_object_set_new(e, "ranks", int_array(pairs[p], 2));
                set_times(e, &t);
                json_object_set_new(e, "bw_Bps", json_real(t.avg_s > 0 ? t.bytes / t.avg_s : 0));
                json_object_set_new(e, "iterations", json_integer(t.iters));
                json_object_set_new(e, "transport", json_string(transport));
                json_array_append_new(p2p, e);
            }
        }
        link_fit fit;
        if (s->rank == 0 && np > 0 && link_fit_alpha_beta(xs, ys, (size_t)n_samples, &fit) == 0) {
            json_t *f = json_object();
            json_object_set_new(f, "alpha_s", json_real(fit.alpha_s));
            json_object_set_new(f, "beta_Bps", json_real(fit.beta_Bps));
            json_object_set_new(f, "samples", json_integer(fit.samples));
            json_object_set_new(fits, probe_class_name((probe_class)cl), f);
        }
        free(xs);
    }
    free(pairs);
}

/* The groups whose collectives are measured: the world; with several hosts also host 0's
 * ranks and the first rank of every host. color[r] for MPI_Comm_split (-1: not a member). */
static int group_colors(const probe_state *s, int g, int *color)
{
    int members = 0;
    for (int r = 0; r < s->size; r++) {
        int in = g == 0 || (g == 1 && s->place[r].host == 0) || (g == 2 && s->local_rank[r] == 0);
        color[r] = in ? 0 : -1;
        members += in;
    }
    return members;
}

/* The widest class of any pair inside the group. */
static probe_class group_class(const probe_state *s, const int *color)
{
    probe_class w = PROBE_SAME_NUMA;
    for (int a = 0; a < s->size; a++)
        for (int b = a + 1; b < s->size; b++)
            if (color[a] == 0 && color[b] == 0) {
                probe_class c = probe_pair_class(&s->place[a], &s->place[b]);
                w = c > w ? c : w;
            }
    return w;
}

static void measure_collectives(probe_state *s, const probe_transport *tr, float *buf,
                                json_t *colls)
{
    const cpdit_probe_options *o = s->o;
    const link_bench_opts bo = bench_opts(o, tr);
    const char *transport = tr ? tr->name : "mpi";
    cpdit_error err;
    cpdit_error_clear(&err);
    int *color = malloc((size_t)s->size * sizeof *color), *ranks = malloc((size_t)s->size * sizeof *ranks);
    if (!color || !ranks) {
        cpdit_error_set(&err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
        fatal(s->ctl, &err);
    }
    for (int g = 0; g < 3; g++) {
        const int members = group_colors(s, g, color);
        if (members < 2 || (g > 0 && (s->n_hosts < 2 || members == s->size)))
            continue;
        int n = 0;
        for (int r = 0; r < s->size; r++)
            if (color[r] == 0)
                ranks[n++] = r;
        const probe_class cls = group_class(s, color);
        MPI_Comm sub = MPI_COMM_NULL;
        MPI_Comm_split(s->ctl, color[s->rank] == 0 ? 0 : MPI_UNDEFINED, s->rank, &sub);
        cpdit_comm *c = NULL;
        if (sub != MPI_COMM_NULL) {
            cpdit_status st = tr ? tr->create(sub, &c, &err) : cpdit_comm_mpi_create(sub, 1, &c, &err);
            if (tr)
                MPI_Comm_free(&sub);
            if (st != CPDIT_OK)
                fatal(s->ctl, &err);
        }
        if (s->rank == 0 && o->log)
            fprintf(o->log, "probe: collectives over %d ranks (%s, %s)\n", n,
                    probe_class_name(cls), transport);
        for (int op = 0; c && op < 3; op++)
            for (int i = 0; i < o->n_coll_bytes; i++) {
                const size_t need = link_bench_collective_floats((link_coll_op)op, n,
                                                                 o->coll_bytes[i]);
                if (need * sizeof(float) > PROBE_MAX_BUFFER_BYTES)
                    continue;
                link_times t;
                if (link_bench_collective(c, (link_coll_op)op, o->coll_bytes[i], buf, &bo, &t,
                                          &err) != CPDIT_OK)
                    fatal(s->ctl, &err);
                if (s->rank != 0)
                    continue;
                json_t *e = json_object();
                json_object_set_new(e, "op", json_string(link_coll_op_name((link_coll_op)op)));
                json_object_set_new(e, "group_ranks", int_array(ranks, n));
                json_object_set_new(e, "class", json_string(probe_class_name(cls)));
                set_times(e, &t);
                json_object_set_new(e, "algbw_Bps", json_real(link_algbw((link_coll_op)op, n, &t)));
                json_object_set_new(e, "busbw_Bps", json_real(link_busbw((link_coll_op)op, n, &t)));
                json_object_set_new(e, "iterations", json_integer(t.iters));
                json_object_set_new(e, "transport", json_string(transport));
                json_array_append_new(colls, e);
            }
        cpdit_comm_destroy(c);
        if (link_quiet_barrier(s->ctl) != 0) {
            cpdit_error_set(&err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "MPI barrier failed");
            fatal(s->ctl, &err);
        }
    }
    free(color);
    free(ranks);
}

/* All link tables through one transport: MPI (tr NULL) or the NCCL hook's. */
static cpdit_status measure_links(probe_state *s, const probe_transport *tr, json_t *links,
                                  cpdit_error *err)
{
    const cpdit_probe_options *o = s->o;
    size_t floats = max_size(o->p2p_bytes, o->n_p2p_bytes) / sizeof(float) + 1;
    for (int op = 0; op < 3; op++)
        for (int i = 0; i < o->n_coll_bytes; i++) {
            size_t need = link_bench_collective_floats((link_coll_op)op, s->size, o->coll_bytes[i]);
            if (need * sizeof(float) <= PROBE_MAX_BUFFER_BYTES && need > floats)
                floats = need;
        }
    float *buf = tr ? tr->alloc(floats * sizeof(float)) : calloc(floats, sizeof(float));
    cpdit_comm *c = NULL;
    cpdit_status st = buf ? CPDIT_OK
                          : cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE,
                                            "out of memory (%zu MiB of link buffers)",
                                            floats * sizeof(float) >> 20);
    if (st == CPDIT_OK)
        st = tr ? tr->create(s->ctl, &c, err) : cpdit_comm_mpi_create(s->ctl, 0, &c, err);
    if ((st = cpdit_comm_agree_mpi(s->ctl, st, err)) == CPDIT_OK) {
        /* MPI's fits are "fits" (format 1); a second transport's go to "fits_<name>" */
        json_t *fits = json_object_get(links, "fits");
        if (tr && s->rank == 0) {
            char key[64];
            snprintf(key, sizeof key, "fits_%s", tr->name);
            json_object_set_new(links, key, fits = json_object());
        }
        measure_p2p(s, c, tr, buf, json_object_get(links, "p2p"), fits);
        measure_collectives(s, tr, buf, json_object_get(links, "collectives"));
    }
    cpdit_comm_destroy(c);
    if (tr && buf)
        tr->release(buf);
    else
        free(buf);
    return st;
}

/* ---------------------------------------------------------------- compute */

static cpdit_status measure_compute(probe_state *s, json_t *compute, cpdit_error *err)
{
    double mine[2] = {0, 0};
    cpdit_status st = probe_compute_rates(s->o->quick, &mine[0], &mine[1], err);
    if ((st = cpdit_comm_agree_mpi(s->ctl, st, err)) != CPDIT_OK)
        return st;
    double *all = s->rank == 0 ? malloc(2 * (size_t)s->size * sizeof *all) : NULL;
    st = s->rank != 0 || all ? CPDIT_OK
                             : cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
    if ((st = cpdit_comm_agree_mpi(s->ctl, st, err)) != CPDIT_OK)
        return st;
    MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, s->ctl);
    if (s->rank == 0) {
        double mn[2] = {all[0], all[1]};
        json_t *per = json_array();
        for (int r = 0; r < s->size; r++) {
            json_t *e = json_object();
            json_object_set_new(e, "rank", json_integer(r));
            json_object_set_new(e, "sgemm_flops", json_real(all[2 * r]));
            json_object_set_new(e, "attention_flops", json_real(all[2 * r + 1]));
            json_array_append_new(per, e);
            mn[0] = all[2 * r] < mn[0] ? all[2 * r] : mn[0];
            mn[1] = all[2 * r + 1] < mn[1] ? all[2 * r + 1] : mn[1];
        }
        json_object_set_new(compute, "sgemm_flops", json_real(mn[0]));
        json_object_set_new(compute, "attention_flops", json_real(mn[1]));
        json_object_set_new(compute, "per_rank", per);
    }
    free(all);
    return CPDIT_OK;
}

/* ---------------------------------------------------------------- the document */

static json_t *rank_map(const probe_state *s, json_t *hosts)
{
    json_t *m = json_array();
    for (int r = 0; r < s->size; r++) {
        json_t *host = json_array_get(hosts, (size_t)s->place[r].host);
        const size_t n_gpus = json_array_size(json_object_get(json_object_get(host, "hwloc"), "gpus"));
        json_t *e = json_object();
        json_object_set_new(e, "rank", json_integer(r));
        json_object_set_new(e, "host", json_integer(s->place[r].host));
        json_object_set_new(e, "local_rank", json_integer(s->local_rank[r]));
        json_object_set_new(e, "package", json_integer(s->place[r].package));
        json_object_set_new(e, "numa", json_integer(s->place[r].numa));
        json_object_set_new(e, "gpu", json_integer(n_gpus ? (json_int_t)(s->local_rank[r] % (int)n_gpus) : -1));
        json_array_append_new(m, e);
    }
    return m;
}

static void utc_now(char *buf, size_t n)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static double wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

cpdit_status cpdit_probe_run(MPI_Comm comm, const cpdit_probe_options *o, json_t **out,
                             cpdit_error *err)
{
    probe_state s;
    memset(&s, 0, sizeof s);
    s.o = o;
    *out = NULL;
    const double t0 = wall_s();
    if (MPI_Comm_dup(comm, &s.ctl) != MPI_SUCCESS)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "MPI_Comm_dup failed");
    MPI_Comm_rank(s.ctl, &s.rank);
    MPI_Comm_size(s.ctl, &s.size);

    json_t *doc = NULL, *hosts = NULL, *links = NULL, *compute = NULL;
    cpdit_status st = CPDIT_OK;
    /* tests: a local failure on one rank, which every rank must agree on (probe.h) */
    const char *fail = getenv(PROBE_FAIL_ENV);
    if (fail && *fail && atoi(fail) == s.rank)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE,
                             "rank %d: failure injected by $%s", s.rank, PROBE_FAIL_ENV);
    if (st == CPDIT_OK && s.rank == 0) {
        char created[32];
        utc_now(created, sizeof created);
        doc = json_object();
        hosts = json_array();
        links = json_object();
        compute = json_object();
        if (!doc || !hosts || !links || !compute)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_PROBE, "out of memory");
        else {
            json_object_set_new(doc, "format", json_integer(CPDIT_TOPOLOGY_FORMAT));
            json_object_set_new(doc, "cpdit_version", json_string(cpdit_version_string()));
            json_object_set_new(doc, "created", json_string(created));
            json_object_set_new(doc, "ranks", json_integer(s.size));
            json_object_set(doc, "hosts", hosts);
            json_object_set_new(links, "p2p", json_array());
            json_object_set_new(links, "collectives", json_array());
            json_object_set_new(links, "fits", json_object());
        }
    }
    if ((st = cpdit_comm_agree_mpi(s.ctl, st, err)) != CPDIT_OK)
        goto done;

    char *summary = NULL;
    st = find_places(&s, &summary, err);
    if (st == CPDIT_OK)
        st = gather_summaries(&s, summary, hosts, err);
    free(summary);
    if (st != CPDIT_OK)
        goto done;
    if (s.rank == 0 && o->log)
        fprintf(o->log, "probe: %d rank%s on %d host%s\n", s.size, s.size == 1 ? "" : "s",
                s.n_hosts, s.n_hosts == 1 ? "" : "s");
    if (s.rank == 0)
        json_object_set_new(doc, "rank_map", rank_map(&s, hosts));

    if (o->links && s.size > 1) {
        if ((st = measure_links(&s, NULL, links, err)) != CPDIT_OK)
            goto done;
        if (o->nccl && (st = measure_links(&s, o->nccl, links, err)) != CPDIT_OK)
            goto done;
    }
    if (s.rank == 0)
        json_object_set(doc, "links", links);
    if (o->compute) {
        if (s.rank == 0 && o->log)
            fprintf(o->log, "probe: compute rates (SGEMM, attention kernel)\n");
        if ((st = measure_compute(&s, compute, err)) != CPDIT_OK)
            goto done;
        if (o->shape) {
            if (s.rank == 0 && o->log)
                fprintf(o->log, "probe: GEMMs and attention at the shapes of %s, %dx%d\n",
                        o->shape->key, o->shape->width, o->shape->height);
            json_t *entry = NULL;
            st = probe_shapes_measure(s.ctl, o->shape, o->shape_ranks > 0 ? o->shape_ranks
                                                                          : s.size,
                                      o->quick, &entry, err);
            if (st != CPDIT_OK)
                goto done;
            if (s.rank == 0) {
                json_t *arr = json_array();
                json_array_append_new(arr, entry);
                json_object_set_new(compute, "shapes", arr);
            }
        }
        if (s.rank == 0) {
            json_object_set_new(compute, "threads_per_rank",
                                json_integer(cpdit_host_gemm_threads()));
            json_object_set(doc, "compute", compute);
        }
    }
    if (s.rank == 0) {
        json_t *info = json_object();
        json_object_set_new(info, "quick", json_boolean(o->quick));
        json_object_set_new(info, "seconds", json_real(wall_s() - t0));
        char transports[64];
        snprintf(transports, sizeof transports, "mpi%s%s", o->nccl ? "+" : "",
                 o->nccl ? o->nccl->name : "");
        json_object_set_new(info, "transports", json_string(transports));
        json_object_set_new(doc, "probe", info);
        *out = doc;
        doc = NULL;
    }
done:
    json_decref(doc);
    json_decref(hosts);
    json_decref(links);
    json_decref(compute);
    free(s.place);
    free(s.local_rank);
    free(s.host_first);
    free(s.names);
    MPI_Comm_free(&s.ctl);
    return st;
}

cpdit_status cpdit_topology_write(const json_t *doc, const char *path, cpdit_error *err)
{
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (!text)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot serialise the topology");
    const size_t len = strlen(text);
    char *withnl = realloc(text, len + 2);
    if (!withnl) {
        free(text);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    withnl[len] = '\n';
    withnl[len + 1] = '\0';
    cpdit_status st = atomic_write_buffer(path, withnl, len + 1, err);
    free(withnl);
    return st;
}
