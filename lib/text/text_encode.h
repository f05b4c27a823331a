/* text_encode.h — prompts to FLUX.1's text conditioning, as diffusers' FluxPipeline.
 * encode_prompt does it:
 *   pooled (B, clip_hidden)     = CLIPTextModel(ids).pooler_output, ids = the CLIP tokens
 *                                 padded with <|endoftext|> to 77 (truncated to 77 with the end
 *                                 token kept), no attention mask (_get_clip_prompt_embeds);
 *   tokens (B, L, t5_d_model)   = T5EncoderModel(ids)[0], ids = the T5 tokens padded with <pad>
 *                                 (0) to L = max_sequence_length (truncated with </s> kept),
 *                                 no attention mask (_get_t5_prompt_embeds).
 * Outputs are host fp32 (FluxPipeline then casts to the encoders' dtype, bf16 for FLUX.1);
 * inside, the encoders keep activations in their backend's act_dtype (bf16 on "cpu-bf16" and
 * "cuda"). A folder is a diffusers pipeline root with tokenizer/, tokenizer_2/,
 * text_encoder/ and text_encoder_2/ (model_index.json optional; see model_folder.h).
 * A loaded text_encoders is read-only: encodes may run concurrently.
 */
#ifndef CPDIT_TEXT_ENCODE_H
#define CPDIT_TEXT_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/text/clip_text_model.h"
#include "lib/core/cpdit_error.h"
#include "lib/text/t5_encoder.h"
#include "lib/text/text_weights.h"
#include "lib/text/tokenizer_clip.h"
#include "lib/text/tokenizer_t5.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TEXT_ENCODE_MAX_SEQUENCE_LENGTH 512 /* FluxPipeline's cap on max_sequence_length */

/* Bits of the per-prompt truncation flags: the prompt was cut to fit, as diffusers warns. */
#define TEXT_ENCODE_CLIP_TRUNCATED 1
#define TEXT_ENCODE_T5_TRUNCATED 2

typedef struct text_encoders text_encoders;

/* Load both tokenizers and both encoders of the pipeline folder dir. opt may be NULL
 * (defaults; see text_weights.h); opt->cache_bytes is the budget of both encoders' weights:
 * CLIP is loaded first, the T5 gets what CLIP's weights leave of it. Errors: a missing component (INPUT, naming it), those of
 * the four loaders (naming the file in the component folder), a CLIP text model with fewer than 77
 * positions, a tokenizer with more tokens than its encoder's vocab_size. */
cpdit_status text_encoders_load(const char *dir, const text_encoder_options *opt,
                                text_encoders **out, cpdit_error *err);
void text_encoders_free(text_encoders *te);

int text_encoders_pooled_dim(const text_encoders *te); /* CLIP hidden_size (768 for FLUX.1) */
int text_encoders_t5_dim(const text_encoders *te);     /* T5 d_model (4096 for FLUX.1) */
const clip_text_model *text_encoders_clip(const text_encoders *te);
const t5_encoder *text_encoders_t5(const text_encoders *te);
const clip_tokenizer *text_encoders_clip_tokenizer(const text_encoders *te);
const t5_tokenizer *text_encoders_t5_tokenizer(const text_encoders *te);

/* The padded ids one prompt gives: clip_ids[CLIP_MAX_LENGTH], t5_ids[max_sequence_length];
 * prompt_2 (T5's prompt; NULL = prompt). *flags (may be NULL) gets TEXT_ENCODE_* bits.
 * Errors (INPUT): max_sequence_length outside [1, 512]. */
cpdit_status text_encode_tokenize(const text_encoders *te, const char *prompt,
                                  const char *prompt_2, int max_sequence_length,
                                  int32_t *clip_ids, int32_t *t5_ids, int *flags,
                                  cpdit_error *err);

/* Encode B prompts (UTF-8). prompts_2: T5's prompts (FluxPipeline's prompt_2), or NULL to use
 * prompts. pooled: (B, text_encoders_pooled_dim) or NULL; tokens: (B, max_sequence_length,
 * text_encoders_t5_dim) or NULL. flags: B ints (TEXT_ENCODE_* bits) or NULL. Errors (INPUT):
 * B < 1, max_sequence_length outside [1, 512]; (RUNTIME) out of memory. */
cpdit_status text_encode(const text_encoders *te, const char *const *prompts,
                         const char *const *prompts_2, int B, int max_sequence_length,
                         float *pooled, float *tokens, int *flags, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
