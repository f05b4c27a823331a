/* flux_transformer.h — FLUX.1's transformer (diffusers' FluxTransformer2DModel) in C, run on
 * the tokens this rank holds of a sequence sharded over a context-parallel group.
 *
 * The model: time / guidance / pooled-text embeddings summed into temb; num_layers
 * double-stream blocks (text and image streams with their own AdaLN-zero modulation,
 * projections, per-head RMSNorm and MLPs, joint attention over [text, image] with 3-axis
 * RoPE); num_single_layers single-stream blocks over the joint sequence (fused attention +
 * MLP input, gated output projection); the final AdaLN (scale, shift) and projection of the
 * image tokens. All in fp32; weights are converted from their dtype on disk (fp32, bf16,
 * fp16, fp8) one block at a time (see flux_transformer_set_weight_cache).
 *
 * Sharding: text and image tokens are split separately over the CP group (flux_shard.h);
 * rank r holds txt_len text tokens and img_len image tokens of every batch item, with their
 * RoPE ids. Every attention call goes through cp_attention() (lib/cp/cp_attention.h); all
 * other ops are per token and run on the local tokens through the kernel table
 * (kernels/backend.h). Without a grid (cp == NULL or cp->grid == NULL) the rank holds the
 * whole sequence and attention runs locally.
 *
 * Weights: a diffusers-layout folder (config.json + diffusion_pytorch_model.safetensors or a
 * sharded index), or the original single-file BFL layout (double_blocks.N.img_attn.qkv.weight,
 * ...; optionally with ComfyUI's "model.diffusion_model." prefix) mapped onto diffusers' names.
 * Missing, unexpected and wrongly shaped tensors are CPDIT_ERR_INPUT errors naming the tensor.
 */
#ifndef CPDIT_FLUX_TRANSFORMER_H
#define CPDIT_FLUX_TRANSFORMER_H

#include <stddef.h>

#include "lib/models/flux/flux_config.h"
#include "lib/cp/cp_attention.h"
#include "lib/cp/cp_shard.h"
#include "lib/core/cpdit_error.h"
#include "lib/cp/grid.h"
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Channels of the sinusoidal timestep / guidance embedding (diffusers' Timesteps(256, ...)). */
#define FLUX_TIMESTEP_CHANNELS 256
/* diffusers multiplies timestep and guidance by this inside the model. */
#define FLUX_TIME_SCALE 1000.0f
/* RoPE base of FluxPosEmbed. */
#define FLUX_ROPE_THETA 10000.0
/* eps of every LayerNorm and RMSNorm in the model. */
#define FLUX_NORM_EPS 1e-6f
/* MLP hidden size = FLUX_MLP_RATIO * inner_dim (FeedForward's mult, the single block's ratio). */
#define FLUX_MLP_RATIO 4

typedef struct flux_transformer flux_transformer;

/* Naming scheme of the checkpoint's tensors. */
typedef enum flux_weight_layout {
    FLUX_LAYOUT_DIFFUSERS = 0, /* transformer_blocks.N.attn.to_q.weight, ... */
    FLUX_LAYOUT_BFL            /* double_blocks.N.img_attn.qkv.weight, ... (original FLUX) */
} flux_weight_layout;

/* Open a model. path is one of
 *   - a pipeline root (its transformer/ folder is used) or a transformer component folder:
 *     config.json plus the weights (diffusion_pytorch_model.safetensors, a sharded
 *     *.safetensors.index.json, or any single *.safetensors file, diffusers or BFL names);
 *   - a single .safetensors file: the config comes from a config.json beside it when there is
 *     one, else it is inferred from the tensor shapes (BFL or diffusers names; axes_dims_rope
 *     is FLUX.1's (16, 56, 56) and must sum to the inferred head dim).
 * The tensors are mmap'd and checked (names and shapes) but not converted. */
cpdit_status flux_transformer_open(flux_transformer **out, const char *path, cpdit_error *err);

/* Open with a config given in code and a weights path (file, index or folder as
 * safetensors_set_open takes). The config is validated. */
cpdit_status flux_transformer_open_with_config(flux_transformer **out,
                                               const flux_transformer_config *cfg,
                                               const char *weights_path, cpdit_error *err);

void flux_transformer_close(flux_transformer *m);

const flux_transformer_config *flux_transformer_config_of(const flux_transformer *m);
flux_weight_layout flux_transformer_layout(const flux_transformer *m);

/* The weight budget (bytes; default SIZE_MAX): when all linear layers fit in it in the
 * backend's form, they are made once, before the first forward, and kept ("resident"); else
 * each block's are made right before it runs and freed after ("streaming": the whole model is
 * read from the map at every forward). fp32 tensors on disk are used in place either way.
 * Call before the first forward. */
void flux_transformer_set_weight_cache(flux_transformer *m, size_t bytes);

/* Streaming only: read and convert the next block's weights on a helper thread while the
 * current block computes (default on; two blocks' weights in memory at once). Off: every block
 * is made when it is needed (for comparison). */
void flux_transformer_set_weight_prefetch(flux_transformer *m, int on);

/* How the linear layers compute (kernels/backend.h): CPDIT_WEIGHT_NATIVE (the default: from
 * the stored dtype, bf16 as bf16) or CPDIT_WEIGHT_F32 (converted once; the exact reference).
 * Call before the first forward. */
void flux_transformer_set_weight_format(flux_transformer *m, cpdit_weight_format format);

/* Keep the resident weights in memory shared by the ranks of a node
 * (lib/weights/weight_loader.h). Call before the first forward; every sharing rank must then
 * load (flux_transformer_load_weights or a forward) together. */
struct weight_arena_ops;
void flux_transformer_set_weight_arena(flux_transformer *m, const struct weight_arena_ops *ops);

/* The backend that makes and holds the weights (kernels/backend.h; NULL: the default
 * backend, which is also what an open model starts with). The first forward's backend is taken
 * too; once the weights are made (load_weights or a forward) another backend is an INPUT error.
 * Call before flux_transformer_load_weights when the backend is not the default. */
cpdit_status flux_transformer_set_backend(flux_transformer *m, const cpdit_backend *be,
                                          cpdit_error *err);

/* Make the weights now (as the first forward would), for the backend set (or the default).
 * Errors: as the loader's. */
cpdit_status flux_transformer_load_weights(flux_transformer *m, cpdit_error *err);

/* What the weight loader did. */
typedef struct flux_weight_stats {
    int resident;               /* 1: all weights made once and kept */
    int shared;                 /* 1: in memory shared by the node's ranks */
    size_t matrix_bytes;        /* linear layers in the backend's form */
    size_t largest_group_bytes; /* the largest block's */
    double create_seconds;      /* reading + converting/packing so far (either thread) */
    double stall_seconds;       /* of which the forward waited for (streaming) */
    unsigned long long prefetched_groups; /* streamed blocks that were made ahead */
    unsigned long long bytes_read; /* bytes of linear weights read from the files so far */
    int stream_sharers;         /* streaming: ranks of the node using the same two slots (the
                                   CP group's there; 1: this rank's own slots) */
    unsigned long long peer_groups; /* streamed blocks made by another rank of the node */
} flux_weight_stats;
void flux_transformer_weight_stats(const flux_transformer *m, flux_weight_stats *s);

/* Bytes of weight memory this process holds now (vectors, made weights; a shared block counted
 * whole), bytes of the activation workspace (backend memory kept between forward calls, grown
 * when a call needs more: activations of the backend's act_dtype, so about half on a bf16
 * table, plus the fp32 RoPE table; the CP attention workspace is apart), and the number of
 * parameters of the model. */
size_t flux_transformer_weight_bytes(const flux_transformer *m);
size_t flux_transformer_workspace_bytes(const flux_transformer *m);
size_t flux_transformer_param_count(const flux_transformer *m);

/* One rank's inputs: the tokens it holds, in the diffusers forward's names. Row-major fp32,
 * host memory (the forward converts them to the backend's activations). */
typedef struct flux_inputs {
    int batch;                          /* B */
    int txt_len;                        /* text tokens held here (may be 0) */
    int img_len;                        /* image tokens held here (may be 0) */
    const float *hidden_states;         /* (B, img_len, in_channels) */
    const float *encoder_hidden_states; /* (B, txt_len, joint_attention_dim) */
    const float *pooled_projections;    /* (B, pooled_projection_dim) */
    const float *timestep;              /* (B): sigma-like, multiplied by 1000 inside */
    const float *guidance;              /* (B), only with guidance_embeds (NULL otherwise) */
    const float *txt_ids;               /* (txt_len, n_axes) RoPE positions of the text tokens */
    const float *img_ids;               /* (img_len, n_axes) of the image tokens */
} flux_inputs;

/* How attention is split: the grid, the variant and the joint [text | image] layout whose
 * entry for this rank matches the inputs' txt_len / img_len. */
typedef struct flux_cp {
    const cp_grid *grid;          /* NULL: no CP, the rank holds the whole sequence */
    cp_attention_config attn;     /* variant, ring mode, anything, backend and kernel */
    const cp_seq_layout *layout;  /* over grid->cp_size ranks */
    cp_attention_ws *ws;          /* workspace kept between calls, or NULL */
} flux_cp;

/* Run the model on this rank's tokens: out (B, img_len, patch_size^2 * out_channels), host
 * fp32 (converted from the backend's activations). be: the kernel table (NULL = CPU). Collective over cp->grid->cp when a grid is given (every
 * rank of the CP group must call it with the same batch). Errors: CPDIT_ERR_INPUT for inputs
 * that do not fit the model or the layout (naming the input), CPDIT_ERR_RUNTIME for memory
 * and communication failures. */
cpdit_status flux_transformer_forward(flux_transformer *m, const cpdit_backend *be,
                                      const flux_cp *cp, const flux_inputs *in, float *out,
                                      cpdit_error *err);

/* Weight FLOPs (multiply + add = 2) of one forward over B items of txt + img tokens in total,
 * linear layers only; attention FLOPs come from cp_attention_flops per block. */
double flux_transformer_linear_flops(const flux_transformer *m, int B, long long txt,
                                     long long img);

#ifdef __cplusplus
}
#endif
#endif
