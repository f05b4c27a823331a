/* wan_family_text.c — the Wan family's prompt embeddings (wan_family_internal.h): tokenizer/
 * (google/umt5-xxl's T5TokenizerFast: tokenizer.json or spiece.model) and text_encoder/
 * (UMT5EncoderModel, lib/text/t5_encoder.h with model_type "umt5"), composed as WanPipeline's
 * _get_t5_prompt_embeds does (lib/text/umt5_prompt.h): L ids padded with <pad>, the encoder
 * on the true-length prefix, the embeddings exactly zero after the true length, L rows
 * (512 by default) passed to the transformer's cross-attention whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/models/wan/wan_family_internal.h"
#include "lib/text/umt5_prompt.h"
#include "lib/weights/weight_loader.h"

#define PATH_MAX_LEN 4096

cpdit_status wan_text_open(cpdit_model *m, const char *dir, const model_open_options *o,
                           cpdit_error *err)
{
    wan_model *wm = wan_model_of(m);
    char path[PATH_MAX_LEN];
    if (snprintf(path, sizeof path, "%s/tokenizer", dir) >= (int)sizeof path)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, dir, "path too long");
    cpdit_status st = t5_tokenizer_load(path, &wm->tok, err);
    if (st)
        return st;
    text_encoder_options topt = text_encoder_options_default();
    topt.backend = m->be;
    topt.attention_kernel = m->attn_kernel ? m->attn_kernel->name : NULL;
    topt.weight_format = o->format;
    if (o->arena)
        topt.arena = o->arena;
    if (o->budget) { /* what the transformer's resident matrices leave (as FLUX's) */
        const size_t tbytes = wan_transformer_weight_bytes(wm->tr);
        const size_t left = o->budget > tbytes ? o->budget - tbytes : 0;
        if (left > topt.cache_bytes)
            topt.cache_bytes = left;
    }
    snprintf(path, sizeof path, "%s/text_encoder", dir);
    if ((st = t5_encoder_load(path, &topt, &wm->text, err)))
        return st;
    const int td = wan_transformer_config_of(wm->tr)->text_dim;
    const t5_encoder_config *tc = t5_encoder_get_config(wm->text);
    if (tc->d_model != td)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "d_model %d: the transformer's text_dim is %d", tc->d_model, td);
    if ((size_t)tc->vocab_size < t5_tokenizer_vocab_size(wm->tok))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "vocab_size %d is smaller than the tokenizer's %zu ids",
                               tc->vocab_size, t5_tokenizer_vocab_size(wm->tok));
    return CPDIT_OK;
}

void wan_text_close(wan_model *wm)
{
    t5_encoder_free(wm->text);
    t5_tokenizer_free(wm->tok);
    wm->text = NULL;
    wm->tok = NULL;
}

void wan_text_free(model_text *t)
{
    if (!t)
        return;
    free(t->tokens);
    free(t);
}

void wan_text_stats(const cpdit_model *m, text_weight_stats *a, text_weight_stats *b)
{
    memset(a, 0, sizeof *a);
    memset(b, 0, sizeof *b);
    const wan_model *wm = wan_model_of(m);
    if (wm->text) /* the second slot: the T5-like encoder, as FLUX's T5 */
        t5_encoder_weight_stats(wm->text, b);
}

/* prompt -> (L, text_dim) embeddings, zero after the true length; replicated on every rank. */
cpdit_status wan_encode_text(cpdit_model *m, const char *prompt, int L, model_text **out,
                             cpdit_error *err)
{
    *out = NULL;
    wan_model *wm = wan_model_of(m);
    if (!wm->text)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, m->dir,
                               "opened without the pipeline's components: no text encoder");
    if (L < 1)
        L = UMT5_PROMPT_DEFAULT_MAX_LENGTH;
    const int D = t5_encoder_get_config(wm->text)->d_model;
    model_text *t = calloc(1, sizeof *t);
    int32_t *ids = malloc(2 * (size_t)L * sizeof *ids);
    if (t) {
        t->len = L;
        t->dim = D;
        t->tokens = malloc((size_t)L * D * sizeof(float));
    }
    if (!t || !t->tokens || !ids) {
        free(ids);
        wan_text_free(t);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory");
    }
    int32_t *mask = ids + L;
    cpdit_status st = umt5_prompt_tokenize(wm->tok, prompt ? prompt : "", L, ids, mask, NULL,
                                           err);
    if (!st)
        st = umt5_prompt_embeds(wm->text, ids, mask, 1, L, t->tokens, NULL, err);
    free(ids);
    if (st) {
        wan_text_free(t);
        return st;
    }
    *out = t;
    return CPDIT_OK;
}
