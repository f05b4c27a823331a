/* cli_common.c — error reporting and option-value parsing shared by all subcommands. */
#include "bin/cli.h"

#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "kernels/backend.h"
#include "lib/cp/cp_attention.h"
#include "lib/builtin/builtin_model.h"
#include "lib/core/utf8.h"
#include "lib/io/regular_file.h"
#include "lib/io/tensor_finite.h"

int cli_report(const cpdit_error *err)
{
    char buf[CPDIT_ERROR_WHERE_MAX + CPDIT_ERROR_WHAT_MAX + 16];
    fprintf(stderr, "%s\n", cpdit_error_format(err, buf, sizeof buf));
    if (!err || err->status == CPDIT_OK)
        return CLI_EXIT_RUNTIME;
    return err->status == CPDIT_ERR_INPUT ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME;
}

cpdit_status cli_end_job_if_broken(cpdit_status st, const cpdit_error *err)
{
    if (st != CPDIT_ERR_BROKEN)
        return st;
    char buf[CPDIT_ERROR_WHERE_MAX + CPDIT_ERROR_WHAT_MAX + 16];
    fprintf(stderr, "%s (aborting the job)\n", cpdit_error_format(err, buf, sizeof buf));
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, CLI_EXIT_RUNTIME);
    return st;
}

int cli_usage_error(const char *sub, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "cpdit: %s: ", sub);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'cpdit help %s')\n", sub);
    return CLI_EXIT_USAGE;
}

int cli_parse_int(const char *sub, const char *opt, const char *text, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || !*text || *end != '\0' || errno == ERANGE) {
        cli_usage_error(sub, "%s: expected an integer, got '%s'", opt, text ? text : "");
        return -1;
    }
    if (v < lo || v > hi) {
        cli_usage_error(sub, "%s: %ld is out of range [%ld, %ld]", opt, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

void cli_attention_alias(const char **variant, const char **kernel)
{
    cp_attention_config probe;
    /* "auto" names the backend's kernel choice (kernels/backend.h), not the variant (whose
     * default is auto anyway) */
    if (!*variant && *kernel && strcmp(*kernel, "auto") != 0 &&
        cp_attention_config_parse(*kernel, &probe, NULL) == CPDIT_OK) {
        *variant = *kernel;
        *kernel = NULL;
    }
    if (!*variant)
        *variant = "auto";
}

cpdit_status cli_backend_resolve(const char *backend, const char *kernel,
                                 const cpdit_backend **be, const cpdit_attention_kernel **k,
                                 cpdit_error *err)
{
    cpdit_status st = cpdit_backend_resolve(backend, be, err);
    if (!st)
        st = cpdit_attention_kernel_find(*be, kernel, k, err);
    return st;
}

int cli_parse_size(const char *text, size_t *out)
{
    char *end;
    errno = 0;
    const double v = strtod(text, &end);
    if (end == text || errno || !(v > 0))
        return -1;
    double mult = 1;
    if (*end == 'K' || *end == 'k')
        mult = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mult = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mult = 1024.0 * 1024 * 1024, end++;
    else if (*end == 'T' || *end == 't')
        mult = 1024.0 * 1024 * 1024 * 1024, end++;
    if (*end == 'i' && end[1] == 'B')
        end += 2;
    else if (*end == 'B')
        end++;
    if (*end || v * mult > 1e18)
        return -1;
    *out = (size_t)(v * mult);
    return 0;
}

cpdit_status cli_check_forward_result(const char *component, const char *model,
                                      const float *x, size_t n, cpdit_error *err)
{
    char dir[4096];
    struct stat sb;
    snprintf(dir, sizeof dir, "%s/%s", model, component);
    const char *weights = stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) ? dir : model;
    return cpdit_check_result_finite(component, "sample", x, n, weights, err);
}

cpdit_status cli_check_text_option(const char *opt, const char *text, cpdit_error *err)
{
    if (text && !cpdit_utf8_valid(text))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, opt, "not valid UTF-8; pass the text as "
                               "UTF-8");
    return CPDIT_OK;
}

cpdit_status cli_check_output_folder(const char *opt, const char *dir, cpdit_error *err)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (errno == ENOENT)
            return CPDIT_OK;
        if (errno == ENOTDIR)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, opt, "\"%s\": a part of the path is a "
                                   "file, not a folder", dir);
        return cpdit_error_set(err, errno == ELOOP ? CPDIT_ERR_INPUT : CPDIT_ERR_RUNTIME, opt,
                               "\"%s\": %s", dir, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, opt, "\"%s\" is %s, not a folder", dir,
                               cpdit_file_kind(sb.st_mode));
    if (access(dir, W_OK | X_OK) != 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, opt, "the output folder \"%s\" is not "
                               "writable: %s", dir, strerror(errno));
    return CPDIT_OK;
}

int cli_resolve_model(const char **model, int quiet)
{
    static char dir[4096]; /* one --model per process */
    cpdit_error err;
    cpdit_error_clear(&err);
    if (strncmp(*model, "builtin:", strlen("builtin:")) != 0)
        return 0;
    if (builtin_model_resolve(*model, dir, sizeof dir, &err) != CPDIT_OK) {
        if (!quiet)
            cli_report(&err);
        return -1;
    }
    *model = dir;
    return 0;
}

int cli_take_global_options(int *argc, char **argv)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i], *val = NULL;
        if (strcmp(a, "--") == 0) { /* the rest is not ours */
            while (i < *argc)
                argv[out++] = argv[i++];
            break;
        }
        if (strcmp(a, "--profile") == 0) {
            setenv("CPDIT_PROFILE", "1", 1); /* the table at exit: kernels/cpu/profile_cpu.h */
            continue;
        }
        if (strcmp(a, "--threads") == 0) {
            val = i + 1 < *argc ? argv[++i] : "";
        } else if (strncmp(a, "--threads=", 10) == 0) {
            val = a + 10;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        char *end = NULL;
        errno = 0;
        const long n = strtol(val, &end, 10);
        if (!*val || *end != '\0' || errno == ERANGE || n < 1 || n > CLI_MAX_THREADS) {
            fprintf(stderr, "cpdit: --threads: expected a thread count in [1, %d], got '%s'\n",
                    CLI_MAX_THREADS, val);
            return CLI_EXIT_USAGE;
        }
        char text[16];
        snprintf(text, sizeof text, "%ld", n);
        setenv("CPDIT_THREADS", text, 1); /* read when the thread pool is made */
    }
    argv[out] = NULL;
    *argc = out;
    return CLI_EXIT_OK;
}
