/* grid_choice.c — `parallel: auto`: the planner's choice for a run (grid_choice.h). */
#include "topology/grid_choice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/job_run.h"
#include "topology/cost_model.h"
#include "topology/probe.h"
#include "topology/probe_cache.h"
#include "topology/tuned_key.h"

/* The model's plan shape for the request. */
static cpdit_status grid_choice_shape(const grid_choice_request *rq, model_plan_shape *s,
                                      cpdit_error *err)
{
    model_request req;
    model_request_defaults(&req);
    req.width = rq->width;
    req.height = rq->height;
    req.frames = rq->frames;
    req.text_tokens = rq->max_seq_len;
    req.steps = rq->steps;
    req.cfg = rq->cfg;
    return model_plan_shape_load(s, rq->model, &req, err);
}

/* The grid of every rank data-parallel (or, for one image, one Ulysses group of all ranks). */
static void default_grid(const model_plan_shape *s, int N, int one_group, grid_choice *out)
{
    cm_config c = {N, 1, 1, CP_RING_P2P, 0};
    if (one_group)
        c.dp = 1, c.ulysses = N;
    const long long S = s->seq_tokens;
    c.anything = c.ulysses > 1 && (S % c.ulysses || s->heads % c.ulysses);
    out->dp = c.dp, out->ring = c.ring, out->ulysses = c.ulysses;
    cm_variant_name(&c, out->variant, sizeof out->variant);
}

/* The cost model's (or tune's measured) best grid on topology t; source names t in the
 * reason. */
static cpdit_status choose_from(const topology *t, const model_plan_shape *s,
                                const grid_choice_request *rq, const char *source,
                                grid_choice *out, cpdit_error *err)
{
    const int N = rq->ranks > 0 ? rq->ranks : 1;
    cm_options o = {N, rq->steps > 0 ? rq->steps : 1,
                    rq->images > (uint64_t)1 << 30 ? 1 << 30 : (int)(rq->images ? rq->images : 1),
                    rq->threads > 0 ? rq->threads : t->threads_per_rank, 0};
    cm_prediction *p = NULL;
    int n = 0;
    tuned_key_buf kb;
    topo_tuned_key key;
    cpdit_status st = tuned_key_make(s, N, rq->threads, rq->backend, &kb, &key, err);
    if (st)
        return st;
    st = cm_rank(t, s, &o, topo_find_tuned(t, &key), &p, &n, err);
    if (!st && n > 0) {
        out->dp = p[0].cfg.dp, out->ring = p[0].cfg.ring, out->ulysses = p[0].cfg.ulysses;
        out->planned = 1;
        snprintf(out->variant, sizeof out->variant, "%s", p[0].variant);
        cm_reason(&p[0], &o, s, source, out->reason, sizeof out->reason);
    } else if (!st) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "plan", "no grid for %d ranks", N);
    }
    free(p);
    return st;
}

cpdit_status grid_choice_auto(const grid_choice_request *rq, grid_choice *out,
                              cpdit_error *err)
{
    memset(out, 0, sizeof *out);
    const char *path = rq->topology && rq->topology[0] ? rq->topology : getenv("CPDIT_TOPOLOGY");
    model_plan_shape s;
    cpdit_status st = grid_choice_shape(rq, &s, err);
    if (st)
        return st;
    const int N = rq->ranks > 0 ? rq->ranks : 1;
    if (!path || !path[0]) {
        /* the default: no measurements to plan with */
        default_grid(&s, N, rq->images <= 1, out);
        snprintf(out->reason, sizeof out->reason,
                 "default (no topology file: pass --topology or set CPDIT_TOPOLOGY, made by "
                 "`cpdit probe`): %s",
                 rq->images <= 1 ? "one Ulysses group of all ranks for one image"
                                 : "every rank data-parallel");
        return CPDIT_OK;
    }
    topology t;
    if ((st = topo_file_load(&t, path, err)))
        return st;
    st = choose_from(&t, &s, rq, path, out, err);
    topo_file_free(&t);
    return st;
}

void grid_choice_probe_options(cpdit_probe_options *o)
{
    cpdit_probe_options_default(o, 1);
    o->trials = GRID_CHOICE_PROBE_TRIALS;
    o->target_s = GRID_CHOICE_PROBE_TARGET_S;
    o->log = NULL;
}

/* Rank 0 after a successful quick probe (doc) or with its cached text: plan on it; a new
 * probe is saved at cache (when not ""). */
static cpdit_status plan_on_probe(json_t *doc, const char *cached, const char *cache,
                                  const model_plan_shape *s, const grid_choice_request *rq,
                                  double seconds, grid_choice *out, cpdit_error *err)
{
    char *text = cached ? strdup(cached) : doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    if (!text)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "probe", "out of memory");
    topology t;
    cpdit_status st = topo_file_parse(&t, text, cached ? cache : "quick probe", err);
    if (!st && !cached)
        probe_cache_write(cache, text);
    free(text);
    if (st)
        return st;
    char source[GRID_CHOICE_REASON_MAX];
    if (cached)
        snprintf(source, sizeof source, "the quick probe of an earlier run on the same hosts "
                 "and rank layout, cached in %.200s (no --topology FILE or $CPDIT_TOPOLOGY)",
                 cache);
    else
        snprintf(source, sizeof source, "a quick probe at job start (%.1f s; no --topology FILE "
                 "or $CPDIT_TOPOLOGY)", seconds);
    st = choose_from(&t, s, rq, source, out, err);
    topo_file_free(&t);
    return st;
}

cpdit_status grid_choice_world(MPI_Comm comm, const grid_choice_request *rq, grid_choice *out,
                               cpdit_error *err)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    memset(out, 0, sizeof *out);
    grid_choice_request q = *rq;
    q.ranks = size;
    const char *path = rq->topology && rq->topology[0] ? rq->topology : getenv("CPDIT_TOPOLOGY");
    int have_file = path && path[0];
    MPI_Bcast(&have_file, 1, MPI_INT, 0, comm); /* rank 0's environment decides */
    cpdit_status st = CPDIT_OK;
    model_plan_shape s;
    memset(&s, 0, sizeof s);
    if (rank == 0) {
        if (have_file)
            st = grid_choice_auto(&q, out, err);
        else if (!(st = grid_choice_shape(&q, &s, err)) &&
                 size == 1) {
            default_grid(&s, 1, 0, out);
            snprintf(out->reason, sizeof out->reason, "one rank: nothing to split");
        }
    }
    if ((st = job_bcast_status(comm, 0, st, err)) || have_file || size == 1) {
        MPI_Bcast(out, (int)sizeof *out, MPI_BYTE, 0, comm);
        return st;
    }
    /* no file: the probe kept by an earlier run on the same hosts and layout, else the
     * probe's quick mode now, over every rank (a few seconds) */
    MPI_Bcast(&s, (int)sizeof s, MPI_BYTE, 0, comm);
    char cache[4200];
    probe_cache_path(comm, rq->probe_cache, rq->backend, cache, sizeof cache);
    char *cached = rank == 0 ? probe_cache_read(cache) : NULL;
    int hit = cached != NULL;
    MPI_Bcast(&hit, 1, MPI_INT, 0, comm);
    if (hit) {
        cpdit_error cerr;
        cpdit_error_clear(&cerr);
        cpdit_status cst = CPDIT_OK;
        if (rank == 0)
            cst = plan_on_probe(NULL, cached, cache, &s, &q, 0, out, &cerr);
        free(cached);
        cst = job_bcast_status(comm, 0, cst, &cerr);
        if (!cst) {
            MPI_Bcast(out, (int)sizeof *out, MPI_BYTE, 0, comm);
            return CPDIT_OK;
        }
        memset(out, 0, sizeof *out); /* an unreadable cache: probe again (and replace it) */
    }
    cpdit_probe_options po;
    grid_choice_probe_options(&po);
    po.shape = &s; /* compute timed at this model's shapes */
    json_t *doc = NULL;
    cpdit_error perr;
    cpdit_error_clear(&perr);
    const double t0 = MPI_Wtime();
    cpdit_status pst = cpdit_probe_run(comm, &po, &doc, &perr); /* agreed on every rank */
    const double seconds = MPI_Wtime() - t0;
    if (!pst && rank == 0)
        pst = plan_on_probe(doc, NULL, cache, &s, &q, seconds, out, &perr);
    json_decref(doc);
    pst = job_bcast_status(comm, 0, pst, &perr);
    if (pst) {
        /* never fail the job for the probe: every rank data-parallel, and say why */
        memset(out, 0, sizeof *out);
        default_grid(&s, size, 0, out);
        snprintf(out->reason, sizeof out->reason,
                 "fallback, every rank data-parallel: the quick probe at job start failed "
                 "(%.200s: %.200s)", perr.where, perr.what);
        return CPDIT_OK;
    }
    MPI_Bcast(out, (int)sizeof *out, MPI_BYTE, 0, comm);
    return CPDIT_OK;
}

const char *grid_choice_line(const grid_choice *gc, char *buf, size_t n)
{
    if (gc->dp > 0)
        snprintf(buf, n, "dp %d ring %d ulysses %d %s (%s)", gc->dp, gc->ring, gc->ulysses,
                 gc->variant, gc->reason);
    else
        snprintf(buf, n, "%s", gc->reason);
    return buf;
}
