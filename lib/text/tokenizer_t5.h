/* tokenizer_t5.h — the T5 tokenizer (SentencePiece Unigram) as FLUX.1 runs it: transformers'
 * T5TokenizerFast over tokenizer_2/tokenizer.json (the `tokenizers` library's pipeline).
 *
 * Steps, as tokenizer.json of FLUX.1 describes them:
 *   1. special tokens (<pad>, </s>, <unk>, <extra_id_0..99>) are cut out of the raw text
 *      (leftmost-longest) and keep their ids;
 *   2. each remaining piece is normalized: the SentencePiece charsmap (NFKC-like, see
 *      spm_charsmap.h), strip trailing whitespace, runs of 2+ spaces -> one "▁";
 *   3. Metaspace: spaces -> "▁", "▁" prepended (prepend_scheme "always": to every piece;
 *      "first": only at the start of the text), split before each "▁";
 *   4. Unigram: the Viterbi best segmentation of each word over the piece scores; characters
 *      no piece covers become <unk> (id 2), consecutive ones fused into one <unk>;
 *   5. the post-processor appends </s> (id 1). Truncation to max_length keeps the </s>;
 *      padding (FluxPipeline) uses <pad> (id 0).
 *
 * Invalid UTF-8 in the input becomes U+FFFD first.
 * A loaded tokenizer is read-only: any number of threads may encode with it at once.
 */
#ifndef CPDIT_TOKENIZER_T5_H
#define CPDIT_TOKENIZER_T5_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define T5_MAX_LENGTH_SCHNELL 256 /* FluxPipeline max_sequence_length for FLUX.1-schnell */
#define T5_MAX_LENGTH_DEV 512     /* ... for FLUX.1-dev, also the pipeline's default and cap */

typedef struct t5_tokenizer t5_tokenizer;

#define T5_DEFAULT_EXTRA_IDS 100 /* <extra_id_0..99> sentinels, ids 32099..32000 for T5 */
#define T5_MAX_EXTRA_IDS 100000

/* Load dir/tokenizer.json, or, when there is none, dir/spiece.model (with the extra_ids,
 * legacy and add_prefix_space of dir/tokenizer_config.json when present). Errors (INPUT,
 * where = the file): both missing (naming tokenizer.json), invalid JSON or protobuf, a model
 * other than Unigram, a normalizer / pre-tokenizer / post-processor step this implementation
 * does not know (named in the message). */
cpdit_status t5_tokenizer_load(const char *dir, t5_tokenizer **out, cpdit_error *err);

/* The same from a tokenizer.json document in memory; `where` names it in errors. Supported:
 * normalizer null | Precompiled | Strip | Replace (String, or Regex " {2,}") | a Sequence of
 * those; pre_tokenizer Metaspace (prepend_scheme always/first/never, or the older
 * add_prefix_space) or null; post_processor TemplateProcessing or null; added tokens that
 * match the raw text (normalized false, no lstrip/rstrip/single_word). */
cpdit_status t5_tokenizer_from_json(const char *json, size_t len, const char *where,
                                    t5_tokenizer **out, cpdit_error *err);

/* The same from a SentencePiece model (spiece.model contents), converted as transformers
 * converts T5Tokenizer to T5TokenizerFast: extra_ids sentinels <extra_id_N> appended (T5: 100),
 * "▁" prepended to every text piece when legacy, else only at the start of the text. */
cpdit_status t5_tokenizer_from_spm(const unsigned char *data, size_t len, size_t extra_ids,
                                   int legacy, const char *where, t5_tokenizer **out,
                                   cpdit_error *err);

void t5_tokenizer_free(t5_tokenizer *tok);

/* Token ids of text[0..len) (UTF-8; invalid bytes tolerated), with the post-processor's
 * special tokens (T5: a final </s>). max_length 0 keeps everything; otherwise the text's
 * tokens are cut so the result has at most max_length ids (specials kept) and *truncated (may
 * be NULL) says whether anything was cut. *ids is a new array the caller frees. Errors:
 * max_length smaller than the number of special tokens (INPUT), a character with no piece
 * when the model has no unk id (INPUT), out of memory. */
cpdit_status t5_tokenizer_encode(const t5_tokenizer *tok, const char *text, size_t len,
                                 size_t max_length, int32_t **ids, size_t *n_ids,
                                 int *truncated, cpdit_error *err);

/* As FluxPipeline feeds the encoder: exactly max_length ids in out[], padded with the pad id
 * (<pad>, 0); *n_real (may be NULL) = ids before padding. */
cpdit_status t5_tokenizer_encode_padded(const t5_tokenizer *tok, const char *text, size_t len,
                                        size_t max_length, int32_t *out, size_t *n_real,
                                        int *truncated, cpdit_error *err);

int32_t t5_tokenizer_eos_id(const t5_tokenizer *tok); /* last suffix special (</s>), or -1 */
int32_t t5_tokenizer_pad_id(const t5_tokenizer *tok); /* <pad> when present, else 0 */
size_t t5_tokenizer_vocab_size(const t5_tokenizer *tok);

#ifdef __cplusplus
}
#endif
#endif
