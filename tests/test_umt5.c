/* test_umt5.c — the UMT5 side of lib/text/t5_encoder.c and lib/text/umt5_prompt.c, without
 * PyTorch (tests/umt5_encoder.sh compares with the reference):
 *   - config: model_type "umt5" takes UMT5Config's defaults; a T5 checkpoint read as umt5 is
 *     refused naming block 1's missing bias table;
 *   - a mask of all ones gives bitwise the unmasked forward (T5 and UMT5);
 *   - masked keys have no influence: changing the ids at masked positions leaves the kept
 *     rows unchanged (<= MASK_TOL relative), a fully masked item gives finite rows;
 *   - per-layer tables: the same weights with every table replaced by block 0's differ from
 *     the real model by more than LAYER_DIFF_MIN, and equal, bit for bit, the T5 reading of
 *     that checkpoint (block 0's table for every block): the UMT5 path with equal tables is
 *     the T5 path;
 *   - prompt embeds: rows after each true length exactly 0, the kept rows equal to the masked
 *     forward over all L tokens within TRIM_TOL (the encoder runs on max(len) tokens); a mask
 *     that is not a prefix takes the full path (kept rows bitwise equal);
 *   - bad input: a mask value of 2 (INPUT, naming attention_mask);
 *   - umt5_prompt_tokenize (toy tokenizer): whitespace cleaned, <pad> padding, mask on the real
 *     ids, </s> kept on truncation.
 * Models: tiny random fixtures (tests/text_encoder_fixtures.h), fp32 weights, cpu backend.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/safetensors.h"
#include "lib/text/t5_encoder.h"
#include "lib/text/umt5_prompt.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"
#include "tests/text_encoder_fixtures.h"

#define MASK_TOL 1e-6      /* kept rows with other ids under the mask: summation order only */
#define TRIM_TOL 1e-5      /* prompt embeds on max(len) tokens vs the forward over L */
#define LAYER_DIFF_MIN 1e-2 /* per-layer tables vs block 0's everywhere (seen: ~0.5) */

enum { B = 3, L = 24, V = 1000 };
static const int LENS[B] = {5, 24, 11};

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

static void make_inputs(int32_t *ids, int32_t *mask, const int *lens, unsigned seed)
{
    for (int b = 0; b < B; b++)
        for (int s = 0; s < L; s++) {
            seed = seed * 1664525u + 1013904223u;
            const int real = s < lens[b];
            ids[b * L + s] = real ? (s == lens[b] - 1 ? 1 : 2 + (int32_t)((seed >> 8) % (V - 2)))
                                  : 0;
            mask[b * L + s] = real;
        }
}

static t5_encoder *load(const char *dir)
{
    text_encoder_options o = text_encoder_options_default();
    o.weight_format = CPDIT_WEIGHT_F32;
    t5_encoder *m = NULL;
    cpdit_error err;
    CHECK_MSG(t5_encoder_load(dir, &o, &m, &err) == CPDIT_OK, "%s", err.what);
    return m;
}

static void test_config(void)
{
    model_config cfg = {0};
    t5_encoder_config c;
    cpdit_error err;
    CHECK(model_config_load_string(&cfg, "{\"model_type\": \"umt5\"}", "umt5.json", &err) ==
          CPDIT_OK);
    CHECK(t5_encoder_config_read(&cfg, &c, &err) == CPDIT_OK);
    CHECK(c.per_layer_bias == 1 && c.vocab_size == 250112 && c.d_ff == 1024 &&
          c.num_layers == 8 && c.num_heads == 6 && c.is_gated_act == 1 &&
          c.dense_act == TEXT_ACT_GELU_TANH);
    model_config_free(&cfg);
    CHECK(model_config_load_string(&cfg, "{\"model_type\": \"t5\"}", "t5.json", &err) ==
          CPDIT_OK);
    CHECK(t5_encoder_config_read(&cfg, &c, &err) == CPDIT_OK);
    CHECK(c.per_layer_bias == 0 && c.vocab_size == 32128 && c.d_ff == 2048 &&
          c.is_gated_act == 0);
    model_config_free(&cfg);

    char *dir = tmp_path(g_tmp, "t5_as_umt5"), *cfgp = tmp_path(g_tmp, "t5_as_umt5/config.json");
    t5_fixture f = t5_fixture_tiny();
    CHECK(fixture_write_t5(dir, &f, CPDIT_DTYPE_F32, 3, &err) == 0);
    size_t n = 0;
    char *text = tmp_read(cfgp, &n), *at = text ? strstr(text, "\"t5\"") : NULL;
    CHECK(at != NULL);
    if (at) { /* "t5" -> "umt5" with the same length: drop two spaces after the comma */
        char fixed[4096];
        snprintf(fixed, sizeof fixed, "%.*s\"umt5\",%s", (int)(at - text), text, at + 5);
        CHECK(tmp_write(g_tmp, "t5_as_umt5/config.json", fixed) == 0);
        t5_encoder *m = NULL;
        CHECK(t5_encoder_load(dir, NULL, &m, &err) == CPDIT_ERR_INPUT);
        CHECK_STR_CONTAINS(err.what,
                           "encoder.block.1.layer.0.SelfAttention.relative_attention_bias");
        t5_encoder_free(m);
    }
    free(text);
    free(dir);
    free(cfgp);
}

/* dst: src's checkpoint (model.safetensors) with every block's bias table replaced by block
 * 0's; keep_tables 0: only block 0's kept, model_type "t5" (the T5 reading). */
static void write_layer0_copy(const char *src, const char *dst, int layers, int keep_tables)
{
    cpdit_error err;
    char path[4096], cfg[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    safetensors_file *f = NULL;
    CHECK(safetensors_open(&f, path, &err) == CPDIT_OK);
    if (!f)
        return;
    const safetensors_tensor *t0 =
        safetensors_find(f, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    safetensors_write_tensor *w = calloc(safetensors_count(f), sizeof *w);
    size_t n = 0;
    for (size_t i = 0; i < safetensors_count(f); i++) {
        const safetensors_tensor *t = safetensors_tensor_at(f, i);
        const int is_table = strstr(t->name, "relative_attention_bias") != NULL;
        if (is_table && t != t0 && !keep_tables)
            continue;
        const safetensors_tensor *from = is_table ? t0 : t;
        w[n++] = (safetensors_write_tensor){t->name, t->dtype, t->ndim, t->shape, from->data,
                                            t->dtype};
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    CHECK(fixture_write_text(path, "") == 0); /* makes the folder */
    CHECK(safetensors_write(path, w, n, NULL, 0, &err) == CPDIT_OK);
    free(w);
    safetensors_close(f);
    snprintf(path, sizeof path, "%s/config.json", src);
    size_t len = 0;
    char *text = tmp_read(path, &len), *at = text ? strstr(text, "\"umt5\"") : NULL;
    CHECK(at != NULL);
    if (at)
        snprintf(cfg, sizeof cfg, "%.*s\"%s\"%s", (int)(at - text), text,
                 keep_tables ? "umt5" : "t5", at + 6);
    snprintf(path, sizeof path, "%s/config.json", dst);
    CHECK(at && fixture_write_text(path, cfg) == 0);
    free(text);
    (void)layers;
}

static void test_forward(void)
{
    cpdit_error err;
    t5_fixture f = t5_fixture_tiny();
    f.umt5 = 1;
    f.layers = 3;
    char *du = tmp_path(g_tmp, "umt5"), *dt = tmp_path(g_tmp, "t5");
    char *dl0 = tmp_path(g_tmp, "umt5_layer0"), *dl0t5 = tmp_path(g_tmp, "umt5_layer0_t5");
    CHECK(fixture_write_t5(du, &f, CPDIT_DTYPE_F32, 11, &err) == 0);
    t5_fixture ft = t5_fixture_tiny();
    CHECK(fixture_write_t5(dt, &ft, CPDIT_DTYPE_F32, 12, &err) == 0);
    write_layer0_copy(du, dl0, f.layers, 1);
    write_layer0_copy(du, dl0t5, f.layers, 0);
    t5_encoder *mu = load(du), *mt = load(dt), *ml0 = load(dl0), *ml0t5 = load(dl0t5);
    if (!mu || !mt || !ml0 || !ml0t5)
        goto done;
    CHECK(t5_encoder_get_config(mu)->per_layer_bias == 1);
    CHECK(t5_encoder_get_config(mt)->per_layer_bias == 0);
    const size_t D = (size_t)f.d_model, n = (size_t)B * L * D;
    int32_t ids[B * L], mask[B * L], ones[B * L], ids2[B * L];
    make_inputs(ids, mask, LENS, 5);
    for (int i = 0; i < B * L; i++)
        ones[i] = 1;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);

    /* all ones == no mask, bitwise */
    t5_encoder *both[2] = {mu, mt};
    for (int k = 0; k < 2; k++) {
        CHECK(t5_encoder_forward(both[k], ids, B, L, a, &err) == CPDIT_OK);
        CHECK(t5_encoder_forward_masked(both[k], ids, ones, B, L, b, &err) == CPDIT_OK);
        CHECK(memcmp(a, b, n * sizeof *a) == 0);
    }

    /* masked keys do not matter for the kept rows; the mask changes the result */
    CHECK(t5_encoder_forward_masked(mu, ids, mask, B, L, a, &err) == CPDIT_OK);
    memcpy(ids2, ids, sizeof ids);
    for (int i = 0; i < B * L; i++)
        if (!mask[i])
            ids2[i] = 3 + i % 50;
    CHECK(t5_encoder_forward_masked(mu, ids2, mask, B, L, b, &err) == CPDIT_OK);
    double worst = 0;
    for (int bb = 0; bb < B; bb++)
        worst = fmax(worst, max_rel_diff(b + (size_t)bb * L * D, a + (size_t)bb * L * D,
                                         (size_t)LENS[bb] * D));
    CHECK_MSG(worst <= MASK_TOL, "kept rows moved by %.3g with other masked ids", worst);
    CHECK(t5_encoder_forward(mu, ids, B, L, c, &err) == CPDIT_OK);
    CHECK(max_rel_diff(c, a, (size_t)LENS[0] * D) > LAYER_DIFF_MIN); /* item 0 is padded */

    /* per-layer tables matter; equal tables = the T5 path */
    CHECK(t5_encoder_forward_masked(ml0, ids, mask, B, L, b, &err) == CPDIT_OK);
    const double dl = max_rel_diff(b, a, n);
    CHECK_MSG(dl > LAYER_DIFF_MIN, "block 0's table everywhere moved the output by %.3g only",
              dl);
    CHECK(t5_encoder_forward_masked(ml0t5, ids, mask, B, L, c, &err) == CPDIT_OK);
    CHECK(memcmp(b, c, n * sizeof *b) == 0);
    printf("umt5: per-layer tables vs block 0's everywhere: %.3g relative\n", dl);

    /* prompt embeds: the trimmed run, zeros after each length */
    int lens[B];
    CHECK(umt5_prompt_embeds(mu, ids, mask, B, L, c, lens, &err) == CPDIT_OK);
    worst = 0;
    int zeros_ok = 1;
    for (int bb = 0; bb < B; bb++) {
        CHECK(lens[bb] == LENS[bb]);
        worst = fmax(worst, max_rel_diff(c + (size_t)bb * L * D, a + (size_t)bb * L * D,
                                         (size_t)LENS[bb] * D));
        for (size_t k = (size_t)LENS[bb] * D; k < (size_t)L * D; k++)
            zeros_ok &= c[(size_t)bb * L * D + k] == 0.0f && !signbit(c[(size_t)bb * L * D + k]);
    }
    CHECK_MSG(worst <= TRIM_TOL, "prompt embeds vs the full forward: %.3g", worst);
    CHECK(zeros_ok);
    printf("umt5: prompt embeds on max(len) tokens vs all %d: %.3g relative\n", L, worst);

    /* a mask that is not a prefix: the full path, rows [0, count) kept as diffusers does */
    int32_t holes[B * L];
    memcpy(holes, mask, sizeof holes);
    holes[1 * L + 3] = 0; /* item 1: 23 ones with a hole at 3 */
    CHECK(t5_encoder_forward_masked(mu, ids, holes, B, L, a, &err) == CPDIT_OK);
    CHECK(umt5_prompt_embeds(mu, ids, holes, B, L, c, lens, &err) == CPDIT_OK);
    CHECK(lens[1] == L - 1);
    CHECK(memcmp(c + (size_t)L * D, a + (size_t)L * D, (size_t)(L - 1) * D * sizeof *a) == 0);
    CHECK(c[(size_t)2 * L * D - 1] == 0.0f);

    /* a fully masked item: finite (uniform attention over its keys, as transformers) */
    int32_t none[B * L];
    memcpy(none, mask, sizeof none);
    for (int s = 0; s < L; s++)
        none[2 * L + s] = 0;
    CHECK(t5_encoder_forward_masked(mu, ids, none, B, L, a, &err) == CPDIT_OK);
    int finite = 1;
    for (size_t k = 0; k < n; k++)
        finite &= isfinite(a[k]) != 0;
    CHECK(finite);
    CHECK(umt5_prompt_embeds(mu, ids, none, B, L, c, lens, &err) == CPDIT_OK);
    CHECK(lens[2] == 0 && c[(size_t)2 * L * D] == 0.0f);

    /* bad input */
    memcpy(holes, mask, sizeof holes);
    holes[7] = 2;
    CHECK(t5_encoder_forward_masked(mu, ids, holes, B, L, a, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "attention_mask value 2 at (0, 7)");
    CHECK(umt5_prompt_embeds(mu, ids, holes, B, L, c, NULL, &err) == CPDIT_ERR_INPUT);
    free(a);
    free(b);
    free(c);
done:
    t5_encoder_free(mu);
    t5_encoder_free(mt);
    t5_encoder_free(ml0);
    t5_encoder_free(ml0t5);
    free(du);
    free(dt);
    free(dl0);
    free(dl0t5);
}

/* umt5_prompt_tokenize with the toy tokenizer: ids padded with <pad>, mask 1 on the real ids
 * (the text's tokens and </s>), truncation keeps </s>. */
static void test_tokenize(void)
{
    char *dir = tmp_path(g_tmp, "tok");
    cpdit_error err;
    CHECK(fixture_write_t5_tokenizer(dir) == 0);
    t5_tokenizer *tok = NULL;
    CHECK_MSG(t5_tokenizer_load(dir, &tok, &err) == CPDIT_OK, "%s", err.what);
    if (tok) {
        enum { TL = 8, CAP = 16 };
        int32_t ids[CAP], mask[CAP], want[CAP];
        size_t n = 0;
        int cut = -1;
        CHECK(t5_tokenizer_encode_padded(tok, "a b", 3, TL, want, &n, NULL, &err) == CPDIT_OK);
        CHECK(umt5_prompt_tokenize(tok, "a b", TL, ids, mask, &cut, &err) == CPDIT_OK);
        CHECK(n >= 2 && n < TL && cut == 0 && memcmp(ids, want, TL * sizeof *ids) == 0);
        for (int s = 0; s < TL; s++)
            CHECK(mask[s] == ((size_t)s < n) && (mask[s] || ids[s] == 0));
        CHECK(ids[n - 1] == 1); /* </s> */
        int32_t ids2[CAP], mask2[CAP]; /* WanPipeline's whitespace clean first */
        CHECK(umt5_prompt_tokenize(tok, " a \t\n b  ", TL, ids2, mask2, NULL, &err) == CPDIT_OK);
        CHECK(memcmp(ids2, ids, TL * sizeof *ids) == 0 &&
              memcmp(mask2, mask, TL * sizeof *mask) == 0);
        CHECK(umt5_prompt_tokenize(tok, "a b c d e a b c d e", 10, ids, mask, &cut, &err) ==
              CPDIT_OK);
        CHECK(cut == 0 || (cut == 1 && ids[9] == 1));
        CHECK(umt5_prompt_tokenize(tok, "a b c d e a b c d e a b", 4, ids, mask, &cut, &err) ==
              CPDIT_OK);
        CHECK(cut == 1 && ids[3] == 1 && mask[0] && mask[3]);
        CHECK(umt5_prompt_tokenize(tok, "a", 0, ids, mask, NULL, &err) == CPDIT_ERR_INPUT);
    }
    t5_tokenizer_free(tok);
    free(dir);
}

int main(void)
{
    g_tmp = tmpdir_make("umt5");
    if (!g_tmp) {
        fprintf(stderr, "cannot create a temporary folder\n");
        return 1;
    }
    test_config();
    test_forward();
    test_tokenize();
    tmpdir_remove(g_tmp);
    free(g_tmp);
    TEST_MAIN_END();
}
