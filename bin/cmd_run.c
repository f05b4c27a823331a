/* cmd_run.c — `cpdit run`: parse the options, start MPI, and run one item or a manifest. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "bin/cli.h"
#include "bin/cmd_run.h"
#include "jobs/job_run.h"
#include "lib/io/video_writer.h"
#include "lib/pipeline/pipeline.h"
#include "lib/weights/weight_shared_mpi.h"
#include "yaml/manifest.h"

#define SUB "run"

static int parse_float(const char *opt, const char *text, float lo, float hi, float *out)
{
    char *end = NULL;
    double v = text ? strtod(text, &end) : 0;
    if (!text || !*text || *end || !(v >= lo && v <= hi)) {
        cli_usage_error(SUB, "%s: expected a number in [%g, %g], got '%s'", opt, lo, hi,
                        text ? text : "");
        return -1;
    }
    *out = (float)v;
    return 0;
}

run_weight_options run_weights;

/* The ranks of a node share one copy of the transformer's weights (for the whole process). */
static weight_sharer *run_sharer;
static weight_arena_ops run_arena;

int run_open_pipeline(struct pipeline **out, const char *model, const run_item_options *o,
                      struct cpdit_error *err)
{
    pipeline_options wo;
    memset(&wo, 0, sizeof wo);
    wo.backend = o->backend;
    wo.attention_kernel = o->attention_kernel;
    if (run_weights.format)
        wo.format = (cpdit_weight_format)cpdit_weight_format_from_name(run_weights.format);
    wo.budget = run_weights.memory;
    if (!run_weights.no_share && !run_sharer) {
        cpdit_status st = weight_sharer_create(&run_sharer, MPI_COMM_WORLD, err);
        if (st)
            return st;
        run_arena = weight_sharer_arena(run_sharer);
    }
    if (run_sharer)
        wo.arena = &run_arena;
    else if (!wo.budget) { /* each rank of the node holds its own copy */
        int n = 1;
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        MPI_Comm_size(node, &n);
        MPI_Comm_free(&node);
        wo.budget = weight_budget_default(n);
    }
    return pipeline_open_with(out, model, &wo, err);
}

/* Seeds are 0 .. MANIFEST_SEED_MAX (2^63-1), as in a manifest: a negative seed is refused. */
static int parse_seed(const char *text, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = text ? strtoll(text, &end, 10) : 0;
    if (!text || !*text || *end || errno == ERANGE || v < 0) {
        cli_usage_error(SUB, "--seed: expected an integer in [0, %lld], got '%s'",
                        (long long)MANIFEST_SEED_MAX, text ? text : "");
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* --frames, --format, --fps, --flow-shift (option letters f, O, r, w) into o; -1 after a
 * usage message. */
static int parse_video_option(int c, const char *arg, run_item_options *o)
{
    long v;
    float fv;
    switch (c) {
    case 'f':
        if (cli_parse_int(SUB, "--frames", arg, 1, CPDIT_VIDEO_MAX_FRAMES, &v))
            return -1;
        o->frames = (int)v;
        return 0;
    case 'O':
        o->video_format = arg;
        return 0;
    case 'r':
        if (parse_float("--fps", arg, CPDIT_VIDEO_MIN_FPS, CPDIT_VIDEO_MAX_FPS, &fv))
            return -1;
        o->fps = fv;
        return 0;
    default: /* 'w' */
        if (parse_float("--flow-shift", arg, 0, MANIFEST_GUIDANCE_MAX, &fv))
            return -1;
        o->flow_shift = fv;
        return 0;
    }
}

int cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},    {"prompt", required_argument, 0, 'p'},
        {"negative-prompt", required_argument, 0, 'n'}, {"seed", required_argument, 0, 's'},
        {"width", required_argument, 0, 'W'},    {"height", required_argument, 0, 'H'},
        {"steps", required_argument, 0, 'S'},    {"guidance", required_argument, 0, 'g'},
        {"true-cfg", required_argument, 0, 'c'}, {"output", required_argument, 0, 'o'},
        {"dump", required_argument, 0, 'd'},     {"ring", required_argument, 0, 'R'},
        {"ulysses", required_argument, 0, 'U'},  {"anything", no_argument, 0, 'a'},
        {"attention", required_argument, 0, 'A'},
        {"attention-backend", required_argument, 0, 'K'},
        {"backend", required_argument, 0, 'B'},
        {"weight-format", required_argument, 0, 'F'},
        {"weight-memory", required_argument, 0, 'M'},
        {"no-weight-sharing", no_argument, 0, 'P'},
        {"max-sequence-length", required_argument, 0, 'L'},
        {"check", no_argument, 0, 'C'},          {"status", no_argument, 0, 'Z'},          {"dp", required_argument, 0, 'D'},
        {"topology", required_argument, 0, 'T'},
        {"vae-parallel", required_argument, 0, 'V'}, {"vae-tiling", no_argument, 0, 'X'},
        {"verbose", no_argument, 0, 'v'},
        {"frames", required_argument, 0, 'f'},   {"fps", required_argument, 0, 'r'},
        {"flow-shift", required_argument, 0, 'w'}, {"format", required_argument, 0, 'O'},
        {"cache", required_argument, 0, 'k'},
        {0, 0, 0, 0}};
    int check = 0, status = 0, dp = 0, item_only = 0, output_given = 0;
    run_item_options o;
    run_item_defaults(&o);
    long v;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o.model = optarg; item_only = 1; break;
        case 'p': o.prompt = optarg; item_only = 1; break;
        case 'n': o.negative_prompt = optarg; item_only = 1; break;
        case 'o': o.output = optarg; output_given = 1; break;
        case 'C': check = 1; break;
        case 'Z': status = 1; break;
        case 'T': o.topology = optarg; break;
        case 'D': if (cli_parse_int(SUB, "--dp", optarg, 1, MANIFEST_DEGREE_MAX, &v)) return CLI_EXIT_USAGE; dp = (int)v; break;
        case 'd': o.dump = optarg; break;
        case 'A': o.variant = optarg; break;
        case 'K': o.attention_kernel = optarg; break;
        case 'B': o.backend = optarg; break;
        case 'F':
            if (cpdit_weight_format_from_name(optarg) < 0)
                return cli_usage_error(SUB, "--weight-format: unknown format '%s'; use native "
                                            "(bf16 as stored) or fp32", optarg);
            run_weights.format = optarg;
            break;
        case 'P': run_weights.no_share = 1; break;
        case 'M':
            if (cli_parse_size(optarg, &run_weights.memory))
                return cli_usage_error(SUB, "--weight-memory: expected a size such as 8G, "
                                            "512M or 1073741824, got '%s'", optarg);
            break;
        case 'a': o.anything = 1; break;
        case 'X': o.vae_tiling = 1; break;
        case 'v': o.verbose = 1; break;
        case 'k': {
            pipeline_cache_config cc;
            cpdit_error cerr;
            cpdit_error_clear(&cerr);
            if (pipeline_cache_parse(optarg, "--cache", &cc, &cerr))
                return cli_usage_error(SUB, "--cache: %s", cerr.what);
            o.cache = optarg;
            break;
        }
        case 'V':
            if (manifest_vae_parallel_from_name(optarg) < 0)
                return cli_usage_error(SUB, "--vae-parallel: '%s'; use on, off or world",
                                       optarg);
            o.vae_parallel = optarg;
            o.vae_single_rank = manifest_vae_parallel_from_name(optarg) == MANIFEST_VAE_OFF;
            o.vae_world = manifest_vae_parallel_from_name(optarg) == MANIFEST_VAE_WORLD;
            break;
        case 's': if (parse_seed(optarg, &o.seed)) return CLI_EXIT_USAGE; item_only = 1; break;
        case 'g': if (parse_float("--guidance", optarg, 0, MANIFEST_GUIDANCE_MAX, &o.guidance)) return CLI_EXIT_USAGE; o.guidance_given = item_only = 1; break;
        case 'f': case 'O': case 'r': case 'w':
            if (parse_video_option(c, optarg, &o)) return CLI_EXIT_USAGE;
            item_only = 1;
            break;
        case 'c': if (parse_float("--true-cfg", optarg, 0, MANIFEST_GUIDANCE_MAX, &o.true_cfg)) return CLI_EXIT_USAGE; o.true_cfg_given = item_only = 1; break;
        case 'W': if (cli_parse_int(SUB, "--width", optarg, MANIFEST_SIDE_MIN, MANIFEST_SIDE_MAX, &v)) return CLI_EXIT_USAGE; o.width = (int)v; item_only = 1; break;
        case 'H': if (cli_parse_int(SUB, "--height", optarg, MANIFEST_SIDE_MIN, MANIFEST_SIDE_MAX, &v)) return CLI_EXIT_USAGE; o.height = (int)v; item_only = 1; break;
        case 'S': if (cli_parse_int(SUB, "--steps", optarg, 1, MANIFEST_STEPS_MAX, &v)) return CLI_EXIT_USAGE; o.steps = (int)v; item_only = 1; break;
        case 'R': if (cli_parse_int(SUB, "--ring", optarg, 1, MANIFEST_DEGREE_MAX, &v)) return CLI_EXIT_USAGE; o.ring = (int)v; break;
        case 'U': if (cli_parse_int(SUB, "--ulysses", optarg, 1, MANIFEST_DEGREE_MAX, &v)) return CLI_EXIT_USAGE; o.ulysses = (int)v; break;
        case 'L': if (cli_parse_int(SUB, "--max-sequence-length", optarg, 1, MANIFEST_SEQ_LEN_MAX, &v)) return CLI_EXIT_USAGE; o.max_sequence_length = (int)v; item_only = 1; break;
        default:
            return cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    cli_attention_alias(&o.variant, &o.attention_kernel);
    if ((output_given && !o.output[0]) || (o.dump && !o.dump[0]))
        return cli_usage_error(SUB, "%s: empty folder name", o.dump && !o.dump[0] ? "--dump" : "--output");
    if (optind < argc) { /* a manifest */
        if (optind + 1 < argc)
            return cli_usage_error(SUB, "one manifest per run, got '%s' and '%s'", argv[optind],
                                   argv[optind + 1]);
        if (item_only)
            return cli_usage_error(SUB, "--model/--prompt/--negative-prompt describe one item "
                                        "without a manifest (also --seed, --width, --height, "
                                        "--steps, --guidance, --true-cfg, --frames, --fps, "
                                        "--flow-shift, --format, "
                                        "--max-sequence-length); put them in %s instead",
                                   argv[optind]);
        manifest_overrides ov = MANIFEST_OVERRIDES_NONE;
        ov.output_dir = output_given ? o.output : NULL;
        ov.dp = dp;
        ov.ring = o.ring;
        ov.ulysses = o.ulysses;
        if (o.anything)
            ov.anything = 1;
        ov.vae_tiling = o.vae_tiling;
        ov.vae_parallel = o.vae_parallel;
        ov.cache = o.cache;
        if (check)
            return check_batch(argv[optind], &ov);
        if (status) {
            cpdit_error err;
            cpdit_error_clear(&err);
            uint64_t totals[4] = {0, 0, 0, 0};
            if (job_status_totals(NULL, argv[optind], &ov, stdout, totals, &err))
                return cli_report(&err);
            return job_status_exit_code(totals); /* 0 all done, 3 left, 4 failed */
        }
        /* a stop signal from here on (even during MPI_Init) sets the flag instead of
         * killing the rank: the run then stops cleanly with exit 3 */
        cpdit_error serr;
        int handlers = job_stop_install(&serr) == CPDIT_OK;
        MPI_Init(NULL, NULL);
        cpdit_backends_bind_mpi(); /* each rank to its device (collective, right after MPI_Init) */
        if (o.verbose) { /* backend notes (what attention auto picks) on rank 0 */
            int r = 0;
            MPI_Comm_rank(MPI_COMM_WORLD, &r);
            cpdit_backend_set_verbose(r == 0);
        }
        int code = run_batch(argv[optind], &ov, &o);
        MPI_Finalize();
        if (handlers)
            job_stop_uninstall();
        return code;
    }
    if (status)
        return cli_usage_error(SUB, "--status needs a manifest: cpdit run FILE.yaml --status");
    if (check)
        return cli_usage_error(SUB, "--check needs a manifest: cpdit run FILE.yaml --check");
    if (dp)
        return cli_usage_error(SUB, "--dp needs a manifest: one item runs on one group");
    if (!o.prompt)
        return cli_usage_error(SUB, "--prompt is required without a manifest");
    if (o.vae_world && o.vae_tiling)
        return cli_usage_error(SUB, "--vae-parallel world splits the decode over every rank, "
                                    "--vae-tiling decodes on one rank: choose one");
    MPI_Init(NULL, NULL);
    cpdit_backends_bind_mpi(); /* each rank to its device (collective, right after MPI_Init) */
    if (o.verbose) { /* backend notes (what attention auto picks) on rank 0 */
        int r = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        cpdit_backend_set_verbose(r == 0);
    }
    int code = run_item(&o);
    MPI_Finalize();
    return code;
}
