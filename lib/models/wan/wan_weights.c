/* wan_weights.c — the Wan transformer's tensors under diffusers' state-dict names, registered
 * with the weight loader (lib/weights) one group (the globals, or one block) at a time.
 *
 *   patch_embedding.weight (inner, C, pt, ph, pw)  used as the linear (inner, C pt ph pw)
 *   patch_embedding.bias, condition_embedder.time_embedder.linear_{1,2}.*,
 *   condition_embedder.time_proj.*, condition_embedder.text_embedder.linear_{1,2}.*,
 *   blocks.N.attn{1,2}.to_{q,k,v}.*, .to_out.0.*, .norm_{q,k}.weight (inner),
 *   blocks.N.norm2.{weight,bias} (cross_attn_norm), blocks.N.ffn.net.0.proj.*,
 *   blocks.N.ffn.net.2.*, blocks.N.scale_shift_table (1, 6, inner),
 *   scale_shift_table (1, 2, inner), proj_out.*
 * Like diffusers (_keys_to_ignore_on_load_unexpected) a blocks.N.attn2.norm_added_q tensor is
 * ignored; any other tensor left over is an error naming it. The modulation tables are host
 * vectors (added to time_proj's output per forward); everything else is a backend weight or a
 * vector in the backend's memory.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/models/wan/wan_internal.h"

#define WAN_NEEDS "this config needs"
#define WAN_IGNORED_TENSOR "attn2.norm_added_q" /* diffusers ignores it on load */
#define NAME_MAX_LEN 160

typedef struct bind_ctx {
    wan_transformer *m;
    int group;
    char hint[128];
    cpdit_error *err;
} bind_ctx;

static cpdit_status add_vec(bind_ctx *c, const float **dst, const char *name, int n)
{
    return weight_loader_add(&c->m->w.wl, c->group, WEIGHT_VECTOR, name, name, n, 0, n, 0, 0, dst,
                               WAN_NEEDS, c->hint, NULL, c->err);
}

/* prefix.weight (out, in) and prefix.bias (out). */
static cpdit_status add_linear(bind_ctx *c, wan_linear *L, const char *prefix, int out, int in)
{
    char name[NAME_MAX_LEN];
    L->out = out;
    L->in = in;
    snprintf(name, sizeof name, "%s.weight", prefix);
    cpdit_status st = weight_loader_add(&c->m->w.wl, c->group, WEIGHT_MATRIX, name, name, out, 0,
                                          out, in, 0, &L->w, WAN_NEEDS, c->hint, NULL, c->err);
    if (st)
        return st;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return add_vec(c, &L->b, name, out);
}

/* A (1, chunks, inner) modulation table as a host vector of chunks * inner. */
static cpdit_status add_table(bind_ctx *c, const float **dst, const char *name, int chunks)
{
    const int E = c->m->cfg.inner_dim;
    const int64_t shape[3] = {1, chunks, E};
    return weight_loader_add_shaped(&c->m->w.wl, c->group, WEIGHT_HOST_VECTOR, name, shape, 3,
                                      (int64_t)chunks * E, 0, dst, WAN_NEEDS, c->hint, c->err);
}

static cpdit_status bind_globals(bind_ctx *c)
{
    wan_transformer *m = c->m;
    wan_global_weights *w = &m->global;
    const wan_transformer_config *cf = &m->cfg;
    const int E = cf->inner_dim;
    const int64_t conv[5] = {E, cf->in_channels, cf->patch_size[0], cf->patch_size[1],
                             cf->patch_size[2]};
    w->patch.out = E;
    w->patch.in = cf->patch_dim;
    cpdit_status st = weight_loader_add_shaped(&m->w.wl, c->group, WEIGHT_MATRIX,
                                                 "patch_embedding.weight", conv, 5, E,
                                                 cf->patch_dim, &w->patch.w, WAN_NEEDS, c->hint,
                                                 c->err);
    st = st ? st : add_vec(c, &w->patch.b, "patch_embedding.bias", E);
    st = st ? st
            : add_linear(c, &w->time_1, "condition_embedder.time_embedder.linear_1", E,
                         cf->freq_dim);
    st = st ? st : add_linear(c, &w->time_2, "condition_embedder.time_embedder.linear_2", E, E);
    st = st ? st
            : add_linear(c, &w->time_proj, "condition_embedder.time_proj",
                         WAN_BLOCK_MOD_CHUNKS * E, E);
    st = st ? st
            : add_linear(c, &w->text_1, "condition_embedder.text_embedder.linear_1", E,
                         cf->text_dim);
    st = st ? st : add_linear(c, &w->text_2, "condition_embedder.text_embedder.linear_2", E, E);
    st = st ? st : add_linear(c, &w->proj_out, "proj_out", cf->out_dim, E);
    st = st ? st : add_table(c, &w->table, "scale_shift_table", WAN_OUT_MOD_CHUNKS);
    return st;
}

static cpdit_status bind_attn(bind_ctx *c, wan_attn_weights *w, int i, const char *attn)
{
    const int E = c->m->cfg.inner_dim;
    char p[NAME_MAX_LEN];
    cpdit_status st = CPDIT_OK;
#define AN(s) (snprintf(p, sizeof p, "blocks.%d.%s.%s", i, attn, s), p)
    st = st ? st : add_linear(c, &w->to_q, AN("to_q"), E, E);
    st = st ? st : add_linear(c, &w->to_k, AN("to_k"), E, E);
    st = st ? st : add_linear(c, &w->to_v, AN("to_v"), E, E);
    st = st ? st : add_linear(c, &w->to_out, AN("to_out.0"), E, E);
    st = st ? st : add_vec(c, &w->norm_q, AN("norm_q.weight"), E);
    st = st ? st : add_vec(c, &w->norm_k, AN("norm_k.weight"), E);
#undef AN
    return st;
}

static cpdit_status bind_block(bind_ctx *c, int i)
{
    wan_block_weights *w = &c->m->blocks[i];
    const int E = c->m->cfg.inner_dim, F = c->m->cfg.ffn_dim;
    char p[NAME_MAX_LEN];
    cpdit_status st = bind_attn(c, &w->attn1, i, "attn1");
    st = st ? st : bind_attn(c, &w->attn2, i, "attn2");
#define BN(s) (snprintf(p, sizeof p, "blocks.%d.%s", i, s), p)
    if (c->m->cfg.cross_attn_norm) {
        st = st ? st : add_vec(c, &w->norm2_w, BN("norm2.weight"), E);
        st = st ? st : add_vec(c, &w->norm2_b, BN("norm2.bias"), E);
    }
    st = st ? st : add_linear(c, &w->ffn_in, BN("ffn.net.0.proj"), F, E);
    st = st ? st : add_linear(c, &w->ffn_out, BN("ffn.net.2"), E, F);
    st = st ? st : add_table(c, &w->table, BN("scale_shift_table"), WAN_BLOCK_MOD_CHUNKS);
#undef BN
    return st;
}

/* The first tensor nothing registered, past the ignored ones (blocks.N.attn2.norm_added_q). */
static const char *first_unused(const wan_transformer *m, cpdit_error *err, int *oom)
{
    const int n = m->cfg.num_layers;
    char **ignore = calloc((size_t)(n ? n : 1), sizeof *ignore);
    char *names = malloc((size_t)(n ? n : 1) * NAME_MAX_LEN);
    *oom = !ignore || !names;
    const char *unused = NULL;
    if (!*oom) {
        for (int i = 0; i < n; i++) {
            ignore[i] = names + (size_t)i * NAME_MAX_LEN;
            snprintf(ignore[i], NAME_MAX_LEN, "blocks.%d.%s", i, WAN_IGNORED_TENSOR);
        }
        unused = weight_loader_first_unused(&m->w.wl, (const char *const *)ignore, n);
    } else {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, m->where, "out of memory");
    }
    free(ignore);
    free(names);
    return unused;
}

cpdit_status wan_weights_bind(wan_transformer *m, cpdit_error *err)
{
    const wan_transformer_config *cf = &m->cfg;
    m->blocks = calloc((size_t)(cf->num_layers ? cf->num_layers : 1), sizeof *m->blocks);
    if (!m->blocks)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, m->where, "out of memory");
    /* streamed blocks: the next one is made while the current one computes (globals, the
     * blocks in order, globals again: the loader's (g + 1) mod n order) */
    cpdit_status st = weight_holder_open(&m->w, m->set, m->where, err);
    if (st)
        return st;
    bind_ctx c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.err = err;
    snprintf(c.hint, sizeof c.hint, " (inner_dim %d = %d heads x %d, ffn_dim %d, text_dim %d)",
             cf->inner_dim, cf->num_attention_heads, cf->attention_head_dim, cf->ffn_dim,
             cf->text_dim);
    c.group = wan_group_global();
    st = bind_globals(&c);
    for (int i = 0; !st && i < cf->num_layers; i++) {
        c.group = wan_group_block(i);
        st = bind_block(&c, i);
    }
    if (st)
        return st;
    int oom = 0;
    const char *unused = first_unused(m, err, &oom);
    if (oom)
        return CPDIT_ERR_RUNTIME;
    if (unused)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, m->where,
                               "unexpected tensor '%s': not part of a WanTransformer3DModel with "
                               "this config (%d blocks, cross_attn_norm %s, no image "
                               "conditioning)",
                               unused, cf->num_layers, cf->cross_attn_norm ? "true" : "false");
    m->n_params = m->w.wl.n_values;
    return CPDIT_OK;
}

void wan_weights_free(wan_transformer *m)
{
    weight_holder_close(&m->w);
    free(m->blocks);
    m->blocks = NULL;
}

cpdit_status wan_weights_acquire(wan_transformer *m, int g, cpdit_error *err)
{
    return weight_holder_acquire(&m->w, g, err);
}
