/* builtin_model.c — the built-in models' sizes and configs, writing one as a diffusers folder
 * (all files into a temporary folder, then one rename), the cache folder, and stats.
 * The weights are in builtin_weights.c, the tokenizer files in builtin_tokenizers.c. */
#include "config.h"

#include "lib/builtin/builtin_model.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#include "lib/io/atomic_file.h"
#include "lib/builtin/builtin_internal.h"
#include "lib/io/model_config.h"
#include "lib/io/safetensors.h"
#include "lib/builtin/shapes/vae_factors.h"

#define PATH_MAX_LEN 4096
#define NFTW_FDS 16
#define JSON_FLAGS (JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15))
#define DIFFUSERS_VERSION "0.30.0"     /* written into configs as diffusers would */
#define TRANSFORMERS_VERSION "4.43.3"
#define STALE_TMP_SECONDS 3600         /* leftover temp folders older than this are removed */
#define TINY_SEED 0x6370646974ull      /* "cpdit" */
#define SHAPES_SEED 0x736861706573ull  /* "shapes": the text encoders' generated weights */


#define MODEL_DIR_MODE 0755            /* the written folder (mkdtemp makes it 0700) */

/* ------------------------------------------------------------------ the models */

static const builtin_sizes TINY = {
    .name = "tiny",
    .description = "random weights from a fixed seed (a smoke-test model: coloured noise); "
                   "6 heads, for uneven head shares",
    .run = {.width = 256, .height = 256, .steps = 28, .max_sequence_length = 512,
            .true_cfg = 1.0, .negative_prompt = NULL},
    .seed = TINY_SEED,
    .guidance_embeds = 1,
    .dynamic_shifting = 1,
    .mid_block_add_attention = 1,
    .in_channels = 64, /* 16 latent channels packed 2x2 */
    .num_layers = 2,
    .num_single_layers = 2,
    .head_dim = 16,
    .heads = 6, /* uneven head shares over 4 ranks */
    .joint_attention_dim = 64,
    .pooled_projection_dim = 32,
    .axes_dims_rope = {4, 6, 6},
    .image_channels = 3,
    .latent_channels = 16,
    .n_vae_blocks = 4, /* 8x upsampling as FLUX */
    .layers_per_block = 1,
    .norm_num_groups = 8,
    .block_out_channels = {16, 32, 32, 32},
    .scaling_factor = 0.3611, /* FLUX.1's */
    .shift_factor = 0.1159,
    .clip_hidden = 32,
    .clip_intermediate = 64,
    .clip_layers = 2,
    .clip_heads = 2,
    .clip_positions = 77,
    .clip_projection_dim = 32,
    .t5_d_model = 64, /* = joint_attention_dim */
    .t5_d_kv = 16,
    .t5_heads = 4,
    .t5_d_ff = 128,
    .t5_layers = 2,
    .t5_buckets = 32,
    .t5_max_distance = 128,
};

/* Trained here (tests/reference/train-builtin/) on procedural shapes; the grammar is in README.md.
 * The sizes are those of tests/reference/train-builtin/shapes_config.py; the text encoders keep the
 * weights generated from the seed (frozen during training), the transformer and the VAE are
 * the trained ones (lib/builtin/shapes/, compiled in by builtin_blobs.c). */
static const builtin_sizes SHAPES = {
    .name = "shapes",
    .description = "trained on procedural shapes: draws \"a large red circle in the center on "
                   "a blue background\" (grammar in README.md)",
    /* as trained and as tests/shapes_accuracy.sh checks it (tests/reference/train-builtin) */
    .run = {.width = 128, .height = 128, .steps = 20, .max_sequence_length = 32,
            .true_cfg = 4.0, .negative_prompt = ""},
    .seed = SHAPES_SEED,
    .corpus = builtin_shapes_corpus,
    .guidance_embeds = 0,  /* true CFG with an empty negative prompt */
    .dynamic_shifting = 0,
    .mid_block_add_attention = 0,
    .transformer_weights = &builtin_shapes_transformer,
    .vae_weights = &builtin_shapes_vae,
    .in_channels = 32, /* 8 latent channels packed 2x2 */
    .num_layers = 1,
    .num_single_layers = 2,
    .head_dim = 16,
    .heads = 4, /* inner 64; Ulysses 2 and 4 split the heads evenly */
    .joint_attention_dim = 64,
    .pooled_projection_dim = 32,
    .axes_dims_rope = {4, 6, 6},
    .image_channels = 3,
    .latent_channels = 8,
    .n_vae_blocks = 4,
    .layers_per_block = 1,
    .norm_num_groups = 1, /* see tests/reference/train-builtin/models.py, analytic_init */
    .block_out_channels = {8, 16, 32, 32},
    .scaling_factor = SHAPES_VAE_SCALING,
    .shift_factor = SHAPES_VAE_SHIFT,
    .clip_hidden = 32,
    .clip_intermediate = 64,
    .clip_layers = 2,
    .clip_heads = 2,
    .clip_positions = 77,
    .clip_projection_dim = 32,
    .t5_d_model = 64,
    .t5_d_kv = 16,
    .t5_heads = 4,
    .t5_d_ff = 128,
    .t5_layers = 2,
    .t5_buckets = 32,
    .t5_max_distance = 128,
};

/* A tiny Wan 2.1 text-to-video pipeline with random weights ("a 17-frame 64x64 clip in
 * seconds"): 4 heads of 16 (Ulysses 2 and 4 even), 2 layers; UMT5 of 2 layers of 64; the VAE
 * base_dim 8. Run defaults as WanPipeline's but small: 64 x 64, 17 frames, 8 steps, CFG 5.0
 * against the empty negative prompt. */
static const builtin_sizes WAN_TINY = {
    .name = "wan-tiny",
    .description = "a tiny Wan 2.1 text-to-video pipeline with random weights (UMT5, UniPC, "
                   "the Wan VAE): a 17-frame 64x64 clip in seconds",
    .run = {.width = 64, .height = 64, .steps = 8, .max_sequence_length = 512,
            .true_cfg = 5.0, .negative_prompt = "", .frames = 17},
    .seed = TINY_SEED,
    .image_channels = 3,
    .latent_channels = 16,
    .t5_d_model = 64,
    .t5_d_kv = 16,
    .t5_heads = 4,
    .t5_d_ff = 128,
    .t5_layers = 2,
    .t5_buckets = 32,
    .t5_max_distance = 128,
    .wan_heads = 4,
    .wan_head_dim = 16,
    .wan_layers = 2,
    .wan_ffn = 128,
    .wan_freq = 64,
    .wan_vae_base = 8,
};

static const builtin_sizes *const MODELS[] = {&TINY, &SHAPES, &WAN_TINY};
#define N_MODELS (sizeof MODELS / sizeof MODELS[0])

static const builtin_sizes *find_model(const char *name)
{
    for (size_t i = 0; i < N_MODELS; i++)
        if (name && strcmp(MODELS[i]->name, name) == 0)
            return MODELS[i];
    return NULL;
}

static cpdit_status unknown_model(const char *name, cpdit_error *err)
{
    char list[256] = "";
    for (size_t i = 0; i < N_MODELS; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s" BUILTIN_SPEC_PREFIX "%s",
                 i ? ", " : "", MODELS[i]->name);
    return cpdit_error_set(err, CPDIT_ERR_INPUT, "--model",
                           "unknown built-in model '%s' (known: %s)", name ? name : "", list);
}

int builtin_model_is_spec(const char *s)
{
    return s && strncmp(s, BUILTIN_SPEC_PREFIX, strlen(BUILTIN_SPEC_PREFIX)) == 0;
}

size_t builtin_model_count(void)
{
    return N_MODELS;
}

const char *builtin_model_name_at(size_t i)
{
    return i < N_MODELS ? MODELS[i]->name : NULL;
}

const char *builtin_model_description_at(size_t i)
{
    return i < N_MODELS ? MODELS[i]->description : NULL;
}

int builtin_model_run_defaults(const char *spec, builtin_run_defaults *d)
{
    if (!builtin_model_is_spec(spec))
        return 0;
    const builtin_sizes *s = find_model(spec + strlen(BUILTIN_SPEC_PREFIX));
    if (s)
        *d = s->run;
    return s != NULL;
}

/* ------------------------------------------------------------------ file helpers */

cpdit_status builtin_write_bytes(const char *dir, const char *rel_path, const void *data,
                                 size_t len, cpdit_error *err)
{
    char path[PATH_MAX_LEN];
    snprintf(path, sizeof path, "%s/%s", dir, rel_path);
    return atomic_write_buffer(path, data, len, err);
}

cpdit_status builtin_write_json(const char *dir, const char *rel_path, json_t *root,
                                cpdit_error *err)
{
    char *text = root ? json_dumps(root, JSON_FLAGS) : NULL;
    if (!text)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, rel_path, "out of memory");
    const size_t len = strlen(text);
    char *buf = malloc(len + 2);
    cpdit_status st;
    if (!buf) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, rel_path, "out of memory");
    } else {
        memcpy(buf, text, len);
        buf[len] = '\n';
        st = builtin_write_bytes(dir, rel_path, buf, len + 1, err);
    }
    free(buf);
    free(text);
    return st;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP || flag == FTW_D ? rmdir(path) : unlink(path);
}

static void remove_tree(const char *path)
{
    nftw(path, remove_one, NFTW_FDS, FTW_DEPTH | FTW_PHYS);
}

/* mkdir -p path (0777 & ~umask). 0 or -1 with errno. */
static int make_dirs(const char *path)
{
    char buf[PATH_MAX_LEN];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(buf, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ configs */

static json_t *int_array(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *repeat_array(const char *s, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_string(s));
    return a;
}

static cpdit_status write_configs(const char *dir, const builtin_sizes *s, cpdit_error *err)
{
    enum { N_CONFIGS = 6 };
    json_t *j[N_CONFIGS];
    const char *files[N_CONFIGS] = {"model_index.json",         "scheduler/scheduler_config.json",
                                    "transformer/config.json",  "vae/config.json",
                                    "text_encoder/config.json", "text_encoder_2/config.json"};
    j[0] = json_pack(
        "{s:s, s:s, s:[s,s], s:[s,s], s:[s,s], s:[s,s], s:[s,s], s:[s,s], s:[s,s]}",
        "_class_name", "FluxPipeline", "_diffusers_version", DIFFUSERS_VERSION, "scheduler",
        "diffusers", "FlowMatchEulerDiscreteScheduler", "text_encoder", "transformers",
        "CLIPTextModel", "text_encoder_2", "transformers", "T5EncoderModel", "tokenizer",
        "transformers", "CLIPTokenizer", "tokenizer_2", "transformers", "T5TokenizerFast",
        "transformer", "diffusers", "FluxTransformer2DModel", "vae", "diffusers",
        "AutoencoderKL");
    /* FLUX.1-dev's schedule (resolution-dependent shift), or FLUX.1-schnell's (shift 1) */
    j[1] = json_pack("{s:s, s:s, s:i, s:f, s:i, s:f, s:i, s:f, s:b}", "_class_name",
                     "FlowMatchEulerDiscreteScheduler", "_diffusers_version", DIFFUSERS_VERSION,
                     "base_image_seq_len", 256, "base_shift", 0.5, "max_image_seq_len", 4096,
                     "max_shift", 1.15, "num_train_timesteps", 1000, "shift",
                     s->dynamic_shifting ? 3.0 : 1.0, "use_dynamic_shifting",
                     s->dynamic_shifting);
    j[2] = json_pack("{s:s, s:s, s:i, s:o, s:b, s:i, s:i, s:i, s:i, s:i, s:i, s:i}",
                     "_class_name", "FluxTransformer2DModel", "_diffusers_version",
                     DIFFUSERS_VERSION, "attention_head_dim", s->head_dim, "axes_dims_rope",
                     int_array(s->axes_dims_rope, 3), "guidance_embeds", s->guidance_embeds,
                     "in_channels",
                     s->in_channels, "joint_attention_dim", s->joint_attention_dim,
                     "num_attention_heads", s->heads, "num_layers", s->num_layers,
                     "num_single_layers", s->num_single_layers, "patch_size", 1,
                     "pooled_projection_dim", s->pooled_projection_dim);
    j[3] = json_pack("{s:s, s:s, s:s, s:o, s:o, s:b, s:i, s:i, s:i, s:b, s:i, s:i, s:i, "
                     "s:f, s:f, s:o, s:b, s:b}",
                     "_class_name", "AutoencoderKL", "_diffusers_version", DIFFUSERS_VERSION,
                     "act_fn", "silu", "block_out_channels",
                     int_array(s->block_out_channels, s->n_vae_blocks), "down_block_types",
                     repeat_array("DownEncoderBlock2D", s->n_vae_blocks), "force_upcast", 1,
                     "in_channels", s->image_channels, "latent_channels", s->latent_channels,
                     "layers_per_block", s->layers_per_block, "mid_block_add_attention",
                     s->mid_block_add_attention,
                     "norm_num_groups", s->norm_num_groups, "out_channels", s->image_channels,
                     "sample_size", 256, "scaling_factor", s->scaling_factor, "shift_factor",
                     s->shift_factor, "up_block_types",
                     repeat_array("UpDecoderBlock2D", s->n_vae_blocks), "use_post_quant_conv",
                     0, "use_quant_conv", 0);
    j[4] = json_pack("{s:[s], s:f, s:i, s:f, s:i, s:s, s:i, s:f, s:f, s:i, s:f, s:i, s:s, "
                     "s:i, s:i, s:i, s:i, s:s, s:s, s:i}",
                     "architectures", "CLIPTextModel", "attention_dropout", 0.0, "bos_token_id",
                     s->clip_bos_id, "dropout", 0.0, "eos_token_id", s->clip_eos_id,
                     "hidden_act", "quick_gelu", "hidden_size", s->clip_hidden,
                     "initializer_factor", 1.0, "initializer_range", 0.02, "intermediate_size",
                     s->clip_intermediate, "layer_norm_eps", 1e-5, "max_position_embeddings",
                     s->clip_positions, "model_type", "clip_text_model", "num_attention_heads",
                     s->clip_heads, "num_hidden_layers", s->clip_layers, "pad_token_id",
                     s->clip_eos_id, "projection_dim", s->clip_projection_dim, "torch_dtype",
                     "float32", "transformers_version", TRANSFORMERS_VERSION, "vocab_size",
                     s->clip_vocab);
    j[5] = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:s, s:f, s:i, s:s, s:f, s:b, s:b, s:f, "
                     "s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:s, s:s, s:b, s:i}",
                     "architectures", "T5EncoderModel", "d_ff", s->t5_d_ff, "d_kv", s->t5_d_kv,
                     "d_model", s->t5_d_model, "decoder_start_token_id", 0, "dense_act_fn",
                     "gelu_new", "dropout_rate", 0.1, "eos_token_id", 1, "feed_forward_proj",
                     "gated-gelu", "initializer_factor", 1.0, "is_encoder_decoder", 1,
                     "is_gated_act", 1, "layer_norm_epsilon", 1e-6, "model_type", "t5",
                     "num_decoder_layers", s->t5_layers, "num_heads", s->t5_heads, "num_layers",
                     s->t5_layers, "pad_token_id", 0, "relative_attention_max_distance",
                     s->t5_max_distance, "relative_attention_num_buckets", s->t5_buckets,
                     "tie_word_embeddings", 0, "torch_dtype", "float32", "transformers_version",
                     TRANSFORMERS_VERSION, "use_cache", 1, "vocab_size", s->t5_vocab);
    cpdit_status st = CPDIT_OK;
    for (int i = 0; i < N_CONFIGS; i++)
        if (st == CPDIT_OK)
            st = j[i] ? builtin_write_json(dir, files[i], j[i], err)
                      : cpdit_error_set(err, CPDIT_ERR_RUNTIME, files[i], "out of memory");
    for (int i = 0; i < N_CONFIGS; i++)
        json_decref(j[i]);
    return st;
}

static cpdit_status write_marker(const char *dir, const builtin_sizes *s, cpdit_error *err)
{
    json_t *j = json_pack("{s:s, s:s, s:i, s:I}", "comment", s->description, "name", s->name,
                          "version", BUILTIN_MODEL_VERSION, "seed", (json_int_t)s->seed);
    cpdit_status st = j ? builtin_write_json(dir, BUILTIN_MARKER_FILE, j, err)
                        : cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    json_decref(j);
    return st;
}

/* ------------------------------------------------------------------ writing a folder */

static const char *const SUBDIRS[] = {"scheduler",      "transformer", "vae",
                                      "text_encoder",   "text_encoder_2",
                                      "tokenizer",      "tokenizer_2"};

/* Every file of model s into the existing empty folder dir; text_only: all but the
 * transformer's and the VAE's weights and the marker (an incomplete folder). */
static cpdit_status write_all(const char *dir, const builtin_sizes *model, int text_only,
                              cpdit_error *err)
{
    builtin_sizes s = *model;
    if (s.run.frames > 0) { /* a video model: the Wan layout */
        cpdit_status wst = builtin_write_wan_folder(dir, &s, text_only, err);
        return wst || text_only ? wst : write_marker(dir, &s, err);
    }
    char path[PATH_MAX_LEN + 64];
    for (size_t i = 0; i < sizeof SUBDIRS / sizeof SUBDIRS[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, SUBDIRS[i]);
        if (mkdir(path, 0777) != 0)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot create folder: %s",
                                   strerror(errno));
    }
    cpdit_status st = builtin_write_clip_tokenizer(dir, &s, err); /* sets the vocab sizes */
    st = st ? st : builtin_write_t5_tokenizer(dir, &s, err);
    st = st ? st : write_configs(dir, &s, err);
    if (text_only) {
        st = st ? st : builtin_write_clip_weights(dir, &s, NULL, err);
        return st ? st : builtin_write_t5_weights(dir, &s, NULL, err);
    }
    if (s.transformer_weights)
        st = st ? st : builtin_write_bytes(dir, "transformer/diffusion_pytorch_model.safetensors",
                                           s.transformer_weights->start,
                                           (size_t)(s.transformer_weights->end -
                                                    s.transformer_weights->start), err);
    else
        st = st ? st : builtin_write_transformer_weights(dir, &s, NULL, err);
    if (s.vae_weights)
        st = st ? st : builtin_write_bytes(dir, "vae/diffusion_pytorch_model.safetensors",
                                           s.vae_weights->start,
                                           (size_t)(s.vae_weights->end - s.vae_weights->start),
                                           err);
    else
        st = st ? st : builtin_write_vae_weights(dir, &s, NULL, err);
    st = st ? st : builtin_write_clip_weights(dir, &s, NULL, err);
    st = st ? st : builtin_write_t5_weights(dir, &s, NULL, err);
    st = st ? st : write_marker(dir, &s, err);
    return st;
}

int builtin_model_is_complete(const char *name, const char *dir)
{
    char path[PATH_MAX_LEN];
    snprintf(path, sizeof path, "%s/%s", dir, BUILTIN_MARKER_FILE);
    json_t *j = json_load_file(path, 0, NULL);
    const char *n = json_string_value(json_object_get(j, "name"));
    json_t *v = json_object_get(j, "version");
    int ok = n && name && strcmp(n, name) == 0 && json_is_integer(v) &&
             json_integer_value(v) == BUILTIN_MODEL_VERSION;
    json_decref(j);
    return ok;
}

/* 1 when path is a folder with no entries, 0 otherwise (missing, a file, not empty). */
static int is_empty_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int empty = 1;
    struct dirent *e;
    while (empty && (e = readdir(d)) != NULL)
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty;
}

static cpdit_status not_ours(const char *dir, const char *name, cpdit_error *err)
{
    return cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                           "exists and is not a complete copy of " BUILTIN_SPEC_PREFIX
                           "%s v%d (no valid %s); cpdit does not overwrite it: remove it or "
                           "choose another folder",
                           name, BUILTIN_MODEL_VERSION, BUILTIN_MARKER_FILE);
}

cpdit_status builtin_model_write(const char *name, const char *dir_in, cpdit_error *err)
{
    const builtin_sizes *s = find_model(name);
    if (!s)
        return unknown_model(name, err);
    char dir[PATH_MAX_LEN], tmp[PATH_MAX_LEN + 16];
    if (!dir_in || !*dir_in)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "builtin", "empty output folder");
    if (snprintf(dir, sizeof dir, "%s", dir_in) >= (int)sizeof dir)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir_in, "path too long");
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
        dir[n - 1] = '\0';
    if (builtin_model_is_complete(name, dir))
        return CPDIT_OK;
    struct stat sb;
    if (stat(dir, &sb) == 0 && !is_empty_dir(dir))
        return not_ours(dir, name, err);
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", dir);
    if (!mkdtemp(tmp))
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir,
                               "cannot create a temporary folder beside it: %s",
                               strerror(errno));
    chmod(tmp, MODEL_DIR_MODE); /* the model is not secret: others may read the cache */
    cpdit_status st = write_all(tmp, s, 0, err);
    if (st != CPDIT_OK) {
        remove_tree(tmp);
        return st;
    }
    if (rename(tmp, dir) != 0) {
        const int e = errno;
        remove_tree(tmp);
        /* another process put its copy there first: use it */
        if (builtin_model_is_complete(name, dir))
            return CPDIT_OK;
        if (e == ENOTEMPTY || e == EEXIST)
            return not_ours(dir, name, err);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot rename %s to it: %s", tmp,
                               strerror(e));
    }
    /* make the rename durable: fsync the parent folder (best effort) */
    char parent[PATH_MAX_LEN];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash)
        *(slash == parent ? slash + 1 : slash) = '\0';
    else
        snprintf(parent, sizeof parent, ".");
    int fd = open(parent, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    return CPDIT_OK;
}

cpdit_status builtin_model_write_text(const char *name, const char *dir, cpdit_error *err)
{
    const builtin_sizes *s = find_model(name);
    if (!s)
        return unknown_model(name, err);
    if (!dir || !*dir)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "builtin", "empty output folder");
    if (mkdir(dir, 0777) != 0 && !(errno == EEXIST && is_empty_dir(dir)))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir, "cannot create it as a new, empty "
                               "folder: %s", errno == EEXIST ? "not empty" : strerror(errno));
    return write_all(dir, s, 1, err);
}

/* ------------------------------------------------------------------ the cache */

cpdit_status builtin_model_cache_dir(const char *spec, char *path, size_t n, cpdit_error *err)
{
    if (!builtin_model_is_spec(spec))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "--model",
                               "'%s' is not a built-in model spec (" BUILTIN_SPEC_PREFIX "NAME)",
                               spec ? spec : "");
    const char *name = spec + strlen(BUILTIN_SPEC_PREFIX);
    if (!find_model(name))
        return unknown_model(name, err);
    const char *cache = getenv("CPDIT_CACHE"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int len;
    if (cache && *cache)
        len = snprintf(path, n, "%s/builtin-%s-v%d", cache, name, BUILTIN_MODEL_VERSION);
    else if (xdg && *xdg)
        len = snprintf(path, n, "%s/cpdit/builtin-%s-v%d", xdg, name, BUILTIN_MODEL_VERSION);
    else if (home && *home)
        len = snprintf(path, n, "%s/.cache/cpdit/builtin-%s-v%d", home, name,
                       BUILTIN_MODEL_VERSION);
    else
        return cpdit_error_set(err, CPDIT_ERR_INPUT, spec,
                               "no cache folder: set CPDIT_CACHE, XDG_CACHE_HOME or HOME");
    if (len < 0 || (size_t)len >= n)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, spec, "cache folder path too long");
    return CPDIT_OK;
}

/* Remove "<base>.tmp.XXXXXX" folders older than STALE_TMP_SECONDS (left by killed runs). */
static void remove_stale_temps(const char *dir)
{
    char parent[PATH_MAX_LEN];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (!slash)
        return;
    *slash = '\0';
    const char *base = dir + (slash - parent) + 1;
    char prefix[PATH_MAX_LEN];
    snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    DIR *d = opendir(parent);
    if (!d)
        return;
    struct dirent *e;
    const time_t now = time(NULL);
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        char p[2 * PATH_MAX_LEN];
        snprintf(p, sizeof p, "%s/%s", parent, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode) && now - st.st_mtime > STALE_TMP_SECONDS)
            remove_tree(p);
    }
    closedir(d);
}

cpdit_status builtin_model_path(const char *spec, char *path, size_t n, cpdit_error *err)
{
    cpdit_status st = builtin_model_cache_dir(spec, path, n, err);
    if (st != CPDIT_OK)
        return st;
    const char *name = spec + strlen(BUILTIN_SPEC_PREFIX);
    if (builtin_model_is_complete(name, path))
        return CPDIT_OK;
    char parent[PATH_MAX_LEN];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = '\0';
        if (make_dirs(parent) != 0)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, parent,
                                   "cannot create the cache folder: %s (set CPDIT_CACHE to a "
                                   "writable folder)",
                                   strerror(errno));
    }
    remove_stale_temps(path);
    st = builtin_model_write(name, path, err);
    if (st == CPDIT_ERR_RUNTIME && err) { /* a read-only or full home: say how to move it */
        char where[CPDIT_ERROR_WHERE_MAX], what[CPDIT_ERROR_WHAT_MAX];
        snprintf(where, sizeof where, "%s", err->where);
        snprintf(what, sizeof what, "%s", err->what);
        cpdit_error_set(err, st, where, "%.900s (set CPDIT_CACHE to a writable folder)", what);
    }
    return st;
}

cpdit_status builtin_model_resolve(const char *model, char *path, size_t n, cpdit_error *err)
{
    if (builtin_model_is_spec(model))
        return builtin_model_path(model, path, n, err);
    if (!model || snprintf(path, n, "%s", model) >= (int)n)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "--model", "path missing or too long");
    return CPDIT_OK;
}

/* ------------------------------------------------------------------ stats */

/* Bytes of all regular files under path (not following links). */
static size_t tree_bytes(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0;
    if (S_ISREG(st.st_mode))
        return (size_t)st.st_size;
    if (!S_ISDIR(st.st_mode))
        return 0;
    size_t total = 0;
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[PATH_MAX_LEN];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        total += tree_bytes(p);
    }
    if (d)
        closedir(d);
    return total;
}

static cpdit_status count_params(const char *dir, const char *rel, size_t *out,
                                 cpdit_error *err)
{
    char path[PATH_MAX_LEN];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    safetensors_file *f;
    cpdit_status st = safetensors_open(&f, path, err);
    if (st != CPDIT_OK)
        return st;
    *out = 0;
    for (size_t i = 0; i < safetensors_count(f); i++)
        *out += safetensors_tensor_at(f, i)->nelem;
    safetensors_close(f);
    return CPDIT_OK;
}

static cpdit_status vocab_of(const char *dir, const char *rel, size_t *out, cpdit_error *err)
{
    char path[PATH_MAX_LEN];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    model_config c;
    int v = 0;
    cpdit_status st = model_config_load_file(&c, path, err);
    if (st == CPDIT_OK) {
        st = model_config_get_int(&c, "vocab_size", &v, err);
        model_config_free(&c);
    }
    *out = (size_t)v;
    return st;
}

cpdit_status builtin_model_stats_of(const char *name, const char *dir, builtin_model_stats *s,
                                    cpdit_error *err)
{
    memset(s, 0, sizeof *s);
    if (!builtin_model_is_complete(name, dir))
        return not_ours(dir, name, err);
    cpdit_status st = count_params(dir, "transformer/diffusion_pytorch_model.safetensors",
                                   &s->transformer_params, err);
    st = st ? st
            : count_params(dir, "vae/diffusion_pytorch_model.safetensors", &s->vae_params, err);
    const builtin_sizes *m = find_model(name);
    if (st == CPDIT_OK && m && m->run.frames > 0) { /* Wan: text_encoder/ is the UMT5 */
        st = count_params(dir, "text_encoder/model.safetensors", &s->t5_params, err);
        st = st ? st : vocab_of(dir, "text_encoder/config.json", &s->t5_vocab, err);
        if (st == CPDIT_OK)
            s->total_bytes = tree_bytes(dir);
        return st;
    }
    st = st ? st : count_params(dir, "text_encoder/model.safetensors", &s->clip_params, err);
    st = st ? st : count_params(dir, "text_encoder_2/model.safetensors", &s->t5_params, err);
    st = st ? st : vocab_of(dir, "text_encoder/config.json", &s->clip_vocab, err);
    st = st ? st : vocab_of(dir, "text_encoder_2/config.json", &s->t5_vocab, err);
    if (st == CPDIT_OK)
        s->total_bytes = tree_bytes(dir);
    return st;
}
