/* wan_plan.c — Wan 2.1's shapes for the planner (wan_plan.h), from the transformer's own
 * config (wan_config.h: the one parser of transformer/config.json). */
#include "lib/models/wan/wan_plan.h"

#include <stdio.h>
#include <string.h>

#include "lib/cp/cp_shard.h"
#include "lib/io/model_folder.h"

#define MOD_CHUNKS 6 /* shift, scale, gate for attention and FFN (time_proj, scale_shift_table) */
#define OUT_MOD_CHUNKS 2 /* the output norm's shift and scale */

/* ---------------------------------------------------------------- shape */
/* Latent frames of N video frames; INPUT error unless N = 4k + 1. */
static cpdit_status latent_frames(int frames, int *out, cpdit_error *err)
{
    if ((frames - 1) % WAN_PLAN_VAE_TEMPORAL)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "frames",
                               "%d: Wan's VAE needs 4k + 1 frames (e.g. %d or %d)", frames,
                               (frames - 1) / WAN_PLAN_VAE_TEMPORAL * WAN_PLAN_VAE_TEMPORAL + 1,
                               ((frames - 1) / WAN_PLAN_VAE_TEMPORAL + 1) * WAN_PLAN_VAE_TEMPORAL +
                                   1);
    *out = 1 + (frames - 1) / WAN_PLAN_VAE_TEMPORAL;
    return CPDIT_OK;
}

/* Parameters: per block self- and cross-attention (4 E^2 + 4 E each, q/k RMS norms 2E each),
 * the cross-attention norm (2E), the FFN (2EF + E + F) and the modulation table (6E); the
 * patch embedding, time embedder (freq_dim E + E^2) and projection (6 E^2), text embedder
 * (text_dim E + E^2), output projection and table. */
static double wan_params(const wan_transformer_config *c, double E, double F, double patch,
                         double out_w)
{
    const double attn = 4 * (E * E + E) + 2 * E;
    const double block = 2 * attn + 2 * E + (2 * E * F + E + F) + MOD_CHUNKS * E;
    const double emb = (c->in_channels * patch * E + E) + (c->freq_dim * E + E + E * E + E) +
                       (E * MOD_CHUNKS * E + MOD_CHUNKS * E) + (c->text_dim * E + E + E * E + E) +
                       (E * out_w + out_w) + OUT_MOD_CHUNKS * E;
    return c->num_layers * block + emb;
}

cpdit_status wan_plan_shape(model_plan_shape *s, const wan_transformer_config *c,
                            const model_request *req, cpdit_error *err)
{
    const int pt = c->patch_size[0], ph = c->patch_size[1], pw = c->patch_size[2];
    const int mh = WAN_PLAN_VAE_SPATIAL * ph, mw = WAN_PLAN_VAE_SPATIAL * pw;
    cpdit_status st = model_plan_check_request(req, mh > mw ? mh : mw, WAN_PLAN_TEXT_LEN, err);
    if (st)
        return st;
    if (req->height % mh || req->width % mw)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "width", "%dx%d: must be multiples of "
                               "%d x %d", req->width, req->height, mw, mh);
    const int frames = req->frames > 1 ? req->frames : 1;
    int lf = 0;
    if ((st = latent_frames(frames, &lf, err)))
        return st;
    if (lf % pt)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "frames", "%d: %d latent frames do not "
                               "divide the temporal patch %d", frames, lf, pt);
    const int L = c->num_layers;
    s->heads = c->num_attention_heads;
    s->head_dim = c->attention_head_dim;
    s->hidden = s->heads * s->head_dim;
    s->mlp = c->ffn_dim;
    s->blocks = L;
    snprintf(s->blocks_text, sizeof s->blocks_text, "%d", L);
    s->width = req->width;
    s->height = req->height;
    s->frames = frames;
    s->forwards_per_step = req->cfg ? 2 : 1;
    s->image_tokens = (long long)(lf / pt) * (req->height / mh) * (req->width / mw);
    s->text_tokens = req->text_tokens > 0 ? req->text_tokens : WAN_PLAN_TEXT_LEN;
    s->text_sharded = 0;
    s->seq_tokens = s->image_tokens;
    const long long V = s->image_tokens, T = s->text_tokens;
    model_plan_add_attention(s, L, V, V, 1); /* self-attention, sharded */
    model_plan_add_attention(s, L, V, T, 0); /* cross-attention to all text tokens, local */
    const int E = s->hidden, F = s->mlp, patch = pt * ph * pw;
    const int in_w = c->in_channels * patch, out_w = c->out_channels * patch;
    /* GEMMs: per block on the video rows self q, k, v, out and cross q, out (6 E^2), the FFN;
     * on every text token cross k, v; once the patch embedding, the text embedder
     * (text_dim -> E -> E) and the output projection */
    model_plan_add_gemm(s, MODEL_ROWS_IMAGE, in_w, E, 1);
    model_plan_add_gemm(s, MODEL_ROWS_TEXT_ALL, c->text_dim, E, 1);
    model_plan_add_gemm(s, MODEL_ROWS_TEXT_ALL, E, E, 1);
    model_plan_add_gemm(s, MODEL_ROWS_IMAGE, E, E, 6 * L);
    model_plan_add_gemm(s, MODEL_ROWS_TEXT_ALL, E, E, 2 * L);
    model_plan_add_gemm(s, MODEL_ROWS_IMAGE, E, F, L);
    model_plan_add_gemm(s, MODEL_ROWS_IMAGE, F, E, L);
    model_plan_add_gemm(s, MODEL_ROWS_IMAGE, E, out_w, 1);
    const double dE = E, dF = F, dV = (double)V, dT = (double)T;
    const double rep_macs = dT * (c->text_dim * dE + dE * dE) + L * dT * 2 * dE * dE;
    const double vid_macs = dV * (L * (6 * dE * dE + 2 * dE * dF) + in_w * dE + dE * out_w);
    s->replicated_flops = 2.0 * rep_macs;
    s->linear_flops = 2.0 * (vid_macs + rep_macs);
    s->params = wan_params(c, dE, dF, patch, out_w);
    /* element-wise per block: norm1 + modulation, norm2 (counted as one), norm3 + modulation;
     * q/k RMS norms (+ RoPE) of the self-attention and the cross-attention's q; GELU; two
     * gated residuals and the cross-attention's plain one */
    model_plan_add_block_ops(s, (model_block_ops){L, 3, 3, 1, 0, 3});
    return CPDIT_OK;
}

cpdit_status wan_plan_shape_load(model_plan_shape *s, const char *dir, const model_request *req,
                                 cpdit_error *err)
{
    model_folder mf;
    cpdit_status st = model_folder_open(&mf, dir, err);
    if (st)
        return st;
    model_config mc;
    wan_transformer_config c;
    memset(&mc, 0, sizeof mc);
    st = model_folder_load_config(&mf, "transformer", &mc, err);
    if (!st)
        st = wan_transformer_config_from(&mc, &c, err);
    model_config_free(&mc);
    model_folder_close(&mf);
    if (!st)
        st = wan_plan_shape(s, &c, req, err);
    return st;
}

cpdit_status wan_plan_rank_tokens(const model_plan_shape *s, int cp, int rank, int *text,
                                  int *image, cpdit_error *err)
{
    int start = 0;
    (void)err;
    *text = 0;
    cp_shard_balanced((int)s->image_tokens, cp, rank, &start, image);
    return CPDIT_OK;
}
