/* test_flux_latents.c — FLUX 2x2 latent packing, unpacking, image ids, size checks.
 *
 * The reference for packing is the definition itself: walk the permuted view
 * (B, H/2, W/2, C, 2, 2) in row-major order, reading lat through the strides of
 * view(B, C, H/2, 2, W/2, 2); that is what reshape after permute(0, 2, 4, 1, 3, 5) produces.
 * Exact equality (a copy, no arithmetic).
 */
#include <stdlib.h>
#include <string.h>

#include "lib/models/flux/flux_latents.h"
#include "tests/test_util.h"

static void reference_pack(float *packed, const float *lat, int B, int C, int H, int W)
{
    /* strides of lat viewed as (B, C, H/2, 2, W/2, 2) */
    const size_t s_dj = 1, s_wp = 2, s_di = (size_t)W, s_hp = 2 * (size_t)W,
                 s_c = (size_t)H * W, s_b = (size_t)C * H * W;
    size_t o = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < H / 2; i++)
            for (int j = 0; j < W / 2; j++)
                for (int c = 0; c < C; c++)
                    for (int di = 0; di < 2; di++)
                        for (int dj = 0; dj < 2; dj++)
                            packed[o++] = lat[b * s_b + c * s_c + i * s_hp + di * s_di +
                                              j * s_wp + dj * s_dj];
}

static void test_pack_case(int B, int C, int H, int W)
{
    const size_t n = (size_t)B * C * H * W;
    float *lat = malloc(n * sizeof *lat), *p = malloc(n * sizeof *p),
          *ref = malloc(n * sizeof *ref), *back = malloc(n * sizeof *back);
    if (!lat || !p || !ref || !back) {
        CHECK_MSG(0, "out of memory");
        free(lat), free(p), free(ref), free(back);
        return;
    }
    for (size_t i = 0; i < n; i++)
        lat[i] = (float)i; /* every value distinct and exact */
    flux_pack_latents(p, lat, B, C, H, W);
    reference_pack(ref, lat, B, C, H, W);
    CHECK_MSG(memcmp(p, ref, n * sizeof *p) == 0, "pack (%d,%d,%d,%d) differs from the view",
              B, C, H, W);
    flux_unpack_latents(back, p, B, C, H, W);
    CHECK_MSG(memcmp(back, lat, n * sizeof *lat) == 0, "unpack(pack) (%d,%d,%d,%d) != identity",
              B, C, H, W);
    free(lat), free(p), free(ref), free(back);
}

static void test_known_values(void)
{
    /* B=1, C=2, H=W=4: token 0 = [c0: (0,0) (0,1) (1,0) (1,1), c1: same] = 0 1 4 5 16 17 20 21 */
    float lat[32], p[32];
    for (int i = 0; i < 32; i++)
        lat[i] = (float)i;
    flux_pack_latents(p, lat, 1, 2, 4, 4);
    const float tok0[8] = {0, 1, 4, 5, 16, 17, 20, 21};
    const float tok3[8] = {10, 11, 14, 15, 26, 27, 30, 31}; /* i=1, j=1 */
    CHECK(memcmp(p, tok0, sizeof tok0) == 0);
    CHECK(memcmp(p + 3 * 8, tok3, sizeof tok3) == 0);
}

static void test_ids(void)
{
    /* latent 6 x 10 → 3 x 5 tokens */
    float ids[15 * FLUX_ID_AXES];
    flux_latent_image_ids(ids, 6, 10);
    int ok = 1;
    for (int t = 0; t < 15; t++)
        ok &= ids[t * 3] == 0.0f && ids[t * 3 + 1] == (float)(t / 5) &&
              ids[t * 3 + 2] == (float)(t % 5);
    CHECK(ok);
    float tids[4 * FLUX_ID_AXES];
    memset(tids, 0xff, sizeof tids);
    flux_text_ids(tids, 4);
    ok = 1;
    for (int i = 0; i < 12; i++)
        ok &= tids[i] == 0.0f;
    CHECK(ok);
}

static void test_dims(void)
{
    int h = 0, w = 0;
    cpdit_error err;
    CHECK(flux_latent_dims(1024, 768, &h, &w, &err) == CPDIT_OK && h == 128 && w == 96);
    CHECK(flux_latent_dims(48, 80, &h, &w, &err) == CPDIT_OK && h == 6 && w == 10);
    CHECK(flux_latent_dims(500, 512, &h, &w, &err) == CPDIT_ERR_INPUT);
    CHECK(strcmp(err.where, "height") == 0);
    CHECK_STR_CONTAINS(err.what, "496 or 512");
    CHECK(flux_latent_dims(512, 8, &h, &w, &err) == CPDIT_ERR_INPUT);
    CHECK(strcmp(err.where, "width") == 0);
    CHECK_STR_CONTAINS(err.what, "nearest: 16");
    CHECK(flux_latent_dims(0, 512, &h, &w, &err) == CPDIT_ERR_INPUT);
    CHECK(flux_latent_dims(512, -16, &h, &w, &err) == CPDIT_ERR_INPUT);
}

int main(void)
{
    test_known_values();
    test_pack_case(1, 16, 2, 2);
    test_pack_case(1, 16, 6, 10);
    test_pack_case(2, 16, 8, 4);
    test_pack_case(3, 4, 12, 2);
    test_ids();
    test_dims();
    TEST_MAIN_END();
}
