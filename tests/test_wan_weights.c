/* test_wan_weights.c — the Wan transformer's weights and the parts of its forward outside the
 * blocks, in plain C (no PyTorch): a tiny random model (2 heads x 8, 1 block, F32) written as a
 * diffusers-layout safetensors file, then
 *   - it opens; the parameter count is the sum of the tensors' sizes;
 *   - blocks.0.attn2.norm_added_q.weight is ignored, as diffusers ignores it on load;
 *   - an extra tensor, a missing one and a wrongly shaped one (scale_shift_table (2, E),
 *     patch_embedding 3-D) are INPUT errors naming the tensor;
 *   - with time_proj and the block's modulation table zero (every gate 0) and attn2's output
 *     projection zero, the block adds nothing, so the output is proj_out(LN(patch_embedding(x))
 *     (1 + scale) + shift) with (shift, scale) = scale_shift_table + temb: equal to a plain
 *     double-precision loop here within 1e-5 (relative to max |out|);
 *   - a random model: with F32 weights the native and fp32 formats agree exactly; with BF16
 *     weights resident and streamed block by block agree exactly and native is within 1e-2
 *     of fp32.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/safetensors.h"
#include "lib/models/wan/wan_internal.h"
#include "lib/models/wan/wan_latents.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"

enum { HEADS = 2, HEAD_DIM = 8, E = HEADS * HEAD_DIM, IN_CH = 4, PATCH = 4, TEXT = 12,
       FREQ = 8, FFN = 24, PD = IN_CH * PATCH, OD = IN_CH * PATCH, MAX_TENSORS = 48 };

typedef struct tensor {
    char name[96];
    int ndim;
    int64_t shape[5];
    float *data;
    size_t n;
} tensor;

typedef struct model_tensors {
    tensor t[MAX_TENSORS];
    int count;
} model_tensors;

static unsigned seed = 5;
static float frand(void)
{
    seed = seed * 1103515245u + 12345u;
    return (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static tensor *add(model_tensors *m, const char *name, int ndim, const int64_t *shape)
{
    tensor *t = &m->t[m->count++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->n = 1;
    for (int i = 0; i < ndim; i++)
        t->n *= (size_t)(t->shape[i] = shape[i]);
    t->data = malloc(t->n * sizeof(float));
    for (size_t i = 0; i < t->n; i++)
        t->data[i] = frand();
    return t;
}

static void add_linear(model_tensors *m, const char *prefix, int out, int in)
{
    char name[96];
    const int64_t w[2] = {out, in}, b[1] = {out};
    snprintf(name, sizeof name, "%s.weight", prefix);
    add(m, name, 2, w);
    snprintf(name, sizeof name, "%s.bias", prefix);
    add(m, name, 1, b);
}

static void build(model_tensors *m)
{
    memset(m, 0, sizeof *m);
    const int64_t conv[5] = {E, IN_CH, 1, 2, 2}, vec[1] = {E}, t2[3] = {1, 2, E};
    const int64_t t6[3] = {1, 6, E};
    add(m, "patch_embedding.weight", 5, conv);
    add(m, "patch_embedding.bias", 1, vec);
    add_linear(m, "condition_embedder.time_embedder.linear_1", E, FREQ);
    add_linear(m, "condition_embedder.time_embedder.linear_2", E, E);
    add_linear(m, "condition_embedder.time_proj", 6 * E, E);
    add_linear(m, "condition_embedder.text_embedder.linear_1", E, TEXT);
    add_linear(m, "condition_embedder.text_embedder.linear_2", E, E);
    add_linear(m, "proj_out", OD, E);
    add(m, "scale_shift_table", 3, t2);
    static const char *const attn[] = {"attn1", "attn2"};
    for (int a = 0; a < 2; a++) {
        char p[64], n[96];
        static const char *const lin[] = {"to_q", "to_k", "to_v", "to_out.0"};
        for (int l = 0; l < 4; l++) {
            snprintf(p, sizeof p, "blocks.0.%s.%s", attn[a], lin[l]);
            add_linear(m, p, E, E);
        }
        snprintf(n, sizeof n, "blocks.0.%s.norm_q.weight", attn[a]);
        add(m, n, 1, vec);
        snprintf(n, sizeof n, "blocks.0.%s.norm_k.weight", attn[a]);
        add(m, n, 1, vec);
    }
    add(m, "blocks.0.norm2.weight", 1, vec);
    add(m, "blocks.0.norm2.bias", 1, vec);
    add_linear(m, "blocks.0.ffn.net.0.proj", FFN, E);
    add_linear(m, "blocks.0.ffn.net.2", E, FFN);
    add(m, "blocks.0.scale_shift_table", 3, t6);
}

static tensor *find(model_tensors *m, const char *name)
{
    for (int i = 0; i < m->count; i++)
        if (!strcmp(m->t[i].name, name))
            return &m->t[i];
    return NULL;
}

static void zero(model_tensors *m, const char *name)
{
    tensor *t = find(m, name);
    memset(t->data, 0, t->n * sizeof(float));
}

/* Write m (less the tensor named skip) to path, stored as dtype. */
static int write_model(const model_tensors *m, const char *path, const char *skip,
                       cpdit_dtype dtype)
{
    safetensors_write_tensor w[MAX_TENSORS];
    int n = 0;
    for (int i = 0; i < m->count; i++) {
        if (skip && !strcmp(m->t[i].name, skip))
            continue;
        w[n++] = (safetensors_write_tensor){m->t[i].name, dtype, m->t[i].ndim,
                                            m->t[i].shape, m->t[i].data, CPDIT_DTYPE_F32};
    }
    cpdit_error err;
    return safetensors_write(path, w, (size_t)n, NULL, 0, &err) == CPDIT_OK;
}

static void config(wan_transformer_config *c)
{
    wan_transformer_config_defaults(c);
    c->num_attention_heads = HEADS;
    c->attention_head_dim = HEAD_DIM;
    c->in_channels = c->out_channels = IN_CH;
    c->text_dim = TEXT;
    c->freq_dim = FREQ;
    c->ffn_dim = FFN;
    c->num_layers = 1;
}

/* open m written to path: the status, err filled. */
static cpdit_status open_as(const model_tensors *m, const char *path, const char *skip,
                            cpdit_dtype dtype, wan_transformer **out, cpdit_error *err)
{
    wan_transformer_config c;
    config(&c);
    cpdit_error_clear(err);
    if (!write_model(m, path, skip, dtype))
        return CPDIT_ERR_RUNTIME;
    return wan_transformer_open_with_config(out, &c, path, err);
}

static cpdit_status open_model(const model_tensors *m, const char *path, const char *skip,
                               wan_transformer **out, cpdit_error *err)
{
    return open_as(m, path, skip, CPDIT_DTYPE_F32, out, err);
}

static void expect_error(model_tensors *m, const char *path, const char *skip,
                         const char *needle)
{
    wan_transformer *w = NULL;
    cpdit_error err;
    CHECK_MSG(open_model(m, path, skip, &w, &err) == CPDIT_ERR_INPUT, "%s", needle);
    CHECK_STR_CONTAINS(err.what, needle);
    wan_transformer_close(w);
}

/* The inputs: S tokens of a 1 x 2 x 3 patch grid, L text tokens, one item. */
enum { S = 6, L = 3 };
static float hs[S * PD], pos[S * 3], ehs[L * TEXT], tstep[1] = {731.0f};

static cpdit_status run(wan_transformer *w, float *out, cpdit_error *err)
{
    wan_inputs in = {1, S, hs, pos, tstep, L, ehs, NULL};
    return wan_transformer_forward(w, cpdit_backend_cpu(), NULL, &in, out, err);
}

static double silu(double x) { return x / (1 + exp(-x)); }

/* y (out) = W x + b for a linear named prefix of m, in double. */
static void dlin(const model_tensors *m, const char *prefix, const double *x, int in, int out,
                 double *y)
{
    char n[96];
    snprintf(n, sizeof n, "%s.weight", prefix);
    const float *W = find((model_tensors *)m, n)->data;
    snprintf(n, sizeof n, "%s.bias", prefix);
    const float *b = find((model_tensors *)m, n)->data;
    for (int o = 0; o < out; o++) {
        double s = b[o];
        for (int i = 0; i < in; i++)
            s += (double)W[o * in + i] * x[i];
        y[o] = s;
    }
}

/* The zero-gate model's output, token by token. */
static void expected(const model_tensors *m, double *out)
{
    double sin_emb[FREQ], h[E], temb[E];
    for (int i = 0; i < FREQ / 2; i++) {
        const double f = exp(-log(10000.0) * i / (FREQ / 2));
        sin_emb[i] = cos(tstep[0] * f);
        sin_emb[FREQ / 2 + i] = sin(tstep[0] * f);
    }
    dlin(m, "condition_embedder.time_embedder.linear_1", sin_emb, FREQ, E, h);
    for (int i = 0; i < E; i++)
        h[i] = silu(h[i]);
    dlin(m, "condition_embedder.time_embedder.linear_2", h, E, E, temb);
    const float *tab = find((model_tensors *)m, "scale_shift_table")->data;
    for (int s = 0; s < S; s++) {
        double p[PD], e[E], mean = 0, var = 0;
        for (int i = 0; i < PD; i++)
            p[i] = hs[s * PD + i];
        dlin(m, "patch_embedding", p, PD, E, e); /* the 5-D weight is (E, PD) row-major */
        for (int i = 0; i < E; i++)
            mean += e[i] / E;
        for (int i = 0; i < E; i++)
            var += (e[i] - mean) * (e[i] - mean) / E;
        for (int i = 0; i < E; i++) {
            const double shift = tab[i] + temb[i], scale = tab[E + i] + temb[i];
            e[i] = (e[i] - mean) / sqrt(var + 1e-6) * (1 + scale) + shift;
        }
        dlin(m, "proj_out", e, E, OD, out + s * OD);
    }
}

static double rel_diff(const float *a, const double *b, size_t n)
{
    double d = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs(a[i] - b[i]));
        mx = fmax(mx, fabs(b[i]));
    }
    return d / (mx > 0 ? mx : 1);
}

int main(void)
{
    char *dir = tmpdir_make("wan-weights");
    char path[512];
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    for (int i = 0; i < S * PD; i++)
        hs[i] = frand();
    for (int i = 0; i < L * TEXT; i++)
        ehs[i] = frand();
    wan_token_positions(pos, 1, 2, 3);
    model_tensors m;
    build(&m);
    cpdit_error err;
    wan_transformer *w = NULL;
    CHECK(open_model(&m, path, NULL, &w, &err) == CPDIT_OK);
    size_t total = 0;
    for (int i = 0; i < m.count; i++)
        total += m.t[i].n;
    CHECK(w && wan_transformer_param_count(w) == total);

    /* a random model: F32 weights: the native format is the fp32 one (exactly); BF16
     * weights: resident = streamed block by block (exactly), native within 1e-2 of fp32 */
    float out_a[S * OD], out_b[S * OD];
    double ref[S * OD];
    CHECK(w && run(w, out_a, &err) == CPDIT_OK);
    wan_transformer_close(w);
    w = NULL;
    CHECK(open_model(&m, path, NULL, &w, &err) == CPDIT_OK);
    wan_transformer_set_weight_format(w, CPDIT_WEIGHT_F32);
    CHECK(run(w, out_b, &err) == CPDIT_OK && memcmp(out_a, out_b, sizeof out_a) == 0);
    wan_transformer_close(w);
    w = NULL;
    CHECK(open_as(&m, path, NULL, CPDIT_DTYPE_BF16, &w, &err) == CPDIT_OK);
    CHECK(run(w, out_a, &err) == CPDIT_OK && wan_transformer_weights_resident(w));
    wan_transformer_close(w);
    w = NULL;
    CHECK(open_as(&m, path, NULL, CPDIT_DTYPE_BF16, &w, &err) == CPDIT_OK);
    wan_transformer_set_weight_cache(w, 1);
    CHECK(run(w, out_b, &err) == CPDIT_OK && !wan_transformer_weights_resident(w));
    CHECK(memcmp(out_a, out_b, sizeof out_a) == 0);
    wan_transformer_close(w);
    w = NULL;
    CHECK(open_as(&m, path, NULL, CPDIT_DTYPE_BF16, &w, &err) == CPDIT_OK);
    wan_transformer_set_weight_format(w, CPDIT_WEIGHT_F32);
    CHECK(run(w, out_b, &err) == CPDIT_OK);
    for (int i = 0; i < S * OD; i++)
        ref[i] = out_b[i];
    CHECK_NEAR(rel_diff(out_a, ref, S * OD), 0, 1e-2);
    wan_transformer_close(w);
    w = NULL;

    /* the zero-gate model against the plain loop */
    zero(&m, "condition_embedder.time_proj.weight");
    zero(&m, "condition_embedder.time_proj.bias");
    zero(&m, "blocks.0.scale_shift_table");
    zero(&m, "blocks.0.attn2.to_out.0.weight");
    zero(&m, "blocks.0.attn2.to_out.0.bias");
    double want[S * OD];
    expected(&m, want);
    CHECK(open_model(&m, path, NULL, &w, &err) == CPDIT_OK);
    CHECK(w && run(w, out_a, &err) == CPDIT_OK);
    CHECK_NEAR(rel_diff(out_a, want, S * OD), 0, 1e-5);
    wan_transformer_close(w);
    w = NULL;

    /* diffusers' ignored tensor; an extra one; a missing one; wrong shapes */
    const int64_t v[1] = {E}, bad_table[2] = {2, E}, bad_conv[3] = {E, IN_CH, 4};
    add(&m, "blocks.0.attn2.norm_added_q.weight", 1, v);
    CHECK(open_model(&m, path, NULL, &w, &err) == CPDIT_OK);
    wan_transformer_close(w);
    w = NULL;
    add(&m, "blocks.0.attn2.extra.weight", 1, v);
    expect_error(&m, path, NULL, "blocks.0.attn2.extra.weight");
    m.count--;
    expect_error(&m, path, "blocks.0.ffn.net.2.bias", "blocks.0.ffn.net.2.bias");
    tensor *t = find(&m, "scale_shift_table");
    t->ndim = 2;
    memcpy(t->shape, bad_table, sizeof bad_table);
    expect_error(&m, path, NULL, "scale_shift_table");
    t->ndim = 3;
    t->shape[0] = 1, t->shape[1] = 2, t->shape[2] = E;
    t = find(&m, "patch_embedding.weight");
    t->ndim = 3;
    memcpy(t->shape, bad_conv, sizeof bad_conv);
    expect_error(&m, path, NULL, "patch_embedding.weight");

    for (int i = 0; i < m.count; i++)
        free(m.t[i].data);
    tmpdir_remove(dir);
    free(dir);
    TEST_MAIN_END();
}
