/* spm_charsmap.h — SentencePiece's precompiled character map (the "Precompiled" normalizer of
 * a tokenizer.json, or normalizer_spec.precompiled_charsmap of a .model file), applied the way
 * the Hugging Face `tokenizers` library applies it (crate spm_precompiled):
 *
 *   for each extended grapheme cluster g of the text:
 *     if g is shorter than 6 bytes and some key of the map is a prefix of g: replace the whole
 *       of g with the value of the SHORTEST such key (bytes after that key are dropped);
 *     else, for each character c of g: replace c with its value if c is a key, else keep it.
 *
 * (SentencePiece itself takes the longest match instead; the two differ only on rare
 * clusters such as "e" + two combining accents.) The map's blob is
 *   u32 little-endian trie_size (bytes) | trie: trie_size/4 u32 darts-clone units |
 *   values: NUL-terminated UTF-8 strings, a key's trie value being the offset of its string.
 */
#ifndef CPDIT_SPM_CHARSMAP_H
#define CPDIT_SPM_CHARSMAP_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Grapheme clusters of this many bytes or more are mapped character by character. */
#define SPM_CHARSMAP_MAX_GRAPHEME_BYTES 6

typedef struct spm_charsmap {
    uint32_t *units;    /* darts-clone double array */
    size_t n_units;
    char *values;       /* NUL-terminated strings */
    size_t values_len;
} spm_charsmap;

/* Parse blob[0..len) into map (copies the data). Errors (INPUT, where): a blob shorter than
 * its header says, a trie size that is not a multiple of 4, an empty trie. */
cpdit_status spm_charsmap_parse(spm_charsmap *map, const unsigned char *blob, size_t len,
                                const char *where, cpdit_error *err);

void spm_charsmap_free(spm_charsmap *map);

/* The value of the shortest key that is a prefix of key[0..len) (the walk stops at a NUL
 * byte): a pointer into map->values and its length; NULL when no key matches. */
const char *spm_charsmap_lookup(const spm_charsmap *map, const char *key, size_t len,
                                size_t *value_len);

/* Normalize the valid UTF-8 text[0..len) into a new NUL-terminated string (*out, *out_len
 * bytes; the caller frees *out). Errors: out of memory. */
cpdit_status spm_charsmap_normalize(const spm_charsmap *map, const char *text, size_t len,
                                    char **out, size_t *out_len, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
