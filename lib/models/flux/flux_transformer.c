/* flux_transformer.c — opening a FLUX transformer (config + weights) and its forward:
 * embeddings, the double-stream blocks, the single-stream blocks, the final AdaLN and
 * projection of the image tokens. The blocks are in flux_blocks.c, the weights in
 * flux_weights.c, temb and RoPE in flux_embeddings.c.
 */
#include "config.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/models/flux/flux_internal.h"
#include "lib/io/model_config.h"
#include "lib/io/model_folder.h"

#define FLUX_WHERE "flux"

/* File names safetensors_set_open looks for in a folder (safetensors.h). */
static const char *const standard_weight_names[] = {
    "diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.safetensors.index.json",
    "model.safetensors", "model.safetensors.index.json"};

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The weights of a component folder: a standard name, else the folder's only *.safetensors
 * file (e.g. flux1-dev.safetensors in BFL layout). *out is a new string. */
static cpdit_status find_weights(const char *dir, char **out, cpdit_error *err)
{
    char path[4096];
    for (size_t i = 0; i < sizeof standard_weight_names / sizeof standard_weight_names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, standard_weight_names[i]);
        if (is_file(path)) {
            *out = strdup(dir);
            return *out ? CPDIT_OK : cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
        }
    }
    DIR *d = opendir(dir);
    if (!d)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir, "cannot open the folder");
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!ends_with(e->d_name, ".safetensors"))
            continue;
        if (found++ == 0)
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (found == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                               "no weights: expected diffusion_pytorch_model.safetensors (or a "
                               "sharded .safetensors.index.json, or one .safetensors file)");
    if (found > 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                               "%d .safetensors files and no diffusion_pytorch_model.safetensors"
                               "[.index.json]: cannot tell which one holds the transformer",
                               found);
    *out = strdup(path);
    return *out ? CPDIT_OK : cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
}

static cpdit_status finish_open(flux_transformer *m, const char *weights, cpdit_error *err)
{
    weight_holder_init(&m->w);
    m->where = strdup(weights);
    if (!m->where)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, weights, "out of memory");
    if (!m->set) {
        cpdit_status st = safetensors_set_open(&m->set, weights, err);
        if (st)
            return st;
    }
    free(m->where);
    m->where = strdup(safetensors_set_path(m->set));
    if (!m->where)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, weights, "out of memory");
    return flux_weights_bind(m, err);
}

cpdit_status flux_transformer_open_with_config(flux_transformer **out,
                                               const flux_transformer_config *cfg,
                                               const char *weights_path, cpdit_error *err)
{
    *out = NULL;
    flux_transformer *m = calloc(1, sizeof *m);
    if (!m)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, weights_path, "out of memory");
    m->cfg = *cfg;
    cpdit_status st = flux_transformer_config_validate(&m->cfg, weights_path, err);
    if (!st)
        st = finish_open(m, weights_path, err);
    if (st) {
        flux_transformer_close(m);
        return st;
    }
    *out = m;
    return CPDIT_OK;
}

/* A .safetensors file: config.json beside it if there is one, else inferred from shapes. */
static cpdit_status open_file(flux_transformer **out, const char *path, cpdit_error *err)
{
    char cfg_path[4096];
    const char *slash = strrchr(path, '/');
    if (slash)
        snprintf(cfg_path, sizeof cfg_path, "%.*s/config.json", (int)(slash - path), path);
    else
        snprintf(cfg_path, sizeof cfg_path, "config.json");
    flux_transformer_config cfg;
    cpdit_status st;
    if (is_file(cfg_path)) {
        model_config mc = {0};
        st = model_config_load_file(&mc, cfg_path, err);
        if (!st)
            st = flux_transformer_config_from(&mc, &cfg, err);
        model_config_free(&mc);
        if (st)
            return st;
        return flux_transformer_open_with_config(out, &cfg, path, err);
    }
    safetensors_set *set = NULL;
    if ((st = safetensors_set_open(&set, path, err)))
        return st;
    if ((st = flux_weights_infer_config(set, &cfg, err))) {
        safetensors_set_close(set);
        return st;
    }
    flux_transformer *m = calloc(1, sizeof *m);
    if (!m) {
        safetensors_set_close(set);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    m->cfg = cfg;
    m->set = set;
    if ((st = finish_open(m, path, err))) {
        flux_transformer_close(m);
        return st;
    }
    *out = m;
    return CPDIT_OK;
}

cpdit_status flux_transformer_open(flux_transformer **out, const char *path, cpdit_error *err)
{
    *out = NULL;
    if (is_file(path))
        return open_file(out, path, err);
    model_folder mf;
    cpdit_status st = model_folder_open(&mf, path, err);
    if (st)
        return st;
    char *dir = NULL, *weights = NULL;
    model_config mc = {0};
    flux_transformer_config cfg;
    st = model_folder_component_dir(&mf, "transformer", &dir, err);
    if (!st)
        st = model_folder_load_config(&mf, "transformer", &mc, err);
    if (!st)
        st = flux_transformer_config_from(&mc, &cfg, err);
    if (!st)
        st = find_weights(dir, &weights, err);
    if (!st)
        st = flux_transformer_open_with_config(out, &cfg, weights, err);
    model_config_free(&mc);
    model_folder_close(&mf);
    free(dir);
    free(weights);
    return st;
}

void flux_transformer_close(flux_transformer *m)
{
    if (!m)
        return;
    flux_weights_free(m);
    if (m->acts)
        m->acts_be->free(m->acts);
    free(m->rope_host);
    safetensors_set_close(m->set);
    free(m->where);
    free(m);
}

const flux_transformer_config *flux_transformer_config_of(const flux_transformer *m)
{
    return &m->cfg;
}

flux_weight_layout flux_transformer_layout(const flux_transformer *m)
{
    return m->layout;
}

void flux_transformer_set_weight_prefetch(flux_transformer *m, int on)
{
    weight_holder_set_prefetch(&m->w, on);
}

void flux_transformer_set_weight_cache(flux_transformer *m, size_t bytes)
{
    weight_holder_set_cache(&m->w, bytes);
}

void flux_transformer_set_weight_format(flux_transformer *m, cpdit_weight_format format)
{
    weight_holder_set_format(&m->w, format);
}

void flux_transformer_set_weight_arena(flux_transformer *m, const weight_arena_ops *ops)
{
    weight_holder_set_arena(&m->w, ops);
}

size_t flux_transformer_weight_bytes(const flux_transformer *m)
{
    return weight_holder_bytes(&m->w);
}

cpdit_status flux_transformer_load_weights(flux_transformer *m, cpdit_error *err)
{
    return weight_holder_load(&m->w, err);
}

void flux_transformer_weight_stats(const flux_transformer *m, flux_weight_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!m->w.open)
        return;
    s->resident = m->w.wl.resident;
    s->shared = m->w.wl.arena_shared;
    s->matrix_bytes = m->w.wl.matrix_bytes;
    s->largest_group_bytes = m->w.wl.largest_group_bytes;
    s->create_seconds = m->w.wl.create_seconds;
    s->stall_seconds = m->w.wl.stall_seconds;
    s->prefetched_groups = m->w.wl.prefetched_groups;
    s->bytes_read = m->w.wl.bytes_read;
    s->stream_sharers = m->w.wl.stream_sharers;
    s->peer_groups = m->w.wl.peer_groups;
}

size_t flux_transformer_workspace_bytes(const flux_transformer *m)
{
    return m->acts_bytes;
}

size_t flux_transformer_param_count(const flux_transformer *m)
{
    return m->n_params;
}

double flux_transformer_linear_flops(const flux_transformer *m, int B, long long txt,
                                     long long img)
{
    const flux_transformer_config *c = &m->cfg;
    const double E = c->inner_dim, F = FLUX_MLP_RATIO * E, S = (double)(txt + img);
    /* per token: double block q,k,v,out (4 E^2) + ff (2 E F); single block q,k,v (3 E^2) +
     * mlp in (E F) + out ((E + F) E) */
    const double per_double = 4 * E * E + 2 * E * F;
    const double per_single = 3 * E * E + E * F + (E + F) * E;
    double macs = S * (c->num_layers * per_double + c->num_single_layers * per_single);
    macs += (double)img * (c->in_channels * E + E * c->patch_size * c->patch_size * c->out_channels);
    macs += (double)txt * c->joint_attention_dim * E;
    return 2.0 * B * macs;
}

/* ------------------------------------------------------------------ forward */

static cpdit_status check_inputs(const flux_transformer *m, const flux_cp *cp,
                                 const flux_inputs *in, cpdit_error *err)
{
    if (in->batch < 1 || in->txt_len < 0 || in->img_len < 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, FLUX_WHERE,
                               "bad input sizes: batch %d, text tokens %d, image tokens %d",
                               in->batch, in->txt_len, in->img_len);
    if (m->cfg.guidance_embeds && !in->guidance)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "guidance",
                               "the model has guidance_embeds (a guidance-distilled model such "
                               "as FLUX.1-dev) and needs a guidance value per batch item");
    if (!m->cfg.guidance_embeds && in->guidance)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "guidance",
                               "given, but the model has no guidance embedder "
                               "(guidance_embeds is false); leave it out");
    if (cp && cp->grid) {
        const cp_seq_layout *l = cp->layout;
        const int r = cp->grid->cp_rank;
        if (!l || l->nranks != cp->grid->cp_size || l->txt_len[r] != in->txt_len ||
            l->img_len[r] != in->img_len)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, FLUX_WHERE,
                                   "this rank holds %d text + %d image tokens but the sequence "
                                   "layout gives it %d + %d",
                                   in->txt_len, in->img_len, l ? l->txt_len[r] : -1,
                                   l ? l->img_len[r] : -1);
    }
    return CPDIT_OK;
}

/* All activation buffers of one forward in one allocation (backend memory). */
typedef struct fwd_bufs {
    flux_acts a;
    cpdit_buf *temb, *stemb, *work;
    cpdit_buf *stage; /* inputs on their way in, the output on its way out */
} fwd_bufs;

static size_t max3(size_t a, size_t b, size_t c)
{
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

static cpdit_status alloc_bufs(fwd_bufs *f, flux_transformer *m, const cpdit_backend *be,
                               const flux_inputs *in, cpdit_error *err)
{
    const flux_transformer_config *c = &m->cfg;
    const size_t B = (size_t)in->batch, S = (size_t)in->txt_len + in->img_len;
    const size_t E = (size_t)c->inner_dim, D = (size_t)c->attention_head_dim;
    const size_t F = FLUX_MLP_RATIO * E;
    const size_t tok = B * S * E;
    const size_t out_dim = (size_t)c->patch_size * c->patch_size * c->out_channels;
    const size_t stage = max3(B * in->img_len * (size_t)c->in_channels,
                              B * in->txt_len * (size_t)c->joint_attention_dim,
                              B * in->img_len * out_dim);
    /* elements of each buffer; all activations of be's act_dtype but the fp32 RoPE table */
    const size_t sizes[] = {tok, tok, tok, tok, tok, tok, /* x n q k v o */
                            B * S * (E + F),             /* mlp */
                            B * 2 * 6 * E,               /* mod */
                            B * E, B * E,                /* temb stemb */
                            flux_embed_work_elems(c, in->batch), /* work */
                            S * D, S * D,                /* rope cos sin (fp32) */
                            stage};
    enum { NB = sizeof sizes / sizeof sizes[0], ROPE_COS = 11, ROPE_SIN = 12 };
    const size_t align = 64; /* bytes: keep each buffer on a 64-byte boundary */
    size_t bytes[NB], total = 0;
    for (int i = 0; i < NB; i++) {
        const size_t b = i == ROPE_COS || i == ROPE_SIN ? sizes[i] * sizeof(float)
                                                        : cpdit_act_bytes(be, sizes[i]);
        bytes[i] = (b + align - 1) / align * align;
        total += bytes[i];
    }
    if (!m->acts || m->acts_bytes < total || m->acts_be != be) {
        /* grow (or move to another backend); kept for the next call of the same size */
        if (m->acts)
            m->acts_be->free(m->acts);
        m->acts = be->alloc(total);
        m->acts_bytes = m->acts ? total : 0;
        m->acts_be = be;
    }
    char *base = m->acts;
    if (!base)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, FLUX_WHERE,
                               "out of memory for activations (%zu MiB)", total >> 20);
    void *p[NB];
    size_t at = 0;
    for (int i = 0; i < NB; i++) {
        p[i] = base + at;
        at += bytes[i];
    }
    flux_acts *a = &f->a;
    a->B = in->batch;
    a->txt = in->txt_len;
    a->img = in->img_len;
    a->S = (int)S;
    a->inner = (int)E;
    a->H = c->num_attention_heads;
    a->D = (int)D;
    a->x = p[0], a->n = p[1], a->q = p[2], a->k = p[3], a->v = p[4], a->o = p[5];
    a->mlp = p[6];
    a->mod = p[7];
    f->temb = p[8];
    f->stemb = p[9];
    f->work = p[10];
    a->stemb = f->stemb;
    a->rope_cos = p[ROPE_COS];
    a->rope_sin = p[ROPE_SIN];
    f->stage = p[13];
    return CPDIT_OK;
}

/* The RoPE table of the local tokens (text rows, then image rows), built on the host: in
 * place when the backend's memory is host memory (the table is fp32 on every table), else in
 * a host staging buffer kept in the model between forwards (a fresh 2 S D-float buffer per
 * forward cost ~100 page faults per step at 1536 tokens: glibc gives large blocks back). */
static cpdit_status rope_upload(flux_transformer *m, const cpdit_backend *be,
                                const flux_inputs *in, flux_acts *a, cpdit_error *err)
{
    const size_t D = (size_t)a->D, n = (size_t)a->S * D;
    float *cs = (float *)a->rope_cos, *sn = (float *)a->rope_sin;
    if (!be->host_memory) {
        if (m->rope_host_floats < 2 * n + 1) {
            free(m->rope_host);
            m->rope_host_floats = 0;
            if (!(m->rope_host = malloc((2 * n + 1) * sizeof(float))))
                return cpdit_error_set(err, CPDIT_ERR_RUNTIME, FLUX_WHERE,
                                       "out of memory (RoPE table, %zu floats)", 2 * n + 1);
            m->rope_host_floats = 2 * n + 1;
        }
        cs = m->rope_host;
        sn = m->rope_host + n;
    }
    flux_rope_table(cs, sn, in->txt_ids, a->txt, &m->cfg);
    flux_rope_table(cs + (size_t)a->txt * D, sn + (size_t)a->txt * D, in->img_ids, a->img,
                    &m->cfg);
    if (!be->host_memory) {
        be->upload((float *)a->rope_cos, cs, n * sizeof(float));
        be->upload((float *)a->rope_sin, sn, n * sizeof(float));
    }
    return CPDIT_OK;
}

/* temb, silu(temb), the embedded tokens and the RoPE table. */
static cpdit_status embed(flux_transformer *m, const cpdit_backend *be, const flux_inputs *in,
                          fwd_bufs *f, cpdit_error *err)
{
    flux_acts *a = &f->a;
    const flux_global_weights *w = &m->global;
    const int in_ch = m->cfg.in_channels, joint = m->cfg.joint_attention_dim;
    cpdit_status st = flux_time_text_embed(f->temb, m, be, in->timestep, in->guidance,
                                           in->pooled_projections, a->B, f->work, err);
    if (st)
        return st;
    be->act(CPDIT_ACT_SILU, f->stemb, f->temb, (size_t)a->B * a->inner);
    /* image tokens, then text tokens, through the staging buffer; rows of item b go to
     * [txt | img] of item b */
    be->upload_act(f->stage, in->hidden_states, (size_t)a->B * a->img * in_ch);
    for (int b = 0; b < a->B && !st; b++)
        st = be->linear(cpdit_buf_at(be, a->x, ((ptrdiff_t)b * a->S + a->txt) * a->inner),
                        a->inner, cpdit_buf_at(be, f->stage, (ptrdiff_t)b * a->img * in_ch),
                        in_ch, w->x_embedder.w, w->x_embedder.b, a->img, in_ch, a->inner, 0,
                        err);
    if (st)
        return st;
    be->upload_act(f->stage, in->encoder_hidden_states, (size_t)a->B * a->txt * joint);
    for (int b = 0; b < a->B && !st; b++)
        st = be->linear(cpdit_buf_at(be, a->x, (ptrdiff_t)b * a->S * a->inner), a->inner,
                        cpdit_buf_at(be, f->stage, (ptrdiff_t)b * a->txt * joint), joint,
                        w->context_embedder.w, w->context_embedder.b, a->txt, joint, a->inner,
                        0, err);
    if (st)
        return st;
    return rope_upload(m, be, in, a, err);
}

/* norm_out (scale, shift) and proj_out on the image rows: out (B, I, out_dim), host memory. */
static cpdit_status final_layer(flux_transformer *m, const cpdit_backend *be, fwd_bufs *f,
                                float *out, cpdit_error *err)
{
    flux_acts *a = &f->a;
    const flux_global_weights *w = &m->global;
    const int E = a->inner, out_dim = w->proj_out.out;
    cpdit_status st = be->linear(a->mod, w->norm_out.out, f->stemb, E, w->norm_out.w,
                                 w->norm_out.b, a->B, E, w->norm_out.out, 0, err);
    if (st)
        return st;
    for (int b = 0; b < a->B; b++) {
        const cpdit_buf *scale = cpdit_buf_at(be, a->mod, (ptrdiff_t)b * 2 * E);
        const cpdit_buf *shift = cpdit_buf_at(be, scale, E);
        const cpdit_buf *xi = cpdit_buf_at(be, a->x, ((ptrdiff_t)b * a->S + a->txt) * E);
        cpdit_buf *ni = cpdit_buf_at(be, a->n, ((ptrdiff_t)b * a->S + a->txt) * E);
        be->layer_norm(ni, xi, NULL, NULL, (size_t)a->img, E, FLUX_NORM_EPS);
        be->modulate(ni, ni, shift, scale, (size_t)a->img, E);
        if ((st = be->linear(cpdit_buf_at(be, f->stage, (ptrdiff_t)b * a->img * out_dim),
                             out_dim, ni, E, w->proj_out.w, w->proj_out.b, a->img, E, out_dim, 0,
                             err)))
            return st;
    }
    be->download_act(out, f->stage, (size_t)a->B * a->img * out_dim);
    return be->sync(err); /* a device op that failed since the last status says so here */
}

/* With a grid: make a local failure (out of memory converting a block, ...) everyone's
 * before the next collective, so that no rank waits for a peer that gave up. One small
 * allreduce over the CP group per block. */
static cpdit_status group_agree(const flux_cp *cp, cpdit_status st, cpdit_error *err)
{
    return cpdit_comm_agree(cp && cp->grid ? cp->grid->cp : NULL, st, err);
}

cpdit_status flux_transformer_set_backend(flux_transformer *m, const cpdit_backend *be,
                                          cpdit_error *err)
{
    return weight_holder_set_backend(&m->w, be, err);
}

/* Block k of the double blocks followed by the single blocks (after its weights). */
static cpdit_status run_block(flux_transformer *m, const cpdit_backend *be, const flux_cp *cp,
                              fwd_bufs *f, int k, cpdit_error *err)
{
    const int nd = m->cfg.num_layers;
    const int id = k < nd ? flux_group_double(k) : flux_group_single(m, k - nd);
    cpdit_status st = group_agree(cp, flux_weights_acquire(m, id, err), err);
    if (st)
        return st;
    return k < nd ? flux_double_block(&m->dbl[k], &f->a, be, cp, err)
                  : flux_single_block(&m->sgl[k - nd], &f->a, be, cp, err);
}

/* The hook at one point (model_hooks.h): the residual stream x (S, E) of item 0 to the
 * hook's host buffer and, when the hook skips the remaining blocks, back. Failures agreed
 * over the group before the blocks' next collective. */
static cpdit_status call_hook(const model_block_hooks *hk, model_hook_point point,
                              const cpdit_backend *be, const flux_cp *cp, fwd_bufs *f,
                              int *skip, cpdit_error *err)
{
    *skip = 0;
    if (!hk || !(hk->points & MODEL_HOOK_BIT(point)))
        return CPDIT_OK;
    flux_acts *a = &f->a;
    const size_t n = (size_t)a->S * a->inner;
    model_hidden hs = {hk->buffer(hk->ctx, a->S, a->inner), a->S, a->inner, a->txt, a->img};
    cpdit_status st = hs.h ? be->sync(err)
                           : cpdit_error_set(err, CPDIT_ERR_RUNTIME, FLUX_WHERE,
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

cpdit_status flux_transformer_forward(flux_transformer *m, const cpdit_backend *be,
                                      const flux_cp *cp, const flux_inputs *in, float *out,
                                      cpdit_error *err)
{
    return flux_transformer_forward_hooked(m, be, cp, in, NULL, out, err);
}

cpdit_status flux_transformer_forward_hooked(flux_transformer *m, const cpdit_backend *be,
                                             const flux_cp *cp, const flux_inputs *in,
                                             const model_block_hooks *hooks, float *out,
                                             cpdit_error *err)
{
    if (!be)
        be = cpdit_backend_default();
    cpdit_status st = check_inputs(m, cp, in, err);
    if (!st && hooks && in->batch != 1)
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, FLUX_WHERE,
                             "block hooks (a cache) take one item per forward, not %d",
                             in->batch);
    fwd_bufs f;
    if (!st) /* the weights belong to be (made on the first acquire) */
        st = weight_loader_set_backend(&m->w.wl, be, err);
    if (!st)
        st = alloc_bufs(&f, m, be, in, err);
    /* the CP group's ranks acquire the blocks in lockstep: those on one node share the
     * streaming slots (the first streamed block is collective over them: after an agree) */
    weight_holder_set_lockstep(&m->w, cp ? cp->grid : NULL);
    st = group_agree(cp, st, err);
    if (!st)
        st = flux_weights_acquire(m, flux_group_global(), err);
    if (!st)
        st = embed(m, be, in, &f, err);
    st = group_agree(cp, st, err);
    const int nblocks = m->cfg.num_layers + m->cfg.num_single_layers;
    int skip = 0;
    if (!st)
        st = call_hook(hooks, MODEL_HOOK_EMBEDDED, be, cp, &f, &skip, err);
    for (int k = 0; !st && !skip && k < nblocks; k++) {
        st = run_block(m, be, cp, &f, k, err);
        if (!st && k == 0)
            st = call_hook(hooks, MODEL_HOOK_HEAD, be, cp, &f, &skip, err);
        if (!st && !skip && k == nblocks - 1)
            st = call_hook(hooks, MODEL_HOOK_TAIL, be, cp, &f, &skip, err);
    }
    if (!st)
        st = flux_weights_acquire(m, flux_group_global(), err);
    if (!st)
        st = final_layer(m, be, &f, out, err);
    if (st) /* the peers may stop at other blocks: shared slots no longer in lockstep */
        weight_loader_stream_abandon(&m->w.wl);
    return st;
}
