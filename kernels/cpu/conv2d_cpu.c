/* conv2d_cpu.c — "same" 2-D convolution through im2col + SGEMM, its reference, and nearest 2x
 * upsampling (see conv2d_cpu.h). */
#include "kernels/cpu/conv2d_cpu.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

static cpdit_status check_sizes(int B, int Cin, int Cout, int H, int W, int K, cpdit_error *err)
{
    if (B < 1 || Cin < 1 || Cout < 1 || H < 1 || W < 1 || K < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "conv2d",
                               "sizes must be positive (B %d, Cin %d, Cout %d, H %d, W %d, K %d)",
                               B, Cin, Cout, H, W, K);
    if (K % 2 == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "conv2d",
                               "kernel size %d is even; \"same\" padding needs an odd size", K);
    return CPDIT_OK;
}

/* out_b (Cout, HW) = bias broadcast over each channel's plane (or 0). */
static void add_bias(float *out_b, const float *bias, int Cout, size_t HW)
{
    if (!bias)
        return;
    for (int co = 0; co < Cout; co++) {
        float *o = out_b + (size_t)co * HW;
        const float bv = bias[co];
        for (size_t i = 0; i < HW; i++)
            o[i] += bv;
    }
}

/* col (Cin·K·K, rows·W): col[(ci·K + ky)·K + kx][r·W + x] = in_b[ci][y0 + r + ky - p][x + kx - p]
 * (0 outside the image), p = K/2. */
static void im2col_band(float *col, const float *in_b, int Cin, int H, int W, int K, int y0,
                        int rows)
{
    const int p = K / 2;
    const size_t band = (size_t)rows * W;
    for (int ci = 0; ci < Cin; ci++) {
        const float *plane = in_b + (size_t)ci * H * W;
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                float *dst = col + ((size_t)(ci * K + ky) * K + kx) * band;
                const int x_lo = p - kx > 0 ? p - kx : 0;               /* first x inside */
                const int x_hi = W + p - kx < W ? W + p - kx : W;        /* one past last */
                for (int r = 0; r < rows; r++) {
                    const int ys = y0 + r + ky - p;
                    float *d = dst + (size_t)r * W;
                    if (ys < 0 || ys >= H || x_lo >= x_hi) {
                        memset(d, 0, (size_t)W * sizeof *d);
                        continue;
                    }
                    const float *s = plane + (size_t)ys * W;
                    for (int x = 0; x < x_lo; x++)
                        d[x] = 0.0f;
                    memcpy(d + x_lo, s + x_lo + kx - p, (size_t)(x_hi - x_lo) * sizeof *d);
                    for (int x = x_hi; x < W; x++)
                        d[x] = 0.0f;
                }
            }
    }
}

void conv2d_workspace_free(conv2d_workspace *ws)
{
    if (!ws)
        return;
    free(ws->col);
    ws->col = NULL;
    ws->bytes = 0;
}

cpdit_status conv2d_cpu(float *out, const float *in, const float *weight, const float *bias,
                        int B, int Cin, int Cout, int H, int W, int K, conv2d_workspace *ws,
                        cpdit_error *err)
{
    return conv2d_cpu_banded(out, in, weight, bias, B, Cin, Cout, H, W, K, CONV2D_COL_BYTES_MAX,
                             ws, err);
}

cpdit_status conv2d_cpu_banded(float *out, const float *in, const float *weight,
                               const float *bias, int B, int Cin, int Cout, int H, int W, int K,
                               size_t col_bytes_max, conv2d_workspace *ws, cpdit_error *err)
{
    cpdit_status st = check_sizes(B, Cin, Cout, H, W, K, err);
    if (st != CPDIT_OK)
        return st;
    const size_t HW = (size_t)H * W;
    const int depth = Cin * K * K; /* GEMM inner dimension */
    if (K == 1) {
        for (int b = 0; b < B; b++) {
            float *o = out + (size_t)b * Cout * HW;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Cout, (int)HW, Cin, 1.0f,
                        weight, Cin, in + (size_t)b * Cin * HW, (int)HW, 0.0f, o, (int)HW);
            add_bias(o, bias, Cout, HW);
        }
        return CPDIT_OK;
    }
    const size_t row_bytes = (size_t)depth * W * sizeof(float);
    const size_t fit = col_bytes_max / row_bytes;
    int band = fit > (size_t)H ? H : (int)fit;
    if (band < 1)
        band = 1;
    conv2d_workspace temp = {NULL, 0};
    conv2d_workspace *w = ws ? ws : &temp;
    const size_t need = (size_t)band * row_bytes;
    if (w->bytes < need) {
        free(w->col);
        w->col = malloc(need);
        w->bytes = w->col ? need : 0;
        if (!w->col)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "conv2d",
                                   "out of memory for a %zu-byte column buffer", need);
    }
    float *col = w->col;
    for (int b = 0; b < B; b++) {
        const float *in_b = in + (size_t)b * Cin * HW;
        float *out_b = out + (size_t)b * Cout * HW;
        for (int y0 = 0; y0 < H; y0 += band) {
            const int rows = H - y0 < band ? H - y0 : band;
            const int n = rows * W;
            im2col_band(col, in_b, Cin, H, W, K, y0, rows);
            /* out_b[:, y0·W : y0·W + n] (row stride HW) = weight (Cout x depth) · col */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Cout, n, depth, 1.0f,
                        weight, depth, col, n, 0.0f, out_b + (size_t)y0 * W, (int)HW);
        }
        add_bias(out_b, bias, Cout, HW);
    }
    conv2d_workspace_free(&temp);
    return CPDIT_OK;
}

cpdit_status conv2d_cpu_reference(float *out, const float *in, const float *weight,
                                  const float *bias, int B, int Cin, int Cout, int H, int W,
                                  int K, cpdit_error *err)
{
    cpdit_status st = check_sizes(B, Cin, Cout, H, W, K, err);
    if (st != CPDIT_OK)
        return st;
    const int p = K / 2;
    for (int b = 0; b < B; b++)
        for (int co = 0; co < Cout; co++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    double acc = bias ? bias[co] : 0.0;
                    for (int ci = 0; ci < Cin; ci++)
                        for (int ky = 0; ky < K; ky++)
                            for (int kx = 0; kx < K; kx++) {
                                const int ys = y + ky - p, xs = x + kx - p;
                                if (ys < 0 || ys >= H || xs < 0 || xs >= W)
                                    continue;
                                acc += (double)weight[(((size_t)co * Cin + ci) * K + ky) * K + kx] *
                                       in[(((size_t)b * Cin + ci) * H + ys) * W + xs];
                            }
                    out[(((size_t)b * Cout + co) * H + y) * W + x] = (float)acc;
                }
    return CPDIT_OK;
}

void upsample_nearest2x_cpu(float *out, const float *in, size_t N, int H, int W)
{
    const size_t W2 = 2 * (size_t)W;
    for (size_t n = 0; n < N; n++) {
        const float *s = in + n * H * W;
        float *d = out + n * 4 * H * W;
        for (int y = 0; y < H; y++) {
            float *row = d + (size_t)2 * y * W2;
            for (int x = 0; x < W; x++)
                row[2 * x] = row[2 * x + 1] = s[(size_t)y * W + x];
            memcpy(row + W2, row, W2 * sizeof *row); /* the odd output row repeats it */
        }
    }
}
