/* wan_blocks.c — one WanTransformerBlock on this rank's video tokens.
 *
 * Activations (wan_acts) hold B items of S local video tokens (B * S rows of E = inner) and
 * the whole embedded text ctx (B, L, E). Per block:
 *   shift, scale, gate, c_shift, c_scale, c_gate = scale_shift_table + tproj  (6 chunks)
 *   n = LN(x) (1 + scale) + shift                                  LN: no affine, eps
 *   q, k, v = to_q/k/v(n); q, k = RMSNorm over all E (norm_q/k, before the heads split);
 *   RoPE on q, k; o = self-attention over the whole video (cp_attention)
 *   x += gate * to_out(o)
 *   n = norm2(x) (affine LN when cross_attn_norm, else x itself)
 *   q = RMSNorm(to_q(n)); k = RMSNorm(to_k(ctx)); v = to_v(ctx)     attn2, no RoPE
 *   x += to_out(attention(q, k, v))                                  local: all text is here
 *   x += c_gate * ffn.net.2(gelu_tanh(ffn.net.0(LN(x) (1 + c_scale) + c_shift)))
 * Attention scale 1/sqrt(D).
 */
#include "config.h"

#include <math.h>

#include "lib/models/wan/wan_internal.h"

/* Chunks of the block's modulation (diffusers' chunk order). */
enum { MOD_SHIFT = 0, MOD_SCALE, MOD_GATE, MOD_C_SHIFT, MOD_C_SCALE, MOD_C_GATE };

/* y (M, L->out) = x (M, L->in) W^T + b (accumulate: y += ...), contiguous rows. */
static inline cpdit_status lin(const cpdit_backend *be, cpdit_buf *y, const cpdit_buf *x,
                               const wan_linear *L, int M, int accumulate, cpdit_error *err)
{
    if (M == 0)
        return CPDIT_OK;
    return be->linear(y, L->out, x, L->in, L->w, L->b, M, L->in, L->out, accumulate, err);
}

/* Rows of item b of a (B, S, E) buffer. */
static inline cpdit_buf *item(const cpdit_backend *be, const cpdit_buf *p, const wan_acts *a,
                              int b)
{
    return cpdit_buf_at(be, p, (ptrdiff_t)b * a->S * a->E);
}

/* Chunk c of item b's modulation vectors. */
static inline cpdit_buf *mod_chunk(const cpdit_backend *be, const wan_acts *a, int b, int c)
{
    return cpdit_buf_at(be, a->mod, ((ptrdiff_t)b * WAN_BLOCK_MOD_CHUNKS + c) * a->E);
}

/* mod (B, 6E) = tproj + scale_shift_table (host fp32, through a->table). */
static void block_modulation(const float *table, wan_acts *a, const cpdit_backend *be)
{
    const size_t n = (size_t)WAN_BLOCK_MOD_CHUNKS * a->E;
    be->upload_act(a->table, table, n);
    for (int b = 0; b < a->B; b++)
        be->add(cpdit_buf_at(be, a->mod, (ptrdiff_t)(b * n)),
                cpdit_buf_at(be, a->tproj, (ptrdiff_t)(b * n)), a->table, n);
}

/* n = LN(x) (1 + scale_c) + shift_c per item, LN without affine. */
static void norm_modulate(wan_acts *a, const cpdit_backend *be, int shift_c, int scale_c)
{
    be->layer_norm(a->n, a->x, NULL, NULL, (size_t)a->B * a->S, a->E, a->eps);
    for (int b = 0; b < a->B; b++)
        be->modulate(item(be, a->n, a, b), item(be, a->n, a, b), mod_chunk(be, a, b, shift_c),
                     mod_chunk(be, a, b, scale_c), (size_t)a->S, a->E);
}

/* x += gate_c * y per item (y (B, S, E)). */
static void gated_add(wan_acts *a, const cpdit_backend *be, const cpdit_buf *y, int gate_c)
{
    for (int b = 0; b < a->B; b++)
        be->gated_residual(item(be, a->x, a, b), a->E, item(be, y, a, b), a->E,
                           mod_chunk(be, a, b, gate_c), (size_t)a->S, a->E);
}

/* Self-attention over the sharded video: o = attention(q, k, v). */
static cpdit_status self_attention(wan_acts *a, const cpdit_backend *be, const wan_cp *cp,
                                   cpdit_error *err)
{
    const float scale = (float)(1.0 / sqrt((double)a->D));
    if (cp && cp->grid) {
        cp_attention_config cfg = cp->attn;
        if (!cfg.backend)
            cfg.backend = be;
        return cp_attention(&cfg, cp->grid, cp->ws, a->o, NULL, a->q, a->k, a->v, cp->layout,
                            a->B, a->H, a->D, scale, err);
    }
    if (a->S == 0)
        return CPDIT_OK;
    const cpdit_attention_kernel *kernel =
        cp && cp->attn.kernel ? cp->attn.kernel : be->attention_kernels[0];
    const cpdit_attention_args args = {.B = a->B, .Sq = a->S, .Skv = a->S, .H = a->H,
                                       .D = a->D, .scale = scale};
    return kernel->forward(a->o, NULL, a->q, a->k, a->v, &args, err);
}

static cpdit_status attn1(const wan_block_weights *w, wan_acts *a, const cpdit_backend *be,
                          const wan_cp *cp, cpdit_error *err)
{
    const int rows = a->B * a->S;
    cpdit_status st;
    norm_modulate(a, be, MOD_SHIFT, MOD_SCALE);
    if ((st = lin(be, a->q, a->n, &w->attn1.to_q, rows, 0, err)) ||
        (st = lin(be, a->k, a->n, &w->attn1.to_k, rows, 0, err)) ||
        (st = lin(be, a->v, a->n, &w->attn1.to_v, rows, 0, err)))
        return st;
    be->rms_norm(a->q, a->q, w->attn1.norm_q, (size_t)rows, a->E, a->eps);
    be->rms_norm(a->k, a->k, w->attn1.norm_k, (size_t)rows, a->E, a->eps);
    for (int b = 0; b < a->B; b++) {
        be->rope(item(be, a->q, a, b), a->rope_cos, a->rope_sin, a->S, a->H, a->D);
        be->rope(item(be, a->k, a, b), a->rope_cos, a->rope_sin, a->S, a->H, a->D);
    }
    if ((st = self_attention(a, be, cp, err)))
        return st;
    if ((st = lin(be, a->n, a->o, &w->attn1.to_out, rows, 0, err)))
        return st;
    gated_add(a, be, a->n, MOD_GATE);
    return CPDIT_OK;
}

/* Cross-attention to all text tokens (local), added into x ungated. */
static cpdit_status attn2(const wan_block_weights *w, wan_acts *a, const cpdit_backend *be,
                          const wan_cp *cp, cpdit_error *err)
{
    const int rows = a->B * a->S, trows = a->B * a->L;
    cpdit_status st;
    if (rows == 0) /* nothing here asks the text anything */
        return CPDIT_OK;
    const cpdit_buf *nx = a->x;
    if (w->norm2_w) {
        be->layer_norm(a->n, a->x, w->norm2_w, w->norm2_b, (size_t)rows, a->E, a->eps);
        nx = a->n;
    }
    if ((st = lin(be, a->q, nx, &w->attn2.to_q, rows, 0, err)) ||
        (st = lin(be, a->ck, a->ctx, &w->attn2.to_k, trows, 0, err)) ||
        (st = lin(be, a->cv, a->ctx, &w->attn2.to_v, trows, 0, err)))
        return st;
    be->rms_norm(a->q, a->q, w->attn2.norm_q, (size_t)rows, a->E, a->eps);
    be->rms_norm(a->ck, a->ck, w->attn2.norm_k, (size_t)trows, a->E, a->eps);
    const cpdit_attention_kernel *kernel =
        cp && cp->attn.kernel ? cp->attn.kernel : be->attention_kernels[0];
    const cpdit_attention_args args = {.B = a->B, .Sq = a->S, .Skv = a->L, .H = a->H,
                                       .D = a->D, .scale = (float)(1.0 / sqrt((double)a->D))};
    if ((st = kernel->forward(a->o, NULL, a->q, a->ck, a->cv, &args, err)))
        return st;
    return lin(be, a->x, a->o, &w->attn2.to_out, rows, 1, err); /* x += to_out(o) */
}

static cpdit_status ffn(const wan_block_weights *w, wan_acts *a, const cpdit_backend *be,
                        cpdit_error *err)
{
    const int rows = a->B * a->S;
    cpdit_status st;
    if (rows == 0)
        return CPDIT_OK;
    norm_modulate(a, be, MOD_C_SHIFT, MOD_C_SCALE);
    if ((st = cpdit_linear_act(be, a->h, a->F, a->n, a->E, w->ffn_in.w, w->ffn_in.b, rows, a->E,
                               a->F, CPDIT_ACT_GELU_TANH, err)))
        return st;
    if ((st = lin(be, a->q, a->h, &w->ffn_out, rows, 0, err)))
        return st;
    gated_add(a, be, a->q, MOD_C_GATE);
    return CPDIT_OK;
}

cpdit_status wan_block(const wan_block_weights *w, wan_acts *a, const cpdit_backend *be,
                       const wan_cp *cp, cpdit_error *err)
{
    block_modulation(w->table, a, be);
    cpdit_status st = attn1(w, a, be, cp, err);
    if (!st)
        st = attn2(w, a, be, cp, err);
    if (!st)
        st = ffn(w, a, be, err);
    return st;
}
