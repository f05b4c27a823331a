/* png_compare.c — print the largest per-channel difference between two PNG files' pixels
 * (0..255) and exit 0 when it is at most TOL (argv[3], default 1), 1 when larger or when the
 * sizes differ, 2 when a file cannot be read. Used by the pipeline tests to compare N-rank
 * images with the 1-rank image.
 *   usage: png_compare A.png B.png [TOL] */
#include <stdio.h>
#include <stdlib.h>

#include "lib/io/png_reader.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: png_compare A.png B.png [TOL]\n");
        return 2;
    }
    const int tol = argc > 3 ? atoi(argv[3]) : 1;
    cpdit_png_image a = {0}, b = {0};
    cpdit_error err;
    if (cpdit_png_read_rgb8(argv[1], &a, &err) || cpdit_png_read_rgb8(argv[2], &b, &err)) {
        fprintf(stderr, "png_compare: %s: %s\n", err.where, err.what);
        return 2;
    }
    int status = 0;
    if (a.width != b.width || a.height != b.height) {
        printf("size %dx%d vs %dx%d\n", a.width, a.height, b.width, b.height);
        status = 1;
    } else {
        int worst = 0;
        const size_t n = (size_t)a.width * a.height * 3;
        for (size_t i = 0; i < n; i++) {
            int d = abs((int)a.rgb[i] - (int)b.rgb[i]);
            if (d > worst)
                worst = d;
        }
        printf("max pixel difference %d (tolerance %d)\n", worst, tol);
        status = worst > tol;
    }
    cpdit_png_image_free(&a);
    cpdit_png_image_free(&b);
    return status;
}
