/* tune_report.h — `cpdit tune`'s report folder for admins: report.html (self-contained:
 * every section below, the charts inline; tune_report_html.h), report.md (what was found, the
 * tables, the choice and the reasons in words), report.json ({"candidates": [{"dp", "ring",
 * "ulysses", "variant", "predicted_s", "measured_s", ...}], "chosen": {...}, ...}) and the
 * PNG charts of tune_charts.h when PLplot is built in.
 */
#ifndef CPDIT_TUNE_REPORT_H
#define CPDIT_TUNE_REPORT_H

#include "lib/core/cpdit_error.h"
#include "lib/models/model_plan.h"
#include "topology/topo_file.h"
#include "topology/tune_run.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tune_report_info {
    const topology *topo;
    const char *topo_source;  /* "tests/x.json", or "a quick probe (saved to ...)" */
    const model_plan_shape *shape;
    int ranks, rounds;
    double load_before[3], load_after[3]; /* getloadavg; < 0 unknown */
    int ncpus;                /* online CPUs of rank 0's host */
    double seconds;           /* wall time of the measurements */
    const char *objective;    /* "latency" or "throughput" */
    int images, steps;        /* the job the objective is for; sampler steps per image */
    int threads;              /* threads per rank */
    const char *key_text;     /* tuned_key_text of the recorded entry */
    const char *command;      /* the command line, as run */
    double budget_s;          /* the measuring time budget */
    const char *version;      /* cpdit's version */
    const char *backend_line; /* the backend's describe() line (libraries, device) */
    const char *backend;      /* its name */
} tune_report_info;

/* Write dir/report.md, dir/report.json and the charts (mkdir -p dir). chosen: index into c
 * of the measured winner (-1 when every candidate failed). */
cpdit_status tune_report_write(const char *dir, const tune_report_info *info,
                               const tune_candidate *c, int n, int chosen, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
