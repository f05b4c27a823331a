/* cli.h — shared pieces of the cpdit command line: the subcommand table entry and
 * the helpers every subcommand uses to report errors the same way. */
#ifndef CPDIT_CLI_H
#define CPDIT_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "lib/core/cpdit_error.h"

/* Exit codes of the cpdit program (DESIGN.md): 0 ok, 1 runtime failure, 2 bad input. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_RUNTIME = 1, CLI_EXIT_USAGE = 2 };

typedef int (*cli_command_fn)(int argc, char **argv);

typedef struct cli_command {
    const char *name;    /* "run" */
    const char *summary; /* one line for `cpdit --help` */
    const char *help;    /* the full text for `cpdit help run` / `cpdit run --help` */
    cli_command_fn fn;   /* argv[0] is the subcommand name */
} cli_command;

/* The exit codes of every subcommand (CLI_EXIT_* and jobs/job_run.h's 3 and 4), one block
 * at the end of every --help, in the same words everywhere. */
void cli_print_exit_codes(FILE *out);

/* One --verbose line on stderr, written with a single write(2) so that lines of several
 * ranks never interleave mid-line, prefixed "[cpdit rank R/N] " under MPI with N > 1 (else
 * "[cpdit] "); fmt without the newline. */
void cli_verbose_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print "cpdit: <where>: <what>" to stderr and return the exit code of err's status. */
int cli_report(const cpdit_error *err);

/* Print "cpdit: <sub>: <message>" plus "(see 'cpdit help <sub>')" and return CLI_EXIT_USAGE. */
int cli_usage_error(const char *sub, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse a whole decimal integer option value in [lo, hi]; on error print a usage error
 * naming the option and return -1, else 0. */
int cli_parse_int(const char *sub, const char *opt, const char *text, long lo, long hi, long *out);

/* A size: "8G", "512M", "64K", "1.5GiB" or bytes; > 0 (binary units). Returns 0, or -1 without
 * printing anything. */
int cli_parse_size(const char *text, size_t *out);

struct cpdit_backend;
struct cpdit_attention_kernel;

/* --attention VARIANT and --attention-backend KERNEL: an --attention-backend value that names a
 * context-parallel variant (ring, ulysses, ...: forward's old spelling) is taken as --attention
 * when --attention is not given; *variant NULL becomes "auto". */
void cli_attention_alias(const char **variant, const char **kernel);

/* --backend NAME and --attention-backend KERNEL into a backend and its kernel (NULL names: the
 * best available backend, its default kernel). CPDIT_ERR_INPUT listing the choices. */
cpdit_status cli_backend_resolve(const char *backend, const char *kernel,
                                 const struct cpdit_backend **be,
                                 const struct cpdit_attention_kernel **k, cpdit_error *err);

/* Subcommands implemented in their own bin/cmd_*.c files (argv[0] is the subcommand). */
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_forward(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_builtin(int argc, char **argv);
int cmd_submit(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_probe(int argc, char **argv);
extern const char cmd_probe_help[]; /* man-page style text of `cpdit probe --help` */
int cmd_plan(int argc, char **argv);
int cmd_tune(int argc, char **argv);

/* The subcommand table, defined in cpdit.c. */
const cli_command *cli_find_command(const char *name);

#endif
