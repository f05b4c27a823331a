/* test_model_folder.c — diffusers folder layout, config.json getters, typed FLUX/VAE configs.
 * Uses the shipped FLUX.1-dev layout (tests/data/model_folder/flux1-dev, JSON only) for
 * real-world values and builds every error case in a scratch folder. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/component_config.h"
#include "lib/models/flux/flux_config.h"
#include "lib/io/model_config.h"
#include "lib/io/model_folder.h"
#include "tests/test_util.h"
#include "tests/test_tmpdir.h"

static char *fixture_root(void)
{
    const char *src = getenv("top_srcdir");
    char *p = NULL;
    if (src && src[0]) {
        if (asprintf(&p, "%s/tests/data/model_folder/flux1-dev", src) < 0)
            return NULL;
    } else { /* run by hand: find the source tree from this file's path */
        const char *f = __FILE__;
        const char *t = strstr(f, "tests/test_model_folder.c");
        int n = t ? (int)(t - f) : 0;
        if (asprintf(&p, "%.*stests/data/model_folder/flux1-dev", n, f) < 0)
            return NULL;
    }
    return p;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void test_shipped_pipeline(const char *root)
{
    model_folder mf;
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(model_folder_open(&mf, root, &err) == CPDIT_OK);
    CHECK(mf.kind == MODEL_FOLDER_PIPELINE);
    CHECK(model_folder_pipeline_class(&mf) && !strcmp(model_folder_pipeline_class(&mf), "FluxPipeline"));
    CHECK(model_folder_component_count(&mf) == 7); /* the two [null, null] entries excluded */
    CHECK(model_folder_component_name(&mf, 0) && !strcmp(model_folder_component_name(&mf, 0), "scheduler"));
    CHECK(model_folder_component_name(&mf, 6) && !strcmp(model_folder_component_name(&mf, 6), "vae"));
    CHECK(model_folder_component_name(&mf, 7) == NULL);

    const char *lib = NULL, *cls = NULL;
    CHECK(model_folder_component_class(&mf, "text_encoder_2", &lib, &cls, &err) == CPDIT_OK);
    CHECK(lib && cls && !strcmp(lib, "transformers") && !strcmp(cls, "T5EncoderModel"));
    CHECK(model_folder_component_class(&mf, "image_encoder", &lib, &cls, &err) == CPDIT_OK);
    CHECK(lib == NULL && cls == NULL);
    CHECK(model_folder_component_class(&mf, "unet", &lib, &cls, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "not listed");

    char *dir = NULL;
    CHECK(model_folder_component_dir(&mf, "transformer", &dir, &err) == CPDIT_OK);
    CHECK(dir && ends_with(dir, "flux1-dev/transformer"));
    free(dir);
    /* Listed in the index but not shipped: the message says what it should be. */
    CHECK(model_folder_component_dir(&mf, "text_encoder", &dir, &err) == CPDIT_ERR_INPUT);
    CHECK(dir == NULL);
    CHECK(ends_with(err.where, "flux1-dev/text_encoder"));
    CHECK_STR_CONTAINS(err.what, "transformers.CLIPTextModel");
    CHECK(model_folder_component_dir(&mf, "image_encoder", &dir, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "not part of this pipeline");
    CHECK(model_folder_component_dir(&mf, "../flux1-dev", &dir, &err) == CPDIT_ERR_INPUT);
    CHECK(model_folder_component_dir(&mf, "", &dir, &err) == CPDIT_ERR_INPUT);

    char *file = NULL;
    CHECK(model_folder_component_file(&mf, "vae", "config.json", 1, &file, &err) == CPDIT_OK);
    CHECK(file && ends_with(file, "vae/config.json"));
    free(file);
    CHECK(model_folder_component_file(&mf, "vae", "diffusion_pytorch_model.safetensors", 1, &file,
                                      &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "file not found");
    CHECK(ends_with(err.where, "vae/diffusion_pytorch_model.safetensors"));

    /* FLUX.1-dev transformer: no out_channels key (older diffusers) -> in_channels. */
    model_config cfg;
    flux_transformer_config fc;
    CHECK(model_folder_load_config(&mf, "transformer", &cfg, &err) == CPDIT_OK);
    CHECK(flux_transformer_config_from(&cfg, &fc, &err) == CPDIT_OK);
    CHECK(fc.patch_size == 1 && fc.in_channels == 64 && fc.out_channels == 64);
    CHECK(fc.num_layers == 19 && fc.num_single_layers == 38);
    CHECK(fc.attention_head_dim == 128 && fc.num_attention_heads == 24 && fc.inner_dim == 3072);
    CHECK(fc.joint_attention_dim == 4096 && fc.pooled_projection_dim == 768);
    CHECK(fc.guidance_embeds);
    CHECK(fc.n_axes == 3 && fc.axes_dims_rope[0] == 16 && fc.axes_dims_rope[1] == 56 &&
          fc.axes_dims_rope[2] == 56);
    model_config_free(&cfg);

    autoencoder_kl_config vc;
    CHECK(model_folder_load_config(&mf, "vae", &cfg, &err) == CPDIT_OK);
    CHECK(autoencoder_kl_config_from(&cfg, &vc, &err) == CPDIT_OK);
    CHECK(vc.in_channels == 3 && vc.out_channels == 3 && vc.latent_channels == 16);
    CHECK(vc.n_blocks == 4 && vc.block_out_channels[0] == 128 && vc.block_out_channels[3] == 512);
    CHECK(vc.layers_per_block == 2 && vc.norm_num_groups == 32 && vc.sample_size == 1024);
    CHECK_NEAR(vc.scaling_factor, 0.3611, 1e-12);
    CHECK(vc.has_shift_factor);
    CHECK_NEAR(vc.shift_factor, 0.1159, 1e-12);
    CHECK(!strcmp(vc.act_fn, "silu"));
    CHECK(!vc.use_quant_conv && !vc.use_post_quant_conv && vc.mid_block_add_attention);
    CHECK(vc.force_upcast);
    /* The VAE config is not a transformer config. */
    CHECK(flux_transformer_config_from(&cfg, &fc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "\"_class_name\"");
    CHECK_STR_CONTAINS(err.what, "AutoencoderKL");
    model_config_free(&cfg);
    model_folder_close(&mf);

    /* A trailing slash is fine. */
    char *slashed = NULL;
    CHECK(asprintf(&slashed, "%s//", root) > 0);
    CHECK(model_folder_open(&mf, slashed, &err) == CPDIT_OK);
    CHECK(mf.path && !ends_with(mf.path, "/"));
    model_folder_close(&mf);
    free(slashed);
}

static void test_shipped_component(const char *root)
{
    char *vae = tmp_path(root, "vae");
    model_folder mf;
    cpdit_error err;
    CHECK(model_folder_open(&mf, vae, &err) == CPDIT_OK);
    CHECK(mf.kind == MODEL_FOLDER_COMPONENT);
    CHECK(model_folder_pipeline_class(&mf) == NULL && model_folder_component_count(&mf) == 0);
    char *dir = NULL;
    CHECK(model_folder_component_dir(&mf, "vae", &dir, &err) == CPDIT_OK);
    CHECK(dir && !strcmp(dir, vae));
    free(dir);
    const char *lib = NULL, *cls = NULL;
    CHECK(model_folder_component_class(&mf, "vae", &lib, &cls, &err) == CPDIT_OK);
    CHECK(lib && cls && !strcmp(lib, "diffusers") && !strcmp(cls, "AutoencoderKL"));
    model_config cfg;
    autoencoder_kl_config vc;
    CHECK(model_folder_load_config(&mf, "vae", &cfg, &err) == CPDIT_OK);
    CHECK(autoencoder_kl_config_from(&cfg, &vc, &err) == CPDIT_OK && vc.latent_channels == 16);
    model_config_free(&cfg);
    model_folder_close(&mf);
    free(vae);
}

static void test_layouts(const char *tmp)
{
    model_folder mf;
    cpdit_error err;
    char *p;

    p = tmp_path(tmp, "empty");
    mkdir(p, 0755);
    CHECK(model_folder_open(&mf, p, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "not a diffusers model folder");
    free(p);
    p = tmp_path(tmp, "does-not-exist");
    CHECK(model_folder_open(&mf, p, &err) == CPDIT_ERR_INPUT);
    CHECK(!strcmp(err.where, p));
    free(p);
    CHECK(tmp_write(tmp, "plain.txt", "x") == 0);
    p = tmp_path(tmp, "plain.txt");
    CHECK(model_folder_open(&mf, p, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "not a folder");
    free(p);

    /* A root without model_index.json but with component subfolders. */
    CHECK(tmp_write(tmp, "noindex/transformer/config.json", "{\"num_layers\": 2}") == 0);
    p = tmp_path(tmp, "noindex");
    CHECK(model_folder_open(&mf, p, &err) == CPDIT_OK);
    CHECK(mf.kind == MODEL_FOLDER_PIPELINE && mf.index.root == NULL);
    char *dir = NULL;
    CHECK(model_folder_component_dir(&mf, "transformer", &dir, &err) == CPDIT_OK);
    free(dir);
    CHECK(model_folder_component_dir(&mf, "vae", &dir, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "no component \"vae\"");
    model_config cfg;
    flux_transformer_config fc;
    CHECK(model_folder_load_config(&mf, "transformer", &cfg, &err) == CPDIT_OK);
    CHECK(flux_transformer_config_from(&cfg, &fc, &err) == CPDIT_OK && fc.num_layers == 2);
    model_config_free(&cfg);
    model_folder_close(&mf);
    free(p);

    /* Index lists the transformer, its folder exists, but config.json does not. */
    CHECK(tmp_write(tmp, "noconfig/model_index.json",
                    "{\"_class_name\": \"FluxPipeline\", \"transformer\": [\"diffusers\", "
                    "\"FluxTransformer2DModel\"]}") == 0);
    CHECK(tmp_write(tmp, "noconfig/transformer/README", "weights only") == 0);
    p = tmp_path(tmp, "noconfig");
    CHECK(model_folder_open(&mf, p, &err) == CPDIT_OK);
    CHECK(model_folder_load_config(&mf, "transformer", &cfg, &err) == CPDIT_ERR_INPUT);
    CHECK(ends_with(err.where, "noconfig/transformer/config.json"));
    CHECK_STR_CONTAINS(err.what, "file not found");
    CHECK(cfg.root == NULL);
    model_folder_close(&mf);
    free(p);

    /* Invalid JSON: where carries line and column from jansson. */
    CHECK(tmp_write(tmp, "badjson/model_index.json", "{\"transformer\": [\"diffusers\", "
                                                      "\"FluxTransformer2DModel\"]}") == 0);
    CHECK(tmp_write(tmp, "badjson/transformer/config.json",
                    "{\n  \"num_layers\": 19,\n  \"patch_size\": ,\n}\n") == 0);
    p = tmp_path(tmp, "badjson");
    CHECK(model_folder_open(&mf, p, &err) == CPDIT_OK);
    CHECK(model_folder_load_config(&mf, "transformer", &cfg, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.where, "badjson/transformer/config.json:3:");
    CHECK_STR_CONTAINS(err.what, "invalid JSON");
    fprintf(stderr, "invalid JSON -> %s: %s\n", err.where, err.what);
    model_folder_close(&mf);
    free(p);

    CHECK(tmp_write(tmp, "badindex/model_index.json", "{\"vae\": [\"diffusers\" \"x\"]}") == 0);
    p = tmp_path(tmp, "badindex");
    CHECK(model_folder_open(&mf, p, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.where, "badindex/model_index.json:1:");
    free(p);
    CHECK(tmp_write(tmp, "badentry/model_index.json", "{\"vae\": \"AutoencoderKL\"}") == 0);
    p = tmp_path(tmp, "badentry");
    CHECK(model_folder_open(&mf, p, &err) == CPDIT_ERR_INPUT);
    CHECK(ends_with(err.where, "badentry/model_index.json"));
    CHECK_STR_CONTAINS(err.what, "key \"vae\": expected [library, class]");
    free(p);
    CHECK(tmp_write(tmp, "arrayroot/config.json", "[1, 2]") == 0);
    p = tmp_path(tmp, "arrayroot");
    CHECK(model_folder_open(&mf, p, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "JSON object");
    free(p);
}

/* The getters on an in-memory config, with exact messages. */
static void test_getters(void)
{
    model_config cfg;
    cpdit_error err;
    const char *json = "{\"i\": 7, \"r\": 2.0, \"h\": 2.5, \"s\": \"19\", \"b\": true, \"n\": null,"
                       " \"big\": 1000000000000, \"a\": [16, 56, 56], \"ab\": [1, \"x\"],"
                       " \"d\": [0.5, 1], \"sa\": [\"p\", \"q\"], \"o\": {}}";
    CHECK(model_config_load_string(&cfg, json, "transformer/config.json", &err) == CPDIT_OK);
    int i = 0;
    double d = 0;
    bool b = false;
    const char *s = NULL;
    CHECK(model_config_get_int(&cfg, "i", &i, &err) == CPDIT_OK && i == 7);
    CHECK(model_config_get_int(&cfg, "r", &i, &err) == CPDIT_OK && i == 2);
    CHECK(model_config_get_int(&cfg, "h", &i, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "got real number 2.5");
    CHECK(model_config_get_int(&cfg, "s", &i, &err) == CPDIT_ERR_INPUT);
    char line[2048];
    cpdit_error_format(&err, line, sizeof line);
    CHECK_MSG(!strcmp(line, "cpdit: transformer/config.json: key \"s\": expected an integer, got "
                            "string \"19\""),
              "%s", line);
    CHECK(model_config_get_int(&cfg, "missing", &i, &err) == CPDIT_ERR_INPUT);
    CHECK(!strcmp(err.what, "key \"missing\": missing (expected an integer)"));
    CHECK(model_config_get_int(&cfg, "n", &i, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "got null");
    CHECK(model_config_get_int(&cfg, "big", &i, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "out of range");
    CHECK(model_config_get_int_default(&cfg, "missing", 5, &i, &err) == CPDIT_OK && i == 5);
    CHECK(model_config_get_int_default(&cfg, "n", 6, &i, &err) == CPDIT_OK && i == 6);
    CHECK(model_config_get_int_default(&cfg, "s", 6, &i, &err) == CPDIT_ERR_INPUT);
    CHECK(model_config_get_double(&cfg, "i", &d, &err) == CPDIT_OK && d == 7.0);
    CHECK(model_config_get_double(&cfg, "h", &d, &err) == CPDIT_OK && d == 2.5);
    CHECK(model_config_get_double(&cfg, "b", &d, &err) == CPDIT_ERR_INPUT);
    CHECK(model_config_get_double_default(&cfg, "zz", 0.25, &d, &err) == CPDIT_OK && d == 0.25);
    CHECK(model_config_get_bool(&cfg, "b", &b, &err) == CPDIT_OK && b);
    CHECK(model_config_get_bool(&cfg, "i", &b, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "expected true or false, got integer 7");
    CHECK(model_config_get_bool_default(&cfg, "zz", true, &b, &err) == CPDIT_OK && b);
    CHECK(model_config_get_string(&cfg, "s", &s, &err) == CPDIT_OK && !strcmp(s, "19"));
    CHECK(model_config_get_string(&cfg, "o", &s, &err) == CPDIT_ERR_INPUT);
    CHECK(model_config_get_string_default(&cfg, "zz", "silu", &s, &err) == CPDIT_OK &&
          !strcmp(s, "silu"));
    int a[4], n = 0;
    CHECK(model_config_get_int_array(&cfg, "a", a, 4, &n, &err) == CPDIT_OK);
    CHECK(n == 3 && a[0] == 16 && a[1] == 56 && a[2] == 56);
    CHECK(model_config_get_int_array(&cfg, "a", a, 2, &n, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "at most 2");
    CHECK(model_config_get_int_array(&cfg, "ab", a, 4, &n, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "key \"ab[1]\": expected an integer, got string \"x\"");
    CHECK(model_config_get_int_array(&cfg, "i", a, 4, &n, &err) == CPDIT_ERR_INPUT);
    const int def[] = {1, 2};
    CHECK(model_config_get_int_array_default(&cfg, "zz", def, 2, a, 4, &n, &err) == CPDIT_OK &&
          n == 2 && a[1] == 2);
    double da[2];
    CHECK(model_config_get_double_array(&cfg, "d", da, 2, &n, &err) == CPDIT_OK && n == 2 &&
          da[0] == 0.5 && da[1] == 1.0);
    const char *sa[2];
    CHECK(model_config_get_string_array(&cfg, "sa", sa, 2, &n, &err) == CPDIT_OK && n == 2 &&
          !strcmp(sa[1], "q"));
    CHECK(model_config_has(&cfg, "i") && !model_config_has(&cfg, "n") &&
          !model_config_has(&cfg, "zz"));
    CHECK(model_config_class_name(&cfg) == NULL);
    model_config_free(&cfg);

    CHECK(model_config_load_string(&cfg, "{\"architectures\": [\"T5EncoderModel\"]}", "t5",
                                   &err) == CPDIT_OK);
    CHECK(model_config_class_name(&cfg) && !strcmp(model_config_class_name(&cfg), "T5EncoderModel"));
    model_config_free(&cfg);
    CHECK(model_config_load_string(&cfg, "{\"a\": 1", "mem.json", &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.where, "mem.json:1:");
}

/* Load a config from JSON text as "X/config.json" into a typed struct; returns the status
 * and leaves the message in err. */
static cpdit_status flux_from_text(const char *json, flux_transformer_config *fc, cpdit_error *err)
{
    model_config cfg;
    cpdit_status st = model_config_load_string(&cfg, json, "transformer/config.json", err);
    if (!st)
        st = flux_transformer_config_from(&cfg, fc, err);
    model_config_free(&cfg);
    return st;
}

static cpdit_status vae_from_text(const char *json, autoencoder_kl_config *vc, cpdit_error *err)
{
    model_config cfg;
    cpdit_status st = model_config_load_string(&cfg, json, "vae/config.json", err);
    if (!st)
        st = autoencoder_kl_config_from(&cfg, vc, err);
    model_config_free(&cfg);
    return st;
}

static void test_typed_configs(void)
{
    flux_transformer_config fc;
    autoencoder_kl_config vc;
    cpdit_error err;

    /* Defaults: an empty config is diffusers' default FluxTransformer2DModel. */
    CHECK(flux_from_text("{}", &fc, &err) == CPDIT_OK);
    CHECK(fc.patch_size == 1 && fc.in_channels == 64 && fc.out_channels == 64 &&
          fc.num_layers == 19 && fc.num_single_layers == 38 && fc.attention_head_dim == 128 &&
          fc.num_attention_heads == 24 && fc.joint_attention_dim == 4096 &&
          fc.pooled_projection_dim == 768 && !fc.guidance_embeds && fc.n_axes == 3 &&
          fc.axes_dims_rope[0] == 16 && fc.axes_dims_rope[2] == 56 && fc.inner_dim == 3072);
    CHECK(flux_from_text("{\"in_channels\": 20, \"out_channels\": null, \"attention_head_dim\": 16,"
                         " \"axes_dims_rope\": [4, 4, 8], \"num_attention_heads\": 2}",
                         &fc, &err) == CPDIT_OK);
    CHECK(fc.out_channels == 20 && fc.inner_dim == 32);
    CHECK(flux_from_text("{\"in_channels\": 20, \"out_channels\": 8}", &fc, &err) == CPDIT_OK &&
          fc.out_channels == 8);

    /* Validation, with the file and key in the message. */
    CHECK(flux_from_text("{\"num_layers\": \"19\"}", &fc, &err) == CPDIT_ERR_INPUT);
    CHECK(!strcmp(err.where, "transformer/config.json"));
    CHECK(!strcmp(err.what, "key \"num_layers\": expected an integer, got string \"19\""));
    CHECK(flux_from_text("{\"axes_dims_rope\": [16, 56, 48]}", &fc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "key \"axes_dims_rope\": entries sum to 120 but "
                                 "attention_head_dim is 128");
    CHECK(flux_from_text("{\"attention_head_dim\": 64}", &fc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "sum to 128 but attention_head_dim is 64");
    CHECK(flux_from_text("{\"axes_dims_rope\": [17, 55, 56]}", &fc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "even");
    CHECK(flux_from_text("{\"axes_dims_rope\": []}", &fc, &err) == CPDIT_ERR_INPUT);
    CHECK(flux_from_text("{\"num_attention_heads\": 0}", &fc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "key \"num_attention_heads\": must be positive (got 0)");
    CHECK(flux_from_text("{\"patch_size\": -1}", &fc, &err) == CPDIT_ERR_INPUT);
    CHECK(flux_from_text("{\"num_layers\": -1}", &fc, &err) == CPDIT_ERR_INPUT);
    CHECK(flux_from_text("{\"num_layers\": 0, \"num_single_layers\": 0}", &fc, &err) ==
          CPDIT_ERR_INPUT);
    CHECK(flux_from_text("{\"num_layers\": 0}", &fc, &err) == CPDIT_OK);
    CHECK(flux_from_text("{\"guidance_embeds\": 1}", &fc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "key \"guidance_embeds\": expected true or false");
    CHECK(flux_from_text("{\"_class_name\": \"SD3Transformer2DModel\"}", &fc, &err) ==
          CPDIT_ERR_INPUT);

    /* VAE defaults: diffusers' AutoencoderKL(). */
    CHECK(vae_from_text("{\"_class_name\": \"AutoencoderKL\"}", &vc, &err) == CPDIT_OK);
    CHECK(vc.in_channels == 3 && vc.out_channels == 3 && vc.latent_channels == 4 &&
          vc.n_blocks == 1 && vc.block_out_channels[0] == 64 && vc.layers_per_block == 1 &&
          vc.norm_num_groups == 32 && vc.sample_size == 32 && !vc.has_shift_factor &&
          vc.use_quant_conv && vc.use_post_quant_conv && vc.mid_block_add_attention &&
          vc.force_upcast && !strcmp(vc.act_fn, "silu"));
    CHECK_NEAR(vc.scaling_factor, 0.18215, 1e-12);
    CHECK(vae_from_text("{\"shift_factor\": null, \"sample_size\": [512, 768]}", &vc, &err) ==
              CPDIT_OK &&
          !vc.has_shift_factor && vc.sample_size == 512);

    CHECK(vae_from_text("{\"block_out_channels\": []}", &vc, &err) == CPDIT_ERR_INPUT);
    CHECK(!strcmp(err.where, "vae/config.json"));
    CHECK(!strcmp(err.what, "key \"block_out_channels\": must not be empty"));
    CHECK(vae_from_text("{\"block_out_channels\": [128, 100]}", &vc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "entry 1 is 100");
    CHECK(vae_from_text("{\"latent_channels\": 0}", &vc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "key \"latent_channels\": must be positive");
    CHECK(vae_from_text("{\"scaling_factor\": 0}", &vc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "key \"scaling_factor\"");
    CHECK(vae_from_text("{\"shift_factor\": \"0.1\"}", &vc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "key \"shift_factor\": expected a number");
    CHECK(vae_from_text("{\"act_fn\": \"swoosh\"}", &vc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "unknown activation \"swoosh\"");
    CHECK(vae_from_text("{\"block_out_channels\": [64, 128], \"down_block_types\": "
                        "[\"DownEncoderBlock2D\"]}",
                        &vc, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "key \"down_block_types\": has 1 entries but "
                                 "block_out_channels has 2");
    CHECK(vae_from_text("{\"up_block_types\": [\"AttnUpDecoderBlock2D\"]}", &vc, &err) ==
          CPDIT_ERR_INPUT);
    CHECK(vae_from_text("{\"use_quant_conv\": \"no\"}", &vc, &err) == CPDIT_ERR_INPUT);
    CHECK(vae_from_text("{\"_class_name\": \"FluxTransformer2DModel\"}", &vc, &err) ==
          CPDIT_ERR_INPUT);

    /* Built in code, validated the same way. */
    flux_transformer_config_defaults(&fc);
    fc.attention_head_dim = 64;
    CHECK(flux_transformer_config_validate(&fc, "builtin:tiny", &err) == CPDIT_ERR_INPUT);
    CHECK(!strcmp(err.where, "builtin:tiny"));
    autoencoder_kl_config_defaults(&vc);
    CHECK(autoencoder_kl_config_validate(&vc, "builtin:tiny", &err) == CPDIT_OK);
}

int main(void)
{
    char *root = fixture_root();
    char *tmp = tmpdir_make("model");
    if (!root || !tmp)
        TEST_SKIP("cannot create a scratch folder");
    if (!tmp_exists(root)) {
        fprintf(stderr, "fixture folder %s not found (set top_srcdir)\n", root);
        return 1;
    }
    test_shipped_pipeline(root);
    test_shipped_component(root);
    test_layouts(tmp);
    test_getters();
    test_typed_configs();
    tmpdir_remove(tmp);
    free(tmp);
    free(root);
    TEST_MAIN_END();
}
