/* tokenizer_clip.h — the CLIP text tokenizer (byte-level BPE) as FLUX.1 runs it: transformers'
 * slow CLIPTokenizer without ftfy, which is what diffusers' FluxPipeline loads from
 * tokenizer/ (vocab.json + merges.txt).
 *
 * Steps, each as transformers does them:
 *   1. "<|startoftext|>" / "<|endoftext|>" in the raw text are special tokens on their own;
 *   2. BasicTokenizer(strip_accents=False, do_split_on_punc=False) on the rest: drop NUL,
 *      U+FFFD and control/format/unassigned characters (category C*, except \t \n \r which
 *      are whitespace), turn whitespace into spaces, put spaces around CJK ideographs, NFC,
 *      split on whitespace, str.lower() each word (no accent stripping);
 *   3. the pattern <|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|
 *      [^\s\p{L}\p{N}]+ (IGNORECASE) picks the pieces;
 *   4. each piece's UTF-8 bytes map to printable characters (bytes_to_unicode), "</w>" marks
 *      its last symbol, and merges.txt's ranks merge symbol pairs, lowest rank first;
 *   5. ids are <|startoftext|> (49406), the pieces' ids, <|endoftext|> (49407); truncation
 *      keeps both ends; padding (FluxPipeline) repeats <|endoftext|>.
 *
 * Invalid UTF-8 in the input becomes U+FFFD, which step 2 drops.
 * A loaded tokenizer is read-only: any number of threads may encode with it at once.
 */
#ifndef CPDIT_TOKENIZER_CLIP_H
#define CPDIT_TOKENIZER_CLIP_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CLIP_MAX_LENGTH 77 /* FluxPipeline's tokenizer_max_length for CLIP */

typedef struct clip_tokenizer clip_tokenizer;

/* Load dir/vocab.json and dir/merges.txt. Errors (INPUT, where = the file): missing file,
 * vocab.json not a JSON object of string -> integer, no "<|startoftext|>" or
 * "<|endoftext|>" entry. */
cpdit_status clip_tokenizer_load(const char *dir, clip_tokenizer **out, cpdit_error *err);

/* The same from the two files' contents (vocab_json: a JSON object {token: id}; merges_txt:
 * a header line, then "left right" per line, rank = line order). `where` names the source in
 * error messages. Only the first CLIP_MAX_MERGES merge lines count, as in transformers. */
#define CLIP_MAX_MERGES (49152 - 256 - 2)
cpdit_status clip_tokenizer_from_data(const char *vocab_json, size_t vocab_len,
                                      const char *merges_txt, size_t merges_len,
                                      const char *where, clip_tokenizer **out, cpdit_error *err);

void clip_tokenizer_free(clip_tokenizer *tok);

/* Token ids of text[0..len) (UTF-8; invalid bytes tolerated): bos, the text's tokens, eos.
 * max_length 0 keeps everything; otherwise (>= 2) the text's tokens are cut so the result
 * has at most max_length ids, bos and eos kept, and *truncated (may be NULL) says whether
 * anything was cut. *ids is a new array the caller frees. Errors: max_length 1 (INPUT), out
 * of memory. */
cpdit_status clip_tokenizer_encode(const clip_tokenizer *tok, const char *text, size_t len,
                                   size_t max_length, int32_t **ids, size_t *n_ids,
                                   int *truncated, cpdit_error *err);

/* As FluxPipeline feeds the text encoder: exactly max_length ids (>= 2) in out[], padded
 * with the pad id (<|endoftext|>); *n_real (may be NULL) = ids before padding, so the end
 * token sits at out[*n_real - 1]. */
cpdit_status clip_tokenizer_encode_padded(const clip_tokenizer *tok, const char *text,
                                          size_t len, size_t max_length, int32_t *out,
                                          size_t *n_real, int *truncated, cpdit_error *err);

int32_t clip_tokenizer_bos_id(const clip_tokenizer *tok); /* <|startoftext|> */
int32_t clip_tokenizer_eos_id(const clip_tokenizer *tok); /* <|endoftext|>, also pad and unk */
size_t clip_tokenizer_vocab_size(const clip_tokenizer *tok);

#ifdef __cplusplus
}
#endif
#endif
