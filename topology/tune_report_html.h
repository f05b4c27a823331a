/* tune_report_html.h — report.html of `cpdit tune`: one self-contained page (no external
 * files: the charts are inline as base64 PNG data URIs) whose sections an admin reads in
 * order, each a <section id="..."> with an <h2>:
 *   recommendation  the chosen grid, its objective with the 95 % interval, how sure (tight
 *                   or budget-bound, tied grids), images/hour and core- or GPU-hours per 1000
 *   machine         per host: CPU model (rank 0's host), packages, cores, PUs, memory, GPUs,
 *                   NICs (hwloc / NVML in the topology file), compute rates
 *   versions        cpdit, the backend's libraries (BLAS, CUDA, NCCL), MPI
 *   command         the exact command line and working folder
 *   placement       ranks x threads per rank against the cores and PUs of the hosts
 *   load            load average before and after, against the CPU count
 *   candidates      every grid: predicted, median, min, max, n, interval, objective, tie
 *   links           per-size tables as nccl-tests / OSU print them: size, time, algbw,
 *                   busbw, for point-to-point per class and every collective
 *   whatif          the cost model's best grid on 2x, 4x and 8x the nodes
 *   charts          bandwidth.png, collectives.png, predicted_vs_measured.png inline
 */
#ifndef CPDIT_TUNE_REPORT_HTML_H
#define CPDIT_TUNE_REPORT_HTML_H

#include "topology/tune_report.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The what-if rows: 2x, 4x, 8x the nodes. */
#define TUNE_WHATIF_N 3

/* Write path (atomically); the charts are read from dir. */
cpdit_status tune_report_html(const char *path, const char *dir, const tune_report_info *in,
                              const tune_candidate *c, int n, int chosen, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
