/* test_vae_parallel.c — the VAE decode split by rows over N ranks equals the one-rank decode.
 *
 *   mpirun -np N tests/test_vae_parallel (builtin|flux) H W [B]
 *
 * builtin: the VAE of builtin:tiny (16/32/32/32 channels, 8 groups); flux: FLUX.1's decoder
 * config (block_out_channels 128/256/512/512, 2 layers per block, 32 groups, 16 latent
 * channels, no post-quant conv) with random weights (scaled by 1/sqrt(fan-in)), the same on
 * every rank. Every rank decodes its band of a random latent (B, 16, H, W) through
 * vae_decode_group (halo exchange, GroupNorm moments reduced, ring attention); rank 0 also
 * decodes alone with vae_decode and checks max |parallel - single| <= 1e-5 · max |single|.
 * H is chosen by the caller to give uneven bands, bands of one row (H < 2N) and empty ranks
 * (H < N).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/builtin/builtin_model.h"
#include "lib/cp/grid.h"
#include "lib/vae/vae_decoder.h"
#include "tests/test_util.h"

#define PARALLEL_REL_TOL 1e-5

static unsigned long long lcg_state = 2024;

static float frand(void) /* uniform in [-1, 1) */
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((lcg_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* FLUX.1's VAE decoder config with random weights (vae_decoder_fill_random). */
static vae_decoder *flux_decoder(cpdit_error *err)
{
    autoencoder_kl_config c;
    vae_config_flux(&c);
    vae_decoder *d = NULL;
    if (vae_decoder_create(&d, &c, err) != CPDIT_OK)
        return NULL;
    vae_decoder_fill_random(d, 7);
    return d;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        if (rank == 0)
            fprintf(stderr, "usage: test_vae_parallel builtin|flux H W [B]\n");
        MPI_Finalize();
        return 2;
    }
    const int h = atoi(argv[2]), w = atoi(argv[3]), B = argc > 4 ? atoi(argv[4]) : 1;
    cpdit_error err;
    cpdit_error_clear(&err);
    vae_decoder *d = NULL;
    if (!strcmp(argv[1], "flux")) {
        d = flux_decoder(&err);
    } else {
        char dir[4096];
        /* rank 0 writes the cache folder first; the others then find it */
        for (int turn = 0; turn < 2; turn++) {
            if ((turn == 0) == (rank == 0))
                CHECK(builtin_model_resolve("builtin:tiny", dir, sizeof dir, &err) == CPDIT_OK);
            MPI_Barrier(MPI_COMM_WORLD);
        }
        CHECK(vae_decoder_load(&d, dir, &err) == CPDIT_OK);
    }
    CHECK_MSG(d != NULL, "decoder: %s: %s", err.where, err.what);
    if (!d) {
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    const autoencoder_kl_config *c = vae_decoder_config(d);
    const int f = vae_decoder_upscale(d);
    const size_t nz = (size_t)B * c->latent_channels * h * w;
    const size_t nout = (size_t)B * c->out_channels * h * f * w * f;
    float *z = malloc(nz * sizeof *z);
    float *par = rank == 0 ? malloc(nout * sizeof *par) : NULL;
    float *one = rank == 0 ? malloc(nout * sizeof *one) : NULL;
    CHECK(z && (rank != 0 || (par && one)));
    for (size_t i = 0; i < nz; i++)
        z[i] = 1.5f * frand();
    cp_grid *g = NULL;
    CHECK(cp_grid_create(MPI_COMM_WORLD, 1, size, 1, &g, &err) == CPDIT_OK);
    cpdit_status st = vae_decode_group(d, g, z, B, h, w, par, &err);
    CHECK_MSG(st == CPDIT_OK, "rank %d: vae_decode_group: %s: %s", rank, err.where, err.what);
    if (rank == 0) {
        CHECK(vae_decode(d, z, B, h, w, one, &err) == CPDIT_OK);
        double m = 0, diff = 0;
        for (size_t i = 0; i < nout; i++) {
            m = fmax(m, fabs(one[i]));
            diff = fmax(diff, fabs((double)par[i] - one[i]));
        }
        fprintf(stderr, "%s latent (%d, %d, %d, %d) on %d ranks: max |single| %.4g, max |diff| "
                "%.3g, relative %.3g\n", argv[1], B, c->latent_channels, h, w, size, m, diff,
                diff / m);
        CHECK(m > 1e-3 && isfinite(m));
        CHECK_MSG(diff <= PARALLEL_REL_TOL * m, "relative error %.3g > %.0e", diff / m,
                  PARALLEL_REL_TOL);
    }
    cp_grid_destroy(g);
    free(z);
    free(par);
    free(one);
    vae_decoder_free(d);
    int failed = test_failures, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}
