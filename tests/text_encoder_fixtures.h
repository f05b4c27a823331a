/* text_encoder_fixtures.h — random CLIP text models and T5 encoders in the transformers layout
 * (config.json + model.safetensors, or shards with model.safetensors.index.json), and toy
 * tokenizers, for the text encoder tests and benchmark.
 *
 * Weights are uniform random with variances that keep activations of order one: linear
 * weights in ±sqrt(3/in) (UMT5's q: ±sqrt(3/(in d_kv)), the folded score scaling), norm
 * weights 1 ± 0.2, biases ± 0.1, embeddings ± 1. The same seed
 * gives the same fp32 values whatever the stored dtype (BF16/F16 round them).
 */
#ifndef CPDIT_TEXT_ENCODER_FIXTURES_H
#define CPDIT_TEXT_ENCODER_FIXTURES_H

#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "lib/core/dtype.h"

typedef struct clip_fixture {
    int vocab, hidden, intermediate, layers, heads, max_positions, eos_token_id;
    const char *act; /* hidden_act */
    double eps;
} clip_fixture;

typedef struct t5_fixture {
    int vocab, d_model, d_kv, d_ff, layers, heads, buckets, max_distance;
    const char *ff_proj; /* feed_forward_proj */
    double eps;
    int embed_as_shared; /* 1: "shared.weight", 0: "encoder.embed_tokens.weight" */
    int shards;          /* 1: model.safetensors; 2: two shards + index */
    int umt5;            /* 1: UMT5EncoderModel (model_type "umt5"): a bias table per block */
} t5_fixture;

/* Tiny defaults (the unit tests' sizes): CLIP hidden 32, 2 layers, 4 heads, intermediate 64,
 * vocab 1000, 77 positions, eos 999, quick_gelu; T5 d_model 32, d_kv 8, 4 heads, d_ff 64,
 * 2 layers, 32 buckets, max distance 128, gated-gelu, vocab 1000 (umt5 0: a T5). */
clip_fixture clip_fixture_tiny(void);
t5_fixture t5_fixture_tiny(void);

/* Write dir/config.json and the weights (dir is created if missing). 0 on success, -1 with err
 * filled on failure. */
int fixture_write_clip(const char *dir, const clip_fixture *f, cpdit_dtype dtype, uint32_t seed,
                       cpdit_error *err);
int fixture_write_t5(const char *dir, const t5_fixture *f, cpdit_dtype dtype, uint32_t seed,
                     cpdit_error *err);

/* A toy CLIP tokenizer (vocab.json + merges.txt) in dir: ids 0..9 are "a".."e" with and
 * without "</w>", "<|startoftext|>" = FIXTURE_CLIP_BOS, "<|endoftext|>" = FIXTURE_CLIP_EOS. */
#define FIXTURE_CLIP_BOS 10
#define FIXTURE_CLIP_EOS 11
int fixture_write_clip_tokenizer(const char *dir);

/* A toy T5 tokenizer.json (Unigram, Metaspace, </s> appended) in dir: <pad> 0, </s> 1, <unk> 2,
 * then "▁", "a".."e", "▁a".."▁e". */
int fixture_write_t5_tokenizer(const char *dir);

/* Write a small text file (folders created). 0 on success. */
int fixture_write_text(const char *path, const char *text);

#endif
