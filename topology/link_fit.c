/* link_fit.c — weighted least-squares alpha-beta fit (see link_fit.h). */
#include "topology/link_fit.h"

int link_fit_alpha_beta(const double *bytes, const double *seconds, size_t n, link_fit *fit)
{
    /* weighted normal equations of t = a + b n, w = 1/t^2 */
    double sw = 0, swx = 0, swy = 0, swxx = 0, swxy = 0, max_x = -1, t_at_max = 0;
    int used = 0;
    fit->alpha_s = 0;
    fit->beta_Bps = 0;
    fit->samples = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = bytes[i], y = seconds[i];
        if (!(y > 0) || x < 0)
            continue;
        const double w = 1.0 / (y * y);
        sw += w;
        swx += w * x;
        swy += w * y;
        swxx += w * x * x;
        swxy += w * x * y;
        if (x > max_x) {
            max_x = x;
            t_at_max = y;
        }
        used++;
    }
    if (used == 0)
        return -1;
    fit->samples = used;
    const double det = sw * swxx - swx * swx;
    double a, b; /* intercept (s), slope (s/byte) */
    if (used >= 2 && det > 1e-12 * sw * swxx) {
        b = (sw * swxy - swx * swy) / det;
        a = (swy - b * swx) / sw;
    } else {
        /* all sizes equal: the mean time is the latency, nothing known about bandwidth */
        a = swy / sw;
        b = 0;
    }
    if (a < 0) {
        a = 0;
        b = swxx > 0 ? swxy / swxx : 0;
    }
    if (b > 0) {
        fit->beta_Bps = 1.0 / b;
    } else {
        const double rest = t_at_max - a;
        /* the largest message took no longer than the fitted latency (noise on a loaded
         * machine): all of its time as transfer gives a lower bound on the bandwidth */
        fit->beta_Bps = max_x > 0 ? max_x / (rest > 0 ? rest : t_at_max) : 0;
    }
    fit->alpha_s = a;
    return 0;
}

double link_fit_time(const link_fit *fit, double bytes)
{
    return fit->alpha_s + (fit->beta_Bps > 0 ? bytes / fit->beta_Bps : 0);
}
