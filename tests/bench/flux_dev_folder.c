/* flux_dev_folder.c — turn a built-in pipeline folder into a FLUX.1-dev-sized one with random
 * weights, for tests/bench/flux_dev_full.sh (a benchmark run by hand):
 *
 *   flux_dev_folder DIR [--layers 19] [--single 38] [--t5-layers 24] [--clip-layers 12]
 *                   [--seed N]
 *
 * DIR holds a folder written by `cpdit builtin write DIR --name tiny`: its model_index.json,
 * scheduler/, tokenizer/ and tokenizer_2/ are kept; the configs of transformer/, vae/,
 * text_encoder/ and text_encoder_2/ are rewritten with FLUX.1-dev's sizes and their weights
 * replaced, in bf16 and in the real checkpoint's layout:
 *   transformer/     FluxTransformer2DModel: 19 double + 38 single blocks, 24 heads x 128
 *                    (hidden 3072), in_channels 64, joint_attention_dim 4096, pooled 768,
 *                    guidance_embeds; diffusion_pytorch_model-0000k-of-00003.safetensors and
 *                    diffusion_pytorch_model.safetensors.index.json (11.9 G parameters)
 *   text_encoder_2/  T5EncoderModel, T5-XXL: d_model 4096, d_ff 10240, 24 layers, 64 heads x 64,
 *                    gated-gelu, vocab 32128; model-0000k-of-00002.safetensors + index (4.8 G)
 *   text_encoder/    CLIPTextModel, CLIP-L: hidden 768, 12 layers, 12 heads, intermediate 3072,
 *                    vocab 49408, 77 positions; model.safetensors (123 M); the bos/eos ids of
 *                    the folder's tokenizer are kept
 *   vae/             AutoencoderKL with FLUX.1's config (128/256/512/512, 2 layers per block,
 *                    32 groups, 16 latent channels); the decoder's weights only (what cpdit
 *                    reads; the real file also holds the encoder)
 * Shards split the tensors in name-list order at equal byte shares. Values: element i of
 * tensor NAME is a hash of (seed, NAME, i) (splitmix64) mapped to a uniform, scaled as the
 * built-in models' generator does: linear and convolution weights std 1/sqrt(fan_in) (T5's q
 * also 1/sqrt(d_kv)), biases std 0.02, norm weights 1 +- 0.1, embeddings std 0.5 (CLIP) / 1
 * (T5). Nothing is held in memory: each tensor is generated a chunk at a time while written,
 * and the written pages are flushed and dropped from the page cache as the files grow (the
 * machine running this may be shared). --layers/--single/--t5-layers/--clip-layers make a
 * smaller model of the same widths (to try the script quickly).
 * Exit 0 on success, 1 on an I/O error, 2 on bad usage.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/core/dtype.h"
#include "lib/vae/vae_decoder.h"

#define NAME_MAX_LEN 160
#define MAX_DIMS 4
#define CHUNK 65536                     /* elements generated and written at a time */
#define FLUSH_BYTES (256ull << 20)      /* write back and drop the page cache every 256 MiB */
#define HEADER_ALIGN 8

typedef enum kind { K_LINEAR, K_BIAS, K_NORM, K_EMBED } kind;

typedef struct spec {
    char name[NAME_MAX_LEN];
    int ndim;
    int64_t shape[MAX_DIMS];
    uint64_t count;
    kind k;
    float gain;
} spec;

typedef struct spec_list {
    spec *t;
    size_t n, cap;
} spec_list;

static uint64_t g_seed = 1;

static void add(spec_list *l, kind k, float gain, int ndim, const int64_t *shape, const char *fmt,
                ...) __attribute__((format(printf, 6, 7)));

static void add(spec_list *l, kind k, float gain, int ndim, const int64_t *shape, const char *fmt,
                ...)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->t = realloc(l->t, l->cap * sizeof *l->t);
        if (!l->t) {
            fprintf(stderr, "flux_dev_folder: out of memory\n");
            exit(1);
        }
    }
    spec *s = &l->t[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    s->ndim = ndim;
    s->count = 1;
    for (int d = 0; d < ndim; d++) {
        s->shape[d] = shape[d];
        s->count *= (uint64_t)shape[d];
    }
    s->k = k;
    s->gain = gain;
}

/* weight (out, in) and bias (out) of a linear layer called base */
static void linear(spec_list *l, const char *base, int64_t out, int64_t in, int bias, float gain)
{
    const int64_t w[2] = {out, in}, b[1] = {out};
    add(l, K_LINEAR, gain, 2, w, "%s.weight", base);
    if (bias)
        add(l, K_BIAS, 1, 1, b, "%s.bias", base);
}

static void norm(spec_list *l, const char *name, int64_t n)
{
    const int64_t s[1] = {n};
    add(l, K_NORM, 1, 1, s, "%s", name);
}

/* ------------------------------------------------------------------ values */

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n bf16 values of tensor s from element `first` (a multiple of 4) on */
static void generate(const spec *s, uint64_t key, uint64_t first, size_t n, uint16_t *out)
{
    float amp = 0, base = 0;
    switch (s->k) {
    case K_LINEAR: {
        const double fan_in = s->shape[0] ? (double)s->count / (double)s->shape[0] : 1.0;
        amp = (float)(s->gain * sqrt(3.0 / fan_in));
        break;
    }
    case K_BIAS: amp = 0.02f * 1.7320508f; break;
    case K_NORM: amp = 0.1f; base = 1.0f; break;
    case K_EMBED: amp = s->gain * 1.7320508f; break;
    }
    const float scale = amp / 32768.0f;
    for (size_t i = 0; i < n; i += 4) {
        const uint64_t z = mix(key + (first + i + 1) * 0x9e3779b97f4a7c15ull);
        for (size_t j = 0; j < 4 && i + j < n; j++) {
            const int u = (int)((z >> (16 * j)) & 0xffff) - 32768; /* [-32768, 32767] */
            out[i + j] = cpdit_f32_to_bf16(base + scale * ((float)u + 0.5f));
        }
    }
}

static uint64_t name_key(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return mix(h ^ mix(g_seed));
}

/* ------------------------------------------------------------------ writing */

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One safetensors file with tensors [lo, hi) of l, all bf16, data in list order. */
static int write_shard(const spec_list *l, size_t lo, size_t hi, const char *path)
{
    json_t *root = json_object();
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t off = 0;
    for (size_t i = lo; i < hi; i++) {
        const spec *s = &l->t[i];
        json_t *shape = json_array();
        for (int d = 0; d < s->ndim; d++)
            json_array_append_new(shape, json_integer(s->shape[d]));
        json_object_set_new(root, s->name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", "BF16", "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + 2 * s->count)));
        off += 2 * s->count;
    }
    char *header = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!header)
        return -1;
    const size_t hlen = strlen(header), padded = (hlen + HEADER_ALIGN - 1) / HEADER_ALIGN * HEADER_ALIGN;
    unsigned char lenbytes[8];
    for (int i = 0; i < 8; i++)
        lenbytes[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        free(header);
        fprintf(stderr, "flux_dev_folder: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = write_all(fd, lenbytes, 8) || write_all(fd, header, hlen) ||
             write_all(fd, "        ", padded - hlen);
    free(header);
    uint16_t *buf = malloc(CHUNK * sizeof *buf);
    uint64_t since_flush = 0;
    for (size_t i = lo; i < hi && !rc && buf; i++) {
        const spec *s = &l->t[i];
        const uint64_t key = name_key(s->name);
        for (uint64_t at = 0; at < s->count && !rc; at += CHUNK) {
            const size_t n = s->count - at < CHUNK ? (size_t)(s->count - at) : CHUNK;
            generate(s, key, at, n, buf);
            rc = write_all(fd, buf, 2 * n);
            since_flush += 2 * n;
            if (since_flush >= FLUSH_BYTES) { /* keep the page cache free for the others */
                rc = rc || fdatasync(fd);
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                since_flush = 0;
            }
        }
    }
    rc = rc || !buf || fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    free(buf);
    if (close(fd) || rc) {
        fprintf(stderr, "flux_dev_folder: %s: write failed: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* dir/<stem>.safetensors (nshards 1), or dir/<stem>-0000k-of-0000n.safetensors and
 * dir/<stem>.safetensors.index.json, tensors split in list order at equal byte shares. */
static int write_component(const spec_list *l, const char *dir, const char *stem, int nshards)
{
    char path[4096], shard[256];
    uint64_t total = 0;
    for (size_t i = 0; i < l->n; i++)
        total += 2 * l->t[i].count;
    printf("flux_dev_folder: %s: %zu tensors, %.3f G parameters, %.2f GB in %d file(s)\n", dir,
           l->n, total / 2 * 1e-9, total * 1e-9, nshards);
    fflush(stdout);
    if (nshards <= 1) {
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, stem);
        return write_shard(l, 0, l->n, path);
    }
    json_t *map = json_object();
    size_t lo = 0;
    uint64_t acc = 0;
    for (int k = 0; k < nshards; k++) {
        size_t hi = lo;
        const uint64_t goal = total * (uint64_t)(k + 1) / (uint64_t)nshards;
        while (hi < l->n && (k == nshards - 1 || acc + 2 * l->t[hi].count <= goal || hi == lo))
            acc += 2 * l->t[hi++].count;
        snprintf(shard, sizeof shard, "%s-%05d-of-%05d.safetensors", stem, k + 1, nshards);
        snprintf(path, sizeof path, "%s/%s", dir, shard);
        if (write_shard(l, lo, hi, path))
            return -1;
        for (size_t i = lo; i < hi; i++)
            json_object_set_new(map, l->t[i].name, json_string(shard));
        lo = hi;
    }
    json_t *index = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total,
                              "weight_map", map);
    snprintf(path, sizeof path, "%s/%s.safetensors.index.json", dir, stem);
    const int rc = json_dump_file(index, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(index);
    return rc;
}

/* ------------------------------------------------------------------ configs */

/* dir/config.json as a JSON object (keys in file order), or NULL with a message. */
static json_t *load_config(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *c = json_load_file(path, JSON_PRESERVE_ORDER, &je);
    if (!c)
        fprintf(stderr, "flux_dev_folder: %s: %s (is DIR a `cpdit builtin write` folder?)\n",
                path, je.text);
    return c;
}

static int save_config(const char *dir, json_t *c)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const int rc = json_dump_file(c, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(c);
    return rc;
}

static void set_int(json_t *c, const char *k, json_int_t v)
{
    json_object_set_new(c, k, json_integer(v));
}

static void remove_file(const char *dir, const char *name)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path)
        unlink(path);
}

/* ------------------------------------------------------------------ components */

static int transformer(const char *root, int layers, int single)
{
    char dir[4096], n[NAME_MAX_LEN];
    snprintf(dir, sizeof dir, "%s/transformer", root);
    json_t *c = load_config(dir);
    if (!c)
        return -1;
    const int H = 24, D = 128, E = H * D, F = 4 * E, IN = 64, J = 4096, P = 768;
    set_int(c, "attention_head_dim", D);
    json_object_set_new(c, "axes_dims_rope", json_pack("[i, i, i]", 16, 56, 56));
    json_object_set_new(c, "guidance_embeds", json_true());
    set_int(c, "in_channels", IN);
    set_int(c, "joint_attention_dim", J);
    set_int(c, "num_attention_heads", H);
    set_int(c, "num_layers", layers);
    set_int(c, "num_single_layers", single);
    set_int(c, "patch_size", 1);
    set_int(c, "pooled_projection_dim", P);
    if (save_config(dir, c))
        return -1;
    spec_list l = {0};
    linear(&l, "time_text_embed.timestep_embedder.linear_1", E, 256, 1, 1);
    linear(&l, "time_text_embed.timestep_embedder.linear_2", E, E, 1, 1);
    linear(&l, "time_text_embed.guidance_embedder.linear_1", E, 256, 1, 1);
    linear(&l, "time_text_embed.guidance_embedder.linear_2", E, E, 1, 1);
    linear(&l, "time_text_embed.text_embedder.linear_1", E, P, 1, 1);
    linear(&l, "time_text_embed.text_embedder.linear_2", E, E, 1, 1);
    linear(&l, "context_embedder", E, J, 1, 1);
    linear(&l, "x_embedder", E, IN, 1, 1);
    for (int i = 0; i < layers; i++) {
        static const char *const sq[] = {"attn.to_q", "attn.to_k", "attn.to_v",
                                         "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj",
                                         "attn.to_out.0", "attn.to_add_out"};
        static const char *const norms[] = {"attn.norm_q", "attn.norm_k", "attn.norm_added_q",
                                            "attn.norm_added_k"};
#define B(x) (snprintf(n, sizeof n, "transformer_blocks.%d.%s", i, x), n)
        linear(&l, B("norm1.linear"), 6 * E, E, 1, 1);
        linear(&l, B("norm1_context.linear"), 6 * E, E, 1, 1);
        for (int k = 0; k < 8; k++)
            linear(&l, B(sq[k]), E, E, 1, 1);
        for (int k = 0; k < 4; k++) {
            B(norms[k]);
            strcat(n, ".weight");
            norm(&l, n, D);
        }
        linear(&l, B("ff.net.0.proj"), F, E, 1, 1);
        linear(&l, B("ff.net.2"), E, F, 1, 1);
        linear(&l, B("ff_context.net.0.proj"), F, E, 1, 1);
        linear(&l, B("ff_context.net.2"), E, F, 1, 1);
#undef B
    }
    for (int i = 0; i < single; i++) {
#define B(x) (snprintf(n, sizeof n, "single_transformer_blocks.%d.%s", i, x), n)
        linear(&l, B("norm.linear"), 3 * E, E, 1, 1);
        linear(&l, B("attn.to_q"), E, E, 1, 1);
        linear(&l, B("attn.to_k"), E, E, 1, 1);
        linear(&l, B("attn.to_v"), E, E, 1, 1);
        norm(&l, B("attn.norm_q.weight"), D);
        norm(&l, B("attn.norm_k.weight"), D);
        linear(&l, B("proj_mlp"), F, E, 1, 1);
        linear(&l, B("proj_out"), E, E + F, 1, 1);
#undef B
    }
    linear(&l, "norm_out.linear", 2 * E, E, 1, 1);
    linear(&l, "proj_out", IN, E, 1, 1);
    remove_file(dir, "diffusion_pytorch_model.safetensors");
    const int rc = write_component(&l, dir, "diffusion_pytorch_model", 3);
    free(l.t);
    return rc;
}

static int t5(const char *root, int layers)
{
    char dir[4096], n[NAME_MAX_LEN];
    snprintf(dir, sizeof dir, "%s/text_encoder_2", root);
    json_t *c = load_config(dir);
    if (!c)
        return -1;
    const int M = 4096, KV = 64, H = 64, FF = 10240, V = 32128, I = H * KV;
    set_int(c, "d_model", M);
    set_int(c, "d_kv", KV);
    set_int(c, "d_ff", FF);
    set_int(c, "num_heads", H);
    set_int(c, "num_layers", layers);
    set_int(c, "num_decoder_layers", layers);
    set_int(c, "vocab_size", V);
    json_object_set_new(c, "feed_forward_proj", json_string("gated-gelu"));
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
    const int buckets = (int)json_integer_value(json_object_get(c, "relative_attention_num_buckets"));
    if (save_config(dir, c))
        return -1;
    spec_list l = {0};
    const int64_t shared[2] = {V, M}, rel[2] = {buckets, H};
    add(&l, K_EMBED, 1.0f, 2, shared, "shared.weight");
    for (int i = 0; i < layers; i++) {
#define B(x) (snprintf(n, sizeof n, "encoder.block.%d.layer.%s", i, x), n)
        linear(&l, B("0.SelfAttention.q"), I, M, 0, 1.0f / sqrtf((float)KV));
        linear(&l, B("0.SelfAttention.k"), I, M, 0, 1);
        linear(&l, B("0.SelfAttention.v"), I, M, 0, 1);
        linear(&l, B("0.SelfAttention.o"), M, I, 0, 1);
        if (i == 0)
            add(&l, K_EMBED, 0.5f, 2, rel,
                "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
        norm(&l, B("0.layer_norm.weight"), M);
        linear(&l, B("1.DenseReluDense.wi_0"), FF, M, 0, 1);
        linear(&l, B("1.DenseReluDense.wi_1"), FF, M, 0, 1);
        linear(&l, B("1.DenseReluDense.wo"), M, FF, 0, 1);
        norm(&l, B("1.layer_norm.weight"), M);
#undef B
    }
    norm(&l, "encoder.final_layer_norm.weight", M);
    remove_file(dir, "model.safetensors");
    const int rc = write_component(&l, dir, "model", 2);
    free(l.t);
    return rc;
}

static int clip(const char *root, int layers)
{
    char dir[4096], n[NAME_MAX_LEN];
    snprintf(dir, sizeof dir, "%s/text_encoder", root);
    json_t *c = load_config(dir);
    if (!c)
        return -1;
    const int Hd = 768, I = 3072, V = 49408, POS = 77;
    set_int(c, "hidden_size", Hd);
    set_int(c, "intermediate_size", I);
    set_int(c, "num_hidden_layers", layers);
    set_int(c, "num_attention_heads", 12);
    set_int(c, "max_position_embeddings", POS);
    set_int(c, "projection_dim", Hd);
    set_int(c, "vocab_size", V);
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
    if (save_config(dir, c))
        return -1;
    spec_list l = {0};
    const int64_t tok[2] = {V, Hd}, pos[2] = {POS, Hd}, one[1] = {Hd};
    add(&l, K_EMBED, 0.5f, 2, tok, "text_model.embeddings.token_embedding.weight");
    add(&l, K_EMBED, 0.5f, 2, pos, "text_model.embeddings.position_embedding.weight");
    for (int i = 0; i < layers; i++) {
#define B(x) (snprintf(n, sizeof n, "text_model.encoder.layers.%d.%s", i, x), n)
        norm(&l, B("layer_norm1.weight"), Hd);
        add(&l, K_BIAS, 1, 1, one, "%s", B("layer_norm1.bias"));
        linear(&l, B("self_attn.q_proj"), Hd, Hd, 1, 1);
        linear(&l, B("self_attn.k_proj"), Hd, Hd, 1, 1);
        linear(&l, B("self_attn.v_proj"), Hd, Hd, 1, 1);
        linear(&l, B("self_attn.out_proj"), Hd, Hd, 1, 1);
        norm(&l, B("layer_norm2.weight"), Hd);
        add(&l, K_BIAS, 1, 1, one, "%s", B("layer_norm2.bias"));
        linear(&l, B("mlp.fc1"), I, Hd, 1, 1);
        linear(&l, B("mlp.fc2"), Hd, I, 1, 1);
#undef B
    }
    norm(&l, "text_model.final_layer_norm.weight", Hd);
    add(&l, K_BIAS, 1, 1, one, "text_model.final_layer_norm.bias");
    const int rc = write_component(&l, dir, "model", 1);
    free(l.t);
    return rc;
}

/* The decoder's parameter names and shapes come from cpdit's decoder for the rewritten config. */
static int vae(const char *root)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/vae", root);
    json_t *c = load_config(dir);
    if (!c)
        return -1;
    json_object_set_new(c, "block_out_channels", json_pack("[i, i, i, i]", 128, 256, 512, 512));
    set_int(c, "layers_per_block", 2);
    set_int(c, "norm_num_groups", 32);
    set_int(c, "latent_channels", 16);
    set_int(c, "sample_size", 1024);
    json_object_set_new(c, "scaling_factor", json_real(0.3611));
    json_object_set_new(c, "shift_factor", json_real(0.1159));
    if (save_config(dir, c))
        return -1;
    autoencoder_kl_config cfg;
    cpdit_error err;
    cpdit_error_clear(&err);
    vae_decoder *d = NULL;
    if (vae_config_load(root, &cfg, &err) || vae_decoder_create(&d, &cfg, &err)) {
        fprintf(stderr, "flux_dev_folder: %s: %s\n", err.where, err.what);
        return -1;
    }
    spec_list l = {0};
    const size_t np = vae_decoder_param_count(d);
    for (size_t i = 0; i < np; i++) {
        vae_param_info p;
        vae_decoder_param_at(d, i, &p);
        const size_t len = strlen(p.name);
        const int is_bias = len > 5 && !strcmp(p.name + len - 5, ".bias");
        const kind k = is_bias ? K_BIAS : (p.ndim == 1 ? K_NORM : K_LINEAR);
        add(&l, k, 1, p.ndim, p.shape, "%s", p.name);
    }
    vae_decoder_free(d);
    const int rc = write_component(&l, dir, "diffusion_pytorch_model", 1);
    free(l.t);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: flux_dev_folder DIR [--layers 19] [--single 38] [--t5-layers 24] "
                        "[--clip-layers 12] [--seed N] (see the source)\n");
        return 2;
    }
    const char *root = argv[1];
    int layers = 19, single = 38, t5_layers = 24, clip_layers = 12;
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 >= argc) {
            fprintf(stderr, "flux_dev_folder: %s needs a value\n", argv[i]);
            return 2;
        }
        const int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--layers")) layers = v;
        else if (!strcmp(argv[i], "--single")) single = v;
        else if (!strcmp(argv[i], "--t5-layers")) t5_layers = v;
        else if (!strcmp(argv[i], "--clip-layers")) clip_layers = v;
        else if (!strcmp(argv[i], "--seed")) g_seed = (uint64_t)strtoull(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "flux_dev_folder: unknown option %s\n", argv[i]);
            return 2;
        }
        if (v < 0 || (v < 1 && strcmp(argv[i], "--seed"))) {
            fprintf(stderr, "flux_dev_folder: %s: %s is not a positive count\n", argv[i],
                    argv[i + 1]);
            return 2;
        }
    }
    if (vae(root) || clip(root, clip_layers) || t5(root, t5_layers) ||
        transformer(root, layers, single))
        return 1;
    return 0;
}
