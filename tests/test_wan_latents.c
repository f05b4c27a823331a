/* test_wan_latents.c — Wan's latent geometry and config, in plain C (no reference needed):
 *   - wan_patchify + a matrix product equals a direct Conv3d with kernel = stride = patch
 *     (weights flattened as (C, kt, kh, kw)) to 1e-5;
 *   - unpatchify(patch vectors reordered to (kt, kh, kw, c)) gives the latent back exactly;
 *   - wan_token_positions: token s = (f ph + h) pw + w has position (f, h, w);
 *   - wan_token_grid: sizes; not divisible / beyond rope_max_seq_len are INPUT errors;
 *   - config: diffusers' defaults, the 1.3B config from JSON (rope split 44/42/42), and
 *     INPUT errors naming the key (image_dim, qk_norm, _class_name, patch_size, odd head dim);
 *   - the RoPE table's column layout (t, h, w axes, each pair's cos/sin written twice) and
 *     the timestep sinusoid ([cos | sin], cos(0) = 1).
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/models/wan/wan_internal.h"
#include "lib/models/wan/wan_latents.h"
#include "tests/test_util.h"

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

/* Conv3d (E, C, pt, ph, pw) with stride = kernel vs patchify + matmul. */
static void test_patchify_conv(void)
{
    const int B = 2, C = 3, F = 4, H = 6, W = 4, pt = 2, ph = 2, pw = 1, E = 5;
    const int nf = F / pt, nh = H / ph, nw = W / pw, S = nf * nh * nw, P = C * pt * ph * pw;
    unsigned seed = 7;
    float *x = malloc(sizeof(float) * B * C * F * H * W);
    float *w = malloc(sizeof(float) * E * P);
    float *p = malloc(sizeof(float) * B * S * P);
    for (int i = 0; i < B * C * F * H * W; i++)
        x[i] = frand(&seed);
    for (int i = 0; i < E * P; i++)
        w[i] = frand(&seed);
    wan_patchify(p, x, B, C, F, H, W, pt, ph, pw);
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int f = 0; f < nf; f++)
            for (int h = 0; h < nh; h++)
                for (int ww = 0; ww < nw; ww++)
                    for (int e = 0; e < E; e++) {
                        double conv = 0, lin = 0;
                        for (int c = 0; c < C; c++)
                            for (int kt = 0; kt < pt; kt++)
                                for (int kh = 0; kh < ph; kh++)
                                    for (int kw = 0; kw < pw; kw++) {
                                        const float wv =
                                            w[(((e * C + c) * pt + kt) * ph + kh) * pw + kw];
                                        const int fi = f * pt + kt, hi = h * ph + kh;
                                        const int wi = ww * pw + kw;
                                        conv += wv * x[(((b * C + c) * F + fi) * H + hi) * W + wi];
                                    }
                        const int s = (f * nh + h) * nw + ww;
                        for (int k = 0; k < P; k++)
                            lin += w[e * P + k] * p[(b * S + s) * P + k];
                        worst = fmax(worst, fabs(conv - lin));
                    }
    CHECK_NEAR(worst, 0, 1e-5);
    free(x);
    free(w);
    free(p);
}

/* patchify, reorder each vector (c, kt, kh, kw) -> (kt, kh, kw, c), unpatchify = identity. */
static void test_round_trip(void)
{
    const int B = 2, C = 3, F = 3, H = 4, W = 6, pt = 1, ph = 2, pw = 3;
    const int S = (F / pt) * (H / ph) * (W / pw), K = pt * ph * pw, P = C * K;
    const size_t n = (size_t)B * C * F * H * W;
    unsigned seed = 11;
    float *x = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    float *p = malloc(sizeof(float) * B * S * P), *y = malloc(sizeof(float) * B * S * P);
    for (size_t i = 0; i < n; i++)
        x[i] = frand(&seed);
    wan_patchify(p, x, B, C, F, H, W, pt, ph, pw);
    for (int t = 0; t < B * S; t++)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < K; k++)
                y[(size_t)t * P + k * C + c] = p[(size_t)t * P + c * K + k];
    memset(back, 0, n * sizeof(float));
    wan_unpatchify(back, y, B, C, F, H, W, pt, ph, pw);
    CHECK(memcmp(back, x, n * sizeof(float)) == 0);
    free(x);
    free(back);
    free(p);
    free(y);
}

static void test_positions_and_grid(void)
{
    const int pf = 5, ph = 3, pw = 5; /* an odd latent: 5 x 6 x 10 with patch (1, 2, 2) */
    float pos[5 * 3 * 5 * 3];
    wan_token_positions(pos, pf, ph, pw);
    int ok = 1;
    for (int f = 0; f < pf; f++)
        for (int h = 0; h < ph; h++)
            for (int w = 0; w < pw; w++) {
                const int s = (f * ph + h) * pw + w;
                ok &= pos[3 * s] == f && pos[3 * s + 1] == h && pos[3 * s + 2] == w;
            }
    CHECK(ok);
    wan_transformer_config c;
    wan_transformer_config_defaults(&c);
    int a = 0, b = 0, d = 0;
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(wan_token_grid(&c, 5, 6, 10, &a, &b, &d, &err) == CPDIT_OK);
    CHECK(a == 5 && b == 3 && d == 5);
    CHECK(wan_token_grid(&c, 21, 60, 104, &a, &b, &d, &err) == CPDIT_OK);
    CHECK(a * b * d == 32760); /* Wan 480p x 81 frames */
    CHECK(wan_token_grid(&c, 5, 7, 10, &a, &b, &d, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "height");
    c.rope_max_seq_len = 4;
    CHECK(wan_token_grid(&c, 5, 6, 8, &a, &b, &d, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "rope_max_seq_len");
}

/* Load JSON text into a config. */
static cpdit_status config_of(const char *json, wan_transformer_config *c, cpdit_error *err)
{
    model_config mc = {0};
    cpdit_status st = model_config_load_string(&mc, json, "transformer/config.json", err);
    if (!st)
        st = wan_transformer_config_from(&mc, c, err);
    model_config_free(&mc);
    return st;
}

static void test_config(void)
{
    wan_transformer_config c;
    cpdit_error err;
    cpdit_error_clear(&err);
    wan_transformer_config_defaults(&c);
    CHECK(c.num_attention_heads == 40 && c.attention_head_dim == 128 && c.inner_dim == 5120);
    CHECK(c.ffn_dim == 13824 && c.num_layers == 40 && c.text_dim == 4096 && c.freq_dim == 256);
    CHECK(c.patch_size[0] == 1 && c.patch_size[1] == 2 && c.patch_size[2] == 2);
    CHECK(c.cross_attn_norm && !strcmp(c.qk_norm, "rms_norm_across_heads"));
    CHECK(c.eps == 1e-6 && c.rope_max_seq_len == 1024 && c.out_channels == 16);
    CHECK(c.patch_dim == 64 && c.out_dim == 64);
    const char *wan13 =
        "{\"_class_name\": \"WanTransformer3DModel\", \"added_kv_proj_dim\": null, "
        "\"attention_head_dim\": 128, \"cross_attn_norm\": true, \"eps\": 1e-06, "
        "\"ffn_dim\": 8960, \"freq_dim\": 256, \"image_dim\": null, \"in_channels\": 16, "
        "\"num_attention_heads\": 12, \"num_layers\": 30, \"out_channels\": 16, "
        "\"patch_size\": [1, 2, 2], \"qk_norm\": \"rms_norm_across_heads\", "
        "\"rope_max_seq_len\": 1024, \"text_dim\": 4096}";
    CHECK(config_of(wan13, &c, &err) == CPDIT_OK);
    CHECK(c.inner_dim == 1536 && c.num_layers == 30 && c.ffn_dim == 8960);
    CHECK(c.rope_dims[0] == 44 && c.rope_dims[1] == 42 && c.rope_dims[2] == 42);
    CHECK(config_of("{\"out_channels\": null, \"in_channels\": 4}", &c, &err) == CPDIT_OK);
    CHECK(c.out_channels == 4);
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"image_dim\": 1280}", "image_dim"},
        {"{\"added_kv_proj_dim\": 5120}", "added_kv_proj_dim"},
        {"{\"qk_norm\": \"rms_norm\"}", "qk_norm"},
        {"{\"_class_name\": \"FluxTransformer2DModel\"}", "_class_name"},
        {"{\"patch_size\": [2, 2]}", "patch_size"},
        {"{\"attention_head_dim\": 7}", "attention_head_dim"},
        {"{\"num_attention_heads\": 0}", "num_attention_heads"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cpdit_error_clear(&err);
        CHECK_MSG(config_of(bad[i].json, &c, &err) == CPDIT_ERR_INPUT, "%s", bad[i].json);
        CHECK_STR_CONTAINS(err.what, bad[i].needle);
    }
}

static void test_rope_and_time(void)
{
    wan_transformer_config c;
    wan_transformer_config_defaults(&c);
    c.attention_head_dim = 12; /* t, h, w = 4, 4, 4 columns */
    cpdit_error err;
    CHECK(wan_transformer_config_validate(&c, "test", &err) == CPDIT_OK);
    CHECK(c.rope_dims[0] == 4 && c.rope_dims[1] == 4 && c.rope_dims[2] == 4);
    const float pos[3] = {3, 1, 2};
    float cs[12], sn[12];
    wan_rope_table(cs, sn, pos, 1, &c);
    double worst = 0;
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < 2; i++) {
            const double ang = pos[a] * pow(10000.0, -2.0 * i / 4.0);
            const int col = 4 * a + 2 * i;
            worst = fmax(worst, fabs(cs[col] - cos(ang)) + fabs(cs[col + 1] - cos(ang)));
            worst = fmax(worst, fabs(sn[col] - sin(ang)) + fabs(sn[col + 1] - sin(ang)));
        }
    CHECK_NEAR(worst, 0, 1e-6);
    const float t[2] = {0, 500};
    float emb[2 * 8];
    wan_timestep_embedding(emb, t, 2, 8);
    CHECK(emb[0] == 1 && emb[3] == 1 && emb[4] == 0);     /* t = 0: cos 1, sin 0 */
    CHECK_NEAR(emb[8 + 0], cos(500.0), 1e-4);             /* frequency 1 */
    CHECK_NEAR(emb[8 + 4 + 1], sin(500.0 * exp(-log(10000.0) / 4)), 1e-4);
}

int main(void)
{
    test_patchify_conv();
    test_round_trip();
    test_positions_and_grid();
    test_config();
    test_rope_and_time();
    TEST_MAIN_END();
}
