/* umt5_prompt.h — Wan 2.1's prompt embeddings, as diffusers' WanPipeline._get_t5_prompt_embeds
 * makes them from the tokenizer's output:
 *   ids, mask (B, L)    the tokenizer's input_ids and attention_mask, padded to
 *                       L = max_sequence_length (512 by default in WanPipeline.__call__) with
 *                       <pad>, truncated with </s> kept (umt5_prompt_tokenize below, or the
 *                       caller's own tokenizer run);
 *   seq_len[b]          = the number of mask[b, :] > 0;
 *   hidden (B, L, D)    = UMT5EncoderModel(ids, mask).last_hidden_state;
 *   embeds[b, s, :]     = hidden[b, s, :] for s < seq_len[b], exactly 0 after.
 * The encoder is a t5_encoder (t5_encoder.h) loaded from text_encoder/ (model_type "umt5";
 * a plain T5 folder works too). WanPipeline's prompt_clean happens before tokenizing:
 * umt5_prompt_tokenize does its whitespace part (prompt_clean.h; not the HTML unescape). The
 * repetition for num_videos_per_prompt is the caller's.
 *
 * Shortcut: when every mask row is a prefix (ones, then zeros: what a tokenizer gives), the
 * encoder runs on the first max(seq_len) tokens only. The rows kept are the same as over all L
 * tokens in exact arithmetic (masked keys get weight exactly 0 and the relative bias depends
 * on j - i only); in fp32 they differ by summation order alone (about 1e-7 relative). Prompts
 * are short (Wan: tens of tokens of 512), so this saves most of the encoder's work.
 */
#ifndef CPDIT_UMT5_PROMPT_H
#define CPDIT_UMT5_PROMPT_H

#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "lib/text/t5_encoder.h"
#include "lib/text/tokenizer_t5.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UMT5_PROMPT_DEFAULT_MAX_LENGTH 512 /* WanPipeline.__call__'s max_sequence_length */

/* ids, mask (B, L) → embeds (B, L, d_model) host fp32 as above; seq_lens (B) or NULL gets each
 * prompt's true length. Errors (INPUT): B < 1 or L < 1, those of t5_encoder_forward_masked
 * (an id outside the vocabulary, a mask value other than 0 / 1); (RUNTIME) out of memory. */
cpdit_status umt5_prompt_embeds(const t5_encoder *m, const int32_t *ids, const int32_t *mask,
                                int B, int L, float *embeds, int *seq_lens, cpdit_error *err);

/* The tokenizer's part for one prompt, as WanPipeline: prompt_whitespace_clean (prompt_clean.h),
 * then ids[L] padded with <pad>, truncated to L with </s> kept (t5_tokenizer_encode_padded),
 * mask[L] = 1 for the real ids, 0 for the padding; *truncated (may be NULL) says whether the
 * prompt was cut. Errors: those of t5_tokenizer_encode_padded; L < 1 (INPUT); out of memory. */
cpdit_status umt5_prompt_tokenize(const t5_tokenizer *tok, const char *prompt, int L,
                                  int32_t *ids, int32_t *mask, int *truncated,
                                  cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
