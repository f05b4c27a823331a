/* flux_forward_file.c — `cpdit forward --component transformer` for FLUX (flux_family.h):
 * read the inputs by diffusers' names, split the batch over data-parallel groups and the
 * tokens over each CP group, run the transformer, gather the output in the original order,
 * write `sample` (float32) from rank 0. Every rank reaches the same checkpoints
 * (cpdit_comm_agree), so that a failure on one rank never leaves the others in a collective.
 */
#include "lib/models/flux/flux_family.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "lib/cp/comm.h"
#include "lib/cp/comm_mpi.h"
#include "lib/cp/grid_mpi.h"
#include "lib/io/safetensors.h"
#include "lib/io/tensor_finite.h"
#include "lib/models/flux/flux_shard.h"
#include "lib/models/flux/flux_transformer.h"
#include "lib/weights/weight_shared_mpi.h"

#define WHERE "forward"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ inputs */

typedef struct full_inputs {
    int B, T, I;      /* batch, text tokens, image tokens */
    float *hs, *ehs, *pooled, *timestep, *guidance, *txt_ids, *img_ids; /* whole tensors */
} full_inputs;

static void free_inputs(full_inputs *fi)
{
    free(fi->hs);
    free(fi->ehs);
    free(fi->pooled);
    free(fi->timestep);
    free(fi->guidance);
    free(fi->txt_ids);
    free(fi->img_ids);
}

static cpdit_status shape_error(const char *path, const safetensors_tensor *t,
                                const char *expected, cpdit_error *err)
{
    char got[160];
    size_t used = (size_t)snprintf(got, sizeof got, "[");
    for (int i = 0; i < t->ndim && used < sizeof got; i++)
        used += (size_t)snprintf(got + used, sizeof got - used, "%s%lld", i ? ", " : "",
                                 (long long)t->shape[i]);
    if (used < sizeof got)
        snprintf(got + used, sizeof got - used, "]");
    return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "tensor '%s' has shape %s; expected %s",
                           t->name, got, expected);
}

/* Read t (n floats) into a new buffer *out. */
static cpdit_status read_all(const safetensors_tensor *t, size_t n, float **out, cpdit_error *err)
{
    *out = malloc((n ? n : 1) * sizeof(float));
    if (!*out)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->file, "out of memory");
    return safetensors_tensor_read_f32(t, *out, n, err);
}

/* A per-item scalar (timestep, guidance): B values, or one value broadcast to B. */
static cpdit_status read_per_item(const safetensors_tensor *t, int B, float **out,
                                  const char *path, cpdit_error *err)
{
    if (t->ndim > 1 || (t->nelem != (size_t)B && t->nelem != 1)) {
        char want[64];
        snprintf(want, sizeof want, "(%d) or a single value", B);
        return shape_error(path, t, want, err);
    }
    float *v = NULL;
    cpdit_status st = read_all(t, t->nelem, &v, err);
    if (st) {
        free(v);
        return st;
    }
    *out = malloc((size_t)B * sizeof(float));
    if (!*out) {
        free(v);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    for (int b = 0; b < B; b++)
        (*out)[b] = v[t->nelem == 1 ? 0 : b];
    free(v);
    return CPDIT_OK;
}

/* RoPE ids: (S, n_axes), or the deprecated (B', S, n_axes) of which item 0 is used. */
static cpdit_status read_ids(const safetensors_tensor *t, int n_axes, int *S, float **out,
                             const char *path, cpdit_error *err)
{
    if (!(t->ndim == 2 || t->ndim == 3) || t->shape[t->ndim - 1] != n_axes ||
        (t->ndim == 3 && t->shape[0] < 1)) {
        char want[96];
        snprintf(want, sizeof want, "(tokens, %d) (or the deprecated (batch, tokens, %d))",
                 n_axes, n_axes);
        return shape_error(path, t, want, err);
    }
    *S = (int)t->shape[t->ndim - 2];
    float *all = NULL;
    cpdit_status st = read_all(t, t->nelem, &all, err);
    if (st) {
        free(all);
        return st;
    }
    *out = all; /* item 0 (of a 3-D tensor) is the first S x n_axes floats */
    return CPDIT_OK;
}

static const char *const input_names[] = {"hidden_states", "encoder_hidden_states",
                                          "pooled_projections", "timestep", "img_ids",
                                          "txt_ids", "guidance"};

static cpdit_status load_inputs(const char *path, const flux_transformer_config *c,
                                full_inputs *fi, cpdit_error *err)
{
    memset(fi, 0, sizeof *fi);
    safetensors_file *f = NULL;
    cpdit_status st = safetensors_open(&f, path, err);
    if (st)
        return st;
    const safetensors_tensor *t[7];
    for (int i = 0; i < 7; i++)
        t[i] = safetensors_find(f, input_names[i]);
    for (size_t i = 0; !st && i < safetensors_count(f); i++) {
        const char *name = safetensors_tensor_at(f, i)->name;
        int known = 0;
        for (int k = 0; k < 7; k++)
            known |= !strcmp(name, input_names[k]);
        if (!known)
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                                 "unexpected tensor '%s'; the transformer takes hidden_states, "
                                 "encoder_hidden_states, pooled_projections, timestep, img_ids, "
                                 "txt_ids and guidance",
                                 name);
    }
    for (int i = 0; !st && i < 6; i++)
        if (!t[i])
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "missing tensor '%s'",
                                 input_names[i]);
    if (!st && c->guidance_embeds && !t[6])
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                             "missing tensor 'guidance': the model has guidance_embeds");
    if (!st && !c->guidance_embeds && t[6])
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                             "tensor 'guidance' given but the model has no guidance embedder");
    char want[160];
    if (!st && (t[0]->ndim != 3 || t[0]->shape[2] != c->in_channels || t[0]->shape[0] < 1)) {
        snprintf(want, sizeof want, "(batch, image tokens, in_channels = %d)", c->in_channels);
        st = shape_error(path, t[0], want, err);
    }
    if (!st) {
        fi->B = (int)t[0]->shape[0];
        fi->I = (int)t[0]->shape[1];
        if (t[1]->ndim != 3 || t[1]->shape[0] != fi->B ||
            t[1]->shape[2] != c->joint_attention_dim) {
            snprintf(want, sizeof want, "(batch = %d, text tokens, joint_attention_dim = %d)",
                     fi->B, c->joint_attention_dim);
            st = shape_error(path, t[1], want, err);
        }
    }
    if (!st) {
        fi->T = (int)t[1]->shape[1];
        if (t[2]->ndim != 2 || t[2]->shape[0] != fi->B ||
            t[2]->shape[1] != c->pooled_projection_dim) {
            snprintf(want, sizeof want, "(batch = %d, pooled_projection_dim = %d)", fi->B,
                     c->pooled_projection_dim);
            st = shape_error(path, t[2], want, err);
        }
    }
    int s_img = 0, s_txt = 0;
    if (!st)
        st = read_ids(t[4], c->n_axes, &s_img, &fi->img_ids, path, err);
    if (!st)
        st = read_ids(t[5], c->n_axes, &s_txt, &fi->txt_ids, path, err);
    if (!st && (s_img != fi->I || s_txt != fi->T))
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                             "img_ids has %d tokens and txt_ids %d, but hidden_states has %d "
                             "image tokens and encoder_hidden_states %d text tokens",
                             s_img, s_txt, fi->I, fi->T);
    if (!st && fi->I + fi->T < 1)
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "no tokens (0 image + 0 text)");
    if (!st)
        st = read_all(t[0], t[0]->nelem, &fi->hs, err);
    if (!st)
        st = read_all(t[1], t[1]->nelem, &fi->ehs, err);
    if (!st)
        st = read_all(t[2], t[2]->nelem, &fi->pooled, err);
    if (!st)
        st = read_per_item(t[3], fi->B, &fi->timestep, path, err);
    if (!st && t[6])
        st = read_per_item(t[6], fi->B, &fi->guidance, path, err);
    safetensors_close(f);
    return st;
}

/* ------------------------------------------------------------------ the transformer */

typedef struct run_state {
    flux_transformer *model;
    full_inputs in;
    cp_grid *grid;
    cp_seq_layout layout;
    int have_layout;
    cp_attention_config attn; /* variant, backend and kernel */
    cp_attention_ws attn_ws;
    float *local[4];  /* hidden, encoder, txt ids, img ids of this rank's tokens */
    float *out_local, *out_group, *out_full;
} run_state;

static void run_free(run_state *r)
{
    for (int i = 0; i < 4; i++)
        free(r->local[i]);
    free(r->out_local);
    free(r->out_group);
    free(r->out_full);
    if (r->have_layout)
        cp_seq_layout_free(&r->layout);
    free_inputs(&r->in);
    cp_attention_ws_release(&r->attn_ws);
    flux_transformer_close(r->model);
}

/* This rank's share: items [b0, b0 + nb) and its CP slice of the tokens. */
static cpdit_status take_local(run_state *r, int b0, int nb, flux_inputs *li, cpdit_error *err)
{
    const flux_transformer_config *c = flux_transformer_config_of(r->model);
    const int cr = r->grid->cp_rank;
    const int ts = r->layout.txt_start[cr], tl = r->layout.txt_len[cr];
    const int is = r->layout.img_start[cr], il = r->layout.img_len[cr];
    const full_inputs *in = &r->in;
    r->local[0] = malloc(((size_t)nb * il * c->in_channels + 1) * sizeof(float));
    r->local[1] = malloc(((size_t)nb * tl * c->joint_attention_dim + 1) * sizeof(float));
    r->local[2] = malloc(((size_t)tl * c->n_axes + 1) * sizeof(float));
    r->local[3] = malloc(((size_t)il * c->n_axes + 1) * sizeof(float));
    if (!r->local[0] || !r->local[1] || !r->local[2] || !r->local[3])
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE, "out of memory");
    flux_shard_take(r->local[0], in->hs + (size_t)b0 * in->I * c->in_channels, nb, in->I, is, il,
                    (size_t)c->in_channels);
    flux_shard_take(r->local[1], in->ehs + (size_t)b0 * in->T * c->joint_attention_dim, nb,
                    in->T, ts, tl, (size_t)c->joint_attention_dim);
    flux_shard_take(r->local[2], in->txt_ids, 1, in->T, ts, tl, (size_t)c->n_axes);
    flux_shard_take(r->local[3], in->img_ids, 1, in->I, is, il, (size_t)c->n_axes);
    memset(li, 0, sizeof *li);
    li->batch = nb;
    li->txt_len = tl;
    li->img_len = il;
    li->hidden_states = r->local[0];
    li->encoder_hidden_states = r->local[1];
    li->pooled_projections = in->pooled + (size_t)b0 * c->pooled_projection_dim;
    li->timestep = in->timestep + b0;
    li->guidance = in->guidance ? in->guidance + b0 : NULL;
    li->txt_ids = r->local[2];
    li->img_ids = r->local[3];
    return CPDIT_OK;
}

static cpdit_status write_output(const char *path, const float *out, int B, int I, int C,
                                 cpdit_error *err)
{
    const int64_t shape[3] = {B, I, C};
    safetensors_write_tensor t = {"sample", CPDIT_DTYPE_F32, 3, shape, out, CPDIT_DTYPE_F32};
    return safetensors_write(path, &t, 1, NULL, 0, err);
}

/* Open the model with a's weight options, its weights made (one copy per node unless
 * no_weight_sharing), and the inputs read. */
/* Rank 0: refuse a non-finite result (naming the first non-finite weight), else write it. */
static cpdit_status check_and_write(const model_forward_file *a, const run_state *r, int out_dim,
                                    cpdit_error *err)
{
    char dir[4096];
    struct stat sb;
    snprintf(dir, sizeof dir, "%s/transformer", a->model);
    const char *weights = stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) ? dir : a->model;
    cpdit_status st = cpdit_check_result_finite("transformer", "sample", r->out_full,
                                                (size_t)r->in.B * r->in.I * out_dim, weights,
                                                err);
    return st ? st : write_output(a->output, r->out_full, r->in.B, r->in.I, out_dim, err);
}

static cpdit_status open_and_load(const model_forward_file *a, run_state *r,
                                  weight_sharer **sharer, weight_arena_ops *arena,
                                  cpdit_error *err)
{
    cpdit_status st = flux_transformer_open(&r->model, a->model, err);
    if (!st && a->weight_format)
        flux_transformer_set_weight_format(
            r->model, (cpdit_weight_format)cpdit_weight_format_from_name(a->weight_format));
    if (!st && a->weight_memory)
        flux_transformer_set_weight_cache(r->model, a->weight_memory);
    if (!st && a->no_prefetch)
        flux_transformer_set_weight_prefetch(r->model, 0);
    if ((st = cpdit_comm_agree(a->world, st, err)))
        return st;
    if (!a->no_weight_sharing) {
        st = weight_sharer_create(sharer, cpdit_comm_mpi_handle(a->world), err);
        if (!st) {
            *arena = weight_sharer_arena(*sharer);
            flux_transformer_set_weight_arena(r->model, arena);
        }
    }
    if (!st)
        st = flux_transformer_set_backend(r->model, r->attn.backend, err);
    if (!st)
        st = flux_transformer_load_weights(r->model, err);
    if (!st)
        st = load_inputs(a->inputs, flux_transformer_config_of(r->model), &r->in, err);
    return cpdit_comm_agree(a->world, st, err);
}

/* The grid, the token layout, this rank's batch share [*b0, *b0 + *nb) and its tokens, the
 * output buffers. */
static cpdit_status shard(const model_forward_file *a, run_state *r, int out_dim, int *b0,
                          int *nb, flux_inputs *li, cpdit_error *err)
{
    const flux_transformer_config *c = flux_transformer_config_of(r->model);
    cpdit_status st = cp_grid_create_for(cpdit_comm_mpi_handle(a->world), 0, a->ring,
                                         a->ulysses, r->attn.backend, &r->grid, err);
    if (!st) {
        st = flux_shard_layout(&r->layout, r->grid->cp_size, r->in.T, r->in.I, err);
        r->have_layout = !st;
    }
    if (!st)
        st = cp_attention_validate(&r->attn, r->grid->ring, r->grid->ulysses, &r->layout, 1,
                                   c->num_attention_heads, c->attention_head_dim, err);
    if (!st) {
        flux_shard_batch(r->in.B, r->grid->dp, r->grid->dp_index, b0, nb);
        st = take_local(r, *b0, *nb, li, err);
    }
    if (!st) {
        const size_t img_l = (size_t)r->layout.img_len[r->grid->cp_rank];
        r->out_local = malloc(((size_t)*nb * img_l * out_dim + 1) * sizeof(float));
        r->out_group = malloc(((size_t)*nb * r->in.I * out_dim + 1) * sizeof(float));
        r->out_full = malloc(((size_t)r->in.B * r->in.I * out_dim + 1) * sizeof(float));
        if (!r->out_local || !r->out_group || !r->out_full)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE, "out of memory for the output");
    }
    return cpdit_comm_agree(a->world, st, err);
}

/* Forward (groups without items skip it), gather over CP, then over dp, write on rank 0. */
static cpdit_status forward_and_write(const model_forward_file *a, run_state *r,
                                      const flux_inputs *li, int nb, int out_dim,
                                      model_forward_result *res, cpdit_error *err)
{
    cpdit_status st = CPDIT_OK;
    const double t_fwd0 = now_s();
    if (nb > 0) {
        flux_cp cp = {r->grid, r->attn, &r->layout, &r->attn_ws};
        st = flux_transformer_forward(r->model, r->attn.backend, &cp, li, r->out_local, err);
    }
    res->forward_s = now_s() - t_fwd0;
    if (!st && nb > 0)
        st = flux_shard_gather_image(r->out_group, r->out_local, &r->layout, r->grid->cp, nb,
                                     (size_t)out_dim, err);
    st = cpdit_comm_agree(a->world, st, err);
    if (!st)
        st = cpdit_comm_agree(a->world, flux_shard_gather_batch(r->out_full, r->out_group,
                              r->in.B, (size_t)r->in.I * out_dim, r->grid->dp_comm, err), err);
    if (!st)
        st = cpdit_comm_agree(a->world, a->world->rank == 0
                              ? check_and_write(a, r, out_dim, err) : CPDIT_OK, err);
    return st;
}

cpdit_status flux_forward_file(const model_forward_file *a, model_forward_result *res,
                               cpdit_error *err)
{
    run_state r;
    memset(&r, 0, sizeof r);
    memset(res, 0, sizeof *res);
    r.attn = a->attn;
    const double t0 = now_s();
    weight_sharer *sharer = NULL;
    weight_arena_ops arena;
    cpdit_status st = open_and_load(a, &r, &sharer, &arena, err);
    int b0 = 0, nb = 0, out_dim = 0;
    flux_inputs li;
    if (!st) {
        const flux_transformer_config *c = flux_transformer_config_of(r.model);
        out_dim = c->patch_size * c->patch_size * c->out_channels;
        res->load_s = now_s() - t0;
        st = shard(a, &r, out_dim, &b0, &nb, &li, err);
    }
    if (!st) /* agreed: every rank is here */
        st = forward_and_write(a, &r, &li, nb, out_dim, res, err);
    if (!st) {
        res->batch = r.in.B;
        res->text_tokens = r.in.T;
        res->tokens = r.in.I;
        res->params = flux_transformer_param_count(r.model);
        flux_weight_stats_to_model(&res->ws, r.model);
        res->pss_bytes = weight_process_pss_bytes();
        cp_grid_describe(r.grid, res->grid, sizeof res->grid);
    }
    cp_grid_destroy(r.grid);
    run_free(&r);
    weight_sharer_destroy(sharer);
    return st;
}
