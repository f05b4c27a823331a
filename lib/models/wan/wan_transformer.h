/* wan_transformer.h — Wan 2.1's transformer (diffusers' WanTransformer3DModel) in C, run on
 * the video tokens this rank holds of a sequence sharded over a context-parallel group.
 *
 * The model (text-to-video):
 *   x     = patch_embedding(patches)                 Conv3d, kernel = stride = patch: a linear
 *   temb  = time_embedder(sinusoid(t))               linear-SiLU-linear, freq_dim channels
 *   tproj = time_proj(silu(temb))                    (B, 6, inner)
 *   ctx   = text_embedder(encoder_hidden_states)     linear-GELU(tanh)-linear, text_dim -> inner
 *   each block: shift, scale, gate, c_shift, c_scale, c_gate = scale_shift_table + tproj
 *     x += gate * attn1(LN(x) (1 + scale) + shift)   self-attention: q, k RMS-normed over the
 *                                                    whole inner dim, 3-D RoPE, CP attention
 *     x += attn2(norm2(x), ctx)                      cross-attention to the text (q, k normed)
 *     x += c_gate * ffn(LN(x) (1 + c_scale) + c_shift)   GELU(tanh) feed-forward
 *   out = proj_out(LN(x) (1 + scale) + shift)       shift, scale = scale_shift_table + temb
 * LayerNorms without affine parameters but norm2 (cross_attn_norm); eps from the config.
 *
 * Sharding: the video tokens are split over the CP group (a cp_seq_layout with no text part);
 * rank r holds vid_len of every batch item, with their (f, h, w) positions. Self-attention
 * goes through cp_attention() (lib/cp/cp_attention.h: every variant, uneven shares with
 * anything). The text tokens are not sharded: every rank holds all of them and runs the text
 * embedder and the cross-attention K/V itself, so cross-attention is local (the backend's
 * attention kernel). Without a grid (cp == NULL or cp->grid == NULL) the rank holds the whole
 * video.
 *
 * Weights: a diffusers-layout folder (config.json + diffusion_pytorch_model.safetensors or a
 * sharded index) with diffusers' state-dict names. Missing, unexpected and wrongly shaped
 * tensors are CPDIT_ERR_INPUT errors naming the tensor. One weight group per block (resident
 * when the model fits the weight budget, else streamed block by block) plus one for the rest.
 */
#ifndef CPDIT_WAN_TRANSFORMER_H
#define CPDIT_WAN_TRANSFORMER_H

#include <stddef.h>

#include "kernels/backend.h"
#include "lib/core/cpdit_error.h"
#include "lib/cp/cp_attention.h"
#include "lib/cp/cp_shard.h"
#include "lib/cp/grid.h"
#include "lib/models/model_hooks.h"
#include "lib/models/wan/wan_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* RoPE base of WanRotaryPosEmbed. */
#define WAN_ROPE_THETA 10000.0

typedef struct wan_transformer wan_transformer;

/* Open a model: path is a pipeline root (its transformer/ folder is used) or the transformer
 * component folder (config.json + weights). Tensors are mmap'd and checked, not converted. */
cpdit_status wan_transformer_open(wan_transformer **out, const char *path, cpdit_error *err);

/* Open with a config given in code (validated) and a weights path (file, index or folder as
 * safetensors_set_open takes). */
cpdit_status wan_transformer_open_with_config(wan_transformer **out,
                                              const wan_transformer_config *cfg,
                                              const char *weights_path, cpdit_error *err);

void wan_transformer_close(wan_transformer *m);

const wan_transformer_config *wan_transformer_config_of(const wan_transformer *m);

/* Weight budget in bytes (default SIZE_MAX: resident); smaller than the linear layers =
 * streamed per block. Call before the first forward. */
void wan_transformer_set_weight_cache(wan_transformer *m, size_t bytes);

/* Streaming only: make the next block on a helper thread (default on). */
void wan_transformer_set_weight_prefetch(wan_transformer *m, int on);

/* CPDIT_WEIGHT_NATIVE (default: bf16 stays bf16) or CPDIT_WEIGHT_F32 (the exact reference).
 * Call before the first forward. */
void wan_transformer_set_weight_format(wan_transformer *m, cpdit_weight_format format);

/* Keep the resident weights in memory shared by the node's ranks (weight_loader.h). */
struct weight_arena_ops;
void wan_transformer_set_weight_arena(wan_transformer *m, const struct weight_arena_ops *ops);

/* The backend that makes and holds the weights (NULL: the default). INPUT error once the
 * weights were made for another. */
cpdit_status wan_transformer_set_backend(wan_transformer *m, const cpdit_backend *be,
                                         cpdit_error *err);

/* Make the weights now (as the first forward would). */
cpdit_status wan_transformer_load_weights(wan_transformer *m, cpdit_error *err);

/* Parameters of the model; bytes of weight memory held now; bytes of the activation
 * workspace kept between forwards (backend memory; the CP attention workspace is apart). */
size_t wan_transformer_param_count(const wan_transformer *m);
size_t wan_transformer_weight_bytes(const wan_transformer *m);
size_t wan_transformer_workspace_bytes(const wan_transformer *m);

/* 1 when the linear layers were made once and kept (resident), 0 when they are streamed per
 * block (or not made yet). */
int wan_transformer_weights_resident(const wan_transformer *m);

/* One rank's inputs, host fp32 row-major. */
typedef struct wan_inputs {
    int batch;                          /* B */
    int vid_len;                        /* video tokens held by this rank (may be 0) */
    const float *hidden_states;         /* (B, vid_len, patch_dim) (wan_patchify order) */
    const float *positions;             /* (vid_len, 3) (f, h, w) of each held token */
    const float *timestep;              /* (B) diffusers units (0..1000), as WanPipeline */
    int text_len;                       /* L: all text tokens, on every rank (>= 1) */
    const float *encoder_hidden_states; /* (B, L, text_dim) */
    /* NULL, or a cache's hooks (lib/models/model_hooks.h; B must be 1): after the
     * embeddings, block 0 and the last block; every row is a probe row (video tokens) */
    const model_block_hooks *hooks;
} wan_inputs;

/* How self-attention is split: the grid, the variant, the layout of the video tokens over
 * grid->cp_size ranks (txt_total 0; this rank's entry matches vid_len). */
typedef struct wan_cp {
    const cp_grid *grid;          /* NULL: no CP, the rank holds the whole video */
    cp_attention_config attn;     /* variant, ring mode, anything, backend and kernel */
    const cp_seq_layout *layout;
    cp_attention_ws *ws;          /* workspace kept between calls, or NULL */
} wan_cp;

/* Run the model on this rank's tokens: out (B, vid_len, out_dim = pt*ph*pw*out_channels),
 * host fp32, in wan_unpatchify's order. be: the kernel table (NULL: the default).
 * Collective over cp->grid->cp when a grid is given (every rank calls it with the same batch
 * and text length). Errors: CPDIT_ERR_INPUT naming the input that does not fit the model or
 * the layout (positions outside the RoPE table included); CPDIT_ERR_RUNTIME for memory and
 * communication failures. */
cpdit_status wan_transformer_forward(wan_transformer *m, const cpdit_backend *be,
                                     const wan_cp *cp, const wan_inputs *in, float *out,
                                     cpdit_error *err);

/* FLOPs (2 per multiply-add) of the linear layers of one forward over B items of vid_tokens
 * video and text_tokens text tokens in all: patch embedding, blocks (self q, k, v, out;
 * cross q, out on the video tokens and cross k, v on the text tokens; the FFN), text
 * embedder, time embedding and proj_out. Attention FLOPs come apart (self:
 * cp_attention_flops(B, vid, H, D) per block; cross: 4 B vid L H D per block). */
double wan_transformer_linear_flops(const wan_transformer *m, int B, long long vid_tokens,
                                    long long text_tokens);

#ifdef __cplusplus
}
#endif
#endif
