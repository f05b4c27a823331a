/* cp_shard.c — even and uneven sequence partitioning over a CP group (cp_shard.h). */
#include "lib/cp/cp_shard.h"

#include <stdlib.h>
#include <string.h>

#define SHARD_WHERE "shard"

void cp_shard_balanced(int total, int parts, int index, int *start, int *len)
{
    int base = total / parts;
    int extra = total % parts;
    *len = base + (index < extra ? 1 : 0);
    *start = index * base + (index < extra ? index : extra);
}

/* Allocate the five per-rank arrays of l (zeroed). */
static cpdit_status layout_alloc(cp_seq_layout *l, int nranks, cpdit_error *err)
{
    memset(l, 0, sizeof *l);
    if (nranks < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, SHARD_WHERE,
                               "a sequence layout needs at least 1 rank (got %d)", nranks);
    int *block = calloc(5 * (size_t)nranks, sizeof *block);
    if (!block)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARD_WHERE, "out of memory");
    l->nranks = nranks;
    l->len = block;
    l->txt_start = block + nranks;
    l->txt_len = block + 2 * nranks;
    l->img_start = block + 3 * nranks;
    l->img_len = block + 4 * nranks;
    return CPDIT_OK;
}

cpdit_status cp_seq_layout_joint(cp_seq_layout *l, int nranks, int txt_total, int img_total,
                                 cpdit_error *err)
{
    if (txt_total < 0 || img_total < 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, SHARD_WHERE,
                               "negative token count (text %d, image %d)", txt_total,
                               img_total);
    if (layout_alloc(l, nranks, err))
        return err ? err->status : CPDIT_ERR_RUNTIME;
    l->txt_total = txt_total;
    l->img_total = img_total;
    for (int r = 0; r < nranks; r++) {
        cp_shard_balanced(txt_total, nranks, r, &l->txt_start[r], &l->txt_len[r]);
        cp_shard_balanced(img_total, nranks, r, &l->img_start[r], &l->img_len[r]);
        l->len[r] = l->txt_len[r] + l->img_len[r];
    }
    return CPDIT_OK;
}

cpdit_status cp_seq_layout_from_lengths(cp_seq_layout *l, int nranks, const int *len,
                                        cpdit_error *err)
{
    long long total = 0;
    for (int r = 0; r < nranks; r++) {
        if (len[r] < 0)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, SHARD_WHERE,
                                   "rank %d: negative token count %d", r, len[r]);
        total += len[r];
    }
    if (total > 0x7fffffff)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, SHARD_WHERE,
                               "sequence of %lld tokens is too long", total);
    if (layout_alloc(l, nranks, err))
        return err ? err->status : CPDIT_ERR_RUNTIME;
    int start = 0;
    l->img_total = (int)total;
    for (int r = 0; r < nranks; r++) {
        l->img_start[r] = start;
        l->img_len[r] = len[r];
        l->len[r] = len[r];
        start += len[r];
    }
    return CPDIT_OK;
}

void cp_seq_layout_free(cp_seq_layout *l)
{
    if (!l)
        return;
    free(l->len);
    memset(l, 0, sizeof *l);
}

int cp_seq_layout_total(const cp_seq_layout *l)
{
    return l->txt_total + l->img_total;
}

int cp_seq_layout_max_len(const cp_seq_layout *l)
{
    int m = 0;
    for (int r = 0; r < l->nranks; r++)
        if (l->len[r] > m)
            m = l->len[r];
    return m;
}

int cp_seq_layout_is_even(const cp_seq_layout *l)
{
    for (int r = 1; r < l->nranks; r++)
        if (l->len[r] != l->len[0])
            return 0;
    return 1;
}

int cp_seq_layout_global_index(const cp_seq_layout *l, int r, int i)
{
    if (i < l->txt_len[r])
        return l->txt_start[r] + i;
    return l->txt_total + l->img_start[r] + (i - l->txt_len[r]);
}

/* Copy rank r's rows between full (B, total, W) and local (B, len[r], W); to_local selects
 * the direction. The text slice and the image slice are each one contiguous run. */
static void shard_copy(float *local, float *full, const cp_seq_layout *l, int r, int B,
                       size_t W, int to_local)
{
    size_t total = (size_t)cp_seq_layout_total(l);
    size_t n = (size_t)l->len[r];
    size_t runs_start[2] = {(size_t)l->txt_start[r], (size_t)(l->txt_total + l->img_start[r])};
    size_t runs_len[2] = {(size_t)l->txt_len[r], (size_t)l->img_len[r]};
    for (int b = 0; b < B; b++) {
        float *loc = local + (size_t)b * n * W;
        float *ful = full + (size_t)b * total * W;
        size_t off = 0;
        for (int k = 0; k < 2; k++) {
            if (!runs_len[k])
                continue;
            float *lp = loc + off * W;
            float *fp = ful + runs_start[k] * W;
            if (to_local)
                memcpy(lp, fp, runs_len[k] * W * sizeof(float));
            else
                memcpy(fp, lp, runs_len[k] * W * sizeof(float));
            off += runs_len[k];
        }
    }
}

void cp_shard_take(float *local, const float *full, const cp_seq_layout *l, int r, int B,
                   size_t W)
{
    shard_copy(local, (float *)full, l, r, B, W, 1);
}

void cp_shard_put(float *full, const float *local, const cp_seq_layout *l, int r, int B,
                  size_t W)
{
    shard_copy((float *)local, full, l, r, B, W, 0);
}
