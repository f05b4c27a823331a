/* wan_internal.h — pieces of the Wan transformer shared by its files (not installed).
 *
 *   wan_weights.c     diffusers' tensor names and shapes, registered one group at a time
 *   wan_embeddings.c  the timestep sinusoid, temb / time_proj, the text embedder, RoPE table
 *   wan_blocks.c      one WanTransformerBlock on this rank's tokens
 *   wan_transformer.c open/close, the activation workspace, the forward over all blocks
 */
#ifndef CPDIT_WAN_INTERNAL_H
#define CPDIT_WAN_INTERNAL_H

#include <stddef.h>

#include "lib/io/safetensors.h"
#include "lib/models/wan/wan_transformer.h"
#include "lib/weights/weight_holder.h"

#define WAN_WHERE "wan"
/* Modulation vectors of a block (scale_shift_table's (1, 6, inner)) and of the output. */
#define WAN_BLOCK_MOD_CHUNKS 6
#define WAN_OUT_MOD_CHUNKS 2

/* A linear layer: w a backend weight (out, in), b (out) fp32 (backend memory); w valid while
 * its group is acquired. */
typedef struct wan_linear {
    const cpdit_weight *w;
    const float *b;
    int out, in;
} wan_linear;

/* diffusers' WanAttention (no image K/V). */
typedef struct wan_attn_weights {
    wan_linear to_q, to_k, to_v, to_out;
    const float *norm_q, *norm_k;         /* RMSNorm weights (inner) */
} wan_attn_weights;

/* diffusers' WanTransformerBlock. */
typedef struct wan_block_weights {
    wan_attn_weights attn1, attn2;
    const float *norm2_w, *norm2_b;       /* (inner), cross_attn_norm only */
    wan_linear ffn_in, ffn_out;           /* (ffn, inner), (inner, ffn) */
    const float *table;                   /* scale_shift_table (6 inner), host fp32 */
} wan_block_weights;

/* Everything outside the blocks. */
typedef struct wan_global_weights {
    wan_linear patch;                     /* patch_embedding as (inner, patch_dim) */
    wan_linear time_1, time_2;            /* time_embedder: (inner, freq), (inner, inner) */
    wan_linear time_proj;                 /* (6 inner, inner) */
    wan_linear text_1, text_2;            /* text_embedder: (inner, text_dim), (inner, inner) */
    wan_linear proj_out;                  /* (out_dim, inner) */
    const float *table;                   /* scale_shift_table (2 inner), host fp32 */
} wan_global_weights;

struct wan_transformer {
    wan_transformer_config cfg;
    char *where;              /* weights path, for messages */
    safetensors_set *set;
    wan_global_weights global;
    wan_block_weights *blocks; /* [num_layers] */
    weight_holder w; /* loader, budget, format; groups: globals (0), block i (1 + i) */
    size_t n_params;
    void *acts;               /* activation workspace (backend memory), kept between calls */
    size_t acts_bytes;
    const cpdit_backend *acts_be;
};

static inline int wan_group_global(void) { return 0; }
static inline int wan_group_block(int i) { return 1 + i; }

/* ---------------------------------------------------------------- wan_weights.c */

/* Register every parameter (checks names and shapes: errors name the tensor), then refuse a
 * tensor of the checkpoint that nothing took. */
cpdit_status wan_weights_bind(wan_transformer *m, cpdit_error *err);
void wan_weights_free(wan_transformer *m);
/* Make group g usable (preparing the loader on first use). */
cpdit_status wan_weights_acquire(wan_transformer *m, int g, cpdit_error *err);

/* ---------------------------------------------------------------- wan_blocks.c */

/* Activations of one forward on this rank (elements of be's act_dtype; RoPE table fp32). */
typedef struct wan_acts {
    int B, S, L;              /* batch, local video tokens, text tokens */
    int E, H, D, F;           /* inner, heads, head dim, FFN hidden */
    float eps;
    cpdit_buf *x;             /* (B, S, E) hidden state */
    cpdit_buf *n;             /* (B, S, E) normalised / temporary */
    cpdit_buf *q, *k, *v, *o; /* (B, S, E) = (B, S, H, D) */
    cpdit_buf *h;             /* (B * S, F) FFN hidden */
    cpdit_buf *ctx;           /* (B, L, E) embedded text */
    cpdit_buf *ck, *cv;       /* (B, L, E) cross-attention keys / values */
    cpdit_buf *tproj;         /* (B, 6E) time_proj(silu(temb)) */
    cpdit_buf *mod;           /* (B, 6E) a block's modulation vectors */
    cpdit_buf *table;         /* (6E) a scale_shift_table as activations */
    const float *rope_cos, *rope_sin; /* (S, D) fp32 */
} wan_acts;

cpdit_status wan_block(const wan_block_weights *w, wan_acts *a, const cpdit_backend *be,
                       const wan_cp *cp, cpdit_error *err);

/* ---------------------------------------------------------------- wan_embeddings.c */

/* get_timestep_embedding(t, dim, flip_sin_to_cos=True, downscale_freq_shift=0):
 * out (B, dim) = [cos(t f_i), sin(t f_i)], f_i = exp(-ln(10000) i / (dim / 2)), fp32 as torch. */
void wan_timestep_embedding(float *out, const float *t, int B, int dim);

/* temb (B, E) = time_embedder(sinusoid(timestep)); tproj (B, 6E) = time_proj(silu(temb)).
 * work: at least wan_embed_work_elems activations. */
static inline size_t wan_embed_work_elems(const wan_transformer_config *c, int B)
{
    return (size_t)B * ((size_t)c->freq_dim + 2 * (size_t)c->inner_dim);
}
cpdit_status wan_time_embed(cpdit_buf *temb, cpdit_buf *tproj, const wan_transformer *m,
                            const cpdit_backend *be, const float *timestep, int B,
                            cpdit_buf *work, cpdit_error *err);

/* ctx (rows, E) = text_embedder(ehs): linear_2(gelu_tanh(linear_1(ehs))); ehs (rows,
 * text_dim) activations; hidden (rows, E) scratch. */
cpdit_status wan_text_embed(cpdit_buf *ctx, const wan_transformer *m, const cpdit_backend *be,
                            const cpdit_buf *ehs, int rows, cpdit_buf *hidden, cpdit_error *err);

/* WanRotaryPosEmbed for S tokens at pos (S, 3): cos, sin (S, D); the (t, h, w) axes fill
 * rope_dims columns in turn, each angle pos_a * theta^(-2i / dims_a) (float64, stored fp32)
 * written twice (repeat_interleave). */
void wan_rope_table(float *cos_out, float *sin_out, const float *pos, int S,
                    const wan_transformer_config *c);

#endif
