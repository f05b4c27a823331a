/* cmd_tune.c — `cpdit tune` (under mpirun/srun): time the best predicted grids and two
 * baselines with real transformer steps, pick the fastest by measurement, record it in the
 * topology file ("tuned") and write the admin report (topology/tune_report.h). */
#include "config.h"

#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "lib/core/version.h"
#include "bin/cli.h"
#include "bin/plan_request.h"
#include "jobs/job_run.h"
#include "lib/builtin/builtin_model.h"
#include "topology/cost_model.h"
#include "topology/probe.h"
#include "topology/probe_shapes.h"
#include "topology/tune_report.h"
#include "topology/tune_run.h"
#include "topology/tuned_key.h"

#define SUB "tune"
#define TUNE_DEFAULT_TOP 4
#define TUNE_DEFAULT_ROUNDS 3     /* counted rounds every candidate gets */
#define TUNE_DEFAULT_BUDGET_S 60  /* then more rounds for loose intervals, up to this */
#define TUNE_MAX_BUDGET_S 86400
#define TUNE_DEFAULT_REPORT "cpdit-report"
#define TUNE_DEFAULT_TOPOLOGY "cpdit-topology.json" /* cpdit probe's default output */
#define TUNE_MAX_CANDIDATES 32
#define TUNE_COMMAND_MAX 2048

typedef struct tune_args {
    const char *topology, *report;
    plan_given given;
    plan_request pr;   /* resolved on rank 0 */
    int top, rounds;
    double budget_s;
    char command[TUNE_COMMAND_MAX];
} tune_args;

static int same_grid(const cm_prediction *a, const cm_prediction *b)
{
    return a->cfg.dp == b->cfg.dp && a->cfg.ring == b->cfg.ring &&
           a->cfg.ulysses == b->cfg.ulysses && strcmp(a->variant, b->variant) == 0;
}

static void add(tune_candidate *c, int *n, const cm_prediction *p, const char *why)
{
    for (int i = 0; i < *n; i++)
        if (same_grid(&c[i].pred, p)) {
            size_t l = strlen(c[i].why);
            snprintf(c[i].why + l, sizeof c[i].why - l, "; %s", why);
            return;
        }
    if (*n >= TUNE_MAX_CANDIDATES)
        return;
    memset(&c[*n], 0, sizeof c[*n]);
    c[*n].pred = *p;
    snprintf(c[*n].why, sizeof c[*n].why, "%s", why);
    (*n)++;
}

/* Rank 0: the candidates: the top K predicted grids that fit, all data-parallel, and pure
 * Ulysses over every rank. */
static cpdit_status pick(const topology *t, const model_plan_shape *s, const plan_request *pr,
                         int ranks, int top, tune_candidate *c, int *n, cpdit_error *err)
{
    cm_options o = {ranks, pr->steps, pr->images, t->threads_per_rank, 0};
    cm_prediction *p = NULL;
    int np = 0;
    cpdit_status st = cm_rank(t, s, &o, NULL, &p, &np, err);
    if (st)
        return st;
    *n = 0;
    int k = 0;
    for (int i = 0; i < np && k < top; i++)
        if (p[i].fits) {
            char why[32];
            snprintf(why, sizeof why, "predicted #%d", i + 1);
            add(c, n, &p[i], why);
            k++;
        }
    for (int i = 0; i < np; i++) {
        if (p[i].cfg.dp == ranks)
            add(c, n, &p[i], "baseline: all data-parallel");
        if (p[i].cfg.dp == 1 && p[i].cfg.ring == 1 && ranks > 1)
            add(c, n, &p[i], "baseline: pure Ulysses");
    }
    free(p);
    return CPDIT_OK;
}

static void load_average(double l[3])
{
    if (getloadavg(l, 3) != 3)
        l[0] = l[1] = l[2] = -1;
}

/* 1 when a is the simpler, more robust grid of two tied ones: more data parallelism, even
 * splits, no ring, the point-to-point ring before the all-gather one. */
static int simpler(const cm_prediction *a, const cm_prediction *b)
{
    if (a->cfg.dp != b->cfg.dp)
        return a->cfg.dp > b->cfg.dp;
    if (a->cfg.anything != b->cfg.anything)
        return a->cfg.anything < b->cfg.anything;
    if (a->cfg.ring != b->cfg.ring)
        return a->cfg.ring < b->cfg.ring;
    return a->cfg.ring_mode < b->cfg.ring_mode;
}

/* The objective of every measured candidate (from the median and the interval's ends), the
 * best one, the candidates tied with it (overlapping intervals) and, of those, the simplest:
 * the index chosen, or -1 when every candidate failed. */
static int choose(tune_candidate *c, int n, const plan_request *pr, const model_plan_shape *s)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        c[i].tied = 0;
        if (c[i].failed || c[i].measured_s <= 0)
            continue;
        const int dp = c[i].pred.cfg.dp;
        const double per = (double)((pr->images + dp - 1) / dp) * pr->steps *
                           (s->forwards_per_step > 1 ? s->forwards_per_step : 1);
        c[i].objective_s = per * c[i].measured_s;
        c[i].objective_lo = per * c[i].stats.lo;
        c[i].objective_hi = per * c[i].stats.hi;
        if (best < 0 || c[i].objective_s < c[best].objective_s)
            best = i;
    }
    if (best < 0)
        return -1;
    int chosen = best;
    for (int i = 0; i < n; i++) {
        if (c[i].failed || c[i].measured_s <= 0 || i == best)
            continue;
        c[i].tied = tune_stats_overlap(c[i].objective_lo, c[i].objective_hi,
                                       c[best].objective_lo, c[best].objective_hi);
        if (c[i].tied && simpler(&c[i].pred, &c[chosen].pred))
            chosen = i;
    }
    c[best].tied = chosen != best;
    if (chosen != best)
        c[chosen].tied = 1;
    return chosen;
}

/* Rank 0's part after the measurements: choose, record, report, print. */
static cpdit_status conclude(topology *t, const char *topo_source, const model_plan_shape *s,
                             const tune_args *a, int ranks, tune_candidate *c, int n,
                             double seconds, const double load0[3], cpdit_error *err)
{
    const plan_request *pr = &a->pr;
    const int chosen = choose(c, n, pr, s);
    tuned_key_buf kb;
    topo_tuned_key key;
    cpdit_status st = tuned_key_make(s, ranks, 0, NULL, &kb, &key, err);
    if (st)
        return st;
    char key_text[256];
    tuned_key_text(&key, key_text, sizeof key_text);
    tune_report_info info;
    memset(&info, 0, sizeof info);
    info.topo = t;
    info.topo_source = topo_source;
    info.shape = s;
    info.ranks = ranks;
    info.rounds = a->rounds;
    memcpy(info.load_before, load0, sizeof info.load_before);
    load_average(info.load_after);
    info.ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    info.seconds = seconds;
    info.objective = pr->objective == PLAN_OBJECTIVE_THROUGHPUT ? "throughput" : "latency";
    info.images = pr->images;
    info.steps = pr->steps;
    info.threads = key.threads;
    info.key_text = key_text;
    info.command = a->command;
    info.budget_s = a->budget_s;
    info.version = cpdit_version_string();
    const cpdit_backend *be = cpdit_backend_default();
    char be_line[512] = "";
    if (be->describe)
        be->describe(be_line, sizeof be_line);
    info.backend = be->name;
    info.backend_line = be_line;
    if (chosen >= 0) {
        topo_grid_time ms[TUNE_MAX_CANDIDATES];
        int k = 0;
        for (int i = 0; i < n; i++)
            if (!c[i].failed && c[i].measured_s > 0) {
                ms[k] = (topo_grid_time){c[i].pred.cfg.dp, c[i].pred.cfg.ring,
                                         c[i].pred.cfg.ulysses, "", c[i].measured_s};
                snprintf(ms[k].variant, sizeof ms[k].variant, "%s", c[i].pred.variant);
                k++;
            }
        topo_tuned e;
        memset(&e, 0, sizeof e);
        e.model = (char *)s->key;
        e.width = key.width, e.height = key.height, e.ranks = ranks;
        e.frames = key.frames, e.text_tokens = key.text_tokens, e.cfg = key.cfg;
        e.threads = key.threads;
        snprintf(e.backend, sizeof e.backend, "%s", key.backend);
        snprintf(e.dtype, sizeof e.dtype, "%s", key.dtype);
        e.images = pr->images;
        e.measured = ms;
        e.n_measured = k;
        e.chosen = (topo_grid_time){c[chosen].pred.cfg.dp, c[chosen].pred.cfg.ring,
                                    c[chosen].pred.cfg.ulysses, "", 0};
        snprintf(e.chosen.variant, sizeof e.chosen.variant, "%s", c[chosen].pred.variant);
        st = topo_file_save_tuned(t, &e, err);
    }
    if (!st)
        st = tune_report_write(a->report, &info, c, n, chosen, err);
    if (st)
        return st;
    printf("key: %s\nobjective: %s (%d image%s, %d steps each)\n", key_text, info.objective,
           pr->images, pr->images == 1 ? "" : "s", pr->steps);
    printf("%4s %4s %4s %-24s %11s %11s %11s %11s %4s %8s %10s  %s\n", "dp", "ring", "uly",
           "variant", "predicted_s", "median_s", "min_s", "max_s", "n", "error", "images/h",
           "why");
    for (int i = 0; i < n; i++) {
        const cm_prediction *p = &c[i].pred;
        if (c[i].failed) {
            printf("%4d %4d %4d %-24s %11.4g %11s %11s %11s %4s %8s %10s  %s (failed: %s)\n",
                   p->cfg.dp, p->cfg.ring, p->cfg.ulysses, p->variant, p->step_s, "-", "-", "-",
                   "-", "-", "-", c[i].why, c[i].error);
            continue;
        }
        const double iph = 3600.0 * pr->images / c[i].objective_s;
        printf("%4d %4d %4d %-24s %11.4g %11.4g %11.4g %11.4g %4d %+7.0f%% %10.4g  %s%s\n",
               p->cfg.dp, p->cfg.ring, p->cfg.ulysses, p->variant, p->step_s, c[i].measured_s,
               c[i].stats.min, c[i].stats.max, c[i].stats.n,
               100.0 * (p->step_s - c[i].measured_s) / c[i].measured_s, iph, c[i].why,
               c[i].tied ? " (tied)" : "");
    }
    printf("report: %s/report.html (and report.md, report.json); recorded in %s\n", a->report,
           t->path);
    if (chosen < 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "tune", "every candidate failed (see "
                                                               "%s/report.md)", a->report);
    printf("chosen: dp %d ring %d ulysses %d %s\n", c[chosen].pred.cfg.dp,
           c[chosen].pred.cfg.ring, c[chosen].pred.cfg.ulysses, c[chosen].pred.variant);
    return CPDIT_OK;
}

static int tune_main(const tune_args *a)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cpdit_error err;
    cpdit_error_clear(&err);
    double load0[3];
    load_average(load0);
    model_plan_shape s;
    topology t;
    memset(&t, 0, sizeof t);
    char source[4200] = "", dir[4096];
    const char *path = a->topology && a->topology[0] ? a->topology : getenv("CPDIT_TOPOLOGY");
    if ((!path || !path[0]) && access(TUNE_DEFAULT_TOPOLOGY, R_OK) == 0)
        path = TUNE_DEFAULT_TOPOLOGY;
    /* 1. inputs, checked on rank 0 (model, sizes, topology file); the model folder on all */
    cpdit_status st = CPDIT_OK;
    if (rank == 0) {
        st = model_plan_shape_load(&s, a->pr.model, &a->pr.req, &err);
        if (!st && path && path[0]) {
            st = topo_file_load(&t, path, &err);
            snprintf(source, sizeof source, "%s", path);
        }
    }
    if ((st = job_bcast_status(MPI_COMM_WORLD, 0, st, &err)))
        goto out;
    MPI_Bcast(&s, (int)sizeof s, MPI_BYTE, 0, MPI_COMM_WORLD);
    st = job_agree_status(MPI_COMM_WORLD, builtin_model_resolve(a->pr.model, dir, sizeof dir, &err),
                          &err);
    if (st)
        goto out;
    /* 2. no file: the probe's quick mode now (collective), saved with the result */
    if (!path || !path[0]) {
        cpdit_probe_options po;
        cpdit_probe_options_default(&po, 1); /* the model's shapes: fully, below */
        json_t *doc = NULL;
        if ((st = cpdit_probe_run(MPI_COMM_WORLD, &po, &doc, &err)))
            goto out;
        if (rank == 0) {
            char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
            st = text ? topo_file_parse(&t, text, TUNE_DEFAULT_TOPOLOGY, &err)
                      : cpdit_error_set(&err, CPDIT_ERR_RUNTIME, SUB, "out of memory");
            snprintf(source, sizeof source, "`cpdit probe --quick` run at tune start (no "
                     "topology file given), saved to %s", TUNE_DEFAULT_TOPOLOGY);
            free(text);
        }
        json_decref(doc);
        if ((st = job_bcast_status(MPI_COMM_WORLD, 0, st, &err)))
            goto out;
    }
    /* 2b. a file without times at this model's shapes: measure them now (collective, the full
     * timings: on a shared machine the quick ones are noisier), so that the predictions use
     * them; saved in the file with the tuned entry */
    int need = 0;
    if (rank == 0)
        need = t.compute_measured &&
               !topo_find_shapes(&t, s.key, s.width, s.height, (int)s.text_tokens,
                                (int)s.image_tokens);
    MPI_Bcast(&need, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (need) {
        if (rank == 0)
            fprintf(stderr, "[tune] timing GEMMs and attention at the shapes of %s, %dx%d\n",
                    s.key, s.width, s.height);
        json_t *entry = NULL;
        st = probe_shapes_measure(MPI_COMM_WORLD, &s, size, 0, &entry, &err);
        if (!st && rank == 0)
            st = topo_file_add_shapes(&t, entry, &err);
        if ((st = job_bcast_status(MPI_COMM_WORLD, 0, st, &err)))
            goto out;
    }
    /* 3. candidates, on rank 0, to everyone */
    tune_candidate *c = calloc(TUNE_MAX_CANDIDATES, sizeof *c);
    int n = 0;
    if (rank == 0)
        st = c ? pick(&t, &s, &a->pr, size, a->top, c, &n, &err)
               : cpdit_error_set(&err, CPDIT_ERR_RUNTIME, SUB, "out of memory");
    else if (!c)
        st = cpdit_error_set(&err, CPDIT_ERR_RUNTIME, SUB, "out of memory");
    if (!(st = job_agree_status(MPI_COMM_WORLD, st, &err))) {
        MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Bcast(c, (int)(n * sizeof *c), MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rank == 0)
            fprintf(stderr, "[tune] %d candidates, at least %d rounds each (+1 warm-up), "
                            "interleaved; more until each 95%% interval is within %.0f%% or "
                            "%.0f s have passed\n",
                    n, a->rounds, 100 * TUNE_STATS_REL_HALF_WIDTH, a->budget_s);
        /* 4. measure (collective), 5. conclude on rank 0 */
        const double t0 = MPI_Wtime();
        const tune_budget b = {a->rounds, a->budget_s, TUNE_STATS_REL_HALF_WIDTH};
        st = tune_measure(MPI_COMM_WORLD, dir, &s, c, n, &b, stderr, &err);
        const double seconds = MPI_Wtime() - t0;
        if (!st && rank == 0)
            st = conclude(&t, source, &s, a, size, c, n, seconds, load0, &err);
        st = job_bcast_status(MPI_COMM_WORLD, 0, st, &err);
    }
    free(c);
out:
    if (rank == 0)
        topo_file_free(&t);
    if (st && rank == 0)
        cli_report(&err);
    return st ? (st == CPDIT_ERR_INPUT ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME) : CLI_EXIT_OK;
}

int cmd_tune(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},  {"width", required_argument, 0, 'W'},
        {"height", required_argument, 0, 'H'}, {"topology", required_argument, 0, 't'},
        {"top", required_argument, 0, 'k'},    {"steps", required_argument, 0, 'S'},
        {"rounds", required_argument, 0, 'R'}, {"budget", required_argument, 0, 'B'},
        {"report", required_argument, 0, 'r'}, {"max-sequence-length", required_argument, 0, 'L'},
        {"frames", required_argument, 0, 'F'}, {"manifest", required_argument, 0, 'M'},
        {"objective", required_argument, 0, 'o'}, {"images", required_argument, 0, 'i'},
        {"cfg", no_argument, 0, 'c'},          {"no-cfg", no_argument, 0, 'C'},
        {0, 0, 0, 0}};
    static tune_args a; /* large (the command line, the request) */
    memset(&a, 0, sizeof a);
    a.report = TUNE_DEFAULT_REPORT;
    a.top = TUNE_DEFAULT_TOP;
    a.rounds = TUNE_DEFAULT_ROUNDS;
    a.budget_s = TUNE_DEFAULT_BUDGET_S;
    a.given = (plan_given)PLAN_GIVEN_NONE;
    plan_given *g = &a.given;
    for (int i = 0, used = 0; i < argc && used < (int)sizeof a.command - 1; i++)
        used += snprintf(a.command + used, sizeof a.command - (size_t)used, "%s%s",
                         i ? " " : "cpdit ", argv[i]);
    long v;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:t:", opts, NULL)) != -1) {
        switch (c) {
        case 'm': g->model = optarg; break;
        case 'M': g->manifest = optarg; break;
        case 't': a.topology = optarg; break;
        case 'r': a.report = optarg; break;
        case 'c': g->cfg = 1; break;
        case 'C': g->cfg = 0; break;
        case 'o': if ((g->objective = plan_parse_objective(SUB, optarg)) < 0) return CLI_EXIT_USAGE; break;
        case 'W': if (cli_parse_int(SUB, "--width", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE; g->width = (int)v; break;
        case 'H': if (cli_parse_int(SUB, "--height", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE; g->height = (int)v; break;
        case 'k': if (cli_parse_int(SUB, "--top", optarg, 1, TUNE_MAX_CANDIDATES - 2, &v)) return CLI_EXIT_USAGE; a.top = (int)v; break;
        case 'S': if (cli_parse_int(SUB, "--steps", optarg, 1, 10000, &v)) return CLI_EXIT_USAGE; g->steps = (int)v; break;
        case 'R': if (cli_parse_int(SUB, "--rounds", optarg, 1, TUNE_MAX_ROUNDS - 1, &v)) return CLI_EXIT_USAGE; a.rounds = (int)v; break;
        case 'B': if (cli_parse_int(SUB, "--budget", optarg, 0, TUNE_MAX_BUDGET_S, &v)) return CLI_EXIT_USAGE; a.budget_s = (double)v; break;
        case 'i': if (cli_parse_int(SUB, "--images", optarg, 1, 1 << 30, &v)) return CLI_EXIT_USAGE; g->images = (int)v; break;
        case 'L': if (cli_parse_int(SUB, "--max-sequence-length", optarg, 1, 512, &v)) return CLI_EXIT_USAGE; g->text_tokens = (int)v; break;
        case 'F': if (cli_parse_int(SUB, "--frames", optarg, 1, MODEL_PLAN_MAX_FRAMES, &v)) return CLI_EXIT_USAGE; g->frames = (int)v; break;
        default:
            return cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc && !g->manifest)
        g->manifest = argv[optind++]; /* cpdit tune MANIFEST */
    if (optind < argc)
        return cli_usage_error(SUB, "unexpected argument '%s'", argv[optind]);
    if (!g->model && !g->manifest)
        return cli_usage_error(SUB, "--model DIR|builtin:NAME or a manifest is required");
    if (!a.report[0])
        return cli_usage_error(SUB, "--report: empty folder name");
    int rc = plan_request_resolve(SUB, g, 0, &a.pr);
    if (rc)
        return rc;
    MPI_Init(NULL, NULL);
    cpdit_backends_bind_mpi(); /* each rank to its device (collective, right after MPI_Init) */
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (a.pr.images == 0)
        a.pr.images = size; /* throughput of one image per rank */
    int code = tune_main(&a);
    MPI_Finalize();
    return code;
}
