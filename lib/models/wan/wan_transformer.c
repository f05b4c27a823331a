/* wan_transformer.c — opening a Wan transformer (config + weights) and its forward: the
 * embeddings, the blocks (wan_blocks.c), the output norm and projection. Weights in
 * wan_weights.c, temb / text / RoPE in wan_embeddings.c.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm.h"
#include "lib/io/model_config.h"
#include "lib/io/model_folder.h"
#include "lib/models/wan/wan_internal.h"

/* Each buffer of the workspace starts on this boundary (bytes). */
#define WAN_ACT_ALIGN 64

cpdit_status wan_transformer_open_with_config(wan_transformer **out,
                                              const wan_transformer_config *cfg,
                                              const char *weights_path, cpdit_error *err)
{
    *out = NULL;
    wan_transformer *m = calloc(1, sizeof *m);
    if (!m)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, weights_path, "out of memory");
    m->cfg = *cfg;
    weight_holder_init(&m->w);
    cpdit_status st = wan_transformer_config_validate(&m->cfg, weights_path, err);
    if (!st)
        st = safetensors_set_open(&m->set, weights_path, err);
    if (!st && !(m->where = strdup(safetensors_set_path(m->set))))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, weights_path, "out of memory");
    if (!st)
        st = wan_weights_bind(m, err);
    if (st) {
        wan_transformer_close(m);
        return st;
    }
    *out = m;
    return CPDIT_OK;
}

cpdit_status wan_transformer_open(wan_transformer **out, const char *path, cpdit_error *err)
{
    *out = NULL;
    model_folder mf;
    cpdit_status st = model_folder_open(&mf, path, err);
    if (st)
        return st;
    char *dir = NULL;
    model_config mc = {0};
    wan_transformer_config cfg;
    st = model_folder_component_dir(&mf, "transformer", &dir, err);
    if (!st)
        st = model_folder_load_config(&mf, "transformer", &mc, err);
    if (!st)
        st = wan_transformer_config_from(&mc, &cfg, err);
    if (!st)
        st = wan_transformer_open_with_config(out, &cfg, dir, err);
    model_config_free(&mc);
    model_folder_close(&mf);
    free(dir);
    return st;
}

void wan_transformer_close(wan_transformer *m)
{
    if (!m)
        return;
    wan_weights_free(m);
    if (m->acts)
        m->acts_be->free(m->acts);
    safetensors_set_close(m->set);
    free(m->where);
    free(m);
}

const wan_transformer_config *wan_transformer_config_of(const wan_transformer *m)
{
    return &m->cfg;
}

void wan_transformer_set_weight_cache(wan_transformer *m, size_t bytes)
{
    weight_holder_set_cache(&m->w, bytes);
}

void wan_transformer_set_weight_prefetch(wan_transformer *m, int on)
{
    weight_holder_set_prefetch(&m->w, on);
}

void wan_transformer_set_weight_format(wan_transformer *m, cpdit_weight_format format)
{
    weight_holder_set_format(&m->w, format);
}

void wan_transformer_set_weight_arena(wan_transformer *m, const weight_arena_ops *ops)
{
    weight_holder_set_arena(&m->w, ops);
}

cpdit_status wan_transformer_set_backend(wan_transformer *m, const cpdit_backend *be,
                                         cpdit_error *err)
{
    return weight_holder_set_backend(&m->w, be, err);
}

cpdit_status wan_transformer_load_weights(wan_transformer *m, cpdit_error *err)
{
    return weight_holder_load(&m->w, err);
}

size_t wan_transformer_param_count(const wan_transformer *m)
{
    return m->n_params;
}

size_t wan_transformer_weight_bytes(const wan_transformer *m)
{
    return weight_holder_bytes(&m->w);
}

int wan_transformer_weights_resident(const wan_transformer *m)
{
    return weight_holder_resident(&m->w);
}

size_t wan_transformer_workspace_bytes(const wan_transformer *m)
{
    return m->acts_bytes;
}

double wan_transformer_linear_flops(const wan_transformer *m, int B, long long vid_tokens,
                                    long long text_tokens)
{
    const wan_transformer_config *c = &m->cfg;
    const double E = c->inner_dim, F = c->ffn_dim, V = (double)vid_tokens;
    const double T = (double)text_tokens;
    /* per video token per block: self q, k, v, out (4 E^2), cross q, out (2 E^2), FFN (2 E F);
     * per text token per block: cross k, v (2 E^2) */
    double macs = c->num_layers * (V * (6 * E * E + 2 * E * F) + T * 2 * E * E);
    macs += V * ((double)c->patch_dim * E + E * c->out_dim); /* patch embedding, proj_out */
    macs += T * ((double)c->text_dim * E + E * E);            /* text embedder */
    /* time embedder and time_proj, once per item */
    const double per_item = (double)c->freq_dim * E + E * E + E * WAN_BLOCK_MOD_CHUNKS * E;
    return 2.0 * B * (macs + per_item);
}

/* ------------------------------------------------------------------ forward */

static cpdit_status check_inputs(const wan_transformer *m, const wan_cp *cp,
                                 const wan_inputs *in, cpdit_error *err)
{
    if (in->batch < 1 || in->vid_len < 0 || in->text_len < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, WAN_WHERE,
                               "bad input sizes: batch %d, video tokens %d, text tokens %d "
                               "(batch and text tokens must be positive)",
                               in->batch, in->vid_len, in->text_len);
    if (!in->timestep || !in->encoder_hidden_states ||
        (in->vid_len > 0 && (!in->hidden_states || !in->positions)))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, WAN_WHERE,
                               "an input array (hidden_states, positions, timestep or "
                               "encoder_hidden_states) is missing");
    const int max_pos = m->cfg.rope_max_seq_len;
    for (size_t i = 0; i < (size_t)in->vid_len * WAN_AXES; i++) {
        const float p = in->positions[i];
        if (!(p >= 0 && p < (float)max_pos) || p != floorf(p))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, "positions",
                                   "token %zu: axis %zu position %g is not an integer in 0..%d "
                                   "(rope_max_seq_len)",
                                   i / WAN_AXES, i % WAN_AXES, (double)p, max_pos - 1);
    }
    if (cp && cp->grid) {
        const cp_seq_layout *l = cp->layout;
        const int r = cp->grid->cp_rank;
        if (!l || l->nranks != cp->grid->cp_size || l->txt_total != 0 ||
            l->len[r] != in->vid_len)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, WAN_WHERE,
                                   "this rank holds %d video tokens but the sequence layout "
                                   "gives it %d (of %d ranks, no text part expected)",
                                   in->vid_len, l && r < l->nranks ? l->len[r] : -1,
                                   l ? l->nranks : 0);
    }
    return CPDIT_OK;
}

/* Everything of one forward in one allocation of backend memory. */
typedef struct fwd_bufs {
    wan_acts a;
    cpdit_buf *temb, *work, *stage;
} fwd_bufs;

static size_t max3(size_t a, size_t b, size_t c)
{
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

enum { BUF_X, BUF_N, BUF_Q, BUF_K, BUF_V, BUF_O, BUF_H, BUF_CTX, BUF_CK, BUF_CV, BUF_TPROJ,
       BUF_MOD, BUF_TABLE, BUF_TEMB, BUF_WORK, BUF_STAGE, BUF_COS, BUF_SIN, BUF_COUNT };

static cpdit_status alloc_bufs(fwd_bufs *f, wan_transformer *m, const cpdit_backend *be,
                               const wan_inputs *in, cpdit_error *err)
{
    const wan_transformer_config *c = &m->cfg;
    const size_t B = (size_t)in->batch, S = (size_t)in->vid_len, L = (size_t)in->text_len;
    const size_t E = (size_t)c->inner_dim, D = (size_t)c->attention_head_dim;
    const size_t tok = B * S * E, txt = B * L * E, mod = B * WAN_BLOCK_MOD_CHUNKS * E;
    size_t sizes[BUF_COUNT] = {0};
    sizes[BUF_X] = sizes[BUF_N] = sizes[BUF_Q] = sizes[BUF_K] = sizes[BUF_V] = sizes[BUF_O] = tok;
    sizes[BUF_H] = B * S * (size_t)c->ffn_dim;
    sizes[BUF_CTX] = sizes[BUF_CK] = sizes[BUF_CV] = txt;
    sizes[BUF_TPROJ] = sizes[BUF_MOD] = mod;
    sizes[BUF_TABLE] = WAN_BLOCK_MOD_CHUNKS * E;
    sizes[BUF_TEMB] = B * E;
    sizes[BUF_WORK] = wan_embed_work_elems(c, in->batch);
    sizes[BUF_STAGE] = max3(B * S * (size_t)c->patch_dim, B * L * (size_t)c->text_dim,
                            B * S * (size_t)c->out_dim);
    sizes[BUF_COS] = sizes[BUF_SIN] = S * D;
    size_t bytes[BUF_COUNT], total = 0;
    for (int i = 0; i < BUF_COUNT; i++) {
        const size_t b = i == BUF_COS || i == BUF_SIN ? sizes[i] * sizeof(float)
                                                      : cpdit_act_bytes(be, sizes[i]);
        bytes[i] = (b + WAN_ACT_ALIGN - 1) / WAN_ACT_ALIGN * WAN_ACT_ALIGN + WAN_ACT_ALIGN;
        total += bytes[i];
    }
    if (!m->acts || m->acts_bytes < total || m->acts_be != be) {
        if (m->acts)
            m->acts_be->free(m->acts);
        m->acts = be->alloc(total);
        m->acts_bytes = m->acts ? total : 0;
        m->acts_be = be;
    }
    if (!m->acts)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE,
                               "out of memory for activations (%zu MiB)", total >> 20);
    void *p[BUF_COUNT];
    size_t at = 0;
    for (int i = 0; i < BUF_COUNT; i++) {
        p[i] = (char *)m->acts + at;
        at += bytes[i];
    }
    wan_acts *a = &f->a;
    a->B = in->batch;
    a->S = in->vid_len;
    a->L = in->text_len;
    a->E = (int)E;
    a->H = c->num_attention_heads;
    a->D = (int)D;
    a->F = c->ffn_dim;
    a->eps = (float)c->eps;
    a->x = p[BUF_X], a->n = p[BUF_N], a->q = p[BUF_Q], a->k = p[BUF_K], a->v = p[BUF_V];
    a->o = p[BUF_O], a->h = p[BUF_H];
    a->ctx = p[BUF_CTX], a->ck = p[BUF_CK], a->cv = p[BUF_CV];
    a->tproj = p[BUF_TPROJ], a->mod = p[BUF_MOD], a->table = p[BUF_TABLE];
    a->rope_cos = p[BUF_COS];
    a->rope_sin = p[BUF_SIN];
    f->temb = p[BUF_TEMB];
    f->work = p[BUF_WORK];
    f->stage = p[BUF_STAGE];
    return CPDIT_OK;
}

/* temb, tproj, the embedded text, the embedded video tokens and their RoPE table. */
static cpdit_status embed(wan_transformer *m, const cpdit_backend *be, const wan_inputs *in,
                          fwd_bufs *f, cpdit_error *err)
{
    wan_acts *a = &f->a;
    const wan_transformer_config *c = &m->cfg;
    const wan_global_weights *w = &m->global;
    cpdit_status st = wan_time_embed(f->temb, a->tproj, m, be, in->timestep, a->B, f->work, err);
    if (st)
        return st;
    be->upload_act(f->stage, in->encoder_hidden_states, (size_t)a->B * a->L * c->text_dim);
    if ((st = wan_text_embed(a->ctx, m, be, f->stage, a->B * a->L, a->ck, err)))
        return st;
    const int rows = a->B * a->S;
    if (rows == 0)
        return CPDIT_OK;
    be->upload_act(f->stage, in->hidden_states, (size_t)rows * c->patch_dim);
    if ((st = be->linear(a->x, a->E, f->stage, c->patch_dim, w->patch.w, w->patch.b, rows,
                         c->patch_dim, a->E, 0, err)))
        return st;
    const size_t n = (size_t)a->S * a->D;
    float *host = malloc(2 * n * sizeof(float));
    if (!host)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory (RoPE table)");
    wan_rope_table(host, host + n, in->positions, a->S, c);
    be->upload((float *)a->rope_cos, host, n * sizeof(float));
    be->upload((float *)a->rope_sin, host + n, n * sizeof(float));
    free(host);
    return CPDIT_OK;
}

/* norm_out, (shift, scale) = scale_shift_table + temb, proj_out: out (B, S, out_dim) host. */
static cpdit_status final_layer(wan_transformer *m, const cpdit_backend *be, fwd_bufs *f,
                                float *out, cpdit_error *err)
{
    wan_acts *a = &f->a;
    const wan_global_weights *w = &m->global;
    const int E = a->E, out_dim = m->cfg.out_dim;
    const int rows = a->B * a->S;
    if (rows == 0)
        return be->sync(err);
    be->upload_act(a->table, w->table, (size_t)WAN_OUT_MOD_CHUNKS * E);
    be->layer_norm(a->n, a->x, NULL, NULL, (size_t)rows, E, a->eps);
    for (int b = 0; b < a->B; b++) {
        cpdit_buf *shift = cpdit_buf_at(be, a->mod, (ptrdiff_t)b * WAN_OUT_MOD_CHUNKS * E);
        cpdit_buf *scale = cpdit_buf_at(be, shift, E);
        const cpdit_buf *temb = cpdit_buf_at(be, f->temb, (ptrdiff_t)b * E);
        be->add(shift, a->table, temb, (size_t)E);
        be->add(scale, cpdit_buf_at(be, a->table, E), temb, (size_t)E);
        cpdit_buf *nb = cpdit_buf_at(be, a->n, (ptrdiff_t)b * a->S * E);
        be->modulate(nb, nb, shift, scale, (size_t)a->S, E);
    }
    cpdit_status st = be->linear(f->stage, out_dim, a->n, E, w->proj_out.w, w->proj_out.b, rows,
                                 E, out_dim, 0, err);
    if (st)
        return st;
    be->download_act(out, f->stage, (size_t)rows * out_dim);
    return be->sync(err);
}

/* With a grid: a local failure becomes everyone's before the next collective (one small
 * allreduce over the CP group), so that no rank waits for a peer that gave up. */
static cpdit_status group_agree(const wan_cp *cp, cpdit_status st, cpdit_error *err)
{
    if (!cp || !cp->grid)
        return st;
    long long worst = st;
    cpdit_error local;
    cpdit_error_clear(&local);
    if (cpdit_comm_allreduce(cp->grid->cp, &worst, 1, CPDIT_COMM_INT64, CPDIT_COMM_MAX, &local))
        return st ? st : cpdit_error_set(err, CPDIT_ERR_RUNTIME, local.where, "%s", local.what);
    if (worst && !st)
        return cpdit_error_set(err, (cpdit_status)worst, WAN_WHERE,
                               "another rank of the CP group failed (its message says why)");
    return st;
}

/* The hook at one point (lib/models/model_hooks.h): the residual stream x (S, E) to the
 * hook's host buffer and, when it skips the remaining blocks, back; failures agreed. */
static cpdit_status call_hook(const model_block_hooks *hk, model_hook_point point,
                              const cpdit_backend *be, const wan_cp *cp, fwd_bufs *f,
                              int *skip, cpdit_error *err)
{
    *skip = 0;
    if (!hk || !(hk->points & MODEL_HOOK_BIT(point)))
        return CPDIT_OK;
    wan_acts *a = &f->a;
    const size_t n = (size_t)a->S * a->E;
    model_hidden hs = {hk->buffer(hk->ctx, a->S, a->E), a->S, a->E, 0, a->S};
    cpdit_status st = hs.h ? be->sync(err)
                           : cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE,
                                             "out of memory (cache buffer)");
    if (!st)
        be->download_act(hs.h, a->x, n);
    if ((st = group_agree(cp, st, err)))
        return st;
    st = hk->at(hk->ctx, point, &hs, skip, err);
    if (!st && *skip)
        be->upload_act(a->x, hs.h, n);
    return group_agree(cp, st, err);
}

cpdit_status wan_transformer_forward(wan_transformer *m, const cpdit_backend *be,
                                     const wan_cp *cp, const wan_inputs *in, float *out,
                                     cpdit_error *err)
{
    if (!be)
        be = cpdit_backend_default();
    cpdit_status st = check_inputs(m, cp, in, err);
    fwd_bufs f;
    if (!st)
        st = weight_loader_set_backend(&m->w.wl, be, err);
    if (!st)
        st = alloc_bufs(&f, m, be, in, err);
    weight_holder_set_lockstep(&m->w, cp ? cp->grid : NULL);
    st = group_agree(cp, st, err);
    if (!st)
        st = wan_weights_acquire(m, wan_group_global(), err);
    if (!st)
        st = embed(m, be, in, &f, err);
    st = group_agree(cp, st, err);
    if (!st && in->hooks && in->batch != 1)
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, WAN_WHERE,
                             "block hooks (a cache) take one item per forward, not %d",
                             in->batch);
    int skip = 0;
    const int nb = m->cfg.num_layers;
    if (!st)
        st = call_hook(in->hooks, MODEL_HOOK_EMBEDDED, be, cp, &f, &skip, err);
    for (int i = 0; !st && !skip && i < nb; i++) {
        st = group_agree(cp, wan_weights_acquire(m, wan_group_block(i), err), err);
        if (!st)
            st = wan_block(&m->blocks[i], &f.a, be, cp, err);
        if (!st && i == 0)
            st = call_hook(in->hooks, MODEL_HOOK_HEAD, be, cp, &f, &skip, err);
        if (!st && !skip && i == nb - 1)
            st = call_hook(in->hooks, MODEL_HOOK_TAIL, be, cp, &f, &skip, err);
    }
    if (!st)
        st = wan_weights_acquire(m, wan_group_global(), err);
    if (!st)
        st = final_layer(m, be, &f, out, err);
    if (st)
        weight_loader_stream_abandon(&m->w.wl);
    return st;
}
