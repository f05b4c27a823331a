/* text_encoder_fixtures.c — random text encoder checkpoints and toy tokenizers for tests (see
 * text_encoder_fixtures.h).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/io/safetensors.h"
#include "tests/text_encoder_fixtures.h"

#define FIX_NORM_SPREAD 0.2f
#define FIX_BIAS_SPREAD 0.1f
#define FIX_EMBED_SPREAD 1.0f
#define FIX_MAX_NAME 160

clip_fixture clip_fixture_tiny(void)
{
    clip_fixture f = {1000, 32, 64, 2, 4, 77, 999, "quick_gelu", 1e-5};
    return f;
}

t5_fixture t5_fixture_tiny(void)
{
    t5_fixture f = {1000, 32, 8, 64, 2, 4, 32, 128, "gated-gelu", 1e-6, 1, 1, 0};
    return f;
}

/* ------------------------------------------------------------------ files */

static int mkdir_p(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(buf, 0755) && errno != EEXIST)
                return -1;
            *s = '/';
        }
    return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}

int fixture_write_text(const char *path, const char *text)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (mkdir_p(dir))
            return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    const size_t n = strlen(text);
    const int ok = fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* ------------------------------------------------------------------ random tensors */

typedef struct fix_tensor {
    char name[FIX_MAX_NAME];
    int ndim;
    int64_t shape[2];
    float *data;
} fix_tensor;

typedef struct fix_model {
    fix_tensor *t;
    size_t n, cap;
    uint64_t rng;
    int failed;
} fix_model;

static float uniform(fix_model *m) /* [-1, 1) */
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    return (float)((m->rng >> 40) * (2.0 / 16777216.0) - 1.0);
}

/* Add a (rows, cols) tensor (cols 0: 1-D) of center + spread * U[-1, 1). */
static void add(fix_model *m, const char *name, int64_t rows, int64_t cols, float center,
                float spread)
{
    if (m->failed)
        return;
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        fix_tensor *nt = realloc(m->t, cap * sizeof *nt);
        if (!nt) {
            m->failed = 1;
            return;
        }
        m->t = nt;
        m->cap = cap;
    }
    fix_tensor *t = &m->t[m->n];
    const size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    t->data = malloc(n * sizeof(float));
    if (!t->data) {
        m->failed = 1;
        return;
    }
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    for (size_t i = 0; i < n; i++)
        t->data[i] = center + spread * uniform(m);
    m->n++;
}

static void add_linear(fix_model *m, const char *name, int out, int in)
{
    add(m, name, out, in, 0.0f, sqrtf(3.0f / (float)in));
}

static void model_free(fix_model *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->t[i].data);
    free(m->t);
}

/* Write tensors [lo, hi) of m to path. */
static int write_part(const fix_model *m, size_t lo, size_t hi, const char *path,
                      cpdit_dtype dtype, cpdit_error *err)
{
    safetensors_write_tensor *w = calloc(hi - lo + 1, sizeof *w);
    if (!w)
        return -1;
    for (size_t i = lo; i < hi; i++) {
        w[i - lo].name = m->t[i].name;
        w[i - lo].dtype = dtype;
        w[i - lo].ndim = m->t[i].ndim;
        w[i - lo].shape = m->t[i].shape;
        w[i - lo].data = m->t[i].data;
        w[i - lo].src_dtype = CPDIT_DTYPE_F32;
    }
    cpdit_status st = safetensors_write(path, w, hi - lo, NULL, 0, err);
    free(w);
    return st ? -1 : 0;
}

/* model.safetensors, or two shards and model.safetensors.index.json. */
static int write_model(fix_model *m, const char *dir, cpdit_dtype dtype, int shards,
                       cpdit_error *err)
{
    char path[4096];
    if (m->failed) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
        return -1;
    }
    if (shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return write_part(m, 0, m->n, path, dtype, err);
    }
    static const char *const names[2] = {"model-00001-of-00002.safetensors",
                                         "model-00002-of-00002.safetensors"};
    const size_t half = m->n / 2;
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[s]);
        if (write_part(m, s ? half : 0, s ? m->n : half, path, dtype, err))
            return -1;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot write");
        return -1;
    }
    fprintf(f, "{\"metadata\": {}, \"weight_map\": {");
    for (size_t i = 0; i < m->n; i++)
        fprintf(f, "%s\"%s\": \"%s\"", i ? ", " : "", m->t[i].name, names[i >= half]);
    fprintf(f, "}}\n");
    return fclose(f) ? -1 : 0;
}

/* ------------------------------------------------------------------ models */

int fixture_write_clip(const char *dir, const clip_fixture *f, cpdit_dtype dtype, uint32_t seed,
                       cpdit_error *err)
{
    char path[4096], name[FIX_MAX_NAME], cfg[2048];
    if (mkdir_p(dir)) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot create the folder");
        return -1;
    }
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"CLIPTextModel\"], \"model_type\": \"clip_text_model\", "
             "\"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"max_position_embeddings\": %d, \"hidden_act\": \"%s\", \"layer_norm_eps\": %g, "
             "\"bos_token_id\": 0, \"eos_token_id\": %d, \"pad_token_id\": 1, "
             "\"projection_dim\": %d, \"torch_dtype\": \"%s\"}\n",
             f->vocab, f->hidden, f->intermediate, f->layers, f->heads, f->max_positions, f->act,
             f->eps, f->eos_token_id, f->hidden,
             dtype == CPDIT_DTYPE_BF16 ? "bfloat16" : dtype == CPDIT_DTYPE_F16 ? "float16"
                                                                                : "float32");
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (fixture_write_text(path, cfg)) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot write");
        return -1;
    }
    fix_model m = {0};
    m.rng = 0x9e3779b97f4a7c15ull ^ seed;
    const int D = f->hidden, I = f->intermediate;
    add(&m, "text_model.embeddings.token_embedding.weight", f->vocab, D, 0.0f, FIX_EMBED_SPREAD);
    add(&m, "text_model.embeddings.position_embedding.weight", f->max_positions, D, 0.0f,
        FIX_EMBED_SPREAD / 2);
    for (int l = 0; l < f->layers; l++) {
        static const char *const proj[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
#define NAME(...) (snprintf(name, sizeof name, "text_model.encoder.layers.%d." __VA_ARGS__), name)
        for (int j = 0; j < 4; j++) {
            add_linear(&m, NAME("self_attn.%s.weight", l, proj[j]), D, D);
            add(&m, NAME("self_attn.%s.bias", l, proj[j]), D, 0, 0.0f, FIX_BIAS_SPREAD);
        }
        for (int j = 1; j <= 2; j++) {
            add(&m, NAME("layer_norm%d.weight", l, j), D, 0, 1.0f, FIX_NORM_SPREAD);
            add(&m, NAME("layer_norm%d.bias", l, j), D, 0, 0.0f, FIX_BIAS_SPREAD);
        }
        add_linear(&m, NAME("mlp.fc1.weight", l), I, D);
        add(&m, NAME("mlp.fc1.bias", l), I, 0, 0.0f, FIX_BIAS_SPREAD);
        add_linear(&m, NAME("mlp.fc2.weight", l), D, I);
        add(&m, NAME("mlp.fc2.bias", l), D, 0, 0.0f, FIX_BIAS_SPREAD);
#undef NAME
    }
    add(&m, "text_model.final_layer_norm.weight", D, 0, 1.0f, FIX_NORM_SPREAD);
    add(&m, "text_model.final_layer_norm.bias", D, 0, 0.0f, FIX_BIAS_SPREAD);
    const int rc = write_model(&m, dir, dtype, 1, err);
    model_free(&m);
    return rc;
}

int fixture_write_t5(const char *dir, const t5_fixture *f, cpdit_dtype dtype, uint32_t seed,
                     cpdit_error *err)
{
    char path[4096], name[FIX_MAX_NAME], cfg[2048];
    if (mkdir_p(dir)) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot create the folder");
        return -1;
    }
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", "
             "\"vocab_size\": %d, \"d_model\": %d, \"d_kv\": %d, \"d_ff\": %d, "
             "\"num_layers\": %d, \"num_heads\": %d, \"relative_attention_num_buckets\": %d, "
             "\"relative_attention_max_distance\": %d, \"feed_forward_proj\": \"%s\", "
             "\"layer_norm_epsilon\": %g, \"is_encoder_decoder\": true, \"pad_token_id\": 0, "
             "\"eos_token_id\": 1, \"dropout_rate\": 0.1}\n",
             f->umt5 ? "UMT5EncoderModel" : "T5EncoderModel", f->umt5 ? "umt5" : "t5",
             f->vocab, f->d_model, f->d_kv, f->d_ff, f->layers, f->heads, f->buckets,
             f->max_distance, f->ff_proj, f->eps);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (fixture_write_text(path, cfg)) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot write");
        return -1;
    }
    fix_model m = {0};
    m.rng = 0x2545f4914f6cdd1dull ^ seed;
    const int D = f->d_model, inner = f->heads * f->d_kv, F = f->d_ff;
    const int gated = !strncmp(f->ff_proj, "gated-", 6);
    add(&m, f->embed_as_shared ? "shared.weight" : "encoder.embed_tokens.weight", f->vocab, D,
        0.0f, FIX_EMBED_SPREAD);
    for (int l = 0; l < f->layers; l++) {
#define NAME(...) (snprintf(name, sizeof name, "encoder.block.%d.layer." __VA_ARGS__), name)
        add(&m, NAME("0.layer_norm.weight", l), D, 0, 1.0f, FIX_NORM_SPREAD);
        if (f->umt5) /* q with T5's folded 1/sqrt(d_kv) (transformers' init: std
                        (d_model d_kv)^-1/2): scores of order one, as in trained models */
            add(&m, NAME("0.SelfAttention.q.weight", l), inner, D, 0.0f,
                sqrtf(3.0f / ((float)D * (float)f->d_kv)));
        else
            add_linear(&m, NAME("0.SelfAttention.q.weight", l), inner, D);
        add_linear(&m, NAME("0.SelfAttention.k.weight", l), inner, D);
        add_linear(&m, NAME("0.SelfAttention.v.weight", l), inner, D);
        add_linear(&m, NAME("0.SelfAttention.o.weight", l), D, inner);
        if (l == 0 || f->umt5) /* UMT5: every block has its own table */
            add(&m, NAME("0.SelfAttention.relative_attention_bias.weight", l), f->buckets,
                f->heads, 0.0f, 1.0f);
        add(&m, NAME("1.layer_norm.weight", l), D, 0, 1.0f, FIX_NORM_SPREAD);
        if (gated) {
            add_linear(&m, NAME("1.DenseReluDense.wi_0.weight", l), F, D);
            add_linear(&m, NAME("1.DenseReluDense.wi_1.weight", l), F, D);
        } else {
            add_linear(&m, NAME("1.DenseReluDense.wi.weight", l), F, D);
        }
        add_linear(&m, NAME("1.DenseReluDense.wo.weight", l), D, F);
#undef NAME
    }
    add(&m, "encoder.final_layer_norm.weight", D, 0, 1.0f, FIX_NORM_SPREAD);
    const int rc = write_model(&m, dir, dtype, f->shards, err);
    model_free(&m);
    return rc;
}

/* ------------------------------------------------------------------ toy tokenizers */

int fixture_write_clip_tokenizer(const char *dir)
{
    char path[4096];
    static const char vocab[] =
        "{\"a\": 0, \"b\": 1, \"c\": 2, \"d\": 3, \"e\": 4, \"a</w>\": 5, \"b</w>\": 6,"
        " \"c</w>\": 7, \"d</w>\": 8, \"e</w>\": 9, \"<|startoftext|>\": 10,"
        " \"<|endoftext|>\": 11}\n";
    static const char merges[] = "#version: 0.2\n";
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    if (fixture_write_text(path, vocab))
        return -1;
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    return fixture_write_text(path, merges);
}

int fixture_write_t5_tokenizer(const char *dir)
{
    char path[4096];
    static const char json[] =
        "{\"added_tokens\": [{\"id\": 0, \"content\": \"<pad>\", \"normalized\": false},"
        " {\"id\": 1, \"content\": \"</s>\", \"normalized\": false},"
        " {\"id\": 2, \"content\": \"<unk>\", \"normalized\": false}],"
        " \"normalizer\": null,"
        " \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\","
        " \"prepend_scheme\": \"always\", \"split\": true},"
        " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\":"
        " {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\":"
        " 0}}], \"special_tokens\": {\"</s>\": {\"id\": \"</s>\", \"ids\": [1], \"tokens\":"
        " [\"</s>\"]}}},"
        " \"model\": {\"type\": \"Unigram\", \"unk_id\": 2, \"byte_fallback\": false,"
        " \"vocab\": [[\"<pad>\", 0], [\"</s>\", 0], [\"<unk>\", 0], [\"\\u2581\", -2],"
        " [\"a\", -3], [\"b\", -3], [\"c\", -3], [\"d\", -3], [\"e\", -3],"
        " [\"\\u2581a\", -2.5], [\"\\u2581b\", -2.5], [\"\\u2581c\", -2.5],"
        " [\"\\u2581d\", -2.5], [\"\\u2581e\", -2.5]]}}\n";
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return fixture_write_text(path, json);
}
