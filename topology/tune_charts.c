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

#define MAX_POINTS 256
#define FIT_POINTS 64
#define MARK_POINT 17  /* plpoin: a filled dot */
#define MARK_SAMPLE 1  /* plpoin: a small dot (each pair's best trial) */
#define LEGEND_SCALE 0.8 /* legend text relative to the default size */

/* Sort x ascending, y along. */
static void sort_xy(PLFLT *x, PLFLT *y, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j] < x[j - 1]; j--) {
            PLFLT tx = x[j], ty = y[j];
            x[j] = x[j - 1], y[j] = y[j - 1], x[j - 1] = tx, y[j - 1] = ty;
        }
}

/* Bandwidth of a point-to-point row from its best trial (what the alpha-beta fit uses). */
static double p2p_best_bw(const topo_p2p *p)
{
    return p->time_s_min > 0 ? p->bytes / p->time_s_min : p->bw_Bps;
}

cpdit_status tune_chart_bandwidth(const topology *t, const char *dir, cpdit_error *err)
{
    if (t->n_p2p < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "bandwidth chart",
                               "the topology file has no point-to-point measurements");
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < t->n_p2p; i++) {
        const double x = log10(t->p2p[i].bytes), y = log10(p2p_best_bw(&t->p2p[i]) / GB);
        xmin = fmin(xmin, x), xmax = fmax(xmax, x), ymin = fmin(ymin, y), ymax = fmax(ymax, y);
    }
    for (int c = 0; c < TOPO_NCLASS; c++) /* the fits' asymptotes on the chart too */
        if (t->fits[c].measured)
            ymax = fmax(ymax, log10(t->fits[c].beta_Bps / GB));
    if (xmax - xmin < 1)
        xmin -= 0.5, xmax += 0.5;
    if (ymax - ymin < 1)
        ymin -= 0.5, ymax += 0.5;
    unsigned char *buf = begin();
    if (!buf)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "bandwidth chart", "out of memory");
    /* log x and y; a decade of headroom for the legend (bandwidth rises to the top right) */
    plenv(floor(xmin), ceil(xmax), floor(ymin), ceil(ymax) + 1, 0, 30);
    pllab("message size (bytes)", "bandwidth (GB/s), higher is better",
          "point-to-point bandwidth per link class");
    int series = 0;
    for (int c = 0; c < TOPO_NCLASS; c++) {
        PLFLT x[MAX_POINTS], y[MAX_POINTS], bx[MAX_POINTS], by[MAX_POINTS];
        int n = 0, nb = 0;
        for (int i = 0; i < t->n_p2p && n < MAX_POINTS; i++) {
            const topo_p2p *p = &t->p2p[i];
            if (p->cls != (topo_class)c)
                continue;
            x[n] = log10(p->bytes);
            y[n] = log10(p2p_best_bw(p) / GB);
            /* the line: per size the best pair of the class (several pairs share a class) */
            int k = 0;
            while (k < nb && bx[k] != x[n])
                k++;
            if (k == nb)
                bx[nb] = x[n], by[nb++] = y[n];
            else if (y[n] > by[k])
                by[k] = y[n];
            n++;
        }
        if (n == 0)
            continue;
        sort_xy(bx, by, nb);
        plcol0(COL_FIRST_SERIES + series % N_CLASS_COLOURS);
        plpoin(n, x, y, MARK_SAMPLE);
        plpoin(nb, bx, by, MARK_POINT);
        pllsty(1);
        plline(nb, bx, by);
        char label[96];
        if (t->fits[c].measured) { /* the alpha-beta fit: bw(s) = s / (alpha + s / beta) */
            const topo_fit *f = &t->fits[c];
            PLFLT fx[FIT_POINTS], fy[FIT_POINTS];
            for (int i = 0; i < FIT_POINTS; i++) {
                fx[i] = floor(xmin) + (ceil(xmax) - floor(xmin)) * i / (FIT_POINTS - 1);
                const double sz = pow(10.0, fx[i]);
                fy[i] = log10(sz / (f->alpha_s + sz / f->beta_Bps) / GB);
            }
            pllsty(2); /* dashed */
            plline(FIT_POINTS, fx, fy);
            pllsty(1);
            snprintf(label, sizeof label, "%s, dashed: fit %.3g us + size / %.3g GB/s",
                     topo_class_name((topo_class)c), f->alpha_s * 1e6, f->beta_Bps / GB);
        } else {
            snprintf(label, sizeof label, "%s (no fit)", topo_class_name((topo_class)c));
        }
        plschr(0, LEGEND_SCALE);
        plmtex("t", -1.5 - 1.3 * series, 0.03, 0.0, label);
        plschr(0, 1.0);
        series++;
    }
    plcol0(COL_AXES);
    plschr(0, LEGEND_SCALE);
    plmtex("t", -1.5 - 1.3 * series, 0.03, 0.0,
           "line: best pair per size (best trial); small dots: every pair");
    plschr(0, 1.0);
    return finish(buf, dir, "bandwidth.png", "bandwidth vs message size", err);
}

cpdit_status tune_chart_collectives(const topology *t, const char *dir, cpdit_error *err)
{
    static const char *const names[] = {"all-to-all", "all-gather", "ring send-receive"};
    if (t->n_coll < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "collectives chart",
                               "the topology file has no collective measurements");
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < t->n_coll; i++) {
        const double x = log10(t->coll[i].bytes), y = log10(t->coll[i].time_s_avg * 1e6);
        xmin = fmin(xmin, x), xmax = fmax(xmax, x), ymin = fmin(ymin, y), ymax = fmax(ymax, y);
    }
    if (xmax - xmin < 1)
        xmin -= 0.5, xmax += 0.5;
    if (ymax - ymin < 1)
        ymin -= 0.5, ymax += 0.5;
    unsigned char *buf = begin();
    if (!buf)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "collectives chart", "out of memory");
    plenv(floor(xmin), ceil(xmax), floor(ymin), ceil(ymax) + 1, 0, 30); /* headroom: legend */
    pllab("bytes sent per rank", "time per call (us), lower is better",
          "collectives per group (op, ranks, link class)");
    int series = 0;
    for (int op = 0; op < 3; op++)
        for (int g = 2; g <= t->ranks; g++)
            for (int c = 0; c < TOPO_NCLASS; c++) {
                PLFLT x[MAX_POINTS], y[MAX_POINTS];
                int n = 0;
                for (int i = 0; i < t->n_coll && n < MAX_POINTS; i++) {
                    const topo_coll *k = &t->coll[i];
                    if ((int)k->op != op || k->group_size != g || (int)k->cls != c)
                        continue;
                    x[n] = log10(k->bytes);
                    y[n] = log10(k->time_s_avg * 1e6);
                    n++;
                }
                if (n == 0)
                    continue;
                sort_xy(x, y, n);
                plcol0(COL_FIRST_SERIES + series % N_CLASS_COLOURS);
                pllsty(1 + op); /* solid, dashed, dotted: the op */
                plline(n, x, y);
                plpoin(n, x, y, MARK_POINT);
                char label[96];
                snprintf(label, sizeof label, "%s, %d ranks, %s", names[op], g,
                         topo_class_name((topo_class)c));
                plmtex("t", -1.5 - 1.3 * series, 0.03, 0.0, label);
                series++;
            }
    pllsty(1);
    return finish(buf, dir, "collectives.png", "collectives: time vs size", err);
}

cpdit_status tune_chart_predictions(const tune_candidate *c, int n, int chosen, const char *dir,
                                    cpdit_error *err)
{
    PLFLT x[64], yp[64], ym[64], lo[64], hi[64];
    char labels[64][48], variants[64][48];
    int k = 0, kchosen = -1;
    double ymax = 0;
    for (int i = 0; i < n && k < 64; i++) {
        if (c[i].failed || c[i].measured_s <= 0)
            continue;
        if (i == chosen)
            kchosen = k;
        x[k] = k + 1;
        yp[k] = c[i].pred.step_s;
        ym[k] = c[i].measured_s;
        lo[k] = c[i].stats.n > 0 ? c[i].stats.lo : ym[k];
        hi[k] = c[i].stats.n > 0 ? c[i].stats.hi : ym[k];
        ymax = fmax(ymax, fmax(yp[k], fmax(ym[k], hi[k])));
        snprintf(labels[k], sizeof labels[k], "%dx%dx%d", c[i].pred.cfg.dp, c[i].pred.cfg.ring,
                 c[i].pred.cfg.ulysses);
        snprintf(variants[k], sizeof variants[k], "%s", c[i].pred.variant);
        k++;
    }
    if (k == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "predictions chart",
                               "no candidate was measured");
    /* milliseconds (or seconds) on the axis: no detached exponent label */
    const double scale = ymax < 1.0 ? 1e3 : 1.0;
    for (int i = 0; i < k; i++)
        yp[i] *= scale, ym[i] *= scale, lo[i] *= scale, hi[i] *= scale;
    ymax *= scale;
    unsigned char *buf = begin();
    if (!buf)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "predictions chart", "out of memory");
    /* axes by hand: no numbers under the bars, the grid names instead */
    pladv(0);
    plvpor(0.1, 0.95, 0.2, 0.88);
    plwind(0.3, k + 0.7, 0, ymax * 1.35);
    plbox("bc", 0, 0, "bcnstv", 0, 0);
    plmtex("b", 5.2, 0.5, 0.5, "grid (dp x ring x ulysses), variant");
    pllab("", scale > 1 ? "ms per step, lower is better" : "s per step, lower is better",
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
        /* the 95 % interval of the median */
        PLFLT ex = x[i] + w, elo = lo[i], ehi = hi[i];
        plcol0(COL_AXES);
        plerry(1, &ex, &elo, &ehi);
        const double pos = (x[i] - 0.3) / (k + 0.4);
        plmtex("b", 1.2, pos, 0.5, labels[i]);
        plmtex("b", i % 2 ? 3.8 : 2.5, pos, 0.5, variants[i]); /* staggered: no overlap */
        if (i == kchosen) {
            PLFLT ox[5] = {x[i] - 2.4 * w, x[i] - 2.4 * w, x[i] + 2.4 * w, x[i] + 2.4 * w,
                           x[i] - 2.4 * w};
            const double top = fmax(yp[i], hi[i]) * 1.08;
            PLFLT oy[5] = {0, top, top, 0, 0};
            plcol0(COL_FIRST_SERIES + 2);
            plwidth(3);
            plline(5, ox, oy);
            plwidth(1);
            plptex(x[i], top + 0.05 * ymax, 1, 0, 0.5, "chosen");
        }
    }
    plcol0(COL_FIRST_SERIES);
    plmtex("t", -1.5, 0.03, 0.0, "predicted");
    plcol0(COL_FIRST_SERIES + 1);
    plmtex("t", -2.8, 0.03, 0.0, "measured: median, bar = 95 % interval");
    plcol0(COL_FIRST_SERIES + 2);
    plmtex("t", -4.1, 0.03, 0.0, "framed: the chosen grid");
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

cpdit_status tune_chart_collectives(const topology *t, const char *dir, cpdit_error *err)
{
    (void)t;
    (void)dir;
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "charts",
                           "this cpdit was built without PLplot (configure --with-plplot)");
}

cpdit_status tune_chart_predictions(const tune_candidate *c, int n, int chosen, const char *dir,
                                    cpdit_error *err)
{
    (void)c;
    (void)n;
    (void)chosen;
    (void)dir;
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "charts",
                           "this cpdit was built without PLplot (configure --with-plplot)");
}
#endif
