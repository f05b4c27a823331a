/* t5_encoder.h — transformers' T5EncoderModel (FLUX.1's text_encoder_2/, T5 v1.1 XXL) and
 * UMT5EncoderModel (Wan 2.1's text_encoder/, umt5-xxl) through the backend table: activations
 * in the table's act_dtype (fp32 on "cpu", bf16 on "cpu-bf16" and "cuda"), parameters
 * (embedding, norms, the relative-position bias) fp32, inputs and outputs host fp32.
 *
 * Forward, as modeling_t5.py / modeling_umt5.py define it, with an optional attention mask
 * (FluxPipeline passes none, so the <pad> tokens after </s> are attended to like any other;
 * WanPipeline passes the tokenizer's):
 *   x = embed_tokens[ids]
 *   bias (H, S, S) = relative_attention_bias[bucket(j - i)] of block 0, used by every block
 *                    (T5); of each block, its own table (UMT5: model_type "umt5")
 *   masked key j of item b (mask[b, j] == 0): bias[h, i, j] + torch.finfo(float32).min, as
 *                    transformers' (1 - mask) * finfo.min extended mask: the key gets weight 0;
 *                    an item whose keys are all masked attends uniformly to all of them
 *                    (every score is finfo.min after rounding), as in transformers
 *   per block:  x += o(attn(rms(x)))     q, k, v, o without bias; scores q·k + bias with NO
 *                                         1/sqrt(d_kv) scaling (T5 folds it into the weights)
 *               x += wo(act(wi_0(rms(x))) * wi_1(rms(x)))   "gated-ACT" (T5 v1.1: gelu_new)
 *           or  x += wo(act(wi(rms(x))))                     "ACT" (original T5: relu)
 *   last_hidden_state = rms(x) with final_layer_norm's weight
 * rms is T5LayerNorm: x / sqrt(mean(x^2) + layer_norm_epsilon) * weight (no mean, no bias).
 * inner = num_heads * d_kv may differ from d_model.
 * Tensor names: shared.weight or encoder.embed_tokens.weight; encoder.block.N.layer.0.
 * {layer_norm.weight, SelfAttention.{q,k,v,o}.weight}, encoder.block.0.layer.0.SelfAttention.
 * relative_attention_bias.weight (num_buckets, num_heads) (UMT5: encoder.block.N....  for every
 * N), encoder.block.N.layer.1.
 * {layer_norm.weight, DenseReluDense.{wi_0,wi_1,wo | wi,wo}.weight},
 * encoder.final_layer_norm.weight. A decoder and lm_head in the file are ignored.
 *
 * Memory: see text_weights.h. T5-XXL in bf16 (9.5 GB on disk) with the default cache streams
 * per block: two blocks' matrices at a time (the one computing, the next one being read and
 * packed: 2 x 386 MB in bf16 for XXL) plus activations.
 */
#ifndef CPDIT_T5_ENCODER_H
#define CPDIT_T5_ENCODER_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "lib/io/model_config.h"
#include "lib/text/text_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct t5_encoder_config {
    int vocab_size;                      /* 32128 */
    int d_model;                         /* 512; XXL 4096 */
    int d_kv;                            /* 64 */
    int d_ff;                            /* 2048; XXL 10240 */
    int num_layers;                      /* 6; XXL 24 */
    int num_heads;                       /* 8; XXL 64 */
    int relative_attention_num_buckets;  /* 32 */
    int relative_attention_max_distance; /* 128 */
    float layer_norm_epsilon;            /* 1e-6 */
    int is_gated_act;                    /* feed_forward_proj "gated-..." */
    text_act dense_act;                  /* "gated-gelu" -> gelu_new, "relu" -> relu */
    int per_layer_bias;                  /* 1: model_type "umt5": a bias table in every block */
} t5_encoder_config;

/* Read a T5Config or a UMT5Config (model_type "t5" or "umt5"; defaults as transformers' for
 * missing keys, UMT5Config's when model_type is "umt5"). feed_forward_proj is "ACT" or
 * "gated-ACT" ("gated-gelu" means gelu_new, as T5Config says); a "dense_act_fn" key overrides
 * the activation, as it does in transformers. Errors (INPUT, naming the key): a wrong
 * model_type, non-positive sizes, fewer than 4 buckets, max_distance not above the exact
 * range, an unknown activation or feed_forward_proj. */
cpdit_status t5_encoder_config_read(const model_config *cfg, t5_encoder_config *out,
                                    cpdit_error *err);

typedef struct t5_encoder t5_encoder;

/* Load dir/config.json and dir's weights (model.safetensors or the sharded index). opt may be
 * NULL (defaults). Errors: config, missing / wrongly shaped / unexpected tensors, I/O. */
cpdit_status t5_encoder_load(const char *dir, const text_encoder_options *opt, t5_encoder **out,
                             cpdit_error *err);
void t5_encoder_free(t5_encoder *m);

const t5_encoder_config *t5_encoder_get_config(const t5_encoder *m);
size_t t5_encoder_param_count(const t5_encoder *m);
/* 1 when the matrices are made per block at use (the model did not fit options.cache_bytes). */
int t5_encoder_streaming(const t5_encoder *m);
/* What its weights cost so far (text_weights.h). */
void t5_encoder_weight_stats(const t5_encoder *m, text_weight_stats *out);

/* ids (B, S) int32 → last_hidden (B, S, d_model). S >= 1. Errors (INPUT): an id outside
 * [0, vocab_size), bad B or S; (RUNTIME) out of memory. Calls may run concurrently (one after
 * the other while the weights stream: text_weights.h). The same as
 * t5_encoder_forward_masked with mask NULL. */
cpdit_status t5_encoder_forward(const t5_encoder *m, const int32_t *ids, int B, int S,
                                float *last_hidden, cpdit_error *err);

/* The same with transformers' attention_mask (B, S): 1 = attend to the key, 0 = masked; NULL
 * = all ones. A mask of all ones gives bitwise the unmasked result. Items with equal mask rows
 * next to each other share one attention call; the bias (H, S, S) is rebuilt per layer
 * (UMT5) or per group of equal rows. Errors (INPUT): as above, a mask value other than 0 / 1
 * (naming its position). */
cpdit_status t5_encoder_forward_masked(const t5_encoder *m, const int32_t *ids,
                                       const int32_t *mask, int B, int S, float *last_hidden,
                                       cpdit_error *err);

/* ---------------------------------------------------------------- relative position bias
 * (t5_relative_bias.c) */

/* T5Attention._relative_position_bucket for one relative position (key - query), computed in
 * fp32 as torch does: exact buckets below max_exact, logarithmic ones up to max_distance. */
int t5_relative_position_bucket(int relative_position, int bidirectional, int num_buckets,
                                int max_distance);

/* bias[h, i, j] = table[bucket(j - i), h] for i < Sq, j < Sk (bidirectional buckets).
 * table: (num_buckets, H) (nn.Embedding(num_buckets, num_heads).weight); bias (H, Sq, Sk). */
void t5_position_bias(float *bias, const float *table, int num_buckets, int max_distance, int H,
                      int Sq, int Sk);

/* The extended mask of one item: key_add[j] = (1 - mask[j]) * T5_MASK_MIN (fp32, as
 * transformers' (1.0 - mask) * torch.finfo(float32).min: -0.0 for a kept key). mask (Sk)
 * holds 0 / 1; key_add (Sk). */
#define T5_MASK_MIN (-FLT_MAX) /* torch.finfo(torch.float32).min = -3.4028235e38 */
void t5_mask_to_bias(float *key_add, const int32_t *mask, int Sk);

/* t5_position_bias, then bias[h, i, j] += key_add[j] (fp32, the order transformers adds
 * position_bias + mask); key_add NULL: t5_position_bias exactly. */
void t5_position_bias_masked(float *bias, const float *table, int num_buckets, int max_distance,
                             int H, int Sq, int Sk, const float *key_add);

#ifdef __cplusplus
}
#endif
#endif
