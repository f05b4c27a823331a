/* cmd_forward_vae.c — `cpdit forward --component vae`: the VAE part of cmd_forward (see
 * cmd_forward.h): read tensor "latent_sample" (B, latent_channels, h, w, any float dtype),
 * vae.decode it, write tensor "sample" (B, out_channels, h·f, w·f) float32 from rank 0.
 *
 * With more than one rank (and --vae-parallel on, the default) every rank loads the decoder
 * and the input and the decode is split by rows over all ranks of the job (one ring group,
 * vae_decode_group); the RGB rows are gathered on rank 0, which writes. --vae-parallel off:
 * rank 0 decodes alone while the other ranks wait for its status without spinning on a core.
 * Every rank returns the same status; rank 0's err holds the first failing rank's message.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bin/cli.h"
#include "bin/cmd_forward.h"
#include "bin/forward_ranks.h"
#include "lib/cp/comm_mpi.h"
#include "lib/cp/grid_mpi.h"
#include "lib/io/safetensors.h"
#include "lib/vae/vae_decoder.h"
#include "lib/models/wan/wan_vae.h"

/* A Wan folder (vae/ is AutoencoderKLWan): bin/cmd_forward_wan_vae.c. */
cpdit_status wan_vae_forward_command(const forward_options *opt, cpdit_error *err);

#define VAE_INPUT_NAME "latent_sample"
#define VAE_OUTPUT_NAME "sample"
/* Largest latent side accepted: keeps h·f and every product in range. */
#define VAE_MAX_LATENT_SIDE 16384

/* --weight-format of the options (native when not given). */
static cpdit_weight_format forward_format(const forward_options *opt)
{
    const int f = opt->weight_format ? cpdit_weight_format_from_name(opt->weight_format) : -1;
    return f < 0 ? CPDIT_WEIGHT_NATIVE : (cpdit_weight_format)f;
}

/* The decoder and the latent of the input file: *z (B, C, h, w) malloc'd. */
static cpdit_status load_inputs(const char *model_dir, const char *inputs_path,
                                const char *backend, cpdit_weight_format format,
                                vae_decoder **d, float **z, int *B, int *h, int *w,
                                cpdit_error *err)
{
    safetensors_file *in = NULL;
    const safetensors_tensor *t = NULL;
    const cpdit_backend *be = NULL;
    *z = NULL;
    cpdit_status st = cpdit_backend_resolve(backend, &be, err); /* --backend */
    if (st == CPDIT_OK)
        st = vae_decoder_load(d, model_dir, err);
    if (st == CPDIT_OK) { /* --weight-format: native (bf16 convolutions) by default, or fp32 */
        vae_decoder_set_backend(*d, be);
        vae_decoder_set_weight_format(*d, format);
    }
    if (st == CPDIT_OK)
        st = safetensors_open(&in, inputs_path, err);
    if (st == CPDIT_OK && !(t = safetensors_find(in, VAE_INPUT_NAME)))
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, inputs_path,
                             "no tensor \"%s\" (the VAE decoder's input, (B, C, h, w))",
                             VAE_INPUT_NAME);
    if (st == CPDIT_OK) {
        const int C = vae_decoder_config(*d)->latent_channels;
        if (t->ndim != 4 || t->shape[1] != C || t->shape[0] < 1 || t->shape[2] < 1 ||
            t->shape[3] < 1 || t->shape[0] > INT32_MAX || t->shape[2] > VAE_MAX_LATENT_SIDE ||
            t->shape[3] > VAE_MAX_LATENT_SIDE) {
            char got[96];
            safetensors_shape_text(got, sizeof got, t->shape, t->ndim, "()");
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, inputs_path,
                                 "tensor \"%s\" has shape %s; expected (B, %d, h, w) with "
                                 "1 <= h, w <= %d", VAE_INPUT_NAME, got, C, VAE_MAX_LATENT_SIDE);
        } else {
            *B = (int)t->shape[0];
            *h = (int)t->shape[2];
            *w = (int)t->shape[3];
        }
    }
    if (st == CPDIT_OK && !(*z = malloc(t->nelem * sizeof **z)))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae", "out of memory for the latent");
    if (st == CPDIT_OK)
        st = safetensors_tensor_read_f32(t, *z, t->nelem, err);
    safetensors_close(in);
    return st;
}


static cpdit_status write_output(const forward_options *opt, const vae_decoder *d,
                                 const float *img, int B, int h, int w, cpdit_error *err)
{
    const int f = vae_decoder_upscale(d);
    const int64_t shape[4] = {B, vae_decoder_config(d)->out_channels, (int64_t)h * f,
                              (int64_t)w * f};
    safetensors_write_tensor wt = {VAE_OUTPUT_NAME, CPDIT_DTYPE_F32, 4, shape, img,
                                   CPDIT_DTYPE_F32};
    const size_t n = (size_t)(shape[0] * shape[1] * shape[2] * shape[3]);
    cpdit_status st = cli_check_forward_result("vae", opt->model, img, n, err);
    return st ? st : safetensors_write(opt->output, &wt, 1, NULL, 0, err);
}

static float *alloc_image(const vae_decoder *d, int B, int h, int w)
{
    const size_t f = (size_t)vae_decoder_upscale(d);
    return malloc((size_t)B * vae_decoder_config(d)->out_channels * h * f * w * f *
                  sizeof(float));
}

/* All ranks decode together; rank 0 writes. */
static cpdit_status forward_parallel(const forward_options *opt, cpdit_error *err)
{
    vae_decoder *d = NULL;
    float *z = NULL, *img = NULL;
    cp_grid *g = NULL;
    int B = 0, h = 0, w = 0;
    const int rank = opt->world_rank, size = opt->world_size;
    cpdit_status st = load_inputs(opt->model, opt->inputs, opt->backend, forward_format(opt), &d,
                                  &z, &B, &h, &w, err);
    if (st == CPDIT_OK && rank == 0 && !(img = alloc_image(d, B, h, w)))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae", "out of memory for the image");
    st = cpdit_comm_agree_mpi(MPI_COMM_WORLD, st, err);
    if (st == CPDIT_OK) {
        const cpdit_backend *grid_be = NULL;
        st = cpdit_backend_resolve(opt->backend, &grid_be, err);
        if (!st)
            st = cp_grid_create_for(MPI_COMM_WORLD, 1, size, 1, grid_be, &g, err);
        st = cpdit_comm_agree_mpi(MPI_COMM_WORLD, st, err);
    }
    const double t0 = forward_now_s();
    if (st == CPDIT_OK)
        st = cpdit_comm_agree_mpi(MPI_COMM_WORLD, vae_decode_group(d, g, z, B, h, w, img, err),
                                  err);
    if (st == CPDIT_OK && opt->verbose && rank == 0)
        fprintf(stderr, "cpdit: forward: vae decode over %d ranks: %.3f s\n", size,
                forward_now_s() - t0);
    if (st == CPDIT_OK)
        st = cpdit_comm_agree_mpi(MPI_COMM_WORLD,
                                  rank == 0 ? write_output(opt, d, img, B, h, w, err)
                                            : CPDIT_OK, err);
    cp_grid_destroy(g);
    free(z);
    free(img);
    vae_decoder_free(d);
    return st;
}

/* Rank 0 decodes alone. */
static cpdit_status forward_rank0(const forward_options *opt, cpdit_error *err)
{
    vae_decoder *d = NULL;
    float *z = NULL, *img = NULL;
    int B = 0, h = 0, w = 0;
    const double t0 = forward_now_s();
    cpdit_status st = load_inputs(opt->model, opt->inputs, opt->backend, forward_format(opt), &d,
                                  &z, &B, &h, &w, err);
    if (st == CPDIT_OK && !(img = alloc_image(d, B, h, w)))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "vae", "out of memory for the image");
    if (st == CPDIT_OK)
        st = vae_decode(d, z, B, h, w, img, err);
    if (st == CPDIT_OK)
        st = write_output(opt, d, img, B, h, w, err);
    if (opt->verbose && st == CPDIT_OK)
        fprintf(stderr, "cpdit: forward: vae decode on rank 0: %.3f s\n", forward_now_s() - t0);
    free(z);
    free(img);
    vae_decoder_free(d);
    return st;
}

cpdit_status vae_forward_command(const forward_options *opt, cpdit_error *err)
{
    if (wan_vae_is_wan(opt->model))
        return wan_vae_forward_command(opt, err);
    if (opt->world_size > 1 && opt->vae_parallel)
        return forward_parallel(opt, err);
    const cpdit_status st = opt->world_rank == 0 ? forward_rank0(opt, err) : CPDIT_OK;
    return forward_wait_rank0(opt->world_rank, st, "the VAE decode failed on rank 0", err);
}
