/* flux_blocks.c — the two block types of the FLUX transformer, on this rank's tokens.
 *
 * Activations (flux_acts) hold B items of S = txt + img local tokens, text rows first in each
 * item, so that the joint attention input [text, image] is one (B, S, H, D) tensor. The text
 * and image streams of a double block are the row ranges [0, txt) and [txt, S) of each item.
 *
 * Double-stream block (diffusers FluxTransformerBlock), per stream with its own weights:
 *   shift1, scale1, gate1, shift2, scale2, gate2 = AdaLN-zero linear(silu(temb)), 6 chunks
 *   n = LN(x) (1 + scale1) + shift1
 *   q, k, v = linears(n); q, k = RMSNorm per head; RoPE on q, k (both streams)
 *   o = attention over [text, image] (the whole sequence, through the CP entry point)
 *   x += gate1 * out_proj(o)
 *   x += gate2 * ff_out(gelu_tanh(ff_in(LN(x) (1 + scale2) + shift2)))
 * Single-stream block (FluxSingleTransformerBlock) on the joint sequence:
 *   shift, scale, gate = linear(silu(temb)), 3 chunks;  n = LN(x) (1 + scale) + shift
 *   q, k, v = linears(n) (RMSNorm per head, RoPE), o = attention;  m = gelu_tanh(proj_mlp(n))
 *   x += gate * proj_out([o, m])
 * LayerNorms have no affine parameters, eps 1e-6; RMSNorm eps 1e-6.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "lib/models/flux/flux_internal.h"

/* Chunks of the AdaLN-zero vectors (diffusers' chunk order). */
enum { MOD_SHIFT_MSA = 0, MOD_SCALE_MSA, MOD_GATE_MSA, MOD_SHIFT_MLP, MOD_SCALE_MLP, MOD_GATE_MLP,
       MOD_DOUBLE_CHUNKS };
enum { MOD_SINGLE_SHIFT = 0, MOD_SINGLE_SCALE, MOD_SINGLE_GATE, MOD_SINGLE_CHUNKS };

/* Rows of item b of a (B, S, E) activation buffer: the text rows (the item's first row) and
 * the image rows; offsets in elements of be's act_dtype. */
static inline cpdit_buf *txt_rows(const cpdit_backend *be, const cpdit_buf *p, const flux_acts *a,
                                  int b)
{
    return cpdit_buf_at(be, p, (ptrdiff_t)b * a->S * a->inner);
}
static inline cpdit_buf *img_rows(const cpdit_backend *be, const cpdit_buf *p, const flux_acts *a,
                                  int b)
{
    return cpdit_buf_at(be, p, ((ptrdiff_t)b * a->S + a->txt) * a->inner);
}

/* y (M, L->out) = x (M, L->in) W^T + b, contiguous rows. */
static inline cpdit_status lin(const cpdit_backend *be, cpdit_buf *y, const cpdit_buf *x,
                               const flux_linear *L, int M, cpdit_error *err)
{
    return be->linear(y, L->out, x, L->in, L->w, L->b, M, L->in, L->out, 0, err);
}

cpdit_status flux_attention(flux_acts *a, const cpdit_backend *be, const flux_cp *cp,
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
    /* no grid: the whole sequence is here; the backend's kernel (or the one asked for) */
    const cpdit_attention_kernel *kernel =
        cp && cp->attn.kernel ? cp->attn.kernel : be->attention_kernels[0];
    const cpdit_attention_args args = {.B = a->B, .Sq = a->S, .Skv = a->S, .H = a->H,
                                       .D = a->D, .scale = scale};
    return kernel->forward(a->o, NULL, a->q, a->k, a->v, &args, err);
}

/* Per-head RMSNorm of q and k of one stream's rows, then nothing else (RoPE comes later over
 * the joint rows). rows: tokens of the stream in item b. */
static void qk_norm(const cpdit_backend *be, flux_acts *a, cpdit_buf *q, cpdit_buf *k,
                    int tokens, const float *wq, const float *wk)
{
    const size_t rows = (size_t)tokens * a->H;
    be->rms_norm(q, q, wq, rows, a->D, FLUX_NORM_EPS);
    be->rms_norm(k, k, wk, rows, a->D, FLUX_NORM_EPS);
}

/* RoPE on q and k of item b (all S joint tokens). */
static void rope_item(const cpdit_backend *be, flux_acts *a, int b)
{
    be->rope(txt_rows(be, a->q, a, b), a->rope_cos, a->rope_sin, a->S, a->H, a->D);
    be->rope(txt_rows(be, a->k, a, b), a->rope_cos, a->rope_sin, a->S, a->H, a->D);
}

/* One stream's feed-forward with gated residual: x += gate * ff_out(gelu(ff_in(n))).
 * n, x: that stream's rows (M, E); uses a->mlp and tmp (M, E). */
static cpdit_status stream_ff(const cpdit_backend *be, flux_acts *a, cpdit_buf *x,
                              const cpdit_buf *n, int M, const flux_linear *in,
                              const flux_linear *out, const cpdit_buf *gate, cpdit_buf *tmp,
                              cpdit_error *err)
{
    cpdit_status st;
    if (M == 0)
        return CPDIT_OK;
    /* ff_in then gelu-tanh: one fused call where the backend has it (cuBLASLt epilogue) */
    if ((st = cpdit_linear_act(be, a->mlp, in->out, n, in->in, in->w, in->b, M, in->in, in->out,
                               CPDIT_ACT_GELU_TANH, err)))
        return st;
    if ((st = lin(be, tmp, a->mlp, out, M, err)))
        return st;
    be->gated_residual(x, a->inner, tmp, a->inner, gate, (size_t)M, a->inner);
    return CPDIT_OK;
}

cpdit_status flux_double_block(const flux_double_weights *w, flux_acts *a,
                               const cpdit_backend *be, const flux_cp *cp, cpdit_error *err)
{
    const int E = a->inner, B = a->B, n_txt = a->txt, n_img = a->img;
    cpdit_buf *mod_i = a->mod; /* (B, 6E) image stream, then (B, 6E) text stream */
    cpdit_buf *mod_t = cpdit_buf_at(be, a->mod, (ptrdiff_t)B * MOD_DOUBLE_CHUNKS * E);
    cpdit_status st;
    if ((st = lin(be, mod_i, a->stemb, &w->norm1, B, err)) ||
        (st = lin(be, mod_t, a->stemb, &w->norm1_context, B, err)))
        return st;
#define MI(b, c) cpdit_buf_at(be, mod_i, ((ptrdiff_t)(b) * MOD_DOUBLE_CHUNKS + (c)) * E)
#define MT(b, c) cpdit_buf_at(be, mod_t, ((ptrdiff_t)(b) * MOD_DOUBLE_CHUNKS + (c)) * E)

    /* attention input: both streams normalised and modulated, projected, normed, rotated */
    be->layer_norm(a->n, a->x, NULL, NULL, (size_t)B * a->S, E, FLUX_NORM_EPS);
    for (int b = 0; b < B; b++) {
        cpdit_buf *ni = img_rows(be, a->n, a, b), *nt = txt_rows(be, a->n, a, b);
        be->modulate(ni, ni, MI(b, MOD_SHIFT_MSA), MI(b, MOD_SCALE_MSA), (size_t)n_img, E);
        be->modulate(nt, nt, MT(b, MOD_SHIFT_MSA), MT(b, MOD_SCALE_MSA), (size_t)n_txt, E);
        if ((st = lin(be, img_rows(be, a->q, a, b), ni, &w->to_q, n_img, err)) ||
            (st = lin(be, img_rows(be, a->k, a, b), ni, &w->to_k, n_img, err)) ||
            (st = lin(be, img_rows(be, a->v, a, b), ni, &w->to_v, n_img, err)) ||
            (st = lin(be, txt_rows(be, a->q, a, b), nt, &w->add_q, n_txt, err)) ||
            (st = lin(be, txt_rows(be, a->k, a, b), nt, &w->add_k, n_txt, err)) ||
            (st = lin(be, txt_rows(be, a->v, a, b), nt, &w->add_v, n_txt, err)))
            return st;
        qk_norm(be, a, img_rows(be, a->q, a, b), img_rows(be, a->k, a, b), n_img, w->norm_q,
                w->norm_k);
        qk_norm(be, a, txt_rows(be, a->q, a, b), txt_rows(be, a->k, a, b), n_txt,
                w->norm_added_q, w->norm_added_k);
        rope_item(be, a, b);
    }
    if ((st = flux_attention(a, be, cp, err)))
        return st;

    /* attention outputs, gated, into each stream's residual (a->n is free now) */
    for (int b = 0; b < B; b++) {
        if ((st = lin(be, img_rows(be, a->n, a, b), img_rows(be, a->o, a, b), &w->to_out, n_img,
                      err)) ||
            (st = lin(be, txt_rows(be, a->n, a, b), txt_rows(be, a->o, a, b), &w->to_add_out,
                      n_txt, err)))
            return st;
        be->gated_residual(img_rows(be, a->x, a, b), E, img_rows(be, a->n, a, b), E,
                           MI(b, MOD_GATE_MSA), (size_t)n_img, E);
        be->gated_residual(txt_rows(be, a->x, a, b), E, txt_rows(be, a->n, a, b), E,
                           MT(b, MOD_GATE_MSA), (size_t)n_txt, E);
    }

    /* feed-forward of each stream (a->q is free as the output buffer) */
    be->layer_norm(a->n, a->x, NULL, NULL, (size_t)B * a->S, E, FLUX_NORM_EPS);
    for (int b = 0; b < B; b++) {
        cpdit_buf *ni = img_rows(be, a->n, a, b), *nt = txt_rows(be, a->n, a, b);
        be->modulate(ni, ni, MI(b, MOD_SHIFT_MLP), MI(b, MOD_SCALE_MLP), (size_t)n_img, E);
        be->modulate(nt, nt, MT(b, MOD_SHIFT_MLP), MT(b, MOD_SCALE_MLP), (size_t)n_txt, E);
        if ((st = stream_ff(be, a, img_rows(be, a->x, a, b), ni, n_img, &w->ff_in, &w->ff_out,
                            MI(b, MOD_GATE_MLP), a->q, err)) ||
            (st = stream_ff(be, a, txt_rows(be, a->x, a, b), nt, n_txt, &w->ffc_in, &w->ffc_out,
                            MT(b, MOD_GATE_MLP), a->q, err)))
            return st;
    }
#undef MI
#undef MT
    return CPDIT_OK;
}

cpdit_status flux_single_block(const flux_single_weights *w, flux_acts *a,
                               const cpdit_backend *be, const flux_cp *cp, cpdit_error *err)
{
    const int E = a->inner, B = a->B, S = a->S;
    const int F = w->proj_mlp.out;  /* MLP hidden */
    const int ldc = E + F;          /* the [attn | mlp] buffer's row stride */
    const int rows = B * S;
    cpdit_status st;
    if ((st = lin(be, a->mod, a->stemb, &w->norm, B, err)))
        return st;
#define MS(b, c) cpdit_buf_at(be, a->mod, ((ptrdiff_t)(b) * MOD_SINGLE_CHUNKS + (c)) * E)

    be->layer_norm(a->n, a->x, NULL, NULL, (size_t)rows, E, FLUX_NORM_EPS);
    for (int b = 0; b < B; b++) {
        cpdit_buf *nb = txt_rows(be, a->n, a, b);
        be->modulate(nb, nb, MS(b, MOD_SINGLE_SHIFT), MS(b, MOD_SINGLE_SCALE), (size_t)S, E);
    }
    if ((st = lin(be, a->q, a->n, &w->to_q, rows, err)) ||
        (st = lin(be, a->k, a->n, &w->to_k, rows, err)) ||
        (st = lin(be, a->v, a->n, &w->to_v, rows, err)) ||
        (st = cpdit_linear_act(be, cpdit_buf_at(be, a->mlp, E), ldc, a->n, E, w->proj_mlp.w,
                               w->proj_mlp.b, rows, E, F, CPDIT_ACT_GELU_TANH, err)))
        return st;
    qk_norm(be, a, a->q, a->k, rows, w->norm_q, w->norm_k);
    for (int b = 0; b < B; b++)
        rope_item(be, a, b);
    if ((st = flux_attention(a, be, cp, err)))
        return st;

    /* proj_out([attn, mlp]) gated into the residual */
    be->copy_rows(a->mlp, ldc, a->o, E, (size_t)rows, E);
    if ((st = be->linear(a->n, E, a->mlp, ldc, w->proj_out.w, w->proj_out.b, rows, ldc, E, 0,
                         err)))
        return st;
    for (int b = 0; b < B; b++)
        be->gated_residual(txt_rows(be, a->x, a, b), E, txt_rows(be, a->n, a, b), E,
                           MS(b, MOD_SINGLE_GATE), (size_t)S, E);
#undef MS
    return CPDIT_OK;
}
