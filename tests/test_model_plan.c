/* test_model_plan.c — the family-neutral planner shapes (lib/models/model_plan.h) and the
 * cost model on a video model with cross-attention:
 *   - Wan's token counts (latent frames 1 + (N-1)/4, patches 1x2x2): 480x832 x 81 frames =
 *     21 x 30 x 52 = 32760, 720p 75600; parameters of Wan2.1-1.3B / 14B from their configs;
 *   - the family found from _class_name (a Wan folder, a FLUX folder, an unknown class) and
 *     the INPUT errors for sizes a family cannot make (frames not 4k + 1, FLUX with frames,
 *     image-to-video keys);
 *   - the planner on 8 ranks of one 8-GPU node: 12 heads -> Ulysses 8 needs +anything, ring 8
 *     does not; the cross-attention is priced exactly as its FLOPs over the attention rate on
 *     every grid (queries sharded, all 512 text keys, all 12 heads) and adds no
 *     communication; the replicated text projections are not divided by the CP degree;
 *   - true CFG doubles the latency; the ranks' token shares (Wan: video balanced, no text;
 *     FLUX: flux_shard_layout);
 *   - `parallel: auto` (grid_choice_auto) plans a Wan folder at 81 frames as `cpdit plan`
 *     does, and refuses 80 frames. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/models/model_detect.h"
#include "lib/models/model_plan.h"
#include "lib/models/wan/wan_plan.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"
#include "topology/cost_model.h"
#include "topology/grid_choice.h"

#define REL 1e-12 /* same formula evaluated twice: only rounding differs */

static char fixture_dir[4096];

static const char *fx(const char *name)
{
    static char buf[4][4200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", fixture_dir, name);
    return buf[k];
}

/* Wan2.1-T2V-1.3B's transformer, filled by hand (its config.json's values). */
static wan_transformer_config wan_1_3b(void)
{
    wan_transformer_config c;
    memset(&c, 0, sizeof c);
    c.patch_size[0] = 1, c.patch_size[1] = 2, c.patch_size[2] = 2;
    c.num_attention_heads = 12, c.attention_head_dim = 128;
    c.in_channels = 16, c.out_channels = 16, c.text_dim = 4096, c.freq_dim = 256;
    c.ffn_dim = 8960, c.num_layers = 30;
    return c;
}

static model_request request(int w, int h, int frames)
{
    model_request r;
    model_request_defaults(&r);
    r.width = w, r.height = h, r.frames = frames;
    return r;
}

static const cm_prediction *find(const cm_prediction *p, int n, int dp, int R, int U,
                                 cp_ring_mode mode)
{
    for (int i = 0; i < n; i++)
        if (p[i].cfg.dp == dp && p[i].cfg.ring == R && p[i].cfg.ulysses == U &&
            (R == 1 || p[i].cfg.ring_mode == mode))
            return &p[i];
    return NULL;
}

static void test_wan_shape(void)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    wan_transformer_config c = wan_1_3b();
    model_plan_shape s;
    memset(&s, 0, sizeof s);
    model_request r = request(832, 480, 81);
    CHECK(wan_plan_shape(&s, &c, &r, &err) == CPDIT_OK);
    CHECK(s.image_tokens == 21 * 30 * 52 && s.image_tokens == 32760);
    CHECK(s.seq_tokens == 32760 && s.text_tokens == 512 && !s.text_sharded);
    CHECK(s.heads == 12 && s.head_dim == 128 && s.hidden == 1536 && s.blocks == 30);
    CHECK(s.n_attn == 2 && s.attn[0].sharded && s.attn[0].kv_tokens == 32760);
    CHECK(!s.attn[1].sharded && s.attn[1].count == 30 && s.attn[1].q_tokens == 32760 &&
          s.attn[1].kv_tokens == 512 && s.attn[1].heads == 12);
    /* the published size: 1.3B (1.42e9 counted from the modules) */
    CHECK_MSG(s.params > 1.40e9 && s.params < 1.44e9, "params %.4g", s.params);
    /* replicated: the text embedder (4096 -> E -> E) and cross K/V (2 E^2 per layer) over
     * all 512 text tokens, 2 FLOPs per MAC */
    const double E = 1536, T = 512;
    CHECK_NEAR(s.replicated_flops, 2 * (T * (4096 * E + E * E) + 30 * T * 2 * E * E),
               REL * s.replicated_flops);
    /* the sharded part per video token: 30 x (6 E^2 + 2 E F) + patch in / out (64 E each) */
    const double per_tok = 2 * (30 * (6 * E * E + 2 * E * 8960) + 2 * 64 * E);
    CHECK_NEAR((s.linear_flops - s.replicated_flops) / 32760, per_tok, REL * per_tok);
    /* 720p */
    r = request(1280, 720, 81);
    memset(&s, 0, sizeof s);
    CHECK(wan_plan_shape(&s, &c, &r, &err) == CPDIT_OK && s.image_tokens == 75600);
    /* one frame: one latent frame */
    r = request(832, 480, 1);
    memset(&s, 0, sizeof s);
    CHECK(wan_plan_shape(&s, &c, &r, &err) == CPDIT_OK && s.image_tokens == 30 * 52);
    /* 14B: 40 heads x 128, 40 layers, FFN 13824 */
    wan_transformer_config big = c; /* the 1.3B's patch, channels and text width */
    big.num_attention_heads = 40, big.ffn_dim = 13824, big.num_layers = 40;
    r = request(832, 480, 81);
    memset(&s, 0, sizeof s);
    CHECK(wan_plan_shape(&s, &big, &r, &err) == CPDIT_OK);
    CHECK_MSG(s.params > 14.0e9 && s.params < 14.6e9, "params %.4g", s.params);
    /* frames that the VAE cannot make, sizes not multiples of 16 */
    r = request(832, 480, 80);
    CHECK(wan_plan_shape(&s, &c, &r, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.where, "frames");
    CHECK_STR_CONTAINS(err.what, "4k + 1 frames (e.g. 77 or 81)");
    r = request(840, 480, 81);
    CHECK(wan_plan_shape(&s, &c, &r, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "multiple of 16");
    r = request(832, 480, 81);
    r.text_tokens = 513;
    CHECK(wan_plan_shape(&s, &c, &r, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.where, "max_sequence_length");
}

static void test_detect_and_load(void)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    char fam[MODEL_DETECT_NAME_MAX];
    CHECK(model_family_of(fx("wan21-1.3b-transformer"), fam, &err) == CPDIT_OK &&
          strcmp(fam, "wan") == 0);
    CHECK(model_family_of(fx("flux-dev-transformer"), fam, &err) == CPDIT_OK &&
          strcmp(fam, "flux") == 0);
    /* the folder, read through lib/io: the same shape as the hand-filled config */
    model_plan_shape a, b;
    memset(&a, 0, sizeof a);
    wan_transformer_config c = wan_1_3b();
    model_request r = request(832, 480, 81);
    CHECK(wan_plan_shape(&a, &c, &r, &err) == CPDIT_OK);
    CHECK(model_plan_shape_load(&b, fx("wan21-1.3b-transformer"), &r, &err) == CPDIT_OK);
    CHECK(strcmp(b.family, "wan") == 0 && b.key[0] == '/');
    CHECK(b.image_tokens == a.image_tokens && b.params == a.params &&
          b.linear_flops == a.linear_flops && b.n_attn == a.n_attn && b.n_gemm == a.n_gemm);
    /* FLUX makes images */
    r = request(1024, 1024, 5);
    CHECK(model_plan_shape_load(&b, fx("flux-dev-transformer"), &r, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "FLUX makes images");
    /* a pipeline root whose index names the class; image-to-video; an unknown class */
    char *dir = tmpdir_make("model-plan");
    CHECK(dir != NULL);
    if (!dir)
        return;
    CHECK(tmp_write(dir, "root/model_index.json",
                    "{\"_class_name\": \"WanPipeline\", \"transformer\": [\"diffusers\", "
                    "\"WanTransformer3DModel\"]}") == 0);
    CHECK(tmp_write(dir, "root/transformer/config.json", "{\"num_layers\": 2}") == 0);
    CHECK(tmp_write(dir, "i2v/config.json", "{\"_class_name\": \"WanTransformer3DModel\", "
                                            "\"image_dim\": 1280}") == 0);
    CHECK(tmp_write(dir, "other/config.json", "{\"_class_name\": \"SD3Transformer2DModel\"}") ==
          0);
    char *root = tmp_path(dir, "root"), *i2v = tmp_path(dir, "i2v"),
         *other = tmp_path(dir, "other");
    r = request(832, 480, 81);
    CHECK(model_plan_shape_load(&b, root, &r, &err) == CPDIT_OK && strcmp(b.family, "wan") == 0);
    CHECK(b.blocks == 2 && b.heads == 40); /* diffusers' defaults for the absent keys */
    CHECK(model_plan_shape_load(&b, i2v, &r, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "image_dim");
    CHECK_STR_CONTAINS(err.what, "not supported yet");
    CHECK(model_plan_shape_load(&b, other, &r, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "SD3Transformer2DModel");
    CHECK_STR_CONTAINS(err.what, "WanTransformer3DModel");
    CHECK_STR_CONTAINS(err.where, "config.json");
    free(root);
    free(i2v);
    free(other);
    tmpdir_remove(dir);
    free(dir);
}

static void test_rank_tokens(void)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    wan_transformer_config c = wan_1_3b();
    model_plan_shape s;
    memset(&s, 0, sizeof s);
    model_request r = request(832, 480, 81);
    CHECK(wan_plan_shape(&s, &c, &r, &err) == CPDIT_OK);
    snprintf(s.family, sizeof s.family, "wan");
    int t = -1, i = -1;
    CHECK(model_plan_rank_tokens(&s, 8, 0, &t, &i, &err) == CPDIT_OK && t == 0 && i == 4095);
    r = request(832, 480, 33); /* 9 x 30 x 52 = 14040 over 16: 878 on rank 0, 877 on 15 */
    memset(&s, 0, sizeof s);
    CHECK(wan_plan_shape(&s, &c, &r, &err) == CPDIT_OK && s.image_tokens == 14040);
    snprintf(s.family, sizeof s.family, "wan");
    CHECK(model_plan_rank_tokens(&s, 16, 0, &t, &i, &err) == CPDIT_OK && i == 878);
    CHECK(model_plan_rank_tokens(&s, 16, 15, &t, &i, &err) == CPDIT_OK && i == 877);
    CHECK(model_plan_rank_tokens(&s, 16, 16, &t, &i, &err) == CPDIT_ERR_INPUT);
    /* FLUX: text and image both sharded (512 + 1024 over 4: 128 + 256 each) */
    r = request(512, 512, 0);
    CHECK(model_plan_shape_load(&s, "builtin:tiny", &r, &err) == CPDIT_OK);
    CHECK(model_plan_rank_tokens(&s, 4, 3, &t, &i, &err) == CPDIT_OK && t == 128 && i == 256);
}

static void test_wan_grids(void)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    topology t;
    if (topo_file_load(&t, fx("two_nodes_8gpu.json"), &err)) {
        fprintf(stderr, "%s: %s\n", err.where, err.what);
        CHECK(0);
        return;
    }
    wan_transformer_config c = wan_1_3b();
    model_plan_shape s, self_only;
    memset(&s, 0, sizeof s);
    model_request r = request(832, 480, 81);
    CHECK(wan_plan_shape(&s, &c, &r, &err) == CPDIT_OK);
    snprintf(s.family, sizeof s.family, "wan");
    snprintf(s.key, sizeof s.key, "test:wan-1.3b");
    self_only = s;
    self_only.n_attn = 1; /* the same model without its cross-attention */
    cm_options o = {8, 50, 1, 1, 0};
    cm_prediction *p = NULL, *q = NULL;
    int n = 0, nq = 0;
    CHECK(cm_rank(&t, &s, &o, NULL, &p, &n, &err) == CPDIT_OK && n == 16);
    CHECK(cm_rank(&t, &self_only, &o, NULL, &q, &nq, &err) == CPDIT_OK && nq == n);
    /* 12 heads over 8 Ulysses ranks: uneven heads; over 4 they divide; 32760 divides 8 */
    const cm_prediction *u8 = find(p, n, 1, 1, 8, CP_RING_P2P);
    const cm_prediction *r8 = find(p, n, 1, 8, 1, CP_RING_P2P);
    const cm_prediction *u4 = find(p, n, 1, 2, 4, CP_RING_P2P);
    CHECK(u8 && strcmp(u8->variant, "ulysses+anything") == 0);
    CHECK(r8 && strcmp(r8->variant, "ring") == 0);
    CHECK(u4 && strcmp(u4->variant, "unified") == 0);
    CHECK_MSG(p[0].cfg.dp == 1, "one video on 8 GPUs: every rank on it (chosen dp %d)",
              p[0].cfg.dp);
    for (int k = 0; k < n; k++) {
        const cm_prediction *a = &p[k];
        const cm_prediction *b = find(q, nq, a->cfg.dp, a->cfg.ring, a->cfg.ulysses,
                                      a->cfg.ring_mode);
        CHECK(b != NULL);
        if (!b)
            continue;
        const int cp = a->cfg.ring * a->cfg.ulysses;
        /* cross-attention: ceil(32760 / cp) queries x 512 keys x 12 heads x 128, 30 calls */
        const double cross = 30 * 4.0 * ceil(32760.0 / cp) * 512 * 12 * 128 / t.attention_flops;
        CHECK_NEAR(a->attn_s - b->attn_s, cross, 1e-9 * a->attn_s);
        CHECK_NEAR(a->comm_s, b->comm_s, REL * (a->comm_s + 1e-30)); /* no communication */
        CHECK(a->linear_s == b->linear_s);
        /* the replicated projections run whole on every rank of the group */
        const double share = ceil(32760.0 / cp) / 32760.0;
        const double want = ((s.linear_flops - s.replicated_flops) * share + s.replicated_flops) /
                            t.sgemm_flops;
        CHECK_NEAR(a->linear_s, want, REL * want);
        /* K and V of the 512 text tokens in the workspace, never less than without them */
        CHECK(a->mem_total >= b->mem_total);
    }
    /* true CFG: two forwards per step */
    model_plan_shape cfg = s;
    cfg.forwards_per_step = 2;
    cm_prediction one, two;
    cm_config g = {1, 2, 4, CP_RING_P2P, 0};
    cm_predict(&t, &s, &o, &g, &one);
    cm_predict(&t, &cfg, &o, &g, &two);
    CHECK(two.step_s == one.step_s);
    CHECK_NEAR(two.latency_s, 2 * 50 * one.step_s, REL * two.latency_s);
    /* on an even dp, CFG pairs: half the latency, the same images per hour */
    cm_prediction pair1, pair2;
    cm_config g2 = {2, 2, 2, CP_RING_P2P, 0};
    cm_predict(&t, &s, &o, &g2, &pair1);
    cm_predict(&t, &cfg, &o, &g2, &pair2);
    CHECK(pair2.cfg_pairs == 1 && pair1.cfg_pairs == 0 && two.cfg_pairs == 0);
    CHECK_NEAR(pair2.latency_s, 50 * pair2.step_s, REL * pair2.latency_s);
    CHECK_NEAR(pair2.images_per_hour, 2 * 3600.0 / (2 * 50 * pair2.step_s), /* dp 2, sequential */
               REL * pair2.images_per_hour);
    free(p);
    free(q);
    topo_file_free(&t);
}

static void test_grid_choice(void)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    grid_choice_request rq = {fx("two_nodes_8gpu.json"), fx("wan21-1.3b-transformer"), 832,
                              480, 0, 50, 1, 8, 81, 0, NULL, 0, NULL};
    grid_choice gc;
    CHECK(grid_choice_auto(&rq, &gc, &err) == CPDIT_OK);
    CHECK(gc.planned && gc.dp * gc.ring * gc.ulysses == 8);
    CHECK_STR_CONTAINS(gc.reason, "the fastest single video (1 video)");
    /* the same choice as the cost model's ranking */
    topology t;
    model_plan_shape s;
    model_request r = request(832, 480, 81);
    CHECK(topo_file_load(&t, fx("two_nodes_8gpu.json"), &err) == CPDIT_OK);
    CHECK(model_plan_shape_load(&s, fx("wan21-1.3b-transformer"), &r, &err) == CPDIT_OK);
    cm_options o = {8, 50, 1, 1, 0};
    cm_prediction *p = NULL;
    int n = 0;
    CHECK(cm_rank(&t, &s, &o, NULL, &p, &n, &err) == CPDIT_OK && n > 0);
    CHECK(p && p[0].cfg.dp == gc.dp && p[0].cfg.ring == gc.ring &&
          p[0].cfg.ulysses == gc.ulysses && strcmp(p[0].variant, gc.variant) == 0);
    free(p);
    topo_file_free(&t);
    rq.frames = 80;
    CHECK(grid_choice_auto(&rq, &gc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "4k + 1");
}

int main(void)
{
    const char *src = getenv("top_srcdir");
    snprintf(fixture_dir, sizeof fixture_dir, "%s/tests/data/topology", src ? src : ".");
    test_wan_shape();
    test_detect_and_load();
    test_rank_tokens();
    test_wan_grids();
    test_grid_choice();
    TEST_MAIN_END();
}
