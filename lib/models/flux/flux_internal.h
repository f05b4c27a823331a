/* flux_internal.h — pieces of the FLUX transformer shared by its files (not installed).
 *
 *   flux_weights.c     tensor names (diffusers and BFL), checks, block-by-block conversion
 *   flux_embeddings.c  timestep/guidance/pooled embeddings (temb) and the RoPE table
 *   flux_blocks.c      the double-stream and single-stream blocks
 *   flux_transformer.c open/close, the forward over all blocks
 */
#ifndef CPDIT_FLUX_INTERNAL_H
#define CPDIT_FLUX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/models/flux/flux_transformer.h"
#include "lib/io/safetensors.h"
#include "lib/weights/weight_holder.h"

/* A linear layer: w a backend weight (out, in), b (out) fp32 or NULL; w valid while its group
 * is acquired, b always. */
typedef struct flux_linear {
    const cpdit_weight *w;
    const float *b;
    int out, in;
} flux_linear;

/* diffusers' FluxTransformerBlock. */
typedef struct flux_double_weights {
    flux_linear norm1, norm1_context;         /* AdaLayerNormZero.linear: (6 inner, inner) */
    flux_linear to_q, to_k, to_v;             /* image stream, (inner, inner) */
    flux_linear add_q, add_k, add_v;          /* text stream */
    const float *norm_q, *norm_k;             /* RMSNorm weights (head_dim), image */
    const float *norm_added_q, *norm_added_k; /* text */
    flux_linear to_out, to_add_out;           /* (inner, inner) */
    flux_linear ff_in, ff_out;                /* (4 inner, inner), (inner, 4 inner) */
    flux_linear ffc_in, ffc_out;              /* the text stream's feed-forward */
} flux_double_weights;

/* diffusers' FluxSingleTransformerBlock. */
typedef struct flux_single_weights {
    flux_linear norm;              /* AdaLayerNormZeroSingle.linear: (3 inner, inner) */
    flux_linear to_q, to_k, to_v;  /* (inner, inner) */
    const float *norm_q, *norm_k;  /* (head_dim) */
    flux_linear proj_mlp;          /* (4 inner, inner) */
    flux_linear proj_out;          /* (inner, 5 inner): input is [attn, mlp] */
} flux_single_weights;

/* Everything outside the blocks. */
typedef struct flux_global_weights {
    flux_linear time_1, time_2;         /* timestep_embedder: (inner, 256), (inner, inner) */
    flux_linear guid_1, guid_2;         /* guidance_embedder (guidance_embeds only) */
    flux_linear text_1, text_2;         /* text_embedder: (inner, pooled), (inner, inner) */
    flux_linear context_embedder;       /* (inner, joint_attention_dim) */
    flux_linear x_embedder;             /* (inner, in_channels) */
    flux_linear norm_out;               /* AdaLayerNormContinuous.linear: (2 inner, inner) */
    flux_linear proj_out;               /* (p^2 out_channels, inner) */
} flux_global_weights;

struct flux_transformer {
    flux_transformer_config cfg;
    char *where;            /* weights path, for messages */
    safetensors_set *set;
    flux_weight_layout layout;
    const char *prefix;     /* "model.diffusion_model." or "" for BFL names */
    flux_global_weights global;
    flux_double_weights *dbl;  /* [num_layers] */
    flux_single_weights *sgl;  /* [num_single_layers] */
    weight_holder w; /* loader, budget, format; groups: globals, doubles, singles (flux_group_*) */
    size_t n_params;
    /* activation workspace (backend memory: activations of acts_be's act_dtype and the fp32
     * RoPE table), kept between forward calls (freed by close) */
    void *acts;
    size_t acts_bytes;
    const cpdit_backend *acts_be;
    /* host staging of the RoPE table for device backends (2 S D + 1 floats), kept */
    float *rope_host;
    size_t rope_host_floats;
};

/* ---------------------------------------------------------------- flux_weights.c */

/* Detect the layout of m->set, register every parameter with the loader (group by group),
 * check names and shapes (errors name the tensor). */
cpdit_status flux_weights_bind(flux_transformer *m, cpdit_error *err);
void flux_weights_free(flux_transformer *m);

/* Make group g's weights usable: on first use the loader prepares (all weights created once
 * when they fit m->w.budget, else streamed block by block). One group at a time. */
cpdit_status flux_weights_acquire(flux_transformer *m, int g, cpdit_error *err);

/* Infer a config from tensor shapes (single-file checkpoints without config.json). */
cpdit_status flux_weights_infer_config(const safetensors_set *set, flux_transformer_config *c,
                                       cpdit_error *err);

/* Group indices. */
static inline int flux_group_global(void) { return 0; }
static inline int flux_group_double(int i) { return 1 + i; }
static inline int flux_group_single(const flux_transformer *m, int i)
{
    return 1 + m->cfg.num_layers + i;
}

/* ---------------------------------------------------------------- flux_embeddings.c */

/* diffusers get_timestep_embedding(t, 256, flip_sin_to_cos=True, downscale_freq_shift=0):
 * out (B, FLUX_TIMESTEP_CHANNELS) = [cos(t f_i), sin(t f_i)], f_i = exp(-ln(10000) i / 128),
 * fp32 as torch computes it. t: (B) values already scaled (x 1000). */
void flux_timestep_embedding(float *out, const float *t, int B);

/* temb (B, inner) = timestep_embedder(proj(1000 t)) [+ guidance_embedder(proj(1000 g))]
 * + text_embedder(pooled). timestep, guidance, pooled: host fp32; temb and work: activations
 * of be, work of at least flux_embed_work_elems(m, B) elements. */
static inline size_t flux_embed_work_elems(const flux_transformer_config *c, int B)
{
    return (size_t)B * (FLUX_TIMESTEP_CHANNELS + c->inner_dim + c->pooled_projection_dim);
}
cpdit_status flux_time_text_embed(cpdit_buf *temb, const flux_transformer *m,
                                  const cpdit_backend *be, const float *timestep,
                                  const float *guidance, const float *pooled, int B,
                                  cpdit_buf *work, cpdit_error *err);

/* FluxPosEmbed: cos, sin (S, head_dim) for ids (S, n_axes): axis a fills dims_a columns with
 * each angle pos * theta^(-2i/dims_a) repeated twice (angles in float64, stored as fp32). */
void flux_rope_table(float *cos_out, float *sin_out, const float *ids, int S,
                     const flux_transformer_config *c);

/* ---------------------------------------------------------------- flux_blocks.c */

/* Activations of one forward on this rank: B items of S = T + I local tokens each. The
 * buffers are activations of the backend's act_dtype (sizes in elements); the RoPE table is
 * fp32 (a parameter of the rope op) in backend memory. */
typedef struct flux_acts {
    int B, txt, img, S;       /* batch, local text / image / total tokens */
    int inner, H, D;          /* model sizes */
    cpdit_buf *x;             /* (B, S, inner) hidden state, text rows first in each item */
    cpdit_buf *n;             /* (B, S, inner) normalised / temporary */
    cpdit_buf *q, *k, *v, *o; /* (B, S, inner) = (B, S, H, D) */
    cpdit_buf *mlp;           /* (B * S, 5 inner): single block [attn | mlp], double block mlp */
    cpdit_buf *mod;           /* (B, 12 inner) modulation vectors */
    const cpdit_buf *stemb;   /* (B, inner) silu(temb) */
    const float *rope_cos, *rope_sin; /* (S, D) fp32 */
} flux_acts;

cpdit_status flux_double_block(const flux_double_weights *w, flux_acts *a,
                               const cpdit_backend *be, const flux_cp *cp, cpdit_error *err);
cpdit_status flux_single_block(const flux_single_weights *w, flux_acts *a,
                               const cpdit_backend *be, const flux_cp *cp, cpdit_error *err);

/* Attention over the joint sequence: o = attention(q, k, v) through cp_attention, or locally
 * without a grid. q, k, v, o (B, S, H, D). */
cpdit_status flux_attention(flux_acts *a, const cpdit_backend *be, const flux_cp *cp,
                            cpdit_error *err);

#endif
