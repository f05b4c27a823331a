/* flux_plan.c — FLUX.1's shapes for the planner (flux_plan.h). */
#include "lib/models/flux_plan.h"

#include <stdio.h>
#include <string.h>

#include "lib/cp/cp_shard.h"
#include "lib/models/flux/flux_shard.h"
#include "lib/models/flux/flux_config.h"
#include "lib/io/model_folder.h"

#define MLP_RATIO 4        /* FLUX_MLP_RATIO in lib/models/flux/flux_transformer.h */
#define TIME_EMBED_DIM 256 /* sinusoidal timestep / guidance embedding width */

/* Linear-layer MACs of one forward over txt + img tokens (as flux_transformer_linear_flops):
 * per double block q, k, v, out (4E^2) and the MLP (2EF) on every token; per single block
 * qkv (3E^2), mlp in (EF) and the fused out ((E+F)E); the image embedder and final
 * projection on the image tokens, the text embedder on the text tokens. */
static double linear_macs(int Ld, int Ls, double E, double F, double in_ch, double out_ch,
                          double joint, double txt, double img)
{
    const double S = txt + img;
    const double per_double = 4 * E * E + 2 * E * F;
    const double per_single = 3 * E * E + E * F + (E + F) * E;
    double macs = S * (Ld * per_double + Ls * per_single);
    macs += img * (in_ch * E + E * out_ch);
    macs += txt * joint * E;
    return macs;
}

/* The GEMMs of one forward on a rank, in the order the model calls them. */
static void add_gemms(model_plan_shape *s, int Ld, int Ls, int in_ch, int out_ch, int joint)
{
    const int E = s->hidden, F = s->mlp;
    for (int stream = 0; stream < 2; stream++) { /* double blocks: text, image */
        const model_rows rows = stream ? MODEL_ROWS_IMAGE : MODEL_ROWS_TEXT;
        model_plan_add_gemm(s, rows, E, E, 4 * Ld); /* q, k, v, out */
        model_plan_add_gemm(s, rows, E, F, Ld);
        model_plan_add_gemm(s, rows, F, E, Ld);
    }
    model_plan_add_gemm(s, MODEL_ROWS_SEQ, E, E, 3 * Ls); /* single blocks */
    model_plan_add_gemm(s, MODEL_ROWS_SEQ, E, F, Ls);
    model_plan_add_gemm(s, MODEL_ROWS_SEQ, E + F, E, Ls);
    model_plan_add_gemm(s, MODEL_ROWS_IMAGE, in_ch, E, 1); /* embedders, final projection */
    model_plan_add_gemm(s, MODEL_ROWS_TEXT, joint, E, 1);
    model_plan_add_gemm(s, MODEL_ROWS_IMAGE, E, out_ch, 1);
}

cpdit_status flux_plan_shape(model_plan_shape *s, const struct flux_transformer_config *c,
                             const model_request *req, cpdit_error *err)
{
    cpdit_status st = model_plan_check_request(req, FLUX_PLAN_PIXELS_PER_TOKEN,
                                               FLUX_PLAN_T5_LEN_DEV, err);
    if (st)
        return st;
    if (req->frames > 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "frames",
                               "%d: FLUX makes images (1 frame)", req->frames);
    const int Ld = c->num_layers, Ls = c->num_single_layers;
    const int out_ch = c->out_channels * c->patch_size * c->patch_size;
    s->heads = c->num_attention_heads;
    s->head_dim = c->attention_head_dim;
    s->hidden = c->num_attention_heads * c->attention_head_dim;
    s->mlp = MLP_RATIO * s->hidden;
    s->blocks = Ld + Ls;
    snprintf(s->blocks_text, sizeof s->blocks_text, "%d+%d", Ld, Ls);
    s->width = req->width;
    s->height = req->height;
    s->frames = 1;
    s->forwards_per_step = req->cfg ? 2 : 1;
    s->image_tokens = (long long)(req->width / FLUX_PLAN_PIXELS_PER_TOKEN) *
                      (req->height / FLUX_PLAN_PIXELS_PER_TOKEN);
    s->text_tokens = req->text_tokens > 0 ? req->text_tokens
                     : c->guidance_embeds ? FLUX_PLAN_T5_LEN_DEV : FLUX_PLAN_T5_LEN_SCHNELL;
    s->text_sharded = 1;
    s->seq_tokens = s->text_tokens + s->image_tokens;
    model_plan_add_attention(s, s->blocks, s->seq_tokens, s->seq_tokens, 1);
    const double E = s->hidden, F = s->mlp;
    s->linear_flops = 2.0 * linear_macs(Ld, Ls, E, F, c->in_channels, out_ch,
                                        c->joint_attention_dim, (double)s->text_tokens,
                                        (double)s->image_tokens);
    s->replicated_flops = 0;
    /* parameters: double block = attention 2 x 4E^2, MLPs 2 x 2EF, AdaLN-zero 2 x 6E^2;
     * single block = qkv 3E^2 + mlp in EF + out (E+F)E + AdaLN 3E^2; embedders and the
     * final layer */
    const double dbl = 8 * E * E + 4 * E * F + 12 * E * E;
    const double sgl = 3 * E * E + E * F + (E + F) * E + 3 * E * E;
    const double emb = c->in_channels * E + c->joint_attention_dim * E + TIME_EMBED_DIM * E +
                       E * E + (c->guidance_embeds ? TIME_EMBED_DIM * E + E * E : 0) +
                       c->pooled_projection_dim * E + E * E + 2 * E * E + E * out_ch;
    s->params = Ld * dbl + Ls * sgl + emb;
    add_gemms(s, Ld, Ls, c->in_channels, out_ch, c->joint_attention_dim);
    /* element-wise work as flux_blocks.c calls the backend */
    model_plan_add_block_ops(s, (model_block_ops){Ld, 2, 2, 1, 0, 2});
    model_plan_add_block_ops(s, (model_block_ops){Ls, 1, 2, 1, 1, 1});
    return CPDIT_OK;
}

cpdit_status flux_plan_shape_load(model_plan_shape *s, const char *dir,
                                  const model_request *req, cpdit_error *err)
{
    model_folder mf;
    cpdit_status st = model_folder_open(&mf, dir, err);
    if (st)
        return st;
    model_config mc;
    flux_transformer_config c;
    memset(&mc, 0, sizeof mc);
    st = model_folder_load_config(&mf, "transformer", &mc, err);
    if (!st)
        st = flux_transformer_config_from(&mc, &c, err);
    model_config_free(&mc);
    model_folder_close(&mf);
    if (!st)
        st = flux_plan_shape(s, &c, req, err);
    return st;
}

cpdit_status flux_plan_rank_tokens(const model_plan_shape *s, int cp, int rank, int *text,
                                   int *image, cpdit_error *err)
{
    cp_seq_layout lay;
    cpdit_status st = flux_shard_layout(&lay, cp, (int)s->text_tokens, (int)s->image_tokens,
                                        err);
    if (st)
        return st;
    *text = lay.txt_len[rank];
    *image = lay.img_len[rank];
    cp_seq_layout_free(&lay);
    return CPDIT_OK;
}
