/* weight_holder.h — the weight settings a model keeps around its one weight_loader: the
 * budget of resident weights, the format they are made in, and whether the loader is open.
 *
 * A transformer embeds one weight_holder and forwards its set_weight_cache / _format /
 * _arena / _prefetch, set_backend, load_weights and weight_bytes calls here, so that every
 * model family sets its weights up the same way. Sizes in bytes.
 */
#ifndef CPDIT_WEIGHT_HOLDER_H
#define CPDIT_WEIGHT_HOLDER_H

#include <stddef.h>

#include "kernels/backend.h"
#include "lib/core/cpdit_error.h"
#include "lib/io/safetensors.h"
#include "lib/weights/weight_loader.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cp_grid;

typedef struct weight_holder {
    weight_loader wl;           /* the model's groups (the model numbers them) */
    int open;                   /* 1: wl is open (weight_holder_open succeeded) */
    size_t budget;              /* bytes of resident weights (SIZE_MAX: all) */
    cpdit_weight_format format; /* what the matrices are made in */
} weight_holder;

/* No loader yet; budget SIZE_MAX (all resident), format native. */
void weight_holder_init(weight_holder *h);

/* Open the loader on set (where: the weights' path for messages) with prefetch on: streamed
 * groups are made one ahead of the one computing. */
cpdit_status weight_holder_open(weight_holder *h, safetensors_set *set, const char *where,
                                cpdit_error *err);
/* Close the loader if open (safe to call twice). */
void weight_holder_close(weight_holder *h);

void weight_holder_set_cache(weight_holder *h, size_t bytes);
void weight_holder_set_format(weight_holder *h, cpdit_weight_format format);
/* Prefetch on/off; nothing before the loader is open. */
void weight_holder_set_prefetch(weight_holder *h, int on);
void weight_holder_set_arena(weight_holder *h, const weight_arena_ops *ops);
/* be NULL: the default backend. */
cpdit_status weight_holder_set_backend(weight_holder *h, const cpdit_backend *be,
                                       cpdit_error *err);

/* The CP group's ranks acquire groups in lockstep (grid NULL: this rank alone). */
void weight_holder_set_lockstep(weight_holder *h, const struct cp_grid *grid);

/* Make the weights (within the budget, in the format): weight_loader_prepare. */
cpdit_status weight_holder_load(weight_holder *h, cpdit_error *err);
/* Load if not yet, then have group g's matrices exist (weight_loader_acquire). */
cpdit_status weight_holder_acquire(weight_holder *h, int g, cpdit_error *err);

/* Bytes of weight memory held now (0 before open). */
size_t weight_holder_bytes(const weight_holder *h);
/* 1 when loaded with every matrix resident (not streamed). */
int weight_holder_resident(const weight_holder *h);

#ifdef __cplusplus
}
#endif
#endif
