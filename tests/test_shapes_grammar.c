/* test_shapes_grammar.c — builtin:shapes' prompt parser and colour check (shapes_grammar.h):
 * the wordings of the training data parse to their scene; partial prompts are not checkable;
 * synthetic images (a disc or square of one palette colour on another, drawn here at the
 * training geometry, jittered by the training data's largest jitter) are judged right, and
 * judged wrong when the shape or the background has another colour or the shape is elsewhere. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/builtin/shapes_grammar.h"
#include "tests/test_util.h"

#define SIDE 128
#define JITTER 3.0 /* pixels, the training data's largest centre jitter */

static const uint8_t RGB[SHAPES_N_COLOURS][3] = {
    {220, 30, 30}, {30, 165, 50}, {35, 70, 220},   {245, 220, 35},
    {245, 135, 20}, {135, 45, 180}, {245, 245, 245}, {15, 15, 15}};

/* A disc (square when square != 0) of colour fg, half-size r, centre (cx, cy), on bg. */
static void draw(uint8_t *img, int side, int fg, int bg, double cx, double cy, double r,
                 int square)
{
    for (int y = 0; y < side; y++)
        for (int x = 0; x < side; x++) {
            const double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
            const int in = square ? fabs(dx) < r && fabs(dy) < r : hypot(dx, dy) < r;
            memcpy(img + ((size_t)y * side + x) * 3, RGB[in ? fg : bg], 3);
        }
}

static void check_parse(void)
{
    shapes_scene s;
    CHECK(shapes_scene_parse("a large red circle in the center on a blue background", &s));
    CHECK(s.colour == 0 && s.background == 2 && s.shape == 0 && s.size == 1 && s.place == 0);
    CHECK(shapes_scene_parse("A small Yellow triangle in the top left corner on a black "
                             "background", &s));
    CHECK(s.colour == 3 && s.background == 7 && s.shape == 2 && s.size == 0 && s.place == 1);
    CHECK(shapes_scene_parse("an orange background with a big white square in the bottom right "
                             "corner", &s));
    CHECK(s.colour == 6 && s.background == 4 && s.shape == 1 && s.size == 1 && s.place == 4);
    CHECK(shapes_scene_parse("small purple diamond on a green background, in the bottom left "
                             "corner", &s));
    CHECK(s.colour == 5 && s.background == 1 && s.shape == 3 && s.size == 0 && s.place == 3);
    CHECK(shapes_scene_parse("a big blue circle at the top right, yellow background", &s));
    CHECK(s.colour == 2 && s.background == 3 && s.place == 2);
    CHECK(shapes_scene_parse("a small red circle in the bottom left corner on purple", &s));
    CHECK(s.colour == 0 && s.background == 5 && s.place == 3);
    /* not checkable: size or place left out, no background, nonsense */
    CHECK(!shapes_scene_parse("a red circle on a blue background", &s));
    CHECK(s.colour == 0 && s.background == 2 && s.size == SHAPES_UNKNOWN);
    CHECK(!shapes_scene_parse("a large red circle in the center", &s));
    CHECK(!shapes_scene_parse("a large red circle in the top corner on a blue background", &s));
    CHECK(!shapes_scene_parse("a lighthouse at dusk", &s));
    CHECK(!shapes_scene_parse(NULL, &s));
    CHECK(!strcmp(shapes_colour_name(4), "orange") && !strcmp(shapes_colour_name(9), "?"));
}

static void check_images(void)
{
    uint8_t *img = malloc((size_t)SIDE * SIDE * 3);
    uint8_t *big = malloc((size_t)2 * SIDE * 2 * SIDE * 3);
    CHECK(img && big);
    if (!img || !big)
        return;
    shapes_scene s;
    shapes_verdict v;
    /* small triangle-sized disc at the top left corner (centre 17 + 8 = 25), jittered */
    CHECK(shapes_scene_parse("a small green circle in the top left corner on a white "
                             "background", &s));
    draw(img, SIDE, 1, 6, 25 + JITTER, 25 - JITTER, 17 * 0.55, 0);
    shapes_check(img, SIDE, SIDE, &s, &v);
    CHECK(v.right && v.shape_colour == 1 && v.background_colour == 6);
    CHECK(v.shape_share == 1.0 && v.background_share == 1.0);
    /* the wrong colours, or the shape somewhere else */
    draw(img, SIDE, 0, 6, 25, 25, 17, 0);
    shapes_check(img, SIDE, SIDE, &s, &v);
    CHECK(!v.right && v.shape_colour == 0 && v.background_colour == 6);
    draw(img, SIDE, 1, 7, 25, 25, 17, 0);
    shapes_check(img, SIDE, SIDE, &s, &v);
    CHECK(!v.right && v.background_colour == 7);
    draw(img, SIDE, 1, 6, 103, 103, 17, 0); /* bottom right instead */
    shapes_check(img, SIDE, SIDE, &s, &v);
    CHECK(!v.right && v.shape_colour == 6);
    /* a large square in the center on a 256 x 256 image (the check scales) */
    CHECK(shapes_scene_parse("a large black square in the center on a yellow background", &s));
    draw(big, 2 * SIDE, 7, 3, SIDE, SIDE, 2 * 30 * 0.88, 1);
    shapes_check(big, 2 * SIDE, 2 * SIDE, &s, &v);
    CHECK(v.right);
    free(img);
    free(big);
}

int main(void)
{
    check_parse();
    check_images();
    TEST_MAIN_END();
}
