/* wan_family_internal.h — what the Wan family's files share (wan_family.c: the table, geometry,
 * packing, the sharded forward; wan_family_text.c: UMT5 prompt embeddings; wan_family_schedule.c:
 * UniPC; wan_family_decode.c: the Wan VAE over the grid). Not installed. */
#ifndef CPDIT_WAN_FAMILY_INTERNAL_H
#define CPDIT_WAN_FAMILY_INTERNAL_H

#include "lib/models/model.h"
#include "lib/models/wan/wan_transformer.h"
#include "lib/models/wan/wan_vae.h"
#include "lib/pipeline/unipc_schedule.h"
#include "lib/text/t5_encoder.h"
#include "lib/text/tokenizer_t5.h"

#define WAN_WHERE "wan"

typedef struct wan_model {
    wan_transformer *tr;
    cp_attention_ws attn_ws;     /* CP attention's workspace, kept between calls */
    /* the pipeline's components (model_open_options.text_encoders; NULL otherwise) */
    t5_encoder *text;            /* text_encoder/: UMT5 */
    t5_tokenizer *tok;           /* tokenizer/ */
    unipc_config sched;          /* scheduler/scheduler_config.json */
    int have_sched;
    wan_vae *vae;                /* vae/: config and tensors checked at open, made at 1st decode */
    cpdit_weight_format format;  /* of the decoder (the transformer's too) */
} wan_model;

/* One prompt: UMT5's tokens (no pooled vector), zero after the true length. */
struct model_text {
    int len, dim;
    float *tokens; /* (len, text_dim) */
};

static inline wan_model *wan_model_of(const cpdit_model *m)
{
    return (wan_model *)m->impl;
}

/* wan_family_text.c: tokenizer/ and text_encoder/ of dir (UMT5; its width must be the
 * transformer's text_dim); their memory: what model_open_options leaves. */
cpdit_status wan_text_open(cpdit_model *m, const char *dir, const model_open_options *o,
                           cpdit_error *err);
void wan_text_close(wan_model *wm);
cpdit_status wan_encode_text(cpdit_model *m, const char *prompt, int L, model_text **out,
                             cpdit_error *err);
void wan_text_free(model_text *t);
void wan_text_stats(const cpdit_model *m, text_weight_stats *a, text_weight_stats *b);

/* wan_family_schedule.c: UniPC from the folder's scheduler config, flow_shift overridable. */
cpdit_status wan_schedule_open(const cpdit_model *m, const model_geometry *g, int steps,
                               double flow_shift, model_schedule **out, cpdit_error *err);

/* wan_family_decode.c: vae/ of dir opened and checked against the transformer's channels. */
cpdit_status wan_decoder_open(cpdit_model *m, const char *dir, cpdit_error *err);
cpdit_status wan_decode_video(cpdit_model *m, const model_geometry *g, const cp_grid *grid,
                              int sink, float *latents, model_frame_fn fn, void *ctx,
                              cpdit_error *err);

#endif
