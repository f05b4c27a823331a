/* shapes_grammar.c — builtin:shapes' prompt grammar and colour check (see shapes_grammar.h).
 * The numbers below are tests/reference/train-builtin/shapes_data.py's. */
#include "lib/builtin/shapes_grammar.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

#define TRAIN_SIDE 128.0       /* pixels of the training images */
#define MARGIN 8.0             /* corner shapes sit RADIUS + MARGIN from the edges */
#define JITTER_PX 3.0          /* the training centres moved by up to this */
#define JITTER_SCALE 0.08      /* and the radii by up to this share */
#define INNER_SHARE 0.3        /* the shape region: within this share of the radius */
#define OUTER_SHARE 1.4        /* the background region: beyond this share, plus: */
#define OUTER_PAD_PX 6.0       /* jitter and anti-aliasing */
#define WORD_MAX 32

static const char *const COLOURS[SHAPES_N_COLOURS] = {"red",    "green",  "blue",  "yellow",
                                                      "orange", "purple", "white", "black"};
static const uint8_t PALETTE[SHAPES_N_COLOURS][3] = {
    {220, 30, 30}, {30, 165, 50}, {35, 70, 220},   {245, 220, 35},
    {245, 135, 20}, {135, 45, 180}, {245, 245, 245}, {15, 15, 15}};
static const char *const SHAPES[] = {"circle", "square", "triangle", "diamond"};
static const double RADIUS[2] = {17.0, 30.0}; /* small, large (training pixels) */

const char *shapes_colour_name(int colour)
{
    return colour >= 0 && colour < SHAPES_N_COLOURS ? COLOURS[colour] : "?";
}

static int index_of(const char *w, const char *const *list, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(w, list[i]) == 0)
            return i;
    return SHAPES_UNKNOWN;
}

int shapes_scene_parse(const char *prompt, shapes_scene *sc)
{
    sc->colour = sc->background = sc->shape = sc->size = sc->place = SHAPES_UNKNOWN;
    int top = 0, bottom = 0, left = 0, right = 0, center = 0;
    const char *p = prompt ? prompt : "";
    while (*p) {
        char w[WORD_MAX];
        size_t n = 0;
        while (*p && !isalpha((unsigned char)*p))
            p++;
        while (isalpha((unsigned char)*p)) {
            if (n + 1 < sizeof w)
                w[n++] = (char)tolower((unsigned char)*p);
            p++;
        }
        w[n] = '\0';
        if (!n)
            break;
        const int c = index_of(w, COLOURS, SHAPES_N_COLOURS);
        if (c != SHAPES_UNKNOWN) {
            /* "a blue background with a red circle": a colour followed by "background" is
             * the background's; otherwise the first other colour is the shape's */
            const char *q = p;
            while (*q == ' ')
                q++;
            if (strncmp(q, "background", 10) == 0)
                sc->background = c;
            else if (sc->colour == SHAPES_UNKNOWN)
                sc->colour = c;
            else if (sc->background == SHAPES_UNKNOWN) /* "... on blue" */
                sc->background = c;
            continue;
        }
        const int s = index_of(w, SHAPES, 4);
        if (s != SHAPES_UNKNOWN)
            sc->shape = s;
        else if (!strcmp(w, "small"))
            sc->size = 0;
        else if (!strcmp(w, "large") || !strcmp(w, "big"))
            sc->size = 1;
        else if (!strcmp(w, "top"))
            top = 1;
        else if (!strcmp(w, "bottom"))
            bottom = 1;
        else if (!strcmp(w, "left"))
            left = 1;
        else if (!strcmp(w, "right"))
            right = 1;
        else if (!strcmp(w, "center") || !strcmp(w, "centre") || !strcmp(w, "middle"))
            center = 1;
    }
    if (top + bottom == 1 && left + right == 1)
        sc->place = top ? (left ? 1 : 2) : (left ? 3 : 4);
    else if (center && !top && !bottom && !left && !right)
        sc->place = 0;
    return sc->colour != SHAPES_UNKNOWN && sc->background != SHAPES_UNKNOWN &&
           sc->size != SHAPES_UNKNOWN && sc->place != SHAPES_UNKNOWN;
}

static int nearest_colour(const uint8_t *px)
{
    int best = 0;
    double best_d = 1e30;
    for (int c = 0; c < SHAPES_N_COLOURS; c++) {
        double d = 0;
        for (int k = 0; k < 3; k++) {
            const double e = (double)px[k] - PALETTE[c][k];
            d += e * e;
        }
        if (d < best_d) {
            best_d = d;
            best = c;
        }
    }
    return best;
}

static int majority(const int *votes, int total, double *share)
{
    int best = 0;
    for (int c = 1; c < SHAPES_N_COLOURS; c++)
        if (votes[c] > votes[best])
            best = c;
    *share = total ? (double)votes[best] / total : 0.0;
    return total ? best : SHAPES_UNKNOWN;
}

void shapes_check(const uint8_t *rgb, int width, int height, const shapes_scene *sc,
                  shapes_verdict *v)
{
    const double sx = width / TRAIN_SIDE, sy = height / TRAIN_SIDE;
    const double r = RADIUS[sc->size];
    const double lo = r + MARGIN, hi = TRAIN_SIDE - r - MARGIN, mid = TRAIN_SIDE / 2.0;
    const double cx_t[5] = {mid, lo, hi, lo, hi}, cy_t[5] = {mid, lo, lo, hi, hi};
    const double cx = cx_t[sc->place], cy = cy_t[sc->place];
    const double inner = INNER_SHARE * r * (1.0 - JITTER_SCALE);
    const double outer = OUTER_SHARE * r * (1.0 + JITTER_SCALE) + OUTER_PAD_PX;
    int in_votes[SHAPES_N_COLOURS] = {0}, out_votes[SHAPES_N_COLOURS] = {0};
    int n_in = 0, n_out = 0;
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++) {
            /* the pixel's centre in training pixels */
            const double tx = (x + 0.5) / sx, ty = (y + 0.5) / sy;
            const double d = hypot(tx - cx, ty - cy);
            const int c = nearest_colour(rgb + ((size_t)y * width + x) * 3);
            if (d < inner) {
                in_votes[c]++;
                n_in++;
            } else if (d > outer) {
                out_votes[c]++;
                n_out++;
            }
        }
    v->shape_colour = majority(in_votes, n_in, &v->shape_share);
    v->background_colour = majority(out_votes, n_out, &v->background_share);
    v->right = v->shape_colour == sc->colour && v->background_colour == sc->background;
}
