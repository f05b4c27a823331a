/* flux_test_tool.c — helpers for the FLUX transformer tests (tests/flux_forward.sh):
 *
 *   flux_test_tool make-model DIR [--heads H] [--head-dim D] [--axes a,b,c] [--layers L]
 *                  [--single S] [--in C] [--out C] [--patch P] [--joint J] [--pooled P]
 *                  [--guidance 0|1] [--dtype F32|BF16|F16] [--seed N] [--bfl FILE]
 *                  [--bfl-prefix P]
 *       A random FLUX transformer in the diffusers layout: DIR/config.json and
 *       DIR/diffusion_pytorch_model.safetensors. With --bfl, the same weights are also written
 *       to FILE under the original BFL names (fused qkv / linear1, final modulation as
 *       (shift, scale)), each name prefixed with P (e.g. ComfyUI's "model.diffusion_model.").
 *       Weights: uniform with std 1/sqrt(fan_in) (linears), 1 + small noise
 *       (RMSNorm weights), small biases; stored in --dtype (default BF16).
 *   flux_test_tool make-inputs FILE --model DIR --batch B --txt T --img-h h --img-w w
 *                  [--seed N] [--id0 V] [--ids3d]
 *       Inputs named as diffusers' forward arguments: hidden_states (B, h w, in),
 *       encoder_hidden_states (B, T, joint), pooled_projections, timestep (B) in (0, 1),
 *       guidance (B) when the config has guidance_embeds, img_ids (h w, 3) = (V, row, col),
 *       txt_ids (T, 3) = 0 (or (B, S, 3) with --ids3d, the deprecated form).
 *   flux_test_tool make-latent FILE [--batch B] [--channels C] [--h h] [--w w] [--seed N]
 *       The VAE decoder's input: latent_sample (B, C, h, w) fp32, uniform in [-1.7, 1.7]
 *       (default 1 x 16 x 5 x 7).
 *   flux_test_tool compare GOT.safetensors WANT.safetensors [--tensor sample] [--tol X]
 *       Prints max|got - want| / max|want| and exits 0 when it is <= tol (default 1e-5),
 *       1 otherwise (also for missing tensors or different shapes).
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/io/safetensors.h"

#define MAX_TENSORS 2048
#define NAME_MAX_LEN 160

static uint64_t rng;

static double urand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* ------------------------------------------------------------------ tensor list */

typedef struct tlist {
    int n;
    char names[MAX_TENSORS][NAME_MAX_LEN];
    int64_t shapes[MAX_TENSORS][2];
    int ndim[MAX_TENSORS];
    float *data[MAX_TENSORS];
} tlist;

static float *tl_add(tlist *t, const char *name, int64_t r, int64_t c)
{
    const int i = t->n++;
    snprintf(t->names[i], NAME_MAX_LEN, "%s", name);
    t->shapes[i][0] = r;
    t->shapes[i][1] = c;
    t->ndim[i] = c ? 2 : 1;
    t->data[i] = malloc((size_t)r * (c ? c : 1) * sizeof(float));
    return t->data[i];
}

static const float *tl_get(const tlist *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->names[i], name))
            return t->data[i];
    fprintf(stderr, "flux_test_tool: internal: no tensor %s\n", name);
    exit(2);
}

static void rand_linear(tlist *t, const char *base, int out, int in)
{
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "%s.weight", base);
    float *w = tl_add(t, name, out, in);
    const double a = sqrt(3.0 / in); /* uniform(-a, a) has std 1/sqrt(in) */
    for (size_t i = 0; i < (size_t)out * in; i++)
        w[i] = (float)(a * urand());
    snprintf(name, sizeof name, "%s.bias", base);
    float *b = tl_add(t, name, out, 0);
    for (int i = 0; i < out; i++)
        b[i] = (float)(0.1 * urand());
}

static void rand_norm(tlist *t, const char *name, int n)
{
    float *w = tl_add(t, name, n, 0);
    for (int i = 0; i < n; i++)
        w[i] = (float)(1.0 + 0.2 * urand());
}

static int write_list(const char *path, const tlist *t, cpdit_dtype dtype)
{
    safetensors_write_tensor *w = calloc((size_t)t->n, sizeof *w);
    for (int i = 0; i < t->n; i++) {
        w[i].name = t->names[i];
        w[i].dtype = dtype;
        w[i].ndim = t->ndim[i];
        w[i].shape = t->shapes[i];
        w[i].data = t->data[i];
        w[i].src_dtype = CPDIT_DTYPE_F32;
    }
    cpdit_error err;
    cpdit_error_clear(&err);
    cpdit_status st = safetensors_write(path, w, (size_t)t->n, NULL, 0, &err);
    free(w);
    if (st) {
        fprintf(stderr, "flux_test_tool: %s: %s\n", err.where, err.what);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ make-model */

typedef struct model_args {
    int heads, head_dim, axes[8], n_axes, layers, single, in, out, patch, joint, pooled, guidance;
    cpdit_dtype dtype;
} model_args;

static void build_diffusers(tlist *t, const model_args *a)
{
    const int E = a->heads * a->head_dim, F = 4 * E, D = a->head_dim;
    char n[NAME_MAX_LEN];
    rand_linear(t, "time_text_embed.timestep_embedder.linear_1", E, 256);
    rand_linear(t, "time_text_embed.timestep_embedder.linear_2", E, E);
    if (a->guidance) {
        rand_linear(t, "time_text_embed.guidance_embedder.linear_1", E, 256);
        rand_linear(t, "time_text_embed.guidance_embedder.linear_2", E, E);
    }
    rand_linear(t, "time_text_embed.text_embedder.linear_1", E, a->pooled);
    rand_linear(t, "time_text_embed.text_embedder.linear_2", E, E);
    rand_linear(t, "context_embedder", E, a->joint);
    rand_linear(t, "x_embedder", E, a->in);
    for (int i = 0; i < a->layers; i++) {
        static const char *const lin6[] = {"norm1.linear", "norm1_context.linear"};
        static const char *const sq[] = {"attn.to_q", "attn.to_k", "attn.to_v",
                                         "attn.add_q_proj", "attn.add_k_proj",
                                         "attn.add_v_proj", "attn.to_out.0", "attn.to_add_out"};
        static const char *const norms[] = {"attn.norm_q.weight", "attn.norm_k.weight",
                                            "attn.norm_added_q.weight",
                                            "attn.norm_added_k.weight"};
        for (int k = 0; k < 2; k++) {
            snprintf(n, sizeof n, "transformer_blocks.%d.%s", i, lin6[k]);
            rand_linear(t, n, 6 * E, E);
        }
        for (int k = 0; k < 8; k++) {
            snprintf(n, sizeof n, "transformer_blocks.%d.%s", i, sq[k]);
            rand_linear(t, n, E, E);
        }
        for (int k = 0; k < 4; k++) {
            snprintf(n, sizeof n, "transformer_blocks.%d.%s", i, norms[k]);
            rand_norm(t, n, D);
        }
        snprintf(n, sizeof n, "transformer_blocks.%d.ff.net.0.proj", i);
        rand_linear(t, n, F, E);
        snprintf(n, sizeof n, "transformer_blocks.%d.ff.net.2", i);
        rand_linear(t, n, E, F);
        snprintf(n, sizeof n, "transformer_blocks.%d.ff_context.net.0.proj", i);
        rand_linear(t, n, F, E);
        snprintf(n, sizeof n, "transformer_blocks.%d.ff_context.net.2", i);
        rand_linear(t, n, E, F);
    }
    for (int i = 0; i < a->single; i++) {
        snprintf(n, sizeof n, "single_transformer_blocks.%d.norm.linear", i);
        rand_linear(t, n, 3 * E, E);
        static const char *const sq[] = {"attn.to_q", "attn.to_k", "attn.to_v"};
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof n, "single_transformer_blocks.%d.%s", i, sq[k]);
            rand_linear(t, n, E, E);
        }
        snprintf(n, sizeof n, "single_transformer_blocks.%d.attn.norm_q.weight", i);
        rand_norm(t, n, D);
        snprintf(n, sizeof n, "single_transformer_blocks.%d.attn.norm_k.weight", i);
        rand_norm(t, n, D);
        snprintf(n, sizeof n, "single_transformer_blocks.%d.proj_mlp", i);
        rand_linear(t, n, F, E);
        snprintf(n, sizeof n, "single_transformer_blocks.%d.proj_out", i);
        rand_linear(t, n, E, E + F);
    }
    rand_linear(t, "norm_out.linear", 2 * E, E);
    rand_linear(t, "proj_out", a->patch * a->patch * a->out, E);
}

/* Copy diffusers tensor `from` (weight + bias) to BFL `to`, optionally as rows of a fused
 * tensor already added (dst rows offset). */
static void bfl_copy(tlist *b, const tlist *d, const char *to, const char *from, int rows,
                     int cols)
{
    char n1[NAME_MAX_LEN], n2[NAME_MAX_LEN];
    snprintf(n1, sizeof n1, "%s.weight", to);
    snprintf(n2, sizeof n2, "%s.weight", from);
    memcpy(tl_add(b, n1, rows, cols), tl_get(d, n2), (size_t)rows * cols * sizeof(float));
    snprintf(n1, sizeof n1, "%s.bias", to);
    snprintf(n2, sizeof n2, "%s.bias", from);
    memcpy(tl_add(b, n1, rows, 0), tl_get(d, n2), (size_t)rows * sizeof(float));
}

/* Fuse several diffusers linears (all with `cols` inputs) into BFL tensor `to`. */
static void bfl_fuse(tlist *b, const tlist *d, const char *to, const char *const *from,
                     const int *rows, int nfrom, int cols)
{
    char n[NAME_MAX_LEN];
    int total = 0;
    for (int k = 0; k < nfrom; k++)
        total += rows[k];
    snprintf(n, sizeof n, "%s.weight", to);
    float *w = tl_add(b, n, total, cols);
    snprintf(n, sizeof n, "%s.bias", to);
    float *bb = tl_add(b, n, total, 0);
    int at = 0;
    for (int k = 0; k < nfrom; k++) {
        snprintf(n, sizeof n, "%s.weight", from[k]);
        memcpy(w + (size_t)at * cols, tl_get(d, n), (size_t)rows[k] * cols * sizeof(float));
        snprintf(n, sizeof n, "%s.bias", from[k]);
        memcpy(bb + at, tl_get(d, n), (size_t)rows[k] * sizeof(float));
        at += rows[k];
    }
}

static void build_bfl(tlist *b, const tlist *d, const model_args *a)
{
    const int E = a->heads * a->head_dim, F = 4 * E, D = a->head_dim;
    char to[NAME_MAX_LEN], f0[NAME_MAX_LEN], f1[NAME_MAX_LEN], f2[NAME_MAX_LEN],
        f3[NAME_MAX_LEN];
    bfl_copy(b, d, "time_in.in_layer", "time_text_embed.timestep_embedder.linear_1", E, 256);
    bfl_copy(b, d, "time_in.out_layer", "time_text_embed.timestep_embedder.linear_2", E, E);
    if (a->guidance) {
        bfl_copy(b, d, "guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1", E,
                 256);
        bfl_copy(b, d, "guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2", E,
                 E);
    }
    bfl_copy(b, d, "vector_in.in_layer", "time_text_embed.text_embedder.linear_1", E, a->pooled);
    bfl_copy(b, d, "vector_in.out_layer", "time_text_embed.text_embedder.linear_2", E, E);
    bfl_copy(b, d, "txt_in", "context_embedder", E, a->joint);
    bfl_copy(b, d, "img_in", "x_embedder", E, a->in);
    bfl_copy(b, d, "final_layer.linear", "proj_out", a->patch * a->patch * a->out, E);
    { /* (scale, shift) -> (shift, scale) */
        float *w = tl_add(b, "final_layer.adaLN_modulation.1.weight", 2 * E, E);
        float *bb = tl_add(b, "final_layer.adaLN_modulation.1.bias", 2 * E, 0);
        const float *dw = tl_get(d, "norm_out.linear.weight"), *db = tl_get(d, "norm_out.linear.bias");
        memcpy(w, dw + (size_t)E * E, (size_t)E * E * sizeof(float));
        memcpy(w + (size_t)E * E, dw, (size_t)E * E * sizeof(float));
        memcpy(bb, db + E, (size_t)E * sizeof(float));
        memcpy(bb + E, db, (size_t)E * sizeof(float));
    }
    for (int i = 0; i < a->layers; i++) {
        const int r3[] = {E, E, E};
        static const char *const streams[2][2] = {{"img", ""}, {"txt", "add_"}};
        for (int s = 0; s < 2; s++) {
            const char *sname = streams[s][0];
            if (s == 0) {
                snprintf(f0, sizeof f0, "transformer_blocks.%d.attn.to_q", i);
                snprintf(f1, sizeof f1, "transformer_blocks.%d.attn.to_k", i);
                snprintf(f2, sizeof f2, "transformer_blocks.%d.attn.to_v", i);
            } else {
                snprintf(f0, sizeof f0, "transformer_blocks.%d.attn.add_q_proj", i);
                snprintf(f1, sizeof f1, "transformer_blocks.%d.attn.add_k_proj", i);
                snprintf(f2, sizeof f2, "transformer_blocks.%d.attn.add_v_proj", i);
            }
            const char *const from[] = {f0, f1, f2};
            snprintf(to, sizeof to, "double_blocks.%d.%s_attn.qkv", i, sname);
            bfl_fuse(b, d, to, from, r3, 3, E);
            snprintf(to, sizeof to, "double_blocks.%d.%s_attn.proj", i, sname);
            snprintf(f0, sizeof f0, "transformer_blocks.%d.attn.%s", i,
                     s ? "to_add_out" : "to_out.0");
            bfl_copy(b, d, to, f0, E, E);
            snprintf(to, sizeof to, "double_blocks.%d.%s_mod.lin", i, sname);
            snprintf(f0, sizeof f0, "transformer_blocks.%d.%s.linear", i,
                     s ? "norm1_context" : "norm1");
            bfl_copy(b, d, to, f0, 6 * E, E);
            snprintf(to, sizeof to, "double_blocks.%d.%s_mlp.0", i, sname);
            snprintf(f0, sizeof f0, "transformer_blocks.%d.%s.net.0.proj", i,
                     s ? "ff_context" : "ff");
            bfl_copy(b, d, to, f0, F, E);
            snprintf(to, sizeof to, "double_blocks.%d.%s_mlp.2", i, sname);
            snprintf(f0, sizeof f0, "transformer_blocks.%d.%s.net.2", i, s ? "ff_context" : "ff");
            bfl_copy(b, d, to, f0, E, F);
            for (int qk = 0; qk < 2; qk++) {
                snprintf(to, sizeof to, "double_blocks.%d.%s_attn.norm.%s_norm.scale", i, sname,
                         qk ? "key" : "query");
                snprintf(f0, sizeof f0, "transformer_blocks.%d.attn.norm_%s%s.weight", i,
                         s ? "added_" : "", qk ? "k" : "q");
                memcpy(tl_add(b, to, D, 0), tl_get(d, f0), (size_t)D * sizeof(float));
            }
        }
    }
    for (int i = 0; i < a->single; i++) {
        snprintf(f0, sizeof f0, "single_transformer_blocks.%d.attn.to_q", i);
        snprintf(f1, sizeof f1, "single_transformer_blocks.%d.attn.to_k", i);
        snprintf(f2, sizeof f2, "single_transformer_blocks.%d.attn.to_v", i);
        snprintf(f3, sizeof f3, "single_transformer_blocks.%d.proj_mlp", i);
        const char *const from[] = {f0, f1, f2, f3};
        const int rows[] = {E, E, E, F};
        snprintf(to, sizeof to, "single_blocks.%d.linear1", i);
        bfl_fuse(b, d, to, from, rows, 4, E);
        snprintf(to, sizeof to, "single_blocks.%d.linear2", i);
        snprintf(f0, sizeof f0, "single_transformer_blocks.%d.proj_out", i);
        bfl_copy(b, d, to, f0, E, E + F);
        snprintf(to, sizeof to, "single_blocks.%d.modulation.lin", i);
        snprintf(f0, sizeof f0, "single_transformer_blocks.%d.norm.linear", i);
        bfl_copy(b, d, to, f0, 3 * E, E);
        for (int qk = 0; qk < 2; qk++) {
            snprintf(to, sizeof to, "single_blocks.%d.norm.%s_norm.scale", i,
                     qk ? "key" : "query");
            snprintf(f0, sizeof f0, "single_transformer_blocks.%d.attn.norm_%s.weight", i,
                     qk ? "k" : "q");
            memcpy(tl_add(b, to, D, 0), tl_get(d, f0), (size_t)D * sizeof(float));
        }
    }
}

static int parse_int_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        out[n++] = (int)strtol(s, (char **)&s, 10);
        if (*s == ',')
            s++;
    }
    return n;
}

static int make_model(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *dir = argv[2], *bfl = NULL, *bfl_prefix = "";
    model_args a = {.heads = 3, .head_dim = 16, .axes = {4, 6, 6}, .n_axes = 3, .layers = 1,
                    .single = 1, .in = 16, .out = 0, .patch = 1, .joint = 32, .pooled = 24,
                    .guidance = 1, .dtype = CPDIT_DTYPE_BF16};
    rng = 12345;
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--heads")) a.heads = atoi(v);
        else if (!strcmp(k, "--head-dim")) a.head_dim = atoi(v);
        else if (!strcmp(k, "--axes")) a.n_axes = parse_int_list(v, a.axes, 8);
        else if (!strcmp(k, "--layers")) a.layers = atoi(v);
        else if (!strcmp(k, "--single")) a.single = atoi(v);
        else if (!strcmp(k, "--in")) a.in = atoi(v);
        else if (!strcmp(k, "--out")) a.out = atoi(v);
        else if (!strcmp(k, "--patch")) a.patch = atoi(v);
        else if (!strcmp(k, "--joint")) a.joint = atoi(v);
        else if (!strcmp(k, "--pooled")) a.pooled = atoi(v);
        else if (!strcmp(k, "--guidance")) a.guidance = atoi(v);
        else if (!strcmp(k, "--dtype")) a.dtype = cpdit_dtype_from_name(v);
        else if (!strcmp(k, "--seed")) rng = 12345 + 7919 * (uint64_t)atoll(v);
        else if (!strcmp(k, "--bfl")) bfl = v;
        else if (!strcmp(k, "--bfl-prefix")) bfl_prefix = v;
        else {
            fprintf(stderr, "flux_test_tool: make-model: unknown option %s\n", k);
            return 2;
        }
    }
    const int out_ch = a.out ? a.out : a.in;
    a.out = out_ch;
    mkdir(dir, 0755);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    fprintf(f, "{\n  \"_class_name\": \"FluxTransformer2DModel\",\n"
               "  \"_diffusers_version\": \"0.32.0\",\n  \"attention_head_dim\": %d,\n"
               "  \"axes_dims_rope\": [",
            a.head_dim);
    for (int i = 0; i < a.n_axes; i++)
        fprintf(f, "%s%d", i ? ", " : "", a.axes[i]);
    fprintf(f, "],\n  \"guidance_embeds\": %s,\n  \"in_channels\": %d,\n"
               "  \"joint_attention_dim\": %d,\n  \"num_attention_heads\": %d,\n"
               "  \"num_layers\": %d,\n  \"num_single_layers\": %d,\n  \"out_channels\": %d,\n"
               "  \"patch_size\": %d,\n  \"pooled_projection_dim\": %d\n}\n",
            a.guidance ? "true" : "false", a.in, a.joint, a.heads, a.layers, a.single, out_ch,
            a.patch, a.pooled);
    fclose(f);
    static tlist d, b;
    d.n = b.n = 0;
    build_diffusers(&d, &a);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    if (write_list(path, &d, a.dtype))
        return 1;
    if (bfl) {
        build_bfl(&b, &d, &a);
        for (int i = 0; i < b.n; i++) {
            char full[NAME_MAX_LEN];
            snprintf(full, sizeof full, "%s%s", bfl_prefix, b.names[i]);
            memcpy(b.names[i], full, sizeof full);
        }
        if (write_list(bfl, &b, a.dtype))
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ make-inputs */

static int read_config_int(const char *json, const char *key, int def)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    return p ? atoi(p + strlen(pat)) : def;
}

static int make_inputs(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *file = argv[2], *model = NULL;
    int B = 1, T = 5, h = 3, w = 4, id0 = 0, ids3d = 0;
    rng = 999;
    for (int i = 3; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--ids3d")) {
            ids3d = 1;
            continue;
        }
        if (i + 1 >= argc)
            return 2;
        const char *v = argv[++i];
        if (!strcmp(k, "--model")) model = v;
        else if (!strcmp(k, "--batch")) B = atoi(v);
        else if (!strcmp(k, "--txt")) T = atoi(v);
        else if (!strcmp(k, "--img-h")) h = atoi(v);
        else if (!strcmp(k, "--img-w")) w = atoi(v);
        else if (!strcmp(k, "--seed")) rng = 999 + 104729 * (uint64_t)atoll(v);
        else if (!strcmp(k, "--id0")) id0 = atoi(v);
        else return 2;
    }
    if (!model)
        return 2;
    char path[4096], json[8192] = {0};
    snprintf(path, sizeof path, "%s/config.json", model);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t got = fread(json, 1, sizeof json - 1, f);
    json[got] = 0;
    fclose(f);
    const int in = read_config_int(json, "in_channels", 64);
    const int joint = read_config_int(json, "joint_attention_dim", 4096);
    const int pooled = read_config_int(json, "pooled_projection_dim", 768);
    const int guidance = strstr(json, "\"guidance_embeds\": true") != NULL;
    const int I = h * w;
    float *hs = malloc(((size_t)B * I * in + 1) * sizeof(float));
    float *ehs = malloc(((size_t)B * T * joint + 1) * sizeof(float));
    float *pp = malloc((size_t)B * pooled * sizeof(float));
    float ts[64], gd[64];
    const int idB = ids3d ? B : 1;
    float *img_ids = calloc((size_t)idB * I * 3 + 1, sizeof(float));
    float *txt_ids = calloc((size_t)idB * T * 3 + 1, sizeof(float));
    for (size_t i = 0; i < (size_t)B * I * in; i++)
        hs[i] = (float)(1.7 * urand());
    for (size_t i = 0; i < (size_t)B * T * joint; i++)
        ehs[i] = (float)(1.7 * urand());
    for (size_t i = 0; i < (size_t)B * pooled; i++)
        pp[i] = (float)(1.7 * urand());
    for (int b = 0; b < B && b < 64; b++) {
        ts[b] = (float)(0.5 + 0.45 * urand());
        gd[b] = (float)(3.5 + urand());
    }
    for (int bi = 0; bi < idB; bi++)
        for (int r = 0; r < h; r++)
            for (int c = 0; c < w; c++) {
                float *p = img_ids + ((size_t)bi * I + (size_t)r * w + c) * 3;
                p[0] = (float)id0;
                p[1] = (float)r;
                p[2] = (float)c;
            }
    const int64_t s_hs[] = {B, I, in}, s_ehs[] = {B, T, joint}, s_pp[] = {B, pooled},
                  s_b[] = {B}, s_img3[] = {idB, I, 3}, s_txt3[] = {idB, T, 3};
    safetensors_write_tensor t[7] = {
        {"hidden_states", CPDIT_DTYPE_F32, 3, s_hs, hs, CPDIT_DTYPE_F32},
        {"encoder_hidden_states", CPDIT_DTYPE_F32, 3, s_ehs, ehs, CPDIT_DTYPE_F32},
        {"pooled_projections", CPDIT_DTYPE_F32, 2, s_pp, pp, CPDIT_DTYPE_F32},
        {"timestep", CPDIT_DTYPE_F32, 1, s_b, ts, CPDIT_DTYPE_F32},
        {"img_ids", CPDIT_DTYPE_F32, ids3d ? 3 : 2, ids3d ? s_img3 : s_img3 + 1, img_ids,
         CPDIT_DTYPE_F32},
        {"txt_ids", CPDIT_DTYPE_F32, ids3d ? 3 : 2, ids3d ? s_txt3 : s_txt3 + 1, txt_ids,
         CPDIT_DTYPE_F32},
        {"guidance", CPDIT_DTYPE_F32, 1, s_b, gd, CPDIT_DTYPE_F32},
    };
    cpdit_error err;
    cpdit_error_clear(&err);
    int rc = safetensors_write(file, t, guidance ? 7 : 6, NULL, 0, &err) ? 1 : 0;
    if (rc)
        fprintf(stderr, "flux_test_tool: %s: %s\n", err.where, err.what);
    free(hs);
    free(ehs);
    free(pp);
    free(img_ids);
    free(txt_ids);
    return rc;
}

static int make_latent(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *file = argv[2];
    int B = 1, C = 16, h = 5, w = 7;
    rng = 4242;
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--batch")) B = atoi(v);
        else if (!strcmp(k, "--channels")) C = atoi(v);
        else if (!strcmp(k, "--h")) h = atoi(v);
        else if (!strcmp(k, "--w")) w = atoi(v);
        else if (!strcmp(k, "--seed")) rng = 4242 + 104729 * (uint64_t)atoll(v);
        else return 2;
    }
    if (B < 1 || C < 1 || h < 1 || w < 1)
        return 2;
    const size_t n = (size_t)B * C * h * w;
    float *z = malloc(n * sizeof *z);
    if (!z)
        return 1;
    for (size_t i = 0; i < n; i++)
        z[i] = (float)(1.7 * urand());
    const int64_t shape[] = {B, C, h, w};
    safetensors_write_tensor t[1] = {
        {"latent_sample", CPDIT_DTYPE_F32, 4, shape, z, CPDIT_DTYPE_F32}};
    cpdit_error err;
    cpdit_error_clear(&err);
    int rc = safetensors_write(file, t, 1, NULL, 0, &err) ? 1 : 0;
    if (rc)
        fprintf(stderr, "flux_test_tool: %s: %s\n", err.where, err.what);
    free(z);
    return rc;
}

/* ------------------------------------------------------------------ compare */

static int compare(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    const char *name = "sample";
    double tol = 1e-5;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tensor"))
            name = argv[i + 1];
        else if (!strcmp(argv[i], "--tol"))
            tol = atof(argv[i + 1]);
    }
    safetensors_file *fa = NULL, *fb = NULL;
    cpdit_error err;
    cpdit_error_clear(&err);
    if (safetensors_open(&fa, argv[2], &err) || safetensors_open(&fb, argv[3], &err)) {
        fprintf(stderr, "compare: %s: %s\n", err.where, err.what);
        return 1;
    }
    const safetensors_tensor *ta = safetensors_find(fa, name), *tb = safetensors_find(fb, name);
    int rc = 1;
    if (!ta || !tb) {
        fprintf(stderr, "compare: tensor '%s' missing in %s\n", name, ta ? argv[3] : argv[2]);
    } else if (ta->ndim != tb->ndim || ta->nelem != tb->nelem ||
               memcmp(ta->shape, tb->shape, sizeof(int64_t) * (size_t)ta->ndim)) {
        fprintf(stderr, "compare: shapes differ\n");
    } else {
        float *a = malloc((ta->nelem + 1) * sizeof(float)), *b = malloc((tb->nelem + 1) * sizeof(float));
        safetensors_tensor_read_f32(ta, a, ta->nelem, &err);
        safetensors_tensor_read_f32(tb, b, tb->nelem, &err);
        double num = 0, den = 0;
        int finite = 1;
        for (size_t i = 0; i < ta->nelem; i++) {
            finite &= isfinite(a[i]) && isfinite(b[i]);
            num = fmax(num, fabs((double)a[i] - b[i]));
            den = fmax(den, fabs((double)b[i]));
        }
        const double e = den > 0 ? num / den : num;
        printf("max|got-want|/max|want| = %.3g (max|want| %.3g, %zu values, tol %.1g)\n", e, den,
               ta->nelem, tol);
        rc = finite && e <= tol ? 0 : 1;
        free(a);
        free(b);
    }
    safetensors_close(fa);
    safetensors_close(fb);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "make-model"))
        return make_model(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "make-inputs"))
        return make_inputs(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "make-latent"))
        return make_latent(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "compare"))
        return compare(argc, argv);
    fprintf(stderr, "usage: flux_test_tool make-model|make-inputs|make-latent|compare ...\n");
    return 2;
}
