/* wan_bench.c — time the Wan transformer forward on one rank, next to the GEMM rates measured
 * in the same process (not part of make check; for PERFORMANCE.md).
 *
 *   tests/wan_bench --model DIR [--frames F --height H --width W] [--text L] [--batch B]
 *                   [--reps K] [--weight-format native|fp32] [--backend NAME]
 *
 * Random inputs of the given latent size (default 1 x 60 x 104: one 480p latent frame, 1560
 * video tokens with patch 1x2x2) and L text tokens (default 512). One warm-up forward, then K
 * (default 3) timed ones, each followed by an SGEMM and a bf16 GEMM measurement (n = 2048), so
 * that the rates see the same machine load. Prints one line: best forward seconds, FLOPs
 * (wan_transformer_linear_flops + attention: self 4 B S^2 E and cross 4 B S L E per block),
 * GFLOP/s, the best SGEMM and bf16 GEMM rates and the forward's share of each.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/host_runtime.h"
#include "lib/models/wan/wan_latents.h"
#include "lib/models/wan/wan_transformer.h"

#define BENCH_GEMM_N 2048 /* the square GEMMs' size */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

/* GFLOP/s of the CPU backend's linear with a packed bf16 weight, (n, n) x (n, n), best of 2. */
static double bf16_gemm_gflops(int n)
{
    const cpdit_backend *be = cpdit_backend_cpu();
    uint16_t *wb = malloc((size_t)n * n * sizeof(uint16_t));
    float *x = malloc((size_t)n * n * sizeof(float)), *y = malloc((size_t)n * n * sizeof(float));
    cpdit_weight *wt = NULL;
    double best = 1e30;
    unsigned seed = 3;
    if (wb && x && y) {
        for (size_t i = 0; i < (size_t)n * n; i++) {
            wb[i] = cpdit_f32_to_bf16(frand(&seed));
            x[i] = frand(&seed);
        }
        cpdit_weight_desc d = {.dtype = CPDIT_DTYPE_BF16, .rows = n, .cols = n, .data = wb};
        if (!be->weight_create(&wt, &d, NULL)) {
            for (int r = 0; r < 3; r++) { /* the first is a warm-up */
                const double t0 = now_s();
                be->linear(cpdit_host_buf(y), n, cpdit_host_buf(x), n, wt, NULL, n, n, n, 0,
                           NULL);
                const double t = now_s() - t0;
                if (r > 0 && t < best)
                    best = t;
            }
            be->weight_free(wt);
        }
    }
    free(wb);
    free(x);
    free(y);
    return best < 1e30 ? 2.0 * n * n * (double)n / best * 1e-9 : 0.0;
}

int main(int argc, char **argv)
{
    cpdit_host_runtime_init(argc, argv);
    const char *model = NULL, *format = "native", *backend = NULL;
    int F = 1, H = 60, W = 104, L = 512, B = 1, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--model")) model = v;
        else if (!strcmp(k, "--frames")) F = atoi(v);
        else if (!strcmp(k, "--height")) H = atoi(v);
        else if (!strcmp(k, "--width")) W = atoi(v);
        else if (!strcmp(k, "--text")) L = atoi(v);
        else if (!strcmp(k, "--batch")) B = atoi(v);
        else if (!strcmp(k, "--reps")) reps = atoi(v);
        else if (!strcmp(k, "--weight-format")) format = v;
        else if (!strcmp(k, "--backend")) backend = v;
        else { fprintf(stderr, "wan_bench: unknown option %s\n", k); return 2; }
    }
    if (!model || B < 1 || L < 1 || reps < 1 || cpdit_weight_format_from_name(format) < 0) {
        fprintf(stderr, "usage: wan_bench --model DIR [--frames F --height H --width W] "
                        "[--text L] [--batch B] [--reps K] [--weight-format native|fp32]\n");
        return 2;
    }
    cpdit_error err;
    cpdit_error_clear(&err);
    const cpdit_backend *be = NULL;
    wan_transformer *m = NULL;
    int pf = 0, ph = 0, pw = 0;
    cpdit_status st = cpdit_backend_resolve(backend, &be, &err);
    if (!st)
        st = wan_transformer_open(&m, model, &err);
    if (!st) {
        wan_transformer_set_weight_format(
            m, (cpdit_weight_format)cpdit_weight_format_from_name(format));
        st = wan_transformer_set_backend(m, be, &err);
    }
    if (!st)
        st = wan_transformer_load_weights(m, &err);
    if (!st)
        st = wan_token_grid(wan_transformer_config_of(m), F, H, W, &pf, &ph, &pw, &err);
    if (st) {
        fprintf(stderr, "wan_bench: %s: %s\n", err.where, err.what);
        wan_transformer_close(m);
        return 1;
    }
    const wan_transformer_config *c = wan_transformer_config_of(m);
    const int S = pf * ph * pw;
    unsigned seed = 1;
    float *hs = malloc(sizeof(float) * ((size_t)B * S * c->patch_dim + 1));
    float *pos = malloc(sizeof(float) * (size_t)S * 3);
    float *ehs = malloc(sizeof(float) * (size_t)B * L * c->text_dim);
    float *out = malloc(sizeof(float) * ((size_t)B * S * c->out_dim + 1));
    float *ts = malloc(sizeof(float) * (size_t)B);
    for (size_t i = 0; i < (size_t)B * S * c->patch_dim; i++)
        hs[i] = frand(&seed);
    for (size_t i = 0; i < (size_t)B * L * c->text_dim; i++)
        ehs[i] = frand(&seed);
    for (int b = 0; b < B; b++)
        ts[b] = 500.0f + b;
    wan_token_positions(pos, pf, ph, pw);
    wan_inputs in = {B, S, hs, pos, ts, L, ehs, NULL};
    double best = 1e30, sgemm = 0, bf16mm = 0;
    for (int r = -1; !st && r < reps; r++) { /* r = -1: warm-up */
        const double t0 = now_s();
        st = wan_transformer_forward(m, be, NULL, &in, out, &err);
        const double t = now_s() - t0;
        if (r >= 0 && t < best)
            best = t;
        if (r >= 0) {
            const double s = cpdit_host_sgemm_gflops(BENCH_GEMM_N, 2);
            const double b16 = bf16_gemm_gflops(BENCH_GEMM_N);
            sgemm = s > sgemm ? s : sgemm;
            bf16mm = b16 > bf16mm ? b16 : bf16mm;
        }
    }
    if (!st) {
        const double E = c->inner_dim;
        const double lin = wan_transformer_linear_flops(m, B, S, L);
        const double att =
            c->num_layers * 4.0 * B * (double)S * E * ((double)S + (double)L); /* self + cross */
        const double rate = (lin + att) / best * 1e-9;
        printf("wan_bench: %d layers, inner %d, ffn %d, text_dim %d; batch %d, %d video tokens "
               "(%dx%dx%d) + %d text; weights %s on %s\n"
               "wan_bench: forward %.3f s (best of %d); %.1f GFLOP linear + %.1f GFLOP "
               "attention = %.1f GFLOP/s; sgemm %.1f GFLOP/s (%.0f%%), bf16 gemm %.1f GFLOP/s "
               "(%.0f%%)\n",
               c->num_layers, c->inner_dim, c->ffn_dim, c->text_dim, B, S, pf, ph, pw, L, format,
               be->name, best, reps, lin * 1e-9, att * 1e-9, rate, sgemm,
               sgemm > 0 ? 100 * rate / sgemm : 0.0, bf16mm,
               bf16mm > 0 ? 100 * rate / bf16mm : 0.0);
    } else {
        fprintf(stderr, "wan_bench: %s: %s\n", err.where, err.what);
    }
    free(hs);
    free(pos);
    free(ehs);
    free(out);
    free(ts);
    wan_transformer_close(m);
    return st ? 1 : 0;
}
