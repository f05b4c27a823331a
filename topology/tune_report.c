/* tune_report.c — report.md, report.json and charts of `cpdit tune` (tune_report.h). */
#include "topology/tune_report.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/io/atomic_file.h"
#include "lib/pipeline/pipeline.h"
#include "topology/tune_charts.h"
#include "topology/tune_report_html.h"

#define GB 1e9

/* The predicted rank of candidate i among the measured ones (1 = predicted fastest). */
static int rank_of(const tune_candidate *c, int n, int i, int measured)
{
    int r = 1;
    const double v = measured ? c[i].measured_s : c[i].pred.step_s;
    for (int j = 0; j < n; j++) {
        if (j == i || c[j].failed)
            continue;
        const double w = measured ? c[j].measured_s : c[j].pred.step_s;
        r += w < v;
    }
    return r;
}

static const char *ranks_text(const topology *t, int host, char *buf, size_t n)
{
    int first = -1, last = -1, contiguous = 1;
    for (int r = 0; r < t->ranks; r++) {
        if (t->rank_map[r].host != host)
            continue;
        if (first < 0)
            first = r;
        else if (r != last + 1)
            contiguous = 0;
        last = r;
    }
    if (first < 0)
        snprintf(buf, n, "no ranks");
    else if (first == last)
        snprintf(buf, n, "rank %d", first);
    else
        snprintf(buf, n, contiguous ? "ranks %d-%d" : "ranks %d..%d (not contiguous)", first,
                 last);
    return buf;
}

static void write_machine(FILE *f, const tune_report_info *in)
{
    const topology *t = in->topo;
    char buf[64];
    fprintf(f, "## The machine\n\nTopology: %s. %d rank%s on %d host%s.\n\n", in->topo_source,
            t->ranks, t->ranks == 1 ? "" : "s", t->n_hosts, t->n_hosts == 1 ? "" : "s");
    for (int h = 0; h < t->n_hosts; h++)
        fprintf(f, "- host `%s`: %s%s\n", t->hosts[h].name, ranks_text(t, h, buf, sizeof buf),
                t->hosts[h].ngpus ? " (with GPUs)" : "");
    fprintf(f, "\nCompute per rank with all ranks busy: SGEMM %.3g GFLOP/s, attention kernel "
               "%.3g GFLOP/s.\n\n",
            t->sgemm_flops / GB, t->attention_flops / GB);
    fprintf(f, "| link class | latency α | bandwidth β | source |\n|---|---:|---:|---|\n");
    for (int c = 0; c < TOPO_NCLASS; c++) {
        int used;
        topo_fit fit = topo_fit_for(t, (topo_class)c, &used);
        fprintf(f, "| %s | %.3g µs | %.3g GB/s | %s%s |\n", topo_class_name((topo_class)c),
                fit.alpha_s * 1e6, fit.beta_Bps / GB,
                used == c ? "measured" : used >= 0 ? "not measured: uses " : "default (not measured)",
                used >= 0 && used != c ? topo_class_name((topo_class)used) : "");
    }
    if (t->n_hosts > 1) {
        int used;
        topo_fit x = topo_fit_for(t, TOPO_CROSS_NODE, &used);
        topo_fit s = topo_fit_for(t, TOPO_SAME_NODE, NULL);
        fprintf(f, "\nHosts are joined at %.3g GB/s (α %.3g µs) against %.3g GB/s inside a "
                   "host: %s.\n",
                x.beta_Bps / GB, x.alpha_s * 1e6, s.beta_Bps / GB,
                x.beta_Bps < s.beta_Bps / 2 ? "keep all-to-alls (Ulysses) inside hosts"
                                            : "the network is close to the links inside a host");
    }
    fprintf(f, "\nLoad average of rank 0's host (%d CPUs): %.2f %.2f %.2f before, %.2f %.2f %.2f "
               "after the measurements. %s\n\n",
            in->ncpus, in->load_before[0], in->load_before[1], in->load_before[2],
            in->load_after[0], in->load_after[1], in->load_after[2],
            in->load_before[0] > in->ncpus || in->load_after[0] > in->ncpus
                ? "The machine was busy with other work (load above its CPU count): the "
                  "measured times are noisy and slower than on a quiet machine; rounds were "
                  "interleaved so every grid saw the same noise."
                : "");
}

static void write_table(FILE *f, const tune_candidate *c, int n, int chosen)
{
    fprintf(f, "## Candidates\n\nEach grid ran its rounds interleaved with the others; "
               "measured = median seconds per transformer step, every data-parallel group "
               "busy with its own image.\n\n");
    fprintf(f, "| grid (dp x ring x ulysses) | variant | why tried | predicted s | median s "
               "| min s | max s | n | error | objective s (95 %%) | predicted rank | "
               "measured rank |\n"
               "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        const cm_prediction *p = &c[i].pred;
        if (c[i].failed) {
            fprintf(f, "| %d x %d x %d | %s | %s | %.4g | failed: %s | | | | | | | |\n", p->cfg.dp,
                    p->cfg.ring, p->cfg.ulysses, p->variant, c[i].why, p->step_s, c[i].error);
            continue;
        }
        fprintf(f, "| %d x %d x %d%s%s | %s | %s | %.4g | %.4g | %.4g | %.4g | %d | %+.0f%% | "
                   "%.4g (%.4g–%.4g) | %d | %d |\n",
                p->cfg.dp, p->cfg.ring, p->cfg.ulysses, i == chosen ? " **chosen**" : "",
                c[i].tied ? " (tied)" : "", p->variant, c[i].why, p->step_s, c[i].measured_s,
                c[i].stats.min, c[i].stats.max, c[i].stats.n,
                100.0 * (p->step_s - c[i].measured_s) / c[i].measured_s, c[i].objective_s,
                c[i].objective_lo, c[i].objective_hi, rank_of(c, n, i, 0), rank_of(c, n, i, 1));
    }
    fprintf(f, "\nerror = (predicted − measured) / measured.\n\n");
}

static void write_choice(FILE *f, const tune_report_info *in, const tune_candidate *c, int n,
                         int chosen)
{
    fprintf(f, "## The choice\n\n");
    if (chosen < 0) {
        fprintf(f, "Every candidate failed; nothing was recorded. See the table for the "
                   "reasons.\n\n");
        return;
    }
    const cm_prediction *p = &c[chosen].pred;
    const tune_candidate *w = &c[chosen];
    const char *kind = in->objective ? in->objective : "latency";
    fprintf(f, "**chosen: dp %d ring %d ulysses %d %s** for %s (%d image%s of %d steps): "
               "%.4g s for the job (95 %% interval %.4g–%.4g s), %.4g images/hour; one step "
               "median %.4g s (min %.4g, max %.4g, n %d%s).\n\n",
            p->cfg.dp, p->cfg.ring, p->cfg.ulysses, p->variant, kind, in->images,
            in->images == 1 ? "" : "s", in->steps, w->objective_s, w->objective_lo,
            w->objective_hi, w->objective_s > 0 ? 3600.0 * in->images / w->objective_s : 0,
            w->measured_s, w->stats.min, w->stats.max, w->stats.n,
            w->tight ? ", interval tight" : ", interval not tight when measuring stopped");
    for (int i = 0; i < n; i++) {
        if (i == chosen || c[i].failed || c[i].measured_s <= 0)
            continue;
        const tune_candidate *o = &c[i];
        if (o->tied)
            fprintf(f, "- **tied** with dp %d ring %d ulysses %d %s (%s): the 95 %% intervals "
                       "overlap (%.4g–%.4g s against %.4g–%.4g s), so the simpler grid was "
                       "taken\n",
                    o->pred.cfg.dp, o->pred.cfg.ring, o->pred.cfg.ulysses, o->pred.variant,
                    o->why, o->objective_lo, o->objective_hi, w->objective_lo, w->objective_hi);
        else
            fprintf(f, "- %.2fx better (%.2fx–%.2fx from the intervals) than dp %d ring %d "
                       "ulysses %d %s (%s)\n",
                    o->objective_s / w->objective_s,
                    w->objective_hi > 0 ? o->objective_lo / w->objective_hi : 0,
                    w->objective_lo > 0 ? o->objective_hi / w->objective_lo : 0, o->pred.cfg.dp,
                    o->pred.cfg.ring, o->pred.cfg.ulysses, o->pred.variant, o->why);
    }
    const topology *t = in->topo;
    fprintf(f, "\nWhat this means:\n\n");
    if (p->cfg.ulysses > 1)
        fprintf(f, "- Ulysses all-to-alls run inside groups of %d neighbouring ranks over "
                   "%s links.\n",
                p->cfg.ulysses, topo_class_name((topo_class)p->ulysses_class));
    if (p->cfg.ring > 1)
        fprintf(f, "- The ring passes K/V blocks between %d groups over %s links (%s).\n",
                p->cfg.ring, topo_class_name((topo_class)p->ring_class),
                p->cfg.ring_mode == CP_RING_ALLGATHER
                    ? "all-gathered once per call, before the kernel: not overlapped"
                    : "one block in flight while the kernel works on the previous one: "
                      "partly overlapped (topology/COST-MODEL.md)");
    if (p->cfg.dp > 1)
        fprintf(f, "- %d data-parallel groups render different images at once: a batch gets "
                   "%d images per step time; one image alone waits for a single group.\n",
                p->cfg.dp, p->cfg.dp);
    if (p->cfg.ring * p->cfg.ulysses == 1)
        fprintf(f, "- Every rank renders whole images on its own: for this model and size, "
                   "splitting one image costs more in communication than it saves.\n");
    if (strstr(p->variant, "+anything"))
        fprintf(f, "- Tokens or heads do not divide the grid: the uneven ('anything') "
                   "attention modes are used.\n");
    int pbest = 0;
    for (int i = 1; i < n; i++)
        if (!c[i].failed && (c[pbest].failed || c[i].pred.step_s < c[pbest].pred.step_s))
            pbest = i;
    fprintf(f, "- The cost model %s.\n",
            pbest == chosen ? "predicted the same winner"
                            : "predicted another winner; the measurement decides");
    fprintf(f, "\nRecorded in the topology file's \"tuned\" section for %s under the key %s: "
               "`parallel: auto` and `cpdit run` without grid flags use it from now on "
               "(with `--topology FILE` or `CPDIT_TOPOLOGY=FILE`) for runs with that same key "
               "only (other tokens, CFG, threads or backend are planned anew).\n\n",
            in->shape->key, in->key_text ? in->key_text : "?");
    (void)t;
}

static cpdit_status write_md(const char *path, const tune_report_info *in,
                             const tune_candidate *c, int n, int chosen, const char *charts,
                             cpdit_error *err)
{
    atomic_file af;
    cpdit_status st = atomic_file_begin(&af, path, err);
    if (st)
        return st;
    FILE *f = af.fp;
    const model_plan_shape *s = in->shape;
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    char frames[48] = "";
    if (s->frames > 1)
        snprintf(frames, sizeof frames, ", %d frames", s->frames);
    fprintf(f, "# cpdit tune report\n\n%s. Model `%s` (%s blocks, %d heads x %d, %.3g "
               "parameters) at %dx%d%s: %lld text + %lld %s tokens. %d ranks; after one warm-up "
               "round at least %d timed rounds per grid, then more until the 95 %% interval "
               "of each grid's median was within %.0f %% or the %.0f s budget ran out: %.1f s "
               "of measurements.\n\n",
            date, s->key, s->blocks_text, s->heads, s->head_dim, s->params, s->width, s->height,
            frames, s->text_tokens, s->image_tokens, s->frames > 1 ? "video" : "image",
            in->ranks, in->rounds, 100 * TUNE_STATS_REL_HALF_WIDTH, in->budget_s, in->seconds);
    write_choice(f, in, c, n, chosen);
    write_table(f, c, n, chosen);
    write_machine(f, in);
    fprintf(f, "## Charts\n\n%s\n", charts);
    return atomic_file_commit(&af, err);
}

static cpdit_status write_json(const char *path, const tune_report_info *in,
                               const tune_candidate *c, int n, int chosen, cpdit_error *err)
{
    json_t *doc = json_object(), *cands = json_array();
    for (int i = 0; i < n; i++) {
        const cm_prediction *p = &c[i].pred;
        json_t *samples = json_array();
        for (int k = 0; k < c[i].n_samples; k++)
            json_array_append_new(samples, json_real(c[i].samples[k]));
        json_t *o = json_pack("{s:i, s:i, s:i, s:s, s:f, s:o, s:s, s:f, s:f, s:f, s:o, s:b}",
                              "dp", p->cfg.dp, "ring", p->cfg.ring, "ulysses", p->cfg.ulysses,
                              "variant", p->variant, "predicted_s", p->step_s, "measured_s",
                              c[i].failed ? json_null() : json_real(c[i].measured_s), "why",
                              c[i].why, "predicted_compute_s", p->compute_s,
                              "predicted_comm_s", p->comm_s, "memory_bytes", p->mem_total,
                              "samples", samples, "failed", c[i].failed);
        if (c[i].failed)
            json_object_set_new(o, "error", json_string(c[i].error));
        else if (c[i].n_samples > 0) {
            const tune_stats *st = &c[i].stats;
            json_object_set_new(o, "stats", json_pack("{s:i, s:f, s:f, s:f, s:f, s:[f,f], s:b}",
                                                      "n", st->n, "median_s", st->median,
                                                      "min_s", st->min, "max_s", st->max,
                                                      "mean_s", st->mean, "ci95_s", st->lo,
                                                      st->hi, "tight", c[i].tight));
            json_object_set_new(o, "objective",
                                json_pack("{s:s, s:i, s:f, s:[f,f], s:f, s:b}", "kind",
                                          in->objective ? in->objective : "latency", "images",
                                          in->images, "seconds", c[i].objective_s, "ci95_s",
                                          c[i].objective_lo, c[i].objective_hi,
                                          "images_per_hour",
                                          c[i].objective_s > 0
                                              ? 3600.0 * in->images / c[i].objective_s
                                              : 0.0,
                                          "tied", c[i].tied));
        }
        json_array_append_new(cands, o);
    }
    json_object_set_new(doc, "model", json_string(in->shape->key));
    json_object_set_new(doc, "width", json_integer(in->shape->width));
    json_object_set_new(doc, "height", json_integer(in->shape->height));
    json_object_set_new(doc, "ranks", json_integer(in->ranks));
    json_object_set_new(doc, "rounds", json_integer(in->rounds));
    json_object_set_new(doc, "objective", json_string(in->objective ? in->objective : "latency"));
    json_object_set_new(doc, "images", json_integer(in->images));
    json_object_set_new(doc, "steps", json_integer(in->steps));
    json_object_set_new(doc, "threads_per_rank", json_integer(in->threads));
    json_object_set_new(doc, "budget_s", json_real(in->budget_s));
    if (in->key_text)
        json_object_set_new(doc, "key", json_string(in->key_text));
    if (in->command)
        json_object_set_new(doc, "command", json_string(in->command));
    json_object_set_new(doc, "topology", json_string(in->topo_source));
    json_object_set_new(doc, "load_average_before", json_pack("[f,f,f]", in->load_before[0],
                                                              in->load_before[1], in->load_before[2]));
    json_object_set_new(doc, "load_average_after", json_pack("[f,f,f]", in->load_after[0],
                                                             in->load_after[1], in->load_after[2]));
    json_object_set_new(doc, "cpus", json_integer(in->ncpus));
    json_object_set_new(doc, "candidates", cands);
    json_object_set_new(doc, "chosen",
                        chosen < 0 ? json_null()
                                   : json_pack("{s:i, s:i, s:i, s:s}", "dp", c[chosen].pred.cfg.dp,
                                               "ring", c[chosen].pred.cfg.ring, "ulysses",
                                               c[chosen].pred.cfg.ulysses, "variant",
                                               c[chosen].pred.variant));
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (!text)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    cpdit_status st = atomic_write_buffer(path, text, strlen(text), err);
    free(text);
    return st;
}

cpdit_status tune_report_write(const char *dir, const tune_report_info *in,
                               const tune_candidate *c, int n, int chosen, cpdit_error *err)
{
    cpdit_status st = pipeline_make_dirs(dir, err);
    if (st)
        return st;
    char charts[1024] = "", path[4096];
    if (!tune_charts_available()) {
        snprintf(charts, sizeof charts, "No charts: this cpdit was built without PLplot "
                                        "(install libplplot-dev and rerun configure).\n");
    } else {
        cpdit_error e;
        size_t used = 0;
        if (tune_chart_bandwidth(in->topo, dir, &e) == CPDIT_OK)
            used += (size_t)snprintf(charts + used, sizeof charts - used,
                                     "![bandwidth vs message size per link class](bandwidth.png)\n\n");
        else
            used += (size_t)snprintf(charts + used, sizeof charts - used,
                                     "No bandwidth chart: %s.\n\n", e.what);
        if (tune_chart_collectives(in->topo, dir, &e) == CPDIT_OK)
            used += (size_t)snprintf(charts + used, sizeof charts - used,
                                     "![collectives: time per call vs size](collectives.png)\n\n");
        else
            used += (size_t)snprintf(charts + used, sizeof charts - used,
                                     "No collectives chart: %s.\n\n", e.what);
        if (tune_chart_predictions(c, n, chosen, dir, &e) == CPDIT_OK)
            snprintf(charts + used, sizeof charts - used,
                     "![predicted vs measured step time per grid](predicted_vs_measured.png)\n");
        else
            snprintf(charts + used, sizeof charts - used, "No prediction chart: %s.\n", e.what);
    }
    snprintf(path, sizeof path, "%s/report.json", dir);
    if ((st = write_json(path, in, c, n, chosen, err)))
        return st;
    snprintf(path, sizeof path, "%s/report.md", dir);
    if ((st = write_md(path, in, c, n, chosen, charts, err)))
        return st;
    snprintf(path, sizeof path, "%s/report.html", dir);
    return tune_report_html(path, dir, in, c, n, chosen, err);
}
