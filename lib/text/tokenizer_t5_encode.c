/* tokenizer_t5_encode.c — text -> ids for the T5 tokenizer: special-token split, normalizer
 * steps, Metaspace, Unigram Viterbi, post-processor specials, truncation (tokenizer_t5.h). */
#include <stdlib.h>
#include <string.h>

#include "lib/text/tokenizer_common.h"
#include "lib/text/tokenizer_t5_internal.h"

#define NO_START SIZE_MAX

/* ---------------------------------------------------------------- normalizer steps */

/* Length of the UTF-8 character starting with byte b (text is valid UTF-8 here). */
static size_t char_len(unsigned char b)
{
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* One step on s[0..n) -> new buffer *out (NUL-terminated); -1 when out of memory. */
static int apply_step(const t5_tokenizer *t, const norm_step *st, const char *s, size_t n,
                      char **out, size_t *out_n)
{
    if (st->kind == NORM_CHARSMAP) {
        cpdit_error e;
        return spm_charsmap_normalize(&t->charsmap, s, n, out, out_n, &e) == CPDIT_OK ? 0 : -1;
    }
    size_t cl = st->content ? strlen(st->content) : 0, pl = st->pattern ? strlen(st->pattern) : 0;
    /* the longest result: every byte replaced by the content */
    char *o = malloc(n * (cl > 1 ? cl : 1) + 1);
    if (!o)
        return -1;
    size_t k = 0;
    if (st->kind == NORM_STRIP) {
        size_t b = 0, e = n;
        if (st->left) {
            while (b < n) {
                uint32_t cp;
                size_t l = utf8_decode_next((const unsigned char *)s + b, n - b, &cp);
                if (!uni_is_white_space(cp))
                    break;
                b += l;
            }
        }
        if (st->right) {
            size_t last_end = b; /* end of the last non-space character */
            for (size_t i = b; i < n;) {
                uint32_t cp;
                size_t l = utf8_decode_next((const unsigned char *)s + i, n - i, &cp);
                i += l;
                if (!uni_is_white_space(cp))
                    last_end = i;
            }
            e = last_end;
        }
        memcpy(o, s + b, e - b);
        k = e - b;
    } else if (st->kind == NORM_REPLACE_SPACE_RUN) {
        for (size_t i = 0; i < n;) {
            size_t r = 0;
            while (i + r < n && s[i + r] == ' ')
                r++;
            if (r >= 2) {
                memcpy(o + k, st->content, cl);
                k += cl;
                i += r;
            } else {
                o[k++] = s[i++];
            }
        }
    } else { /* NORM_REPLACE_STRING */
        for (size_t i = 0; i < n;) {
            if (i + pl <= n && memcmp(s + i, st->pattern, pl) == 0) {
                memcpy(o + k, st->content, cl);
                k += cl;
                i += pl;
            } else {
                o[k++] = s[i++];
            }
        }
    }
    o[k] = '\0';
    *out = o;
    *out_n = k;
    return 0;
}

/* ---------------------------------------------------------------- Unigram */

/* The id a (possibly fused) unknown string maps to: the piece of that text if there is one,
 * else its <0xXX> byte pieces (byte_fallback), else unk. */
static int push_unknown(const t5_tokenizer *t, const char *s, size_t n, tok_ids *ids)
{
    int32_t id;
    if (token_map_get(t->pieces, s, n, &id) && id != PREFIX_ONLY)
        return tok_ids_push(ids, id);
    if (t->byte_fallback) {
        static const char hex[] = "0123456789ABCDEF";
        int all = 1;
        for (size_t i = 0; i < n && all; i++) {
            char p[BYTE_PIECE_LEN] = {'<', '0', 'x', hex[(unsigned char)s[i] >> 4],
                                      hex[(unsigned char)s[i] & 15], '>'};
            all = token_map_get(t->pieces, p, BYTE_PIECE_LEN, &id) && id != PREFIX_ONLY;
        }
        for (size_t i = 0; i < n && all; i++) {
            char p[BYTE_PIECE_LEN] = {'<', '0', 'x', hex[(unsigned char)s[i] >> 4],
                                      hex[(unsigned char)s[i] & 15], '>'};
            token_map_get(t->pieces, p, BYTE_PIECE_LEN, &id);
            if (tok_ids_push(ids, id) != 0)
                return -1;
        }
        if (all)
            return 0;
    }
    return tok_ids_push(ids, t->unk_id);
}

/* Best segmentation of the word w[0..n) (tokenizers' Unigram::encode_optimized): for each
 * end position the best-scoring path (score sums in double, a later candidate must be
 * strictly better); a character that no single-character piece covers gets an <unk> node
 * scoring min_score - UNK_PENALTY; adjacent <unk> results are fused into one token. */
static cpdit_status unigram_word(const t5_tokenizer *t, const char *w, size_t n, tok_ids *ids,
                                 cpdit_error *err)
{
    double *score = malloc((n + 1) * sizeof *score);
    size_t *start = malloc((n + 1) * sizeof *start);
    int32_t *node_id = malloc((n + 1) * sizeof *node_id);
    size_t *path = malloc((n + 1) * sizeof *path);
    cpdit_status st = CPDIT_OK;
    if (!score || !start || !node_id || !path) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "t5", "out of memory");
        goto done;
    }
    for (size_t i = 0; i <= n; i++)
        start[i] = NO_START;
    score[0] = 0;
    const double unk_score = t->min_score - UNK_PENALTY;
    for (size_t s = 0; s < n;) {
        size_t mblen = char_len((unsigned char)w[s]);
        double base = score[s];
        int single = 0;
        for (size_t l = 1; l <= t->max_piece_len && s + l <= n; l++) {
            int32_t id;
            if (!token_map_get(t->pieces, w + s, l, &id))
                break; /* no piece continues this way */
            if (id == PREFIX_ONLY)
                continue;
            double cand = t->scores[id] + base;
            if (start[s + l] == NO_START || cand > score[s + l]) {
                score[s + l] = cand;
                start[s + l] = s;
                node_id[s + l] = id;
            }
            if (l == mblen)
                single = 1;
        }
        if (!single) {
            if (t->unk_id < 0) {
                st = cpdit_error_set(err, CPDIT_ERR_INPUT, "t5",
                                     "a character has no piece and the model has no unk_id");
                goto done;
            }
            double cand = unk_score + base;
            if (start[s + mblen] == NO_START || cand > score[s + mblen]) {
                score[s + mblen] = cand;
                start[s + mblen] = s;
                node_id[s + mblen] = t->unk_id;
            }
        }
        s += mblen;
    }
    /* back-track the end positions of the best path, then emit front to back */
    size_t np = 0;
    for (size_t e = n; e > 0; e = start[e])
        path[np++] = e;
    size_t pos = 0;
    for (size_t k = np; k-- > 0;) {
        size_t e = path[k];
        int r;
        if (node_id[e] == t->unk_id) {
            while (k > 0 && node_id[path[k - 1]] == t->unk_id) /* fuse */
                e = path[--k];
            r = push_unknown(t, w + pos, e - pos, ids);
        } else {
            r = tok_ids_push(ids, node_id[e]);
        }
        if (r != 0) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "t5", "out of memory");
            goto done;
        }
        pos = e;
    }
done:
    free(score);
    free(start);
    free(node_id);
    free(path);
    return st;
}

/* ---------------------------------------------------------------- segments */

/* Normalize, pre-tokenize and encode one piece of text that holds no added token; `first`:
 * it starts the text (for prepend_scheme "first"). Stops once ids holds more than stop_at
 * entries (SIZE_MAX: never). */
static cpdit_status encode_segment(const t5_tokenizer *t, const char *s, size_t n, int first,
                                   size_t stop_at, tok_ids *ids, cpdit_error *err)
{
    char *cur = malloc(n + 1), *next;
    size_t len = n, next_len;
    if (!cur)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "t5", "out of memory");
    memcpy(cur, s, n);
    cur[n] = '\0';
    for (size_t i = 0; i < t->n_steps; i++) {
        if (apply_step(t, &t->steps[i], cur, len, &next, &next_len) != 0) {
            free(cur);
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "t5", "out of memory");
        }
        free(cur);
        cur = next;
        len = next_len;
    }
    cpdit_status st = CPDIT_OK;
    if (len == 0 || !t->has_metaspace) {
        if (len > 0)
            st = unigram_word(t, cur, len, ids, err);
        free(cur);
        return st;
    }
    /* Metaspace: spaces -> replacement, maybe prepend one, split before each replacement */
    const char *rep = t->replacement;
    size_t rl = t->replacement_len;
    char *m = malloc(len * rl + rl + 1);
    if (!m) {
        free(cur);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "t5", "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (cur[i] == ' ') {
            memcpy(m + k, rep, rl);
            k += rl;
        } else {
            m[k++] = cur[i];
        }
    }
    free(cur);
    int starts_with_rep = k >= rl && memcmp(m, rep, rl) == 0;
    if (!starts_with_rep &&
        (t->prepend == PREPEND_ALWAYS || (t->prepend == PREPEND_FIRST && first))) {
        memmove(m + rl, m, k);
        memcpy(m, rep, rl);
        k += rl;
    }
    for (size_t w = 0; w < k && st == CPDIT_OK && ids->n <= stop_at;) {
        size_t e = w + (t->split && k - w >= rl && memcmp(m + w, rep, rl) == 0 ? rl : 0);
        while (e < k && !(t->split && k - e >= rl && memcmp(m + e, rep, rl) == 0))
            e += char_len((unsigned char)m[e]);
        st = unigram_word(t, m + w, e - w, ids, err);
        w = e;
    }
    free(m);
    return st;
}

/* Length and id of the longest added token at s[0..n), 0 if none. */
static size_t added_at(const t5_tokenizer *t, const char *s, size_t n, int32_t *id)
{
    size_t best = 0;
    if (!t->added_first[(unsigned char)s[0]])
        return 0;
    for (size_t k = 0; k < t->n_added; k++) {
        const added_token *a = &t->added[k];
        if (a->len > best && a->len <= n && memcmp(s, a->text, a->len) == 0) {
            best = a->len;
            *id = a->id;
        }
    }
    return best;
}

cpdit_status t5_tokenizer_encode(const t5_tokenizer *t, const char *text, size_t len,
                                 size_t max_length, int32_t **ids_out, size_t *n_ids,
                                 int *truncated, cpdit_error *err)
{
    *ids_out = NULL;
    *n_ids = 0;
    size_t n_special = t->n_prefix + t->n_suffix;
    if (max_length && max_length < n_special)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "t5",
                               "max_length %zu leaves no room for the %zu special tokens",
                               max_length, n_special);
    /* ids holds the prefix specials too: stop once it has more than stop_at entries */
    size_t stop_at = max_length ? max_length - t->n_suffix : SIZE_MAX;
    char *s;
    size_t n;
    cpdit_status st = utf8_sanitize(text, len, &s, &n, err);
    if (st != CPDIT_OK)
        return st;
    tok_ids ids = {0};
    for (size_t i = 0; i < t->n_prefix && st == CPDIT_OK; i++)
        if (tok_ids_push(&ids, t->prefix_ids[i]) != 0)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "t5", "out of memory");
    size_t seg = 0, i = 0;
    while (st == CPDIT_OK) {
        int32_t aid = 0;
        size_t al = 0;
        while (i < n && (al = added_at(t, s + i, n - i, &aid)) == 0)
            i++;
        if (i > seg)
            st = encode_segment(t, s + seg, i - seg, seg == 0, stop_at, &ids, err);
        if (st != CPDIT_OK || i >= n || ids.n > stop_at)
            break;
        if (tok_ids_push(&ids, aid) != 0)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "t5", "out of memory");
        i += al;
        seg = i;
    }
    free(s);
    int cut = ids.n > stop_at;
    if (cut)
        ids.n = stop_at;
    for (size_t k = 0; k < t->n_suffix && st == CPDIT_OK; k++)
        if (tok_ids_push(&ids, t->suffix_ids[k]) != 0)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "t5", "out of memory");
    if (st != CPDIT_OK) {
        free(ids.v);
        return st;
    }
    if (!ids.v && tok_ids_push(&ids, 0) == 0) /* an empty result still gets an array */
        ids.n = 0;
    if (truncated)
        *truncated = cut;
    *ids_out = ids.v;
    *n_ids = ids.n;
    return CPDIT_OK;
}

cpdit_status t5_tokenizer_encode_padded(const t5_tokenizer *t, const char *text, size_t len,
                                        size_t max_length, int32_t *out, size_t *n_real,
                                        int *truncated, cpdit_error *err)
{
    if (max_length == 0)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "t5", "max_length must be > 0");
    int32_t *ids;
    size_t n;
    cpdit_status st = t5_tokenizer_encode(t, text, len, max_length, &ids, &n, truncated, err);
    if (st != CPDIT_OK)
        return st;
    memcpy(out, ids, n * sizeof *ids);
    for (size_t i = n; i < max_length; i++)
        out[i] = t->pad_id;
    if (n_real)
        *n_real = n;
    free(ids);
    return CPDIT_OK;
}
