/* cli.h — shared pieces of the cpdit command line: the subcommand table entry and
 * the helpers every subcommand uses to report errors the same way. */
#ifndef CPDIT_CLI_H
#define CPDIT_CLI_H

#include <stddef.h>

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

/* Print "cpdit: <where>: <what>" to stderr and return the exit code of err's status. */
int cli_report(const cpdit_error *err);

/* How the job ends after a library call: when st is CPDIT_ERR_BROKEN (a runtime failure on
 * this rank while its peers may be inside a collective, e.g. a failed forward on one rank of a
 * CP group), print err with "(aborting the job)" and end every rank of the job (MPI_Abort):
 * waiting would hang. Any other status: returns st. */
cpdit_status cli_end_job_if_broken(cpdit_status st, const cpdit_error *err);

/* Print "cpdit: <sub>: <message>" plus "(see 'cpdit help <sub>')" and return CLI_EXIT_USAGE. */
int cli_usage_error(const char *sub, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* `forward`'s check of a component's result x[0..n) (tensor "sample") before it is written:
 * NaN/Inf is an error naming the component, the tensor, the first bad index and the first
 * non-finite weight under MODEL/COMPONENT (or MODEL when that is not a folder); see
 * cpdit_check_result_finite (lib/io/tensor_finite.h). */
cpdit_status cli_check_forward_result(const char *component, const char *model,
                                      const float *x, size_t n, cpdit_error *err);

/* A text option (--prompt, --negative-prompt) that is not valid UTF-8 is refused before any
 * work: CPDIT_ERR_INPUT, where = opt, "not valid UTF-8; pass the text as UTF-8". NULL is OK. */
cpdit_status cli_check_text_option(const char *opt, const char *text, cpdit_error *err);

/* The output folder named by option opt (--output) before any work: missing is OK (made
 * later); a file, or a path through a file, or a folder this process cannot write into is
 * an error with where = opt (INPUT: "\"F\" is a regular file, not a folder", "\"F\": a part
 * of the path is a file, not a folder"; RUNTIME: "the output folder \"F\" is not writable:
 * strerror"). */
cpdit_status cli_check_output_folder(const char *opt, const char *dir, cpdit_error *err);

/* A --model argument "builtin:NAME" becomes its cache folder (written when missing, as
 * `run` does; builtin_model_resolve); anything else stays. 0, or -1 after printing the error
 * (unless quiet). */
int cli_resolve_model(const char **model, int quiet);

/* Parse a whole decimal integer option value in [lo, hi]; on error print a usage error
 * naming the option and return -1, else 0. */
int cli_parse_int(const char *sub, const char *opt, const char *text, long lo, long hi, long *out);

/* A size: "8G", "512M", "64K", "1.5GiB" or bytes; > 0 (binary units). Returns 0, or -1 without
 * printing anything. */
int cli_parse_size(const char *text, size_t *out);

/* Most threads --threads accepts (kernels/cpu/thread_pool.h CPU_POOL_MAX_THREADS). */
#define CLI_MAX_THREADS 256

/* The global options, anywhere before "--", removed from argv (argc updated):
 *   --threads N (or --threads=N)  exported as CPDIT_THREADS=N for the rank's thread pool (its
 *                                 precedence: kernels/cpu/thread_pool.h);
 *   --profile                     exported as CPDIT_PROFILE=1: the op-class table at exit.
 * Returns CLI_EXIT_OK, or CLI_EXIT_USAGE after a message. */
int cli_take_global_options(int *argc, char **argv);

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
int cmd_launch(int argc, char **argv);
int cmd_probe(int argc, char **argv);
extern const char cmd_probe_help[]; /* man-page style text of `cpdit probe --help` */
int cmd_plan(int argc, char **argv);
int cmd_tune(int argc, char **argv);

/* The subcommand table, defined in cpdit.c. */
const cli_command *cli_find_command(const char *name);

#endif
