/* builtin_wan.c — builtin:wan-tiny as a diffusers WanPipeline folder (builtin_internal.h):
 *   model_index.json                  WanPipeline and its five components
 *   scheduler/scheduler_config.json   Wan 2.1's UniPCMultistepScheduler (flow_shift 3.0)
 *   transformer/  WanTransformer3DModel config + generated fp32 weights
 *   text_encoder/ UMT5EncoderModel config + generated fp32 weights
 *   tokenizer/    the built-ins' T5 Unigram tokenizer (builtin_tokenizers.c)
 *   vae/          AutoencoderKLWan config (Wan 2.1's latents_mean / latents_std scaled to
 *                 z_dim) + the decoder's generated weights (cpdit reads only the decoder)
 * The same name and version give the same bytes (builtin_weights.c's generator). */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/builtin/builtin_internal.h"

#define DIFFUSERS_VERSION "0.33.0"
#define TRANSFORMERS_VERSION "4.43.3"
#define PATH_LEN 4096
#define WAN_FLOW_SHIFT 3.0     /* Wan 2.1 T2V 480p's */
#define TRAIN_TIMESTEPS 1000
#define TOKENIZER_SRC "tokenizer_2" /* where builtin_write_t5_tokenizer writes */
/* latents_mean / latents_std of the tiny VAE: fixed, moderate values (channel c) */
#define MEAN_STEP 0.1
#define STD_BASE 1.0
#define STD_STEP 0.25

static cpdit_status put(const char *dir, const char *rel, json_t *j, cpdit_error *err)
{
    if (!j)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, rel, "out of memory");
    cpdit_status st = builtin_write_json(dir, rel, j, err);
    json_decref(j);
    return st;
}

static json_t *wan_vae_config(const builtin_sizes *s)
{
    json_t *mean = json_array(), *std = json_array();
    for (int c = 0; c < s->latent_channels; c++) {
        json_array_append_new(mean, json_real(MEAN_STEP * (c % 5 - 2)));
        json_array_append_new(std, json_real(STD_BASE + STD_STEP * (c % 4)));
    }
    return json_pack("{s:s, s:s, s:i, s:i, s:[i,i,i,i], s:i, s:[], s:[b,b,b], s:f, s:o, s:o}",
                     "_class_name", "AutoencoderKLWan", "_diffusers_version", DIFFUSERS_VERSION,
                     "base_dim", s->wan_vae_base, "z_dim", s->latent_channels, "dim_mult", 1, 2,
                     4, 4, "num_res_blocks", 2, "attn_scales", "temperal_downsample", 0, 1, 1,
                     "dropout", 0.0, "latents_mean", mean, "latents_std", std);
}

static cpdit_status write_wan_configs(const char *dir, const builtin_sizes *s, cpdit_error *err)
{
    cpdit_status st = put(dir, "model_index.json",
        json_pack("{s:s, s:s, s:[s,s], s:[s,s], s:[s,s], s:[s,s], s:[s,s]}", "_class_name",
                  "WanPipeline", "_diffusers_version", DIFFUSERS_VERSION, "scheduler",
                  "diffusers", "UniPCMultistepScheduler", "text_encoder", "transformers",
                  "UMT5EncoderModel", "tokenizer", "transformers", "T5TokenizerFast",
                  "transformer", "diffusers", "WanTransformer3DModel", "vae", "diffusers",
                  "AutoencoderKLWan"), err);
    st = st ? st : put(dir, "scheduler/scheduler_config.json",
        json_pack("{s:s, s:s, s:[], s:s, s:f, s:b, s:i, s:b, s:s, s:i, s:s, s:b, s:s, s:b}",
                  "_class_name", "UniPCMultistepScheduler", "_diffusers_version",
                  DIFFUSERS_VERSION, "disable_corrector", "final_sigmas_type", "zero",
                  "flow_shift", WAN_FLOW_SHIFT, "lower_order_final", 1, "num_train_timesteps",
                  TRAIN_TIMESTEPS, "predict_x0", 1, "prediction_type", "flow_prediction",
                  "solver_order", 2, "solver_type", "bh2", "use_flow_sigmas", 1,
                  "timestep_spacing", "linspace", "thresholding", 0), err);
    st = st ? st : put(dir, "transformer/config.json",
        json_pack("{s:s, s:s, s:i, s:b, s:f, s:i, s:i, s:i, s:i, s:i, s:i, s:[i,i,i], s:s, "
                  "s:i, s:i}", "_class_name", "WanTransformer3DModel", "_diffusers_version",
                  DIFFUSERS_VERSION, "attention_head_dim", s->wan_head_dim, "cross_attn_norm",
                  1, "eps", 1e-6, "ffn_dim", s->wan_ffn, "freq_dim", s->wan_freq,
                  "in_channels", s->latent_channels, "num_attention_heads", s->wan_heads,
                  "num_layers", s->wan_layers, "out_channels", s->latent_channels,
                  "patch_size", 1, 2, 2, "qk_norm", "rms_norm_across_heads",
                  "rope_max_seq_len", 1024, "text_dim", s->t5_d_model), err);
    st = st ? st : put(dir, "text_encoder/config.json",
        json_pack("{s:[s], s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:b, "
                  "s:i, s:i, s:s}", "architectures", "UMT5EncoderModel", "model_type", "umt5",
                  "transformers_version", TRANSFORMERS_VERSION, "vocab_size", s->t5_vocab,
                  "d_model", s->t5_d_model, "d_kv", s->t5_d_kv, "d_ff", s->t5_d_ff,
                  "num_layers", s->t5_layers, "num_heads", s->t5_heads,
                  "relative_attention_num_buckets", s->t5_buckets,
                  "relative_attention_max_distance", s->t5_max_distance, "feed_forward_proj",
                  "gated-gelu", "layer_norm_epsilon", 1e-6, "is_encoder_decoder", 1,
                  "pad_token_id", 0, "eos_token_id", 1, "torch_dtype", "float32"), err);
    return st ? st : put(dir, "vae/config.json", wan_vae_config(s), err);
}

cpdit_status builtin_write_wan_folder(const char *dir, builtin_sizes *s, int text_only,
                                      cpdit_error *err)
{
    static const char *const subdirs[] = {"scheduler", "transformer", "vae", "text_encoder",
                                          TOKENIZER_SRC};
    char path[PATH_LEN + 64], dst[PATH_LEN + 64];
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, subdirs[i]);
        if (mkdir(path, 0777) != 0)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot create folder: %s",
                                   strerror(errno));
    }
    cpdit_status st = builtin_write_t5_tokenizer(dir, s, err); /* sets t5_vocab */
    snprintf(path, sizeof path, "%s/" TOKENIZER_SRC, dir);
    snprintf(dst, sizeof dst, "%s/tokenizer", dir);
    if (!st && rename(path, dst) != 0)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dst, "cannot rename %s to it: %s", path,
                             strerror(errno));
    st = st ? st : write_wan_configs(dir, s, err);
    if (text_only || st)
        return st;
    return builtin_write_wan_weights(dir, s, NULL, err);
}
