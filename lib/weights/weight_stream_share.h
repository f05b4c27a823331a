/* weight_stream_share.h — inside the weight loader: the streaming slots shared by the lockstep
 * peers of a node (weight_loader_set_lockstep). Used by weight_loader.c only; the protocol is
 * described in weight_stream_share.c.
 */
#ifndef CPDIT_WEIGHT_STREAM_SHARE_H
#define CPDIT_WEIGHT_STREAM_SHARE_H

#include "lib/weights/weight_loader.h"

/* Made in weight_loader.c, used here. */
cpdit_status weight_param_create(const weight_loader *wl, const weight_param *p, void *storage,
                                 int fill, cpdit_weight **out, cpdit_error *err);
/* The current group's weights freed (and unpublished); current_group -1. */
void weight_loader_drop_current(weight_loader *wl);

/* 1 when acquire should try the shared slots (peers set, arena ops with stream ops, a host
 * memory backend, not switched off). */
int weight_stream_share_wanted(const weight_loader *wl);

/* Acquire group g through the shared slots: returns 1 when done here (*st: the result), 0 when
 * the caller must make it in its own slots (nothing to share, or the sharing was abandoned;
 * the current group has been dropped then). The first call is collective over the peers. */
int weight_stream_share_acquire(weight_loader *wl, int g, cpdit_status *st, cpdit_error *err);

/* Tell the peers this process stops following the order (see weight_loader_stream_abandon). */
void weight_stream_share_abandon(weight_loader *wl);

/* Join the helper, free what it made, release the memory (collective over the peers). */
void weight_stream_share_close(weight_loader *wl);

/* Bytes of shared slots this process maps (0: none). */
size_t weight_stream_share_bytes(const weight_loader *wl);

#endif
