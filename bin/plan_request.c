/* plan_request.c — the request `cpdit plan` / `cpdit tune` plan for (plan_request.h). */
#include "config.h"

#include "bin/plan_request.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bin/cli.h"
#include "jobs/job_items.h"
#include "lib/builtin/builtin_model.h"
#include "yaml/manifest.h"

#define PLAN_FOLDER_SIDE 1024 /* FLUX.1's default size (cmd_run_item.c) */

int plan_parse_objective(const char *sub, const char *text)
{
    if (strcmp(text, "latency") == 0)
        return PLAN_OBJECTIVE_LATENCY;
    if (strcmp(text, "throughput") == 0)
        return PLAN_OBJECTIVE_THROUGHPUT;
    cli_usage_error(sub, "--objective: '%s' is not latency or throughput", text);
    return -1;
}

/* The manifest's settings into out (model only when not given). */
static int from_manifest(const char *sub, const plan_given *g, plan_request *out,
                         uint64_t *items)
{
    manifest *m = NULL;
    cpdit_error err;
    cpdit_error_clear(&err);
    if (manifest_load(g->manifest, 0, &m, &err))
        return cli_report(&err);
    (void)sub;
    snprintf(out->model, sizeof out->model, "%s", g->model ? g->model : m->model);
    const manifest_settings *b = &m->base;
    out->req.width = b->n_sizes > 0 ? b->sizes[0].width : b->width;
    out->req.height = b->n_sizes > 0 ? b->sizes[0].height : b->height;
    out->req.text_tokens = b->max_sequence_length;
    out->steps = b->steps;
    out->req.cfg = b->true_cfg > 1.0 && b->negative_prompt != NULL; /* as pipeline.c */
    if (job_items_count(m, NULL, items, NULL, &err)) {
        manifest_free(m);
        return cli_report(&err);
    }
    snprintf(out->source, sizeof out->source, "manifest %s", g->manifest);
    manifest_free(m);
    return CLI_EXIT_OK;
}

int plan_request_resolve(const char *sub, const plan_given *g, int ranks, plan_request *out)
{
    memset(out, 0, sizeof *out);
    model_request_defaults(&out->req);
    uint64_t items = 0;
    if (g->manifest) {
        int rc = from_manifest(sub, g, out, &items);
        if (rc)
            return rc;
    } else {
        if (!g->model)
            return cli_usage_error(sub, "--model DIR|builtin:NAME (or --manifest FILE) is "
                                        "required");
        snprintf(out->model, sizeof out->model, "%s", g->model);
        builtin_run_defaults d = {PLAN_FOLDER_SIDE, PLAN_FOLDER_SIDE, PLAN_FOLDER_STEPS, 0, 1.0,
                                  NULL, 0};
        builtin_model_run_defaults(g->model, &d);
        out->req.width = d.width, out->req.height = d.height;
        out->req.text_tokens = d.max_sequence_length;
        if (d.frames > 0 && out->req.frames <= 0) /* a video built-in: its clip length */
            out->req.frames = d.frames;
        out->steps = d.steps > 0 ? d.steps : PLAN_FOLDER_STEPS;
        out->req.cfg = d.true_cfg > 1.0 && d.negative_prompt != NULL;
        snprintf(out->source, sizeof out->source, "the run defaults of %s", g->model);
    }
    if (g->width)
        out->req.width = g->width;
    if (g->height)
        out->req.height = g->height;
    if (g->frames)
        out->req.frames = g->frames;
    if (g->text_tokens)
        out->req.text_tokens = g->text_tokens;
    if (g->steps)
        out->steps = g->steps;
    if (g->cfg >= 0)
        out->req.cfg = g->cfg;
    out->req.steps = out->steps;
    out->objective = g->objective >= 0 ? g->objective
                                       : g->images > 1 || (!g->images && items > 1)
                                             ? PLAN_OBJECTIVE_THROUGHPUT
                                                       : PLAN_OBJECTIVE_LATENCY;
    if (out->objective == PLAN_OBJECTIVE_LATENCY)
        out->images = 1;
    else if (g->images)
        out->images = g->images;
    else if (items > 0)
        out->images = items > (uint64_t)1 << 30 ? 1 << 30 : (int)items;
    else
        out->images = ranks > 0 ? ranks : 0; /* 0: the world size, set by the caller */
    return CLI_EXIT_OK;
}
