/* tune_report_html.c — the self-contained HTML report of `cpdit tune` (tune_report_html.h). */
#include "topology/tune_report_html.h"

#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/host_runtime.h"
#include "lib/io/atomic_file.h"
#include "topology/tuned_key.h"

#define GB 1e9
#define GIB (1024.0 * 1024.0 * 1024.0)
#define CHART_MAX_BYTES (8 << 20)
#define LINE_MAX_CHARS 512

static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* The PNG at dir/name as <img src="data:image/png;base64,...">; 0 when written. */
static int put_png(FILE *f, const char *dir, const char *name, const char *alt)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *in = fopen(path, "rb");
    if (!in)
        return -1;
    unsigned char *buf = malloc(CHART_MAX_BYTES);
    size_t n = buf ? fread(buf, 1, CHART_MAX_BYTES, in) : 0;
    fclose(in);
    if (!buf || n == 0) {
        free(buf);
        return -1;
    }
    fprintf(f, "<figure><img alt=\"");
    esc(f, alt);
    fprintf(f, "\" src=\"data:image/png;base64,");
    for (size_t i = 0; i < n; i += 3) {
        const unsigned v = (unsigned)buf[i] << 16 | (i + 1 < n ? (unsigned)buf[i + 1] << 8 : 0) |
                           (i + 2 < n ? buf[i + 2] : 0);
        fputc(b64[v >> 18 & 63], f);
        fputc(b64[v >> 12 & 63], f);
        fputc(i + 1 < n ? b64[v >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? b64[v & 63] : '=', f);
    }
    fprintf(f, "\"><figcaption>");
    esc(f, alt);
    fprintf(f, " (%s)</figcaption></figure>\n", name);
    free(buf);
    return 0;
}

/* "model name" of /proc/cpuinfo (rank 0's host), or "unknown". */
static void cpu_model(char *out, size_t n)
{
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[LINE_MAX_CHARS];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            const char *v = strchr(line, ':') + 1;
            while (*v == ' ')
                v++;
            snprintf(out, n, "%.*s", (int)strcspn(v, "\n"), v);
            break;
        }
    }
    if (f)
        fclose(f);
}

static void write_recommendation(FILE *f, const tune_report_info *in, const tune_candidate *c,
                                 int n, int chosen)
{
    fprintf(f, "<section id=\"recommendation\"><h2>Recommendation</h2>\n");
    if (chosen < 0) {
        fprintf(f, "<p>Every candidate failed; nothing was recorded.</p></section>\n");
        return;
    }
    const tune_candidate *w = &c[chosen];
    const cm_prediction *p = &w->pred;
    const int ranks = p->cfg.dp * p->cfg.ring * p->cfg.ulysses;
    const double iph = w->objective_s > 0 ? 3600.0 * in->images / w->objective_s : 0;
    const int gpus = in->backend && strcmp(in->backend, "cuda") == 0;
    const double cost = iph > 0 ? 1000.0 * ranks * (gpus ? 1 : in->threads) / iph : 0;
    fprintf(f, "<p class=\"chosen\"><b>dp %d &times; ring %d &times; ulysses %d, %s</b> for "
               "<b>%s</b> (%d image%s of %d steps).</p>\n<ul>\n",
            p->cfg.dp, p->cfg.ring, p->cfg.ulysses, p->variant, in->objective, in->images,
            in->images == 1 ? "" : "s", in->steps);
    fprintf(f, "<li>objective: %.4g s (95 %% interval %.4g&ndash;%.4g s), %.4g images/hour, "
               "%.4g %s per 1000 images</li>\n",
            w->objective_s, w->objective_lo, w->objective_hi, iph, cost,
            gpus ? "GPU-hours" : "core-hours");
    fprintf(f, "<li>confidence: %d samples, median %.4g s, min %.4g, max %.4g; %s</li>\n",
            w->stats.n, w->measured_s, w->stats.min, w->stats.max,
            w->tight ? "the interval is within 5 % of the median"
                     : "measuring stopped (time budget) before the interval was within 5 %");
    int tied = 0;
    for (int i = 0; i < n; i++)
        if (i != chosen && c[i].tied && !c[i].failed) {
            fprintf(f, "<li>tied with dp %d ring %d ulysses %d %s (overlapping intervals): the "
                       "simpler grid was taken</li>\n",
                    c[i].pred.cfg.dp, c[i].pred.cfg.ring, c[i].pred.cfg.ulysses,
                    c[i].pred.variant);
            tied++;
        }
    if (!tied)
        fprintf(f, "<li>no other grid's interval overlaps: the choice is clear</li>\n");
    fprintf(f, "<li>recorded under the key: ");
    esc(f, in->key_text ? in->key_text : "");
    fprintf(f, "</li>\n</ul></section>\n");
}

static void write_machine(FILE *f, const tune_report_info *in)
{
    const topology *t = in->topo;
    char model[256];
    cpu_model(model, sizeof model);
    fprintf(f, "<section id=\"machine\"><h2>Machine</h2>\n<p>Topology: ");
    esc(f, in->topo_source);
    fprintf(f, ". CPU model (rank 0's host): ");
    esc(f, model);
    fprintf(f, ". Compute per rank, all ranks busy: SGEMM %.3g GFLOP/s, attention %.3g "
               "GFLOP/s.</p>\n<table><tr><th>host</th><th>ranks</th><th>packages</th>"
               "<th>cores</th><th>PUs</th><th>memory</th><th>GPUs</th><th>NICs</th>"
               "<th>NVML</th></tr>\n",
            t->sgemm_flops / GB, t->attention_flops / GB);
    json_t *hosts = json_object_get((json_t *)t->json, "hosts");
    for (size_t h = 0; h < json_array_size(hosts); h++) {
        json_t *e = json_array_get(hosts, h), *hw = json_object_get(e, "hwloc");
        json_t *gpus = json_object_get(hw, "gpus"), *nics = json_object_get(hw, "nics");
        json_t *nvml = json_object_get(hw, "nvml");
        fprintf(f, "<tr><td>");
        esc(f, json_string_value(json_object_get(e, "name")));
        fprintf(f, "</td><td>%zu</td><td>%lld</td><td>%lld</td><td>%lld</td><td>%.1f GiB</td><td>",
                json_array_size(json_object_get(e, "ranks")),
                json_integer_value(json_object_get(hw, "packages")),
                json_integer_value(json_object_get(hw, "cores")),
                json_integer_value(json_object_get(hw, "pus")),
                json_number_value(json_object_get(hw, "memory_bytes")) / GIB);
        for (size_t g = 0; g < json_array_size(gpus); g++) {
            json_t *x = json_array_get(gpus, g), *nm = json_object_get(x, "name");
            fprintf(f, "%s", g ? "; " : "");
            esc(f, json_is_string(nm) ? json_string_value(nm) : "GPU");
        }
        if (!json_array_size(gpus))
            fprintf(f, "none");
        fprintf(f, "</td><td>");
        for (size_t k = 0; k < json_array_size(nics); k++) {
            json_t *x = json_array_get(nics, k);
            fprintf(f, "%s", k ? "; " : "");
            esc(f, json_string_value(json_object_get(x, "name")));
            fprintf(f, " (");
            esc(f, json_string_value(json_object_get(x, "kind")));
            fprintf(f, ")");
        }
        fprintf(f, "</td><td>");
        esc(f, json_is_string(nvml) ? json_string_value(nvml) : "");
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table></section>\n");
}

static void write_versions_command(FILE *f, const tune_report_info *in)
{
    char blas[256], mpi[MPI_MAX_LIBRARY_VERSION_STRING + 1] = "";
    int len = 0;
    cpdit_host_runtime_describe(blas, sizeof blas);
    MPI_Get_library_version(mpi, &len);
    mpi[strcspn(mpi, "\n")] = '\0';
    fprintf(f, "<section id=\"versions\"><h2>Versions</h2>\n<ul><li>cpdit ");
    esc(f, in->version ? in->version : "?");
    fprintf(f, "</li><li>BLAS: ");
    esc(f, blas);
    fprintf(f, "</li><li>backend ");
    esc(f, in->backend ? in->backend : "?");
    fprintf(f, ": ");
    esc(f, in->backend_line ? in->backend_line : "");
    fprintf(f, "</li><li>MPI: ");
    esc(f, mpi);
    fprintf(f, "</li></ul></section>\n<section id=\"command\"><h2>Command</h2>\n<pre>");
    esc(f, in->command ? in->command : "");
    char cwd[4096];
    fprintf(f, "</pre><p>in ");
    esc(f, getcwd(cwd, sizeof cwd) ? cwd : "?");
    fprintf(f, "</p></section>\n");
}

static void write_placement_load(FILE *f, const tune_report_info *in)
{
    const topology *t = in->topo;
    long cores = 0, pus = 0;
    json_t *hosts = json_object_get((json_t *)t->json, "hosts");
    for (size_t h = 0; h < json_array_size(hosts); h++) {
        json_t *hw = json_object_get(json_array_get(hosts, h), "hwloc");
        cores += (long)json_integer_value(json_object_get(hw, "cores"));
        pus += (long)json_integer_value(json_object_get(hw, "pus"));
    }
    const long need = (long)in->ranks * in->threads;
    fprintf(f, "<section id=\"placement\"><h2>Ranks &times; threads against cores</h2>\n"
               "<table><tr><th>ranks</th><th>threads per rank</th><th>ranks &times; threads"
               "</th><th>cores</th><th>PUs</th><th>verdict</th></tr>\n<tr><td>%d</td><td>%d"
               "</td><td>%ld</td><td>%ld</td><td>%ld</td><td>%s</td></tr></table></section>\n",
            in->ranks, in->threads, need, cores, pus,
            cores <= 0 ? "cores unknown"
            : need > pus ? "oversubscribed: more threads than PUs, timings are slowed and noisy"
            : need > cores ? "threads share cores (hyper-threads)"
                           : "every thread has a core");
    fprintf(f, "<section id=\"load\"><h2>Load</h2>\n<table><tr><th></th><th>1 min</th>"
               "<th>5 min</th><th>15 min</th></tr>\n<tr><td>before</td><td>%.2f</td><td>%.2f"
               "</td><td>%.2f</td></tr>\n<tr><td>after</td><td>%.2f</td><td>%.2f</td><td>%.2f"
               "</td></tr></table><p>%d CPUs online on rank 0's host: %s</p></section>\n",
            in->load_before[0], in->load_before[1], in->load_before[2], in->load_after[0],
            in->load_after[1], in->load_after[2], in->ncpus,
            in->load_before[0] > in->ncpus || in->load_after[0] > in->ncpus
                ? "the machine was busy with other work; rounds were interleaved so every grid "
                  "saw the same noise"
                : "quiet enough");
}

static void write_candidates(FILE *f, const tune_report_info *in, const tune_candidate *c,
                             int n, int chosen)
{
    fprintf(f, "<section id=\"candidates\"><h2>Candidates</h2>\n<table><tr><th>grid</th>"
               "<th>variant</th><th>why tried</th><th>predicted s</th><th>median s</th>"
               "<th>min s</th><th>max s</th><th>n</th><th>95 %% interval s</th>"
               "<th>objective s</th><th>images/h</th><th></th></tr>\n");
    for (int i = 0; i < n; i++) {
        const cm_prediction *p = &c[i].pred;
        fprintf(f, "<tr><td>%d &times; %d &times; %d</td><td>%s</td><td>", p->cfg.dp,
                p->cfg.ring, p->cfg.ulysses, p->variant);
        esc(f, c[i].why);
        if (c[i].failed) {
            fprintf(f, "</td><td>%.4g</td><td colspan=\"8\">failed: ", p->step_s);
            esc(f, c[i].error);
            fprintf(f, "</td></tr>\n");
            continue;
        }
        fprintf(f, "</td><td>%.4g</td><td>%.4g</td><td>%.4g</td><td>%.4g</td><td>%d</td>"
                   "<td>%.4g&ndash;%.4g</td><td>%.4g</td><td>%.4g</td><td>%s%s</td></tr>\n",
                p->step_s, c[i].measured_s, c[i].stats.min, c[i].stats.max, c[i].stats.n,
                c[i].stats.lo, c[i].stats.hi, c[i].objective_s,
                c[i].objective_s > 0 ? 3600.0 * in->images / c[i].objective_s : 0,
                i == chosen ? "chosen" : "", c[i].tied ? " (tied)" : "");
    }
    fprintf(f, "</table></section>\n");
}

static void write_links(FILE *f, const topology *t)
{
    static const char *const ops[] = {"all-to-all", "all-gather", "ring send-receive"};
    fprintf(f, "<section id=\"links\"><h2>Links per message size</h2>\n"
               "<p>As nccl-tests and the OSU benchmarks print them: algbw = bytes / time; busbw "
               "= algbw &times; (n&minus;1)/n for all-to-all and all-gather, = algbw for "
               "point-to-point.</p>\n<table class=\"p2p\"><tr><th>class</th><th>ranks</th>"
               "<th>size (B)</th><th>time avg (us)</th><th>time min (us)</th>"
               "<th>algbw (GB/s)</th><th>busbw (GB/s)</th></tr>\n");
    for (int i = 0; i < t->n_p2p; i++) {
        const topo_p2p *p = &t->p2p[i];
        fprintf(f, "<tr><td>%s</td><td>%d-%d</td><td>%.0f</td><td>%.3f</td><td>%.3f</td>"
                   "<td>%.3f</td><td>%.3f</td></tr>\n",
                topo_class_name(p->cls), p->rank_a, p->rank_b, p->bytes, p->time_s_avg * 1e6,
                p->time_s_min * 1e6, p->bw_Bps / GB, p->bw_Bps / GB);
    }
    fprintf(f, "</table>\n<table class=\"collectives\"><tr><th>op</th><th>ranks</th>"
               "<th>class</th><th>size per rank (B)</th><th>time avg (us)</th>"
               "<th>algbw (GB/s)</th><th>busbw (GB/s)</th></tr>\n");
    for (int i = 0; i < t->n_coll; i++) {
        const topo_coll *k = &t->coll[i];
        const double alg = k->algbw_Bps > 0 ? k->algbw_Bps : k->bytes / k->time_s_avg;
        const double bus = k->busbw_Bps > 0 ? k->busbw_Bps : alg;
        fprintf(f, "<tr><td>%s</td><td>%d</td><td>%s</td><td>%.0f</td><td>%.3f</td>"
                   "<td>%.3f</td><td>%.3f</td></tr>\n",
                ops[k->op], k->group_size, topo_class_name(k->cls), k->bytes,
                k->time_s_avg * 1e6, alg / GB, bus / GB);
    }
    fprintf(f, "</table></section>\n");
}

/* t with its hosts repeated `times` times (ranks host-major, the same layout per host). */
static int scaled(const topology *t, int times, topology *out)
{
    *out = *t;
    out->ranks = t->ranks * times;
    out->n_hosts = t->n_hosts * times;
    out->hosts = calloc((size_t)out->n_hosts, sizeof *out->hosts);
    out->rank_map = calloc((size_t)out->ranks, sizeof *out->rank_map);
    if (!out->hosts || !out->rank_map) {
        free(out->hosts);
        free(out->rank_map);
        return -1;
    }
    for (int k = 0; k < times; k++) {
        for (int h = 0; h < t->n_hosts; h++)
            out->hosts[k * t->n_hosts + h] = t->hosts[h];
        for (int r = 0; r < t->ranks; r++) {
            topo_rank x = t->rank_map[r];
            x.host += k * t->n_hosts;
            out->rank_map[k * t->ranks + r] = x;
        }
    }
    out->tuned = NULL, out->n_tuned = 0; /* predictions only */
    return 0;
}

static void write_whatif(FILE *f, const tune_report_info *in)
{
    static const int times[TUNE_WHATIF_N] = {2, 4, 8};
    const topology *t = in->topo;
    fprintf(f, "<section id=\"whatif\"><h2>What if: more nodes</h2>\n<p>The cost model "
               "(topology/COST-MODEL.md) on %d&times;, %d&times; and %d&times; the hosts of this "
               "topology, each a copy of these, joined by the cross-node link (%s); the same "
               "model, size and %s objective with the images scaled alike.</p>\n"
               "<table><tr><th>hosts</th><th>ranks</th><th>best grid</th>"
               "<th>predicted s/step</th><th>images/h</th><th>%s per 1000 images</th></tr>\n",
            times[0], times[1], times[2],
            t->fits[TOPO_CROSS_NODE].measured ? "measured" : "not measured: the 10 Gbit/s "
                                                             "default",
            in->objective,
            in->backend && strcmp(in->backend, "cuda") == 0 ? "GPU-hours" : "core-hours");
    for (int i = 0; i < TUNE_WHATIF_N; i++) {
        topology s;
        if (scaled(t, times[i], &s))
            continue;
        const int images = in->images == 1 ? 1 : in->images * times[i];
        cm_options o = {s.ranks, in->steps, images, in->threads,
                        in->backend && strcmp(in->backend, "cuda") == 0};
        cm_prediction *p = NULL;
        int n = 0;
        cpdit_error e;
        if (cm_rank(&s, in->shape, &o, NULL, &p, &n, &e) == CPDIT_OK && n > 0)
            fprintf(f, "<tr><td>%d</td><td>%d</td><td>dp %d &times; ring %d &times; ulysses %d "
                       "%s</td><td>%.4g</td><td>%.4g</td><td>%.4g</td></tr>\n",
                    s.n_hosts, s.ranks, p[0].cfg.dp, p[0].cfg.ring, p[0].cfg.ulysses,
                    p[0].variant, p[0].step_s, p[0].images_per_hour,
                    cm_cost_per_1000(&p[0], &o, NULL));
        free(p);
        free(s.hosts);
        free(s.rank_map);
    }
    fprintf(f, "</table></section>\n");
}

cpdit_status tune_report_html(const char *path, const char *dir, const tune_report_info *in,
                              const tune_candidate *c, int n, int chosen, cpdit_error *err)
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
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
               "<title>cpdit tune report: ");
    esc(f, s->key);
    fprintf(f, "</title>\n<style>body{font-family:sans-serif;max-width:72em;margin:auto}"
               "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #bbb;"
               "padding:0.2em 0.5em;text-align:right}th{background:#eee}"
               "img{max-width:100%%}.chosen{font-size:1.2em}</style></head><body>\n"
               "<h1>cpdit tune report</h1>\n<p>%s. Model <code>", date);
    esc(f, s->key);
    fprintf(f, "</code> (%s blocks, %d heads &times; %d) at %d&times;%d: %lld text + %lld "
               "image tokens; %d ranks; %.1f s of measurements (budget %.0f s).</p>\n",
            s->blocks_text, s->heads, s->head_dim, s->width, s->height, s->text_tokens,
            s->image_tokens, in->ranks, in->seconds, in->budget_s);
    write_recommendation(f, in, c, n, chosen);
    write_machine(f, in);
    write_versions_command(f, in);
    write_placement_load(f, in);
    write_candidates(f, in, c, n, chosen);
    write_links(f, in->topo);
    write_whatif(f, in);
    fprintf(f, "<section id=\"charts\"><h2>Charts</h2>\n");
    int charts = 0;
    charts += put_png(f, dir, "bandwidth.png", "bandwidth per link class with the fit") == 0;
    charts += put_png(f, dir, "collectives.png", "collectives: time per call") == 0;
    charts += put_png(f, dir, "predicted_vs_measured.png",
                      "predicted vs measured step time, the chosen grid framed") == 0;
    if (!charts)
        fprintf(f, "<p>No charts: this cpdit was built without PLplot.</p>\n");
    fprintf(f, "</section>\n</body></html>\n");
    return atomic_file_commit(&af, err);
}
