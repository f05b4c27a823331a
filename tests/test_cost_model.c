/* test_cost_model.c — the planner on synthetic topologies (the JSON files in tests/data/topology, written
 * by make_fixtures.py): the topology reader, the link-class fallbacks, measured collectives,
 * the variants each grid needs, and the choices the issue names:
 *   2 nodes x 8 GPUs (NVLink inside, slower network across), FLUX.1-dev 2048x2048, one image
 *     -> Ulysses inside the nodes, ring across (dp 1 ring 2 ulysses 8 unified);
 *   heads that do not divide the Ulysses degree -> +anything on exactly those grids;
 *   one PCIe node whose 8-way all-to-all is congested -> no large Ulysses degree;
 *   the tiny model on 16 ranks -> all data-parallel;
 *   measured winners in "tuned" win over predictions; tune's rewrite keeps every other key;
 *   times measured at the model's own shapes (compute.shapes) replace FLOPs / rate exactly
 *   for the shapes measured, and only for the model and size they were measured for. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/test_util.h"
#include "topology/cost_model.h"

static char fixture_dir[4096];

static const char *fx(const char *name)
{
    static char buf[4][4200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", fixture_dir, name);
    return buf[k];
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

/* The plan shape of model at w x h (an image, the family's default text length). */
static cpdit_status shape_load(model_plan_shape *s, const char *model, int w, int h,
                               cpdit_error *err)
{
    model_request req;
    model_request_defaults(&req);
    req.width = w, req.height = h;
    return model_plan_shape_load(s, model, &req, err);
}

static int load(topology *t, model_plan_shape *s, const char *topo, const char *model, int w,
                int h)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    if (topo_file_load(t, fx(topo), &err)) {
        fprintf(stderr, "%s: %s\n", err.where, err.what);
        return -1;
    }
    if (shape_load(s, model, w, h, &err)) {
        fprintf(stderr, "%s: %s\n", err.where, err.what);
        topo_file_free(t);
        return -1;
    }
    return 0;
}

static void test_reader(void)
{
    topology t;
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(topo_file_load(&t, fx("format2.json"), &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "format 2");
    CHECK_STR_CONTAINS(err.what, "format 1");
    CHECK(topo_file_parse(&t, "{\"format\": 1, \"ranks\": 2, \"rank_map\": [{\"rank\": 0, "
                              "\"host\": 0}], \"compute\": {\"sgemm_flops\": 1e9}}",
                          "mem", &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "rank 1 is missing");
    CHECK(topo_file_parse(&t, "{\"format\": 1, \"ranks\": 1, \"rank_map\": [{\"rank\": 0, "
                              "\"host\": 0}], \"compute\": {\"sgemm_flops\": \"fast\"}}",
                          "mem", &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "sgemm_flops");
    /* no "compute" at all (cpdit probe --no-compute): the documented default rate */
    CHECK(topo_file_parse(&t, "{\"format\": 1, \"ranks\": 1, \"rank_map\": [{\"rank\": 0, "
                              "\"host\": 0}]}",
                          "mem", &err) == CPDIT_OK);
    CHECK(!t.compute_measured && t.sgemm_flops == TOPO_DEFAULT_FLOPS);
    topo_file_free(&t);
    CHECK(topo_file_parse(&t, "[1, 2", "mem", &err) == CPDIT_ERR_INPUT);

    CHECK(topo_file_load(&t, fx("cpu_4ranks.json"), &err) == CPDIT_OK);
    CHECK(t.ranks == 4 && t.n_hosts == 1 && t.hosts[0].nranks == 4);
    CHECK(topo_pair_class(&t, 0, 1) == TOPO_SAME_NUMA);  /* package 0, NUMA 0 */
    CHECK(topo_pair_class(&t, 1, 2) == TOPO_SAME_NODE);  /* packages 0 and 1 */
    int used = 9;
    topo_fit f = topo_fit_for(&t, TOPO_SAME_SOCKET, &used); /* not measured: next wider */
    CHECK(used == TOPO_SAME_NODE && f.beta_Bps == 5e9);
    f = topo_fit_for(&t, TOPO_CROSS_NODE, &used);           /* nothing wider: default */
    CHECK(used == -1 && f.beta_Bps == TOPO_DEFAULT_CROSS_BETA_BPS);
    CHECK(t.n_p2p == 8);
    topo_file_free(&t);

    CHECK(topo_file_load(&t, fx("pcie_node.json"), &err) == CPDIT_OK);
    CHECK(t.n_coll == 6);
    /* interpolation between the 1 MiB and 16 MiB rows of the 8-way all-to-all */
    const double a = 7e-5 + 1048576 / 2e9, b = 7e-5 + 16777216 / 2e9;
    CHECK_NEAR(topo_coll_time(&t, TOPO_ALLTOALL, 8, TOPO_SAME_NUMA, 1048576), a, 1e-12);
    CHECK_NEAR(topo_coll_time(&t, TOPO_ALLTOALL, 8, TOPO_SAME_NUMA, 8912896),
               (a + b) / 2, 1e-9);
    CHECK(topo_coll_time(&t, TOPO_ALLTOALL, 3, TOPO_SAME_NUMA, 1048576) == 0);
    topo_file_free(&t);
}

static void test_two_nodes(void)
{
    topology t;
    model_plan_shape s;
    cpdit_error err;
    if (load(&t, &s, "two_nodes_8gpu.json", fx("flux-dev-transformer"), 2048, 2048)) {
        CHECK(0);
        return;
    }
    CHECK(s.text_tokens == 512 && s.image_tokens == 16384 && s.heads == 24);
    CHECK(s.params > 1.15e10 && s.params < 1.25e10); /* FLUX.1: 11.9e9 */
    cm_options o = {0, 28, 1, 1, 0};
    cm_prediction *p = NULL;
    int n = 0;
    CHECK(cm_rank(&t, &s, &o, NULL, &p, &n, &err) == CPDIT_OK);
    CHECK(n == 25);
    CHECK_MSG(p[0].cfg.dp == 1 && p[0].cfg.ring == 2 && p[0].cfg.ulysses == 8 &&
                  strcmp(p[0].variant, "unified") == 0,
              "chosen dp %d ring %d ulysses %d %s", p[0].cfg.dp, p[0].cfg.ring,
              p[0].cfg.ulysses, p[0].variant);
    CHECK(p[0].ulysses_class < TOPO_CROSS_NODE && p[0].ring_class == TOPO_CROSS_NODE);
    CHECK(p[0].hidden_s > 0 && p[0].fits);
    /* heads: 24 over 16 Ulysses ranks needs the uneven mode; 24 over 8 does not */
    const cm_prediction *u16 = find(p, n, 1, 1, 16, CP_RING_P2P);
    CHECK(u16 && strcmp(u16->variant, "ulysses+anything") == 0);
    const cm_prediction *r16 = find(p, n, 1, 16, 1, CP_RING_P2P);
    CHECK(r16 && strcmp(r16->variant, "ring") == 0 && r16->ring_class == TOPO_CROSS_NODE);
    /* throughput: with 1000 images, all-data-parallel wins (the model fits on a GPU) */
    free(p);
    o.images = 1000;
    CHECK(cm_rank(&t, &s, &o, NULL, &p, &n, &err) == CPDIT_OK);
    CHECK(p[0].cfg.dp == 16);
    free(p);
    /* the tiny model on 16 ranks: all data-parallel even for one image */
    model_plan_shape tiny;
    CHECK(shape_load(&tiny, "builtin:tiny", 512, 512, &err) == CPDIT_OK);
    CHECK(tiny.heads == 6 && tiny.text_tokens == 512 && tiny.image_tokens == 1024);
    o.images = 1;
    CHECK(cm_rank(&t, &tiny, &o, NULL, &p, &n, &err) == CPDIT_OK);
    CHECK_MSG(p[0].cfg.dp == 16 && strcmp(p[0].variant, "local") == 0, "chosen dp %d %s",
              p[0].cfg.dp, p[0].variant);
    free(p);
    topo_file_free(&t);
}

static void test_pcie(void)
{
    topology t;
    model_plan_shape s;
    cpdit_error err;
    if (load(&t, &s, "pcie_node.json", fx("flux-dev-transformer"), 2048, 2048)) {
        CHECK(0);
        return;
    }
    cm_options o = {0, 28, 1, 1, 0};
    cm_prediction *p = NULL;
    int n = 0;
    CHECK(cm_rank(&t, &s, &o, NULL, &p, &n, &err) == CPDIT_OK);
    /* never the congested 8-way all-to-all first (with bf16 activations on the GPU tables the
     * all-to-alls move half the bytes: ring 2 x ulysses 4 now edges out 4 x 2, by ~4 %) */
    CHECK_MSG(p[0].cfg.ulysses <= 4 && p[0].cfg.ring * p[0].cfg.ulysses > 1, "chosen %d x %d",
              p[0].cfg.ring, p[0].cfg.ulysses);
    int first_cp = -1;
    for (int i = 0; i < n && first_cp < 0; i++)
        if (p[i].cfg.ring * p[i].cfg.ulysses > 1)
            first_cp = i;
    CHECK(first_cp >= 0 && p[first_cp].cfg.ulysses <= 4);
    /* the congested 8-way all-to-all makes pure Ulysses 8 slower than ring 8 */
    const cm_prediction *u8 = find(p, n, 1, 1, 8, CP_RING_P2P);
    const cm_prediction *r8 = find(p, n, 1, 8, 1, CP_RING_P2P);
    CHECK(u8 && r8 && u8->step_s > r8->step_s);
    free(p);
    topo_file_free(&t);
}

static void test_uneven_and_tuned(void)
{
    topology t;
    model_plan_shape s;
    cpdit_error err;
    cpdit_error_clear(&err);
    /* 496 x 496: 961 image + 512 text = 1473 tokens, divisible by no grid of 2 or 4 */
    if (load(&t, &s, "cpu_4ranks.json", "builtin:tiny", 496, 496)) {
        CHECK(0);
        return;
    }
    cm_options o = {0, 4, 1, 1, 0};
    cm_prediction *p = NULL;
    int n = 0;
    CHECK(cm_rank(&t, &s, &o, NULL, &p, &n, &err) == CPDIT_OK);
    CHECK(n == 9);
    for (int i = 0; i < n; i++) {
        const int cp = p[i].cfg.ring * p[i].cfg.ulysses;
        CHECK_MSG((cp > 1) == (strstr(p[i].variant, "+anything") != NULL), "%s on %d",
                  p[i].variant, cp);
    }
    free(p);
    /* 512 x 512: 1536 tokens divide 2 and 4; 6 heads divide 2 but not 4 */
    CHECK(shape_load(&s, "builtin:tiny", 512, 512, &err) == CPDIT_OK);
    CHECK(cm_rank(&t, &s, &o, NULL, &p, &n, &err) == CPDIT_OK);
    const cm_prediction *u4 = find(p, n, 1, 1, 4, CP_RING_P2P);
    const cm_prediction *u2 = find(p, n, 1, 2, 2, CP_RING_P2P);
    const cm_prediction *r4 = find(p, n, 1, 4, 1, CP_RING_ALLGATHER);
    CHECK(u4 && strcmp(u4->variant, "ulysses+anything") == 0);
    CHECK(u2 && strcmp(u2->variant, "unified") == 0);
    CHECK(r4 && strcmp(r4->variant, "ring-allgather") == 0);
    cp_attention_config ac;
    CHECK(cm_variant_parse("ulysses+anything", &ac, &err) == CPDIT_OK &&
          ac.variant == CP_ATTN_ULYSSES && ac.anything == 1);
    CHECK(cm_variant_parse("local", &ac, &err) == CPDIT_OK && ac.anything == 0);
    CHECK(cm_variant_parse("ring+fast", &ac, &err) == CPDIT_ERR_INPUT);
    /* the predicted winner must not be the one we record as measured best */
    const cm_prediction *last = &p[n - 1];
    topo_tuned e = {(char *)"builtin:tiny", 512, 512, 4, 1, 256, 0, 2, "cpu", "F32", 0,
                    {0}, NULL, 0};
    topo_grid_time ms[2] = {{last->cfg.dp, last->cfg.ring, last->cfg.ulysses, "", 0.5},
                            {p[0].cfg.dp, p[0].cfg.ring, p[0].cfg.ulysses, "", 0.9}};
    snprintf(ms[0].variant, sizeof ms[0].variant, "%s", last->variant);
    snprintf(ms[1].variant, sizeof ms[1].variant, "%s", p[0].variant);
    e.chosen = ms[0];
    e.measured = ms;
    e.n_measured = 2;
    free(p);

    /* save into a copy of the file, reload: the entry is there, other keys kept */
    char tmp[] = "/tmp/cpdit-topo-XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0);
    FILE *in = fopen(fx("cpu_4ranks.json"), "rb"), *out = fdopen(fd, "wb");
    char buf[4096];
    size_t k;
    while (in && out && (k = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, k, out);
    fclose(in);
    fclose(out);
    topology t2;
    CHECK(topo_file_load(&t2, tmp, &err) == CPDIT_OK);
    CHECK(topo_file_save_tuned(&t2, &e, &err) == CPDIT_OK);
    CHECK(topo_file_save_tuned(&t2, &e, &err) == CPDIT_OK); /* replaces, not appends */
    topo_file_free(&t2);
    CHECK(topo_file_load(&t2, tmp, &err) == CPDIT_OK);
    CHECK(t2.n_tuned == 1 && t2.fits[TOPO_SAME_NUMA].measured && t2.n_p2p == 8);
    topo_tuned_key key;
    topo_tuned_key_of(&e, &key);
    const topo_tuned *tu = topo_find_tuned(&t2, &key);
    CHECK(tu && tu->n_measured == 2 && tu->measured[0].step_s == 0.5);
    CHECK(tu->text_tokens == 256 && tu->threads == 2 && strcmp(tu->backend, "cpu") == 0);
    /* every field of the key counts: another height, token count, CFG, thread count or
     * backend finds nothing */
    topo_tuned_key k2 = key;
    k2.height = 256;
    CHECK(topo_find_tuned(&t2, &k2) == NULL);
    k2 = key, k2.text_tokens = 32;
    CHECK(topo_find_tuned(&t2, &k2) == NULL);
    k2 = key, k2.cfg = 1;
    CHECK(topo_find_tuned(&t2, &k2) == NULL);
    k2 = key, k2.threads = 1;
    CHECK(topo_find_tuned(&t2, &k2) == NULL);
    k2 = key, k2.backend = "cpu-bf16";
    CHECK(topo_find_tuned(&t2, &k2) == NULL);
    CHECK(cm_rank(&t2, &s, &o, tu, &p, &n, &err) == CPDIT_OK);
    CHECK(p[0].cfg.dp == ms[0].dp && p[0].cfg.ring == ms[0].ring &&
          p[0].cfg.ulysses == ms[0].ulysses && p[0].measured_s == 0.5);
    CHECK(p[1].measured_s == 0.9); /* measured grids first, then the predictions */
    for (int i = 2; i < n; i++)
        CHECK(p[i].measured_s == 0);
    free(p);
    topo_file_free(&t2);
    unlink(tmp);
    topo_file_free(&t);
}

static void test_model_shapes(void)
{
    topology t;
    model_plan_shape s;
    cpdit_error err;
    cpdit_error_clear(&err);
    if (load(&t, &s, "cpu_4ranks.json", "builtin:tiny", 512, 512)) {
        CHECK(0);
        return;
    }
    /* 512 text + 1024 image tokens, 6 heads of 16 */
    cm_options o = {0, 4, 1, 1, 0};
    cm_prediction *p0 = NULL, *p1 = NULL;
    int n0 = 0, n1 = 0;
    CHECK(cm_rank(&t, &s, &o, NULL, &p0, &n0, &err) == CPDIT_OK);
    json_t *e = json_pack("{s:s,s:i,s:i,s:i,s:i,s:i}", "model", "builtin:tiny", "width", 512,
                          "height", 512, "txt_tokens", 512, "img_tokens", 1024, "ranks", 4);
    json_t *lin = json_pack("[{s:i,s:f},{s:i,s:f},{s:i,s:f}]", "cp", 1, "time_s", 0.4, "cp", 2,
                            "time_s", 0.2, "cp", 4, "time_s", 0.1);
    json_t *att = json_pack("[{s:i,s:i,s:i,s:i,s:f},{s:i,s:i,s:i,s:i,s:f}]", "sq", 1536, "skv",
                            1536, "heads", 6, "head_dim", 16, "time_s", 0.05, "sq", 1536, "skv",
                            1536, "heads", 3, "head_dim", 16, "time_s", 0.03);
    json_object_set_new(e, "linear", lin);
    json_object_set_new(e, "attention", att);
    CHECK(topo_file_add_shapes(&t, e, &err) == CPDIT_OK);
    CHECK(t.n_shapes == 1 && t.shapes[0].n_linear == 3 && t.shapes[0].n_attn == 2);
    CHECK(cm_rank(&t, &s, &o, NULL, &p1, &n1, &err) == CPDIT_OK && n1 == n0);
    const cm_prediction *loc = find(p1, n1, 4, 1, 1, CP_RING_P2P);
    const cm_prediction *u2 = find(p1, n1, 2, 1, 2, CP_RING_P2P);
    const cm_prediction *r2 = find(p1, n1, 2, 2, 1, CP_RING_P2P);
    const cm_prediction *r2_0 = find(p0, n0, 2, 2, 1, CP_RING_P2P);
    CHECK(loc && loc->at_shapes && loc->linear_s == 0.4);
    CHECK_NEAR(loc->attn_s, 4 * 0.05, 1e-12); /* 2 double + 2 single blocks */
    CHECK(u2 && u2->at_shapes && u2->linear_s == 0.2);
    CHECK_NEAR(u2->attn_s, 4 * 0.03, 1e-12);
    /* ring blocks (768 x 768) were not measured: the rate, as before; the linear time is */
    CHECK(r2 && r2_0 && !r2->at_shapes && r2->linear_s == 0.2);
    CHECK_NEAR(r2->attn_s, r2_0->attn_s, 1e-15);
    /* a measured sync cost: 3 sync points per attention call on ring 2 (2 agreements + 1
     * step), 4 on Ulysses 2 (2 agreements + 2 all-to-alls); 4 calls per step */
    cm_prediction *p2 = NULL;
    int n2 = 0;
    json_t *e3 = json_deep_copy(json_array_get(json_object_get(json_object_get(t.json,
                                                                               "compute"),
                                                               "shapes"), 0));
    json_object_set_new(e3, "sync_s", json_real(0.001));
    CHECK(topo_file_add_shapes(&t, e3, &err) == CPDIT_OK && t.shapes[0].sync_s == 0.001);
    CHECK(cm_rank(&t, &s, &o, NULL, &p2, &n2, &err) == CPDIT_OK);
    const cm_prediction *r2s = find(p2, n2, 2, 2, 1, CP_RING_P2P);
    const cm_prediction *u2s = find(p2, n2, 2, 1, 2, CP_RING_P2P);
    const cm_prediction *locs = find(p2, n2, 4, 1, 1, CP_RING_P2P);
    CHECK(r2s && u2s && locs);
    CHECK_NEAR(r2s->comm_s - r2->comm_s, 4 * 3 * 0.001, 1e-12);
    CHECK_NEAR(u2s->comm_s - u2->comm_s, 4 * 4 * 0.001, 1e-12);
    CHECK(locs->comm_s == 0 && locs->step_s == loc->step_s);
    free(p2);
    free(p1);
    /* another size: the shapes do not apply */
    model_plan_shape s2;
    CHECK(shape_load(&s2, "builtin:tiny", 256, 512, &err) == CPDIT_OK);
    CHECK(cm_rank(&t, &s2, &o, NULL, &p1, &n1, &err) == CPDIT_OK);
    for (int i = 0; i < n1; i++)
        CHECK(!p1[i].at_shapes && p1[i].linear_s != 0.4 && p1[i].linear_s != 0.2);
    /* a second entry for the same model and size replaces the first */
    json_t *e2 = json_pack("{s:s,s:i,s:i,s:i,s:i,s:[{s:i,s:f}]}", "model", "builtin:tiny",
                           "width", 512, "height", 512, "txt_tokens", 512, "img_tokens", 1024,
                           "linear", "cp", 1, "time_s", 0.7);
    CHECK(topo_file_add_shapes(&t, e2, &err) == CPDIT_OK);
    CHECK(t.n_shapes == 1 && t.shapes[0].n_linear == 1 && t.shapes[0].linear[0].time_s == 0.7);
    free(p0);
    free(p1);
    topo_file_free(&t);
}

int main(void)
{
    const char *src = getenv("top_srcdir");
    snprintf(fixture_dir, sizeof fixture_dir, "%s/tests/data/topology", src ? src : ".");
    test_reader();
    test_two_nodes();
    test_pcie();
    test_uneven_and_tuned();
    test_model_shapes();
    TEST_MAIN_END();
}
