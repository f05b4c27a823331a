/* test_builtin_model.c — the built-in tiny model (lib/builtin/builtin_model.h):
 *   - specs, names, the cache folder from CPDIT_CACHE / XDG_CACHE_HOME / HOME;
 *   - the written folder loads through the normal loaders: model_folder (pipeline classes),
 *     both tokenizers ("a photo of a cat" → one token per word, ids as in the vocab files),
 *     the FLUX transformer (config and parameter count) with one forward pass, the VAE decoder
 *     with one decode, and both text encoders (parameter counts, one forward each) — every
 *     output finite with a standard deviation in [STD_MIN, STD_MAX], so the
 *     generated scales neither explode nor vanish;
 *   - writing twice gives byte-identical files, and the weight files and merges.txt have
 *     frozen digests (a change must bump BUILTIN_MODEL_VERSION); writing onto a complete
 *     copy is a no-op;
 *     a foreign non-empty folder is refused; an unknown name is an INPUT error;
 *   - concurrent builtin_model_path calls (N_CONCURRENT forked processes) all succeed with
 *     the same folder and leave no temporary folder behind.
 * Prints the sizes (parameters per component, folder bytes) and the write time.
 */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/builtin/builtin_model.h"
#include "lib/text/clip_text_model.h"
#include "lib/pipeline/flow_schedule.h"
#include "lib/models/flux/flux_scheduler.h"
#include "lib/models/flux/flux_transformer.h"
#include "lib/io/model_folder.h"
#include "lib/io/safetensors.h"
#include "lib/text/t5_encoder.h"
#include "lib/text/text_encode.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"
#include "lib/text/tokenizer_clip.h"
#include "lib/text/tokenizer_t5.h"
#include "lib/vae/vae_decoder.h"

#define STD_MIN 0.05 /* output standard deviation range of a healthy random model */
#define STD_MAX 20.0
#define N_CONCURRENT 3
#define LAT 4        /* latent side of the VAE check: 4x4 latents -> 32x32 pixels */
#define TXT_LEN 8    /* text tokens of the transformer check */
#define IMG_SIDE 4   /* packed image tokens per side of the transformer check */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float frand(unsigned long long *s) /* uniform in [-1, 1) */
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* 1 when every value is finite and the std lies in [STD_MIN, STD_MAX]; prints the std. */
static int healthy(const char *what, const float *x, size_t n)
{
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            fprintf(stderr, "%s: value %zu is not finite\n", what, i);
            return 0;
        }
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    const double mean = s / (double)n, sd = sqrt(fmax(0, s2 / (double)n - mean * mean));
    fprintf(stderr, "  %-28s n=%-6zu mean=% .4f std=%.4f\n", what, n, mean, sd);
    return sd >= STD_MIN && sd <= STD_MAX;
}

/* ------------------------------------------------------------------ comparing folders */

/* 1 when the trees at a and b hold the same names and byte-identical files. */
static int same_tree(const char *a, const char *b)
{
    struct stat sa, sb;
    if (lstat(a, &sa) != 0 || lstat(b, &sb) != 0)
        return 0;
    if (S_ISREG(sa.st_mode)) {
        size_t la = 0, lb = 0;
        char *ba = tmp_read(a, &la), *bb = tmp_read(b, &lb);
        int same = ba && bb && la == lb && memcmp(ba, bb, la) == 0;
        if (!same)
            fprintf(stderr, "files differ: %s %s\n", a, b);
        free(ba);
        free(bb);
        return same;
    }
    if (!S_ISDIR(sa.st_mode) || !S_ISDIR(sb.st_mode))
        return 0;
    if (tmp_count_entries(a) != tmp_count_entries(b)) {
        fprintf(stderr, "folders differ in entries: %s %s\n", a, b);
        return 0;
    }
    DIR *d = opendir(a);
    struct dirent *e;
    int same = d != NULL;
    while (same && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *pa = tmp_path(a, e->d_name), *pb = tmp_path(b, e->d_name);
        same = same_tree(pa, pb);
        free(pa);
        free(pb);
    }
    if (d)
        closedir(d);
    return same;
}

/* ------------------------------------------------------------------ frozen bytes
 * FNV-1a 64 digests of the files whose bytes come from cpdit alone (not from jansson's
 * formatting). A change here means builtin:tiny changed: bump BUILTIN_MODEL_VERSION (so old
 * caches are not reused) and update the digests. */
static const struct {
    const char *file;
    unsigned long long fnv1a;
} FROZEN[] = {
    {"transformer/diffusion_pytorch_model.safetensors", 0xbc68540565cc3144ull},
    {"vae/diffusion_pytorch_model.safetensors", 0x5e57f6a9d24219beull},
    {"text_encoder/model.safetensors", 0xb2417bf72394276dull},
    {"text_encoder_2/model.safetensors", 0x448c4a00ea7d777full},
    {"tokenizer/merges.txt", 0x4efa9a8590bf1116ull},
};

static void check_frozen(const char *dir)
{
    for (size_t i = 0; i < sizeof FROZEN / sizeof FROZEN[0]; i++) {
        char *p = tmp_path(dir, FROZEN[i].file);
        size_t n = 0;
        unsigned char *b = (unsigned char *)tmp_read(p, &n);
        unsigned long long h = 0xcbf29ce484222325ull;
        for (size_t k = 0; b && k < n; k++)
            h = (h ^ b[k]) * 0x100000001b3ull;
        CHECK_MSG(b && h == FROZEN[i].fnv1a,
                  "%s: digest 0x%016llx, expected 0x%016llx (see FROZEN)", FROZEN[i].file, h,
                  FROZEN[i].fnv1a);
        free(b);
        free(p);
    }
}

/* ------------------------------------------------------------------ the checks */

static void check_specs(void)
{
    cpdit_error err;
    char p[512];
    CHECK(builtin_model_is_spec("builtin:tiny"));
    CHECK(builtin_model_is_spec("builtin:other"));
    CHECK(!builtin_model_is_spec("/models/flux"));
    CHECK(!builtin_model_is_spec(NULL));
    CHECK(builtin_model_count() == 2);
    CHECK(builtin_model_name_at(0) && !strcmp(builtin_model_name_at(0), "tiny"));
    CHECK(builtin_model_name_at(1) && !strcmp(builtin_model_name_at(1), "shapes"));
    CHECK(builtin_model_name_at(2) == NULL);
    CHECK(builtin_model_description_at(1) && strstr(builtin_model_description_at(1), "trained"));

    setenv("CPDIT_CACHE", "/c", 1);
    CHECK(builtin_model_cache_dir("builtin:tiny", p, sizeof p, &err) == CPDIT_OK);
    CHECK(!strcmp(p, "/c/builtin-tiny-v2"));
    unsetenv("CPDIT_CACHE");
    setenv("XDG_CACHE_HOME", "/x", 1);
    CHECK(builtin_model_cache_dir("builtin:tiny", p, sizeof p, &err) == CPDIT_OK);
    CHECK(!strcmp(p, "/x/cpdit/builtin-tiny-v2"));
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/h", 1);
    CHECK(builtin_model_cache_dir("builtin:tiny", p, sizeof p, &err) == CPDIT_OK);
    CHECK(!strcmp(p, "/h/.cache/cpdit/builtin-tiny-v2"));
    CHECK(builtin_model_cache_dir("builtin:tiny", p, 8, &err) == CPDIT_ERR_INPUT);
    CHECK(builtin_model_cache_dir("builtin:huge", p, sizeof p, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "builtin:tiny");
    CHECK(builtin_model_write("huge", "/nonexistent/x", &err) == CPDIT_ERR_INPUT);
    CHECK(builtin_model_resolve("/models/flux", p, sizeof p, &err) == CPDIT_OK);
    CHECK(!strcmp(p, "/models/flux"));
}

static void check_folder(const char *dir)
{
    cpdit_error err;
    model_folder mf;
    const cpdit_status ost = model_folder_open(&mf, dir, &err);
    CHECK(ost == CPDIT_OK);
    if (ost != CPDIT_OK)
        return;
    CHECK(!strcmp(model_folder_pipeline_class(&mf), "FluxPipeline"));
    CHECK(model_folder_component_count(&mf) == 7);
    const char *lib, *cls;
    CHECK(model_folder_component_class(&mf, "tokenizer_2", &lib, &cls, &err) == CPDIT_OK);
    CHECK(cls && !strcmp(cls, "T5TokenizerFast"));
    model_folder_close(&mf);
    /* the schedule is FLUX.1-dev's */
    flow_schedule_config sc, dev;
    CHECK(flow_schedule_config_load(dir, &sc, &err) == CPDIT_OK);
    flow_schedule_config_flux_dev(&dev);
    CHECK(sc.use_dynamic_shifting && dev.use_dynamic_shifting);
    CHECK(sc.num_train_timesteps == dev.num_train_timesteps);
    CHECK(sc.base_image_seq_len == dev.base_image_seq_len);
    CHECK(sc.max_image_seq_len == dev.max_image_seq_len);
    CHECK_NEAR(sc.base_shift, dev.base_shift, 1e-12);
    CHECK_NEAR(sc.max_shift, dev.max_shift, 1e-12);
    CHECK_NEAR(sc.shift, dev.shift, 1e-12);
}

/* id of token in a vocab.json object, or -1 */
static int vocab_id(json_t *vocab, const char *token)
{
    json_t *v = json_object_get(vocab, token);
    return json_is_integer(v) ? (int)json_integer_value(v) : -1;
}

/* id of piece in tokenizer.json's model.vocab, or -1 */
static int piece_id(json_t *tok, const char *piece)
{
    json_t *vocab = json_object_get(json_object_get(tok, "model"), "vocab");
    for (size_t i = 0; i < json_array_size(vocab); i++)
        if (!strcmp(json_string_value(json_array_get(json_array_get(vocab, i), 0)), piece))
            return (int)i;
    return -1;
}

static void check_tokenizers(const char *dir, const builtin_model_stats *st)
{
    cpdit_error err;
    char *p = tmp_path(dir, "tokenizer");
    clip_tokenizer *ct = NULL;
    CHECK(clip_tokenizer_load(p, &ct, &err) == CPDIT_OK);
    free(p);
    p = tmp_path(dir, "tokenizer/vocab.json");
    json_t *vocab = json_load_file(p, 0, NULL);
    free(p);
    if (ct && vocab) {
        const char *text = "a photo of a cat";
        const char *words[] = {"a</w>", "photo</w>", "of</w>", "a</w>", "cat</w>"};
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(clip_tokenizer_encode(ct, text, strlen(text), CLIP_MAX_LENGTH, &ids, &n, NULL,
                                    &err) == CPDIT_OK);
        CHECK_MSG(n == 7, "clip: %zu ids", n);
        CHECK(clip_tokenizer_vocab_size(ct) == st->clip_vocab);
        CHECK(clip_tokenizer_bos_id(ct) == (int32_t)st->clip_vocab - 2);
        CHECK(clip_tokenizer_eos_id(ct) == (int32_t)st->clip_vocab - 1);
        for (size_t i = 0; n == 7 && i < 5; i++)
            CHECK_MSG(ids[i + 1] == vocab_id(vocab, words[i]), "clip word %s: id %d", words[i],
                      ids[i + 1]);
        CHECK(n == 7 && ids[0] == clip_tokenizer_bos_id(ct) && ids[6] == clip_tokenizer_eos_id(ct));
        free(ids);
        /* an unseen word still tokenizes (byte symbols and merges) */
        CHECK(clip_tokenizer_encode(ct, "zyxw qq!", 8, 0, &ids, &n, NULL, &err) == CPDIT_OK);
        CHECK(n >= 5);
        free(ids);
    }
    json_decref(vocab);
    clip_tokenizer_free(ct);

    p = tmp_path(dir, "tokenizer_2");
    t5_tokenizer *tt = NULL;
    CHECK(t5_tokenizer_load(p, &tt, &err) == CPDIT_OK);
    free(p);
    p = tmp_path(dir, "tokenizer_2/tokenizer.json");
    json_t *tj = json_load_file(p, 0, NULL);
    free(p);
    if (tt && tj) {
        const char *text = "A photo of a cat.";
        const char *pieces[] = {"\xe2\x96\x81" "A", "\xe2\x96\x81photo", "\xe2\x96\x81of",
                                "\xe2\x96\x81" "a", "\xe2\x96\x81" "cat", "."};
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(t5_tokenizer_encode(tt, text, strlen(text), 0, &ids, &n, NULL, &err) == CPDIT_OK);
        CHECK_MSG(n == 7, "t5: %zu ids", n);
        for (size_t i = 0; n == 7 && i < 6; i++)
            CHECK_MSG(ids[i] == piece_id(tj, pieces[i]), "t5 piece %s: id %d", pieces[i], ids[i]);
        CHECK(n == 7 && ids[6] == 1); /* </s> */
        CHECK(t5_tokenizer_eos_id(tt) == 1 && t5_tokenizer_pad_id(tt) == 0);
        CHECK(t5_tokenizer_vocab_size(tt) == st->t5_vocab);
        free(ids);
        /* a character no piece covers is <unk> (2) */
        CHECK(t5_tokenizer_encode(tt, "\xc3\xa9", 2, 0, &ids, &n, NULL, &err) == CPDIT_OK);
        CHECK(n == 3 && ids[1] == 2);
        free(ids);
    }
    json_decref(tj);
    t5_tokenizer_free(tt);
}

static void check_transformer(const char *dir, const builtin_model_stats *st)
{
    cpdit_error err;
    flux_transformer *m = NULL;
    CHECK(flux_transformer_open(&m, dir, &err) == CPDIT_OK);
    if (!m) {
        fprintf(stderr, "%s: %s\n", err.where, err.what);
        return;
    }
    const flux_transformer_config *c = flux_transformer_config_of(m);
    CHECK(c->num_attention_heads == 6 && c->attention_head_dim == 16 && c->inner_dim == 96);
    CHECK(c->num_layers == 2 && c->num_single_layers == 2 && c->guidance_embeds);
    CHECK(c->in_channels == 64 && c->joint_attention_dim == 64 && c->pooled_projection_dim == 32);
    CHECK(flux_transformer_param_count(m) == st->transformer_params);

    enum { IMG = IMG_SIDE * IMG_SIDE };
    unsigned long long seed = 7;
    static float hs[IMG * 64], ehs[TXT_LEN * 64], pooled[32], txt_ids[TXT_LEN * 3],
        img_ids[IMG * 3], out[IMG * 64];
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        hs[i] = frand(&seed);
    for (size_t i = 0; i < sizeof ehs / sizeof ehs[0]; i++)
        ehs[i] = frand(&seed);
    for (size_t i = 0; i < sizeof pooled / sizeof pooled[0]; i++)
        pooled[i] = frand(&seed);
    memset(txt_ids, 0, sizeof txt_ids);
    for (int i = 0; i < IMG; i++) {
        img_ids[3 * i] = 0;
        img_ids[3 * i + 1] = (float)(i / IMG_SIDE);
        img_ids[3 * i + 2] = (float)(i % IMG_SIDE);
    }
    const float t = 0.7f, g = 3.5f;
    flux_inputs in = {1, TXT_LEN, IMG, hs, ehs, pooled, &t, &g, txt_ids, img_ids};
    CHECK(flux_transformer_forward(m, NULL, NULL, &in, out, &err) == CPDIT_OK);
    CHECK(healthy("transformer output", out, IMG * 64));
    flux_transformer_close(m);
}

static void check_vae(const char *dir, const builtin_model_stats *st)
{
    cpdit_error err;
    vae_decoder *d = NULL;
    CHECK(vae_decoder_load(&d, dir, &err) == CPDIT_OK);
    if (!d) {
        fprintf(stderr, "%s: %s\n", err.where, err.what);
        return;
    }
    const autoencoder_kl_config *c = vae_decoder_config(d);
    CHECK(c->latent_channels == 16 && c->n_blocks == 4 && vae_decoder_upscale(d) == 8);
    CHECK_NEAR(c->scaling_factor, 0.3611, 1e-12);
    CHECK_NEAR(c->shift_factor, 0.1159, 1e-12);
    size_t dec_params = 0;
    vae_param_info info;
    for (size_t i = 0; vae_decoder_param_at(d, i, &info) == 0; i++)
        dec_params += info.count;
    CHECK(dec_params < st->vae_params); /* the encoder is in the file too */
    fprintf(stderr, "  vae decoder params %zu, encoder params %zu\n", dec_params,
            st->vae_params - dec_params);
    static float z[16 * LAT * LAT], img[3 * 8 * LAT * 8 * LAT];
    unsigned long long seed = 11;
    for (size_t i = 0; i < sizeof z / sizeof z[0]; i++)
        z[i] = frand(&seed);
    vae_latents_denormalize(c, z, sizeof z / sizeof z[0]);
    CHECK(vae_decode(d, z, 1, LAT, LAT, img, &err) == CPDIT_OK);
    CHECK(healthy("vae decode", img, sizeof img / sizeof img[0]));
    vae_decoder_free(d);
}

static void check_text_encoders(const char *dir, const builtin_model_stats *st)
{
    cpdit_error err;
    int32_t ids[CLIP_MAX_LENGTH];
    for (int i = 0; i < CLIP_MAX_LENGTH; i++)
        ids[i] = (int32_t)((i * 37 + 5) % (int)st->clip_vocab);
    ids[10] = (int32_t)st->clip_vocab - 1; /* an end token */
    char *p = tmp_path(dir, "text_encoder");
    clip_text_model *cm = NULL;
    CHECK(clip_text_model_load(p, NULL, &cm, &err) == CPDIT_OK);
    free(p);
    if (cm) {
        CHECK(clip_text_model_param_count(cm) == st->clip_params);
        static float hidden[CLIP_MAX_LENGTH * 32], pooled[32];
        CHECK(clip_text_model_forward(cm, ids, 1, CLIP_MAX_LENGTH, hidden, pooled, &err) ==
              CPDIT_OK);
        CHECK(healthy("clip last hidden", hidden, sizeof hidden / sizeof hidden[0]));
        CHECK(healthy("clip pooled", pooled, 32));
        clip_text_model_free(cm);
    }
    p = tmp_path(dir, "text_encoder_2");
    t5_encoder *tm = NULL;
    CHECK(t5_encoder_load(p, NULL, &tm, &err) == CPDIT_OK);
    free(p);
    if (tm) {
        CHECK(t5_encoder_param_count(tm) == st->t5_params);
        enum { S = 16 };
        int32_t tids[S];
        for (int i = 0; i < S; i++)
            tids[i] = (int32_t)((i * 13 + 3) % (int)st->t5_vocab);
        static float hidden[S * 64];
        CHECK(t5_encoder_forward(tm, tids, 1, S, hidden, &err) == CPDIT_OK);
        CHECK(healthy("t5 last hidden", hidden, sizeof hidden / sizeof hidden[0]));
        t5_encoder_free(tm);
    }
    /* the prompt path of the pipeline: tokenizers + encoders as FluxPipeline.encode_prompt */
    text_encoders *te = NULL;
    CHECK(text_encoders_load(dir, NULL, &te, &err) == CPDIT_OK);
    if (te) {
        enum { L = 32 };
        CHECK(text_encoders_pooled_dim(te) == 32 && text_encoders_t5_dim(te) == 64);
        const char *prompts[1] = {"a photo of a cat"};
        static float pooled[32], tokens[L * 64];
        CHECK(text_encode(te, prompts, NULL, 1, L, pooled, tokens, NULL, &err) == CPDIT_OK);
        CHECK(healthy("encode_prompt pooled", pooled, 32));
        CHECK(healthy("encode_prompt tokens", tokens, L * 64));
        text_encoders_free(te);
    }
}

static void check_rewrite_and_refusal(const char *root, const char *dir)
{
    cpdit_error err;
    /* a complete copy is left alone: the marker keeps its mtime */
    char *marker = tmp_path(dir, BUILTIN_MARKER_FILE);
    struct stat a, b;
    CHECK(stat(marker, &a) == 0);
    CHECK(builtin_model_write("tiny", dir, &err) == CPDIT_OK);
    CHECK(stat(marker, &b) == 0 && a.st_ino == b.st_ino && a.st_mtime == b.st_mtime);
    free(marker);
    /* a foreign non-empty folder is refused and untouched */
    char *foreign = tmp_path(root, "foreign");
    CHECK(mkdir(foreign, 0755) == 0);
    CHECK(tmp_write(foreign, "notes.txt", "mine\n") == 0);
    CHECK(builtin_model_write("tiny", foreign, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "does not overwrite");
    CHECK(tmp_count_entries(foreign) == 1);
    /* an empty folder is filled */
    char *empty = tmp_path(root, "empty");
    CHECK(mkdir(empty, 0755) == 0);
    CHECK(builtin_model_write("tiny", empty, &err) == CPDIT_OK);
    CHECK(builtin_model_is_complete("tiny", empty));
    CHECK(same_tree(dir, empty));
    /* a missing parent folder is a clear error */
    char *orphan = tmp_path(root, "no/such/parent");
    CHECK(builtin_model_write("tiny", orphan, &err) == CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err.where, "no/such/parent");
    free(orphan);
    free(empty);
    free(foreign);
    CHECK(tmp_count_temp_files(root) == 0);
}

static void check_concurrent(const char *root)
{
    char *cache = tmp_path(root, "cache/deeper");
    setenv("CPDIT_CACHE", cache, 1);
    pid_t pid[N_CONCURRENT];
    for (int i = 0; i < N_CONCURRENT; i++) {
        pid[i] = fork();
        if (pid[i] == 0) {
            cpdit_error err;
            char p[1024];
            int rc = builtin_model_path("builtin:tiny", p, sizeof p, &err) != CPDIT_OK;
            if (rc)
                fprintf(stderr, "child %d: %s: %s\n", i, err.where, err.what);
            _exit(rc || !builtin_model_is_complete("tiny", p));
        }
    }
    for (int i = 0; i < N_CONCURRENT; i++) {
        int status = 0;
        CHECK(pid[i] > 0 && waitpid(pid[i], &status, 0) == pid[i]);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed", i);
    }
    cpdit_error err;
    char p[1024];
    CHECK(builtin_model_path("builtin:tiny", p, sizeof p, &err) == CPDIT_OK);
    char *want = tmp_path(cache, "builtin-tiny-v2");
    CHECK(!strcmp(p, want));
    CHECK(builtin_model_is_complete("tiny", p));
    CHECK(tmp_count_entries(cache) == 1); /* one folder, no temporary folders left */
    CHECK(tmp_count_temp_files(cache) == 0);
    char resolved[1024];
    CHECK(builtin_model_resolve("builtin:tiny", resolved, sizeof resolved, &err) == CPDIT_OK);
    CHECK(!strcmp(resolved, want));
    free(want);
    free(cache);
    unsetenv("CPDIT_CACHE");
}

/* builtin:shapes: the trained weights are written as shipped (bf16), its text parts alone
 * (--text-only) are an incomplete folder, and its configs fit its weights (stats load them). */
static void check_shapes(const char *root)
{
    cpdit_error err;
    char *s = tmp_path(root, "shapes"), *t = tmp_path(root, "shapes-text");
    CHECK(builtin_model_write("shapes", s, &err) == CPDIT_OK);
    CHECK(builtin_model_is_complete("shapes", s));
    CHECK(!builtin_model_is_complete("tiny", s));
    builtin_model_stats st;
    CHECK(builtin_model_stats_of("shapes", s, &st, &err) == CPDIT_OK);
    fprintf(stderr, "builtin:shapes: transformer %zu params, vae %zu, clip %zu, t5 %zu; folder "
            "%zu bytes\n", st.transformer_params, st.vae_params, st.clip_params, st.t5_params,
            st.total_bytes);
    CHECK(st.transformer_params > 100000 && st.vae_params > 10000);
    CHECK(st.total_bytes < ((size_t)4 << 20)); /* shipped in the repository: a few MB at most */
    char *w = tmp_path(s, "transformer/diffusion_pytorch_model.safetensors");
    size_t n = 0;
    char *b = tmp_read(w, &n);
    CHECK(b && n > 8 && strstr(b + 8, "\"BF16\""));
    free(b);
    free(w);
    CHECK(builtin_model_write_text("shapes", t, &err) == CPDIT_OK);
    CHECK(!builtin_model_is_complete("shapes", t));
    char *tw = tmp_path(t, "text_encoder_2/model.safetensors");
    char *tx = tmp_path(t, "transformer/diffusion_pytorch_model.safetensors");
    CHECK(access(tw, F_OK) == 0);
    CHECK(access(tx, F_OK) != 0);
    CHECK(builtin_model_write_text("shapes", t, &err) == CPDIT_ERR_INPUT); /* not empty */
    free(tw);
    free(tx);
    free(s);
    free(t);
}

int main(void)
{
    check_specs();
    char *root = tmpdir_make("builtin");
    CHECK(root != NULL);
    if (!root)
        TEST_MAIN_END();
    cpdit_error err;
    char *a = tmp_path(root, "a"), *b = tmp_path(root, "b");
    double t0 = now_s();
    const cpdit_status wst = builtin_model_write("tiny", a, &err);
    const double write_s = now_s() - t0;
    CHECK(wst == CPDIT_OK);
    if (wst != CPDIT_OK)
        fprintf(stderr, "%s: %s\n", err.where, err.what);
    CHECK(builtin_model_is_complete("tiny", a));
    CHECK(builtin_model_write("tiny", b, &err) == CPDIT_OK);
    CHECK_MSG(same_tree(a, b), "two writes differ");

    builtin_model_stats st;
    CHECK(builtin_model_stats_of("tiny", a, &st, &err) == CPDIT_OK);
    fprintf(stderr,
            "builtin:tiny: transformer %zu params, vae %zu, clip %zu (vocab %zu), t5 %zu "
            "(vocab %zu); folder %zu bytes; written in %.3f s\n",
            st.transformer_params, st.vae_params, st.clip_params, st.clip_vocab, st.t5_params,
            st.t5_vocab, st.total_bytes, write_s);
    CHECK(st.transformer_params > 0 && st.vae_params > 0 && st.clip_params > 0 &&
          st.t5_params > 0);
    CHECK(st.total_bytes < ((size_t)16 << 20)); /* a tiny model stays tiny */

    check_frozen(a);
    check_folder(a);
    check_tokenizers(a, &st);
    check_transformer(a, &st);
    check_vae(a, &st);
    check_text_encoders(a, &st);
    check_rewrite_and_refusal(root, a);
    check_concurrent(root);
    check_shapes(root);

    free(a);
    free(b);
    tmpdir_remove(root);
    free(root);
    TEST_MAIN_END();
}
