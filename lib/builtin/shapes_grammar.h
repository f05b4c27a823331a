/* shapes_grammar.h — the prompt grammar of builtin:shapes and a colour check of its images.
 *
 * The model was trained (tests/reference/train-builtin/shapes_data.py) on 128 x 128 images of one
 * shape on a plain background. A full prompt names every part of the scene:
 *     "a large red circle in the center on a blue background"
 *     "a small yellow triangle in the top left corner on a black background"
 *   colours  red green blue yellow orange purple white black (shape and background differ)
 *   shapes   circle square triangle diamond
 *   sizes    small large (also "big")
 *   places   center, top left, top right, bottom left, bottom right
 * shapes_scene_parse reads any prompt that contains those words (in any wording; the first
 * colour named is the shape's, the one before "background" the background's). Size and
 * place are optional for parsing: the check then only looks at the pixels it can place.
 *
 * shapes_check classifies an image: the majority palette colour (nearest in RGB) of the
 * pixels well inside where the shape must be, and of the pixels well away from it. The
 * geometry (radii, margins, jitter) is the training data's; images of other sizes are
 * scaled. */
#ifndef CPDIT_SHAPES_GRAMMAR_H
#define CPDIT_SHAPES_GRAMMAR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHAPES_N_COLOURS 8
#define SHAPES_UNKNOWN (-1)

typedef struct shapes_scene {
    int colour, background;  /* 0..7 (shapes_colour_name), SHAPES_UNKNOWN if not named */
    int shape;               /* 0..3: circle square triangle diamond, or SHAPES_UNKNOWN */
    int size;                /* 0 small, 1 large, SHAPES_UNKNOWN */
    int place;               /* 0 center, 1 top left, 2 top right, 3 bottom left,
                                4 bottom right, SHAPES_UNKNOWN */
} shapes_scene;

/* Parse prompt (ASCII, any case). Returns 1 when the shape's colour, the background's colour,
 * the size and the place are all named (the check can be made), 0 otherwise (sc is filled
 * with what was found). */
int shapes_scene_parse(const char *prompt, shapes_scene *sc);

const char *shapes_colour_name(int colour); /* "red", ...; "?" when out of range */

/* The verdict on one image. */
typedef struct shapes_verdict {
    int shape_colour, background_colour; /* majority palette colours of the two regions */
    double shape_share, background_share; /* their share of the region's pixels, 0..1 */
    int right;                           /* both equal the prompt's */
} shapes_verdict;

/* Classify rgb ((height, width, 3) uint8) for scene sc (shapes_scene_parse returned 1). */
void shapes_check(const uint8_t *rgb, int width, int height, const shapes_scene *sc,
                  shapes_verdict *v);

#ifdef __cplusplus
}
#endif
#endif
