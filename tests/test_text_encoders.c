/* test_text_encoders.c — the text encoders without PyTorch (tests/text_encoders.sh compares
 * them with the PyTorch reference):
 *   - ops: masked / biased attention and the activations of the "cpu" table (host fp32
 *     activations) vs plain double loops (1e-5);
 *   - T5 relative position buckets vs torch's (tests/data/t5_buckets_expected.txt), exactly;
 *   - CLIP and T5 on small random checkpoints written here: streamed weights give exactly the
 *     cached result; bf16 / fp32 / sharded / both embedding names load; a batch of 2 equals two
 *     single forwards (1e-5 relative); CLIP is causal (a later token changes nothing before
 *     it, exactly) and pools at the right row; config / checkpoint mismatches and bad inputs
 *     are errors naming the tensor or key;
 *   - forced streaming (a budget smaller than one layer): the weights stream per layer with the
 *     next layer made ahead on the helper thread; repeated forwards (the first layer made ahead
 *     at the end of the previous one) and two threads running forwards at once give exactly
 *     the resident result, bit for bit;
 *   - (bf16 activation storage: tests/test_text_bf16.c)
 *   - text_encode on a pipeline folder with toy tokenizers, and with the real CLIP-L / T5-XXL
 *     tokenizer files when present ($CPDIT_TOKENIZER_DATA or $top_srcdir/../shared/data/
 *     tokenizers): equals the encoders run on the tokenizers' padded ids, flags truncation.
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/text/clip_text_model.h"
#include "kernels/backend.h"
#include "lib/text/t5_encoder.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"
#include "lib/text/text_encode.h"
#include "tests/text_encoder_fixtures.h"

#define OP_TOL 1e-5
#define BATCH_TOL 1e-5
/* A weight budget below one layer of the streaming test's models: they must stream. */
#define TINY_BUDGET 4096

static char *g_tmp;

static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs((double)b[i]));
    }
    return mr > 0 ? md / mr : md;
}

static float frand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) * (2.0 / 16777216.0) - 1.0);
}

/* ---------------------------------------------------------------- ops */

/* The text encoders' attention (strided q/k/v, causal or biased) through every attention
 * kernel of the default backend. */
static void test_attention_op_kernel(const cpdit_attention_kernel *kern, int causal,
                                     int with_bias)
{
    enum { S = 7, H = 3, Dh = 5, LD = 2 * H * Dh };
    unsigned seed = 7u + (unsigned)causal * 2u + (unsigned)with_bias;
    float q[S * LD], k[S * LD], v[S * LD], bias[H * S * S], out[S * H * Dh];
    for (int i = 0; i < S * LD; i++) {
        q[i] = frand(&seed);
        k[i] = frand(&seed);
        v[i] = frand(&seed);
    }
    for (int i = 0; i < H * S * S; i++)
        bias[i] = 2 * frand(&seed);
    const float scale = 0.7f;
    const cpdit_attention_args a = {.B = 1, .Sq = S, .Skv = S, .H = H, .D = Dh, .ld_q = LD,
                                    .ld_kv = LD, .ld_out = H * Dh, .scale = scale,
                                    .bias = with_bias ? bias : NULL, .causal = causal};
    cpdit_error err;
    CHECK(kern->forward(cpdit_host_buf(out), NULL, cpdit_host_buf(q), cpdit_host_buf(k),
                        cpdit_host_buf(v), &a, &err) == CPDIT_OK);
    double worst = 0;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++) {
            double p[S], m = -INFINITY, sum = 0;
            const int n = causal ? i + 1 : S;
            for (int j = 0; j < n; j++) {
                double d = 0;
                for (int c = 0; c < Dh; c++)
                    d += (double)q[i * LD + h * Dh + c] * k[j * LD + h * Dh + c];
                p[j] = scale * d + (with_bias ? bias[(h * S + i) * S + j] : 0);
                m = fmax(m, p[j]);
            }
            for (int j = 0; j < n; j++)
                sum += p[j] = exp(p[j] - m);
            for (int c = 0; c < Dh; c++) {
                double o = 0;
                for (int j = 0; j < n; j++)
                    o += p[j] / sum * v[j * LD + h * Dh + c];
                worst = fmax(worst, fabs(o - out[i * H * Dh + h * Dh + c]));
            }
        }
    CHECK_MSG(worst <= OP_TOL, "attention %s causal %d bias %d: max error %g", kern->name,
              causal, with_bias, worst);
}

static void test_attention_op(int causal, int with_bias)
{
    const cpdit_backend *be = cpdit_backend_cpu(); /* host fp32 activations */
    for (const cpdit_attention_kernel *const *k = be->attention_kernels; *k; k++)
        test_attention_op_kernel(*k, causal, with_bias);
}

static void test_activations(void)
{
    enum { N = 101 };
    float x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = -10.0f + 0.2f * (float)i;
    const cpdit_backend *be = cpdit_backend_cpu(); /* host fp32 activations */
    be->act(CPDIT_ACT_QUICK_GELU, cpdit_host_buf(y), cpdit_host_buf(x), N);
    for (int i = 0; i < N; i++)
        CHECK_NEAR(y[i], x[i] / (1 + exp(-1.702 * x[i])), OP_TOL);
    be->act(CPDIT_ACT_GELU_ERF, cpdit_host_buf(y), cpdit_host_buf(x), N);
    for (int i = 0; i < N; i++)
        CHECK_NEAR(y[i], 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0))), OP_TOL);
    be->act(CPDIT_ACT_RELU, cpdit_host_buf(y), cpdit_host_buf(x), N);
    for (int i = 0; i < N; i++)
        CHECK(y[i] == (x[i] > 0 ? x[i] : 0));
    CHECK(text_act_from_name("quick_gelu") == TEXT_ACT_QUICK_GELU);
    CHECK(text_act_from_name("gelu_new") == TEXT_ACT_GELU_TANH);
    CHECK(text_act_from_name("gelu") == TEXT_ACT_GELU_ERF);
    CHECK(text_act_from_name("mish") == TEXT_ACT_INVALID);
}

static void test_buckets(void)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/t5_buckets_expected.txt", top ? top : ".");
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    int lines = 0, bad = 0, total = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        char *p = line, *end;
        const long nb = strtol(p, &end, 10), md = strtol(end, &p, 10);
        long r = strtol(p, &end, 10);
        if (end == p)
            continue;
        lines++;
        for (p = end;; r++) {
            const long want = strtol(p, &end, 10);
            if (end == p)
                break;
            p = end;
            const int got = t5_relative_position_bucket((int)r, 1, (int)nb, (int)md);
            total++;
            if (got != want && bad++ < 5)
                fprintf(stderr, "bucket(%ld; %ld, %ld) = %d, torch %ld\n", r, nb, md, got, want);
        }
    }
    free(line);
    fclose(f);
    CHECK(lines >= 6 && total > 6000);
    CHECK_MSG(bad == 0, "%d of %d buckets differ from torch's", bad, total);
    /* the bias table: bias[h, i, j] = table[bucket(j - i), h] */
    enum { NB = 8, H = 2, S = 5 };
    float table[NB * H], bias[H * S * S];
    for (int i = 0; i < NB * H; i++)
        table[i] = (float)i;
    t5_position_bias(bias, table, NB, 16, H, S, S);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++)
            for (int j = 0; j < S; j++)
                CHECK(bias[(h * S + i) * S + j] ==
                      table[t5_relative_position_bucket(j - i, 1, NB, 16) * H + h]);
}

/* ---------------------------------------------------------------- helpers */

static char *sub(const char *name)
{
    return tmp_path(g_tmp, name);
}

/* A copy of model folder src at dst whose config.json has `from` replaced by `to` (first
 * occurrence); the weights are symlinked. */
static void variant(const char *src, const char *dst, const char *from, const char *to)
{
    char p[4096], q[4096];
    snprintf(p, sizeof p, "%s/config.json", src);
    char *cfg = tmp_read(p, NULL);
    CHECK(cfg != NULL);
    if (!cfg)
        return;
    char *at = strstr(cfg, from);
    CHECK_MSG(at != NULL, "'%s' not in %s", from, p);
    if (!at) {
        free(cfg);
        return;
    }
    char *text = malloc(strlen(cfg) + strlen(to) + 1);
    memcpy(text, cfg, (size_t)(at - cfg));
    strcpy(text + (at - cfg), to);
    strcat(text, at + strlen(from));
    snprintf(q, sizeof q, "%s/config.json", dst);
    CHECK(fixture_write_text(q, text) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    snprintf(q, sizeof q, "%s/model.safetensors", dst);
    CHECK(symlink(p, q) == 0);
    free(text);
    free(cfg);
}

/* ids (B, S) in [lo, hi), with an eos at column eos_at (and eos padding after it) if >= 0. */
static void make_ids(int32_t *ids, int B, int S, int lo, int hi, int eos, int eos_at,
                     unsigned seed)
{
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            seed = seed * 1664525u + 1013904223u;
            int32_t id = lo + (int32_t)((seed >> 8) % (unsigned)(hi - lo));
            if (eos_at >= 0 && s >= eos_at + b)
                id = eos;
            ids[b * S + s] = id;
        }
}

/* ---------------------------------------------------------------- CLIP */

static void test_clip(void)
{
    cpdit_error err;
    clip_fixture f = clip_fixture_tiny();
    char *d32 = sub("clip_f32"), *d16 = sub("clip_bf16");
    CHECK(fixture_write_clip(d32, &f, CPDIT_DTYPE_F32, 1, &err) == 0);
    CHECK(fixture_write_clip(d16, &f, CPDIT_DTYPE_BF16, 1, &err) == 0);
    enum { B = 2, S = 77 };
    const int D = f.hidden;
    int32_t ids[B * S];
    make_ids(ids, B, S, 0, 998, f.eos_token_id, 9, 3);

    text_encoder_options cached = text_encoder_options_default(), streamed = cached;
    streamed.cache_bytes = 0;
    clip_text_model *m = NULL, *ms = NULL, *m32 = NULL;
    CHECK(clip_text_model_load(d16, &cached, &m, &err) == CPDIT_OK);
    CHECK(clip_text_model_load(d16, &streamed, &ms, &err) == CPDIT_OK);
    CHECK(clip_text_model_load(d32, NULL, &m32, &err) == CPDIT_OK);
    if (!m || !ms || !m32)
        goto done;
    CHECK(clip_text_model_param_count(m) ==
          (size_t)(f.vocab + f.max_positions) * D +
              (size_t)f.layers * (4 * (D * D + D) + 4 * D + 2 * f.intermediate * D +
                                  f.intermediate + D) +
              2 * (size_t)D);

    float *h = malloc(sizeof(float) * B * S * D), *h2 = malloc(sizeof(float) * B * S * D);
    float pooled[B * 32], pooled2[B * 32];
    CHECK(clip_text_model_forward(m, ids, B, S, h, pooled, &err) == CPDIT_OK);
    CHECK(clip_text_model_forward(ms, ids, B, S, h2, pooled2, &err) == CPDIT_OK);
    CHECK_MSG(memcmp(h, h2, sizeof(float) * B * S * D) == 0, "streamed != cached");
    for (int b = 0; b < B; b++) { /* eos 999 is not 2: the first eos, at 9 + b */
        CHECK(clip_text_pool_index(clip_text_model_config(m), ids + b * S, S) == 9 + b);
        CHECK(memcmp(pooled + b * D, h + ((size_t)b * S + 9 + b) * D, sizeof(float) * D) == 0);
    }
    /* batch of 2 = two single forwards */
    for (int b = 0; b < B; b++) {
        CHECK(clip_text_model_forward(m, ids + b * S, 1, S, h2, NULL, &err) == CPDIT_OK);
        CHECK(max_rel_diff(h2, h + (size_t)b * S * D, (size_t)S * D) <= BATCH_TOL);
    }
    /* causal: changing token 20 leaves positions 0..19 exactly as they were (same shapes, so
     * the same GEMM blocking) */
    int32_t ids2[S];
    memcpy(ids2, ids, sizeof ids2);
    ids2[20] = (ids2[20] + 1) % 998;
    float *h1 = malloc(sizeof(float) * S * D);
    CHECK(clip_text_model_forward(m, ids, 1, S, h1, NULL, &err) == CPDIT_OK);
    CHECK(clip_text_model_forward(m, ids2, 1, S, h2, NULL, &err) == CPDIT_OK);
    CHECK(memcmp(h2, h1, sizeof(float) * 20 * D) == 0);
    CHECK(memcmp(h2 + 20 * D, h1 + 20 * D, sizeof(float) * D) != 0);
    free(h1);
    /* a shorter sequence: the same prefix */
    CHECK(clip_text_model_forward(m, ids, 1, 12, h2, NULL, &err) == CPDIT_OK);
    CHECK(max_rel_diff(h2, h, 12 * (size_t)D) <= BATCH_TOL);
    /* the fp32 checkpoint runs (weights differ by bf16 rounding, so only roughly equal) */
    CHECK(clip_text_model_forward(m32, ids, B, S, h2, NULL, &err) == CPDIT_OK);
    CHECK(max_rel_diff(h2, h, (size_t)B * S * D) < 0.05);

    /* legacy pooling (eos_token_id 2): argmax of the ids, the first on ties */
    clip_text_config lc = *clip_text_model_config(m);
    lc.eos_token_id = CLIP_LEGACY_EOS_TOKEN_ID;
    const int32_t t[6] = {5, 9, 3, 9, 1, 0};
    CHECK(clip_text_pool_index(&lc, t, 6) == 1);

    /* bad inputs */
    ids2[3] = f.vocab;
    CHECK(clip_text_model_forward(m, ids2, 1, S, h2, NULL, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "outside the vocabulary");
    CHECK(clip_text_model_forward(m, ids, 1, S + 1, h2, NULL, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "max_position_embeddings");
    free(h);
    free(h2);

done:
    clip_text_model_free(m);
    clip_text_model_free(ms);
    clip_text_model_free(m32);

    /* config / checkpoint mismatches */
    static const struct {
        const char *name, *from, *to, *want;
    } cases[] = {
        {"clip_l1", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1",
         "unexpected tensor 'text_model.encoder.layers.1."},
        {"clip_l3", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3",
         "missing tensor 'text_model.encoder.layers.2."},
        {"clip_h", "\"hidden_size\": 32", "\"hidden_size\": 40", "has shape [1000, 32]"},
        {"clip_act", "quick_gelu", "mish", "hidden_act"},
        {"clip_type", "clip_text_model", "t5", "model_type"},
        {"clip_heads", "\"num_attention_heads\": 4", "\"num_attention_heads\": 5",
         "not a multiple"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = sub(cases[i].name);
        CHECK(mkdir(dir, 0755) == 0);
        variant(d32, dir, cases[i].from, cases[i].to);
        CHECK(clip_text_model_load(dir, NULL, &m, &err) == CPDIT_ERR_INPUT);
        CHECK_STR_CONTAINS(err.what, cases[i].want);
        CHECK(m == NULL);
        free(dir);
    }
    /* a whole CLIPModel's config: the text tower's settings come from "text_config" */
    char *dfull = sub("clip_full"), p[4096], q[4096];
    CHECK(mkdir(dfull, 0755) == 0);
    snprintf(p, sizeof p, "%s/config.json", dfull);
    CHECK(fixture_write_text(p, "{\"model_type\": \"clip\", \"projection_dim\": 32, "
                                "\"text_config\": {\"vocab_size\": 1000, \"hidden_size\": 32, "
                                "\"intermediate_size\": 64, \"num_hidden_layers\": 2, "
                                "\"num_attention_heads\": 4, \"eos_token_id\": 999}, "
                                "\"vision_config\": {\"hidden_size\": 48}}") == 0);
    snprintf(p, sizeof p, "%s/model.safetensors", d32);
    snprintf(q, sizeof q, "%s/model.safetensors", dfull);
    CHECK(symlink(p, q) == 0);
    CHECK_MSG(clip_text_model_load(dfull, NULL, &m, &err) == CPDIT_OK, "%s", err.what);
    if (m) {
        const clip_text_config *c = clip_text_model_config(m);
        CHECK(c->hidden_size == 32 && c->num_hidden_layers == 2 && c->eos_token_id == 999 &&
              c->max_position_embeddings == 77 && c->hidden_act == TEXT_ACT_QUICK_GELU);
        clip_text_model_free(m);
    }
    free(dfull);
    CHECK(clip_text_model_load(g_tmp, NULL, &m, &err) != CPDIT_OK); /* no config.json */
    CHECK_STR_CONTAINS(err.where, "config.json");
    free(d32);
    free(d16);
}

/* ---------------------------------------------------------------- T5 */

static void test_t5(void)
{
    cpdit_error err;
    t5_fixture f = t5_fixture_tiny();
    char *d16 = sub("t5_bf16"), *dsh = sub("t5_shards"), *denc = sub("t5_enc"),
         *drelu = sub("t5_relu");
    CHECK(fixture_write_t5(d16, &f, CPDIT_DTYPE_BF16, 2, &err) == 0);
    t5_fixture fs = f;
    fs.shards = 2;
    CHECK(fixture_write_t5(dsh, &fs, CPDIT_DTYPE_BF16, 2, &err) == 0);
    t5_fixture fe = f;
    fe.embed_as_shared = 0;
    CHECK(fixture_write_t5(denc, &fe, CPDIT_DTYPE_F16, 2, &err) == 0);
    t5_fixture fr = f;
    fr.ff_proj = "relu";
    fr.d_kv = 6; /* inner 24 != d_model 32 */
    CHECK(fixture_write_t5(drelu, &fr, CPDIT_DTYPE_F32, 4, &err) == 0);

    enum { B = 2, S = 40 };
    const int D = f.d_model;
    int32_t ids[B * S];
    make_ids(ids, B, S, 2, 1000, 1, 30, 5);
    text_encoder_options streamed = text_encoder_options_default();
    streamed.cache_bytes = 0;
    t5_encoder *m = NULL, *ms = NULL, *msh = NULL, *me = NULL, *mr = NULL;
    CHECK(t5_encoder_load(d16, NULL, &m, &err) == CPDIT_OK);
    CHECK(t5_encoder_load(d16, &streamed, &ms, &err) == CPDIT_OK);
    CHECK(t5_encoder_load(dsh, NULL, &msh, &err) == CPDIT_OK);
    CHECK(t5_encoder_load(denc, NULL, &me, &err) == CPDIT_OK);
    CHECK_MSG(t5_encoder_load(drelu, &streamed, &mr, &err) == CPDIT_OK, "%s", err.what);
    if (!m || !ms || !msh || !me || !mr)
        goto done;
    CHECK(!t5_encoder_streaming(m) && t5_encoder_streaming(ms));
    CHECK(!t5_encoder_streaming(mr)); /* fp32: used in place, nothing to stream */
    CHECK(t5_encoder_get_config(m)->dense_act == TEXT_ACT_GELU_TANH &&
          t5_encoder_get_config(m)->is_gated_act);
    CHECK(t5_encoder_get_config(mr)->dense_act == TEXT_ACT_RELU &&
          !t5_encoder_get_config(mr)->is_gated_act);

    float *h = malloc(sizeof(float) * B * S * D), *h2 = malloc(sizeof(float) * B * S * D);
    CHECK(t5_encoder_forward(m, ids, B, S, h, &err) == CPDIT_OK);
    CHECK(t5_encoder_forward(ms, ids, B, S, h2, &err) == CPDIT_OK);
    CHECK_MSG(memcmp(h, h2, sizeof(float) * B * S * D) == 0, "streamed != cached");
    CHECK(t5_encoder_forward(msh, ids, B, S, h2, &err) == CPDIT_OK);
    CHECK_MSG(memcmp(h, h2, sizeof(float) * B * S * D) == 0, "sharded != single file");
    CHECK(t5_encoder_forward(me, ids, B, S, h2, &err) == CPDIT_OK); /* f16: close, not equal */
    CHECK(max_rel_diff(h2, h, (size_t)B * S * D) < 0.05);
    for (int b = 0; b < B; b++) {
        CHECK(t5_encoder_forward(m, ids + b * S, 1, S, h2, &err) == CPDIT_OK);
        CHECK(max_rel_diff(h2, h + (size_t)b * S * D, (size_t)S * D) <= BATCH_TOL);
    }
    /* bidirectional: changing the last token changes the first position */
    int32_t ids2[S];
    memcpy(ids2, ids, sizeof ids2);
    ids2[S - 1] = 7;
    CHECK(t5_encoder_forward(m, ids2, 1, S, h2, &err) == CPDIT_OK);
    CHECK(memcmp(h2, h, sizeof(float) * D) != 0);
    CHECK(t5_encoder_forward(mr, ids, B, S, h2, &err) == CPDIT_OK);
    ids2[0] = -1;
    CHECK(t5_encoder_forward(m, ids2, 1, S, h2, &err) == CPDIT_ERR_INPUT);
    CHECK(t5_encoder_forward(m, ids2, 0, S, h2, &err) == CPDIT_ERR_INPUT);
    free(h);
    free(h2);

done:
    t5_encoder_free(m);
    t5_encoder_free(ms);
    t5_encoder_free(msh);
    t5_encoder_free(me);
    t5_encoder_free(mr);

    static const struct {
        const char *name, *from, *to, *want;
    } cases[] = {
        {"t5_l1", "\"num_layers\": 2", "\"num_layers\": 1",
         "unexpected tensor 'encoder.block.1."},
        {"t5_relu_vs_gated", "gated-gelu", "relu", "missing tensor 'encoder.block.0.layer.1."
                                                   "DenseReluDense.wi.weight'"},
        {"t5_bad_proj", "gated-gelu", "gated-foo", "feed_forward_proj"},
        {"t5_bad_proj2", "gated-gelu", "a-b-c", "feed_forward_proj"},
        {"t5_dkv", "\"d_kv\": 8", "\"d_kv\": 16", "has shape [32, 32]"},
        {"t5_buckets", "\"relative_attention_num_buckets\": 32",
         "\"relative_attention_num_buckets\": 16", "relative_attention_bias.weight' has shape"},
        {"t5_dist", "\"relative_attention_max_distance\": 128",
         "\"relative_attention_max_distance\": 8", "must exceed"},
        {"t5_type", "\"model_type\": \"t5\"", "\"model_type\": \"mt5\"", "model_type"},
        /* UMT5 wants a bias table in every block: a T5 checkpoint has block 0's only */
        {"t5_as_umt5", "\"model_type\": \"t5\"", "\"model_type\": \"umt5\"",
         "missing tensor 'encoder.block.1.layer.0.SelfAttention.relative_attention_bias."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = sub(cases[i].name);
        CHECK(mkdir(dir, 0755) == 0);
        variant(d16, dir, cases[i].from, cases[i].to);
        CHECK(t5_encoder_load(dir, NULL, &m, &err) == CPDIT_ERR_INPUT);
        CHECK_STR_CONTAINS(err.what, cases[i].want);
        free(dir);
    }
    free(d16);
    free(dsh);
    free(denc);
    free(drelu);
}

/* ---------------------------------------------------------------- streaming per layer */

enum { STREAM_B = 2, STREAM_S = 33, STREAM_T5_LAYERS = 4, STREAM_CLIP_LAYERS = 3 };

typedef struct stream_job {
    const t5_encoder *t5;
    const clip_text_model *clip;
    const int32_t *ids;
    float *out;
    cpdit_status st;
} stream_job;

static void *stream_job_run(void *arg)
{
    stream_job *j = arg;
    cpdit_error err;
    j->st = j->t5 ? t5_encoder_forward(j->t5, j->ids, STREAM_B, STREAM_S, j->out, &err)
                  : clip_text_model_forward(j->clip, j->ids, STREAM_B, STREAM_S, j->out, NULL,
                                            &err);
    return NULL;
}

/* Two threads run a forward each on the same model; both outputs must equal ref. */
static void check_two_threads(const t5_encoder *t5, const clip_text_model *clip,
                              const int32_t *ids, const float *ref, size_t n)
{
    stream_job jobs[2];
    pthread_t th[2];
    int started[2];
    for (int k = 0; k < 2; k++) {
        jobs[k] = (stream_job){t5, clip, ids, malloc(sizeof(float) * n), CPDIT_ERR_RUNTIME};
        started[k] = jobs[k].out && pthread_create(&th[k], NULL, stream_job_run, &jobs[k]) == 0;
        CHECK(started[k]);
    }
    for (int k = 0; k < 2; k++) {
        if (started[k])
            pthread_join(th[k], NULL);
        CHECK(jobs[k].st == CPDIT_OK);
        CHECK_MSG(jobs[k].out && memcmp(jobs[k].out, ref, sizeof(float) * n) == 0,
                  "thread %d: streamed != resident", k);
        free(jobs[k].out);
    }
}

/* The stats of a model streamed per layer with prefetch, after `forwards` forwards of L
 * layers: every layer but the very first one was made ahead. */
static void check_stream_stats(const text_weight_stats *s, int layers, int forwards)
{
    CHECK(s->streaming && s->prefetch);
    CHECK_MSG(s->prefetched == (unsigned long long)(forwards * layers - 1),
              "%llu layers made ahead, expected %d", s->prefetched, forwards * layers - 1);
    CHECK(s->bytes_read > 0 && s->create_s > 0.0);
}

static void test_streaming(void)
{
    cpdit_error err;
    t5_fixture tf = t5_fixture_tiny();
    tf.layers = STREAM_T5_LAYERS;
    clip_fixture cf = clip_fixture_tiny();
    cf.layers = STREAM_CLIP_LAYERS;
    char *dt5 = sub("stream_t5"), *dclip = sub("stream_clip");
    CHECK(fixture_write_t5(dt5, &tf, CPDIT_DTYPE_BF16, 3, &err) == 0);
    CHECK(fixture_write_clip(dclip, &cf, CPDIT_DTYPE_BF16, 3, &err) == 0);
    text_encoder_options tiny = text_encoder_options_default();
    tiny.cache_bytes = TINY_BUDGET;
    int32_t ids[STREAM_B * STREAM_S];
    make_ids(ids, STREAM_B, STREAM_S, 2, 998, 1, 20, 4);
    const size_t n_t5 = (size_t)STREAM_B * STREAM_S * tf.d_model;
    const size_t n_clip = (size_t)STREAM_B * STREAM_S * cf.hidden;
    float *ref = malloc(sizeof(float) * n_t5), *got = malloc(sizeof(float) * n_t5);

    t5_encoder *t5r = NULL, *t5s = NULL;
    CHECK(t5_encoder_load(dt5, NULL, &t5r, &err) == CPDIT_OK);
    CHECK_MSG(t5_encoder_load(dt5, &tiny, &t5s, &err) == CPDIT_OK, "%s", err.what);
    if (t5r && t5s) {
        text_weight_stats s, rs;
        t5_encoder_weight_stats(t5r, &rs);
        CHECK(!rs.streaming && !rs.prefetch);
        CHECK(t5_encoder_streaming(t5s));
        CHECK(t5_encoder_forward(t5r, ids, STREAM_B, STREAM_S, ref, &err) == CPDIT_OK);
        for (int f = 1; f <= 2; f++) { /* the second starts with layer 0 made ahead */
            memset(got, 0, sizeof(float) * n_t5);
            CHECK(t5_encoder_forward(t5s, ids, STREAM_B, STREAM_S, got, &err) == CPDIT_OK);
            CHECK_MSG(memcmp(got, ref, sizeof(float) * n_t5) == 0,
                      "T5 forward %d: streamed != resident", f);
            t5_encoder_weight_stats(t5s, &s);
            check_stream_stats(&s, STREAM_T5_LAYERS, f);
        }
        /* two slots of one layer each: about half of the 4 layers held resident */
        CHECK_MSG(s.bytes > 0 && s.bytes < rs.bytes, "streamed %zu bytes, resident %zu",
                  s.bytes, rs.bytes);
        check_two_threads(t5s, NULL, ids, ref, n_t5);
    }
    t5_encoder_free(t5r);
    t5_encoder_free(t5s);

    clip_text_model *cr = NULL, *cs = NULL;
    CHECK(clip_text_model_load(dclip, NULL, &cr, &err) == CPDIT_OK);
    CHECK_MSG(clip_text_model_load(dclip, &tiny, &cs, &err) == CPDIT_OK, "%s", err.what);
    if (cr && cs) {
        text_weight_stats s;
        CHECK(clip_text_model_forward(cr, ids, STREAM_B, STREAM_S, ref, NULL, &err) ==
              CPDIT_OK);
        for (int f = 1; f <= 2; f++) {
            memset(got, 0, sizeof(float) * n_clip);
            CHECK(clip_text_model_forward(cs, ids, STREAM_B, STREAM_S, got, NULL, &err) ==
                  CPDIT_OK);
            CHECK_MSG(memcmp(got, ref, sizeof(float) * n_clip) == 0,
                      "CLIP forward %d: streamed != resident", f);
            clip_text_model_weight_stats(cs, &s);
            check_stream_stats(&s, STREAM_CLIP_LAYERS, f);
        }
        check_two_threads(NULL, cs, ids, ref, n_clip);
    }
    clip_text_model_free(cr);
    clip_text_model_free(cs);
    free(ref);
    free(got);
    free(dt5);
    free(dclip);
}

/* ---------------------------------------------------------------- text_encode */

/* Check text_encode against the encoders on the tokenizers' ids for these prompts. */
static void check_encode(const text_encoders *te, const char *const *prompts, int B, int L)
{
    cpdit_error err;
    const int P = text_encoders_pooled_dim(te), T = text_encoders_t5_dim(te);
    float *pooled = calloc((size_t)B * P, sizeof(float));
    float *tokens = calloc((size_t)B * L * T, sizeof(float));
    float *one_p = calloc((size_t)P, sizeof(float));
    float *one_t = calloc((size_t)L * T, sizeof(float));
    float *hid = calloc((size_t)CLIP_MAX_LENGTH * P, sizeof(float));
    int *flags = calloc((size_t)B, sizeof(int));
    int32_t clip_ids[CLIP_MAX_LENGTH], *t5_ids = calloc((size_t)L, sizeof(int32_t));
    CHECK(text_encode(te, prompts, NULL, B, L, pooled, tokens, flags, &err) == CPDIT_OK);
    for (int b = 0; b < B; b++) {
        int fl = -1;
        CHECK(text_encode_tokenize(te, prompts[b], NULL, L, clip_ids, t5_ids, &fl, &err) ==
              CPDIT_OK);
        CHECK(fl == flags[b]);
        CHECK(clip_text_model_forward(text_encoders_clip(te), clip_ids, 1, CLIP_MAX_LENGTH, hid,
                                      one_p, &err) == CPDIT_OK);
        CHECK(t5_encoder_forward(text_encoders_t5(te), t5_ids, 1, L, one_t, &err) == CPDIT_OK);
        CHECK(max_rel_diff(pooled + (size_t)b * P, one_p, (size_t)P) <= BATCH_TOL);
        CHECK(max_rel_diff(tokens + (size_t)b * L * T, one_t, (size_t)L * T) <= BATCH_TOL);
        /* pooled at the first end token (the padding repeats it) */
        const int32_t eos = clip_tokenizer_eos_id(text_encoders_clip_tokenizer(te));
        int at = 0;
        while (at < CLIP_MAX_LENGTH && clip_ids[at] != eos)
            at++;
        CHECK(at < CLIP_MAX_LENGTH && clip_ids[CLIP_MAX_LENGTH - 1] == eos);
        CHECK(at < CLIP_MAX_LENGTH && memcmp(one_p, hid + (size_t)at * P, sizeof(float) * P) == 0);
        /* T5: </s> then <pad> (0) up to L, unless truncated */
        if (!(fl & TEXT_ENCODE_T5_TRUNCATED))
            CHECK(t5_ids[L - 1] == t5_tokenizer_pad_id(text_encoders_t5_tokenizer(te)));
    }
    free(pooled);
    free(tokens);
    free(one_p);
    free(one_t);
    free(hid);
    free(flags);
    free(t5_ids);
}

static void make_pipeline(const char *root, const char *clip_tok, const char *t5_tok,
                          int clip_vocab, int t5_vocab)
{
    cpdit_error err;
    char p[4096], q[4096];
    clip_fixture cf = clip_fixture_tiny();
    cf.vocab = clip_vocab;
    cf.eos_token_id = CLIP_LEGACY_EOS_TOKEN_ID; /* as FLUX.1's config.json */
    cf.layers = 1;
    t5_fixture tf = t5_fixture_tiny();
    tf.vocab = t5_vocab;
    tf.layers = 1;
    snprintf(p, sizeof p, "%s/text_encoder", root);
    CHECK(fixture_write_clip(p, &cf, CPDIT_DTYPE_BF16, 11, &err) == 0);
    snprintf(p, sizeof p, "%s/text_encoder_2", root);
    CHECK(fixture_write_t5(p, &tf, CPDIT_DTYPE_BF16, 12, &err) == 0);
    snprintf(q, sizeof q, "%s/tokenizer", root);
    if (clip_tok) {
        CHECK(symlink(clip_tok, q) == 0);
    } else {
        CHECK(fixture_write_clip_tokenizer(q) == 0);
    }
    snprintf(q, sizeof q, "%s/tokenizer_2", root);
    if (t5_tok) {
        CHECK(symlink(t5_tok, q) == 0);
    } else {
        CHECK(fixture_write_t5_tokenizer(q) == 0);
    }
}

static void test_text_encode_toy(void)
{
    cpdit_error err;
    char *root = sub("pipe_toy");
    CHECK(mkdir(root, 0755) == 0);
    make_pipeline(root, NULL, NULL, 1000, 1000);
    text_encoders *te = NULL;
    CHECK_MSG(text_encoders_load(root, NULL, &te, &err) == CPDIT_OK, "%s: %s", err.where,
              err.what);
    if (!te)
        goto out;
    CHECK(text_encoders_pooled_dim(te) == 32 && text_encoders_t5_dim(te) == 32);
    char longp[512] = "";
    for (int i = 0; i < 100; i++)
        strcat(longp, "a b ");
    const char *prompts[3] = {"abc de", "", longp};
    check_encode(te, prompts, 3, 16);
    int flags[3];
    float pooled[3 * 32];
    CHECK(text_encode(te, prompts, NULL, 3, 16, pooled, NULL, flags, &err) == CPDIT_OK);
    CHECK(flags[0] == 0 && flags[1] == 0);
    CHECK(flags[2] == (TEXT_ENCODE_CLIP_TRUNCATED | TEXT_ENCODE_T5_TRUNCATED));
    /* prompt_2 goes to T5 only */
    const char *p2[3] = {"", "", ""};
    float tok_a[3 * 16 * 32], tok_b[3 * 16 * 32], pooled_b[3 * 32];
    CHECK(text_encode(te, prompts, p2, 3, 16, pooled_b, tok_a, NULL, &err) == CPDIT_OK);
    CHECK(memcmp(pooled, pooled_b, sizeof pooled) == 0);
    CHECK(text_encode(te, p2, NULL, 3, 16, NULL, tok_b, NULL, &err) == CPDIT_OK);
    CHECK(memcmp(tok_a, tok_b, sizeof tok_a) == 0);
    CHECK(text_encode(te, prompts, NULL, 1, 0, pooled, NULL, NULL, &err) == CPDIT_ERR_INPUT);
    CHECK(text_encode(te, prompts, NULL, 1, 513, pooled, NULL, NULL, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "513");
    text_encoders_free(te);
out:
    /* a missing component is named */
    char *bad = sub("pipe_no_t5");
    CHECK(mkdir(bad, 0755) == 0);
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer", bad);
    CHECK(fixture_write_clip_tokenizer(p) == 0);
    CHECK(text_encoders_load(bad, NULL, &te, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "tokenizer_2");
    free(bad);
    free(root);
}

static void test_text_encode_real(void)
{
    const char *top = getenv("top_srcdir");
    const char *data = getenv("CPDIT_TOKENIZER_DATA");
    char dir[4096], clip_dir[4200], t5_dir[4200];
    if (data && data[0])
        snprintf(dir, sizeof dir, "%s", data);
    else
        snprintf(dir, sizeof dir, "%s/../shared/data/tokenizers", top ? top : ".");
    snprintf(clip_dir, sizeof clip_dir, "%s/clip-vit-large-patch14", dir);
    snprintf(t5_dir, sizeof t5_dir, "%s/t5-v1_1-xxl", dir);
    if (access(clip_dir, R_OK) || access(t5_dir, R_OK)) {
        fprintf(stderr, "note: no tokenizer files in %s: real-tokenizer case skipped\n", dir);
        return;
    }
    char *abs_clip = realpath(clip_dir, NULL), *abs_t5 = realpath(t5_dir, NULL);
    char *root = sub("pipe_real");
    CHECK(mkdir(root, 0755) == 0);
    make_pipeline(root, abs_clip, abs_t5, 49408, 32128);
    cpdit_error err;
    text_encoders *te = NULL;
    CHECK_MSG(text_encoders_load(root, NULL, &te, &err) == CPDIT_OK, "%s: %s", err.where,
              err.what);
    if (te) {
        const char *prompts[2] = {"A photo of a cat, 4K \xe2\x80\x94 caf\xc3\xa9 "
                                  "\xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x90\xb1",
                                  "an astronaut riding a horse on the moon"};
        check_encode(te, prompts, 2, 64);
        text_encoders_free(te);
    }
    free(root);
    free(abs_clip);
    free(abs_t5);
}

int main(void)
{
    g_tmp = tmpdir_make("text-enc");
    if (!g_tmp) {
        fprintf(stderr, "cannot create a temporary folder\n");
        return 1;
    }
    test_attention_op(0, 0);
    test_attention_op(1, 0);
    test_attention_op(0, 1);
    test_attention_op(1, 1);
    test_activations();
    test_buckets();
    test_clip();
    test_t5();
    test_streaming();
    test_text_encode_toy();
    test_text_encode_real();
    tmpdir_remove(g_tmp);
    free(g_tmp);
    TEST_MAIN_END();
}
