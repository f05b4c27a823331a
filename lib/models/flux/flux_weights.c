/* flux_weights.c — the FLUX transformer's tensors: names in diffusers' and the original BFL
 * layout, registered with the weight loader (lib/weights) one group (the globals or one block)
 * at a time.
 *
 * Every parameter is registered under its diffusers name with the shape the config implies,
 * and resolved to a source on disk: the tensor of that name (diffusers layout), or a row range
 * of a BFL tensor (BFL fuses q, k, v — and in single blocks also the MLP input — into one
 * matrix; its final-layer modulation stores (shift, scale) where diffusers stores
 * (scale, shift), so those halves are swapped while converting). After registration every
 * tensor of the checkpoint must have been used: a leftover tensor means the config and the
 * checkpoint disagree, and is an error naming it.
 *
 * The loader makes backend weights of the linear layers once (bf16 kept as bf16 by default)
 * when they fit the weight budget, else block by block as the forward reaches each block; the
 * map pages they came from are dropped (madvise) so that the resident size does not grow with
 * the model.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/models/flux/flux_internal.h"

#define BFL_PREFIX_COMFY "model.diffusion_model."

/* ------------------------------------------------------------------ registration */

typedef struct bind_ctx {
    flux_transformer *m;
    int group;
    char hint[128]; /* appended to shape errors */
    cpdit_error *err;
} bind_ctx;

static cpdit_status add_param(bind_ctx *c, void *dst, weight_kind kind, const char *diff_name,
                              const char *disk_name, int64_t disk_rows, int64_t row_off,
                              int64_t rows, int64_t cols, int swap)
{
    return weight_loader_add(&c->m->w.wl, c->group, kind, diff_name, disk_name, disk_rows, row_off,
                               rows, cols, swap, dst, "this config needs", c->hint, NULL, c->err);
}

/* A linear layer `out x in` with bias. diffusers name `dname` (without .weight), BFL tensor
 * `bname` holding it as rows [row_off, row_off + out) of a (bfl_rows, in) matrix. */
static cpdit_status add_linear(bind_ctx *c, flux_linear *L, const char *dname, const char *bname,
                               int64_t row_off, int64_t bfl_rows, int out, int in, int swap)
{
    char dn[160], bn[160];
    const int bfl = c->m->layout == FLUX_LAYOUT_BFL;
    L->out = out;
    L->in = in;
    snprintf(dn, sizeof dn, "%s.weight", dname);
    if (bfl)
        snprintf(bn, sizeof bn, "%s%s.weight", c->m->prefix, bname);
    swap = swap && bfl; /* only BFL stores the halves the other way round */
    if (add_param(c, &L->w, WEIGHT_MATRIX, dn, bfl ? bn : dn, bfl ? bfl_rows : out,
                  bfl ? row_off : 0, out, in, swap))
        return CPDIT_ERR_INPUT;
    snprintf(dn, sizeof dn, "%s.bias", dname);
    if (bfl)
        snprintf(bn, sizeof bn, "%s%s.bias", c->m->prefix, bname);
    return add_param(c, &L->b, WEIGHT_VECTOR, dn, bfl ? bn : dn, bfl ? bfl_rows : out,
                     bfl ? row_off : 0, out, 0, swap);
}

/* A plain linear (no fusion): the BFL tensor is the whole matrix. */
static cpdit_status add_plain(bind_ctx *c, flux_linear *L, const char *dname, const char *bname,
                              int out, int in)
{
    return add_linear(c, L, dname, bname, 0, out, out, in, 0);
}

/* A norm weight vector of n entries: diffusers `dname` (full name), BFL `bname` (full name
 * without the prefix). */
static cpdit_status add_vector(bind_ctx *c, const float **dst, const char *dname,
                               const char *bname, int n)
{
    char bn[160];
    const int bfl = c->m->layout == FLUX_LAYOUT_BFL;
    if (bfl)
        snprintf(bn, sizeof bn, "%s%s", c->m->prefix, bname);
    return add_param(c, dst, WEIGHT_VECTOR, dname, bfl ? bn : dname, n, 0, n, 0, 0);
}

#define NAMEF(buf, ...) snprintf(buf, sizeof buf, __VA_ARGS__)

static cpdit_status bind_globals(bind_ctx *c)
{
    flux_transformer *m = c->m;
    flux_global_weights *w = &m->global;
    const flux_transformer_config *cf = &m->cfg;
    const int E = cf->inner_dim;
    const int out_dim = cf->patch_size * cf->patch_size * cf->out_channels;
    cpdit_status st = CPDIT_OK;
    st = st ? st
            : add_plain(c, &w->time_1, "time_text_embed.timestep_embedder.linear_1",
                        "time_in.in_layer", E, FLUX_TIMESTEP_CHANNELS);
    st = st ? st
            : add_plain(c, &w->time_2, "time_text_embed.timestep_embedder.linear_2",
                        "time_in.out_layer", E, E);
    if (cf->guidance_embeds) {
        st = st ? st
                : add_plain(c, &w->guid_1, "time_text_embed.guidance_embedder.linear_1",
                            "guidance_in.in_layer", E, FLUX_TIMESTEP_CHANNELS);
        st = st ? st
                : add_plain(c, &w->guid_2, "time_text_embed.guidance_embedder.linear_2",
                            "guidance_in.out_layer", E, E);
    }
    st = st ? st
            : add_plain(c, &w->text_1, "time_text_embed.text_embedder.linear_1",
                        "vector_in.in_layer", E, cf->pooled_projection_dim);
    st = st ? st
            : add_plain(c, &w->text_2, "time_text_embed.text_embedder.linear_2",
                        "vector_in.out_layer", E, E);
    st = st ? st
            : add_plain(c, &w->context_embedder, "context_embedder", "txt_in", E,
                        cf->joint_attention_dim);
    st = st ? st : add_plain(c, &w->x_embedder, "x_embedder", "img_in", E, cf->in_channels);
    /* BFL final_layer.adaLN_modulation.1 is (shift, scale); diffusers norm_out is (scale,
     * shift): swap the halves. */
    st = st ? st
            : add_linear(c, &w->norm_out, "norm_out.linear", "final_layer.adaLN_modulation.1", 0,
                         2 * E, 2 * E, E, 1);
    st = st ? st : add_plain(c, &w->proj_out, "proj_out", "final_layer.linear", out_dim, E);
    return st;
}

static cpdit_status bind_double(bind_ctx *c, int i)
{
    flux_double_weights *w = &c->m->dbl[i];
    const int E = c->m->cfg.inner_dim, D = c->m->cfg.attention_head_dim;
    const int F = FLUX_MLP_RATIO * E;
    char d[128], b[128];
    cpdit_status st = CPDIT_OK;
#define DN(s) (NAMEF(d, "transformer_blocks.%d.%s", i, s), d)
#define BN(s) (NAMEF(b, "double_blocks.%d.%s", i, s), b)
    st = st ? st : add_plain(c, &w->norm1, DN("norm1.linear"), BN("img_mod.lin"), 6 * E, E);
    st = st ? st
            : add_plain(c, &w->norm1_context, DN("norm1_context.linear"), BN("txt_mod.lin"),
                        6 * E, E);
    st = st ? st : add_linear(c, &w->to_q, DN("attn.to_q"), BN("img_attn.qkv"), 0, 3 * E, E, E, 0);
    st = st ? st : add_linear(c, &w->to_k, DN("attn.to_k"), BN("img_attn.qkv"), E, 3 * E, E, E, 0);
    st = st ? st
            : add_linear(c, &w->to_v, DN("attn.to_v"), BN("img_attn.qkv"), 2 * E, 3 * E, E, E, 0);
    st = st ? st
            : add_linear(c, &w->add_q, DN("attn.add_q_proj"), BN("txt_attn.qkv"), 0, 3 * E, E, E,
                         0);
    st = st ? st
            : add_linear(c, &w->add_k, DN("attn.add_k_proj"), BN("txt_attn.qkv"), E, 3 * E, E, E,
                         0);
    st = st ? st
            : add_linear(c, &w->add_v, DN("attn.add_v_proj"), BN("txt_attn.qkv"), 2 * E, 3 * E, E,
                         E, 0);
    st = st ? st
            : add_vector(c, &w->norm_q, DN("attn.norm_q.weight"),
                         BN("img_attn.norm.query_norm.scale"), D);
    st = st ? st
            : add_vector(c, &w->norm_k, DN("attn.norm_k.weight"),
                         BN("img_attn.norm.key_norm.scale"), D);
    st = st ? st
            : add_vector(c, &w->norm_added_q, DN("attn.norm_added_q.weight"),
                         BN("txt_attn.norm.query_norm.scale"), D);
    st = st ? st
            : add_vector(c, &w->norm_added_k, DN("attn.norm_added_k.weight"),
                         BN("txt_attn.norm.key_norm.scale"), D);
    st = st ? st : add_plain(c, &w->to_out, DN("attn.to_out.0"), BN("img_attn.proj"), E, E);
    st = st ? st : add_plain(c, &w->to_add_out, DN("attn.to_add_out"), BN("txt_attn.proj"), E, E);
    st = st ? st : add_plain(c, &w->ff_in, DN("ff.net.0.proj"), BN("img_mlp.0"), F, E);
    st = st ? st : add_plain(c, &w->ff_out, DN("ff.net.2"), BN("img_mlp.2"), E, F);
    st = st ? st : add_plain(c, &w->ffc_in, DN("ff_context.net.0.proj"), BN("txt_mlp.0"), F, E);
    st = st ? st : add_plain(c, &w->ffc_out, DN("ff_context.net.2"), BN("txt_mlp.2"), E, F);
    return st;
}

static cpdit_status bind_single(bind_ctx *c, int i)
{
    flux_single_weights *w = &c->m->sgl[i];
    const int E = c->m->cfg.inner_dim, D = c->m->cfg.attention_head_dim;
    const int F = FLUX_MLP_RATIO * E;
    const int fused = 3 * E + F; /* BFL linear1 = [q, k, v, mlp_in] */
    char d[128], b[128];
    cpdit_status st = CPDIT_OK;
#undef DN
#undef BN
#define DN(s) (NAMEF(d, "single_transformer_blocks.%d.%s", i, s), d)
#define BN(s) (NAMEF(b, "single_blocks.%d.%s", i, s), b)
    st = st ? st : add_plain(c, &w->norm, DN("norm.linear"), BN("modulation.lin"), 3 * E, E);
    st = st ? st : add_linear(c, &w->to_q, DN("attn.to_q"), BN("linear1"), 0, fused, E, E, 0);
    st = st ? st : add_linear(c, &w->to_k, DN("attn.to_k"), BN("linear1"), E, fused, E, E, 0);
    st = st ? st : add_linear(c, &w->to_v, DN("attn.to_v"), BN("linear1"), 2 * E, fused, E, E, 0);
    st = st ? st
            : add_linear(c, &w->proj_mlp, DN("proj_mlp"), BN("linear1"), 3 * E, fused, F, E, 0);
    st = st ? st
            : add_vector(c, &w->norm_q, DN("attn.norm_q.weight"), BN("norm.query_norm.scale"),
                         D);
    st = st ? st
            : add_vector(c, &w->norm_k, DN("attn.norm_k.weight"), BN("norm.key_norm.scale"), D);
    st = st ? st : add_plain(c, &w->proj_out, DN("proj_out"), BN("linear2"), E, E + F);
#undef DN
#undef BN
    return st;
}

/* BFL when its characteristic tensors are there (plain or with ComfyUI's prefix). */
static void detect_layout(flux_transformer *m)
{
    static const char *const probes[] = {"img_in.weight", "double_blocks.0.img_attn.qkv.weight",
                                         "single_blocks.0.linear1.weight"};
    m->layout = FLUX_LAYOUT_DIFFUSERS;
    m->prefix = "";
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        char name[160];
        if (safetensors_set_find(m->set, probes[i])) {
            m->layout = FLUX_LAYOUT_BFL;
            return;
        }
        snprintf(name, sizeof name, "%s%s", BFL_PREFIX_COMFY, probes[i]);
        if (safetensors_set_find(m->set, name)) {
            m->layout = FLUX_LAYOUT_BFL;
            m->prefix = BFL_PREFIX_COMFY;
            return;
        }
    }
}

cpdit_status flux_weights_bind(flux_transformer *m, cpdit_error *err)
{
    const flux_transformer_config *cf = &m->cfg;
    detect_layout(m);
    m->dbl = calloc((size_t)(cf->num_layers ? cf->num_layers : 1), sizeof *m->dbl);
    m->sgl = calloc((size_t)(cf->num_single_layers ? cf->num_single_layers : 1), sizeof *m->sgl);
    if (!m->dbl || !m->sgl)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, m->where, "out of memory");
    /* streamed blocks (weights over the budget): the next one is read and converted while
     * the current one computes, in FLUX's order (globals, doubles, singles, globals) */
    cpdit_status st = weight_holder_open(&m->w, m->set, m->where, err);
    if (st)
        return st;
    bind_ctx c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.err = err;
    snprintf(c.hint, sizeof c.hint, " (inner_dim %d = %d heads x %d)", cf->inner_dim,
             cf->num_attention_heads, cf->attention_head_dim);
    c.group = flux_group_global();
    st = bind_globals(&c);
    for (int i = 0; !st && i < cf->num_layers; i++) {
        c.group = flux_group_double(i);
        st = bind_double(&c, i);
    }
    for (int i = 0; !st && i < cf->num_single_layers; i++) {
        c.group = flux_group_single(m, i);
        st = bind_single(&c, i);
    }
    const char *unused = st ? NULL : weight_loader_first_unused(&m->w.wl, NULL, 0);
    if (unused)
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, m->where,
                             "unexpected tensor '%s': not part of a FLUX transformer with this "
                             "config (%d double + %d single blocks, guidance_embeds %s, %s "
                             "names)",
                             unused, cf->num_layers, cf->num_single_layers,
                             cf->guidance_embeds ? "true" : "false",
                             m->layout == FLUX_LAYOUT_BFL ? "BFL" : "diffusers");
    if (st)
        return st;
    m->n_params = m->w.wl.n_values;
    return CPDIT_OK;
}

void flux_weights_free(flux_transformer *m)
{
    weight_holder_close(&m->w);
    free(m->dbl);
    free(m->sgl);
    m->dbl = NULL;
    m->sgl = NULL;
}

cpdit_status flux_weights_acquire(flux_transformer *m, int gi, cpdit_error *err)
{
    return weight_holder_acquire(&m->w, gi, err);
}

/* ------------------------------------------------------------------ config from shapes */

static int64_t dim_of(const safetensors_set *set, const char *prefix, const char *name, int i)
{
    char full[192];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    const safetensors_tensor *t = safetensors_set_find(set, full);
    return t && t->ndim > i ? t->shape[i] : -1;
}

static int count_blocks(const safetensors_set *set, const char *fmt, const char *prefix)
{
    int n = 0;
    for (;; n++) {
        char name[192], full[224];
        snprintf(name, sizeof name, fmt, n);
        snprintf(full, sizeof full, "%s%s", prefix, name);
        if (!safetensors_set_find(set, full))
            return n;
    }
}

cpdit_status flux_weights_infer_config(const safetensors_set *set, flux_transformer_config *c,
                                       cpdit_error *err)
{
    const char *where = safetensors_set_path(set);
    flux_transformer_config_defaults(c);
    const char *prefix = "";
    int bfl = 0;
    if (safetensors_set_find(set, "img_in.weight")) {
        bfl = 1;
    } else if (safetensors_set_find(set, BFL_PREFIX_COMFY "img_in.weight")) {
        bfl = 1;
        prefix = BFL_PREFIX_COMFY;
    } else if (!safetensors_set_find(set, "x_embedder.weight")) {
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "no config.json and neither 'x_embedder.weight' (diffusers) nor "
                               "'img_in.weight' (BFL) in the file: not a FLUX transformer");
    }
    const int64_t inner = dim_of(set, prefix, bfl ? "img_in.weight" : "x_embedder.weight", 0);
    const int64_t in_ch = dim_of(set, prefix, bfl ? "img_in.weight" : "x_embedder.weight", 1);
    const int64_t head = dim_of(set, prefix,
                                bfl ? "double_blocks.0.img_attn.norm.query_norm.scale"
                                    : "transformer_blocks.0.attn.norm_q.weight",
                                0);
    const int64_t head_s = dim_of(set, prefix,
                                  bfl ? "single_blocks.0.norm.query_norm.scale"
                                      : "single_transformer_blocks.0.attn.norm_q.weight",
                                  0);
    const int64_t hd = head > 0 ? head : head_s;
    const int64_t joint = dim_of(set, prefix, bfl ? "txt_in.weight" : "context_embedder.weight", 1);
    const int64_t pooled = dim_of(set, prefix,
                                  bfl ? "vector_in.in_layer.weight"
                                      : "time_text_embed.text_embedder.linear_1.weight",
                                  1);
    const int64_t out = dim_of(set, prefix, bfl ? "final_layer.linear.weight" : "proj_out.weight",
                               0);
    if (inner <= 0 || in_ch <= 0 || hd <= 0 || joint <= 0 || pooled <= 0 || out <= 0 ||
        inner % hd)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "cannot infer the FLUX config from the tensor shapes (a tensor of "
                               "the embedders, the first block's query norm or the output "
                               "projection is missing or odd); put a config.json beside it");
    c->in_channels = (int)in_ch;
    c->out_channels = (int)out; /* patch_size 1 as in FLUX.1 */
    c->attention_head_dim = (int)hd;
    c->num_attention_heads = (int)(inner / hd);
    c->joint_attention_dim = (int)joint;
    c->pooled_projection_dim = (int)pooled;
    c->guidance_embeds =
        dim_of(set, prefix,
               bfl ? "guidance_in.in_layer.weight"
                   : "time_text_embed.guidance_embedder.linear_1.weight",
               0) > 0;
    c->num_layers = count_blocks(set, bfl ? "double_blocks.%d.img_mod.lin.weight"
                                          : "transformer_blocks.%d.norm1.linear.weight",
                                 prefix);
    c->num_single_layers = count_blocks(set, bfl ? "single_blocks.%d.modulation.lin.weight"
                                                 : "single_transformer_blocks.%d.norm.linear.weight",
                                        prefix);
    int rope_sum = 0;
    for (int i = 0; i < c->n_axes; i++)
        rope_sum += c->axes_dims_rope[i];
    if (rope_sum != c->attention_head_dim)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "no config.json, and the head dim %d inferred from the tensors "
                               "does not fit FLUX.1's axes_dims_rope (16, 56, 56); put a "
                               "config.json beside the file",
                               c->attention_head_dim);
    return flux_transformer_config_validate(c, where, err);
}
