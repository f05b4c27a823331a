/* cmd_bench.c — `cpdit bench attention|kernel [options]`: benchmarks that print tables.
 *
 *   cpdit bench attention   context-parallel attention on every grid of the MPI job (run it
 *                           under mpirun -np N); variants ring, ring-allgather, ulysses,
 *                           unified, unified-allgather; time, GFLOP/s, bytes per rank, ratio
 *                           to the ideal 1/N of the single-rank time.
 *   cpdit bench kernel      the local CPU attention kernel next to the BLAS SGEMM rate.
 *   cpdit bench ops         every op of every backend's kernel table (kernels/backend_ops.h):
 *                           time per call, GFLOP/s and GB/s.
 *   cpdit bench vae         FLUX.1's VAE decoder (random weights) split by rows over all
 *                           ranks of the job: time, GFLOP/s, % of the SGEMM rate of one rank
 *                           measured in the same run (per rank), peak RSS per rank; a row
 *                           per weight format (fp32 SGEMM, native bf16 GEMM).
 * Every table starts with the build line (BLAS core in use, MPI, CUDA).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "bin/cli.h"
#include "lib/cp/cp_attention_bench.h"
#include "kernels/backend_ops.h"
#include "kernels/cpu/attention_bench.h"
#include "bin/build_info.h"
#include "kernels/host_runtime.h"
#include "lib/cp/grid_mpi.h"
#include "lib/io/safetensors.h"
#include "lib/vae/vae_decoder.h"

#define SUB "bench"
#define MAX_LIST 16

/* Parse "64,128" into out[0..n); returns n, or -1 after printing a usage error. */
static int parse_int_list(const char *opt, const char *text, int *out, int max)
{
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1000000 || (*end != ',' && *end != '\0') || n == max) {
            cli_usage_error(SUB, "%s: expected a comma-separated list of at most %d positive "
                                 "integers, got '%s'", opt, max, text);
            return -1;
        }
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (n == 0)
        cli_usage_error(SUB, "%s: empty list", opt);
    return n ? n : -1;
}

static int bench_kernel(int argc, char **argv)
{
    static const struct option opts[] = {
        {"batch", required_argument, 0, 'b'}, {"heads", required_argument, 0, 'H'},
        {"head-dims", required_argument, 0, 'd'}, {"seq-lens", required_argument, 0, 's'},
        {"reps", required_argument, 0, 'r'}, {0, 0, 0, 0}};
    long batch = 1, heads = 0, reps = 0;
    int dims[MAX_LIST], lens[MAX_LIST], n_dims = 0, n_lens = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'b': if (cli_parse_int(SUB, "--batch", optarg, 1, 64, &batch)) return CLI_EXIT_USAGE; break;
        case 'H': if (cli_parse_int(SUB, "--heads", optarg, 1, 256, &heads)) return CLI_EXIT_USAGE; break;
        case 'r': if (cli_parse_int(SUB, "--reps", optarg, 1, 1000, &reps)) return CLI_EXIT_USAGE; break;
        case 'd': if ((n_dims = parse_int_list("--head-dims", optarg, dims, MAX_LIST)) < 0) return CLI_EXIT_USAGE; break;
        case 's': if ((n_lens = parse_int_list("--seq-lens", optarg, lens, MAX_LIST)) < 0) return CLI_EXIT_USAGE; break;
        default:
            return cli_usage_error(SUB, "kernel: unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(SUB, "kernel: unexpected argument '%s'", argv[optind]);
    return attention_kernel_bench(stdout, (int)batch, (int)heads, n_dims ? dims : NULL, n_dims,
                                  n_lens ? lens : NULL, n_lens, (int)reps) == 0
               ? CLI_EXIT_OK
               : CLI_EXIT_RUNTIME;
}

/* `cpdit bench ops`: every op case of the kernel table at its largest shape. */
static int bench_ops(int argc, char **argv)
{
    static const struct option opts[] = {{"backend", required_argument, 0, 'B'},
                                         {"op", required_argument, 0, 'o'},
                                         {"reps", required_argument, 0, 'r'},
                                         {0, 0, 0, 0}};
    const char *backend = NULL, *op = NULL;
    long reps = 5;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'B': backend = optarg; break;
        case 'o': op = optarg; break;
        case 'r': if (cli_parse_int(SUB, "--reps", optarg, 1, 1000, &reps)) return CLI_EXIT_USAGE; break;
        default:
            return cli_usage_error(SUB, "ops: unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(SUB, "ops: unexpected argument '%s'", argv[optind]);
    char line[1024];
    cpdit_build_info_line(line, sizeof line);
    printf("# %s\n# best of %ld calls after one warm-up, each op at its largest test shape\n",
           line, reps);
    cpdit_error err;
    cpdit_error_clear(&err);
    if (backend_ops_bench(stdout, backend, op, (int)reps, &err))
        return cli_report(&err);
    return CLI_EXIT_OK;
}

static int bench_attention(int argc, char **argv)
{
    static const struct option opts[] = {
        {"batch", required_argument, 0, 'b'},   {"txt", required_argument, 0, 't'},
        {"img", required_argument, 0, 'i'},     {"heads", required_argument, 0, 'H'},
        {"head-dim", required_argument, 0, 'd'}, {"warmup", required_argument, 0, 'w'},
        {"iters", required_argument, 0, 'n'},   {"variants", required_argument, 0, 'v'},
        {"ring", required_argument, 0, 'R'},    {"ulysses", required_argument, 0, 'U'},
        {"anything", no_argument, 0, 'a'},      {"sgemm-n", required_argument, 0, 'g'},
        {0, 0, 0, 0}};
    cp_attention_bench_opts o;
    cp_attention_bench_defaults(&o);
    long v;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *name = NULL;
        long lo = 1, hi = 1 << 24;
        int *dst = NULL;
        switch (c) {
        case 'b': name = "--batch"; dst = &o.batch; hi = 64; break;
        case 't': name = "--txt"; dst = &o.txt; lo = 0; break;
        case 'i': name = "--img"; dst = &o.img; lo = 0; break;
        case 'H': name = "--heads"; dst = &o.heads; hi = 1024; break;
        case 'd': name = "--head-dim"; dst = &o.head_dim; hi = 1024; break;
        case 'w': name = "--warmup"; dst = &o.warmup; lo = 0; hi = 1000; break;
        case 'n': name = "--iters"; dst = &o.iters; hi = 100000; break;
        case 'R': name = "--ring"; dst = &o.ring; hi = 4096; break;
        case 'U': name = "--ulysses"; dst = &o.ulysses; hi = 4096; break;
        case 'g': name = "--sgemm-n"; dst = &o.sgemm_n; lo = 0; hi = 16384; break;
        case 'a': o.anything = 1; continue;
        case 'v': o.variants = optarg; continue;
        default:
            return cli_usage_error(SUB, "attention: unknown or incomplete option '%s'",
                                   argv[optind - 1]);
        }
        if (cli_parse_int(SUB, name, optarg, lo, hi, &v))
            return CLI_EXIT_USAGE;
        *dst = (int)v;
    }
    if (optind < argc)
        return cli_usage_error(SUB, "attention: unexpected argument '%s'", argv[optind]);
    if (o.txt + o.img < 1)
        return cli_usage_error(SUB, "attention: --txt plus --img must be at least 1 token");
    if ((o.ring == 0) != (o.ulysses == 0))
        return cli_usage_error(SUB, "attention: give both --ring and --ulysses, or neither "
                                    "(then every grid of the job is measured)");

    MPI_Init(NULL, NULL);
    cpdit_backends_bind_mpi(); /* each rank to its device (collective, right after MPI_Init) */
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    cpdit_error err;
    cpdit_error_clear(&err);
    char build_line[1024];
    cpdit_build_info_line(build_line, sizeof build_line);
    o.build_line = build_line;
    cpdit_status st = cp_attention_bench(rank == 0 ? stdout : NULL, MPI_COMM_WORLD, &o, &err);
    int code = CLI_EXIT_OK;
    if (st != CPDIT_OK) {
        if (rank == 0)
            code = cli_report(&err);
        else
            code = st == CPDIT_ERR_INPUT ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME;
    }
    MPI_Finalize();
    return code;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define VAE_BENCH_SEED 7
#define VAE_BENCH_SGEMM_N 1024
#define KIB_PER_MIB 1024.0

/* The random FLUX.1 VAE decoder weights of seed VAE_BENCH_SEED written as a bf16 checkpoint
 * (FLUX's checkpoints are bf16) into a new file under $TMPDIR (or /tmp), named in path. */
static cpdit_status vae_bench_checkpoint(const autoencoder_kl_config *cfg, char *path,
                                         size_t size, cpdit_error *err)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, size, "%s/cpdit-vae-bench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    const int fd = mkstemp(path);
    if (fd < 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "bench", "vae: cannot create %s: %s",
                               path, strerror(errno));
    close(fd);
    vae_decoder *d = NULL;
    cpdit_status st = vae_decoder_create(&d, cfg, err);
    const size_t n = st == CPDIT_OK ? vae_decoder_param_count(d) : 0;
    safetensors_write_tensor *t = calloc(n ? n : 1, sizeof *t);
    int64_t(*shapes)[VAE_PARAM_MAX_DIMS] = calloc(n ? n : 1, sizeof *shapes);
    if (st == CPDIT_OK && (!t || !shapes))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "bench", "out of memory");
    if (st == CPDIT_OK) {
        vae_decoder_fill_random(d, VAE_BENCH_SEED);
        for (size_t i = 0; i < n; i++) {
            vae_param_info info;
            vae_decoder_param_at(d, i, &info);
            memcpy(shapes[i], info.shape, sizeof shapes[i]);
            t[i].name = info.name;
            t[i].dtype = CPDIT_DTYPE_BF16;
            t[i].ndim = info.ndim;
            t[i].shape = shapes[i];
            t[i].data = info.data;
            t[i].src_dtype = CPDIT_DTYPE_F32;
        }
        st = safetensors_write(path, t, n, NULL, 0, err);
    }
    free(t);
    free(shapes);
    vae_decoder_free(d);
    if (st != CPDIT_OK)
        unlink(path);
    return st;
}

/* Peak resident memory from now on: the kernel's high-water mark reset (VmHWM, Linux); 0 when
 * it cannot be reset (the process's peak so far then). */
static int peak_rss_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return 0;
    const int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The peak resident memory, MiB: VmHWM (since the last reset), else getrusage's maximum. */
static double peak_rss_mib(void)
{
    double kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "VmHWM: %lf kB", &kb) == 1)
                break;
        fclose(f);
    }
    if (kb <= 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = (double)ru.ru_maxrss;
    }
    return kb / KIB_PER_MIB;
}

/* A decoder of the checkpoint at path (config cfg) on the CPU, weights made for format wf. */
static cpdit_status vae_bench_open(vae_decoder **d, const autoencoder_kl_config *cfg,
                                   const char *path, cpdit_weight_format wf, cpdit_error *err)
{
    safetensors_set *s = NULL;
    cpdit_status st = vae_decoder_create(d, cfg, err); /* host values never touched */
    if (st == CPDIT_OK)
        st = safetensors_set_open(&s, path, err);
    if (st == CPDIT_OK)
        st = vae_decoder_load_weights(*d, s, err); /* *d holds s */
    if (st == CPDIT_OK) {
        vae_decoder_set_backend(*d, cpdit_backend_cpu());
        vae_decoder_set_weight_format(*d, wf);
    }
    return st;
}

/* `cpdit bench vae [--sizes 256,512] [--iters N] [--weight-format fp32|native]`: one row per
 * image size (multiples of 8) and weight format (both unless one is named). */
static int bench_vae(int argc, char **argv)
{
    static const struct option opts[] = {{"sizes", required_argument, 0, 's'},
                                         {"iters", required_argument, 0, 'n'},
                                         {"weight-format", required_argument, 0, 'F'},
                                         {0, 0, 0, 0}};
    cpdit_weight_format formats[2] = {CPDIT_WEIGHT_F32, CPDIT_WEIGHT_NATIVE};
    int n_formats = 2, fmt;
    int sizes[MAX_LIST] = {256, 512}, n_sizes = 2, c;
    long iters = 1;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's': if ((n_sizes = parse_int_list("--sizes", optarg, sizes, MAX_LIST)) < 0) return CLI_EXIT_USAGE; break;
        case 'n': if (cli_parse_int(SUB, "--iters", optarg, 1, 100, &iters)) return CLI_EXIT_USAGE; break;
        case 'F':
            if ((fmt = cpdit_weight_format_from_name(optarg)) < 0)
                return cli_usage_error(SUB, "vae: --weight-format: '%s'; use fp32 or native",
                                       optarg);
            formats[0] = (cpdit_weight_format)fmt;
            n_formats = 1;
            break;
        default:
            return cli_usage_error(SUB, "vae: unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    for (int i = 0; i < n_sizes; i++)
        if (sizes[i] % 8)
            return cli_usage_error(SUB, "vae: --sizes: %d is not a multiple of 8", sizes[i]);
    MPI_Init(NULL, NULL);
    cpdit_backends_bind_mpi(); /* each rank to its device (collective, right after MPI_Init) */
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cpdit_error err;
    cpdit_error_clear(&err);
    autoencoder_kl_config cfg;
    vae_config_flux(&cfg);
    vae_decoder *d = NULL;
    cp_grid *g = NULL;
    char ckpt[4096] = "";
    /* every rank its own file (node-local temporary folders) */
    cpdit_status st = vae_bench_checkpoint(&cfg, ckpt, sizeof ckpt, &err);
    int failed = st != CPDIT_OK; /* no rank goes on alone into the collectives */
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failed && st == CPDIT_OK)
        st = cpdit_error_set(&err, CPDIT_ERR_RUNTIME, "bench", "vae: another rank failed");
    if (st == CPDIT_OK)
        st = cp_grid_create(MPI_COMM_WORLD, 1, size, 1, &g, &err);
    /* the SGEMM rate of one rank while the others wait */
    double sgemm = 0.0;
    if (rank == 0)
        sgemm = cpdit_host_sgemm_gflops(VAE_BENCH_SGEMM_N, 3);
    MPI_Bcast(&sgemm, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("# FLUX.1 VAE decode (128/256/512/512, 2 layers, 32 groups), %d rank(s), "
               "%d BLAS thread(s) per rank; SGEMM n=%d on one rank: %.1f GFLOP/s\n", size,
               cpdit_host_gemm_threads(), VAE_BENCH_SGEMM_N, sgemm);
        printf("# random weights from a bf16 checkpoint; peak_RSS_MiB: the most resident "
               "memory of a rank from loading the weights to the end of the row\n");
        printf("%-9s %6s %5s %10s %9s %8s %13s\n", "size", "wfmt", "ranks", "time_s",
               "GFLOP/s", "%SGEMM", "peak_RSS_MiB");
    }
    const int lc = cfg.latent_channels;
    float *img = NULL;
    for (int k = 0; k < n_sizes * n_formats && st == CPDIT_OK; k++) {
        const int i = k / n_formats;
        const cpdit_weight_format wf = formats[k % n_formats];
        /* each row loads the weights anew: its peak counts them as this format makes them */
        vae_decoder_free(d);
        d = NULL;
        peak_rss_reset();
        if ((st = vae_bench_open(&d, &cfg, ckpt, wf, &err)) != CPDIT_OK)
            break;
        /* warm-up: makes the weights (packs the convolutions) */
        float z1[16 * 1 * 1] = {0};
        if (st == CPDIT_OK && lc <= 16)
            st = vae_decode_group(d, g, z1, 1, 1, 1, NULL, &err);
        const int h = sizes[i] / 8, w = sizes[i] / 8;
        float *z = malloc((size_t)lc * h * w * sizeof *z);
        free(img);
        img = rank == 0 ? malloc((size_t)3 * sizes[i] * sizes[i] * sizeof *img) : NULL;
        if (!z || (rank == 0 && !img)) {
            free(z);
            st = cpdit_error_set(&err, CPDIT_ERR_RUNTIME, "bench", "out of memory");
            break;
        }
        for (size_t q = 0; q < (size_t)lc * h * w; q++)
            z[q] = (float)((q * 2654435761u) % 2001) / 1000.0f - 1.0f;
        double best = 1e300;
        for (int it = 0; it < iters && st == CPDIT_OK; it++) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = now_s();
            st = vae_decode_group(d, g, z, 1, h, w, img, &err);
            double t = now_s() - t0;
            MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            best = t < best ? t : best;
        }
        free(z);
        double rss = peak_rss_mib();
        MPI_Allreduce(MPI_IN_PLACE, &rss, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        const double gf = vae_decode_flops(d, h, w) / best * 1e-9;
        char label[32];
        snprintf(label, sizeof label, "%dx%d", sizes[i], sizes[i]);
        if (rank == 0 && st == CPDIT_OK)
            printf("%-9s %6s %5d %10.3f %9.1f %7.1f%% %13.0f\n", label,
                   wf == CPDIT_WEIGHT_F32 ? "fp32" : "native", size, best, gf,
                   sgemm > 0 ? 100.0 * gf / size / sgemm : 0.0, rss);
        fflush(stdout);
    }
    free(img);
    int code = CLI_EXIT_OK;
    if (st != CPDIT_OK)
        code = rank == 0 ? cli_report(&err) : CLI_EXIT_RUNTIME;
    cp_grid_destroy(g);
    vae_decoder_free(d);
    if (ckpt[0])
        unlink(ckpt);
    MPI_Finalize();
    return code;
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error(SUB, "which benchmark? 'attention', 'kernel', 'ops' or 'vae'");
    if (strcmp(argv[1], "ops") == 0)
        return bench_ops(argc - 1, argv + 1);
    if (strcmp(argv[1], "vae") == 0)
        return bench_vae(argc - 1, argv + 1);
    if (strcmp(argv[1], "attention") == 0)
        return bench_attention(argc - 1, argv + 1);
    if (strcmp(argv[1], "kernel") == 0)
        return bench_kernel(argc - 1, argv + 1);
    return cli_usage_error(SUB, "unknown benchmark '%s' (expected 'attention', 'kernel', 'ops' or 'vae')", argv[1]);
}
