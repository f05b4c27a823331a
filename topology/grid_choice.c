/* grid_choice.c — `parallel: auto`: the planner's choice for a run (grid_choice.h). */
#include "topology/grid_choice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology/cost_model.h"

cpdit_status grid_choice_auto(const grid_choice_request *rq, grid_choice *out,
                              cpdit_error *err)
{
    memset(out, 0, sizeof *out);
    const char *path = rq->topology && rq->topology[0] ? rq->topology : getenv("CPDIT_TOPOLOGY");
    model_shape s;
    cpdit_status st = model_shape_load(&s, rq->model, rq->width, rq->height, rq->max_seq_len,
                                       err);
    if (st)
        return st;
    const int N = rq->ranks > 0 ? rq->ranks : 1;
    if (!path || !path[0]) {
        /* the default: no measurements to plan with */
        cm_config c = {N, 1, 1, CP_RING_P2P, 0};
        if (rq->images <= 1)
            c.dp = 1, c.ulysses = N;
        const long S = (long)s.txt_tokens + s.img_tokens;
        c.anything = c.ulysses > 1 && (S % c.ulysses || s.heads % c.ulysses);
        out->dp = c.dp, out->ring = c.ring, out->ulysses = c.ulysses;
        cm_variant_name(&c, out->variant, sizeof out->variant);
        snprintf(out->reason, sizeof out->reason,
                 "default (no topology file: pass --topology or set CPDIT_TOPOLOGY, made by "
                 "`cpdit probe`; this build has no quick probe at job start): %s",
                 rq->images <= 1 ? "one Ulysses group of all ranks for one image"
                                 : "every rank data-parallel");
        return CPDIT_OK;
    }
    topology t;
    if ((st = topo_file_load(&t, path, err)))
        return st;
    cm_options o = {N, rq->steps > 0 ? rq->steps : 1,
                    rq->images > (uint64_t)1 << 30 ? 1 << 30 : (int)(rq->images ? rq->images : 1)};
    cm_prediction *p = NULL;
    int n = 0;
    st = cm_rank(&t, &s, &o, topo_find_tuned(&t, s.key, rq->width, rq->height, N), &p, &n, err);
    if (!st && n > 0) {
        out->dp = p[0].cfg.dp, out->ring = p[0].cfg.ring, out->ulysses = p[0].cfg.ulysses;
        out->planned = 1;
        snprintf(out->variant, sizeof out->variant, "%s", p[0].variant);
        cm_reason(&p[0], &o, path, out->reason, sizeof out->reason);
    }
    free(p);
    topo_file_free(&t);
    return st;
}
