/* flux_family.h — the FLUX.1 family (lib/models/model.h): its table, and `cpdit forward
 * --component transformer` on FLUX inputs files (flux_forward_file.c). */
#ifndef CPDIT_FLUX_FAMILY_H
#define CPDIT_FLUX_FAMILY_H

#include "lib/models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const model_family flux_family;

/* The transformer on the tensors of a->inputs, in FluxTransformer2DModel.forward's names:
 * hidden_states (B, I, in_channels), encoder_hidden_states (B, T, joint_attention_dim),
 * pooled_projections (B, pooled_projection_dim), timestep (B) or one value, img_ids (I, 3)
 * and txt_ids (T, 3) (or the deprecated (B', S, 3)), guidance (B) with guidance_embeds.
 * The batch is split over the data-parallel groups, the tokens over each CP group; the
 * output `sample` (B, I, patch² · out_channels) float32 is gathered in order and written by
 * rank 0 of a->world. Collective over a->world; every rank returns the same status, the
 * lowest failing rank's message in err (cpdit_comm_agree). */
cpdit_status flux_forward_file(const model_forward_file *a, model_forward_result *r,
                               cpdit_error *err);

struct flux_transformer;
/* The transformer's weight stats (flux_transformer_weight_stats) as the interface's. */
void flux_weight_stats_to_model(model_weight_stats *s, const struct flux_transformer *m);

#ifdef __cplusplus
}
#endif
#endif
