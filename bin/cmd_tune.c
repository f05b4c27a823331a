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
#include "bin/cli.h"
#include "jobs/job_run.h"
#include "lib/builtin/builtin_model.h"
#include "topology/cost_model.h"
#include "topology/probe.h"
#include "topology/probe_shapes.h"
#include "topology/tune_report.h"
#include "topology/tune_run.h"

#define SUB "tune"
#define TUNE_DEFAULT_TOP 4
#define TUNE_DEFAULT_ROUNDS 3
#define TUNE_DEFAULT_REPORT "cpdit-report"
#define TUNE_DEFAULT_TOPOLOGY "cpdit-topology.json" /* cpdit probe's default output */
#define TUNE_PLAN_STEPS 28 /* for images/hour in the tables only */
#define TUNE_MAX_CANDIDATES 32

typedef struct tune_args {
    const char *model, *topology, *report;
    int width, height, top, rounds, msl, frames;
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
static cpdit_status pick(const topology *t, const model_plan_shape *s, int ranks, int top,
                         tune_candidate *c, int *n, cpdit_error *err)
{
    cm_options o = {ranks, TUNE_PLAN_STEPS, 1};
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

/* Rank 0's part after the measurements: choose, record, report, print. */
static cpdit_status conclude(topology *t, const char *topo_source, const model_plan_shape *s,
                             const tune_args *a, int ranks, tune_candidate *c, int n,
                             double seconds, const double load0[3], cpdit_error *err)
{
    int chosen = -1;
    for (int i = 0; i < n; i++)
        if (!c[i].failed && c[i].measured_s > 0 &&
            (chosen < 0 || c[i].measured_s < c[chosen].measured_s))
            chosen = i;
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
    cpdit_status st = CPDIT_OK;
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
        topo_tuned e = {(char *)s->key, s->width, s->height, ranks, {0}, ms, k};
        e.chosen = (topo_grid_time){c[chosen].pred.cfg.dp, c[chosen].pred.cfg.ring,
                                    c[chosen].pred.cfg.ulysses, "", 0};
        snprintf(e.chosen.variant, sizeof e.chosen.variant, "%s", c[chosen].pred.variant);
        st = topo_file_save_tuned(t, &e, err);
    }
    if (!st)
        st = tune_report_write(a->report, &info, c, n, chosen, err);
    if (st)
        return st;
    printf("%4s %4s %4s %-24s %12s %12s %8s  %s\n", "dp", "ring", "uly", "variant",
           "predicted_s", "measured_s", "error", "why");
    for (int i = 0; i < n; i++) {
        const cm_prediction *p = &c[i].pred;
        if (c[i].failed)
            printf("%4d %4d %4d %-24s %12.4g %12s %8s  %s (failed: %s)\n", p->cfg.dp,
                   p->cfg.ring, p->cfg.ulysses, p->variant, p->step_s, "-", "-", c[i].why,
                   c[i].error);
        else
            printf("%4d %4d %4d %-24s %12.4g %12.4g %+7.0f%%  %s\n", p->cfg.dp, p->cfg.ring,
                   p->cfg.ulysses, p->variant, p->step_s, c[i].measured_s,
                   100.0 * (p->step_s - c[i].measured_s) / c[i].measured_s, c[i].why);
    }
    printf("report: %s/report.md; recorded in %s\n", a->report, t->path);
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
        model_request req;
        model_request_defaults(&req);
        req.width = a->width, req.height = a->height, req.text_tokens = a->msl;
        req.frames = a->frames;
        st = model_plan_shape_load(&s, a->model, &req, &err);
        if (!st && path && path[0]) {
            st = topo_file_load(&t, path, &err);
            snprintf(source, sizeof source, "%s", path);
        }
    }
    if ((st = job_bcast_status(MPI_COMM_WORLD, 0, st, &err)))
        goto out;
    MPI_Bcast(&s, (int)sizeof s, MPI_BYTE, 0, MPI_COMM_WORLD);
    st = job_agree_status(MPI_COMM_WORLD, builtin_model_resolve(a->model, dir, sizeof dir, &err),
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
        st = c ? pick(&t, &s, size, a->top, c, &n, &err)
               : cpdit_error_set(&err, CPDIT_ERR_RUNTIME, SUB, "out of memory");
    else if (!c)
        st = cpdit_error_set(&err, CPDIT_ERR_RUNTIME, SUB, "out of memory");
    if (!(st = job_agree_status(MPI_COMM_WORLD, st, &err))) {
        MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Bcast(c, (int)(n * sizeof *c), MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rank == 0)
            fprintf(stderr, "[tune] %d candidates, %d rounds each (+1 warm-up), interleaved\n",
                    n, a->rounds);
        /* 4. measure (collective), 5. conclude on rank 0 */
        const double t0 = MPI_Wtime();
        st = tune_measure(MPI_COMM_WORLD, dir, &s, c, n, a->rounds, stderr, &err);
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
        {"report", required_argument, 0, 'r'}, {"max-sequence-length", required_argument, 0, 'L'},
        {"frames", required_argument, 0, 'F'}, {0, 0, 0, 0}};
    tune_args a = {NULL, NULL, TUNE_DEFAULT_REPORT, 0, 0, TUNE_DEFAULT_TOP, TUNE_DEFAULT_ROUNDS, 0, 0};
    long v;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': a.model = optarg; break;
        case 't': a.topology = optarg; break;
        case 'r': a.report = optarg; break;
        case 'W': if (cli_parse_int(SUB, "--width", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE; a.width = (int)v; break;
        case 'H': if (cli_parse_int(SUB, "--height", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE; a.height = (int)v; break;
        case 'k': if (cli_parse_int(SUB, "--top", optarg, 1, TUNE_MAX_CANDIDATES - 2, &v)) return CLI_EXIT_USAGE; a.top = (int)v; break;
        case 'S': if (cli_parse_int(SUB, "--steps", optarg, 1, TUNE_MAX_ROUNDS - 1, &v)) return CLI_EXIT_USAGE; a.rounds = (int)v; break;
        case 'L': if (cli_parse_int(SUB, "--max-sequence-length", optarg, 1, 512, &v)) return CLI_EXIT_USAGE; a.msl = (int)v; break;
        case 'F': if (cli_parse_int(SUB, "--frames", optarg, 1, MODEL_PLAN_MAX_FRAMES, &v)) return CLI_EXIT_USAGE; a.frames = (int)v; break;
        default:
            return cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(SUB, "unexpected argument '%s'", argv[optind]);
    if (!a.model)
        return cli_usage_error(SUB, "--model DIR|builtin:NAME is required");
    if (!a.width || !a.height)
        return cli_usage_error(SUB, "--width and --height are required");
    if (!a.report[0])
        return cli_usage_error(SUB, "--report: empty folder name");
    MPI_Init(NULL, NULL);
    cpdit_backends_bind_mpi(); /* each rank to its device (collective, right after MPI_Init) */
    int code = tune_main(&a);
    MPI_Finalize();
    return code;
}
