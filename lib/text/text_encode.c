/* text_encode.c — a pipeline folder's tokenizers and text encoders, and prompt → (pooled,
 * tokens) as FluxPipeline.encode_prompt (see text_encode.h).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/model_folder.h"
#include "lib/text/text_encode.h"

struct text_encoders {
    clip_tokenizer *clip_tok;
    t5_tokenizer *t5_tok;
    clip_text_model *clip;
    t5_encoder *t5;
};

/* A loader of one component folder (errors name files inside it). */
typedef cpdit_status (*load_fn)(const char *dir, const text_encoder_options *opt, void **out,
                                cpdit_error *err);

static cpdit_status load_clip_tok(const char *dir, const text_encoder_options *opt, void **out,
                                  cpdit_error *err)
{
    (void)opt;
    return clip_tokenizer_load(dir, (clip_tokenizer **)out, err);
}

static cpdit_status load_t5_tok(const char *dir, const text_encoder_options *opt, void **out,
                                cpdit_error *err)
{
    (void)opt;
    return t5_tokenizer_load(dir, (t5_tokenizer **)out, err);
}

static cpdit_status load_clip(const char *dir, const text_encoder_options *opt, void **out,
                              cpdit_error *err)
{
    return clip_text_model_load(dir, opt, (clip_text_model **)out, err);
}

static cpdit_status load_t5(const char *dir, const text_encoder_options *opt, void **out,
                            cpdit_error *err)
{
    return t5_encoder_load(dir, opt, (t5_encoder **)out, err);
}

static cpdit_status load_component(const model_folder *mf, const char *component, load_fn fn,
                                   const text_encoder_options *opt, void **out,
                                   cpdit_error *err)
{
    char *dir = NULL;
    cpdit_status st = model_folder_component_dir(mf, component, &dir, err);
    if (!st)
        st = fn(dir, opt, out, err);
    free(dir);
    return st;
}

cpdit_status text_encoders_load(const char *dir, const text_encoder_options *opt,
                                text_encoders **out, cpdit_error *err)
{
    *out = NULL;
    text_encoders *te = calloc(1, sizeof *te);
    if (!te)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    model_folder mf;
    cpdit_status st = model_folder_open(&mf, dir, err);
    if (st) {
        free(te);
        return st;
    }
    st = load_component(&mf, "tokenizer", load_clip_tok, opt, (void **)&te->clip_tok, err);
    if (!st)
        st = load_component(&mf, "tokenizer_2", load_t5_tok, opt, (void **)&te->t5_tok, err);
    if (!st)
        st = load_component(&mf, "text_encoder", load_clip, opt, (void **)&te->clip, err);
    /* one budget for both: the T5 gets what CLIP's weights leave of it */
    text_encoder_options t5_opt = opt ? *opt : text_encoder_options_default();
    if (!st) {
        text_weight_stats cs;
        clip_text_model_weight_stats(te->clip, &cs);
        t5_opt.cache_bytes = t5_opt.cache_bytes > cs.bytes ? t5_opt.cache_bytes - cs.bytes : 0;
        st = load_component(&mf, "text_encoder_2", load_t5, &t5_opt, (void **)&te->t5, err);
    }
    if (!st) {
        const clip_text_config *cc = clip_text_model_config(te->clip);
        const t5_encoder_config *tc = t5_encoder_get_config(te->t5);
        if (cc->max_position_embeddings < CLIP_MAX_LENGTH)
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                                 "text_encoder/config.json: max_position_embeddings %d is "
                                 "below the %d CLIP tokens FluxPipeline feeds it",
                                 cc->max_position_embeddings, CLIP_MAX_LENGTH);
        else if (clip_tokenizer_vocab_size(te->clip_tok) > (size_t)cc->vocab_size)
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                                 "tokenizer/ has %zu tokens but text_encoder/config.json "
                                 "vocab_size is %d",
                                 clip_tokenizer_vocab_size(te->clip_tok), cc->vocab_size);
        else if (t5_tokenizer_vocab_size(te->t5_tok) > (size_t)tc->vocab_size)
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, dir,
                                 "tokenizer_2/ has %zu tokens but text_encoder_2/config.json "
                                 "vocab_size is %d",
                                 t5_tokenizer_vocab_size(te->t5_tok), tc->vocab_size);
    }
    model_folder_close(&mf);
    if (st) {
        text_encoders_free(te);
        return st;
    }
    *out = te;
    return CPDIT_OK;
}

void text_encoders_free(text_encoders *te)
{
    if (!te)
        return;
    clip_tokenizer_free(te->clip_tok);
    t5_tokenizer_free(te->t5_tok);
    clip_text_model_free(te->clip);
    t5_encoder_free(te->t5);
    free(te);
}

int text_encoders_pooled_dim(const text_encoders *te)
{
    return clip_text_model_config(te->clip)->hidden_size;
}

int text_encoders_t5_dim(const text_encoders *te)
{
    return t5_encoder_get_config(te->t5)->d_model;
}

const clip_text_model *text_encoders_clip(const text_encoders *te)
{
    return te->clip;
}

const t5_encoder *text_encoders_t5(const text_encoders *te)
{
    return te->t5;
}

const clip_tokenizer *text_encoders_clip_tokenizer(const text_encoders *te)
{
    return te->clip_tok;
}

const t5_tokenizer *text_encoders_t5_tokenizer(const text_encoders *te)
{
    return te->t5_tok;
}

static cpdit_status check_length(int max_sequence_length, cpdit_error *err)
{
    if (max_sequence_length < 1 || max_sequence_length > TEXT_ENCODE_MAX_SEQUENCE_LENGTH)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "max_sequence_length",
                               "%d is outside [1, %d]", max_sequence_length,
                               TEXT_ENCODE_MAX_SEQUENCE_LENGTH);
    return CPDIT_OK;
}

cpdit_status text_encode_tokenize(const text_encoders *te, const char *prompt,
                                  const char *prompt_2, int max_sequence_length,
                                  int32_t *clip_ids, int32_t *t5_ids, int *flags,
                                  cpdit_error *err)
{
    cpdit_status st = check_length(max_sequence_length, err);
    if (st)
        return st;
    if (!prompt_2)
        prompt_2 = prompt;
    int cut_clip = 0, cut_t5 = 0;
    st = clip_tokenizer_encode_padded(te->clip_tok, prompt, strlen(prompt), CLIP_MAX_LENGTH,
                                      clip_ids, NULL, &cut_clip, err);
    if (!st)
        st = t5_tokenizer_encode_padded(te->t5_tok, prompt_2, strlen(prompt_2),
                                        (size_t)max_sequence_length, t5_ids, NULL, &cut_t5,
                                        err);
    if (flags)
        *flags = (cut_clip ? TEXT_ENCODE_CLIP_TRUNCATED : 0) |
                 (cut_t5 ? TEXT_ENCODE_T5_TRUNCATED : 0);
    return st;
}

cpdit_status text_encode(const text_encoders *te, const char *const *prompts,
                         const char *const *prompts_2, int B, int max_sequence_length,
                         float *pooled, float *tokens, int *flags, cpdit_error *err)
{
    cpdit_status st = check_length(max_sequence_length, err);
    if (st)
        return st;
    if (B < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "text encode", "%d prompts", B);
    const size_t L = (size_t)max_sequence_length;
    int32_t *clip_ids = malloc((size_t)B * CLIP_MAX_LENGTH * sizeof *clip_ids);
    int32_t *t5_ids = malloc((size_t)B * L * sizeof *t5_ids);
    if (!clip_ids || !t5_ids) {
        free(clip_ids);
        free(t5_ids);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "text encode", "out of memory");
    }
    for (int b = 0; b < B && !st; b++)
        st = text_encode_tokenize(te, prompts[b], prompts_2 ? prompts_2[b] : NULL,
                                  max_sequence_length, clip_ids + (size_t)b * CLIP_MAX_LENGTH,
                                  t5_ids + (size_t)b * L, flags ? &flags[b] : NULL, err);
    if (!st && pooled)
        st = clip_text_model_forward(te->clip, clip_ids, B, CLIP_MAX_LENGTH, NULL, pooled, err);
    if (!st && tokens)
        st = t5_encoder_forward(te->t5, t5_ids, B, max_sequence_length, tokens, err);
    free(clip_ids);
    free(t5_ids);
    return st;
}
