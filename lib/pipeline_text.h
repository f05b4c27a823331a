/* pipeline_text.h — the prompt side of the FLUX pipeline: both tokenizers and both text
 * encoders of a diffusers FLUX folder, as FluxPipeline.encode_prompt uses them:
 *   CLIP-L: ids padded to 77 with <|endoftext|>, pooled output (pooled_projection_dim);
 *   T5:     ids padded to max_sequence_length with <pad>, last hidden state (L, d_model),
 *           no attention mask (FluxPipeline passes none). */
#ifndef CPDIT_PIPELINE_TEXT_H
#define CPDIT_PIPELINE_TEXT_H

#include "cpdit_error.h"

typedef struct pipeline_text pipeline_text;

/* Load tokenizer/, tokenizer_2/, text_encoder/, text_encoder_2/ of model_dir. */
cpdit_status pipeline_text_open(pipeline_text **out, const char *model_dir, cpdit_error *err);
void pipeline_text_close(pipeline_text *t);

/* Sizes: CLIP pooled width and T5 hidden width. */
int pipeline_text_pooled_dim(const pipeline_text *t);
int pipeline_text_t5_dim(const pipeline_text *t);

/* pooled (pooled_dim), tokens (max_len, t5_dim). A prompt longer than the encoders take is
 * cut with a warning on stderr (as diffusers does). */
cpdit_status pipeline_text_encode(pipeline_text *t, const char *prompt, int max_len,
                                  float *pooled, float *tokens, cpdit_error *err);

#endif
