/* test_model_family.c — the model-family interface (lib/models/model.h) on the FLUX family:
 *   - the table: every family found by its own class and has every op the pipeline, `cpdit
 *     forward`, tune and the planner call; an unknown class finds nothing;
 *   - model_family_find: builtin:shapes is FLUX; a folder whose transformer class no family
 *     knows is an INPUT error naming the class;
 *   - geometry of builtin:shapes (8 latent channels, 32-wide tokens): 128x128 -> 16x16
 *     latents, S = 64 tokens, the default T5 length; bad sizes, frames and text lengths are
 *     INPUT errors naming the key;
 *   - pack / unpack are exact inverses; the schedule runs from sigma 1 to 0 with the forward's
 *     timestep = sigma (FluxPipeline's timestep / 1000);
 *   - one forward on the whole sequence (no grid) is finite, deterministic (two calls give the
 *     same bits) and gather hands back the tokens unchanged.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/builtin/builtin_model.h"
#include "lib/models/model.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"

#define SIDE 128
#define LATENT_SIDE (SIDE / 8)
#define TOKENS ((LATENT_SIDE / 2) * (LATENT_SIDE / 2))
#define STEPS 4

static void test_table(void)
{
    int n = 0;
    const model_family *const *all = model_families(&n);
    CHECK(n >= 1);
    for (int i = 0; i < n; i++) {
        const model_family *f = all[i];
        CHECK(model_family_by_class(f->transformer_class) == f);
        CHECK(f->name && f->decoder_class && f->open && f->close && f->weight_stats &&
              f->param_count && f->text_weight_stats && f->default_steps &&
              f->guidance_distilled && f->geometry && f->encode_text && f->text_synthetic &&
              f->text_free && f->pack && f->unpack && f->schedule_open && f->shard_open &&
              f->shard_range && f->forward && f->gather && f->shard_close);
    }
    CHECK(model_family_by_class("NoSuchTransformer3DModel") == NULL);
    CHECK(model_family_by_class(NULL) == NULL);
}

static void test_find_unknown(void)
{
    char *dir = tmpdir_make("model-family");
    CHECK(dir != NULL);
    if (!dir)
        return;
    CHECK(tmp_write(dir, "transformer/config.json",
                    "{\"_class_name\": \"NoSuchTransformer3DModel\"}") == 0);
    char *tdir = tmp_path(dir, "transformer");
    const model_family *f = (const model_family *)1;
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(model_family_find(tdir, &f, &err) == CPDIT_ERR_INPUT && f == NULL);
    CHECK_STR_CONTAINS(err.what, "NoSuchTransformer3DModel");
    free(tdir);
    tmpdir_remove(dir);
    free(dir);
}

static void test_geometry(cpdit_model *m)
{
    const model_family *f = m->family;
    cpdit_error err;
    model_geometry g;
    CHECK(f->geometry(m, SIDE, SIDE, 0, 0, &g, &err) == CPDIT_OK);
    CHECK(g.latent_channels == 8 && g.latent_frames == 0); /* builtin:shapes: 8 x 2x2 = 32 */
    CHECK(g.latent_h == LATENT_SIDE && g.latent_w == LATENT_SIDE);
    CHECK(g.tokens == TOKENS && g.token_dim == 4 * g.latent_channels);
    CHECK(g.text_tokens == (f->guidance_distilled(m) ? 512 : 256));
    CHECK(f->geometry(m, SIDE, SIDE, 1, 32, &g, &err) == CPDIT_OK && g.text_tokens == 32);
    CHECK(f->geometry(m, SIDE, 100, 0, 0, &g, &err) == CPDIT_ERR_INPUT);
    CHECK(strcmp(err.where, "height") == 0);
    CHECK_STR_CONTAINS(err.what, "multiple of 16");
    CHECK(f->geometry(m, SIDE, SIDE, 5, 0, &g, &err) == CPDIT_ERR_INPUT);
    CHECK(strcmp(err.where, "frames") == 0);
    CHECK(f->geometry(m, SIDE, SIDE, 0, 513, &g, &err) == CPDIT_ERR_INPUT);
    CHECK(strcmp(err.where, "max_sequence_length") == 0);
}

static void test_pack_schedule(cpdit_model *m, const model_geometry *g)
{
    const model_family *f = m->family;
    const size_t n = (size_t)g->latent_channels * g->latent_h * g->latent_w;
    float *lat = malloc(n * sizeof *lat), *tok = malloc(n * sizeof *tok);
    float *back = malloc(n * sizeof *back);
    CHECK(lat && tok && back && (size_t)g->tokens * g->token_dim == n);
    for (size_t i = 0; lat && tok && back && i < n; i++)
        lat[i] = (float)i * 0.25f - 7.0f;
    if (lat && tok && back) {
        f->pack(g, lat, tok);
        f->unpack(g, tok, back);
        CHECK(memcmp(lat, back, n * sizeof *lat) == 0);
        CHECK(memcmp(lat, tok, n * sizeof *lat) != 0); /* packing moves values */
    }
    free(lat);
    free(tok);
    free(back);
    model_schedule *s = NULL;
    cpdit_error err;
    CHECK(f->schedule_open(m, g, STEPS, &s, &err) == CPDIT_OK && s && s->steps == STEPS);
    if (!s)
        return;
    CHECK_NEAR(s->sigmas[0], 1.0, 0.0);
    CHECK_NEAR(s->sigmas[STEPS], 0.0, 0.0);
    for (int i = 0; i < STEPS; i++) {
        CHECK(s->sigmas[i + 1] < s->sigmas[i]);
        CHECK(s->timesteps[i] == s->sigmas[i]);
    }
    float x = 2.0f;
    const float v = 1.0f;
    s->step(s, 0, &x, &v, 1); /* Euler: x + (sigma_1 - sigma_0) v */
    CHECK_NEAR(x, 2.0 + (s->sigmas[1] - s->sigmas[0]), 1e-6);
    model_schedule_free(s);
}

static void test_forward(cpdit_model *m, const model_geometry *g)
{
    const model_family *f = m->family;
    cpdit_error err;
    model_text *t = NULL;
    CHECK(f->text_synthetic(m, g->text_tokens, 3u, &t, &err) == CPDIT_OK && t);
    const model_text *const texts[1] = {t};
    model_shard *sh = NULL;
    cp_attention_config attn;
    memset(&attn, 0, sizeof attn);
    CHECK(cp_attention_config_parse("auto", &attn, &err) == CPDIT_OK);
    CHECK(f->shard_open(m, g, NULL, &attn, texts, 1, &sh, &err) == CPDIT_OK && sh);
    if (!sh) {
        f->text_free(t);
        return;
    }
    long long start = -1, len = -1;
    f->shard_range(sh, &start, &len);
    CHECK(start == 0 && len == g->tokens);
    const size_t n = (size_t)len * g->token_dim;
    float *x = malloc(n * sizeof *x), *v1 = malloc(n * sizeof *v1), *v2 = malloc(n * sizeof *v2);
    float *all = malloc(n * sizeof *all);
    CHECK(x && v1 && v2 && all);
    if (x && v1 && v2 && all) {
        for (size_t i = 0; i < n; i++)
            x[i] = sinf((float)i * 0.37f);
        const model_step step = {0, 1.0f, 1.0f, 3.5f};
        CHECK(f->forward(m, sh, 0, x, &step, v1, &err) == CPDIT_OK);
        CHECK(f->forward(m, sh, 0, x, &step, v2, &err) == CPDIT_OK);
        CHECK(memcmp(v1, v2, n * sizeof *v1) == 0);
        size_t bad = 0;
        double sum2 = 0;
        for (size_t i = 0; i < n; i++) {
            bad += !isfinite(v1[i]);
            sum2 += (double)v1[i] * v1[i];
        }
        CHECK(bad == 0 && sum2 > 0.0);
        CHECK(f->forward(m, sh, 1, x, &step, v2, &err) == CPDIT_ERR_INPUT); /* one text only */
        CHECK(f->gather(sh, x, all, &err) == CPDIT_OK);
        CHECK(memcmp(all, x, n * sizeof *x) == 0);
    }
    free(x);
    free(v1);
    free(v2);
    free(all);
    f->shard_close(sh);
    f->text_free(t);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_table();
    test_find_unknown();
    char dir[4096];
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(builtin_model_resolve("builtin:shapes", dir, sizeof dir, &err) == CPDIT_OK);
    const model_family *f = NULL;
    CHECK(model_family_find(dir, &f, &err) == CPDIT_OK && f &&
          strcmp(f->transformer_class, "FluxTransformer2DModel") == 0 &&
          f->output == MODEL_OUTPUT_IMAGE);
    cpdit_model *m = NULL;
    model_open_options o;
    memset(&o, 0, sizeof o);
    o.format = CPDIT_WEIGHT_F32;
    o.text_encoders = 1; /* the pipeline's components too: scheduler, text, decoder config */
    CHECK(model_open(&m, dir, &o, &err) == CPDIT_OK && m && m->family == f);
    if (m) {
        CHECK(f->param_count(m) > 0);
        model_weight_stats ws;
        f->weight_stats(m, &ws);
        CHECK(ws.resident == 1 && ws.matrix_bytes > 0);
        test_geometry(m);
        model_geometry g;
        CHECK(f->geometry(m, SIDE, SIDE, 0, 32, &g, &err) == CPDIT_OK);
        test_pack_schedule(m, &g);
        test_forward(m, &g);
    }
    model_close(m);
    MPI_Finalize();
    TEST_MAIN_END();
}
