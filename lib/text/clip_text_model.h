/* clip_text_model.h — transformers' CLIPTextModel (the text tower of CLIP; FLUX.1's
 * text_encoder/, CLIP ViT-L/14) through the backend table: activations in the table's
 * act_dtype (fp32 on "cpu", bf16 on "cpu-bf16" and "cuda"), parameters (embeddings, norms,
 * biases) fp32, inputs and outputs host fp32.
 *
 * Forward, as modeling_clip.py defines it (no attention mask: FluxPipeline passes none):
 *   x = token_embedding[ids] + position_embedding[0..S)
 *   per layer:  x += out_proj(attn(layer_norm1(x)))    causal self-attention, q scaled by
 *                                                       head_dim^-0.5, biases on q/k/v/out
 *               x += fc2(act(fc1(layer_norm2(x))))     act = config hidden_act
 *   last_hidden_state = final_layer_norm(x)
 *   pooler_output = last_hidden_state at the end token: when config eos_token_id == 2 (the
 *     legacy value in CLIP-L's and FLUX.1's config.json) the position of the largest id
 *     (argmax, the first one on ties: the first <|endoftext|> of a padded sequence), otherwise
 *     the first position holding eos_token_id (position 0 when there is none, as argmax of an
 *     all-false mask gives).
 * Tensor names (model.safetensors, transformers layout): text_model.embeddings.
 * {token,position}_embedding.weight, text_model.encoder.layers.N.{layer_norm1, layer_norm2,
 * self_attn.{q,k,v,out}_proj, mlp.fc1, mlp.fc2}.{weight,bias}, text_model.final_layer_norm.
 * {weight,bias}. A config with "text_config" (a whole CLIPModel) is read from that object; the
 * vision tower, text_projection and logit_scale are ignored.
 */
#ifndef CPDIT_CLIP_TEXT_MODEL_H
#define CPDIT_CLIP_TEXT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "lib/io/model_config.h"
#include "lib/text/text_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CLIP_LEGACY_EOS_TOKEN_ID 2 /* configs before transformers PR #24773: pool at argmax */

typedef struct clip_text_config {
    int vocab_size;              /* default 49408 */
    int hidden_size;             /* 512 by default; CLIP-L 768 */
    int intermediate_size;       /* 2048; CLIP-L 3072 */
    int num_hidden_layers;       /* 12 */
    int num_attention_heads;     /* 8; CLIP-L 12 */
    int max_position_embeddings; /* 77 */
    int eos_token_id;            /* 49407 (2 = legacy argmax pooling) */
    float layer_norm_eps;        /* 1e-5 */
    text_act hidden_act;         /* "quick_gelu" */
} clip_text_config;

/* Read a CLIPTextConfig from config.json (defaults as transformers' CLIPTextConfig for
 * missing keys). Errors (INPUT, naming the key): a wrong model_type, non-positive sizes,
 * hidden_size not a multiple of num_attention_heads, an unknown hidden_act. */
cpdit_status clip_text_config_read(const model_config *cfg, clip_text_config *out,
                                   cpdit_error *err);

typedef struct clip_text_model clip_text_model;

/* Load dir/config.json and dir's weights (see text_weights.h for the memory policy). opt may
 * be NULL (defaults). Errors: those of the config, missing or wrongly shaped tensors, an
 * unexpected tensor (e.g. more layers than config.json says), I/O. */
cpdit_status clip_text_model_load(const char *dir, const text_encoder_options *opt,
                                  clip_text_model **out, cpdit_error *err);
void clip_text_model_free(clip_text_model *m);

const clip_text_config *clip_text_model_config(const clip_text_model *m);
/* Parameters in the checkpoint's registered tensors. */
size_t clip_text_model_param_count(const clip_text_model *m);
/* Whether its weights stream (per layer) and what they cost so far (text_weights.h). */
void clip_text_model_weight_stats(const clip_text_model *m, text_weight_stats *out);

/* ids (B, S) int32 → last_hidden (B, S, hidden_size) and pooled (B, hidden_size), either
 * output may be NULL. 1 <= S <= max_position_embeddings. Errors (INPUT): an id outside
 * [0, vocab_size), bad B or S; (RUNTIME) out of memory. Calls may run concurrently (one
 * after the other while the weights stream: text_weights.h). */
cpdit_status clip_text_model_forward(const clip_text_model *m, const int32_t *ids, int B, int S,
                                     float *last_hidden, float *pooled, cpdit_error *err);

/* The row pooler_output takes for one sequence ids[0..S) (see above). */
int clip_text_pool_index(const clip_text_config *cfg, const int32_t *ids, int S);

#ifdef __cplusplus
}
#endif
#endif
