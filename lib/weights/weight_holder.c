/* weight_holder.c — a model's weight_loader with its budget, format and open flag (see
 * weight_holder.h). */
#include "config.h"

#include <stdint.h>

#include "lib/cp/grid.h"
#include "lib/weights/weight_holder.h"

void weight_holder_init(weight_holder *h)
{
    h->open = 0;
    h->budget = SIZE_MAX;
    h->format = CPDIT_WEIGHT_NATIVE;
}

cpdit_status weight_holder_open(weight_holder *h, safetensors_set *set, const char *where,
                                cpdit_error *err)
{
    cpdit_status st = weight_loader_open(&h->wl, set, where, NULL, err);
    if (st)
        return st;
    h->open = 1;
    weight_loader_set_prefetch(&h->wl, 1);
    return CPDIT_OK;
}

void weight_holder_close(weight_holder *h)
{
    if (h->open)
        weight_loader_close(&h->wl);
    h->open = 0;
}

void weight_holder_set_cache(weight_holder *h, size_t bytes)
{
    h->budget = bytes;
}

void weight_holder_set_format(weight_holder *h, cpdit_weight_format format)
{
    h->format = format;
}

void weight_holder_set_prefetch(weight_holder *h, int on)
{
    if (h->open)
        weight_loader_set_prefetch(&h->wl, on);
}

void weight_holder_set_arena(weight_holder *h, const weight_arena_ops *ops)
{
    weight_loader_set_arena(&h->wl, ops);
}

cpdit_status weight_holder_set_backend(weight_holder *h, const cpdit_backend *be,
                                       cpdit_error *err)
{
    return weight_loader_set_backend(&h->wl, be ? be : cpdit_backend_default(), err);
}

void weight_holder_set_lockstep(weight_holder *h, const cp_grid *grid)
{
    if (grid)
        weight_loader_set_lockstep(&h->wl, grid->world_rank - grid->cp_rank, grid->cp_size,
                                   grid->world_rank);
    else
        weight_loader_set_lockstep(&h->wl, 0, 1, 0);
}

cpdit_status weight_holder_load(weight_holder *h, cpdit_error *err)
{
    return weight_loader_prepare(&h->wl, h->budget, h->format, err);
}

cpdit_status weight_holder_acquire(weight_holder *h, int g, cpdit_error *err)
{
    cpdit_status st = weight_holder_load(h, err);
    return st ? st : weight_loader_acquire(&h->wl, g, err);
}

size_t weight_holder_bytes(const weight_holder *h)
{
    return h->open ? weight_loader_bytes(&h->wl) : 0;
}

int weight_holder_resident(const weight_holder *h)
{
    return h->open && h->wl.prepared && h->wl.resident;
}
