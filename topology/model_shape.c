/* model_shape.c — model and image sizes for the cost model (see model_shape.h). */
#include "topology/model_shape.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/builtin/builtin_model.h"
#include "lib/io/model_folder.h"

#define MLP_RATIO 4 /* FLUX_MLP_RATIO in lib/models/flux/flux_transformer.h */
#define MAX_SIDE 16384

cpdit_status model_shape_from_config(model_shape *s, const flux_transformer_config *c,
                                     int width, int height, int max_seq_len, cpdit_error *err)
{
    if (width < MODEL_SHAPE_PIXELS_PER_TOKEN || width > MAX_SIDE ||
        width % MODEL_SHAPE_PIXELS_PER_TOKEN)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "width",
                               "%d: must be a multiple of 16 in [16, %d]", width, MAX_SIDE);
    if (height < MODEL_SHAPE_PIXELS_PER_TOKEN || height > MAX_SIDE ||
        height % MODEL_SHAPE_PIXELS_PER_TOKEN)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "height",
                               "%d: must be a multiple of 16 in [16, %d]", height, MAX_SIDE);
    if (max_seq_len < 0 || max_seq_len > MODEL_SHAPE_T5_LEN_DEV)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "max_sequence_length",
                               "%d is out of range [1, %d]", max_seq_len, MODEL_SHAPE_T5_LEN_DEV);
    s->layers_double = c->num_layers;
    s->layers_single = c->num_single_layers;
    s->heads = c->num_attention_heads;
    s->head_dim = c->attention_head_dim;
    s->hidden = c->num_attention_heads * c->attention_head_dim;
    s->mlp = MLP_RATIO * s->hidden;
    s->in_channels = c->in_channels;
    s->out_channels = c->out_channels * c->patch_size * c->patch_size;
    s->joint_dim = c->joint_attention_dim;
    s->pooled_dim = c->pooled_projection_dim;
    s->width = width;
    s->height = height;
    s->img_tokens = (width / MODEL_SHAPE_PIXELS_PER_TOKEN) * (height / MODEL_SHAPE_PIXELS_PER_TOKEN);
    s->txt_tokens = max_seq_len > 0 ? max_seq_len
                    : c->guidance_embeds ? MODEL_SHAPE_T5_LEN_DEV : MODEL_SHAPE_T5_LEN_SCHNELL;
    /* parameters: double block = attention 2 x 4E^2, MLPs 2 x 2EF, AdaLN-zero 2 x 6E^2;
     * single block = qkv 3E^2 + mlp in EF + out (E+F)E + AdaLN 3E^2; embedders and the
     * final layer */
    const double E = s->hidden, F = s->mlp;
    const double dbl = 8 * E * E + 4 * E * F + 12 * E * E;
    const double sgl = 3 * E * E + E * F + (E + F) * E + 3 * E * E;
    const double emb = s->in_channels * E + s->joint_dim * E + 256.0 * E + E * E +
                       (c->guidance_embeds ? 256.0 * E + E * E : 0) + s->pooled_dim * E +
                       E * E + 2 * E * E + E * s->out_channels;
    s->params = s->layers_double * dbl + s->layers_single * sgl + emb;
    return CPDIT_OK;
}

double model_shape_linear_flops(const model_shape *s, double txt, double img)
{
    const double E = s->hidden, F = s->mlp, S = txt + img;
    const double per_double = 4 * E * E + 2 * E * F;
    const double per_single = 3 * E * E + E * F + (E + F) * E;
    double macs = S * (s->layers_double * per_double + s->layers_single * per_single);
    macs += img * (s->in_channels * E + E * s->out_channels);
    macs += txt * s->joint_dim * E;
    return 2.0 * macs;
}

cpdit_status model_shape_load(model_shape *s, const char *model, int width, int height,
                              int max_seq_len, cpdit_error *err)
{
    char dir[4096];
    memset(s, 0, sizeof *s);
    if (!model || !model[0])
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "model", "missing (a folder or builtin:NAME)");
    cpdit_status st = builtin_model_resolve(model, dir, sizeof dir, err);
    if (st)
        return st;
    if (builtin_model_is_spec(model)) {
        snprintf(s->key, sizeof s->key, "%s", model);
    } else {
        char *real = realpath(model, NULL);
        snprintf(s->key, sizeof s->key, "%s", real ? real : model);
        free(real);
    }
    model_folder mf;
    st = model_folder_open(&mf, dir, err);
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
        st = model_shape_from_config(s, &c, width, height, max_seq_len, err);
    return st;
}
