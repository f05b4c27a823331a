/* png_compare.c — print the largest per-channel difference between two PNG files' pixels
 * (0..255) and exit 0 when it is at most TOL (argv[3], default 1), 1 when larger or when the
 * sizes differ, 2 when a file cannot be read. Used by the pipeline tests to compare N-rank
 * images with the 1-rank image.
 *   usage: png_compare A.png B.png [TOL] [--at X,Y] [--mean MEAN_TOL]
 * --at X,Y compares B with the window of A of B's size whose top-left pixel is (X, Y) (a tile
 * of a contact sheet); --mean also prints the mean absolute difference and requires it to be
 * at most MEAN_TOL (for lossy video frames; TOL then bounds the largest as usual). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/png_reader.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: png_compare A.png B.png [TOL] [--at X,Y] [--mean MEAN_TOL]\n");
        return 2;
    }
    int tol = 1, x0 = 0, y0 = 0, windowed = 0;
    double mean_tol = -1;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--at") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%d,%d", &x0, &y0) != 2 || x0 < 0 || y0 < 0) {
                fprintf(stderr, "png_compare: --at X,Y: '%s'\n", argv[i]);
                return 2;
            }
            windowed = 1;
        } else if (strcmp(argv[i], "--mean") == 0 && i + 1 < argc) {
            mean_tol = atof(argv[++i]);
        } else {
            tol = atoi(argv[i]);
        }
    }
    cpdit_png_image a = {0}, b = {0};
    cpdit_error err;
    if (cpdit_png_read_rgb8(argv[1], &a, &err) || cpdit_png_read_rgb8(argv[2], &b, &err)) {
        fprintf(stderr, "png_compare: %s: %s\n", err.where, err.what);
        return 2;
    }
    int status = 0;
    if (windowed ? x0 + b.width > a.width || y0 + b.height > a.height
                 : a.width != b.width || a.height != b.height) {
        printf("size %dx%d vs %dx%d%s\n", a.width, a.height, b.width, b.height,
               windowed ? " at the window's corner" : "");
        status = 1;
    } else {
        int worst = 0;
        double sum = 0;
        for (int y = 0; y < b.height; y++) {
            const unsigned char *pa = a.rgb + ((size_t)(y0 + y) * a.width + x0) * 3;
            const unsigned char *pb = b.rgb + (size_t)y * b.width * 3;
            for (int k = 0; k < b.width * 3; k++) {
                int d = abs((int)pa[k] - (int)pb[k]);
                sum += d;
                if (d > worst)
                    worst = d;
            }
        }
        const double mean = sum / ((double)b.width * b.height * 3);
        printf("max pixel difference %d (tolerance %d)", worst, tol);
        if (mean_tol >= 0)
            printf(", mean %.3f (tolerance %g)", mean, mean_tol);
        printf("\n");
        status = worst > tol || (mean_tol >= 0 && mean > mean_tol);
    }
    cpdit_png_image_free(&a);
    cpdit_png_image_free(&b);
    return status;
}
