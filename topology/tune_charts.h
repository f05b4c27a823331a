/* tune_charts.h — the PNG charts of `cpdit tune`'s report, drawn with PLplot (its "mem"
 * driver renders into an RGB buffer; lib/io/png_writer writes it). Without PLplot at build
 * time (configure --with-plplot=no, or libplplot-dev absent) tune_charts_available() is 0
 * and the report has tables only.
 *
 *   bandwidth.png            bandwidth (GB/s) vs message size per link class, log-log, from
 *                            the topology file's point-to-point table
 *   predicted_vs_measured.png  predicted and measured seconds per step of each candidate
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

/* Write dir/predicted_vs_measured.png over the candidates that did not fail. */
cpdit_status tune_chart_predictions(const tune_candidate *c, int n, const char *dir,
                                    cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
