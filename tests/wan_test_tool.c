/* wan_test_tool.c — helpers for the Wan 2.1 transformer tests (tests/wan_forward.sh,
 * tests/wan_forward_cp.sh); no PyTorch needed:
 *
 *   wan_test_tool make-model DIR [--heads H] [--head-dim D] [--layers L] [--in C] [--out C]
 *                 [--text T] [--freq N] [--ffn N] [--patch t,h,w] [--cross-attn-norm 0|1]
 *                 [--eps X] [--dtype F32|BF16|F16] [--seed N] [--shards N]
 *       A random WanTransformer3DModel (text-to-video) in the diffusers layout:
 *       DIR/config.json (every key of diffusers' __init__, image_dim / added_kv_proj_dim null)
 *       and DIR/diffusion_pytorch_model.safetensors under diffusers' tensor names; with
 *       --shards N > 1 the same tensors in N files diffusion_pytorch_model-0000i-of-0000N
 *       .safetensors listed by diffusion_pytorch_model.safetensors.index.json, as the
 *       published Wan checkpoints are.
 *       Weights: linears and the Conv3d patch embedding uniform with std 1/sqrt(fan_in),
 *       biases small, RMSNorm / LayerNorm weights 1 + small noise, LayerNorm biases small,
 *       scale_shift_tables with std 1/sqrt(dim) (as diffusers initialises them); stored in
 *       --dtype (default BF16). Defaults: 2 heads x 16, 1 layer, 16 -> 16 channels, text 32,
 *       freq 256, ffn 64, patch 1,2,2, cross_attn_norm 1, eps 1e-6.
 *   wan_test_tool make-inputs FILE --model DIR [--batch B] [--frames F] [--height H]
 *                 [--width W] [--text-len L] [--text-valid N] [--seed N] [--channels C]
 *                 [--text-dim T] [--timestep same|single]
 *       The forward's arguments under diffusers' names: hidden_states (B, in, F, H, W) and
 *       encoder_hidden_states (B, L, text_dim) uniform in [-1.7, 1.7) (tokens from N on zero,
 *       as WanPipeline pads the prompt embeddings), timestep (B) in diffusers units, distinct
 *       values in (50, 950). Defaults: 1 x 2 x 4 x 4, 5 text tokens, all valid; C and T from
 *       the config unless given (to make inputs that do not fit it). --timestep same: every
 *       item gets the first item's timestep; single: that one value as timestep (1), which
 *       diffusers broadcasts over the batch.
 *   wan_test_tool compare GOT.safetensors WANT.safetensors [--tensor sample] [--tol X]
 *       Prints max|got - want| / max|want| and exits 0 when it is <= tol (default 1e-5),
 *       1 otherwise (also for missing tensors, different shapes or non-finite values).
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/io/safetensors.h"

#define MAX_TENSORS 1024
#define NAME_MAX_LEN 128
#define MAX_DIMS 5
#define N_MODULATION 6     /* a block's scale_shift_table rows */
#define N_OUT_MODULATION 2 /* the output layer's */
#define INPUT_AMPLITUDE 1.7
#define BIAS_AMPLITUDE 0.1
#define NORM_NOISE 0.2
#define MAX_BATCH 64
#define CONFIG_MAX 8192
#define MAX_SHARDS 99
#define WEIGHTS_BASE "diffusion_pytorch_model"

static uint64_t rng;

static double urand(void) /* uniform in [-1, 1) (xorshift64) */
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
    int64_t shapes[MAX_TENSORS][MAX_DIMS];
    int ndim[MAX_TENSORS];
    float *data[MAX_TENSORS];
} tlist;

/* Add tensor NAME of ndim dims (sizes in dims); returns its fp32 data, or exits. */
static float *tl_add(tlist *t, const char *name, int ndim, const int64_t *dims)
{
    if (t->n >= MAX_TENSORS) {
        fprintf(stderr, "wan_test_tool: more than %d tensors\n", MAX_TENSORS);
        exit(2);
    }
    const int i = t->n++;
    size_t n = 1;
    snprintf(t->names[i], NAME_MAX_LEN, "%s", name);
    t->ndim[i] = ndim;
    for (int d = 0; d < ndim; d++) {
        t->shapes[i][d] = dims[d];
        n *= (size_t)dims[d];
    }
    t->data[i] = malloc(n * sizeof(float));
    if (!t->data[i]) {
        fprintf(stderr, "wan_test_tool: out of memory for %s\n", name);
        exit(1);
    }
    return t->data[i];
}

static void fill(float *p, size_t n, double center, double amplitude)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(center + amplitude * urand());
}

/* BASE.weight (out, in) with std 1/sqrt(in), BASE.bias (out) small. */
static void rand_linear(tlist *t, const char *base, int out, int in)
{
    char name[NAME_MAX_LEN];
    const int64_t w[2] = {out, in}, b[1] = {out};
    snprintf(name, sizeof name, "%s.weight", base);
    fill(tl_add(t, name, 2, w), (size_t)out * in, 0, sqrt(3.0 / in));
    snprintf(name, sizeof name, "%s.bias", base);
    fill(tl_add(t, name, 1, b), (size_t)out, 0, BIAS_AMPLITUDE);
}

static void rand_vector(tlist *t, const char *name, int n, double center, double amplitude)
{
    const int64_t d[1] = {n};
    fill(tl_add(t, name, 1, d), (size_t)n, center, amplitude);
}

/* ------------------------------------------------------------------ make-model */

typedef struct model_args {
    int heads, head_dim, layers, in, out, text, freq, ffn, patch[3], cross_attn_norm;
    double eps;
    cpdit_dtype dtype;
} model_args;

/* One WanTransformerBlock's tensors under blocks.I. (dim E, ffn F). */
static void build_block(tlist *t, const model_args *a, int i)
{
    const int E = a->heads * a->head_dim;
    static const char *const attns[] = {"attn1", "attn2"};
    static const char *const projs[] = {"to_q", "to_k", "to_v", "to_out.0"};
    char n[NAME_MAX_LEN];
    for (int k = 0; k < 2; k++) {
        for (int p = 0; p < 4; p++) {
            snprintf(n, sizeof n, "blocks.%d.%s.%s", i, attns[k], projs[p]);
            rand_linear(t, n, E, E);
        }
        snprintf(n, sizeof n, "blocks.%d.%s.norm_q.weight", i, attns[k]);
        rand_vector(t, n, E, 1.0, NORM_NOISE);
        snprintf(n, sizeof n, "blocks.%d.%s.norm_k.weight", i, attns[k]);
        rand_vector(t, n, E, 1.0, NORM_NOISE);
    }
    if (a->cross_attn_norm) {
        snprintf(n, sizeof n, "blocks.%d.norm2.weight", i);
        rand_vector(t, n, E, 1.0, NORM_NOISE);
        snprintf(n, sizeof n, "blocks.%d.norm2.bias", i);
        rand_vector(t, n, E, 0.0, BIAS_AMPLITUDE);
    }
    snprintf(n, sizeof n, "blocks.%d.ffn.net.0.proj", i);
    rand_linear(t, n, a->ffn, E);
    snprintf(n, sizeof n, "blocks.%d.ffn.net.2", i);
    rand_linear(t, n, E, a->ffn);
    snprintf(n, sizeof n, "blocks.%d.scale_shift_table", i);
    const int64_t sst[3] = {1, N_MODULATION, E};
    fill(tl_add(t, n, 3, sst), (size_t)N_MODULATION * E, 0, sqrt(3.0 / E));
}

static void build_model(tlist *t, const model_args *a)
{
    const int E = a->heads * a->head_dim;
    const int pvol = a->patch[0] * a->patch[1] * a->patch[2];
    const int64_t conv[5] = {E, a->in, a->patch[0], a->patch[1], a->patch[2]}, bias[1] = {E};
    fill(tl_add(t, "patch_embedding.weight", 5, conv), (size_t)E * a->in * pvol, 0,
         sqrt(3.0 / (a->in * pvol)));
    fill(tl_add(t, "patch_embedding.bias", 1, bias), (size_t)E, 0, BIAS_AMPLITUDE);
    rand_linear(t, "condition_embedder.time_embedder.linear_1", E, a->freq);
    rand_linear(t, "condition_embedder.time_embedder.linear_2", E, E);
    rand_linear(t, "condition_embedder.time_proj", N_MODULATION * E, E);
    rand_linear(t, "condition_embedder.text_embedder.linear_1", E, a->text);
    rand_linear(t, "condition_embedder.text_embedder.linear_2", E, E);
    for (int i = 0; i < a->layers; i++)
        build_block(t, a, i);
    rand_linear(t, "proj_out", a->out * pvol, E);
    const int64_t sst[3] = {1, N_OUT_MODULATION, E};
    fill(tl_add(t, "scale_shift_table", 3, sst), (size_t)N_OUT_MODULATION * E, 0,
         sqrt(3.0 / E));
}

/* Write tensors [from, to) of t to path in dtype. */
static int write_list(const char *path, const tlist *t, int from, int to, cpdit_dtype dtype)
{
    safetensors_write_tensor *w = calloc((size_t)(to - from) + 1, sizeof *w);
    if (!w)
        return 1;
    for (int i = from; i < to; i++) {
        safetensors_write_tensor *x = &w[i - from];
        x->name = t->names[i];
        x->dtype = dtype;
        x->ndim = t->ndim[i];
        x->shape = t->shapes[i];
        x->data = t->data[i];
        x->src_dtype = CPDIT_DTYPE_F32;
    }
    cpdit_error err;
    cpdit_error_clear(&err);
    cpdit_status st = safetensors_write(path, w, (size_t)(to - from), NULL, 0, &err);
    free(w);
    if (st) {
        fprintf(stderr, "wan_test_tool: %s: %s\n", err.where, err.what);
        return 1;
    }
    return 0;
}

static size_t tensor_bytes(const tlist *t, int i, cpdit_dtype dtype)
{
    size_t n = cpdit_dtype_size(dtype);
    for (int d = 0; d < t->ndim[i]; d++)
        n *= (size_t)t->shapes[i][d];
    return n;
}

/* The tensors of t in `shards` files of consecutive tensors, and the index naming them. */
static int write_sharded(const char *dir, const tlist *t, int shards, cpdit_dtype dtype)
{
    char path[4096], file[64];
    snprintf(path, sizeof path, "%s/" WEIGHTS_BASE ".safetensors.index.json", dir);
    FILE *idx = fopen(path, "w");
    if (!idx) {
        perror(path);
        return 1;
    }
    size_t total = 0;
    for (int i = 0; i < t->n; i++)
        total += tensor_bytes(t, i, dtype);
    fprintf(idx, "{\n  \"metadata\": {\"total_size\": %zu},\n  \"weight_map\": {", total);
    int rc = 0;
    for (int s = 0; s < shards && !rc; s++) {
        const int from = (int)((long)t->n * s / shards), to = (int)((long)t->n * (s + 1) / shards);
        snprintf(file, sizeof file, WEIGHTS_BASE "-%05d-of-%05d.safetensors", s + 1, shards);
        snprintf(path, sizeof path, "%s/%s", dir, file);
        rc = write_list(path, t, from, to, dtype);
        for (int i = from; i < to; i++)
            fprintf(idx, "%s\n    \"%s\": \"%s\"", i ? "," : "", t->names[i], file);
    }
    fprintf(idx, "\n  }\n}\n");
    return fclose(idx) || rc ? 1 : 0;
}

static int write_config(const char *dir, const model_args *a)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fprintf(f,
            "{\n  \"_class_name\": \"WanTransformer3DModel\",\n"
            "  \"_diffusers_version\": \"0.33.0.dev0\",\n  \"added_kv_proj_dim\": null,\n"
            "  \"attention_head_dim\": %d,\n  \"cross_attn_norm\": %s,\n  \"eps\": %g,\n"
            "  \"ffn_dim\": %d,\n  \"freq_dim\": %d,\n  \"image_dim\": null,\n"
            "  \"in_channels\": %d,\n  \"num_attention_heads\": %d,\n  \"num_layers\": %d,\n"
            "  \"out_channels\": %d,\n  \"patch_size\": [%d, %d, %d],\n"
            "  \"qk_norm\": \"rms_norm_across_heads\",\n  \"rope_max_seq_len\": 1024,\n"
            "  \"text_dim\": %d\n}\n",
            a->head_dim, a->cross_attn_norm ? "true" : "false", a->eps, a->ffn, a->freq, a->in,
            a->heads, a->layers, a->out, a->patch[0], a->patch[1], a->patch[2], a->text);
    return fclose(f) ? 1 : 0;
}

static int make_model(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *dir = argv[2];
    int shards = 1;
    model_args a = {.heads = 2, .head_dim = 16, .layers = 1, .in = 16, .out = 0, .text = 32,
                    .freq = 256, .ffn = 64, .patch = {1, 2, 2}, .cross_attn_norm = 1,
                    .eps = 1e-6, .dtype = CPDIT_DTYPE_BF16};
    rng = 24680;
    for (int i = 3; i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "wan_test_tool: make-model: %s needs a value\n", k);
            return 2;
        }
        if (!strcmp(k, "--heads")) a.heads = atoi(v);
        else if (!strcmp(k, "--head-dim")) a.head_dim = atoi(v);
        else if (!strcmp(k, "--layers")) a.layers = atoi(v);
        else if (!strcmp(k, "--in")) a.in = atoi(v);
        else if (!strcmp(k, "--out")) a.out = atoi(v);
        else if (!strcmp(k, "--text")) a.text = atoi(v);
        else if (!strcmp(k, "--freq")) a.freq = atoi(v);
        else if (!strcmp(k, "--ffn")) a.ffn = atoi(v);
        else if (!strcmp(k, "--cross-attn-norm")) a.cross_attn_norm = atoi(v);
        else if (!strcmp(k, "--eps")) a.eps = atof(v);
        else if (!strcmp(k, "--dtype")) a.dtype = cpdit_dtype_from_name(v);
        else if (!strcmp(k, "--seed")) rng = 24680 + 7919 * (uint64_t)atoll(v);
        else if (!strcmp(k, "--shards")) shards = atoi(v);
        else if (!strcmp(k, "--patch")) {
            if (sscanf(v, "%d,%d,%d", &a.patch[0], &a.patch[1], &a.patch[2]) != 3) {
                fprintf(stderr, "wan_test_tool: --patch: expected t,h,w, got '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "wan_test_tool: make-model: unknown option %s\n", k);
            return 2;
        }
    }
    if (!a.out)
        a.out = a.in;
    if (a.heads < 1 || a.head_dim < 2 || a.head_dim % 2 || a.layers < 0 || a.in < 1 ||
        a.text < 1 || a.freq < 2 || a.ffn < 1 || a.patch[0] < 1 || a.patch[1] < 1 ||
        a.patch[2] < 1 || a.dtype == CPDIT_DTYPE_INVALID || shards < 1 || shards > MAX_SHARDS) {
        fprintf(stderr, "wan_test_tool: make-model: bad sizes or dtype\n");
        return 2;
    }
    mkdir(dir, 0755);
    if (write_config(dir, &a))
        return 1;
    static tlist t;
    t.n = 0;
    build_model(&t, &a);
    char path[4096];
    snprintf(path, sizeof path, "%s/" WEIGHTS_BASE ".safetensors", dir);
    int rc = shards > 1 ? write_sharded(dir, &t, shards, a.dtype)
                        : write_list(path, &t, 0, t.n, a.dtype);
    for (int i = 0; i < t.n; i++)
        free(t.data[i]);
    return rc;
}

/* ------------------------------------------------------------------ make-inputs */

/* The integer after "KEY": in a config.json written by make-model (or diffusers). */
static int config_int(const char *json, const char *key, int def)
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
    int B = 1, Fr = 2, H = 4, W = 4, L = 5, valid = -1, C = 0, T = 0;
    const char *tmode = "";
    rng = 13579;
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--model")) model = v;
        else if (!strcmp(k, "--batch")) B = atoi(v);
        else if (!strcmp(k, "--frames")) Fr = atoi(v);
        else if (!strcmp(k, "--height")) H = atoi(v);
        else if (!strcmp(k, "--width")) W = atoi(v);
        else if (!strcmp(k, "--text-len")) L = atoi(v);
        else if (!strcmp(k, "--text-valid")) valid = atoi(v);
        else if (!strcmp(k, "--channels")) C = atoi(v);
        else if (!strcmp(k, "--text-dim")) T = atoi(v);
        else if (!strcmp(k, "--timestep")) tmode = v;
        else if (!strcmp(k, "--seed")) rng = 13579 + 104729 * (uint64_t)atoll(v);
        else {
            fprintf(stderr, "wan_test_tool: make-inputs: unknown option %s\n", k);
            return 2;
        }
    }
    if (!model || B < 1 || B > MAX_BATCH || Fr < 1 || H < 1 || W < 1 || L < 1) {
        fprintf(stderr, "wan_test_tool: make-inputs: needs --model and sizes >= 1\n");
        return 2;
    }
    if (valid < 0 || valid > L)
        valid = L;
    char path[4096], json[CONFIG_MAX] = {0};
    snprintf(path, sizeof path, "%s/config.json", model);
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t got = fread(json, 1, sizeof json - 1, f);
    json[got] = 0;
    fclose(f);
    if (C < 1)
        C = config_int(json, "in_channels", 16);
    if (T < 1)
        T = config_int(json, "text_dim", 4096);
    const size_t nhs = (size_t)B * C * Fr * H * W, nehs = (size_t)B * L * T;
    float *hs = malloc(nhs * sizeof(float)), *ehs = malloc(nehs * sizeof(float));
    float ts[MAX_BATCH];
    if (!hs || !ehs)
        return 1;
    fill(hs, nhs, 0, INPUT_AMPLITUDE);
    for (int b = 0; b < B; b++)
        for (int l = 0; l < L; l++) {
            float *row = ehs + ((size_t)b * L + l) * T;
            if (l < valid)
                fill(row, (size_t)T, 0, INPUT_AMPLITUDE);
            else
                memset(row, 0, (size_t)T * sizeof(float));
        }
    for (int b = 0; b < B; b++) /* spread over (50, 950), one value per item */
        ts[b] = (float)(500.0 + 450.0 * ((b + 0.5 + 0.4 * urand()) / B * 2.0 - 1.0));
    int64_t nt = B;
    if (!strcmp(tmode, "same") || !strcmp(tmode, "single")) {
        for (int b = 1; b < B; b++)
            ts[b] = ts[0];
        if (!strcmp(tmode, "single"))
            nt = 1;
    } else if (tmode[0]) {
        fprintf(stderr, "wan_test_tool: make-inputs: --timestep %s: use same or single\n", tmode);
        return 2;
    }
    const int64_t s_hs[] = {B, C, Fr, H, W}, s_ehs[] = {B, L, T}, s_t[] = {nt};
    const safetensors_write_tensor t[3] = {
        {"hidden_states", CPDIT_DTYPE_F32, 5, s_hs, hs, CPDIT_DTYPE_F32},
        {"encoder_hidden_states", CPDIT_DTYPE_F32, 3, s_ehs, ehs, CPDIT_DTYPE_F32},
        {"timestep", CPDIT_DTYPE_F32, 1, s_t, ts, CPDIT_DTYPE_F32},
    };
    cpdit_error err;
    cpdit_error_clear(&err);
    int rc = safetensors_write(file, t, 3, NULL, 0, &err) ? 1 : 0;
    if (rc)
        fprintf(stderr, "wan_test_tool: %s: %s\n", err.where, err.what);
    free(hs);
    free(ehs);
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
        safetensors_close(fa);
        return 1;
    }
    const safetensors_tensor *ta = safetensors_find(fa, name), *tb = safetensors_find(fb, name);
    int rc = 1;
    if (!ta || !tb) {
        fprintf(stderr, "compare: tensor '%s' missing in %s\n", name, ta ? argv[3] : argv[2]);
    } else if (ta->ndim != tb->ndim || ta->nelem != tb->nelem ||
               memcmp(ta->shape, tb->shape, sizeof(int64_t) * (size_t)ta->ndim)) {
        fprintf(stderr, "compare: shapes of '%s' differ\n", name);
    } else {
        float *a = malloc((ta->nelem + 1) * sizeof(float));
        float *b = malloc((tb->nelem + 1) * sizeof(float));
        if (a && b && !safetensors_tensor_read_f32(ta, a, ta->nelem, &err) &&
            !safetensors_tensor_read_f32(tb, b, tb->nelem, &err)) {
            double num = 0, den = 0;
            int finite = 1;
            for (size_t i = 0; i < ta->nelem; i++) {
                finite &= isfinite(a[i]) && isfinite(b[i]);
                num = fmax(num, fabs((double)a[i] - b[i]));
                den = fmax(den, fabs((double)b[i]));
            }
            const double e = den > 0 ? num / den : num;
            printf("max|got-want|/max|want| = %.3g (max|want| %.3g, %zu values, tol %.1g)%s\n",
                   e, den, ta->nelem, tol, finite ? "" : " NOT FINITE");
            rc = finite && e <= tol ? 0 : 1;
        } else {
            fprintf(stderr, "compare: reading '%s': %s\n", name, err.what);
        }
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
    if (argc >= 2 && !strcmp(argv[1], "compare"))
        return compare(argc, argv);
    fprintf(stderr, "usage: wan_test_tool make-model|make-inputs|compare ...\n");
    return 2;
}
