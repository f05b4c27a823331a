/* cmd_probe.c — `cpdit probe [--output FILE] [--quick] [--pairs N] [--no-compute] [--quiet]
 * [--model M --width W --height H [--max-sequence-length L]]`:
 * measure the machine (hwloc, NVML, links, compute) over every rank of the MPI job and write
 * the topology file (format 1, topology/README.md) from rank 0, atomically. */
#include "config.h"

#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "bin/cli.h"
#include "lib/io/atomic_file.h"
#include "jobs/job_run.h"
#include "lib/models/model_plan.h"
#include "kernels/backend.h"
#include "topology/probe.h"
#ifdef CPDIT_HAVE_CUDA
#include "kernels/cuda/backend_cuda.h"
#include "lib/cp/comm_nccl.h"

/* PROBE_NCCL_HOOK: NCCL links measured beside MPI's, through the cuda backend's memory and
 * compute stream (lib/cp/comm_nccl.h). */
static cpdit_status nccl_create(MPI_Comm mpi, cpdit_comm **out, cpdit_error *err)
{
    void *stream = cpdit_cuda_compute_stream(err);
    return stream ? cpdit_comm_gpu_create(mpi, stream, CPDIT_COMM_GPU_NCCL, out, err)
                  : CPDIT_ERR_RUNTIME;
}
static void *nccl_alloc(size_t bytes)
{
    return cpdit_backend_cuda()->alloc(bytes);
}
static void nccl_release(void *p)
{
    cpdit_backend_cuda()->free(p);
}
static cpdit_status nccl_sync(cpdit_error *err)
{
    return cpdit_backend_cuda()->sync(err);
}
static const probe_transport nccl_transport = {"nccl", nccl_create, nccl_alloc, nccl_release,
                                               nccl_sync};

/* The NCCL transport when every rank of the job has a GPU of its own (NCCL refuses ranks
 * sharing one), else NULL with the reason on rank 0's log. Collective over MPI_COMM_WORLD. */
static const probe_transport *nccl_hook(FILE *log, int rank)
{
    char why[256] = "";
    int ok = cpdit_backend_available(cpdit_backend_cuda(), why, sizeof why), all = 0;
    int device = -1, local_rank = 0, local_size = 1, shared = 0;
    cpdit_error e;
    cpdit_error_clear(&e);
    /* collective over the world: every rank calls it, with or without a device */
    const cpdit_status sel = cpdit_cuda_select_device(MPI_COMM_WORLD, &device, &local_rank,
                                                      &local_size, &shared, &e);
    if (ok && sel != CPDIT_OK) {
        ok = 0;
        snprintf(why, sizeof why, "%.200s", e.what);
    } else if (ok && shared) {
        ok = 0;
        snprintf(why, sizeof why, "ranks share a GPU (%d ranks on this node)", local_size);
    }
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all && log && rank == 0)
        fprintf(log, "probe: NCCL links not measured: %s\n",
                why[0] ? why : "not every rank has a GPU of its own");
    return all ? &nccl_transport : NULL;
}
#endif

#define SUB "probe"

const char cmd_probe_help[] =
    "usage: cpdit probe [--output FILE] [--quick] [--pairs N] [--no-compute] [--quiet]\n"
    "                   [--model DIR|builtin:NAME --width W --height H\n"
    "                    [--max-sequence-length L] [--frames N]]\n"
    "       (under mpirun -np N or srun, over the whole allocation)\n"
    "\n"
    "NAME\n"
    "    cpdit probe - measure the machine and write the topology file\n"
    "\n"
    "DESCRIPTION\n"
    "    Run it over the whole allocation, with the ranks placed as the real jobs will be.\n"
    "    Every rank finds its host ($CPDIT_HOSTNAME when set, else the MPI processor name),\n"
    "    its package and NUMA node (from its CPU binding); the first rank of each host reads\n"
    "    the hardware with hwloc (packages, NUMA nodes, cores, caches, memory, PCI GPUs and\n"
    "    NICs with their NUMA locality) and NVIDIA's NVML when libnvidia-ml.so.1 is there\n"
    "    (GPU names, memory, NVLink links per GPU pair).\n"
    "\n"
    "    Then it measures, as the OSU micro-benchmarks and nccl-tests do (warm-up, timed\n"
    "    iterations, min/avg/max): ping-pong latency and bandwidth between rank pairs of each\n"
    "    class (same_numa, same_socket, same_node, cross_node) over a size sweep, with an\n"
    "    alpha (latency) + beta (bytes/s) fit per class; all-to-all (Ulysses), all-gather\n"
    "    and ring send-receive (Ring attention) over all ranks and, with several hosts,\n"
    "    inside host 0 and across hosts; and every rank's SGEMM and attention-kernel rate.\n"
    "\n"
    "    Rank 0 writes FILE atomically (temporary file + rename) and prints a summary. The\n"
    "    file is JSON, \"format\": 1, described in topology/README.md; `cpdit plan`, `cpdit\n"
    "    tune` and `parallel: auto` read it. One file per cluster partition can be kept on\n"
    "    shared storage and reused.\n"
    "\n"
    "OPTIONS\n"
    "    --output FILE   where to write (default cpdit-topology.json); its folder must exist\n"
    "    --quick         a few seconds instead of tens: 4 ping-pong sizes, 2 collective\n"
    "                    sizes, shorter timings (what `parallel: auto` runs at job start)\n"
    "    --pairs N       rank pairs measured per class (default 2, --quick 1; 1..64)\n"
    "    --no-compute    skip the SGEMM / attention-kernel rates\n"
    "    --quiet         no progress lines on stderr\n"
    "    --model M, --width W, --height H [--max-sequence-length L] [--frames N]\n"
    "                    also time the GEMMs (M x K x N of every linear layer) and attention\n"
    "                    calls (tokens x keys, heads, head dim) that one transformer step of\n"
    "                    this model at this size runs on a rank, for every context-parallel\n"
    "                    degree of N ranks, all ranks at once; the planner then uses these\n"
    "                    times instead of the generic SGEMM / attention rates for this model\n"
    "                    and size (compute.shapes in the file); --frames: video frames\n"
    "                    for a video model (Wan: 4k + 1, e.g. 81)\n"
    "\n"
    "ENVIRONMENT\n"
    "    CPDIT_HOSTNAME        host identity of this rank (tests that emulate hosts with\n"
    "                          network namespaces set it)\n"
    "    OPENBLAS_NUM_THREADS  threads per rank for the compute rates\n"
    "\n"
    "EXIT STATUS\n"
    "    0 written; 1 runtime failure (hwloc, MPI, I/O); 2 bad option, unwritable FILE,\n"
    "    unknown model or a size that is not a multiple of 16.\n"
    "    A rank whose transfer fails aborts the whole job rather than leave peers waiting.\n"
    "\n"
    "EXAMPLES\n"
    "    mpirun -np 16 --map-by ppr:8:node cpdit probe --output /shared/part-a.json\n"
    "    srun -N 2 --ntasks-per-node 8 cpdit probe --quick\n";

/* Rank 0's summary: ranks, hosts, one line per fit, compute. */
/* The measured rows per message size, as nccl-tests and the OSU benchmarks print them:
 * size, time (avg, min), algbw = bytes / time, busbw (point-to-point: = algbw; collectives:
 * the probe's, algbw x (n - 1) / n for all-to-all and all-gather). */
static void print_size_tables(const json_t *doc)
{
    const json_t *links = json_object_get(doc, "links");
    const json_t *p2p = json_object_get(links, "p2p"), *coll = json_object_get(links, "collectives");
    size_t k;
    const json_t *x;
    if (json_array_size(p2p)) {
        printf("  point-to-point (ping-pong, one way):\n  %-12s %7s %12s %12s %12s %11s %11s\n",
               "class", "pair", "size_B", "avg_us", "min_us", "algbw_GB/s", "busbw_GB/s");
        json_array_foreach(p2p, k, x) {
            const json_t *pr = json_object_get(x, "ranks");
            char pair[32];
            snprintf(pair, sizeof pair, "%d-%d", (int)json_integer_value(json_array_get(pr, 0)),
                     (int)json_integer_value(json_array_get(pr, 1)));
            const double bw = json_number_value(json_object_get(x, "bw_Bps")) * 1e-9;
            printf("  %-12s %7s %12.0f %12.3f %12.3f %11.3f %11.3f\n",
                   json_string_value(json_object_get(x, "class")), pair,
                   json_number_value(json_object_get(x, "bytes")),
                   json_number_value(json_object_get(x, "time_s_avg")) * 1e6,
                   json_number_value(json_object_get(x, "time_s_min")) * 1e6, bw, bw);
        }
    }
    if (json_array_size(coll)) {
        printf("  collectives:\n  %-14s %5s %-12s %12s %12s %11s %11s\n", "op", "ranks",
               "class", "size_B", "avg_us", "algbw_GB/s", "busbw_GB/s");
        json_array_foreach(coll, k, x)
            printf("  %-14s %5zu %-12s %12.0f %12.3f %11.3f %11.3f\n",
                   json_string_value(json_object_get(x, "op")),
                   json_array_size(json_object_get(x, "group_ranks")),
                   json_string_value(json_object_get(x, "class")),
                   json_number_value(json_object_get(x, "bytes")),
                   json_number_value(json_object_get(x, "time_s_avg")) * 1e6,
                   json_number_value(json_object_get(x, "algbw_Bps")) * 1e-9,
                   json_number_value(json_object_get(x, "busbw_Bps")) * 1e-9);
    }
}

static void print_summary(const json_t *doc, const char *path)
{
    const json_t *hosts = json_object_get(doc, "hosts");
    printf("cpdit probe: %d rank(s) on %zu host(s) -> %s\n",
           (int)json_integer_value(json_object_get(doc, "ranks")), json_array_size(hosts), path);
    size_t i;
    const json_t *h;
    json_array_foreach(hosts, i, h) {
        const json_t *hw = json_object_get(h, "hwloc");
        printf("  host %zu %-20s ranks %zu: %d package(s), %d NUMA, %d cores, %d PUs, "
               "%.1f GiB, %zu GPU(s), %zu NIC(s)\n",
               i, json_string_value(json_object_get(h, "name")),
               json_array_size(json_object_get(h, "ranks")),
               (int)json_integer_value(json_object_get(hw, "packages")),
               (int)json_integer_value(json_object_get(hw, "numa_nodes")),
               (int)json_integer_value(json_object_get(hw, "cores")),
               (int)json_integer_value(json_object_get(hw, "pus")),
               (double)json_integer_value(json_object_get(hw, "memory_bytes")) / (1u << 30),
               json_array_size(json_object_get(hw, "gpus")),
               json_array_size(json_object_get(hw, "nics")));
    }
    const json_t *fits = json_object_get(json_object_get(doc, "links"), "fits");
    if (json_object_size(fits)) {
        printf("  %-12s %12s %12s %8s\n", "class", "alpha_us", "beta_GB/s", "samples");
        const char *k;
        const json_t *f;
        json_object_foreach((json_t *)fits, k, f)
            printf("  %-12s %12.2f %12.3f %8d\n", k,
                   json_number_value(json_object_get(f, "alpha_s")) * 1e6,
                   json_number_value(json_object_get(f, "beta_Bps")) * 1e-9,
                   (int)json_integer_value(json_object_get(f, "samples")));
    }
    print_size_tables(doc);
    const json_t *c = json_object_get(doc, "compute");
    const json_t *sh = json_array_get(json_object_get(c, "shapes"), 0);
    if (sh) {
        size_t k;
        const json_t *x;
        printf("  %s at %dx%d: one forward's linear layers + element-wise work per rank:",
               json_string_value(json_object_get(sh, "model")),
               (int)json_integer_value(json_object_get(sh, "width")),
               (int)json_integer_value(json_object_get(sh, "height")));
        json_array_foreach(json_object_get(sh, "linear"), k, x)
            printf(" cp %d %.4g s (GEMMs %.1f GFLOP/s)%s",
                   (int)json_integer_value(json_object_get(x, "cp")),
                   json_number_value(json_object_get(x, "time_s")),
                   json_number_value(json_object_get(x, "flops_per_s")) * 1e-9,
                   k + 1 < json_array_size(json_object_get(sh, "linear")) ? "," : "\n");
    }
    if (c)
        printf("  compute per rank (min over ranks): SGEMM %.1f GFLOP/s, attention %.1f GFLOP/s, "
               "%d thread(s)\n",
               json_number_value(json_object_get(c, "sgemm_flops")) * 1e-9,
               json_number_value(json_object_get(c, "attention_flops")) * 1e-9,
               (int)json_integer_value(json_object_get(c, "threads_per_rank")));
}

/* Rank 0 checks that the output can be created before anything is measured; all agree. */
static cpdit_status check_output(const char *path, int rank, cpdit_error *err)
{
    cpdit_error e;
    cpdit_error_clear(&e);
    if (rank == 0) {
        atomic_file af;
        if (atomic_file_begin(&af, path, &e) == CPDIT_OK)
            atomic_file_abort(&af);
        else
            e.status = CPDIT_ERR_INPUT; /* the FILE the user named cannot be written: exit 2 */
    }
    MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, 0, MPI_COMM_WORLD);
    *err = e;
    return e.status;
}

int cmd_probe(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'}, {"quick", no_argument, 0, 'q'},
        {"pairs", required_argument, 0, 'p'},  {"no-compute", no_argument, 0, 'C'},
        {"quiet", no_argument, 0, 's'},        {"model", required_argument, 0, 'm'},
        {"width", required_argument, 0, 'W'},  {"height", required_argument, 0, 'H'},
        {"max-sequence-length", required_argument, 0, 'L'}, {"frames", required_argument, 0, 'F'},
        {0, 0, 0, 0}};
    const char *output = CPDIT_TOPOLOGY_DEFAULT_FILE, *model = NULL;
    int quick = 0, no_compute = 0, quiet = 0, c;
    long pairs = 0, width = 0, height = 0, msl = 0, frames = 0;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'o': output = optarg; break;
        case 'q': quick = 1; break;
        case 'C': no_compute = 1; break;
        case 's': quiet = 1; break;
        case 'p':
            if (cli_parse_int(SUB, "--pairs", optarg, 1, 64, &pairs))
                return CLI_EXIT_USAGE;
            break;
        case 'm': model = optarg; break;
        case 'W':
            if (cli_parse_int(SUB, "--width", optarg, 1, 1 << 20, &width))
                return CLI_EXIT_USAGE;
            break;
        case 'H':
            if (cli_parse_int(SUB, "--height", optarg, 1, 1 << 20, &height))
                return CLI_EXIT_USAGE;
            break;
        case 'L':
            if (cli_parse_int(SUB, "--max-sequence-length", optarg, 1, 512, &msl))
                return CLI_EXIT_USAGE;
            break;
        case 'F':
            if (cli_parse_int(SUB, "--frames", optarg, 1, MODEL_PLAN_MAX_FRAMES, &frames))
                return CLI_EXIT_USAGE;
            break;
        default:
            return cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(SUB, "unexpected argument '%s'", argv[optind]);
    if (!*output)
        return cli_usage_error(SUB, "--output: empty file name");
    if ((width || height || msl || frames) && !model)
        return cli_usage_error(SUB, "--width/--height/--max-sequence-length/--frames need "
                                    "--model");
    if (model && (!width || !height))
        return cli_usage_error(SUB, "--model needs --width and --height");
    if (model && no_compute)
        return cli_usage_error(SUB, "--model times compute: it does not go with --no-compute");

    MPI_Init(NULL, NULL);
    cpdit_backends_bind_mpi(); /* each rank to its device (collective, right after MPI_Init) */
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    cpdit_error err;
    cpdit_error_clear(&err);
    cpdit_probe_options o;
    cpdit_probe_options_default(&o, quick);
    if (pairs)
        o.pairs_per_class = (int)pairs;
    o.compute = !no_compute;
    o.log = quiet ? NULL : stderr;
#ifdef CPDIT_HAVE_CUDA
    o.nccl = nccl_hook(o.log, rank); /* PROBE_NCCL_HOOK (probe.h) */
#endif

    json_t *doc = NULL;
    cpdit_status st = check_output(output, rank, &err);
    model_plan_shape shape;
    memset(&shape, 0, sizeof shape);
    if (st == CPDIT_OK && model) { /* checked on rank 0 (exit 2 for a bad model or size) */
        if (rank == 0)
        {
            model_request req;
            model_request_defaults(&req);
            req.width = (int)width, req.height = (int)height, req.text_tokens = (int)msl;
            req.frames = (int)frames;
            st = model_plan_shape_load(&shape, model, &req, &err);
        }
        st = job_bcast_status(MPI_COMM_WORLD, 0, st, &err);
        MPI_Bcast(&shape, (int)sizeof shape, MPI_BYTE, 0, MPI_COMM_WORLD);
        o.shape = &shape;
    }
    if (st == CPDIT_OK)
        st = cpdit_probe_run(MPI_COMM_WORLD, &o, &doc, &err);
    if (st == CPDIT_OK && rank == 0) {
        st = cpdit_topology_write(doc, output, &err);
        if (st == CPDIT_OK)
            print_summary(doc, output);
    }
    json_decref(doc);
    /* rank 0's write result decides everybody's exit status */
    int code[1] = {st};
    MPI_Bcast(code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (code[0] != CPDIT_OK && rank == 0)
        cli_report(&err);
    MPI_Finalize();
    return code[0] == CPDIT_OK ? CLI_EXIT_OK
                               : code[0] == CPDIT_ERR_INPUT ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME;
}
