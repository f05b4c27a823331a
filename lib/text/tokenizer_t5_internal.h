/* tokenizer_t5_internal.h — the t5_tokenizer structure, shared by tokenizer_t5.c (loading
 * tokenizer.json) and tokenizer_t5_encode.c (text -> ids).
 *
 * Pieces live in one token_map: each piece maps to its id, and every proper prefix of a piece
 * that is not itself a piece maps to PREFIX_ONLY, so the Viterbi walk from a position can stop
 * as soon as the text no longer extends any piece (the same candidates, in the same order, as
 * the tokenizers library's trie walk).
 */
#ifndef CPDIT_TOKENIZER_T5_INTERNAL_H
#define CPDIT_TOKENIZER_T5_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/text/spm_charsmap.h"
#include "lib/text/token_map.h"
#include "lib/text/tokenizer_t5.h"
#include "lib/text/unicode_text.h"

#define UNK_PENALTY 10.0 /* the unknown piece scores min_score - 10, as in SentencePiece */
#define PREFIX_ONLY (-1) /* token_map value of a piece prefix that is no piece */
#define MAX_NORM_STEPS 8
#define BYTE_PIECE_LEN 6 /* "<0xAB>" */

typedef enum norm_kind {
    NORM_CHARSMAP,          /* Precompiled */
    NORM_STRIP,             /* Strip: White_Space at the left and/or right end */
    NORM_REPLACE_SPACE_RUN, /* Replace, Regex " {2,}": runs of 2+ spaces -> content */
    NORM_REPLACE_STRING     /* Replace, String: every occurrence -> content */
} norm_kind;

typedef struct norm_step {
    norm_kind kind;
    int left, right;
    char *pattern, *content;
} norm_step;

enum prepend_scheme { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

typedef struct added_token {
    char *text;
    size_t len;
    int32_t id;
} added_token;

struct t5_tokenizer {
    token_map *pieces;   /* piece text -> id, piece prefixes -> PREFIX_ONLY */
    double *scores;      /* by id */
    size_t n_pieces, max_piece_len;
    double min_score;
    int32_t unk_id;      /* -1: none */
    int byte_fallback;
    norm_step steps[MAX_NORM_STEPS];
    size_t n_steps;
    spm_charsmap charsmap;
    int has_metaspace, split;
    enum prepend_scheme prepend;
    char replacement[UTF8_MAX_BYTES + 1];
    size_t replacement_len;
    added_token *added;
    size_t n_added;
    unsigned char added_first[256]; /* first bytes of added tokens */
    int32_t *prefix_ids, *suffix_ids;
    size_t n_prefix, n_suffix;
    int32_t pad_id;
};

/* Vocabulary setup shared by the tokenizer.json and .model loaders: size the tables for n
 * pieces, then set piece i (text[0..len), score). 0, or -1 when out of memory. */
int t5_vocab_init(t5_tokenizer *t, size_t n);
int t5_vocab_set(t5_tokenizer *t, size_t i, const char *text, size_t len, double score);

/* Add a special token matched in the raw text (text[0..len), len > 0); <pad> also sets
 * pad_id. 0, or -1 when out of memory. */
int t5_add_special(t5_tokenizer *t, const char *text, size_t len, int32_t id);

#endif
