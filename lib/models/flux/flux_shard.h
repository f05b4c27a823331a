/* flux_shard.h — splitting FLUX's text and image tokens over a CP group, batch items over
 * data-parallel groups, and gathering the output back in the original order.
 *
 * The joint sequence of one item is [text (txt_total) | image (img_total)]; CP rank r holds
 * [text slice r | image slice r] (cp_shard.h's cp_seq_layout). Each rank takes its tokens and
 * their RoPE ids with flux_shard_take; unmasked attention does not depend on token order, so
 * no rank ever needs the others' ids.
 *
 * All arrays here are host fp32 (the forward's inputs and outputs, not backend activations):
 * the gathers move them as CPDIT_COMM_FLOAT whatever the backend's act_dtype.
 */
#ifndef CPDIT_FLUX_SHARD_H
#define CPDIT_FLUX_SHARD_H

#include <stddef.h>

#include "lib/cp/comm.h"
#include "lib/cp/cp_shard.h"
#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The layout cpdit uses for FLUX: text split balanced (the first txt_total % n ranks get one
 * more; with fewer text tokens than ranks the last ranks get none), and the image split so
 * that every rank's total txt + img is balanced too: when the total divides nranks every rank
 * holds the same number of tokens (strict, non --anything attention works) even if the text
 * or the image alone does not divide. When the image is too short to even out the text (a
 * rank would need a negative image share), both parts are split balanced on their own.
 * Allocates; free with cp_seq_layout_free. */
cpdit_status flux_shard_layout(cp_seq_layout *l, int nranks, int txt_total, int img_total,
                               cpdit_error *err);

/* local (B, len, W) <- rows [start, start + len) of every item of full (B, total, W). */
void flux_shard_take(float *local, const float *full, int B, int total, int start, int len,
                     size_t W);

/* full (B, img_total, W), on every rank of the CP group, <- each CP rank r's local image rows
 * (B, img_len[r], W) in the original token order. cp: the CP communicator (grid->cp), whose
 * rank r is CP rank r of the layout. Collective over cp. */
cpdit_status flux_shard_gather_image(float *full, const float *local, const cp_seq_layout *l,
                                     cpdit_comm *cp, int B, size_t W, cpdit_error *err);

/* Items of the batch that data-parallel group d of dp runs: [*start, *start + *count),
 * balanced (the first B % dp groups run one more; groups past B run none). */
void flux_shard_batch(int B, int dp, int d, int *start, int *count);

/* full (B, item_floats), on every rank, <- each dp group's items (count_d, item_floats) as
 * flux_shard_batch assigns them. dpc: the dp communicator (grid->dp_comm; rank = dp index).
 * Collective over dpc. */
cpdit_status flux_shard_gather_batch(float *full, const float *mine, int B, size_t item_floats,
                                     cpdit_comm *dpc, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
