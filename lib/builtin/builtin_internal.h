/* builtin_internal.h — shared between the files that write a built-in model
 * (builtin_model.c: folder, configs, cache; builtin_weights.c: parameter tables and their
 * generated values; builtin_tokenizers.c: the tokenizer files). Not installed. */
#ifndef CPDIT_BUILTIN_INTERNAL_H
#define CPDIT_BUILTIN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/builtin/builtin_model.h"
#include "lib/core/cpdit_error.h"

struct json_t;

#define BUILTIN_MAX_VAE_BLOCKS 4

/* Every size of one built-in model. The vocab sizes and special ids are filled in by the
 * tokenizer writers (they depend on the generated vocabularies). */
/* A file shipped in the repository and compiled into the library (builtin_blobs.c). */
typedef struct builtin_blob {
    const unsigned char *start, *end; /* the bytes [start, end) */
} builtin_blob;

typedef struct builtin_sizes {
    const char *name;
    const char *description;   /* one line for `cpdit builtin list` */
    builtin_run_defaults run;  /* what a run uses for the settings it is not given */
    uint64_t seed;
    const char *corpus;        /* text the tokenizers are learned from (NULL: the default) */
    int guidance_embeds;       /* 1: guidance-distilled (dev-like); 0: true CFG / schnell-like */
    int dynamic_shifting;      /* scheduler: FLUX.1-dev's resolution-dependent shift, else 1 */
    int mid_block_add_attention;
    /* Trained weights (diffusers names) written as they are; NULL data: generated. */
    const builtin_blob *transformer_weights, *vae_weights;
    /* FluxTransformer2DModel */
    int in_channels, num_layers, num_single_layers, head_dim, heads;
    int joint_attention_dim, pooled_projection_dim;
    int axes_dims_rope[3];
    /* AutoencoderKL */
    int image_channels, latent_channels, n_vae_blocks, layers_per_block, norm_num_groups;
    int block_out_channels[BUILTIN_MAX_VAE_BLOCKS];
    double scaling_factor, shift_factor;
    /* CLIPTextModel */
    int clip_hidden, clip_intermediate, clip_layers, clip_heads, clip_positions;
    int clip_projection_dim;
    int clip_vocab, clip_bos_id, clip_eos_id; /* from the tokenizer */
    /* T5EncoderModel */
    int t5_d_model, t5_d_kv, t5_heads, t5_d_ff, t5_layers;
    int t5_buckets, t5_max_distance;
    int t5_vocab; /* from the tokenizer */
    /* Wan 2.1 (a video model: run.frames > 0): WanTransformer3DModel over latent_channels
     * (= the VAE's z_dim), UMT5 of the t5_* sizes (text_dim = t5_d_model), AutoencoderKLWan
     * with base_dim wan_vae_base */
    int wan_heads, wan_head_dim, wan_layers, wan_ffn, wan_freq, wan_vae_base;
} builtin_sizes;

/* builtin_model.c: write root (a JSON value, not consumed) as dir/rel_path, indented, keys
 * in insertion order, reals with up to 15 significant digits, and a final newline. */
cpdit_status builtin_write_json(const char *dir, const char *rel_path, struct json_t *root,
                                cpdit_error *err);
/* builtin_model.c: write len bytes as dir/rel_path. */
cpdit_status builtin_write_bytes(const char *dir, const char *rel_path, const void *data,
                                 size_t len, cpdit_error *err);

/* builtin_tokenizers.c: dir/tokenizer/ (CLIP BPE: vocab.json, merges.txt, configs) and
 * dir/tokenizer_2/ (T5 Unigram tokenizer.json, configs); fill s->clip_vocab,
 * s->clip_bos_id, s->clip_eos_id and s->t5_vocab. The folders must exist. */
cpdit_status builtin_write_clip_tokenizer(const char *dir, builtin_sizes *s, cpdit_error *err);
/* The corpus the tokenizers of s are learned from. */
const char *builtin_corpus(const builtin_sizes *s);
cpdit_status builtin_write_t5_tokenizer(const char *dir, builtin_sizes *s, cpdit_error *err);

/* builtin_weights.c: the weights of each component, written as
 * dir/transformer/diffusion_pytorch_model.safetensors (bf16),
 * dir/vae/diffusion_pytorch_model.safetensors, dir/text_encoder/model.safetensors,
 * dir/text_encoder_2/model.safetensors (fp32). *n_params (may be NULL) gets the count. */
cpdit_status builtin_write_transformer_weights(const char *dir, const builtin_sizes *s,
                                               size_t *n_params, cpdit_error *err);
cpdit_status builtin_write_vae_weights(const char *dir, const builtin_sizes *s,
                                       size_t *n_params, cpdit_error *err);
cpdit_status builtin_write_clip_weights(const char *dir, const builtin_sizes *s,
                                        size_t *n_params, cpdit_error *err);
cpdit_status builtin_write_t5_weights(const char *dir, const builtin_sizes *s,
                                      size_t *n_params, cpdit_error *err);

/* builtin_weights.c: the Wan family's weights (transformer/, text_encoder/ UMT5, vae/ decoder). */
cpdit_status builtin_write_wan_weights(const char *dir, const builtin_sizes *s, size_t *n_params,
                                       cpdit_error *err);
/* builtin_wan.c: a whole WanPipeline folder of s at dir (an empty folder): configs, the
 * tokenizer (the T5 one of the FLUX built-ins, as tokenizer/), the weights; text_only: no
 * transformer or VAE weights. */
cpdit_status builtin_write_wan_folder(const char *dir, builtin_sizes *s, int text_only,
                                      cpdit_error *err);

/* builtin_blobs.c: the trained weights of builtin:shapes (tests/reference/train-builtin/). */
extern const builtin_blob builtin_shapes_transformer, builtin_shapes_vae;
/* The grammar of builtin:shapes, as the tokenizers' corpus (builtin_tokenizers.c). */
extern const char builtin_shapes_corpus[];

#endif
