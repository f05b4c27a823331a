/* topo_validate.c — ranges and cross-references of a topology file (topo_validate.h). */
#include "topology/topo_validate.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The message of one bad key: where = path, what = "KEY: ...". */
#define BAD(err, path, ...) cpdit_error_set(err, CPDIT_ERR_INPUT, path, __VA_ARGS__)

/* obj[key] as a number when present: 1 and *v, 0 when absent or null, -1 when not a number. */
static int number_at(const json_t *obj, const char *key, double *v)
{
    json_t *x = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!x || json_is_null(x))
        return 0;
    if (!json_is_number(x))
        return -1;
    *v = json_number_value(x);
    return 1;
}

/* obj[key] (named KEY in messages as prefix.key) within [lo, hi] when present. */
static cpdit_status check_range(const json_t *obj, const char *prefix, const char *key,
                                double lo, double hi, const char *unit, const char *path,
                                cpdit_error *err)
{
    double v = 0;
    int got = number_at(obj, key, &v);
    if (got < 0)
        return BAD(err, path, "%s.%s: not a number", prefix, key);
    if (got && !(v >= lo && v <= hi))
        return BAD(err, path, "%s.%s: %g is implausible (%g to %g %s)", prefix, key, v, lo, hi,
                   unit);
    return CPDIT_OK;
}

/* obj[key] not negative (nor NaN) when present. */
static cpdit_status check_not_negative(const json_t *obj, const char *prefix, const char *key,
                                       const char *path, cpdit_error *err)
{
    double v = 0;
    int got = number_at(obj, key, &v);
    if (got < 0)
        return BAD(err, path, "%s.%s: not a number", prefix, key);
    if (got && !(v >= 0))
        return BAD(err, path, "%s.%s: %g is negative", prefix, key, v);
    return CPDIT_OK;
}

/* "hosts" and the rank map's references to it; ranks each named once. */
static cpdit_status check_hosts(const json_t *root, int ranks, const char *path,
                                cpdit_error *err)
{
    json_t *hosts = json_object_get(root, "hosts");
    long n_hosts = -1; /* absent: the reader names them host0, host1, ... */
    if (hosts && !json_is_null(hosts)) {
        if (!json_is_array(hosts))
            return BAD(err, path, "hosts: not an array");
        n_hosts = (long)json_array_size(hosts);
        if (n_hosts == 0)
            return BAD(err, path, "hosts: empty; the %d ranks of rank_map need at least one "
                       "host", ranks);
        for (long i = 0; i < n_hosts; i++) {
            json_t *h = json_array_get(hosts, (size_t)i);
            if (!json_is_object(h))
                return BAD(err, path, "hosts[%ld]: not an object", i);
            json_t *name = json_object_get(h, "name");
            if (name && !json_is_string(name))
                return BAD(err, path, "hosts[%ld].name: not a string", i);
            char prefix[48];
            snprintf(prefix, sizeof prefix, "hosts[%ld].hwloc", i);
            cpdit_status st = check_not_negative(json_object_get(h, "hwloc"), prefix,
                                                 "memory_bytes", path, err);
            if (st)
                return st;
        }
    }
    json_t *rm = json_object_get(root, "rank_map");
    if (!json_is_array(rm))
        return CPDIT_OK; /* the reader says what is missing */
    unsigned char *seen = calloc((size_t)ranks, 1);
    if (!seen)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    cpdit_status st = CPDIT_OK;
    for (size_t i = 0; !st && i < json_array_size(rm); i++) {
        json_t *e = json_array_get(rm, i);
        json_t *r = json_object_get(e, "rank"), *h = json_object_get(e, "host");
        if (!json_is_integer(r) || !json_is_integer(h))
            continue; /* the reader's message */
        json_int_t rv = json_integer_value(r), hv = json_integer_value(h);
        if (rv >= 0 && rv < ranks && seen[rv]++)
            st = BAD(err, path, "rank_map[%zu].rank: rank %lld is listed twice", i,
                     (long long)rv);
        else if (n_hosts >= 0 && (hv < 0 || hv >= n_hosts))
            st = BAD(err, path, "rank_map[%zu].host: %lld, but \"hosts\" lists %ld host%s "
                     "(0..%ld)", i, (long long)hv, n_hosts, n_hosts == 1 ? "" : "s",
                     n_hosts - 1);
    }
    free(seen);
    return st;
}

/* links.fits, links.p2p, links.collectives. */
static cpdit_status check_links(const json_t *root, const char *path, cpdit_error *err)
{
    static const char *const classes[] = {"same_numa", "same_socket", "same_node",
                                          "cross_node"};
    json_t *links = json_object_get(root, "links");
    json_t *fits = json_object_get(links, "fits");
    cpdit_status st = CPDIT_OK;
    for (size_t c = 0; !st && c < sizeof classes / sizeof classes[0]; c++) {
        json_t *f = json_object_get(fits, classes[c]);
        char prefix[48];
        snprintf(prefix, sizeof prefix, "links.fits.%s", classes[c]);
        if (!json_is_object(f))
            continue;
        st = check_range(f, prefix, "alpha_s", 0, TOPO_ALPHA_MAX_S, "s", path, err);
        if (!st)
            st = check_range(f, prefix, "beta_Bps", TOPO_BETA_MIN_BPS, TOPO_BETA_MAX_BPS,
                             "B/s", path, err);
    }
    static const char *const arrays[] = {"p2p", "collectives"};
    static const char *const keys[] = {"bytes", "time_s_avg", "bw_Bps"};
    for (size_t a = 0; !st && a < 2; a++) {
        json_t *arr = json_object_get(links, arrays[a]);
        for (size_t i = 0; !st && json_is_array(arr) && i < json_array_size(arr); i++) {
            char prefix[48];
            snprintf(prefix, sizeof prefix, "links.%s[%zu]", arrays[a], i);
            for (size_t k = 0; !st && k < sizeof keys / sizeof keys[0]; k++)
                st = check_not_negative(json_array_get(arr, i), prefix, keys[k], path, err);
        }
    }
    return st;
}

cpdit_status topo_file_validate(const void *root_, const char *path, cpdit_error *err)
{
    const json_t *root = root_;
    json_t *r = json_object_get(root, "ranks");
    if (!json_is_integer(r))
        return CPDIT_OK; /* the reader's message */
    json_int_t ranks = json_integer_value(r);
    if (ranks < 1 || ranks > TOPO_RANKS_MAX)
        return BAD(err, path, "ranks: %lld is out of range (1 to %d)", (long long)ranks,
                   TOPO_RANKS_MAX);
    cpdit_status st = check_hosts(root, (int)ranks, path, err);
    if (!st)
        st = check_links(root, path, err);
    json_t *comp = json_object_get(root, "compute");
    if (!st && json_is_object(comp)) {
        st = check_range(comp, "compute", "sgemm_flops", TOPO_FLOPS_MIN, TOPO_FLOPS_MAX,
                         "FLOP/s", path, err);
        double a = 0;
        if (!st && number_at(comp, "attention_flops", &a) > 0 && a != 0) /* 0: not measured */
            st = check_range(comp, "compute", "attention_flops", TOPO_FLOPS_MIN,
                             TOPO_FLOPS_MAX, "FLOP/s", path, err);
        json_t *th = json_object_get(comp, "threads_per_rank");
        if (!st && th && (!json_is_integer(th) || json_integer_value(th) < 1))
            st = BAD(err, path, "compute.threads_per_rank: must be an integer >= 1");
    }
    return st;
}
