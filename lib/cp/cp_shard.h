/* cp_shard.h — how a sequence is split over the ranks of a context-parallel group.
 *
 * A joint FLUX sequence is [text tokens (txt_total) | image tokens (img_total)]. Text and image
 * tokens are split separately, each balanced (the first total % n ranks get one token more),
 * and CP rank r holds [its text slice | its image slice] as its local sequence of
 * len[r] = txt_len[r] + img_len[r] tokens. A plain sequence is the case txt_total = 0.
 * Unmasked attention does not care about token order; these helpers map local tokens back to
 * their places in the global sequence (take / put).
 *
 * Tensors are (B, S, W) row-major fp32 with W floats per token (W = H*D for q/k/v/out, H for
 * the LSE); the local tensor of rank r is (B, len[r], W). take / put work on host fp32 arrays
 * (tests and tools that build whole sequences on the host); activations of a backend go
 * through be->upload_act / download_act on either side of them.
 */
#ifndef CPDIT_CP_SHARD_H
#define CPDIT_CP_SHARD_H

#include <stddef.h>
#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_seq_layout {
    int nranks;     /* CP group size (ring * ulysses) */
    int txt_total;  /* text tokens in the global sequence (first) */
    int img_total;  /* image tokens (after the text) */
    int *len;       /* [nranks] local tokens of CP rank r = txt_len[r] + img_len[r] */
    int *txt_start; /* [nranks] first text token of rank r's slice, in 0..txt_total */
    int *txt_len;   /* [nranks] */
    int *img_start; /* [nranks] first image token of rank r's slice, in 0..img_total */
    int *img_len;   /* [nranks] */
} cp_seq_layout;

/* The balanced split of total items over parts: part index gets *len items starting at
 * *start; the first total % parts parts get one more. parts >= 1, 0 <= index < parts. */
void cp_shard_balanced(int total, int parts, int index, int *start, int *len);

/* Fill l for a joint sequence, both parts split balanced over nranks. Allocates; free with
 * cp_seq_layout_free. nranks >= 1, totals >= 0. */
cpdit_status cp_seq_layout_joint(cp_seq_layout *l, int nranks, int txt_total, int img_total,
                                 cpdit_error *err);

/* Fill l from explicit per-rank lengths of a plain sequence (rank r holds tokens
 * [sum of len[0..r), + len[r]) ). Allocates; len[r] >= 0. */
cpdit_status cp_seq_layout_from_lengths(cp_seq_layout *l, int nranks, const int *len,
                                        cpdit_error *err);

void cp_seq_layout_free(cp_seq_layout *l);

/* txt_total + img_total. */
int cp_seq_layout_total(const cp_seq_layout *l);
/* max over ranks of len[r]. */
int cp_seq_layout_max_len(const cp_seq_layout *l);
/* 1 when every rank holds the same number of tokens. */
int cp_seq_layout_is_even(const cp_seq_layout *l);

/* Global index (0..total) of local token i of rank r. */
int cp_seq_layout_global_index(const cp_seq_layout *l, int r, int i);

/* local (B, len[r], W) <- rows of full (B, total, W) that rank r holds. */
void cp_shard_take(float *local, const float *full, const cp_seq_layout *l, int r, int B,
                   size_t W);
/* full (B, total, W) <- local (B, len[r], W) at rank r's rows; other rows untouched. */
void cp_shard_put(float *full, const float *local, const cp_seq_layout *l, int r, int B,
                  size_t W);

#ifdef __cplusplus
}
#endif
#endif
