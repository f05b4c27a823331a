/* cli_common.c — error reporting and option-value parsing shared by all subcommands. */
#include "bin/cli.h"

#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "lib/cp/cp_attention.h"

int cli_report(const cpdit_error *err)
{
    char buf[CPDIT_ERROR_WHERE_MAX + CPDIT_ERROR_WHAT_MAX + 16];
    fprintf(stderr, "%s\n", cpdit_error_format(err, buf, sizeof buf));
    if (!err || err->status == CPDIT_OK)
        return CLI_EXIT_RUNTIME;
    return err->status == CPDIT_ERR_INPUT ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME;
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

void cli_print_exit_codes(FILE *out)
{
    fputs("\n"
          "Exit status (every subcommand):\n"
          "  0  success (run: every item done; status: every item done)\n"
          "  1  runtime failure (I/O, out of memory, a rank failed)\n"
          "  2  bad input or usage (manifest FILE:LINE:COL, option, model, topology file)\n"
          "  3  stopped by a signal (TERM, INT or USR1: the ranks stop after the current\n"
          "     sampler step, the images in flight are finished or redone by the next run;\n"
          "     a stop marker is written; requeue or rerun to resume; status: items\n"
          "     left, none failed)\n"
          "  4  finished, but some items failed (see index.jsonl; a rerun retries them;\n"
          "     status: items failed)\n",
          out);
}

#define CLI_LINE_MAX 1024

void cli_verbose_line(const char *fmt, ...)
{
    char buf[CLI_LINE_MAX];
    int inited = 0, rank = 0, size = 1;
    MPI_Initialized(&inited);
    if (inited) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
    int k = size > 1 ? snprintf(buf, sizeof buf, "[cpdit rank %d/%d] ", rank, size)
                     : snprintf(buf, sizeof buf, "[cpdit] ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + k, sizeof buf - (size_t)k - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)k + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len); /* one write: never split between ranks */
    (void)w;
}
