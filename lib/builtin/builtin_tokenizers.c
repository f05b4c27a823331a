/* builtin_tokenizers.c — the tokenizer files of a built-in model, learned from a small fixed
 * English text (CORPUS below) so that common words become single tokens:
 *
 *   tokenizer/    CLIP byte-level BPE as CLIPTokenizer reads it. vocab.json: the 256
 *                 byte symbols (GPT-2's bytes_to_unicode, in its order), the same 256 with
 *                 "</w>", one token per learned merge, then <|startoftext|> and
 *                 <|endoftext|> as the last two ids; merges.txt: "#version: 0.2" and
 *                 NUM_CLIP_MERGES merges learned from the corpus (lower-cased, split as
 *                 CLIP splits words), the most frequent pair first (ties: the smaller
 *                 strings), as BPE training does.
 *   tokenizer_2/  a T5-style Unigram tokenizer.json: <pad> 0, </s> 1, <unk> 2, then "▁",
 *                 "▁word" for every corpus word (letters or a digit, case kept) seen at
 *                 least MIN_WORD_COUNT times, and
 *                 single characters (letters of both cases, digits, punctuation), scored
 *                 by their log frequency in the corpus (add-one smoothed) and sorted by
 *                 score; normalizer: strip right + runs of spaces → "▁" (T5's, without the
 *                 Precompiled charsmap); pre-tokenizer Metaspace; post-processor "$A </s>".
 * Both depend only on the corpus and the constants here, so they are the same bytes on
 * every machine (scores are rounded to SCORE_DECIMALS places).
 */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/builtin/builtin_internal.h"

#define NUM_BYTES 256
#define NUM_CLIP_MERGES 254 /* 512 byte symbols + 254 merges + 2 specials = 768 ids */
#define CLIP_EOW "</w>"
#define CLIP_BOS "<|startoftext|>"
#define CLIP_EOS "<|endoftext|>"
#define CLIP_MAX_LENGTH_CFG 77
#define MIN_PAIR_COUNT 2    /* stop learning merges below this frequency */
#define MIN_WORD_COUNT 2    /* T5: corpus words seen this often become pieces */
#define SCORE_DECIMALS 10000.0
#define T5_MAX_LENGTH_CFG 512
#define METASPACE "\xe2\x96\x81" /* U+2581 "▁" */
#define TOKEN_MAX 64

/* A few hundred words of plain English in the style of image prompts. */
static const char CORPUS[] =
    "A photo of a cat sitting on a wooden table next to a window. "
    "A painting of a dog running in the park on a sunny day. "
    "A close up photo of a red flower in the garden, with green leaves and morning light. "
    "An old house on the hill at sunset, the sky is orange and pink. "
    "A cat and a dog are sleeping together on the sofa in the living room. "
    "A portrait of a woman with long hair, looking at the camera, soft light. "
    "A portrait of a man with a beard, wearing a blue shirt and a black hat. "
    "The city at night with bright lights, tall buildings and cars on the street. "
    "A small boat on the lake, mountains in the background, clear blue water. "
    "A bowl of fresh fruit on the kitchen table: apples, oranges and bananas. "
    "A photo of the sea with waves and white sand on the beach. "
    "A forest in the winter, snow on the trees, a quiet path between them. "
    "A bird sitting on a branch of a tree in the spring. "
    "A child playing with a ball in the garden of the house. "
    "A cup of coffee and a book on a table in a small cafe. "
    "A red car parked on the street in front of an old building. "
    "A painting of a village by the river, in the style of an oil painting. "
    "A drawing of a horse running across a field of yellow flowers. "
    "The moon and the stars in the night sky over the mountains. "
    "A cute little cat playing with a red ball of wool. "
    "A photo of a dog with a stick in the water of the lake. "
    "A watercolor painting of a bridge over the river in the city. "
    "A detailed photo of a white cat with green eyes, high quality, sharp focus. "
    "A black and white photo of a street in the rain, people with umbrellas. "
    "A plate of food on a table in a restaurant, a glass of red wine. "
    "A train crossing a bridge in the mountains, snow and trees. "
    "A girl reading a book under a tree in the park, warm light of the sun. "
    "A man riding a bicycle on a road between green fields. "
    "Two dogs playing in the snow in front of a house. "
    "A colorful painting of flowers in a vase on a wooden table. "
    "A photo of a small house in the forest with a light in the window. "
    "A ship on the sea at sunrise, clouds in the sky. "
    "A landscape with a river, hills and trees in the autumn, red and yellow leaves. "
    "An astronaut riding a horse on the moon, a digital painting. "
    "A robot standing in the street of a futuristic city at night. "
    "A photo of three apples and a glass of water on a table. "
    "The word hello written on a sign in front of a shop. "
    "A photo of a cat wearing a hat, sitting in a box. "
    "1 2 3 4 5 6 7 8 9 0, 10 cats, 24 dogs, 100 flowers, 2024. "
    "A beautiful landscape painting of green hills under a blue sky with white clouds. "
    "A dark room lit by a single candle, shadows on the wall, a mysterious mood. "
    "A happy family having dinner together at home, warm and cozy light. "
    "A young boy and his grandmother walking along the beach at sunset. "
    "A modern kitchen with white walls, wooden floors and large windows. "
    "A fantasy castle on top of a mountain, dragons flying around the towers. "
    "A close up of a butterfly resting on a purple flower, macro photography. "
    "An illustration of a fox reading a newspaper in a cozy armchair. "
    "A busy market street with people selling vegetables, fruits and spices. "
    "A cinematic shot of a lonely lighthouse on a rocky coast during a storm. "
    "A minimalist poster with simple shapes and bright colors, graphic design. "
    "A sleeping puppy wrapped in a soft blanket, photographed from above. "
    "Children building a snowman in the backyard, wearing warm winter clothes. "
    "A steaming bowl of noodle soup with vegetables and an egg, food photography. "
    "An ancient temple hidden in the jungle, covered with moss and vines. "
    "A golden retriever catching a frisbee in the air, action shot, sharp details. "
    "A vintage photograph of a sailor standing on the deck of a wooden ship. "
    "A pencil sketch of an elderly man sitting on a bench, reading a letter. "
    "A field of sunflowers stretching to the horizon, evening sunlight. "
    "A friendly robot handing a flower to a little girl, digital art, soft colors. "
    "Is it a cat? It is a cat! Yes, a very good cat; the best cat (of all).";

/* builtin:shapes: its grammar (tests/reference/train-builtin/shapes_data.py), every word at least
 * twice, so that each becomes one token of both tokenizers, plus a little of the default
 * corpus's English for prompts outside the grammar. */
const char builtin_shapes_corpus[] =
    "a small red circle in the center on a blue background. "
    "a large green square in the top left corner on a yellow background. "
    "a small blue triangle in the top right corner on a white background. "
    "a large yellow diamond in the bottom left corner on a purple background. "
    "a small orange circle in the bottom right corner on a black background. "
    "an orange square on an orange background, in the center. "
    "a big purple triangle at the top left, green background. "
    "a big white diamond at the center, red background. "
    "a black circle at the bottom right on white. "
    "an orange background with a small black square in the top right corner. "
    "a purple background with a large white triangle in the bottom left corner. "
    "small red diamond on a green background, in the bottom right corner. "
    "large blue circle on a black background, in the top left corner. "
    "a yellow square in the center on a red background. "
    "a green triangle on a purple background. "
    "a photo of a cat sitting on a wooden table next to a window. "
    "a painting of a dog running in the park on a sunny day, with trees and flowers. "
    "shapes and colors, simple shapes, bright colors, a picture of a house and a car.";

const char *builtin_corpus(const builtin_sizes *s)
{
    return s->corpus ? s->corpus : CORPUS;
}

/* ------------------------------------------------------------------ words of the corpus */

typedef struct word_count {
    char text[TOKEN_MAX];
    int count;
} word_count;

typedef struct word_list {
    word_count *w;
    size_t n, cap;
} word_list;

static int is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int is_space(unsigned char c)
{
    return c == ' ' || c == '\n' || c == '\t';
}

static int words_add(word_list *l, const char *s, size_t len)
{
    if (len >= TOKEN_MAX)
        len = TOKEN_MAX - 1;
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->w[i].text) == len && memcmp(l->w[i].text, s, len) == 0) {
            l->w[i].count++;
            return 0;
        }
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 128;
        word_count *w = realloc(l->w, cap * sizeof *w);
        if (!w)
            return -1;
        l->w = w;
        l->cap = cap;
    }
    memcpy(l->w[l->n].text, s, len);
    l->w[l->n].text[len] = '\0';
    l->w[l->n++].count = 1;
    return 0;
}

/* The corpus split as CLIP's pattern splits text (runs of letters, single digits, runs of
 * other non-space characters), lower-cased when lower (CLIP) or as written (T5). */
static int corpus_words(word_list *l, int lower, const char *corpus)
{
    const char *s = corpus;
    char buf[TOKEN_MAX];
    while (*s) {
        if (is_space((unsigned char)*s)) {
            s++;
            continue;
        }
        size_t n = 0;
        const unsigned char c0 = (unsigned char)*s;
        while (s[n] && !is_space((unsigned char)s[n])) {
            const unsigned char c = (unsigned char)s[n];
            if (n > 0 && (is_digit(c0) || is_alpha(c0) != is_alpha(c) || is_digit(c)))
                break;
            n++;
        }
        size_t m = n < TOKEN_MAX ? n : TOKEN_MAX - 1;
        for (size_t i = 0; i < m; i++)
            buf[i] = lower && s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
        if (words_add(l, buf, m) != 0)
            return -1;
        s += n;
    }
    return 0;
}

/* ------------------------------------------------------------------ CLIP BPE */

/* GPT-2's bytes_to_unicode: the code point standing for byte b, and the byte order of the
 * vocabulary (printable Latin-1 bytes first, then the rest mapped to 256 + k). */
static void bytes_to_unicode(unsigned cp[NUM_BYTES], int order[NUM_BYTES])
{
    int n = 0, extra = 0;
    for (int b = 0; b < NUM_BYTES; b++) {
        const int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        if (printable) {
            cp[b] = (unsigned)b;
            order[n++] = b;
        }
    }
    for (int b = 0; b < NUM_BYTES; b++) {
        const int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        if (!printable) {
            cp[b] = (unsigned)(NUM_BYTES + extra++);
            order[n++] = b;
        }
    }
}

static size_t utf8_put(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6)); /* every code point here is below 0x800 */
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

typedef struct token_table {
    char (*s)[TOKEN_MAX];
    size_t n, cap;
} token_table;

/* Id of string s, added when new; -1 when out of memory. */
static int tok_intern(token_table *t, const char *s)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->s[i], s) == 0)
            return (int)i;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        char(*p)[TOKEN_MAX] = realloc(t->s, cap * sizeof *p);
        if (!p)
            return -1;
        t->s = p;
        t->cap = cap;
    }
    snprintf(t->s[t->n], TOKEN_MAX, "%s", s);
    return (int)t->n++;
}

typedef struct pair_count {
    int a, b, count;
} pair_count;

static int pair_cmp(const void *x, const void *y)
{
    const pair_count *p = x, *q = y;
    return p->a != q->a ? (p->a < q->a ? -1 : 1) : p->b != q->b ? (p->b < q->b ? -1 : 1) : 0;
}

typedef struct bpe_state {
    token_table tok;
    int **sym;     /* per unique word: its current symbol ids */
    int *len;      /* per word: number of symbols */
    int *count;    /* per word: frequency */
    size_t n_words;
    char (*merges)[2 * TOKEN_MAX + 2];
    size_t n_merges;
} bpe_state;

/* The most frequent adjacent pair (ties: smaller left string, then right). 0 if none is
 * frequent enough, 1 if found, -1 out of memory. */
static int best_pair(const bpe_state *b, int *pa, int *pb)
{
    size_t total = 0;
    for (size_t w = 0; w < b->n_words; w++)
        total += b->len[w] > 1 ? (size_t)(b->len[w] - 1) : 0;
    pair_count *p = malloc((total ? total : 1) * sizeof *p);
    if (!p)
        return -1;
    size_t n = 0;
    for (size_t w = 0; w < b->n_words; w++)
        for (int i = 0; i + 1 < b->len[w]; i++)
            p[n++] = (pair_count){b->sym[w][i], b->sym[w][i + 1], b->count[w]};
    qsort(p, n, sizeof *p, pair_cmp);
    int found = 0, best = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        int c = 0;
        while (j < n && p[j].a == p[i].a && p[j].b == p[i].b)
            c += p[j++].count;
        int better = c > best;
        if (c == best && found) {
            int d = strcmp(b->tok.s[p[i].a], b->tok.s[*pa]);
            better = d < 0 || (d == 0 && strcmp(b->tok.s[p[i].b], b->tok.s[*pb]) < 0);
        }
        if (c >= MIN_PAIR_COUNT && better) {
            best = c;
            *pa = p[i].a;
            *pb = p[i].b;
            found = 1;
        }
        i = j;
    }
    free(p);
    return found;
}

/* Learn the merges; tok gets the byte symbols, their </w> forms and every merge result. */
static int bpe_learn(bpe_state *b, const int order[NUM_BYTES], const unsigned cp[NUM_BYTES],
                     const char *corpus)
{
    char s[TOKEN_MAX];
    for (int eow = 0; eow < 2; eow++)
        for (int i = 0; i < NUM_BYTES; i++) {
            size_t k = utf8_put(s, cp[order[i]]);
            snprintf(s + k, sizeof s - k, "%s", eow ? CLIP_EOW : "");
            if (tok_intern(&b->tok, s) < 0)
                return -1;
        }
    word_list words = {0};
    if (corpus_words(&words, 1, corpus) != 0)
        return -1;
    b->n_words = words.n;
    b->sym = calloc(words.n, sizeof *b->sym);
    b->len = calloc(words.n, sizeof *b->len);
    b->count = calloc(words.n, sizeof *b->count);
    b->merges = calloc(NUM_CLIP_MERGES, sizeof *b->merges);
    if (!b->sym || !b->len || !b->count || !b->merges) {
        free(words.w);
        return -1;
    }
    for (size_t w = 0; w < words.n; w++) {
        const char *t = words.w[w].text;
        const int L = (int)strlen(t);
        b->count[w] = words.w[w].count;
        b->len[w] = L;
        if (!(b->sym[w] = malloc((size_t)(L ? L : 1) * sizeof(int)))) {
            free(words.w);
            return -1;
        }
        for (int i = 0; i < L; i++) {
            size_t k = utf8_put(s, cp[(unsigned char)t[i]]);
            snprintf(s + k, sizeof s - k, "%s", i == L - 1 ? CLIP_EOW : "");
            b->sym[w][i] = tok_intern(&b->tok, s); /* already present */
        }
    }
    free(words.w);
    while (b->n_merges < NUM_CLIP_MERGES) {
        int a = -1, c = -1;
        int r = best_pair(b, &a, &c);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        snprintf(b->merges[b->n_merges++], 2 * TOKEN_MAX + 2, "%s %s", b->tok.s[a], b->tok.s[c]);
        snprintf(s, sizeof s, "%s%s", b->tok.s[a], b->tok.s[c]);
        const int m = tok_intern(&b->tok, s);
        if (m < 0)
            return -1;
        for (size_t w = 0; w < b->n_words; w++) {
            int o = 0;
            for (int i = 0; i < b->len[w]; i++) {
                if (i + 1 < b->len[w] && b->sym[w][i] == a && b->sym[w][i + 1] == c) {
                    b->sym[w][o++] = m;
                    i++;
                } else {
                    b->sym[w][o++] = b->sym[w][i];
                }
            }
            b->len[w] = o;
        }
    }
    return 0;
}

static void bpe_free(bpe_state *b)
{
    for (size_t w = 0; b->sym && w < b->n_words; w++)
        free(b->sym[w]);
    free(b->sym);
    free(b->len);
    free(b->count);
    free(b->merges);
    free(b->tok.s);
}

static json_t *special_tokens_map(const char *bos, const char *eos, const char *unk,
                                  const char *pad)
{
    json_t *o = json_object();
    if (bos)
        json_object_set_new(o, "bos_token", json_string(bos));
    json_object_set_new(o, "eos_token", json_string(eos));
    json_object_set_new(o, "pad_token", json_string(pad));
    json_object_set_new(o, "unk_token", json_string(unk));
    return o;
}

cpdit_status builtin_write_clip_tokenizer(const char *dir, builtin_sizes *s, cpdit_error *err)
{
    unsigned cp[NUM_BYTES];
    int order[NUM_BYTES];
    bytes_to_unicode(cp, order);
    bpe_state b;
    memset(&b, 0, sizeof b);
    if (bpe_learn(&b, order, cp, builtin_corpus(s)) != 0 || tok_intern(&b.tok, CLIP_BOS) < 0 ||
        tok_intern(&b.tok, CLIP_EOS) < 0) {
        bpe_free(&b);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "builtin tokenizer", "out of memory");
    }
    json_t *vocab = json_object();
    for (size_t i = 0; i < b.tok.n; i++)
        json_object_set_new(vocab, b.tok.s[i], json_integer((json_int_t)i));
    cpdit_status st = builtin_write_json(dir, "tokenizer/vocab.json", vocab, err);
    json_decref(vocab);

    size_t cap = 32 + b.n_merges * (2 * TOKEN_MAX + 3), used = 0;
    char *txt = malloc(cap);
    if (st == CPDIT_OK && !txt)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "builtin tokenizer", "out of memory");
    if (st == CPDIT_OK) {
        used += (size_t)snprintf(txt + used, cap - used, "#version: 0.2\n");
        for (size_t i = 0; i < b.n_merges; i++)
            used += (size_t)snprintf(txt + used, cap - used, "%s\n", b.merges[i]);
        st = builtin_write_bytes(dir, "tokenizer/merges.txt", txt, used, err);
    }
    free(txt);

    s->clip_vocab = (int)b.tok.n;
    s->clip_bos_id = (int)b.tok.n - 2;
    s->clip_eos_id = (int)b.tok.n - 1;
    bpe_free(&b);

    json_t *cfg = json_pack("{s:b, s:s, s:s, s:s, s:s, s:s, s:i, s:s}", "add_prefix_space", 0,
                            "bos_token", CLIP_BOS, "eos_token", CLIP_EOS, "pad_token", CLIP_EOS,
                            "unk_token", CLIP_EOS, "errors", "replace", "model_max_length",
                            CLIP_MAX_LENGTH_CFG, "tokenizer_class", "CLIPTokenizer");
    json_object_set_new(cfg, "do_lower_case", json_true());
    if (st == CPDIT_OK)
        st = builtin_write_json(dir, "tokenizer/tokenizer_config.json", cfg, err);
    json_decref(cfg);
    json_t *map = special_tokens_map(CLIP_BOS, CLIP_EOS, CLIP_EOS, CLIP_EOS);
    if (st == CPDIT_OK)
        st = builtin_write_json(dir, "tokenizer/special_tokens_map.json", map, err);
    json_decref(map);
    return st;
}

/* ------------------------------------------------------------------ T5 Unigram */

typedef struct piece {
    char text[TOKEN_MAX + 4];
    double score;
} piece;

static int piece_cmp(const void *x, const void *y)
{
    const piece *p = x, *q = y;
    if (p->score != q->score)
        return p->score > q->score ? -1 : 1;
    return strcmp(p->text, q->text);
}

static const char T5_PUNCT[] = ".,!?;:'\"()-/&%+*=#@_[]<>";

static json_t *t5_added(int id, const char *content)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content,
                     "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1);
}

static json_t *t5_tokenizer_json(const piece *p, size_t n)
{
    json_t *vocab = json_array();
    json_array_append_new(vocab, json_pack("[s, f]", "<pad>", 0.0));
    json_array_append_new(vocab, json_pack("[s, f]", "</s>", 0.0));
    json_array_append_new(vocab, json_pack("[s, f]", "<unk>", 0.0));
    for (size_t i = 0; i < n; i++)
        json_array_append_new(vocab, json_pack("[s, f]", p[i].text, p[i].score));
    json_t *root = json_object();
    json_object_set_new(root, "version", json_string("1.0"));
    json_object_set_new(root, "truncation", json_null());
    json_object_set_new(root, "padding", json_null());
    json_t *added = json_array();
    json_array_append_new(added, t5_added(0, "<pad>"));
    json_array_append_new(added, t5_added(1, "</s>"));
    json_array_append_new(added, t5_added(2, "<unk>"));
    json_object_set_new(root, "added_tokens", added);
    json_object_set_new(
        root, "normalizer",
        json_pack("{s:s, s:[{s:s, s:b, s:b}, {s:s, s:{s:s}, s:s}]}", "type", "Sequence",
                  "normalizers", "type", "Strip", "strip_left", 0, "strip_right", 1, "type",
                  "Replace", "pattern", "Regex", " {2,}", "content", METASPACE));
    json_object_set_new(root, "pre_tokenizer",
                        json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement",
                                  METASPACE, "prepend_scheme", "always", "split", 1));
    json_object_set_new(
        root, "post_processor",
        json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], "
                  "s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}], "
                  "s:{s:{s:s, s:[i], s:[s]}}}",
                  "type", "TemplateProcessing", "single", "Sequence", "id", "A", "type_id", 0,
                  "SpecialToken", "id", "</s>", "type_id", 0, "pair", "Sequence", "id", "A",
                  "type_id", 0, "SpecialToken", "id", "</s>", "type_id", 0, "Sequence", "id",
                  "B", "type_id", 0, "SpecialToken", "id", "</s>", "type_id", 0,
                  "special_tokens", "</s>", "id", "</s>", "ids", 1, "tokens", "</s>"));
    json_object_set_new(root, "decoder",
                        json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement",
                                  METASPACE, "prepend_scheme", "always", "split", 1));
    json_object_set_new(root, "model",
                        json_pack("{s:s, s:i, s:o, s:b}", "type", "Unigram", "unk_id", 2,
                                  "vocab", vocab, "byte_fallback", 0));
    return root;
}

cpdit_status builtin_write_t5_tokenizer(const char *dir, builtin_sizes *s, cpdit_error *err)
{
    word_list words = {0};
    /* characters: letters of both cases, digits, punctuation; counts from the corpus + 1 */
    char chars[2 * 26 + 10 + sizeof T5_PUNCT];
    size_t nc = 0;
    for (int c = 'a'; c <= 'z'; c++)
        chars[nc++] = (char)c;
    for (int c = 'A'; c <= 'Z'; c++)
        chars[nc++] = (char)c;
    for (int c = '0'; c <= '9'; c++)
        chars[nc++] = (char)c;
    for (const char *p = T5_PUNCT; *p; p++)
        chars[nc++] = *p;
    const char *corpus = builtin_corpus(s);
    if (corpus_words(&words, 0, corpus) != 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "builtin tokenizer", "out of memory");
    piece *p = calloc(words.n + nc + 1, sizeof *p);
    if (!p) {
        free(words.w);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "builtin tokenizer", "out of memory");
    }
    size_t n = 0;
    double total = 0;
    int n_words = 0;
    for (size_t i = 0; i < words.n; i++)
        n_words += words.w[i].count;
    /* "▁" occurs once per word; each word piece as often as the word */
    snprintf(p[n].text, sizeof p[n].text, "%s", METASPACE);
    p[n++].score = n_words;
    for (size_t i = 0; i < words.n; i++)
        if (words.w[i].count >= MIN_WORD_COUNT &&
            (is_alpha((unsigned char)words.w[i].text[0]) ||
             is_digit((unsigned char)words.w[i].text[0]))) {
            snprintf(p[n].text, sizeof p[n].text, "%s%s", METASPACE, words.w[i].text);
            p[n++].score = words.w[i].count;
        }
    for (size_t k = 0; k < nc; k++) {
        int count = 1;
        for (const char *c = corpus; *c; c++)
            count += *c == chars[k];
        p[n].text[0] = chars[k];
        p[n].text[1] = '\0';
        p[n++].score = count;
    }
    free(words.w);
    for (size_t i = 0; i < n; i++)
        total += p[i].score;
    for (size_t i = 0; i < n; i++)
        p[i].score = round(log(p[i].score / total) * SCORE_DECIMALS) / SCORE_DECIMALS;
    qsort(p, n, sizeof *p, piece_cmp);

    json_t *root = t5_tokenizer_json(p, n);
    free(p);
    cpdit_status st = builtin_write_json(dir, "tokenizer_2/tokenizer.json", root, err);
    json_decref(root);
    s->t5_vocab = (int)n + 3;

    json_t *cfg = json_pack("{s:s, s:s, s:s, s:i, s:i, s:b, s:s}", "eos_token", "</s>",
                            "pad_token", "<pad>", "unk_token", "<unk>", "extra_ids", 0,
                            "model_max_length", T5_MAX_LENGTH_CFG, "legacy", 1,
                            "tokenizer_class", "T5Tokenizer");
    if (st == CPDIT_OK)
        st = builtin_write_json(dir, "tokenizer_2/tokenizer_config.json", cfg, err);
    json_decref(cfg);
    json_t *map = special_tokens_map(NULL, "</s>", "<unk>", "<pad>");
    if (st == CPDIT_OK)
        st = builtin_write_json(dir, "tokenizer_2/special_tokens_map.json", map, err);
    json_decref(map);
    return st;
}
