/* cmd_status.c — `cpdit status OUTPUT_DIR [--manifest M]`: items done / failed / left per
 * array task (jobs/job_status.c); what a user checks between requeues. */
#include "config.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "bin/cli.h"
#include "jobs/job_run.h"

#define SUB "status"

int cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {{"manifest", required_argument, 0, 'm'},
                                         {0, 0, 0, 0}};
    const char *manifest_path = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'm')
            manifest_path = optarg;
        else
            return cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[optind - 1]);
    }
    if (optind + 1 != argc)
        return cli_usage_error(SUB, "expected one output folder: cpdit status OUTPUT_DIR");
    cpdit_error err;
    cpdit_error_clear(&err);
    uint64_t totals[4] = {0, 0, 0, 0};
    if (job_status_totals(argv[optind], manifest_path, NULL, stdout, totals, &err))
        return cli_report(&err);
    return job_status_exit_code(totals); /* 0 all done, 3 items left, 4 items failed */
}
