/* flux_shard.c — token and batch sharding for the FLUX transformer (flux_shard.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "lib/models/flux/flux_shard.h"

#define SHARD_WHERE "flux-shard"

cpdit_status flux_shard_layout(cp_seq_layout *l, int nranks, int txt_total, int img_total,
                               cpdit_error *err)
{
    cpdit_status st = cp_seq_layout_joint(l, nranks, txt_total, img_total, err);
    if (st)
        return st;
    /* try: text balanced, totals balanced, image = the difference */
    const int total = txt_total + img_total;
    for (int r = 0; r < nranks; r++) {
        int ts, tl, ls, ll;
        cp_shard_balanced(txt_total, nranks, r, &ts, &tl);
        cp_shard_balanced(total, nranks, r, &ls, &ll);
        if (ll < tl)
            return CPDIT_OK; /* keep the separately balanced split */
    }
    int img_at = 0;
    for (int r = 0; r < nranks; r++) {
        int ls, ll;
        cp_shard_balanced(total, nranks, r, &ls, &ll);
        l->img_start[r] = img_at;
        l->img_len[r] = ll - l->txt_len[r];
        l->len[r] = ll;
        img_at += l->img_len[r];
    }
    return CPDIT_OK;
}

void flux_shard_take(float *local, const float *full, int B, int total, int start, int len,
                     size_t W)
{
    if (len <= 0)
        return;
    for (int b = 0; b < B; b++)
        memcpy(local + (size_t)b * len * W, full + ((size_t)b * total + start) * W,
               (size_t)len * W * sizeof(float));
}

cpdit_status flux_shard_gather_image(float *full, const float *local, const cp_seq_layout *l,
                                     cpdit_comm *cp, int B, size_t W, cpdit_error *err)
{
    const int n = l->nranks;
    if (!cp || cp->size != n)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, SHARD_WHERE,
                               "the layout is for %d ranks but the CP communicator has %d", n,
                               cp ? cp->size : 0);
    size_t *counts = calloc(2 * (size_t)n, sizeof(size_t));
    float *recv = malloc(((size_t)B * l->img_total * W + 1) * sizeof(float));
    if (!counts || !recv) {
        free(counts);
        free(recv);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARD_WHERE, "out of memory");
    }
    size_t *displs = counts + n;
    size_t at = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = (size_t)B * l->img_len[r] * W;
        displs[r] = at;
        at += counts[r];
    }
    cpdit_status st = cpdit_comm_allgatherv(cp, CPDIT_COMM_FLOAT, local, counts[cp->rank], recv,
                                            counts, displs, err);
    if (!st) {
        /* segment r is (B, img_len[r], W): put its rows at img_start[r] of each item */
        for (int r = 0; r < n; r++)
            for (int b = 0; b < B; b++)
                memcpy(full + ((size_t)b * l->img_total + l->img_start[r]) * W,
                       recv + displs[r] + (size_t)b * l->img_len[r] * W,
                       (size_t)l->img_len[r] * W * sizeof(float));
    }
    free(counts);
    free(recv);
    return st;
}

void flux_shard_batch(int B, int dp, int d, int *start, int *count)
{
    cp_shard_balanced(B, dp, d, start, count);
}

cpdit_status flux_shard_gather_batch(float *full, const float *mine, int B, size_t item_floats,
                                     cpdit_comm *dpc, cpdit_error *err)
{
    const int n = dpc->size;
    size_t *counts = calloc(2 * (size_t)n, sizeof(size_t));
    if (!counts)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, SHARD_WHERE, "out of memory");
    size_t *displs = counts + n;
    for (int d = 0; d < n; d++) {
        int start, count;
        flux_shard_batch(B, n, d, &start, &count);
        counts[d] = (size_t)count * item_floats;
        displs[d] = (size_t)start * item_floats;
    }
    cpdit_status st = cpdit_comm_allgatherv(dpc, CPDIT_COMM_FLOAT, mine, counts[dpc->rank], full,
                                            counts, displs, err);
    free(counts);
    return st;
}
