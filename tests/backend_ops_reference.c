/* backend_ops_reference.c — plain C references of the kernel table's op cases
 * (kernels/backend_ops.h), in double precision, written from the ops' definitions in
 * kernels/backend.h and PyTorch's documentation, not from the kernels' code. Input layouts
 * are listed at the top of kernels/backend_ops.c. Each reference writes n_out doubles.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "tests/backend_ops_reference.h"

#define EPS 1e-6

static void ref_linear(const int *d, const float *in, double *out)
{
    const int M = d[0], K = d[1], N = d[2];
    const float *x = in, *w = x + (size_t)M * K, *b = w + (size_t)N * K;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = b[j];
            for (int k = 0; k < K; k++)
                s += (double)x[(size_t)i * K + k] * w[(size_t)j * K + k];
            out[(size_t)i * N + j] = s;
        }
}

static void ref_linear_acc(const int *d, const float *in, double *out)
{
    const int M = d[0], K = d[1], N = d[2];
    const float *x = in, *w = x + (size_t)M * (K + 3), *y0 = w + (size_t)N * K;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N + 2; j++) {
            double s = y0[(size_t)i * (N + 2) + j];
            for (int k = 0; j < N && k < K; k++)
                s += (double)x[(size_t)i * (K + 3) + k] * w[(size_t)j * K + k];
            out[(size_t)i * (N + 2) + j] = s;
        }
}

/* gelu_tanh(x W^T + b) */
static void ref_linear_act_gelu_tanh(const int *d, const float *in, double *out)
{
    ref_linear(d, in, out);
    for (size_t i = 0; i < (size_t)d[0] * d[2]; i++) {
        const double x = out[i];
        out[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
}

/* LayerNorm of rows with optional affine (g, b NULL: none); torch's biased variance. */
static void layer_norm(const int *d, const float *x, const float *g, const float *b,
                       double *out)
{
    const int R = d[0], C = d[1];
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * C;
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++)
            mean += xr[c];
        mean /= C;
        for (int c = 0; c < C; c++)
            var += (xr[c] - mean) * (xr[c] - mean);
        var /= C;
        for (int c = 0; c < C; c++)
            out[(size_t)r * C + c] =
                (xr[c] - mean) / sqrt(var + EPS) * (g ? g[c] : 1.0) + (b ? b[c] : 0.0);
    }
}
static void ref_layer_norm(const int *d, const float *in, double *out)
{
    const size_t n = (size_t)d[0] * d[1];
    layer_norm(d, in, in + n, in + n + d[1], out);
}
static void ref_layer_norm_plain(const int *d, const float *in, double *out)
{
    layer_norm(d, in, NULL, NULL, out);
}

static void ref_rms_norm(const int *d, const float *in, double *out)
{
    const int R = d[0], C = d[1];
    const float *w = in + (size_t)R * C;
    for (int r = 0; r < R; r++) {
        const float *xr = in + (size_t)r * C;
        double ms = 0;
        for (int c = 0; c < C; c++)
            ms += (double)xr[c] * xr[c];
        ms /= C;
        for (int c = 0; c < C; c++)
            out[(size_t)r * C + c] = xr[c] / sqrt(ms + EPS) * w[c];
    }
}

/* diffusers apply_rotary_emb, use_real_unbind_dim=-1: pairs (x[2i], x[2i+1]) as (re, im). */
static void ref_rope(const int *d, const float *in, double *out)
{
    const int S = d[0], H = d[1], D = d[2];
    const size_t n = (size_t)S * H * D;
    const float *cs = in + n, *sn = cs + (size_t)S * D;
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < D; i += 2) {
                const size_t o = ((size_t)s * H + h) * D + i, t = (size_t)s * D + i;
                const double re = in[o], im = in[o + 1];
                out[o] = re * cs[t] - im * sn[t];
                out[o + 1] = im * cs[t + 1] + re * sn[t + 1];
            }
}

static double sigmoid(double z)
{
    return 1.0 / (1.0 + exp(-z));
}
static void ref_gelu_tanh(const int *d, const float *in, double *out)
{
    for (int i = 0; i < d[0]; i++) {
        const double x = in[i];
        out[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
}
static void ref_gelu_erf(const int *d, const float *in, double *out)
{
    for (int i = 0; i < d[0]; i++)
        out[i] = 0.5 * in[i] * (1.0 + erf(in[i] / sqrt(2.0)));
}
static void ref_quick_gelu(const int *d, const float *in, double *out)
{
    for (int i = 0; i < d[0]; i++)
        out[i] = in[i] * sigmoid(1.702 * in[i]);
}
static void ref_silu(const int *d, const float *in, double *out)
{
    for (int i = 0; i < d[0]; i++)
        out[i] = in[i] * sigmoid(in[i]);
}
static void ref_relu(const int *d, const float *in, double *out)
{
    for (int i = 0; i < d[0]; i++)
        out[i] = in[i] > 0 ? in[i] : 0.0;
}
static void ref_add(const int *d, const float *in, double *out)
{
    for (int i = 0; i < d[0]; i++)
        out[i] = (double)in[i] + in[d[0] + i];
}
static void ref_mul(const int *d, const float *in, double *out)
{
    for (int i = 0; i < d[0]; i++)
        out[i] = (double)in[i] * in[d[0] + i];
}

static void ref_embedding(const int *d, const float *in, double *out)
{
    const int V = d[0], C = d[1], n = d[2];
    const float *ids = in + (size_t)V * C;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < C; c++)
            out[(size_t)i * C + c] = in[(size_t)ids[i] * C + c];
}

static void ref_modulate(const int *d, const float *in, double *out)
{
    const int R = d[0], C = d[1];
    const float *shift = in + (size_t)R * C, *scale = shift + C;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            out[(size_t)r * C + c] = in[(size_t)r * C + c] * (1.0 + scale[c]) + shift[c];
}

static void ref_gated_residual(const int *d, const float *in, double *out)
{
    const int R = d[0], C = d[1];
    const float *h0 = in, *x = h0 + (size_t)R * (C + 1), *gate = x + (size_t)R * (C + 3);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C + 1; c++)
            out[(size_t)r * (C + 1) + c] =
                h0[(size_t)r * (C + 1) + c] +
                (c < C ? (double)gate[c] * x[(size_t)r * (C + 3) + c] : 0.0);
}

static void ref_copy_rows(const int *d, const float *in, double *out)
{
    const int R = d[0], C = d[1];
    const float *src = in + (size_t)R * (C + 1);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C + 1; c++)
            out[(size_t)r * (C + 1) + c] =
                c < C ? src[(size_t)r * (C + 2) + c] : in[(size_t)r * (C + 1) + c];
}

static void ref_lse_merge(const int *d, const float *in, double *out)
{
    const size_t R = (size_t)d[0], D = (size_t)d[1];
    const float *oa = in, *la = oa + R * D, *ob = la + R, *lb = ob + R * D;
    for (size_t r = 0; r < R; r++) {
        const double a = la[r], b = lb[r];
        const double l = a == -INFINITY ? b : b == -INFINITY ? a : log(exp(a) + exp(b));
        for (size_t c = 0; c < D; c++)
            out[r * D + c] = (a == -INFINITY ? 0.0 : oa[r * D + c] * exp(a - l)) +
                             (b == -INFINITY ? 0.0 : ob[r * D + c] * exp(b - l));
        out[R * D + r] = l;
    }
}

/* Softmax attention of one (b, h, query i) over keys j < n: q row, k/v rows at kj(j), vj(j).
 * Writes D outputs and returns the log-sum-exp (-inf when n == 0). */
static double attend_row(const float *q, const float *k, const float *v, size_t ldkv, int n,
                         int D, double scale, const float *bias, double *o)
{
    double m = -INFINITY, l = 0;
    for (int c = 0; c < D; c++)
        o[c] = 0;
    if (n == 0)
        return -INFINITY;
    for (int j = 0; j < n; j++) { /* pass 1: the maximum score */
        double s = 0;
        for (int c = 0; c < D; c++)
            s += (double)q[c] * k[(size_t)j * ldkv + c];
        s = s * scale + (bias ? bias[j] : 0.0);
        m = s > m ? s : m;
    }
    for (int j = 0; j < n; j++) { /* pass 2: weights and weighted values */
        double s = 0;
        for (int c = 0; c < D; c++)
            s += (double)q[c] * k[(size_t)j * ldkv + c];
        const double p = exp(s * scale + (bias ? bias[j] : 0.0) - m);
        l += p;
        for (int c = 0; c < D; c++)
            o[c] += p * v[(size_t)j * ldkv + c];
    }
    for (int c = 0; c < D; c++)
        o[c] /= l;
    return m + log(l);
}

/* q (B,Sq,H,D) ld_q, k/v (B,Skv,H,D) ld_kv; out (B,Sq,H,D) contiguous then lse (B,Sq,H). */
static void attention(int B, int Sq, int Skv, int H, int D, const float *q, size_t ldq,
                      const float *k, const float *v, size_t ldkv, const float *bias,
                      int causal, double *out)
{
    const double scale = 1.0 / sqrt((double)D);
    double *lse = out + (size_t)B * Sq * H * D;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Sq; i++)
            for (int h = 0; h < H; h++) {
                const size_t oi = (((size_t)b * Sq + i) * H + h);
                lse[oi] = attend_row(q + ((size_t)b * Sq + i) * ldq + (size_t)h * D,
                                     k + (size_t)b * Skv * ldkv + (size_t)h * D,
                                     v + (size_t)b * Skv * ldkv + (size_t)h * D, ldkv,
                                     causal ? i + 1 : Skv, D, scale,
                                     bias ? bias + ((size_t)h * Sq + i) * Skv : NULL,
                                     out + oi * D);
            }
}
static void ref_attention(const int *d, const float *in, double *out)
{
    const size_t row = (size_t)d[3] * d[4];
    const size_t nq = (size_t)d[0] * d[1] * row, nk = (size_t)d[0] * d[2] * row;
    attention(d[0], d[1], d[2], d[3], d[4], in, row, in + nq, in + nq + nk, row, NULL, 0, out);
}
static void ref_attention_causal(const int *d, const float *in, double *out)
{
    const size_t row = (size_t)d[2] * d[3];
    attention(d[0], d[1], d[1], d[2], d[3], in, 3 * row, in + row, in + 2 * row, 3 * row, NULL,
              1, out);
}
static void ref_attention_bias(const int *d, const float *in, double *out)
{
    const size_t row = (size_t)d[3] * d[4];
    const size_t nq = (size_t)d[0] * d[1] * row, nk = (size_t)d[0] * d[2] * row;
    attention(d[0], d[1], d[2], d[3], d[4], in, row, in + nq, in + nq + nk, row,
              in + nq + 2 * nk, 0, out);
}

/* ------------------------------------------------------------------ VAE section */

/* torch.nn.Conv2d(Cin, Cout, K, padding = K / 2) on one band of NHWC rows: xr(r, c, ci) reads
 * the band with its halo rows (K = 3: x holds rows -1 .. rows), zero outside the columns. */
static void conv_ref(const int *d, const float *in, int K, double *out)
{
    const int rows = d[0], W = d[1], Cin = d[2], Cout = d[3], pad = K / 2;
    const float *x = in, *w = x + (size_t)(rows + 2 * pad) * W * Cin;
    const float *b = w + (size_t)Cout * Cin * K * K;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < W; c++)
            for (int o = 0; o < Cout; o++) {
                double s = b[o];
                for (int dy = 0; dy < K; dy++)
                    for (int dx = 0; dx < K; dx++) {
                        const int xc = c + dx - pad;
                        if (xc < 0 || xc >= W)
                            continue;
                        const int xr = r + dy; /* row r + dy - pad of the image, stored +pad */
                        for (int ci = 0; ci < Cin; ci++)
                            s += (double)w[(((size_t)o * Cin + ci) * K + dy) * K + dx] *
                                 x[((size_t)xr * W + xc) * Cin + ci];
                    }
                out[((size_t)r * W + c) * Cout + o] = s;
            }
}
static void ref_conv3(const int *d, const float *in, double *out)
{
    conv_ref(d, in, 3, out);
}
static void ref_conv1(const int *d, const float *in, double *out)
{
    conv_ref(d, in, 1, out);
}

/* torch.nn.GroupNorm(G, C, eps 1e-6) over all pixels, channels of group g = [g C/G, (g+1) C/G),
 * biased variance; then SiLU when asked. */
static void group_norm_ref(const int *d, const float *in, int silu, double *out)
{
    const size_t P = (size_t)d[0];
    const int C = d[1], G = d[2], cg = C / G;
    const float *x = in, *gamma = x + P * C, *beta = gamma + C;
    for (int g = 0; g < G; g++) {
        double sum = 0, sq = 0;
        for (size_t p = 0; p < P; p++)
            for (int c = g * cg; c < (g + 1) * cg; c++)
                sum += x[p * C + c];
        const double n = (double)P * cg, mean = sum / n;
        for (size_t p = 0; p < P; p++)
            for (int c = g * cg; c < (g + 1) * cg; c++)
                sq += (x[p * C + c] - mean) * (x[p * C + c] - mean);
        const double inv = 1.0 / sqrt(sq / n + EPS);
        for (size_t p = 0; p < P; p++)
            for (int c = g * cg; c < (g + 1) * cg; c++) {
                double v = (x[p * C + c] - mean) * inv * gamma[c] + beta[c];
                out[p * C + c] = silu ? v / (1.0 + exp(-v)) : v;
            }
    }
}
static void ref_group_norm(const int *d, const float *in, double *out)
{
    group_norm_ref(d, in, 0, out);
}
static void ref_group_norm_silu(const int *d, const float *in, double *out)
{
    group_norm_ref(d, in, 1, out);
}

/* F.interpolate(scale_factor=2, mode="nearest") in NHWC. */
static void ref_upsample2x(const int *d, const float *in, double *out)
{
    const int rows = d[0], W = d[1], C = d[2];
    for (int r = 0; r < 2 * rows; r++)
        for (int c = 0; c < 2 * W; c++)
            for (int ch = 0; ch < C; ch++)
                out[((size_t)r * 2 * W + c) * C + ch] = in[((size_t)(r / 2) * W + c / 2) * C + ch];
}

static void ref_transpose(const int *d, const float *in, double *out)
{
    const size_t rows = (size_t)d[0], cols = (size_t)d[1];
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            out[j * rows + i] = in[i * cols + j];
}

static const backend_op_reference refs[] = {
    {"linear", ref_linear},
    {"linear-bf16", ref_linear},
    {"linear-act-gelu-tanh", ref_linear_act_gelu_tanh},
    {"linear-acc-strided", ref_linear_acc},
    {"layer_norm", ref_layer_norm},
    {"layer_norm-plain", ref_layer_norm_plain},
    {"rms_norm", ref_rms_norm},
    {"rope", ref_rope},
    {"act-gelu-tanh", ref_gelu_tanh},
    {"act-gelu-erf", ref_gelu_erf},
    {"act-quick-gelu", ref_quick_gelu},
    {"act-silu", ref_silu},
    {"act-relu", ref_relu},
    {"add", ref_add},
    {"mul", ref_mul},
    {"embedding", ref_embedding},
    {"modulate", ref_modulate},
    {"gated_residual", ref_gated_residual},
    {"copy_rows", ref_copy_rows},
    {"lse_merge", ref_lse_merge},
    {"lse_merge_f32", ref_lse_merge}, /* the same parts, oa in fp32 */
    {"attention", ref_attention},
    {"attention-causal", ref_attention_causal},
    {"attention-bias", ref_attention_bias},
    {"conv2d-3x3", ref_conv3},
    {"conv2d-1x1", ref_conv1},
    {"group_norm", ref_group_norm},
    {"group_norm-silu", ref_group_norm_silu},
    {"upsample2x", ref_upsample2x},
    {"transpose", ref_transpose},
};

backend_op_reference_fn backend_op_reference_find(const char *name)
{
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        if (strcmp(refs[i].name, name) == 0)
            return refs[i].fn;
    return NULL;
}
