/* cmd_forward.c — `cpdit forward` (see cmd_forward.h): option parsing, MPI start-up, and the
 * component table: --component NAME runs its entry on every rank. The transformer runs
 * through its model family (lib/models/model.h: forward_file reads the inputs by diffusers'
 * names, splits the batch over data-parallel groups and the tokens over each CP group, and
 * writes `sample` from rank 0); the VAE through the VAE module (cmd_forward_vae.c).
 *
 * Errors: every rank reaches the same checkpoints (cpdit_comm_agree); when any rank failed,
 * rank 0 prints the lowest failing rank's message ("cpdit: <where>: <what>") and every rank
 * exits with the agreed status (2 bad input, 1 runtime failure).
 */
#include "config.h"

#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kernels/backend.h"
#include "bin/cli.h"
#include "bin/cmd_forward.h"
#include "bin/forward_ranks.h"
#include "lib/cp/comm_mpi.h"
#include "lib/cp/cp_attention.h"
#include "lib/models/model.h"
#include "lib/models/model_detect.h"

#define SUB "forward"

/* Weak: resolved when the VAE module is linked in, NULL otherwise. */
extern cpdit_status vae_forward_command(const forward_options *opt, cpdit_error *err)
    __attribute__((weak));

/* ------------------------------------------------------------------ options */

static int component_known(const char *name);
static const char *component_names(char *buf, size_t n);

/* Parse argv into o. Returns 0, or -1 after printing a usage error (rank 0 only). */
static int parse_options(int argc, char **argv, forward_options *o, int quiet)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"component", required_argument, 0, 'c'},
        {"inputs", required_argument, 0, 'i'},    {"output", required_argument, 0, 'o'},
        {"attention", required_argument, 0, 'A'}, {"attention-backend", required_argument, 0, 'K'},
        {"backend", required_argument, 0, 'B'},   {"ulysses", required_argument, 0, 'U'},
        {"ring", required_argument, 0, 'R'},      {"anything", no_argument, 0, 'a'},
        {"verbose", no_argument, 0, 'v'},         {"weight-format", required_argument, 0, 'F'},
        {"vae-parallel", required_argument, 0, 'P'}, {"no-weight-sharing", no_argument, 0, 'N'},
        {"weight-memory", required_argument, 0, 'M'}, {"no-weight-prefetch", no_argument, 0, 'X'},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->ulysses = o->ring = 1;
    o->vae_parallel = 1;
    const char *vae_parallel = NULL;
    long n;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "v", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'c': o->component = optarg; break;
        case 'i': o->inputs = optarg; break;
        case 'o': o->output = optarg; break;
        case 'A': o->attention = optarg; break;
        case 'K': o->attention_backend = optarg; break;
        case 'B': o->backend = optarg; break;
        case 'F': o->weight_format = optarg; break;
        case 'P': vae_parallel = optarg; break;
        case 'a': o->anything = 1; break;
        case 'N': o->no_weight_sharing = 1; break;
        case 'X': o->no_weight_prefetch = 1; break;
        case 'M':
            if (cli_parse_size(optarg, &o->weight_memory)) {
                if (!quiet)
                    cli_usage_error(SUB, "--weight-memory: expected a size such as 8G, 512M or "
                                         "4096, got '%s'", optarg);
                return -1;
            }
            break;
        case 'v': o->verbose = 1; break;
        case 'U':
        case 'R':
            if (quiet) {
                char *end;
                n = strtol(optarg, &end, 10);
                if (!*optarg || *end || n < 1 || n > 1 << 20)
                    return -1;
            } else if (cli_parse_int(SUB, c == 'U' ? "--ulysses" : "--ring", optarg, 1,
                                     1 << 20, &n)) {
                return -1;
            }
            *(c == 'U' ? &o->ulysses : &o->ring) = (int)n;
            break;
        default:
            if (!quiet)
                cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        if (!quiet)
            cli_usage_error(SUB, "unexpected argument '%s'", argv[optind]);
        return -1;
    }
    cli_attention_alias(&o->attention, &o->attention_backend);
    if (vae_parallel) {
        if (strcmp(vae_parallel, "on") && strcmp(vae_parallel, "off")) {
            if (!quiet)
                cli_usage_error(SUB, "--vae-parallel: '%s'; use on or off", vae_parallel);
            return -1;
        }
        o->vae_parallel = !strcmp(vae_parallel, "on");
    }
    const char *missing = !o->model       ? "--model DIR"
                          : !o->component ? "--component transformer|vae|text_encoder"
                          : !o->inputs    ? "--inputs IN.safetensors"
                          : !o->output    ? "--output OUT.safetensors"
                                          : NULL;
    if (missing) {
        if (!quiet)
            cli_usage_error(SUB, "missing %s", missing);
        return -1;
    }
    if (o->weight_format && cpdit_weight_format_from_name(o->weight_format) < 0) {
        if (!quiet)
            cli_usage_error(SUB, "--weight-format: unknown format '%s'; use native or fp32",
                            o->weight_format);
        return -1;
    }
    if (!component_known(o->component)) {
        char names[128];
        if (!quiet)
            cli_usage_error(SUB, "--component: unknown component '%s'; use %s", o->component,
                            component_names(names, sizeof names));
        return -1;
    }
    return cli_resolve_model(&o->model, quiet); /* builtin:NAME, as run takes it */
}

static int exit_code(cpdit_status st)
{
    return st == CPDIT_OK ? CLI_EXIT_OK : st == CPDIT_ERR_INPUT ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME;
}

/* ------------------------------------------------------------------ the transformer */

/* --verbose: the weights, per-rank memory and who made the streamed blocks, the timings. */
static void report_transformer(const forward_options *o, const model_forward_result *r,
                               const cp_attention_config *attn, double total_s)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long peak_kib = ru.ru_maxrss, max_peak = 0;
    long pss_kib = (long)(r->pss_bytes >> 10), max_pss = 0;
    double fwd = r->forward_s, max_fwd = 0;
    MPI_Reduce(&peak_kib, &max_peak, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&pss_kib, &max_pss, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&fwd, &max_fwd, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    const model_weight_stats *ws = &r->ws;
    if (o->world_rank == 0)
        fprintf(stderr,
                "cpdit: forward: weights %s, %s%s, %.1f MiB of linear layers (largest "
                "block %.1f MiB), made in %.3f s (the forward waited %.3f s; %llu blocks "
                "made ahead); PSS %.1f MiB (largest rank, shared pages split among "
                "sharers)\n",
                o->weight_format ? o->weight_format : "native",
                ws->resident ? "made once" : "streamed per block",
                ws->shared ? " in node-shared memory" : "", ws->matrix_bytes / 1048576.0,
                ws->largest_group_bytes / 1048576.0, ws->create_seconds, ws->stall_seconds,
                ws->prefetched_groups, max_pss / 1024.0);
    /* per rank: PSS, and who made its streamed blocks (shared slots: made once per node) */
    double mine[4] = {(double)pss_kib, (double)ws->stream_sharers, (double)ws->peer_groups,
                      (double)ws->bytes_read};
    double *all = o->world_rank == 0 ? malloc(4 * sizeof *all * (size_t)o->world_size) : NULL;
    MPI_Gather(mine, 4, MPI_DOUBLE, all, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    for (int k = 0; all && k < o->world_size; k++) {
        char how[64];
        if (ws->resident)
            snprintf(how, sizeof how, "weights made once");
        else if (all[4 * k + 1] > 1)
            snprintf(how, sizeof how, "streaming slots shared by %.0f ranks", all[4 * k + 1]);
        else
            snprintf(how, sizeof how, "streaming slots its own");
        fprintf(stderr,
                "cpdit: forward: rank %d: PSS %.1f MiB; %s; %.0f blocks made by another "
                "rank, %.1f MiB of weights read\n",
                k, all[4 * k] / 1024.0, how, all[4 * k + 2], all[4 * k + 3] / 1048576.0);
    }
    free(all);
    if (o->world_rank == 0)
        fprintf(stderr,
                "cpdit: forward: %s, %s attention%s; batch %d, %lld text + %lld image tokens\n"
                "cpdit: forward: load %.3f s, forward %.3f s (slowest rank), total %.3f s; "
                "%zu parameters, peak RSS %.1f MiB (largest rank)\n",
                r->grid, cp_attention_config_name(attn), o->anything ? " (anything)" : "",
                r->batch, r->text_tokens, r->tokens, r->load_s, max_fwd, total_s, r->params,
                (double)max_peak / 1024.0);
}

/* The transformer of the model's family (lib/models/model.h) on the inputs file. */
static cpdit_status run_transformer(const forward_options *o, cpdit_error *err)
{
    const double t0 = forward_now_s();
    model_forward_file a;
    memset(&a, 0, sizeof a);
    a.model = o->model;
    a.inputs = o->inputs;
    a.output = o->output;
    a.ring = o->ring;
    a.ulysses = o->ulysses;
    a.weight_format = o->weight_format;
    a.weight_memory = o->weight_memory;
    a.no_weight_sharing = o->no_weight_sharing;
    a.no_prefetch = o->no_weight_prefetch;
    const model_family *f = NULL;
    cpdit_status st = cp_attention_config_parse(o->attention, &a.attn, err);
    a.attn.anything = o->anything;
    if (!st)
        st = cli_backend_resolve(o->backend, o->attention_backend, &a.attn.backend,
                                 &a.attn.kernel, err);
    if (!st)
        st = model_family_find(o->model, &f, err);
    if (!st && !f->forward_file)
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, o->model,
                             "cpdit forward does not run the %s family's transformer yet",
                             f->name);
    if (!st)
        st = cpdit_comm_mpi_create(MPI_COMM_WORLD, 0, &a.world, err);
    if ((st = cpdit_comm_agree_mpi(MPI_COMM_WORLD, st, err))) {
        cpdit_comm_destroy(a.world);
        return st;
    }
    model_forward_result r;
    st = f->forward_file(&a, &r, err);
    if (!st && o->verbose)
        report_transformer(o, &r, &a.attn, forward_now_s() - t0);
    cpdit_comm_destroy(a.world);
    return st;
}

/* The VAE module's forward, when it is linked in. */
static cpdit_status run_vae(const forward_options *o, cpdit_error *err)
{
    if (!vae_forward_command)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, SUB,
                               "--component vae: this build does not include the VAE decoder "
                               "yet");
    return vae_forward_command(o, err);
}

/* --component NAME -> what runs it (every rank; rank 0 prints the agreed error). A family's
 * own command for a component (family: its name, lib/models/model_detect.h) comes before the
 * generic entry of that component. A component is one line here, a command of this
 * signature, e.g. {"text_encoder", NULL, text_encoder_forward_command}. */
static const struct forward_component {
    const char *name;
    const char *family; /* NULL: any family; else model_detect.h's name of the model's */
    cpdit_status (*run)(const forward_options *o, cpdit_error *err);
} components[] = {
    {"transformer", "wan", wan_transformer_forward_command}, /* bin/cmd_forward_wan.c */
    {"transformer", NULL, run_transformer},
    {"vae", NULL, run_vae},
    {"text_encoder", NULL, text_encoder_forward_command}, /* bin/cmd_forward_text.c */
};
#define N_COMPONENTS (sizeof components / sizeof components[0])

/* "transformer|vae" into buf. */
static const char *component_names(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_COMPONENTS && used < n; i++)
        if (!strstr(buf, components[i].name))
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? "|" : "",
                                     components[i].name);
    return buf;
}

static int component_known(const char *name)
{
    for (size_t i = 0; i < N_COMPONENTS; i++)
        if (!strcmp(components[i].name, name))
            return 1;
    return 0;
}

/* The entry for --component (and, where entries name a family, the model's family). */
static const struct forward_component *find_component(const forward_options *o)
{
    char family[MODEL_DETECT_NAME_MAX] = "";
    int looked = 0;
    for (size_t i = 0; i < N_COMPONENTS; i++) {
        const struct forward_component *c = &components[i];
        if (strcmp(c->name, o->component))
            continue;
        if (!c->family)
            return c;
        if (!looked && model_family_of(o->model, family, NULL)) /* not a folder: no family */
            family[0] = '\0';
        looked = 1;
        if (!strcmp(family, c->family))
            return c;
    }
    return NULL;
}

/* ------------------------------------------------------------------ entry */

int cmd_forward(int argc, char **argv)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "cpdit: %s: MPI_Init failed\n", SUB);
        return CLI_EXIT_RUNTIME;
    }
    cpdit_backends_bind_mpi(); /* each rank to its device (collective, right after MPI_Init) */
    forward_options o;
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rc;
    if (parse_options(argc, argv, &o, rank != 0)) {
        rc = CLI_EXIT_USAGE;
    } else {
        o.world_rank = rank;
        o.world_size = size;
        cpdit_backend_set_verbose(o.verbose && rank == 0); /* e.g. what attention auto picks */
        const struct forward_component *c = find_component(&o);
        cpdit_error err;
        cpdit_error_clear(&err);
        cpdit_status st = c->run(&o, &err);
        if (st && rank == 0)
            cli_report(&err);
        rc = exit_code(st);
    }
    if (!inited)
        MPI_Finalize();
    return rc;
}
