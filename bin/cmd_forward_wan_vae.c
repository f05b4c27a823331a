/* cmd_forward_wan_vae.c — `cpdit forward --component vae` on a Wan folder (vae/config.json
 * names AutoencoderKLWan): read "latent_sample" (B, z_dim, T, h, w, any float dtype), run
 * vae.decode, write "sample" (B, out_channels, 1 + 4 (T - 1), 8h, 8w) float32 from rank 0
 * (lib/models/wan/wan_vae.h). The raw vae.decode, as for FLUX: no latent de-normalisation.
 *
 * With more than one rank and --vae-parallel on (the default) all ranks of the job decode
 * together, split by rows (wan_vae_decode_group); --vae-parallel off: rank 0 decodes alone
 * and the others wait for its status. --weight-format fp32 is the exact path, native (the
 * default) the backend's bf16 convolutions for bf16 weights. Every rank returns the same
 * status; the first failing rank's message lands in err.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bin/cmd_forward.h"
#include "bin/forward_ranks.h"
#include "lib/cp/grid_mpi.h"
#include "lib/io/safetensors.h"
#include "lib/models/wan/wan_vae.h"

#define INPUT_NAME "latent_sample"
#define OUTPUT_NAME "sample"
#define MAX_SIDE 16384
#define MAX_FRAMES 100000

cpdit_status wan_vae_forward_command(const forward_options *opt, cpdit_error *err);

/* The decoder and the latent: *z (B, C, T, h, w) malloc'd, dims[5]. */
static cpdit_status load_inputs(const forward_options *opt, wan_vae **d, float **z,
                                int64_t dims[5], cpdit_error *err)
{
    safetensors_file *in = NULL;
    const safetensors_tensor *t = NULL;
    const cpdit_backend *be = NULL;
    const int f = opt->weight_format ? cpdit_weight_format_from_name(opt->weight_format) : -1;
    *z = NULL;
    cpdit_status st = cpdit_backend_resolve(opt->backend, &be, err);
    if (!st)
        st = wan_vae_open(d, opt->model, err);
    if (!st) {
        wan_vae_set_backend(*d, be);
        wan_vae_set_weight_format(*d, f < 0 ? CPDIT_WEIGHT_NATIVE : (cpdit_weight_format)f);
        st = safetensors_open(&in, opt->inputs, err);
    }
    if (!st && !(t = safetensors_find(in, INPUT_NAME)))
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, opt->inputs,
                             "no tensor \"%s\" (the Wan VAE decoder's input, (B, C, T, h, w))",
                             INPUT_NAME);
    if (!st) {
        const int C = wan_vae_config_of(*d)->z_dim;
        if (t->ndim != 5 || t->shape[0] < 1 || t->shape[0] > INT32_MAX || t->shape[1] != C ||
            t->shape[2] < 1 || t->shape[2] > MAX_FRAMES || t->shape[3] < 1 ||
            t->shape[3] > MAX_SIDE || t->shape[4] < 1 || t->shape[4] > MAX_SIDE) {
            char got[96];
            safetensors_shape_text(got, sizeof got, t->shape, t->ndim, "()");
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, opt->inputs,
                                 "tensor \"%s\" has shape %s; expected (B, %d, T, h, w) with "
                                 "1 <= T <= %d and 1 <= h, w <= %d", INPUT_NAME, got, C,
                                 MAX_FRAMES, MAX_SIDE);
        }
    }
    for (int i = 0; !st && i < 5; i++)
        dims[i] = t->shape[i];
    if (!st && !(*z = malloc(t->nelem * sizeof **z)))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "wan vae", "out of memory for the latent");
    if (!st)
        st = safetensors_tensor_read_f32(t, *z, t->nelem, err);
    safetensors_close(in);
    return st;
}

/* Decode on the ranks of g (NULL: this rank alone) and write from rank 0. */
static cpdit_status decode_write(const forward_options *opt, wan_vae *d, const cp_grid *g,
                                 const float *z, const int64_t dims[5], int rank,
                                 cpdit_error *err)
{
    const wan_vae_config *c = wan_vae_config_of(d);
    const int B = (int)dims[0], T = (int)dims[2], h = (int)dims[3], w = (int)dims[4];
    const int f = wan_vae_upscale(c), F = wan_vae_frames(c, T);
    const int64_t shape[5] = {B, c->out_channels, F, (int64_t)h * f, (int64_t)w * f};
    float *out = NULL;
    if (rank == 0 && !(out = malloc((size_t)B * c->out_channels * F * h * f * w * f *
                                    sizeof *out)))
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "wan vae", "out of memory for the video");
    const double t0 = forward_now_s();
    cpdit_status st = wan_vae_decode_group(d, g, z, B, T, h, w, out, err);
    if (!st && opt->verbose && rank == 0)
        fprintf(stderr, "cpdit: forward: wan vae decode (%d -> %d frames) over %d rank(s): "
                        "%.3f s\n", T, F, g ? g->cp_size : 1, forward_now_s() - t0);
    if (!st && rank == 0) {
        safetensors_write_tensor wt = {OUTPUT_NAME, CPDIT_DTYPE_F32, 5, shape, out,
                                       CPDIT_DTYPE_F32};
        st = safetensors_write(opt->output, &wt, 1, NULL, 0, err);
    }
    free(out);
    return st;
}

cpdit_status wan_vae_forward_command(const forward_options *opt, cpdit_error *err)
{
    const int rank = opt->world_rank, size = opt->world_size;
    const int parallel = size > 1 && opt->vae_parallel;
    wan_vae *d = NULL;
    float *z = NULL;
    int64_t dims[5] = {0};
    cp_grid *g = NULL;
    cpdit_status st = CPDIT_OK;
    if (parallel || rank == 0)
        st = load_inputs(opt, &d, &z, dims, err);
    if (parallel) {
        st = forward_agree_world(st, err, rank, size);
        if (!st) {
            const cpdit_backend *be = NULL;
            st = cpdit_backend_resolve(opt->backend, &be, err);
            if (!st)
                st = cp_grid_create_for(MPI_COMM_WORLD, 1, size, 1, be, &g, err);
            st = forward_agree_world(st, err, rank, size);
        }
        if (!st)
            st = forward_agree_world(decode_write(opt, d, g, z, dims, rank, err), err, rank,
                                     size);
    } else {
        if (!st && rank == 0)
            st = decode_write(opt, d, NULL, z, dims, rank, err);
        if (size > 1)
            st = forward_wait_rank0(rank, st, NULL, err);
    }
    cp_grid_destroy(g);
    free(z);
    wan_vae_free(d);
    return st;
}
