/* tune_charts.c — PLplot charts for the tune report (tune_charts.h). */
#include "config.h"

#include "topology/tune_charts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/png_writer.h"

#ifdef CPDIT_HAVE_PLPLOT
#include <plplot.h>

#define GB 1e9
#define N_CLASS_COLOURS 4
#define COL_BG 0
#define COL_AXES 1
#define COL_FIRST_SERIES 2
#define PATTERN_PREDICTED 3 /* plpsty: hatching at 45 degrees */
#define PATTERN_MEASURED 8  /* cross-hatching */

/* Colour map 0: white background, black axes, then one colour per series. */
static void colours(void)
{
    static const int rgb[][3] = {{255, 255, 255}, {0, 0, 0},     {31, 119, 180},
                                 {214, 39, 40},   {44, 160, 44}, {148, 103, 189}};
    const int n = (int)(sizeof rgb / sizeof rgb[0]);
    plscmap0n(n);
    for (int i = 0; i < n; i++)
        plscol0(i, rgb[i][0], rgb[i][1], rgb[i][2]);
}

static unsigned char *begin(void)
{
    unsigned char *buf = malloc((size_t)TUNE_CHART_WIDTH * TUNE_CHART_HEIGHT * 3);
    if (!buf)
        return NULL;
    memset(buf, 255, (size_t)TUNE_CHART_WIDTH * TUNE_CHART_HEIGHT * 3);
    plsdev("mem");
    plsmem(TUNE_CHART_WIDTH, TUNE_CHART_HEIGHT, buf);
    colours();
    plinit();
    plcol0(COL_AXES);
    return buf;
}

static cpdit_status finish(unsigned char *buf, const char *dir, const char *name,
                           const char *title, cpdit_error *err)
{
    plend();
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cpdit_png_text text[] = {{"Title", title}, {"Software", "cpdit tune (PLplot)"}};
    cpdit_status st = cpdit_png_write_rgb8(path, buf, TUNE_CHART_WIDTH, TUNE_CHART_HEIGHT, text,
                                           2, err);
    free(buf);
    return st;
}

int tune_charts_available(void)
{
    return 1;
}

cpdit_status tune_chart_bandwidth(const topology *t, const char *dir, cpdit_error *err)
{
    if (t->n_p2p < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "bandwidth chart",
                               "the topology file has no point-to-point measurements");
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < t->n_p2p; i++) {
        const double x = log10(t->p2p[i].bytes), y = log10(t->p2p[i].bw_Bps / GB);
        xmin = fmin(xmin, x), xmax = fmax(xmax, x), ymin = fmin(ymin, y), ymax = fmax(ymax, y);
    }
    if (xmax - xmin < 1)
        xmin -= 0.5, xmax += 0.5;
    if (ymax - ymin < 1)
        ymin -= 0.5, ymax += 0.5;
    unsigned char *buf = begin();
    if (!buf)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "bandwidth chart", "out of memory");
    plenv(floor(xmin), ceil(xmax), floor(ymin), ceil(ymax), 0, 30); /* log x and y */
    pllab("message size (bytes)", "bandwidth (GB/s)",
          "point-to-point bandwidth per link class");
    int series = 0;
    for (int c = 0; c < TOPO_NCLASS; c++) {
        PLFLT x[256], y[256];
        int n = 0;
        for (int i = 0; i < t->n_p2p && n < 256; i++)
            if (t->p2p[i].cls == (topo_class)c) {
                x[n] = log10(t->p2p[i].bytes);
                y[n] = log10(t->p2p[i].bw_Bps / GB);
                n++;
            }
        if (n == 0)
            continue;
        /* sort by size so the line runs left to right */
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0 && x[j] < x[j - 1]; j--) {
                PLFLT tx = x[j], ty = y[j];
                x[j] = x[j - 1], y[j] = y[j - 1], x[j - 1] = tx, y[j - 1] = ty;
            }
        plcol0(COL_FIRST_SERIES + series % N_CLASS_COLOURS);
        plline(n, x, y);
        plpoin(n, x, y, 17);
        plmtex("t", -1.5 - 1.3 * series, 0.03, 0.0, topo_class_name((topo_class)c));
        series++;
    }
    return finish(buf, dir, "bandwidth.png", "bandwidth vs message size", err);
}

cpdit_status tune_chart_predictions(const tune_candidate *c, int n, const char *dir,
                                    cpdit_error *err)
{
    PLFLT x[64], yp[64], ym[64];
    char labels[64][48], variants[64][48];
    int k = 0;
    double ymax = 0;
    for (int i = 0; i < n && k < 64; i++) {
        if (c[i].failed || c[i].measured_s <= 0)
            continue;
        x[k] = k + 1;
        yp[k] = c[i].pred.step_s;
        ym[k] = c[i].measured_s;
        ymax = fmax(ymax, fmax(yp[k], ym[k]));
        snprintf(labels[k], sizeof labels[k], "%dx%dx%d", c[i].pred.cfg.dp, c[i].pred.cfg.ring,
                 c[i].pred.cfg.ulysses);
        snprintf(variants[k], sizeof variants[k], "%s", c[i].pred.variant);
        k++;
    }
    if (k == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "predictions chart",
                               "no candidate was measured");
    unsigned char *buf = begin();
    if (!buf)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "predictions chart", "out of memory");
    /* axes by hand: no numbers under the bars, the grid names instead */
    pladv(0);
    plvsta();
    plwind(0.3, k + 0.7, 0, ymax * 1.25);
    plbox("bc", 0, 0, "bcnstv", 0, 0);
    plmtex("b", 3.8, 0.5, 0.5, "grid (dp x ring x ulysses), variant");
    pllab("", "seconds per step",
          "predicted vs measured step time per grid");
    const double w = 0.18;
    for (int i = 0; i < k; i++) {
        PLFLT bx[4] = {x[i] - 2 * w, x[i] - 2 * w, x[i], x[i]};
        PLFLT by[4] = {0, yp[i], yp[i], 0};
        plcol0(COL_FIRST_SERIES);
        plpsty(PATTERN_PREDICTED); /* hatched: the mem driver has no solid fill */
        plfill(4, bx, by);
        PLFLT mx[4] = {x[i], x[i], x[i] + 2 * w, x[i] + 2 * w};
        PLFLT my[4] = {0, ym[i], ym[i], 0};
        plcol0(COL_FIRST_SERIES + 1);
        plpsty(PATTERN_MEASURED);
        plfill(4, mx, my);
        plcol0(COL_AXES);
        plmtex("b", 1.2, (x[i] - 0.3) / (k + 0.4), 0.5, labels[i]);
        plmtex("b", 2.4, (x[i] - 0.3) / (k + 0.4), 0.5, variants[i]);
    }
    plcol0(COL_FIRST_SERIES);
    plmtex("t", -1.5, 0.03, 0.0, "predicted");
    plcol0(COL_FIRST_SERIES + 1);
    plmtex("t", -2.8, 0.03, 0.0, "measured (median)");
    return finish(buf, dir, "predicted_vs_measured.png", "predicted vs measured", err);
}

#else /* no PLplot */

int tune_charts_available(void)
{
    return 0;
}

cpdit_status tune_chart_bandwidth(const topology *t, const char *dir, cpdit_error *err)
{
    (void)t;
    (void)dir;
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "charts",
                           "this cpdit was built without PLplot (configure --with-plplot)");
}

cpdit_status tune_chart_predictions(const tune_candidate *c, int n, const char *dir,
                                    cpdit_error *err)
{
    (void)c;
    (void)n;
    (void)dir;
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "charts",
                           "this cpdit was built without PLplot (configure --with-plplot)");
}
#endif
