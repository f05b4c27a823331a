/* cmd_submit.c — `cpdit submit MANIFEST.yaml`: check the manifest as `run --check` does, write
 * OUTPUT/cpdit-job.sbatch (jobs/job_sbatch.h), submit it with `sbatch --parsable` and print
 * the job id. --dry-run prints the script and touches nothing. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bin/cli.h"
#include "kernels/backend.h"
#include "jobs/job_index.h"
#include "jobs/job_run.h"
#include "jobs/job_sbatch.h"
#include "bin/build_info.h"
#include "lib/io/atomic_file.h"
#include "yaml/manifest.h"

#define SUB "submit"
#define JOB_ID_MAX 64
#define DEGREE_MAX 65536
#define COUNT_MAX 100000

extern char **environ;

/* The program to put in the script: this executable, or the libtool wrapper beside
 * .libs/ when running from a build tree (the bare binary there lacks its library path). */
static char *program_path(void)
{
    char *exe = realpath("/proc/self/exe", NULL);
    if (!exe)
        return NULL;
    char *slash = strrchr(exe, '/');
    if (slash && slash - exe >= 6 && strncmp(slash - 6, "/.libs", 6) == 0) {
        const char *name = slash + 1;
        if (strncmp(name, "lt-", 3) == 0)
            name += 3;
        char wrapper[PATH_MAX];
        snprintf(wrapper, sizeof wrapper, "%.*s/%s", (int)(slash - 6 - exe), exe, name);
        if (access(wrapper, X_OK) == 0) {
            free(exe);
            return strdup(wrapper);
        }
    }
    return exe;
}

/* path made absolute against the working directory (not resolved: the folder may not exist) */
static char *absolute(const char *path)
{
    if (path[0] == '/')
        return strdup(path);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return NULL;
    const char *p = path;
    while (p[0] == '.' && p[1] == '/')
        p += 2;
    if (strcmp(p, ".") == 0)
        return strdup(cwd);
    return job_path_join(cwd, p);
}

/* "cpdit-" + the manifest's file name without its extension, in [A-Za-z0-9._-] */
static void job_name(const char *manifest_path, char *out, size_t size)
{
    const char *b = strrchr(manifest_path, '/');
    b = b ? b + 1 : manifest_path;
    size_t n = strlen(b);
    const char *dot = strrchr(b, '.');
    if (dot && dot != b)
        n = (size_t)(dot - b);
    size_t k = (size_t)snprintf(out, size, "cpdit-");
    for (size_t i = 0; i < n && k + 1 < size; i++) {
        char c = b[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        out[k++] = ok ? c : '_';
    }
    out[k] = '\0';
}

/* Run `sbatch --parsable script`; the job id (before any ";cluster") into id. */
static int run_sbatch(const char *script, char *id, size_t size)
{
    int fds[2];
    if (pipe(fds) != 0) {
        fprintf(stderr, "cpdit: submit: pipe: %s\n", strerror(errno));
        return CLI_EXIT_RUNTIME;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    char *argv[] = {"sbatch", "--parsable", (char *)script, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "sbatch", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        fprintf(stderr, "cpdit: submit: cannot run sbatch: %s (is Slurm installed and on PATH?); "
                        "the script is %s\n", strerror(rc), script);
        return CLI_EXIT_RUNTIME;
    }
    char buf[256];
    size_t n = 0;
    ssize_t got;
    while ((got = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0 || (got < 0 && errno == EINTR))
        if (got > 0)
            n += (size_t)got;
    close(fds[0]);
    buf[n] = '\0';
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "cpdit: submit: sbatch failed (%s %d); nothing was queued; the script is "
                        "%s\n", WIFEXITED(status) ? "exit" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), script);
        return CLI_EXIT_RUNTIME;
    }
    size_t k = strcspn(buf, ";\n \t");
    if (k == 0 || k >= size) {
        fprintf(stderr, "cpdit: submit: sbatch printed no job id ('%s')\n", buf);
        return CLI_EXIT_RUNTIME;
    }
    memcpy(id, buf, k);
    id[k] = '\0';
    return CLI_EXIT_OK;
}

/* Write OUT/cpdit-job.sbatch and submit it; print the job id. Returns the exit code. */
static int write_and_submit(const char *out, const char *script)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    cpdit_status st = CPDIT_OK;
    int code = CLI_EXIT_OK;
    char *file = job_path_join(out, JOB_SBATCH_FILE_NAME);
    if (!file)
        st = cpdit_error_set(&err, CPDIT_ERR_RUNTIME, SUB, "out of memory");
    if (!st)
        st = job_make_folders(out, &err);
    if (!st)
        st = atomic_write_buffer(file, script, strlen(script), &err);
    char id[JOB_ID_MAX];
    if (st)
        code = cli_report(&err);
    else if ((code = run_sbatch(file, id, sizeof id)) == CLI_EXIT_OK) {
        printf("%s\n", id);
        fprintf(stderr, "cpdit: submit: job %s queued; script %s; logs %s/slurm-*.out; "
                        "watch with: cpdit status %s\n", id, file, out, out);
    }
    free(file);
    return code;
}

/* --array K or K%M (at most M tasks at once). 0, or -1 with the usage error printed. */
static int parse_array(const char *text, job_sbatch_options *so)
{
    char k[32];
    const char *pct = strchr(text, '%');
    const size_t n = pct ? (size_t)(pct - text) : strlen(text);
    if (n >= sizeof k) {
        cli_usage_error(SUB, "--array: expected K or K%%M, got '%s'", text);
        return -1;
    }
    memcpy(k, text, n);
    k[n] = '\0';
    long v;
    if (cli_parse_int(SUB, "--array", k, 1, COUNT_MAX, &v))
        return -1;
    so->array = (int)v;
    if (pct) {
        if (cli_parse_int(SUB, "--array (the %M throttle)", pct + 1, 1, COUNT_MAX, &v))
            return -1;
        so->array_throttle = (int)v;
    }
    return 0;
}

#define SETUP_MAX_BYTES (64 * 1024)

/* The text of --setup FILE (a regular file, at most SETUP_MAX_BYTES, no NUL bytes) into *out
 * (caller frees). 0, or -1 with the message printed. */
static int read_setup(const char *path, char **out)
{
    struct stat sb;
    FILE *f = NULL;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || !(f = fopen(path, "rb"))) {
        cli_usage_error(SUB, "--setup %s: not a readable regular file", path);
        return -1;
    }
    char *buf = malloc(SETUP_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, SETUP_MAX_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf || n > SETUP_MAX_BYTES || memchr(buf, '\0', n)) {
        free(buf);
        cli_usage_error(SUB, "--setup %s: more than %d bytes, or not text", path,
                        SETUP_MAX_BYTES);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

int cmd_submit(int argc, char **argv)
{
    static const struct option opts[] = {
        {"dry-run", no_argument, 0, 'n'},         {"nodes", required_argument, 0, 'N'},
        {"ntasks-per-node", required_argument, 0, 'T'},
        {"gpus-per-node", required_argument, 0, 'G'},
        {"cpus-per-task", required_argument, 0, 'c'},
        {"time", required_argument, 0, 't'},      {"partition", required_argument, 0, 'p'},
        {"account", required_argument, 0, 'A'},   {"qos", required_argument, 0, 'q'},
        {"array", required_argument, 0, 'a'},     {"output", required_argument, 0, 'o'},
        {"topology", required_argument, 0, 'P'},  {"dp", required_argument, 0, 'D'},
        {"ring", required_argument, 0, 'R'},      {"ulysses", required_argument, 0, 'U'},
        {"anything", no_argument, 0, 'y'},
        {"signal-lead", required_argument, 0, 'L'},
        {"exclusive", no_argument, 0, 'x'},       {"cpu-bind", required_argument, 0, 'B'},
        {"gpu-bind", required_argument, 0, 'g'},  {"max-requeues", required_argument, 0, 'Q'},
        {"setup", required_argument, 0, 's'},     {"prolog", required_argument, 0, 's'},
        {"weight-format", required_argument, 0, 'F'},
        {0, 0, 0, 0}};
    /* everything after "--" goes to sbatch */
    int n_own = argc;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            n_own = i;
            break;
        }
    job_sbatch_options so;
    memset(&so, 0, sizeof so);
    so.extra = n_own < argc ? argv + n_own + 1 : NULL;
    so.n_extra = n_own < argc ? argc - n_own - 1 : 0;
    int dry = 0;
    const char *output = NULL, *topology = NULL;
    long v;
    int c;
    optind = 1;
    opterr = 0;
    const char *setup_path = NULL;
    /* the short options sbatch has: -N -t -p -A -q -a -c */
    while ((c = getopt_long(n_own, argv, "N:t:p:A:q:a:c:", opts, NULL)) != -1) {
        switch (c) {
        case 'n': dry = 1; break;
        case 'N': if (cli_parse_int(SUB, "--nodes", optarg, 1, COUNT_MAX, &v)) return CLI_EXIT_USAGE; so.nodes = (int)v; break;
        case 'T': if (cli_parse_int(SUB, "--ntasks-per-node", optarg, 1, COUNT_MAX, &v)) return CLI_EXIT_USAGE; so.ntasks_per_node = (int)v; break;
        case 'G': if (cli_parse_int(SUB, "--gpus-per-node", optarg, 1, COUNT_MAX, &v)) return CLI_EXIT_USAGE; so.gpus_per_node = (int)v; break;
        case 'c': if (cli_parse_int(SUB, "--cpus-per-task", optarg, 1, COUNT_MAX, &v)) return CLI_EXIT_USAGE; so.cpus_per_task = (int)v; break;
        case 'a': if (parse_array(optarg, &so)) return CLI_EXIT_USAGE; break;
        case 'x': so.exclusive = 1; break;
        case 'B': so.cpu_bind = optarg; break;
        case 'g': so.gpu_bind = optarg; break;
        case 's': setup_path = optarg; break;
        case 'Q': if (cli_parse_int(SUB, "--max-requeues", optarg, 1, COUNT_MAX, &v)) return CLI_EXIT_USAGE; so.max_requeues = (int)v; break;
        case 'D': if (cli_parse_int(SUB, "--dp", optarg, 1, DEGREE_MAX, &v)) return CLI_EXIT_USAGE; so.dp = (int)v; break;
        case 'R': if (cli_parse_int(SUB, "--ring", optarg, 1, DEGREE_MAX, &v)) return CLI_EXIT_USAGE; so.ring = (int)v; break;
        case 'U': if (cli_parse_int(SUB, "--ulysses", optarg, 1, DEGREE_MAX, &v)) return CLI_EXIT_USAGE; so.ulysses = (int)v; break;
        case 'L': if (cli_parse_int(SUB, "--signal-lead", optarg, 1, 86400, &v)) return CLI_EXIT_USAGE; so.signal_lead_s = (int)v; break;
        case 'y': so.anything = 1; break;
        case 't': so.time = optarg; break;
        case 'p': so.partition = optarg; break;
        case 'A': so.account = optarg; break;
        case 'q': so.qos = optarg; break;
        case 'o': output = optarg; break;
        case 'P': topology = optarg; break;
        case 'F':
            if (cpdit_weight_format_from_name(optarg) < 0)
                return cli_usage_error(SUB, "--weight-format: unknown format '%s'; use native "
                                            "or fp32", optarg);
            so.weight_format = optarg;
            break;
        default:
            return cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= n_own)
        return cli_usage_error(SUB, "which manifest? cpdit submit MANIFEST.yaml [options]");
    if (optind + 1 < n_own)
        return cli_usage_error(SUB, "one manifest per job, got '%s' and '%s' (sbatch options go "
                                    "after --)", argv[optind], argv[optind + 1]);
    const char *path = argv[optind];
    if (output && !output[0])
        return cli_usage_error(SUB, "--output: empty folder name");
    if (!topology) {
        const char *env = getenv("CPDIT_TOPOLOGY");
        topology = env && env[0] ? env : NULL;
    }

    /* the same checks as `cpdit run MANIFEST --check` (its plan is not shown) */
    manifest_overrides ov = MANIFEST_OVERRIDES_NONE;
    ov.output_dir = output;
    ov.dp = so.dp, ov.ring = so.ring, ov.ulysses = so.ulysses;
    if (so.anything)
        ov.anything = 1;
    cpdit_error err;
    cpdit_error_clear(&err);
    FILE *devnull = fopen("/dev/null", "w");
    if (!devnull)
        return cli_usage_error(SUB, "cannot open /dev/null");
    cpdit_status st = manifest_check_command(path, &ov, devnull, &err);
    fclose(devnull);
    manifest *m = NULL;
    if (!st)
        st = manifest_load(path, MANIFEST_CHECK_FILES | MANIFEST_READ_MODEL, &m, &err);
    if (!st)
        st = manifest_apply_overrides(m, &ov, &err);
    if (st) {
        manifest_free(m);
        return cli_report(&err);
    }

    char *setup = NULL;
    if (setup_path && read_setup(setup_path, &setup)) {
        manifest_free(m);
        return CLI_EXIT_USAGE;
    }
    so.setup = setup;
    so.setup_path = setup_path;
    char name[96];
    job_name(path, name, sizeof name);
    char *exe = program_path(), *man = realpath(path, NULL), *out = absolute(m->output_dir);
    char *topo = topology ? absolute(topology) : NULL;
    so.cpdit = exe;
    so.manifest = man;
    so.output_dir = out;
    so.topology = topo;
    so.version = cpdit_version_string();
    so.job_name = name;
    so.manifest_auto = m->parallel.is_auto;
    so.manifest_dp = m->parallel.dp;
    so.manifest_ring = m->parallel.ring;
    so.manifest_ulysses = m->parallel.ulysses;
    so.manifest_anything = m->parallel.anything;
    manifest_free(m);
    char *script = NULL;
    int code = CLI_EXIT_OK;
    if (!exe || !man || !out || (topology && !topo)) {
        fprintf(stderr, "cpdit: submit: cannot find the absolute paths of the program, the "
                        "manifest or the output folder: %s\n", strerror(errno));
        code = CLI_EXIT_RUNTIME;
    } else if (job_sbatch_script(&so, &script, &err)) {
        code = cli_report(&err);
    } else if (dry) {
        fputs(script, stdout);
    } else {
        code = write_and_submit(out, script);
    }
    free(script);
    free(setup);
    free(exe);
    free(man);
    free(out);
    free(topo);
    return code;
}
