/* tokenizer_t5.c — loading T5's Unigram tokenizer from a tokenizer.json (see tokenizer_t5.h);
 * the encoding is in tokenizer_t5_encode.c. */
#include "lib/text/tokenizer_t5.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text/spm_charsmap.h"
#include "lib/text/token_map.h"
#include "lib/text/tokenizer_common.h"
#include "lib/text/tokenizer_t5_internal.h"
#include "lib/text/unicode_text.h"

/* ---------------------------------------------------------------- loading */

static int b64_value(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 (with '=' padding) -> new buffer; -1 on a bad character or OOM. */
static int b64_decode(const char *s, unsigned char **out, size_t *out_len)
{
    size_t n = strlen(s);
    unsigned char *o = malloc(n / 4 * 3 + 3);
    if (!o)
        return -1;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n && s[i] != '='; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(o);
            return -1;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (unsigned char)(acc >> bits);
        }
    }
    *out = o;
    *out_len = k;
    return 0;
}

static cpdit_status bad(cpdit_error *err, const char *where, const char *what)
{
    return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "%s", what);
}

int t5_vocab_init(t5_tokenizer *t, size_t n)
{
    t->n_pieces = n;
    t->scores = malloc((n ? n : 1) * sizeof *t->scores);
    t->pieces = token_map_new(n * 4);
    t->min_score = 0;
    return t->scores && t->pieces ? 0 : -1;
}

int t5_vocab_set(t5_tokenizer *t, size_t i, const char *text, size_t len, double score)
{
    t->scores[i] = score;
    if (i == 0 || score < t->min_score)
        t->min_score = score;
    if (len > t->max_piece_len)
        t->max_piece_len = len;
    for (size_t l = 1; l < len; l++) {
        int32_t v;
        if (!token_map_get(t->pieces, text, l, &v) &&
            token_map_put(t->pieces, text, l, PREFIX_ONLY) != 0)
            return -1;
    }
    /* a repeated piece: the last id wins, as in the tokenizers library's map */
    return len > 0 && token_map_put(t->pieces, text, len, (int32_t)i) != 0 ? -1 : 0;
}

int t5_add_special(t5_tokenizer *t, const char *text, size_t len, int32_t id)
{
    added_token *a = realloc(t->added, (t->n_added + 1) * sizeof *a);
    if (!a)
        return -1;
    t->added = a;
    added_token *at = &a[t->n_added];
    at->text = malloc(len + 1);
    if (!at->text)
        return -1;
    memcpy(at->text, text, len);
    at->text[len] = '\0';
    at->len = len;
    at->id = id;
    t->n_added++;
    t->added_first[(unsigned char)text[0]] = 1;
    if (strcmp(at->text, "<pad>") == 0)
        t->pad_id = id;
    return 0;
}

static cpdit_status load_model(t5_tokenizer *t, json_t *model, const char *where,
                               cpdit_error *err)
{
    if (!json_is_object(model) || !json_is_string(json_object_get(model, "type")))
        return bad(err, where, "tokenizer.json: \"model\" has no \"type\"");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (strcmp(type, "Unigram") != 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "tokenizer.json: model type \"%s\" is not supported (Unigram only)",
                               type);
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_array(vocab) || json_array_size(vocab) == 0)
        return bad(err, where, "tokenizer.json: model.vocab is not a non-empty array");
    json_t *unk = json_object_get(model, "unk_id");
    t->unk_id = json_is_integer(unk) ? (int32_t)json_integer_value(unk) : -1;
    t->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    if (t->unk_id >= (int32_t)json_array_size(vocab))
        return bad(err, where, "tokenizer.json: model.unk_id is outside the vocabulary");
    if (t5_vocab_init(t, json_array_size(vocab)) != 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    for (size_t i = 0; i < t->n_pieces; i++) {
        json_t *e = json_array_get(vocab, i);
        json_t *p = json_array_get(e, 0), *s = json_array_get(e, 1);
        if (!json_is_array(e) || !json_is_string(p) || !json_is_number(s))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "tokenizer.json: model.vocab[%zu] is not [piece, score]", i);
        if (t5_vocab_set(t, i, json_string_value(p), json_string_length(p),
                         json_number_value(s)) != 0)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    }
    return CPDIT_OK;
}

static cpdit_status add_norm_step(t5_tokenizer *t, json_t *n, const char *where,
                                  cpdit_error *err)
{
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type)
        return bad(err, where, "tokenizer.json: a normalizer has no \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return bad(err, where, "tokenizer.json: Sequence normalizer without a list");
        for (size_t i = 0; i < json_array_size(list); i++) {
            cpdit_status st = add_norm_step(t, json_array_get(list, i), where, err);
            if (st != CPDIT_OK)
                return st;
        }
        return CPDIT_OK;
    }
    if (t->n_steps == MAX_NORM_STEPS)
        return bad(err, where, "tokenizer.json: too many normalizer steps");
    norm_step *s = &t->steps[t->n_steps];
    memset(s, 0, sizeof *s);
    if (strcmp(type, "Precompiled") == 0) {
        const char *b64 = json_string_value(json_object_get(n, "precompiled_charsmap"));
        if (!b64 || !*b64)
            return CPDIT_OK; /* an empty map changes nothing */
        if (t->charsmap.units)
            return bad(err, where, "tokenizer.json: more than one Precompiled normalizer");
        unsigned char *blob;
        size_t blen;
        if (b64_decode(b64, &blob, &blen) != 0)
            return bad(err, where, "tokenizer.json: precompiled_charsmap is not base64");
        cpdit_status st = spm_charsmap_parse(&t->charsmap, blob, blen, where, err);
        free(blob);
        if (st != CPDIT_OK)
            return st;
        s->kind = NORM_CHARSMAP;
    } else if (strcmp(type, "Strip") == 0) {
        s->kind = NORM_STRIP;
        s->left = json_is_true(json_object_get(n, "strip_left"));
        s->right = json_is_true(json_object_get(n, "strip_right"));
    } else if (strcmp(type, "Replace") == 0) {
        json_t *pat = json_object_get(n, "pattern");
        const char *content = json_string_value(json_object_get(n, "content"));
        const char *re = json_string_value(json_object_get(pat, "Regex"));
        const char *str = json_string_value(json_object_get(pat, "String"));
        if (!content)
            return bad(err, where, "tokenizer.json: Replace normalizer without \"content\"");
        if (re && strcmp(re, " {2,}") == 0) {
            s->kind = NORM_REPLACE_SPACE_RUN;
        } else if (str && *str) {
            s->kind = NORM_REPLACE_STRING;
            s->pattern = strdup(str);
        } else {
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "tokenizer.json: Replace pattern %s is not supported",
                                   re ? re : "(empty)");
        }
        s->content = strdup(content);
        if (!s->content || (s->kind == NORM_REPLACE_STRING && !s->pattern)) {
            free(s->pattern);
            free(s->content);
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
        }
    } else {
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "tokenizer.json: normalizer \"%s\" is not supported", type);
    }
    t->n_steps++;
    return CPDIT_OK;
}

static cpdit_status load_pre_tokenizer(t5_tokenizer *t, json_t *p, const char *where,
                                       cpdit_error *err)
{
    if (json_is_null(p) || !p)
        return CPDIT_OK;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (json_array_size(list) != 1)
            return bad(err, where, "tokenizer.json: only a Sequence of one Metaspace "
                                   "pre-tokenizer is supported");
        return load_pre_tokenizer(t, json_array_get(list, 0), where, err);
    }
    if (!type || strcmp(type, "Metaspace") != 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "tokenizer.json: pre-tokenizer \"%s\" is not supported",
                               type ? type : "?");
    t->has_metaspace = 1;
    const char *rep = json_string_value(json_object_get(p, "replacement"));
    if (!rep || !*rep || strlen(rep) > UTF8_MAX_BYTES)
        return bad(err, where, "tokenizer.json: Metaspace replacement is not one character");
    t->replacement_len = strlen(rep);
    memcpy(t->replacement, rep, t->replacement_len + 1);
    json_t *split = json_object_get(p, "split");
    t->split = split ? json_is_true(split) : 1;
    const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
    if (scheme) {
        if (strcmp(scheme, "always") == 0)
            t->prepend = PREPEND_ALWAYS;
        else if (strcmp(scheme, "first") == 0)
            t->prepend = PREPEND_FIRST;
        else if (strcmp(scheme, "never") == 0)
            t->prepend = PREPEND_NEVER;
        else
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "tokenizer.json: Metaspace prepend_scheme \"%s\"", scheme);
    } else { /* the older format */
        json_t *aps = json_object_get(p, "add_prefix_space");
        t->prepend = !aps || json_is_true(aps) ? PREPEND_ALWAYS : PREPEND_NEVER;
    }
    return CPDIT_OK;
}

/* Look up a post-processor special token's ids in special_tokens and append them. */
static cpdit_status template_ids(json_t *specials, const char *name, int32_t **ids, size_t *n,
                                 const char *where, cpdit_error *err)
{
    json_t *list = json_object_get(json_object_get(specials, name), "ids");
    if (!json_is_array(list))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "tokenizer.json: post_processor special token \"%s\" has no ids",
                               name);
    for (size_t i = 0; i < json_array_size(list); i++) {
        int32_t *v = realloc(*ids, (*n + 1) * sizeof *v);
        if (!v)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
        *ids = v;
        v[(*n)++] = (int32_t)json_integer_value(json_array_get(list, i));
    }
    return CPDIT_OK;
}

static cpdit_status load_post_processor(t5_tokenizer *t, json_t *p, const char *where,
                                        cpdit_error *err)
{
    if (!p || json_is_null(p))
        return CPDIT_OK;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type || strcmp(type, "TemplateProcessing") != 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "tokenizer.json: post-processor \"%s\" is not supported",
                               type ? type : "?");
    json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
    int seen_seq = 0;
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *item = json_array_get(single, i);
        json_t *sp = json_object_get(item, "SpecialToken");
        if (json_object_get(item, "Sequence")) {
            seen_seq = 1;
            continue;
        }
        const char *id = json_string_value(json_object_get(sp, "id"));
        if (!id)
            return bad(err, where, "tokenizer.json: a post_processor item is not understood");
        cpdit_status st = seen_seq ? template_ids(specials, id, &t->suffix_ids, &t->n_suffix,
                                                  where, err)
                                   : template_ids(specials, id, &t->prefix_ids, &t->n_prefix,
                                                  where, err);
        if (st != CPDIT_OK)
            return st;
    }
    return CPDIT_OK;
}

static cpdit_status load_added_tokens(t5_tokenizer *t, json_t *list, const char *where,
                                      cpdit_error *err)
{
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *a = json_array_get(list, i);
        json_t *content = json_object_get(a, "content");
        if (!json_is_string(content) || !json_is_integer(json_object_get(a, "id")) ||
            json_string_length(content) == 0)
            return bad(err, where, "tokenizer.json: an added token lacks content or id");
        if (json_is_true(json_object_get(a, "normalized")) ||
            json_is_true(json_object_get(a, "lstrip")) ||
            json_is_true(json_object_get(a, "rstrip")) ||
            json_is_true(json_object_get(a, "single_word")))
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "tokenizer.json: added token \"%.64s\" uses normalized / "
                                   "lstrip / rstrip / single_word, which is not supported",
                                   json_string_value(content));
        if (t5_add_special(t, json_string_value(content), json_string_length(content),
                           (int32_t)json_integer_value(json_object_get(a, "id"))) != 0)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    }
    return CPDIT_OK;
}

cpdit_status t5_tokenizer_from_json(const char *json, size_t len, const char *where,
                                    t5_tokenizer **out, cpdit_error *err)
{
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    if (!root)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "tokenizer.json: line %d: %s",
                               jerr.line, jerr.text);
    t5_tokenizer *t = calloc(1, sizeof *t);
    cpdit_status st = CPDIT_OK;
    if (!t)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    else if (!json_is_object(root))
        st = bad(err, where, "tokenizer.json is not a JSON object");
    if (st == CPDIT_OK)
        st = load_model(t, json_object_get(root, "model"), where, err);
    json_t *norm = json_object_get(root, "normalizer");
    if (st == CPDIT_OK && norm && !json_is_null(norm))
        st = add_norm_step(t, norm, where, err);
    if (st == CPDIT_OK)
        st = load_pre_tokenizer(t, json_object_get(root, "pre_tokenizer"), where, err);
    if (st == CPDIT_OK)
        st = load_post_processor(t, json_object_get(root, "post_processor"), where, err);
    if (st == CPDIT_OK)
        st = load_added_tokens(t, json_object_get(root, "added_tokens"), where, err);
    json_decref(root);
    if (st != CPDIT_OK) {
        t5_tokenizer_free(t);
        return st;
    }
    *out = t;
    return CPDIT_OK;
}

/* tokenizer_config.json's "extra_ids" (default 100), "legacy" and "add_prefix_space" (default
 * true), as T5Tokenizer reads them; a missing or unreadable file gives the defaults. */
static void read_t5_config(const char *dir, size_t *extra_ids, int *legacy, int *prefix)
{
    char *data;
    size_t len;
    cpdit_error ignored;
    *extra_ids = T5_DEFAULT_EXTRA_IDS;
    *legacy = 1;
    *prefix = 1;
    if (!tokenizer_file_exists(dir, "tokenizer_config.json") ||
        tokenizer_read_file(dir, "tokenizer_config.json", &data, &len, &ignored) != CPDIT_OK)
        return;
    json_t *root = json_loadb(data, len, 0, NULL);
    free(data);
    if (!root)
        return;
    json_t *e = json_object_get(root, "extra_ids"), *l = json_object_get(root, "legacy"),
           *a = json_object_get(root, "add_prefix_space");
    if (json_is_integer(e) && json_integer_value(e) >= 0 &&
        json_integer_value(e) <= T5_MAX_EXTRA_IDS)
        *extra_ids = (size_t)json_integer_value(e);
    if (json_is_boolean(l))
        *legacy = json_is_true(l);
    if (json_is_boolean(a))
        *prefix = json_is_true(a);
    json_decref(root);
}

cpdit_status t5_tokenizer_load(const char *dir, t5_tokenizer **out, cpdit_error *err)
{
    char *data;
    size_t len;
    *out = NULL;
    int use_spm = !tokenizer_file_exists(dir, "tokenizer.json") &&
                  tokenizer_file_exists(dir, "spiece.model");
    cpdit_status st = tokenizer_read_file(dir, use_spm ? "spiece.model" : "tokenizer.json", &data,
                                          &len, err);
    if (st != CPDIT_OK)
        return st;
    if (use_spm) {
        size_t extra_ids;
        int legacy, prefix;
        read_t5_config(dir, &extra_ids, &legacy, &prefix);
        st = t5_tokenizer_from_spm((const unsigned char *)data, len, extra_ids, legacy, dir, out,
                                   err);
        if (st == CPDIT_OK && !prefix)
            (*out)->prepend = PREPEND_NEVER;
    } else {
        st = t5_tokenizer_from_json(data, len, dir, out, err);
    }
    free(data);
    return st;
}

void t5_tokenizer_free(t5_tokenizer *t)
{
    if (!t)
        return;
    token_map_free(t->pieces);
    free(t->scores);
    for (size_t i = 0; i < t->n_steps; i++) {
        free(t->steps[i].pattern);
        free(t->steps[i].content);
    }
    spm_charsmap_free(&t->charsmap);
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].text);
    free(t->added);
    free(t->prefix_ids);
    free(t->suffix_ids);
    free(t);
}

int32_t t5_tokenizer_eos_id(const t5_tokenizer *t)
{
    return t->n_suffix ? t->suffix_ids[t->n_suffix - 1] : -1;
}

int32_t t5_tokenizer_pad_id(const t5_tokenizer *t) { return t->pad_id; }
size_t t5_tokenizer_vocab_size(const t5_tokenizer *t) { return t->n_pieces; }
