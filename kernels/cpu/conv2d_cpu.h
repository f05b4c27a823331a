/* conv2d_cpu.h — 2-D convolution, stride 1, zero "same" padding, as the VAE uses it
 * (torch.nn.Conv2d(cin, cout, k, padding=k // 2) with odd k: 3x3 and 1x1), and the nearest 2x
 * upsampling of its Upsample2D.
 *
 * Layout: in (B, Cin, H, W), weight (Cout, Cin, K, K), bias (Cout) or NULL, out (B, Cout, H, W),
 * fp32, row-major, contiguous. out must not alias in.
 *
 * conv2d_cpu            im2col + cblas_sgemm; the column matrix is built for a band of output
 *                       rows at a time so that it stays under CONV2D_COL_BYTES_MAX whatever the
 *                       image size (a 1024x1024 image with 128 channels would need 4.5 GB at
 *                       once). 1x1 convolutions are one GEMM on the input directly.
 *                       The column buffer lives in a conv2d_workspace that callers keep across
 *                       calls (a fresh 64 MB buffer per call costs more in page faults than the
 *                       copy itself); NULL means a temporary one.
 * conv2d_cpu_reference  the direct seven-loop definition (double accumulation), for tests.
 * Errors: CPDIT_ERR_INPUT for non-positive sizes or an even K, CPDIT_ERR_RUNTIME when the
 * column buffer cannot be allocated.
 */
#ifndef CPDIT_CONV2D_CPU_H
#define CPDIT_CONV2D_CPU_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Upper bound of the im2col buffer (bytes); at least one output row is always processed. */
#define CONV2D_COL_BYTES_MAX ((size_t)64 << 20)

/* A reusable column buffer: zero-initialise, pass to any number of calls, then free. */
typedef struct conv2d_workspace {
    float *col;
    size_t bytes;
} conv2d_workspace;

void conv2d_workspace_free(conv2d_workspace *ws);

cpdit_status conv2d_cpu(float *out, const float *in, const float *weight, const float *bias,
                        int B, int Cin, int Cout, int H, int W, int K, conv2d_workspace *ws,
                        cpdit_error *err);

/* conv2d_cpu with an explicit column-buffer bound (bytes; tests use a small one to exercise
 * the row bands). */
cpdit_status conv2d_cpu_banded(float *out, const float *in, const float *weight,
                               const float *bias, int B, int Cin, int Cout, int H, int W, int K,
                               size_t col_bytes_max, conv2d_workspace *ws, cpdit_error *err);

cpdit_status conv2d_cpu_reference(float *out, const float *in, const float *weight,
                                  const float *bias, int B, int Cin, int Cout, int H, int W,
                                  int K, cpdit_error *err);

/* out (N, 2H, 2W) = nearest-neighbour 2x upsampling of in (N, H, W) (N = B·C):
 * out[n, y, x] = in[n, y / 2, x / 2]. */
void upsample_nearest2x_cpu(float *out, const float *in, size_t N, int H, int W);

#ifdef __cplusplus
}
#endif
#endif
