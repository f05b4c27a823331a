/* cmd_forward_wan.c — `cpdit forward --component transformer` on a Wan folder (the
 * transformer's config.json names WanTransformer3DModel): read hidden_states (B, C, F, H, W),
 * timestep (B) (or one value) and encoder_hidden_states (B, L, text_dim) (any float dtype),
 * split the batch over the data-parallel groups and the video tokens over each CP group
 * (balanced; uneven shares and head counts that do not divide Ulysses switch the anything
 * modes on), run the Wan transformer, gather the output in token order and write `sample`
 * (B, out_channels, F, H, W) float32 from rank 0.
 *
 * Every rank returns the same status; err holds the first failing rank's message on every
 * rank (cmd_forward prints rank 0's).
 */
#include "config.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bin/cli.h"
#include "bin/cmd_forward.h"
#include "bin/forward_ranks.h"
#include "lib/cp/cp_attention.h"
#include "lib/cp/cp_shard.h"
#include "lib/cp/grid_mpi.h"
#include "lib/io/model_folder.h"
#include "lib/io/safetensors.h"
#include "lib/models/wan/wan_latents.h"
#include "lib/models/wan/wan_transformer.h"
#include "lib/weights/weight_shared_mpi.h"

#define SUB "forward"
#define WAN_OUTPUT_NAME "sample"

static const char *const WAN_INPUT_NAMES[] = {"hidden_states", "timestep",
                                              "encoder_hidden_states"};
enum { IN_HIDDEN = 0, IN_TIMESTEP, IN_TEXT, IN_COUNT };

int wan_forward_is_wan(const char *model)
{
    model_folder mf;
    cpdit_error err;
    cpdit_error_clear(&err);
    if (model_folder_open(&mf, model, &err))
        return 0;
    model_config mc = {0};
    int is_wan = 0;
    if (!model_folder_load_config(&mf, "transformer", &mc, &err)) {
        const char *cls = model_config_class_name(&mc);
        is_wan = cls && !strcmp(cls, WAN_TRANSFORMER_CLASS);
    }
    model_config_free(&mc);
    model_folder_close(&mf);
    return is_wan;
}

/* Collective over world: the worst status of all ranks; the first failing rank's message
 * lands in err on every rank. */
static cpdit_status agree(cpdit_status st, cpdit_error *err, const forward_options *o)
{
    return forward_agree_world(st, err, o->world_rank, o->world_size);
}

/* ------------------------------------------------------------------ inputs */

typedef struct wan_full_inputs {
    int B, C, F, H, W, L;
    int pf, ph, pw, S;         /* patch grid, video tokens */
    float *x, *timestep, *ehs; /* whole tensors */
} wan_full_inputs;

static void free_inputs(wan_full_inputs *fi)
{
    free(fi->x);
    free(fi->timestep);
    free(fi->ehs);
}

static cpdit_status shape_error(const char *path, const safetensors_tensor *t,
                                const char *expected, cpdit_error *err)
{
    char got[128];
    safetensors_shape_text(got, sizeof got, t->shape, t->ndim, "()");
    return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "tensor '%s' has shape %s; expected %s",
                           t->name, got, expected);
}

static cpdit_status read_all(const safetensors_tensor *t, float **out, cpdit_error *err)
{
    *out = malloc((t->nelem ? t->nelem : 1) * sizeof(float));
    if (!*out)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->file, "out of memory");
    return safetensors_tensor_read_f32(t, *out, t->nelem, err);
}

/* The three tensors, checked against the model's config (nothing else in the file). */
static cpdit_status check_tensors(const char *path, safetensors_file *f,
                                  const wan_transformer_config *c,
                                  const safetensors_tensor *t[IN_COUNT], wan_full_inputs *fi,
                                  cpdit_error *err)
{
    for (size_t i = 0; i < safetensors_count(f); i++) {
        const char *name = safetensors_tensor_at(f, i)->name;
        int known = 0;
        for (int k = 0; k < IN_COUNT; k++)
            known |= !strcmp(name, WAN_INPUT_NAMES[k]);
        if (!known)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                                   "unexpected tensor '%s'; the Wan transformer takes "
                                   "hidden_states, timestep and encoder_hidden_states",
                                   name);
    }
    for (int k = 0; k < IN_COUNT; k++)
        if (!(t[k] = safetensors_find(f, WAN_INPUT_NAMES[k])))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "missing tensor '%s'",
                                   WAN_INPUT_NAMES[k]);
    char want[160];
    const safetensors_tensor *x = t[IN_HIDDEN];
    if (x->ndim != 5 || x->shape[1] != c->in_channels || x->shape[0] < 1 ||
        x->shape[0] > INT32_MAX || x->shape[2] > INT32_MAX || x->shape[3] > INT32_MAX ||
        x->shape[4] > INT32_MAX) {
        snprintf(want, sizeof want, "(batch, in_channels = %d, frames, height, width)",
                 c->in_channels);
        return shape_error(path, x, want, err);
    }
    fi->B = (int)x->shape[0];
    fi->C = (int)x->shape[1];
    fi->F = (int)x->shape[2];
    fi->H = (int)x->shape[3];
    fi->W = (int)x->shape[4];
    cpdit_status st = wan_token_grid(c, fi->F, fi->H, fi->W, &fi->pf, &fi->ph, &fi->pw, err);
    if (st) {
        char why[sizeof err->what];
        snprintf(why, sizeof why, "%s", err->what);
        return cpdit_error_set(err, st, path, "tensor 'hidden_states': %s", why);
    }
    fi->S = fi->pf * fi->ph * fi->pw;
    const safetensors_tensor *e = t[IN_TEXT];
    if (e->ndim != 3 || e->shape[0] != fi->B || e->shape[2] != c->text_dim || e->shape[1] < 1 ||
        e->shape[1] > INT32_MAX / 2) {
        snprintf(want, sizeof want, "(batch = %d, text tokens >= 1, text_dim = %d)", fi->B,
                 c->text_dim);
        return shape_error(path, e, want, err);
    }
    fi->L = (int)e->shape[1];
    const safetensors_tensor *ts = t[IN_TIMESTEP];
    if (ts->ndim > 1 || (ts->nelem != (size_t)fi->B && ts->nelem != 1)) {
        snprintf(want, sizeof want, "(%d) or a single value", fi->B);
        return shape_error(path, ts, want, err);
    }
    return CPDIT_OK;
}

static cpdit_status load_inputs(const char *path, const wan_transformer_config *c,
                                wan_full_inputs *fi, cpdit_error *err)
{
    memset(fi, 0, sizeof *fi);
    safetensors_file *f = NULL;
    cpdit_status st = safetensors_open(&f, path, err);
    if (st)
        return st;
    const safetensors_tensor *t[IN_COUNT] = {0};
    float *ts = NULL;
    st = check_tensors(path, f, c, t, fi, err);
    if (!st)
        st = read_all(t[IN_HIDDEN], &fi->x, err);
    if (!st)
        st = read_all(t[IN_TEXT], &fi->ehs, err);
    if (!st)
        st = read_all(t[IN_TIMESTEP], &ts, err);
    if (!st && !(fi->timestep = malloc((size_t)fi->B * sizeof(float))))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    for (int b = 0; !st && b < fi->B; b++)
        fi->timestep[b] = ts[t[IN_TIMESTEP]->nelem == 1 ? 0 : b];
    free(ts);
    safetensors_close(f);
    return st;
}

/* ------------------------------------------------------------------ the run */

typedef struct wan_run {
    wan_transformer *model;
    weight_sharer *sharer;
    weight_arena_ops arena;
    wan_full_inputs in;
    cp_grid *grid;
    cp_seq_layout layout;
    int have_layout;
    cp_attention_config attn;
    cp_attention_ws attn_ws;
    int b0, nb;                 /* this dp group's items */
    float *patches, *positions; /* this rank's tokens (nb, len, patch_dim), (len, 3) */
    float *out_local, *out_group, *out_tokens, *sample;
} wan_run;

static void run_free(wan_run *r)
{
    free(r->patches);
    free(r->positions);
    free(r->out_local);
    free(r->out_group);
    free(r->out_tokens);
    free(r->sample);
    if (r->have_layout)
        cp_seq_layout_free(&r->layout);
    free_inputs(&r->in);
    cp_attention_ws_release(&r->attn_ws);
    cp_grid_destroy(r->grid);
    wan_transformer_close(r->model);
    weight_sharer_destroy(r->sharer);
}

static cpdit_status open_model(wan_run *r, const forward_options *o, cpdit_error *err)
{
    cpdit_status st = cp_attention_config_parse(o->attention, &r->attn, err);
    r->attn.anything = o->anything;
    if (!st)
        st = cli_backend_resolve(o->backend, o->attention_backend, &r->attn.backend,
                                 &r->attn.kernel, err);
    if (!st)
        st = wan_transformer_open(&r->model, o->model, err);
    if (!st && o->weight_format)
        wan_transformer_set_weight_format(
            r->model, (cpdit_weight_format)cpdit_weight_format_from_name(o->weight_format));
    if (!st && o->weight_memory)
        wan_transformer_set_weight_cache(r->model, o->weight_memory);
    if (!st && o->no_weight_prefetch)
        wan_transformer_set_weight_prefetch(r->model, 0);
    st = agree(st, err, o);
    /* the weights, made once; one copy per node unless --no-weight-sharing */
    if (!st && !o->no_weight_sharing) {
        st = weight_sharer_create(&r->sharer, MPI_COMM_WORLD, err);
        if (!st) {
            r->arena = weight_sharer_arena(r->sharer);
            wan_transformer_set_weight_arena(r->model, &r->arena);
        }
    }
    if (!st)
        st = wan_transformer_set_backend(r->model, r->attn.backend, err);
    if (!st)
        st = wan_transformer_load_weights(r->model, err);
    if (!st)
        st = load_inputs(o->inputs, wan_transformer_config_of(r->model), &r->in, err);
    return agree(st, err, o);
}

/* Grid, layout (strict attention when it can run, else anything), this rank's tokens. */
static cpdit_status shard(wan_run *r, const forward_options *o, cpdit_error *err)
{
    const wan_transformer_config *c = wan_transformer_config_of(r->model);
    const wan_full_inputs *in = &r->in;
    cpdit_status st = cp_grid_create_for(MPI_COMM_WORLD, 0, o->ring, o->ulysses,
                                         r->attn.backend, &r->grid, err);
    if (!st) {
        st = cp_seq_layout_joint(&r->layout, r->grid->cp_size, 0, in->S, err);
        r->have_layout = !st;
    }
    if (!st && cp_attention_validate(&r->attn, r->grid->ring, r->grid->ulysses, &r->layout, 1,
                                     c->num_attention_heads, c->attention_head_dim, err)) {
        r->attn.anything = 1; /* e.g. 12 heads on Ulysses 8, 1560 tokens on 7 ranks */
        cpdit_error_clear(err);
        st = cp_attention_validate(&r->attn, r->grid->ring, r->grid->ulysses, &r->layout, 1,
                                   c->num_attention_heads, c->attention_head_dim, err);
    }
    if (st)
        return agree(st, err, o);
    cp_shard_balanced(in->B, r->grid->dp, r->grid->dp_index, &r->b0, &r->nb);
    const int cr = r->grid->cp_rank, start = r->layout.img_start[cr];
    const int len = r->layout.img_len[cr];
    const size_t P = (size_t)c->patch_dim, item = (size_t)in->C * in->F * in->H * in->W;
    float *all = malloc(((size_t)in->S * P + (size_t)in->S * 3 + 1) * sizeof(float));
    r->patches = malloc(((size_t)r->nb * len * P + 1) * sizeof(float));
    r->positions = malloc(((size_t)len * 3 + 1) * sizeof(float));
    r->out_local = malloc(((size_t)r->nb * len * c->out_dim + 1) * sizeof(float));
    r->out_group = malloc(((size_t)r->nb * in->S * c->out_dim + 1) * sizeof(float));
    r->out_tokens = malloc(((size_t)in->B * in->S * c->out_dim + 1) * sizeof(float));
    if (!all || !r->patches || !r->positions || !r->out_local || !r->out_group ||
        !r->out_tokens) {
        free(all);
        return agree(cpdit_error_set(err, CPDIT_ERR_RUNTIME, SUB, "out of memory"), err, o);
    }
    float *pos = all + (size_t)in->S * P;
    wan_token_positions(pos, in->pf, in->ph, in->pw);
    memcpy(r->positions, pos + (size_t)start * 3, (size_t)len * 3 * sizeof(float));
    for (int b = 0; b < r->nb; b++) {
        wan_patchify(all, in->x + (size_t)(r->b0 + b) * item, 1, in->C, in->F, in->H, in->W,
                     c->patch_size[0], c->patch_size[1], c->patch_size[2]);
        memcpy(r->patches + (size_t)b * len * P, all + (size_t)start * P,
               (size_t)len * P * sizeof(float));
    }
    free(all);
    return agree(CPDIT_OK, err, o);
}

/* out_tokens (B, S, out_dim) on every rank <- each rank's (nb, len, out_dim). */
static cpdit_status gather(wan_run *r, cpdit_error *err)
{
    const size_t W = (size_t)wan_transformer_config_of(r->model)->out_dim;
    const cp_seq_layout *l = &r->layout;
    const int n = l->nranks, dpn = r->grid->dp, S = r->in.S;
    size_t *counts = calloc(2 * (size_t)(n > dpn ? n : dpn), sizeof(size_t));
    float *recv = malloc(((size_t)r->nb * S * W + 1) * sizeof(float));
    cpdit_status st = CPDIT_OK;
    if (!counts || !recv)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, SUB, "out of memory");
    size_t *displs = counts + (n > dpn ? n : dpn);
    if (!st && r->nb > 0) { /* over the CP group: segment r is (nb, len[r], W) */
        size_t at = 0;
        for (int k = 0; k < n; k++) {
            counts[k] = (size_t)r->nb * l->img_len[k] * W;
            displs[k] = at;
            at += counts[k];
        }
        st = cpdit_comm_allgatherv(r->grid->cp, CPDIT_COMM_FLOAT, r->out_local,
                                   counts[r->grid->cp_rank], recv, counts, displs, err);
        for (int k = 0; !st && k < n; k++)
            for (int b = 0; b < r->nb; b++)
                memcpy(r->out_group + ((size_t)b * S + l->img_start[k]) * W,
                       recv + displs[k] + (size_t)b * l->img_len[k] * W,
                       (size_t)l->img_len[k] * W * sizeof(float));
    }
    if (!st) { /* over the dp groups: group d's items */
        for (int d = 0; d < dpn; d++) {
            int start, count;
            cp_shard_balanced(r->in.B, dpn, d, &start, &count);
            counts[d] = (size_t)count * S * W;
            displs[d] = (size_t)start * S * W;
        }
        st = cpdit_comm_allgatherv(r->grid->dp_comm, CPDIT_COMM_FLOAT, r->out_group,
                                   counts[r->grid->dp_index], r->out_tokens, counts, displs,
                                   err);
    }
    free(counts);
    free(recv);
    return st;
}

static cpdit_status write_sample(wan_run *r, const char *model, const char *path,
                                 cpdit_error *err)
{
    const wan_transformer_config *c = wan_transformer_config_of(r->model);
    const wan_full_inputs *in = &r->in;
    const size_t n = (size_t)in->B * c->out_channels * in->F * in->H * in->W;
    if (!(r->sample = malloc(n * sizeof(float))))
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, SUB, "out of memory for the output");
    wan_unpatchify(r->sample, r->out_tokens, in->B, c->out_channels, in->F, in->H, in->W,
                   c->patch_size[0], c->patch_size[1], c->patch_size[2]);
    cpdit_status st = cli_check_forward_result("transformer", model, r->sample, n, err);
    if (st) /* NaN/Inf: named, nothing written */
        return st;
    const int64_t shape[5] = {in->B, c->out_channels, in->F, in->H, in->W};
    safetensors_write_tensor t = {WAN_OUTPUT_NAME, CPDIT_DTYPE_F32, 5, shape, r->sample,
                                  CPDIT_DTYPE_F32};
    return safetensors_write(path, &t, 1, NULL, 0, err);
}

static void report(const wan_run *r, const forward_options *o, double t_load, double fwd)
{
    double max_fwd = 0;
    MPI_Reduce(&fwd, &max_fwd, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (o->world_rank)
        return;
    const wan_transformer_config *c = wan_transformer_config_of(r->model);
    const double lin = wan_transformer_linear_flops(r->model, r->in.B, r->in.S, r->in.L);
    const double att = (double)c->num_layers *
                       (cp_attention_flops(r->in.B, r->in.S, c->num_attention_heads,
                                           c->attention_head_dim) +
                        4.0 * r->in.B * r->in.S * r->in.L * c->num_attention_heads *
                            c->attention_head_dim);
    char gd[128];
    fprintf(stderr,
            "cpdit: forward: wan, %s, %s attention%s; batch %d, %d video tokens (%d x %d x %d) "
            "+ %d text tokens\n"
            "cpdit: forward: load %.3f s, forward %.3f s (slowest rank); %.1f GFLOP linear + "
            "%.1f GFLOP attention = %.1f GFLOP/s; %zu parameters; weights %s, %s, %.1f MiB "
            "held\n",
            cp_grid_describe(r->grid, gd, sizeof gd), cp_attention_config_name(&r->attn),
            r->attn.anything ? " (anything)" : "", r->in.B, r->in.S, r->in.pf, r->in.ph,
            r->in.pw, r->in.L, t_load, max_fwd, lin * 1e-9, att * 1e-9,
            max_fwd > 0 ? (lin + att) * 1e-9 / max_fwd : 0.0,
            wan_transformer_param_count(r->model),
            o->weight_format ? o->weight_format : "native",
            wan_transformer_weights_resident(r->model) ? "made once" : "streamed per block",
            wan_transformer_weight_bytes(r->model) / 1048576.0);
}

cpdit_status wan_transformer_forward_command(const forward_options *o, cpdit_error *err)
{
    wan_run r;
    memset(&r, 0, sizeof r);
    const double t0 = forward_now_s();
    cpdit_status st = open_model(&r, o, err);
    if (!st)
        st = shard(&r, o, err);
    const double t_load = forward_now_s() - t0;
    double t_fwd = 0;
    if (!st) {
        wan_inputs li = {.batch = r.nb,
                         .vid_len = r.layout.img_len[r.grid->cp_rank],
                         .hidden_states = r.patches,
                         .positions = r.positions,
                         .timestep = r.in.timestep + r.b0,
                         .text_len = r.in.L,
                         .encoder_hidden_states =
                             r.in.ehs + (size_t)r.b0 * r.in.L *
                                            wan_transformer_config_of(r.model)->text_dim};
        wan_cp cp = {r.grid, r.attn, &r.layout, &r.attn_ws};
        const double t1 = forward_now_s();
        if (r.nb > 0) /* dp groups past the batch have nothing to run */
            st = wan_transformer_forward(r.model, r.attn.backend, &cp, &li, r.out_local, err);
        t_fwd = forward_now_s() - t1;
        st = agree(st, err, o);
    }
    if (!st)
        st = agree(gather(&r, err), err, o);
    if (!st)
        st = agree(o->world_rank == 0 ? write_sample(&r, o->model, o->output, err) : CPDIT_OK, err, o);
    if (!st && o->verbose)
        report(&r, o, t_load, t_fwd);
    run_free(&r);
    return st;
}
