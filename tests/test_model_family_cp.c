/* test_model_family_cp.c — the family interface's sharded forward on CP grids, for every
 * model given (tests/model_family_cp.sh: builtin:shapes for FLUX, a tiny random Wan):
 *
 *   test_model_family_cp DIR WIDTH HEIGHT FRAMES TEXT [DIR ...]   (under mpirun, any ranks)
 *
 * For each model, opened transformer-only in fp32 through model_open: synthetic text, fixed
 * latents packed by the family, one forward on the whole sequence (no grid) as the reference;
 * then on the grids ring = N and ulysses = N over all N ranks (uneven shares and heads that do
 * not divide switch "anything" on inside shard_open): each rank's share from shard_range, its
 * forward, gather -> every rank's gathered tokens equal the reference within
 * max|got - want| / max|want| <= 1e-5 (the grids only reorder sums), and gather hands back the
 * tokens unchanged. unpack(pack(x)) == x exactly. Wan: unpack(the interface's velocity) equals
 * the transformer's own output put back by wan_unpatchify within 1e-6 (the family reorders
 * each token from proj_out's (kt, kh, kw, c) to the latents' (c, kt, kh, kw)).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/builtin/builtin_model.h"
#include "lib/cp/grid_mpi.h"
#include "lib/models/model.h"
#include "lib/models/wan/wan_latents.h"
#include "lib/models/wan/wan_transformer.h"
#include "tests/test_util.h"

#define TOL_CP 1e-5
#define TEXT_SEED 11u

/* Fixed values in [-1, 1). */
static void fill(float *p, size_t n, unsigned seed)
{
    unsigned x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (float)(x >> 8) / (float)(1u << 23) - 1.0f;
    }
}

/* max|a - b| / max|b| over n values. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

/* One forward of the whole (grid NULL) or of this rank's share, gathered into v (S, dim). */
static cpdit_status forward_on(cpdit_model *m, const model_geometry *g, const cp_grid *grid,
                               const model_text *const *texts, const float *x, float *v,
                               cpdit_error *err)
{
    const model_family *f = m->family;
    cp_attention_config attn;
    memset(&attn, 0, sizeof attn);
    cpdit_status st = cp_attention_config_parse("auto", &attn, err);
    model_shard *sh = NULL;
    if (!st)
        st = f->shard_open(m, g, grid, &attn, texts, 1, &sh, err);
    if (st)
        return st;
    long long start, len;
    f->shard_range(sh, &start, &len);
    const size_t n = (size_t)len * g->token_dim;
    float *vl = malloc((n + 1) * sizeof *vl);
    const model_step step = {0, 0.5f, 0.5f, 3.5f};
    if (!vl)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "test", "out of memory");
    if (!st)
        st = f->forward(m, sh, 0, x + (size_t)start * g->token_dim, &step, vl, err);
    if (!st)
        st = f->gather(sh, vl, v, err);
    free(vl);
    f->shard_close(sh);
    return st;
}

/* Wan: the interface's velocity, unpacked, equals the transformer's own output unpatchified
 * (wan_transformer_forward + wan_unpatchify, the order diffusers' proj_out uses): the
 * family's per-token reorder is right. v (S, token_dim) from the whole-sequence forward. */
static void check_wan_order(const char *dir, const model_geometry *g, const float *x,
                            const float *v, const cpdit_model *m)
{
    cpdit_error err;
    wan_transformer *tr = NULL;
    CHECK(wan_transformer_open(&tr, dir, &err) == CPDIT_OK);
    if (!tr)
        return;
    wan_transformer_set_weight_format(tr, CPDIT_WEIGHT_F32);
    const wan_transformer_config *c = wan_transformer_config_of(tr);
    const size_t S = (size_t)g->tokens, nl = S * g->token_dim;
    float *pos = malloc(S * 3 * sizeof *pos), *out = malloc(S * c->out_dim * sizeof *out);
    float *txt = malloc((size_t)g->text_tokens * c->text_dim * sizeof *txt);
    float *want = malloc(nl * sizeof *want), *got = malloc(nl * sizeof *got);
    if (pos && out && txt && want && got) {
        wan_token_positions(pos, g->latent_frames / g->patch_t, g->latent_h / g->patch_h,
                            g->latent_w / g->patch_w);
        fill(txt, (size_t)g->text_tokens * c->text_dim, TEXT_SEED); /* = text_synthetic's */
        const float t = 0.5f;
        const wan_inputs in = {1, (int)S, x, pos, &t, g->text_tokens, txt};
        CHECK(wan_transformer_forward(tr, NULL, NULL, &in, out, &err) == CPDIT_OK);
        wan_unpatchify(want, out, 1, c->out_channels, g->latent_frames, g->latent_h,
                       g->latent_w, g->patch_t, g->patch_h, g->patch_w);
        m->family->unpack(g, v, got);
        const double e = rel_err(got, want, nl);
        CHECK_MSG(e <= 1e-6, "wan: unpack(interface v) vs unpatchify(forward): %.3g", e);
    }
    free(pos);
    free(out);
    free(txt);
    free(want);
    free(got);
    wan_transformer_close(tr);
}

static void test_model(const char *name, int width, int height, int frames, int text)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cpdit_error err;
    cpdit_error_clear(&err);
    model_open_options o;
    memset(&o, 0, sizeof o);
    o.format = CPDIT_WEIGHT_F32;
    cpdit_model *m = NULL;
    model_geometry g;
    model_text *t = NULL;
    char dir[4096];
    cpdit_status st = builtin_model_resolve(name, dir, sizeof dir, &err); /* builtin:NAME too */
    if (!st)
        st = model_open(&m, dir, &o, &err);
    if (!st)
        st = m->family->geometry(m, width, height, frames, text, &g, &err);
    if (!st)
        st = m->family->text_synthetic(m, g.text_tokens, TEXT_SEED, &t, &err);
    CHECK_MSG(st == CPDIT_OK, "%s: %s: %s", dir, err.where, err.what);
    if (st) {
        model_close(m);
        return;
    }
    const model_family *f = m->family;
    const model_text *const texts[1] = {t};
    const size_t nl = (size_t)g.latent_channels * (g.latent_frames ? g.latent_frames : 1) *
                      g.latent_h * g.latent_w;
    const size_t n = (size_t)g.tokens * g.token_dim;
    float *lat = malloc(nl * sizeof *lat), *back = malloc(nl * sizeof *back);
    float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *want);
    float *got = malloc(n * sizeof *got);
    CHECK(lat && back && x && want && got && nl == n);
    if (lat && back && x && want && got && nl == n) {
        fill(lat, nl, 5u);
        f->pack(&g, lat, x);
        f->unpack(&g, x, back);
        CHECK(memcmp(lat, back, nl * sizeof *lat) == 0);
        st = forward_on(m, &g, NULL, texts, x, want, &err);
        CHECK_MSG(st == CPDIT_OK, "%s: whole: %s", dir, err.what);
        if (!st && !strcmp(f->name, "wan"))
            check_wan_order(dir, &g, x, want, m);
        for (int k = 0; !st && k < 2; k++) {
            const int ring = k ? 1 : size, uly = k ? size : 1;
            cp_grid *grid = NULL;
            st = cp_grid_create(MPI_COMM_WORLD, 1, ring, uly, &grid, &err);
            if (!st)
                st = forward_on(m, &g, grid, texts, x, got, &err);
            CHECK_MSG(st == CPDIT_OK, "%s: ring %d ulysses %d: %s", dir, ring, uly, err.what);
            const double e = st ? 1.0 : rel_err(got, want, n);
            CHECK_MSG(e <= TOL_CP, "%s ring %d ulysses %d: rel err %.3g", dir, ring, uly, e);
            if (rank == 0 && !st)
                printf("ok: %s (%s, %lld tokens x %d): ring %d ulysses %d vs 1 rank: %.3g\n",
                       name, f->name, g.tokens, g.token_dim, ring, uly, e);
            cp_grid_destroy(grid);
        }
    }
    free(lat);
    free(back);
    free(x);
    free(want);
    free(got);
    f->text_free(t);
    model_close(m);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    for (int i = 1; i + 4 < argc; i += 5)
        test_model(argv[i], atoi(argv[i + 1]), atoi(argv[i + 2]), atoi(argv[i + 3]),
                   atoi(argv[i + 4]));
    int failed = test_failures, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    test_failures += any && !failed;
    TEST_MAIN_END();
}
