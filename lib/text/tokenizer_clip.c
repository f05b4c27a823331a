/* tokenizer_clip.c — CLIP's byte-level BPE tokenizer (see tokenizer_clip.h for the steps).
 *
 * BPE works on interned symbols: every string that can be a BPE symbol (vocabulary entries,
 * the 2x256 byte symbols, merge results) gets an internal symbol id; merges are a hash table
 * (left symbol, right symbol) -> (rank, merged symbol). A symbol missing from vocab.json
 * maps to the unknown id (<|endoftext|>), as CLIPTokenizer's encoder.get(token, unk) does.
 */
#include "lib/text/tokenizer_clip.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text/bpe_merge.h"
#include "lib/text/token_map.h"
#include "lib/text/tokenizer_common.h"
#include "lib/text/unicode_text.h"

#define CLIP_BOS_TEXT "<|startoftext|>"
#define CLIP_EOS_TEXT "<|endoftext|>"
#define CLIP_END_OF_WORD "</w>"
#define N_BYTES 256
#define FIB_HASH_MULT 0x9E3779B97F4A7C15ull /* 2^64 / golden ratio */
#define FIB_HASH_SHIFT 17                    /* drop the low bits, which mix poorly */

typedef struct merge_slot {
    uint64_t key;    /* merge_key(left, right); 0: empty */
    int32_t rank;
    int32_t merged;  /* symbol id */
} merge_slot;

struct clip_tokenizer {
    token_map *sym_ids;       /* symbol text -> symbol id */
    int32_t *sym_vocab;       /* symbol id -> vocabulary id (unk when not in vocab.json) */
    size_t n_sym, cap_sym;
    merge_slot *merges;
    size_t merge_slots;       /* a power of two */
    int32_t byte_sym[N_BYTES], byte_sym_end[N_BYTES]; /* symbol of a byte, and with </w> */
    int32_t bos_id, eos_id, unk_id;
    size_t vocab_size;
};

/* ---------------------------------------------------------------- setup */

/* GPT-2/CLIP bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes
 * to U+0100 onwards in byte order. */
static uint32_t byte_to_unicode(unsigned b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return b;
    uint32_t n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF)))
            n++;
    return N_BYTES + n;
}

/* The id of symbol s[0..len), added with vocabulary id vocab_id when new; -1 when out of
 * memory. */
static int32_t sym_intern(clip_tokenizer *t, const char *s, size_t len, int32_t vocab_id)
{
    int32_t id;
    if (token_map_get(t->sym_ids, s, len, &id))
        return id;
    if (t->n_sym == t->cap_sym) {
        size_t cap = t->cap_sym ? 2 * t->cap_sym : 1024;
        int32_t *v = realloc(t->sym_vocab, cap * sizeof *v);
        if (!v)
            return -1;
        t->sym_vocab = v;
        t->cap_sym = cap;
    }
    id = (int32_t)t->n_sym;
    if (token_map_put(t->sym_ids, s, len, id) != 0)
        return -1;
    t->sym_vocab[id] = vocab_id;
    t->n_sym++;
    return id;
}

/* Merge-table key of the symbol pair (left, right); never 0, which marks an empty slot. */
static uint64_t merge_key(int32_t left, int32_t right)
{
    return (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
}

/* The slot of key in the merge table (open addressing, Fibonacci hashing): its entry, or the
 * empty slot where it goes. */
static merge_slot *merge_slot_of(const clip_tokenizer *t, uint64_t key)
{
    size_t mask = t->merge_slots - 1;
    size_t i = (size_t)((key * FIB_HASH_MULT) >> FIB_HASH_SHIFT) & mask;
    for (;; i = (i + 1) & mask)
        if (t->merges[i].key == key || t->merges[i].key == 0)
            return &t->merges[i];
}

static cpdit_status load_vocab(clip_tokenizer *t, const char *json, size_t len,
                               const char *where, cpdit_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    if (!root)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "vocab.json: line %d: %s", jerr.line,
                               jerr.text);
    cpdit_status st = CPDIT_OK;
    if (!json_is_object(root)) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, where, "vocab.json is not a JSON object");
        goto done;
    }
    t->sym_ids = token_map_new(json_object_size(root) * 2);
    if (!t->sym_ids) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
        goto done;
    }
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        if (!json_is_integer(value) || json_integer_value(value) < 0 ||
            json_integer_value(value) > INT32_MAX) {
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                 "vocab.json: the id of \"%.64s\" is not an integer >= 0", key);
            goto done;
        }
        int32_t id = (int32_t)json_integer_value(value);
        int32_t sym;
        size_t klen = strlen(key);
        if (token_map_get(t->sym_ids, key, klen, &sym)) {
            t->sym_vocab[sym] = id; /* a repeated key: the last one wins, as in json.load */
            continue;
        }
        if (sym_intern(t, key, klen, id) < 0) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
            goto done;
        }
        t->vocab_size++;
    }
    int32_t s_bos, s_eos;
    if (!token_map_get(t->sym_ids, CLIP_BOS_TEXT, strlen(CLIP_BOS_TEXT), &s_bos) ||
        !token_map_get(t->sym_ids, CLIP_EOS_TEXT, strlen(CLIP_EOS_TEXT), &s_eos)) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                             "vocab.json lacks \"" CLIP_BOS_TEXT "\" or \"" CLIP_EOS_TEXT "\"");
        goto done;
    }
    t->bos_id = t->sym_vocab[s_bos];
    t->eos_id = t->sym_vocab[s_eos];
    t->unk_id = t->eos_id;
done:
    json_decref(root);
    return st;
}

static int is_ascii_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* merges.txt as transformers reads it: strip the file, split lines, skip the first (the
 * "#version" header), keep CLIP_MAX_MERGES lines; each "left right" line's rank is its
 * index; lines that do not split into two fields are never matched. */
static cpdit_status load_merges(clip_tokenizer *t, const char *txt, size_t len,
                                const char *where, cpdit_error *err)
{
    while (len > 0 && is_ascii_space(txt[len - 1]))
        len--;
    while (len > 0 && is_ascii_space(*txt)) {
        txt++;
        len--;
    }
    size_t n_lines = 1;
    for (size_t i = 0; i < len; i++)
        n_lines += txt[i] == '\n';
    t->merge_slots = 64;
    while (t->merge_slots < 2 * n_lines + 2)
        t->merge_slots *= 2;
    t->merges = calloc(t->merge_slots, sizeof *t->merges);
    char *joined = malloc(len + 1);
    if (!t->merges || !joined) {
        free(joined);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    }
    size_t pos = 0;
    for (long line = 0; pos <= len && line <= CLIP_MAX_MERGES; line++) {
        const char *s = txt + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - s) : len - pos;
        pos += ll + 1;
        if (line == 0)
            continue; /* header */
        const char *f[3];
        size_t fl[3], nf = 0;
        for (size_t i = 0; i < ll && nf < 3;) {
            while (i < ll && is_ascii_space(s[i]))
                i++;
            if (i == ll)
                break;
            f[nf] = s + i;
            while (i < ll && !is_ascii_space(s[i]))
                i++;
            fl[nf] = (size_t)(s + i - f[nf]);
            nf++;
        }
        if (nf != 2)
            continue;
        memcpy(joined, f[0], fl[0]);
        memcpy(joined + fl[0], f[1], fl[1]);
        int32_t a = sym_intern(t, f[0], fl[0], t->unk_id);
        int32_t b = a < 0 ? -1 : sym_intern(t, f[1], fl[1], t->unk_id);
        int32_t m = b < 0 ? -1 : sym_intern(t, joined, fl[0] + fl[1], t->unk_id);
        if (m < 0) {
            free(joined);
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
        }
        merge_slot *ms = merge_slot_of(t, merge_key(a, b));
        ms->key = merge_key(a, b);
        ms->rank = (int32_t)(line - 1); /* a repeated pair keeps its last rank, like dict() */
        ms->merged = m;
    }
    free(joined);
    return CPDIT_OK;
}

static cpdit_status init_byte_symbols(clip_tokenizer *t, const char *where, cpdit_error *err)
{
    for (unsigned b = 0; b < N_BYTES; b++) {
        char s[UTF8_MAX_BYTES + sizeof CLIP_END_OF_WORD];
        size_t n = utf8_encode(byte_to_unicode(b), s);
        t->byte_sym[b] = sym_intern(t, s, n, t->unk_id);
        memcpy(s + n, CLIP_END_OF_WORD, strlen(CLIP_END_OF_WORD));
        t->byte_sym_end[b] = sym_intern(t, s, n + strlen(CLIP_END_OF_WORD), t->unk_id);
        if (t->byte_sym[b] < 0 || t->byte_sym_end[b] < 0)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    }
    return CPDIT_OK;
}

cpdit_status clip_tokenizer_from_data(const char *vocab_json, size_t vocab_len,
                                      const char *merges_txt, size_t merges_len,
                                      const char *where, clip_tokenizer **out, cpdit_error *err)
{
    *out = NULL;
    clip_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    cpdit_status st = load_vocab(t, vocab_json, vocab_len, where, err);
    if (st == CPDIT_OK)
        st = load_merges(t, merges_txt, merges_len, where, err);
    if (st == CPDIT_OK)
        st = init_byte_symbols(t, where, err);
    if (st != CPDIT_OK) {
        clip_tokenizer_free(t);
        return st;
    }
    *out = t;
    return CPDIT_OK;
}

cpdit_status clip_tokenizer_load(const char *dir, clip_tokenizer **out, cpdit_error *err)
{
    char *vocab = NULL, *merges = NULL;
    size_t vlen = 0, mlen = 0;
    *out = NULL;
    cpdit_status st = tokenizer_read_file(dir, "vocab.json", &vocab, &vlen, err);
    if (st == CPDIT_OK)
        st = tokenizer_read_file(dir, "merges.txt", &merges, &mlen, err);
    if (st == CPDIT_OK)
        st = clip_tokenizer_from_data(vocab, vlen, merges, mlen, dir, out, err);
    free(vocab);
    free(merges);
    return st;
}

void clip_tokenizer_free(clip_tokenizer *t)
{
    if (!t)
        return;
    token_map_free(t->sym_ids);
    free(t->sym_vocab);
    free(t->merges);
    free(t);
}

int32_t clip_tokenizer_bos_id(const clip_tokenizer *t) { return t->bos_id; }
int32_t clip_tokenizer_eos_id(const clip_tokenizer *t) { return t->eos_id; }
size_t clip_tokenizer_vocab_size(const clip_tokenizer *t) { return t->vocab_size; }

/* ---------------------------------------------------------------- BPE */

/* bpe_rank_fn over the merge table (ctx is the tokenizer). */
static int32_t merge_rank(const void *ctx, int32_t a, int32_t b, int32_t *merged)
{
    const clip_tokenizer *t = ctx;
    const merge_slot *ms = merge_slot_of(t, merge_key(a, b));
    if (ms->key == 0)
        return -1;
    *merged = ms->merged;
    return ms->rank;
}

/* CLIPTokenizer.bpe on the piece's bytes: one symbol per byte (the last one carries </w>),
 * merged by rank (bpe_merge.h); the result's vocabulary ids are appended to out. w has room
 * for n symbols. */
static int bpe_piece(const clip_tokenizer *t, const unsigned char *bytes, size_t n, int32_t *w,
                     tok_ids *out)
{
    for (size_t i = 0; i < n; i++)
        w[i] = i + 1 == n ? t->byte_sym_end[bytes[i]] : t->byte_sym[bytes[i]];
    n = bpe_merge(w, n, merge_rank, t);
    if (n == (size_t)-1)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (tok_ids_push(out, t->sym_vocab[w[i]]) != 0)
            return -1;
    return 0;
}

/* ---------------------------------------------------------------- text -> pieces */

/* Does t[0..n) start with the ASCII pattern p, letters compared as re.IGNORECASE does
 * (ASCII case, and U+017F LONG S ~ 's')? */
static int starts_with_icase(const uint32_t *t, size_t n, const char *p)
{
    size_t pl = strlen(p);
    if (n < pl)
        return 0;
    for (size_t i = 0; i < pl; i++) {
        uint32_t c = t[i], want = (unsigned char)p[i];
        if (c == want)
            continue;
        if (want >= 'a' && want <= 'z' && (c == want - 'a' + 'A' || (want == 's' && c == 0x17F)))
            continue;
        return 0;
    }
    return 1;
}

/* Length of the match of CLIP's pattern at t[0..n), 0 when no alternative matches here. */
static size_t clip_match_at(const uint32_t *t, size_t n)
{
    static const char *const specials[] = {CLIP_BOS_TEXT, CLIP_EOS_TEXT};
    static const char *const contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    for (size_t k = 0; k < sizeof specials / sizeof *specials; k++)
        if (starts_with_icase(t, n, specials[k]))
            return strlen(specials[k]);
    for (size_t k = 0; k < sizeof contractions / sizeof *contractions; k++)
        if (starts_with_icase(t, n, contractions[k]))
            return strlen(contractions[k]);
    size_t i = 0;
    if (uni_is_letter(t[0])) {
        while (i < n && uni_is_letter(t[i]))
            i++;
        return i;
    }
    if (uni_is_number(t[0]))
        return 1;
    while (i < n && !uni_is_white_space(t[i]) && !uni_is_letter(t[i]) && !uni_is_number(t[i]) &&
           !uni_is_clip_unmatched(t[i]))
        i++;
    return i;
}

/* BasicTokenizer(strip_accents=False, do_split_on_punc=False).tokenize joined by spaces:
 * in[0..n) -> *out (new array). */
static cpdit_status basic_clean(const uint32_t *in, size_t n, uint32_t **out, size_t *n_out,
                                cpdit_error *err)
{
    uint32_t *a = malloc((3 * n + 1) * sizeof *a);
    if (!a)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "clip", "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = in[i];
        int ws = c == ' ' || c == '\t' || c == '\n' || c == '\r' || uni_is_zs(c);
        if (!ws && (c == 0 || c == UNI_REPLACEMENT_CHAR || uni_is_py_control(c)))
            continue;
        if (ws) {
            a[k++] = ' ';
        } else if (uni_is_cjk_ideograph(c)) {
            a[k++] = ' ';
            a[k++] = c;
            a[k++] = ' ';
        } else {
            a[k++] = c;
        }
    }
    uint32_t *nfc;
    size_t m;
    cpdit_status st = uni_nfc(a, k, &nfc, &m, err);
    free(a);
    if (st != CPDIT_OK)
        return st;
    /* split on str.isspace(), lower() each word, join with single spaces */
    uint32_t *o = malloc((2 * m + 1) * sizeof *o);
    if (!o) {
        free(nfc);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "clip", "out of memory");
    }
    size_t j = 0;
    for (size_t i = 0; i < m;) {
        while (i < m && uni_is_py_space(nfc[i]))
            i++;
        size_t start = i;
        while (i < m && !uni_is_py_space(nfc[i]))
            i++;
        if (i == start)
            break;
        if (j > 0)
            o[j++] = ' ';
        j += uni_py_lower(nfc + start, i - start, o + j);
    }
    free(nfc);
    *out = o;
    *n_out = j;
    return CPDIT_OK;
}

/* Append the ids of one text segment (no special-token strings in it) to ids; stop once ids
 * holds more than stop_at entries (SIZE_MAX: never). */
static cpdit_status encode_segment(const clip_tokenizer *t, const uint32_t *cps, size_t n,
                                   size_t stop_at, tok_ids *ids, cpdit_error *err)
{
    uint32_t *text = NULL;
    size_t m = 0;
    cpdit_status st = basic_clean(cps, n, &text, &m, err);
    if (st != CPDIT_OK)
        return st;
    unsigned char *bytes = malloc(m * UTF8_MAX_BYTES + 1);
    int32_t *work = malloc((m * UTF8_MAX_BYTES + 1) * sizeof *work);
    if (!bytes || !work) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "clip", "out of memory");
        goto done;
    }
    for (size_t i = 0; i < m && ids->n <= stop_at;) {
        size_t len = clip_match_at(text + i, m - i);
        if (len == 0) {
            i++; /* whitespace, or a character no alternative matches */
            continue;
        }
        size_t nb = 0;
        for (size_t k = 0; k < len; k++)
            nb += utf8_encode(text[i + k], (char *)bytes + nb);
        i += len;
        int r;
        if (nb == strlen(CLIP_BOS_TEXT) && memcmp(bytes, CLIP_BOS_TEXT, nb) == 0)
            r = tok_ids_push(ids, t->bos_id);
        else if (nb == strlen(CLIP_EOS_TEXT) && memcmp(bytes, CLIP_EOS_TEXT, nb) == 0)
            r = tok_ids_push(ids, t->eos_id);
        else
            r = bpe_piece(t, bytes, nb, work, ids);
        if (r != 0) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "clip", "out of memory");
            goto done;
        }
    }
done:
    free(bytes);
    free(work);
    free(text);
    return st;
}

/* Length of the special-token text at cps[0..n) ("<|startoftext|>" or "<|endoftext|>",
 * exact), with its id; 0 if none. */
static size_t special_at(const clip_tokenizer *t, const uint32_t *cps, size_t n, int32_t *id)
{
    const char *texts[2] = {CLIP_BOS_TEXT, CLIP_EOS_TEXT};
    int32_t idv[2] = {t->bos_id, t->eos_id};
    for (int k = 0; k < 2; k++) {
        size_t l = strlen(texts[k]);
        if (n < l)
            continue;
        size_t i = 0;
        while (i < l && cps[i] == (unsigned char)texts[k][i])
            i++;
        if (i == l) {
            *id = idv[k];
            return l;
        }
    }
    return 0;
}

cpdit_status clip_tokenizer_encode(const clip_tokenizer *t, const char *text, size_t len,
                                   size_t max_length, int32_t **ids_out, size_t *n_ids,
                                   int *truncated, cpdit_error *err)
{
    *ids_out = NULL;
    *n_ids = 0;
    if (max_length == 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "clip",
                               "max_length 1 leaves no room for the start and end tokens");
    /* ids holds bos too: stop once it has more than stop_at entries (bos + the text tokens
     * that fit) */
    size_t stop_at = max_length ? max_length - 1 : SIZE_MAX;
    uint32_t *cps;
    size_t n;
    cpdit_status st = utf8_decode(text, len, &cps, &n, err);
    if (st != CPDIT_OK)
        return st;
    tok_ids ids = {0};
    if (tok_ids_push(&ids, t->bos_id) != 0)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "clip", "out of memory");
    /* segments between special-token texts; each special token is one id */
    size_t seg = 0, i = 0;
    while (st == CPDIT_OK) {
        int32_t sid = 0;
        size_t sl = 0;
        while (i < n && (sl = special_at(t, cps + i, n - i, &sid)) == 0)
            i++;
        if (i > seg)
            st = encode_segment(t, cps + seg, i - seg, stop_at, &ids, err);
        if (st != CPDIT_OK || i >= n || ids.n > stop_at)
            break;
        if (tok_ids_push(&ids, sid) != 0)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "clip", "out of memory");
        i += sl;
        seg = i;
    }
    free(cps);
    if (st != CPDIT_OK) {
        free(ids.v);
        return st;
    }
    int cut = ids.n > stop_at;
    if (cut)
        ids.n = stop_at;
    if (tok_ids_push(&ids, t->eos_id) != 0) {
        free(ids.v);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "clip", "out of memory");
    }
    if (truncated)
        *truncated = cut;
    *ids_out = ids.v;
    *n_ids = ids.n;
    return CPDIT_OK;
}

cpdit_status clip_tokenizer_encode_padded(const clip_tokenizer *t, const char *text,
                                          size_t len, size_t max_length, int32_t *out,
                                          size_t *n_real, int *truncated, cpdit_error *err)
{
    if (max_length < 2)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "clip", "max_length must be >= 2");
    int32_t *ids;
    size_t n;
    cpdit_status st = clip_tokenizer_encode(t, text, len, max_length, &ids, &n, truncated, err);
    if (st != CPDIT_OK)
        return st;
    memcpy(out, ids, n * sizeof *ids);
    for (size_t i = n; i < max_length; i++)
        out[i] = t->eos_id; /* FluxPipeline pads CLIP with <|endoftext|> */
    if (n_real)
        *n_real = n;
    free(ids);
    return CPDIT_OK;
}
