/* tune_charts.h — the PNG charts of `cpdit tune`'s report, drawn with PLplot (its "mem"
 * driver renders into an RGB buffer; lib/io/png_writer writes it). Without PLplot at build
 * time (configure --with-plplot=no, or libplplot-dev absent) tune_charts_available() is 0
 * and the report has tables only.
 *
 *   bandwidth.png            bandwidth (GB/s) vs message size per link class, log-log, from
 *                            the topology file's point-to-point table: every pair's best
 *                            trial (small dots), the best pair per size (line), the class's
 *                            alpha-beta fit (dashed)
 *   collectives.png          time per call vs size of each measured collective
 *   predicted_vs_measured.png  predicted and measured step time of each candidate, the
 *                            measured 95 % interval, the chosen grid framed
 */
#ifndef CPDIT_TUNE_CHARTS_H
#define CPDIT_TUNE_CHARTS_H

#include "lib/core/cpdit_error.h"
#include "topology/topo_file.h"
#include "topology/tune_run.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TUNE_CHART_WIDTH 800
#define TUNE_CHART_HEIGHT 560

int tune_charts_available(void);

/* Write dir/bandwidth.png. INPUT error when t has no point-to-point rows (nothing to draw). */
cpdit_status tune_chart_bandwidth(const topology *t, const char *dir, cpdit_error *err);

/* Write dir/collectives.png: time per call vs bytes per rank of each measured collective
 * (op, group size, link class). INPUT error when t has none. */
cpdit_status tune_chart_collectives(const topology *t, const char *dir, cpdit_error *err);

/* Write dir/predicted_vs_measured.png over the candidates that did not fail: predicted and
 * measured (median, 95 % interval as an error bar) per grid, the chosen one (index into c,
 * -1: none) framed. */
cpdit_status tune_chart_predictions(const tune_candidate *c, int n, int chosen, const char *dir,
                                    cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
