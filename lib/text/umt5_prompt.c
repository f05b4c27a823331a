/* umt5_prompt.c — WanPipeline._get_t5_prompt_embeds after the tokenizer (see umt5_prompt.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "lib/text/prompt_clean.h"
#include "lib/text/umt5_prompt.h"

#define WHERE "UMT5 prompt embeddings"

/* lens[b] = the count of mask[b, :] > 0 (diffusers' mask.gt(0).sum(dim=1)); returns 1 when
 * every row is ones then zeros. Mask values other than 0 / 1 are the encoder's to refuse. */
static int true_lengths(const int32_t *mask, int B, int L, int *lens)
{
    int prefix = 1;
    for (int b = 0; b < B; b++) {
        const int32_t *row = mask + (size_t)b * L;
        int n = 0, seen_pad = 0;
        for (int s = 0; s < L; s++) {
            n += row[s] > 0;
            if (row[s] == 0)
                seen_pad = 1;
            else if (seen_pad)
                prefix = 0;
        }
        lens[b] = n;
    }
    return prefix;
}

/* The first S columns of each row of a (B, L) table into dst (B, S). */
static void first_columns(int32_t *dst, const int32_t *src, int B, int L, int S)
{
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * S, src + (size_t)b * L, (size_t)S * sizeof *dst);
}

/* Range checks the encoder would make on the columns the shortcut leaves out. */
static cpdit_status check_all(const t5_encoder *m, const int32_t *ids, const int32_t *mask,
                              int B, int L, cpdit_error *err)
{
    const int V = t5_encoder_get_config(m)->vocab_size;
    for (size_t i = 0; i < (size_t)B * L; i++) {
        if (ids[i] < 0 || ids[i] >= V)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, WHERE,
                                   "token id %d at (%zu, %zu) is outside the vocabulary "
                                   "[0, %d)",
                                   (int)ids[i], i / (size_t)L, i % (size_t)L, V);
        if (mask[i] != 0 && mask[i] != 1)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, WHERE,
                                   "attention_mask value %d at (%zu, %zu): expected 0 or 1",
                                   (int)mask[i], i / (size_t)L, i % (size_t)L);
    }
    return CPDIT_OK;
}

cpdit_status umt5_prompt_embeds(const t5_encoder *m, const int32_t *ids, const int32_t *mask,
                                int B, int L, float *embeds, int *seq_lens, cpdit_error *err)
{
    if (B < 1 || L < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, WHERE,
                               "input_ids of shape (%d, %d): need B >= 1 and L >= 1", B, L);
    const size_t D = (size_t)t5_encoder_get_config(m)->d_model;
    cpdit_status st = check_all(m, ids, mask, B, L, err);
    if (st)
        return st;
    int *lens = malloc((size_t)B * sizeof *lens);
    if (!lens)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE, "out of memory");
    int S = L; /* the tokens the encoder runs on */
    if (true_lengths(mask, B, L, lens)) {
        S = 0;
        for (int b = 0; b < B; b++)
            S = lens[b] > S ? lens[b] : S;
    }
    int32_t *ids_s = NULL, *mask_s = NULL;
    if (S > 0 && S < L) {
        ids_s = malloc((size_t)B * S * sizeof *ids_s);
        mask_s = malloc((size_t)B * S * sizeof *mask_s);
        if (!ids_s || !mask_s)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE, "out of memory");
        else {
            first_columns(ids_s, ids, B, L, S);
            first_columns(mask_s, mask, B, L, S);
        }
    }
    /* the encoder writes (B, S, D) at the start of embeds ... */
    if (!st && S > 0)
        st = t5_encoder_forward_masked(m, ids_s ? ids_s : ids, mask_s ? mask_s : mask, B, S,
                                       embeds, err);
    /* ... spread to (B, L, D) from the last item down (item b moves up, never over an item
     * still to move), the rows after each true length zeroed */
    for (int b = B - 1; !st && b >= 0; b--) {
        float *dst = embeds + (size_t)b * L * D;
        const size_t keep = (size_t)(lens[b] < S ? lens[b] : S);
        if (S > 0 && b > 0 && S != L)
            memmove(dst, embeds + (size_t)b * S * D, keep * D * sizeof *dst);
        memset(dst + keep * D, 0, ((size_t)L - keep) * D * sizeof *dst);
    }
    if (!st && seq_lens)
        memcpy(seq_lens, lens, (size_t)B * sizeof *lens);
    free(ids_s);
    free(mask_s);
    free(lens);
    return st;
}

cpdit_status umt5_prompt_tokenize(const t5_tokenizer *tok, const char *prompt, int L,
                                  int32_t *ids, int32_t *mask, int *truncated,
                                  cpdit_error *err)
{
    if (L < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, WHERE,
                               "max_sequence_length %d: need at least 1", L);
    char *clean = NULL;
    size_t n_clean = 0, n_real = 0;
    cpdit_status st = prompt_whitespace_clean(prompt, strlen(prompt), &clean, &n_clean, err);
    if (!st)
        st = t5_tokenizer_encode_padded(tok, clean, n_clean, (size_t)L, ids, &n_real, truncated,
                                        err);
    free(clean);
    if (st)
        return st;
    for (int s = 0; s < L; s++)
        mask[s] = (size_t)s < n_real;
    return CPDIT_OK;
}
