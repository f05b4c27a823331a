/* cmd_plan.c — `cpdit plan`: rank every dp x ring x ulysses grid for a model (any family,
 * lib/models/model_plan.h) and image or video size on a measured machine (topology file),
 * print the table and the chosen grid. The request has `cpdit run`'s defaults (the manifest's
 * when one is given: bin/plan_request.h). No MPI. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bin/cli.h"
#include "bin/plan_request.h"
#include "topology/cost_model.h"
#include "topology/tuned_key.h"

#define SUB "plan"
#define PLAN_MAX_THREADS 4096

/* Plan g on topology path; print the table (or JSON). */
static int plan_on(const char *topo_path, const plan_given *g, int ranks, int threads,
                   const char *backend, int json)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    topology t;
    cpdit_status st = topo_file_load(&t, topo_path, &err);
    if (st)
        return cli_report(&err);
    const int N = ranks > 0 ? ranks : t.ranks;
    plan_request pr;
    int rc = plan_request_resolve(SUB, g, N, &pr);
    if (rc) {
        topo_file_free(&t);
        return rc;
    }
    model_plan_shape s;
    st = model_plan_shape_load(&s, pr.model, &pr.req, &err);
    if (st) {
        topo_file_free(&t);
        return cli_report(&err);
    }
    cm_options o = {N, pr.steps, pr.images, threads > 0 ? threads : t.threads_per_rank, 0};
    o.gpus = t.n_hosts > 0 && t.hosts[0].ngpus > 0 && (!backend || !strstr(backend, "cpu"));
    tuned_key_buf kb;
    topo_tuned_key key;
    cm_prediction *p = NULL;
    int n = 0;
    st = tuned_key_make(&s, N, o.threads, backend, &kb, &key, &err);
    if (!st)
        st = cm_rank(&t, &s, &o, topo_find_tuned(&t, &key), &p, &n, &err);
    if (!st) {
        char reason[512], kt[256];
        cm_reason(&p[0], &o, &s, topo_path, reason, sizeof reason);
        if (json) {
            cm_print_json(stdout, p, n, &o, &s, reason);
        } else {
            printf("topology %s: %d ranks on %d host%s; %d ranks planned\n", topo_path, t.ranks,
                   t.n_hosts, t.n_hosts == 1 ? "" : "s", N);
            printf("request: %s; %d steps (%s)\n", tuned_key_text(&key, kt, sizeof kt),
                   pr.steps, pr.source);
            cm_print_table(stdout, p, n, &o, &s);
            fprintf(stderr, "why: %s\n", reason);
        }
    }
    free(p);
    topo_file_free(&t);
    return st ? cli_report(&err) : CLI_EXIT_OK;
}

int cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {
        {"topology", required_argument, 0, 't'}, {"model", required_argument, 0, 'm'},
        {"width", required_argument, 0, 'W'},    {"height", required_argument, 0, 'H'},
        {"ranks", required_argument, 0, 'n'},    {"steps", required_argument, 0, 'S'},
        {"images", required_argument, 0, 'i'},   {"json", no_argument, 0, 'j'},
        {"max-sequence-length", required_argument, 0, 'L'}, {"frames", required_argument, 0, 'F'},
        {"cfg", no_argument, 0, 'c'},            {"no-cfg", no_argument, 0, 'C'},
        {"manifest", required_argument, 0, 'M'}, {"objective", required_argument, 0, 'o'},
        {"threads", required_argument, 0, 'T'},  {"backend", required_argument, 0, 'b'},
        {0, 0, 0, 0}};
    const char *topo_path = NULL, *backend = NULL;
    plan_given g = PLAN_GIVEN_NONE;
    int json = 0, ranks = 0, threads = 0;
    long v;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "t:m:n:", opts, NULL)) != -1) {
        switch (c) {
        case 't': topo_path = optarg; break;
        case 'm': g.model = optarg; break;
        case 'M': g.manifest = optarg; break;
        case 'b': backend = optarg; break;
        case 'j': json = 1; break;
        case 'c': g.cfg = 1; break;
        case 'C': g.cfg = 0; break;
        case 'o': if ((g.objective = plan_parse_objective(SUB, optarg)) < 0) return CLI_EXIT_USAGE; break;
        case 'W': if (cli_parse_int(SUB, "--width", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE; g.width = (int)v; break;
        case 'H': if (cli_parse_int(SUB, "--height", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE; g.height = (int)v; break;
        case 'F': if (cli_parse_int(SUB, "--frames", optarg, 1, MODEL_PLAN_MAX_FRAMES, &v)) return CLI_EXIT_USAGE; g.frames = (int)v; break;
        case 'n': if (cli_parse_int(SUB, "--ranks", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE; ranks = (int)v; break;
        case 'T': if (cli_parse_int(SUB, "--threads", optarg, 1, PLAN_MAX_THREADS, &v)) return CLI_EXIT_USAGE; threads = (int)v; break;
        case 'S': if (cli_parse_int(SUB, "--steps", optarg, 1, 10000, &v)) return CLI_EXIT_USAGE; g.steps = (int)v; break;
        case 'i': if (cli_parse_int(SUB, "--images", optarg, 1, 1 << 30, &v)) return CLI_EXIT_USAGE; g.images = (int)v; break;
        case 'L': if (cli_parse_int(SUB, "--max-sequence-length", optarg, 1, 512, &v)) return CLI_EXIT_USAGE; g.text_tokens = (int)v; break;
        default:
            return cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc && !g.manifest)
        g.manifest = argv[optind++]; /* cpdit plan MANIFEST */
    if (optind < argc)
        return cli_usage_error(SUB, "unexpected argument '%s'", argv[optind]);
    if (!topo_path)
        topo_path = getenv("CPDIT_TOPOLOGY");
    if (!topo_path || !topo_path[0])
        return cli_usage_error(SUB, "--topology FILE is required (write one with `mpirun ... "
                                    "cpdit probe`, or set CPDIT_TOPOLOGY)");
    if (!g.model && !g.manifest)
        return cli_usage_error(SUB, "--model DIR|builtin:NAME or a manifest is required");
    return plan_on(topo_path, &g, ranks, threads, backend, json);
}
