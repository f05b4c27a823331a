/* cmd_plan.c — `cpdit plan`: rank every dp x ring x ulysses grid for a model (any family,
 * lib/models/model_plan.h) and image or video size on a measured machine (topology file),
 * print the table and the chosen grid. No MPI. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bin/cli.h"
#include "topology/cost_model.h"

#define SUB "plan"
#define PLAN_DEFAULT_STEPS 28

int cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {
        {"topology", required_argument, 0, 't'}, {"model", required_argument, 0, 'm'},
        {"width", required_argument, 0, 'W'},    {"height", required_argument, 0, 'H'},
        {"ranks", required_argument, 0, 'n'},    {"steps", required_argument, 0, 'S'},
        {"images", required_argument, 0, 'i'},   {"json", no_argument, 0, 'j'},
        {"max-sequence-length", required_argument, 0, 'L'}, {"frames", required_argument, 0, 'F'},
        {"cfg", no_argument, 0, 'c'}, {0, 0, 0, 0}};
    const char *topo_path = NULL, *model = NULL;
    model_request req;
    model_request_defaults(&req);
    int json = 0;
    cm_options o = {0, PLAN_DEFAULT_STEPS, 1};
    long v;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 't': topo_path = optarg; break;
        case 'm': model = optarg; break;
        case 'j': json = 1; break;
        case 'c': req.cfg = 1; break;
        case 'W': if (cli_parse_int(SUB, "--width", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE; req.width = (int)v; break;
        case 'H': if (cli_parse_int(SUB, "--height", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE; req.height = (int)v; break;
        case 'F': if (cli_parse_int(SUB, "--frames", optarg, 1, MODEL_PLAN_MAX_FRAMES, &v)) return CLI_EXIT_USAGE; req.frames = (int)v; break;
        case 'n': if (cli_parse_int(SUB, "--ranks", optarg, 1, 1 << 20, &v)) return CLI_EXIT_USAGE; o.ranks = (int)v; break;
        case 'S': if (cli_parse_int(SUB, "--steps", optarg, 1, 10000, &v)) return CLI_EXIT_USAGE; o.steps = (int)v; break;
        case 'i': if (cli_parse_int(SUB, "--images", optarg, 1, 1 << 30, &v)) return CLI_EXIT_USAGE; o.images = (int)v; break;
        case 'L': if (cli_parse_int(SUB, "--max-sequence-length", optarg, 1, 512, &v)) return CLI_EXIT_USAGE; req.text_tokens = (int)v; break;
        default:
            return cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(SUB, "unexpected argument '%s'", argv[optind]);
    if (!topo_path)
        topo_path = getenv("CPDIT_TOPOLOGY");
    if (!topo_path || !topo_path[0])
        return cli_usage_error(SUB, "--topology FILE is required (write one with `mpirun ... "
                                    "cpdit probe`, or set CPDIT_TOPOLOGY)");
    if (!model)
        return cli_usage_error(SUB, "--model DIR|builtin:NAME is required");
    if (!req.width || !req.height)
        return cli_usage_error(SUB, "--width and --height are required");

    cpdit_error err;
    cpdit_error_clear(&err);
    topology t;
    model_plan_shape s;
    cpdit_status st = topo_file_load(&t, topo_path, &err);
    if (st)
        return cli_report(&err);
    req.steps = o.steps;
    st = model_plan_shape_load(&s, model, &req, &err);
    if (st) {
        topo_file_free(&t);
        return cli_report(&err);
    }
    cm_prediction *p = NULL;
    int n = 0;
    const int N = o.ranks > 0 ? o.ranks : t.ranks;
    st = cm_rank(&t, &s, &o, topo_find_tuned(&t, s.key, s.width, s.height, N), &p, &n, &err);
    if (!st) {
        char reason[512];
        cm_reason(&p[0], &o, &s, topo_path, reason, sizeof reason);
        if (json) {
            cm_print_json(stdout, p, n, &o, &s, reason);
        } else {
            printf("topology %s: %d ranks on %d host%s; %d ranks planned\n", topo_path, t.ranks,
                   t.n_hosts, t.n_hosts == 1 ? "" : "s", N);
            cm_print_table(stdout, p, n, &o, &s);
        }
        if (!json)
            fprintf(stderr, "why: %s\n", reason);
    }
    free(p);
    topo_file_free(&t);
    return st ? cli_report(&err) : CLI_EXIT_OK;
}
