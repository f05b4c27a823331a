/* cmd_forward.c — `cpdit forward` (see cmd_forward.h): option parsing, MPI start-up, and the
 * transformer component: read the inputs, split the batch over data-parallel groups and the
 * tokens over each CP group, run the FLUX transformer, gather the output in the original
 * order, and write `sample` (float32) from rank 0.
 *
 * Errors: every rank reaches the same checkpoints; when any rank failed, the lowest failing
 * rank prints its message ("cpdit: <where>: <what>") and every rank exits with its status
 * (2 bad input, 1 runtime failure).
 */
#include "config.h"

#include <getopt.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kernels/backend.h"
#include "bin/cli.h"
#include "bin/cmd_forward.h"
#include "lib/cp/cp_attention.h"
#include "lib/flux/flux_shard.h"
#include "lib/flux/flux_transformer.h"
#include "lib/cp/grid_mpi.h"
#include "lib/io/safetensors.h"
#include "lib/weights/weight_shared_mpi.h"

#define SUB "forward"

/* Weak: resolved when the VAE module is linked in, NULL otherwise. */
extern cpdit_status vae_forward_command(const forward_options *opt, cpdit_error *err)
    __attribute__((weak));

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ options */

/* Parse argv into o. Returns 0, or -1 after printing a usage error (rank 0 only). */
static int parse_options(int argc, char **argv, forward_options *o, int quiet)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"component", required_argument, 0, 'c'},
        {"inputs", required_argument, 0, 'i'},    {"output", required_argument, 0, 'o'},
        {"attention", required_argument, 0, 'A'}, {"attention-backend", required_argument, 0, 'K'},
        {"backend", required_argument, 0, 'B'},   {"ulysses", required_argument, 0, 'U'},
        {"ring", required_argument, 0, 'R'},      {"anything", no_argument, 0, 'a'},
        {"verbose", no_argument, 0, 'v'},         {"weight-format", required_argument, 0, 'F'},
        {"vae-parallel", required_argument, 0, 'P'}, {"no-weight-sharing", no_argument, 0, 'N'},
        {"weight-memory", required_argument, 0, 'M'}, {"no-weight-prefetch", no_argument, 0, 'X'},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->ulysses = o->ring = 1;
    o->vae_parallel = 1;
    const char *vae_parallel = NULL;
    long n;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "v", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'c': o->component = optarg; break;
        case 'i': o->inputs = optarg; break;
        case 'o': o->output = optarg; break;
        case 'A': o->attention = optarg; break;
        case 'K': o->attention_backend = optarg; break;
        case 'B': o->backend = optarg; break;
        case 'F': o->weight_format = optarg; break;
        case 'P': vae_parallel = optarg; break;
        case 'a': o->anything = 1; break;
        case 'N': o->no_weight_sharing = 1; break;
        case 'X': o->no_weight_prefetch = 1; break;
        case 'M':
            if (cli_parse_size(optarg, &o->weight_memory)) {
                if (!quiet)
                    cli_usage_error(SUB, "--weight-memory: expected a size such as 8G, 512M or "
                                         "4096, got '%s'", optarg);
                return -1;
            }
            break;
        case 'v': o->verbose = 1; break;
        case 'U':
        case 'R':
            if (quiet) {
                char *end;
                n = strtol(optarg, &end, 10);
                if (!*optarg || *end || n < 1 || n > 1 << 20)
                    return -1;
            } else if (cli_parse_int(SUB, c == 'U' ? "--ulysses" : "--ring", optarg, 1,
                                     1 << 20, &n)) {
                return -1;
            }
            *(c == 'U' ? &o->ulysses : &o->ring) = (int)n;
            break;
        default:
            if (!quiet)
                cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        if (!quiet)
            cli_usage_error(SUB, "unexpected argument '%s'", argv[optind]);
        return -1;
    }
    cli_attention_alias(&o->attention, &o->attention_backend);
    if (vae_parallel) {
        if (strcmp(vae_parallel, "on") && strcmp(vae_parallel, "off")) {
            if (!quiet)
                cli_usage_error(SUB, "--vae-parallel: '%s'; use on or off", vae_parallel);
            return -1;
        }
        o->vae_parallel = !strcmp(vae_parallel, "on");
    }
    const char *missing = !o->model       ? "--model DIR"
                          : !o->component ? "--component transformer|vae|text_encoder"
                          : !o->inputs    ? "--inputs IN.safetensors"
                          : !o->output    ? "--output OUT.safetensors"
                                          : NULL;
    if (missing) {
        if (!quiet)
            cli_usage_error(SUB, "missing %s", missing);
        return -1;
    }
    if (o->weight_format && cpdit_weight_format_from_name(o->weight_format) < 0) {
        if (!quiet)
            cli_usage_error(SUB, "--weight-format: unknown format '%s'; use native or fp32",
                            o->weight_format);
        return -1;
    }
    if (strcmp(o->component, "transformer") && strcmp(o->component, "vae") &&
        strcmp(o->component, "text_encoder")) {
        if (!quiet)
            cli_usage_error(SUB, "--component: unknown component '%s'; use transformer, vae or "
                                 "text_encoder", o->component);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ rank agreement */

/* Collective over world: if any rank's st is not OK, the lowest such rank prints its error;
 * every rank gets the worst status back (INPUT beats RUNTIME: the user can fix it). */
static cpdit_status agree(cpdit_status st, const cpdit_error *err, const forward_options *o)
{
    int mine[2] = {st ? o->world_rank : o->world_size, (int)st};
    int first = 0, worst = 0;
    MPI_Allreduce(&mine[0], &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine[1], &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (first < o->world_size && first == o->world_rank)
        cli_report(err);
    return (cpdit_status)worst;
}

static int exit_code(cpdit_status st)
{
    return st == CPDIT_OK ? CLI_EXIT_OK : st == CPDIT_ERR_INPUT ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME;
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
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, SUB, "out of memory");
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

static int run_transformer(const forward_options *o)
{
    run_state r;
    memset(&r, 0, sizeof r);
    cpdit_error err;
    cpdit_error_clear(&err);
    const double t0 = now_s();

    cpdit_status st = cp_attention_config_parse(o->attention, &r.attn, &err);
    r.attn.anything = o->anything;
    if (!st)
        st = cli_backend_resolve(o->backend, o->attention_backend, &r.attn.backend,
                                 &r.attn.kernel, &err);
    if (!st)
        st = flux_transformer_open(&r.model, o->model, &err);
    if (!st && o->weight_format)
        flux_transformer_set_weight_format(
            r.model, (cpdit_weight_format)cpdit_weight_format_from_name(o->weight_format));
    if (!st && o->weight_memory)
        flux_transformer_set_weight_cache(r.model, o->weight_memory);
    if (!st && o->no_weight_prefetch)
        flux_transformer_set_weight_prefetch(r.model, 0);
    if ((st = agree(st, &err, o))) {
        run_free(&r);
        return exit_code(st);
    }
    /* the weights, made once; one copy per node unless --no-weight-sharing */
    weight_sharer *sharer = NULL;
    weight_arena_ops arena;
    if (!o->no_weight_sharing) {
        st = weight_sharer_create(&sharer, MPI_COMM_WORLD, &err);
        if (!st) {
            arena = weight_sharer_arena(sharer);
            flux_transformer_set_weight_arena(r.model, &arena);
        }
    }
    if (!st)
        st = flux_transformer_set_backend(r.model, r.attn.backend, &err);
    if (!st)
        st = flux_transformer_load_weights(r.model, &err);
    if (!st)
        st = load_inputs(o->inputs, flux_transformer_config_of(r.model), &r.in, &err);
    if ((st = agree(st, &err, o))) {
        run_free(&r);
        return exit_code(st);
    }
    const flux_transformer_config *c = flux_transformer_config_of(r.model);
    const int out_dim = c->patch_size * c->patch_size * c->out_channels;
    const double t_load = now_s();

    /* grid, layout, batch share */
    st = cp_grid_create_for(MPI_COMM_WORLD, 0, o->ring, o->ulysses, r.attn.backend, &r.grid,
                            &err);
    if (!st) {
        st = flux_shard_layout(&r.layout, r.grid->cp_size, r.in.T, r.in.I, &err);
        r.have_layout = !st;
    }
    if (!st)
        st = cp_attention_validate(&r.attn, r.grid->ring, r.grid->ulysses, &r.layout, 1,
                                   c->num_attention_heads, c->attention_head_dim, &err);
    int b0 = 0, nb = 0;
    flux_inputs li;
    if (!st) {
        flux_shard_batch(r.in.B, r.grid->dp, r.grid->dp_index, &b0, &nb);
        st = take_local(&r, b0, nb, &li, &err);
    }
    if (!st) {
        const size_t img_l = (size_t)r.layout.img_len[r.grid->cp_rank];
        r.out_local = malloc(((size_t)nb * img_l * out_dim + 1) * sizeof(float));
        r.out_group = malloc(((size_t)nb * r.in.I * out_dim + 1) * sizeof(float));
        r.out_full = malloc(((size_t)r.in.B * r.in.I * out_dim + 1) * sizeof(float));
        if (!r.out_local || !r.out_group || !r.out_full)
            st = cpdit_error_set(&err, CPDIT_ERR_RUNTIME, SUB, "out of memory for the output");
    }
    if ((st = agree(st, &err, o))) {
        cp_grid_destroy(r.grid);
        run_free(&r);
        return exit_code(st);
    }

    /* forward (groups without items skip it), gather over CP, then over dp */
    const double t_fwd0 = now_s();
    if (nb > 0) {
        flux_cp cp = {r.grid, r.attn, &r.layout, &r.attn_ws};
        st = flux_transformer_forward(r.model, r.attn.backend, &cp, &li, r.out_local, &err);
    }
    const double t_fwd1 = now_s();
    if (!st && nb > 0)
        st = flux_shard_gather_image(r.out_group, r.out_local, &r.layout, r.grid->cp, nb,
                                     (size_t)out_dim, &err);
    st = agree(st, &err, o);
    if (!st) {
        st = flux_shard_gather_batch(r.out_full, r.out_group, r.in.B,
                                     (size_t)r.in.I * out_dim, r.grid->dp_comm, &err);
        st = agree(st, &err, o);
    }
    if (!st) {
        if (o->world_rank == 0)
            st = write_output(o->output, r.out_full, r.in.B, r.in.I, out_dim, &err);
        st = agree(st, &err, o);
    }
    if (!st && o->verbose) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        long peak_kib = ru.ru_maxrss, max_peak = 0;
        long pss_kib = (long)(weight_process_pss_bytes() >> 10), max_pss = 0;
        double fwd = t_fwd1 - t_fwd0, max_fwd = 0;
        MPI_Reduce(&peak_kib, &max_peak, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&pss_kib, &max_pss, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&fwd, &max_fwd, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        flux_weight_stats ws;
        flux_transformer_weight_stats(r.model, &ws);
        if (o->world_rank == 0)
            fprintf(stderr,
                    "cpdit: forward: weights %s, %s%s, %.1f MiB of linear layers (largest "
                    "block %.1f MiB), made in %.3f s (the forward waited %.3f s; %llu blocks "
                    "made ahead); PSS %.1f MiB (largest rank, shared pages split among "
                    "sharers)\n",
                    o->weight_format ? o->weight_format : "native",
                    ws.resident ? "made once" : "streamed per block",
                    ws.shared ? " in node-shared memory" : "", ws.matrix_bytes / 1048576.0,
                    ws.largest_group_bytes / 1048576.0,
                    ws.create_seconds, ws.stall_seconds, ws.prefetched_groups,
                    max_pss / 1024.0);
        /* per rank: PSS, and who made its streamed blocks (shared slots: made once per node) */
        double mine[4] = {(double)pss_kib, (double)ws.stream_sharers, (double)ws.peer_groups,
                          (double)ws.bytes_read};
        double *all = o->world_rank == 0 ? malloc(4 * sizeof *all * (size_t)o->world_size)
                                         : NULL;
        MPI_Gather(mine, 4, MPI_DOUBLE, all, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        for (int k = 0; all && k < o->world_size; k++) {
            char how[64];
            if (ws.resident)
                snprintf(how, sizeof how, "weights made once");
            else if (all[4 * k + 1] > 1)
                snprintf(how, sizeof how, "streaming slots shared by %.0f ranks",
                         all[4 * k + 1]);
            else
                snprintf(how, sizeof how, "streaming slots its own");
            fprintf(stderr,
                    "cpdit: forward: rank %d: PSS %.1f MiB; %s; %.0f blocks made by another "
                    "rank, %.1f MiB of weights read\n",
                    k, all[4 * k] / 1024.0, how, all[4 * k + 2], all[4 * k + 3] / 1048576.0);
        }
        free(all);
        if (o->world_rank == 0) {
            char gd[128];
            fprintf(stderr,
                    "cpdit: forward: %s, %s attention%s; batch %d, %d text + %d image tokens\n"
                    "cpdit: forward: load %.3f s, forward %.3f s (slowest rank), total %.3f s; "
                    "%zu parameters, peak RSS %.1f MiB (largest rank)\n",
                    cp_grid_describe(r.grid, gd, sizeof gd), cp_attention_config_name(&r.attn),
                    o->anything ? " (anything)" : "", r.in.B, r.in.T, r.in.I, t_load - t0,
                    max_fwd, now_s() - t0, flux_transformer_param_count(r.model),
                    (double)max_peak / 1024.0);
        }
    }
    cp_grid_destroy(r.grid);
    run_free(&r);
    weight_sharer_destroy(sharer);
    return exit_code(st);
}

/* ------------------------------------------------------------------ entry */

int cmd_forward(int argc, char **argv)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "cpdit: %s: MPI_Init failed\n", SUB);
        return CLI_EXIT_RUNTIME;
    }
    cpdit_backends_bind_mpi(); /* each rank to its device (collective, right after MPI_Init) */
    forward_options o;
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rc;
    if (parse_options(argc, argv, &o, rank != 0)) {
        rc = CLI_EXIT_USAGE;
    } else {
        o.world_rank = rank;
        o.world_size = size;
        cpdit_backend_set_verbose(o.verbose && rank == 0); /* e.g. what attention auto picks */
        if (!strcmp(o.component, "transformer") && wan_forward_is_wan(o.model)) {
            cpdit_error err; /* Wan: bin/cmd_forward_wan.c */
            cpdit_error_clear(&err);
            cpdit_status st = wan_transformer_forward_command(&o, &err);
            if (st && rank == 0)
                cli_report(&err);
            rc = exit_code(st);
        } else if (!strcmp(o.component, "transformer")) {
            rc = run_transformer(&o);
        } else if (!strcmp(o.component, "text_encoder")) { /* bin/cmd_forward_text.c */
            cpdit_error err;
            cpdit_error_clear(&err);
            cpdit_status st = text_encoder_forward_command(&o, &err);
            if (st && rank == 0)
                cli_report(&err);
            rc = exit_code(st);
        } else if (vae_forward_command) {
            cpdit_error err;
            cpdit_error_clear(&err);
            cpdit_status st = vae_forward_command(&o, &err);
            if (st && rank == 0)
                cli_report(&err);
            rc = exit_code(st);
        } else {
            if (rank == 0)
                fprintf(stderr, "cpdit: %s: --component vae: this build does not include the "
                                "VAE decoder yet\n", SUB);
            rc = CLI_EXIT_RUNTIME;
        }
    }
    if (!inited)
        MPI_Finalize();
    return rc;
}
