/* spm_charsmap.c — SentencePiece precompiled charsmap: darts-clone lookups and the
 * grapheme-wise normalization of the tokenizers library (see spm_charsmap.h). */
#include "lib/text/spm_charsmap.h"

#include <stdlib.h>
#include <string.h>

#include "lib/text/unicode_text.h"

#define TRIE_SIZE_BYTES 4 /* the u32 header */
#define UNIT_BYTES 4

/* darts-clone unit layout: bit 8 has_leaf, bits 10.. offset (scaled by bit 9), the label in
 * bits 0-7 plus bit 31 (set on value units, so they never match a label). */
static uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFFu); }
static int unit_has_leaf(uint32_t u) { return (u >> 8) & 1u; }
static uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }

cpdit_status spm_charsmap_parse(spm_charsmap *map, const unsigned char *blob, size_t len,
                                const char *where, cpdit_error *err)
{
    memset(map, 0, sizeof *map);
    if (len < TRIE_SIZE_BYTES)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "precompiled charsmap: %zu bytes",
                               len);
    uint32_t trie_size = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 |
                         (uint32_t)blob[3] << 24;
    if (trie_size == 0 || trie_size % UNIT_BYTES != 0 || trie_size > len - TRIE_SIZE_BYTES)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                               "precompiled charsmap: trie size %u does not fit its %zu bytes",
                               (unsigned)trie_size, len);
    map->n_units = trie_size / UNIT_BYTES;
    map->values_len = len - TRIE_SIZE_BYTES - trie_size;
    map->units = malloc(map->n_units * sizeof *map->units);
    map->values = malloc(map->values_len + 1);
    if (!map->units || !map->values) {
        spm_charsmap_free(map);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
    }
    const unsigned char *p = blob + TRIE_SIZE_BYTES;
    for (size_t i = 0; i < map->n_units; i++, p += UNIT_BYTES)
        map->units[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                        (uint32_t)p[3] << 24;
    memcpy(map->values, p, map->values_len);
    map->values[map->values_len] = '\0'; /* a last string without its NUL still ends */
    return CPDIT_OK;
}

void spm_charsmap_free(spm_charsmap *map)
{
    free(map->units);
    free(map->values);
    memset(map, 0, sizeof *map);
}

const char *spm_charsmap_lookup(const spm_charsmap *map, const char *key, size_t len,
                                size_t *value_len)
{
    if (!map->n_units)
        return NULL;
    size_t pos = unit_offset(map->units[0]);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c == 0)
            break;
        pos ^= c;
        if (pos >= map->n_units)
            return NULL;
        uint32_t u = map->units[pos];
        if (unit_label(u) != c)
            return NULL;
        pos ^= unit_offset(u);
        if (unit_has_leaf(u)) {
            if (pos >= map->n_units)
                return NULL;
            size_t off = unit_value(map->units[pos]);
            if (off > map->values_len)
                return NULL;
            *value_len = strlen(map->values + off);
            return map->values + off;
        }
    }
    return NULL;
}

/* out grows as needed; returns 0 or -1 when out of memory. */
typedef struct byte_buf {
    char *p;
    size_t n, cap;
} byte_buf;

static int buf_append(byte_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

cpdit_status spm_charsmap_normalize(const spm_charsmap *map, const char *text, size_t len,
                                    char **out, size_t *out_len, cpdit_error *err)
{
    /* code points with their byte offsets, for the grapheme segmentation */
    uint32_t *cps = malloc((len + 1) * sizeof *cps);
    size_t *off = malloc((len + 1) * sizeof *off);
    byte_buf b = {0};
    cpdit_status st = CPDIT_OK;
    if (!cps || !off || buf_append(&b, "", 0) != 0) {
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "normalizer", "out of memory");
        goto done;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; n++) {
        off[n] = i;
        i += utf8_decode_next((const unsigned char *)text + i, len - i, &cps[n]);
    }
    off[n] = len;
    for (size_t g = 0; g < n;) {
        size_t ge = uni_grapheme_end(cps, n, g);
        const char *gs = text + off[g];
        size_t glen = off[ge] - off[g], vlen = 0;
        const char *v = NULL;
        if (glen < SPM_CHARSMAP_MAX_GRAPHEME_BYTES)
            v = spm_charsmap_lookup(map, gs, glen, &vlen);
        int bad = 0;
        if (v) {
            bad = buf_append(&b, v, vlen);
        } else {
            for (size_t c = g; c < ge && !bad; c++) {
                size_t clen = off[c + 1] - off[c];
                v = spm_charsmap_lookup(map, text + off[c], clen, &vlen);
                bad = v ? buf_append(&b, v, vlen) : buf_append(&b, text + off[c], clen);
            }
        }
        if (bad) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "normalizer", "out of memory");
            goto done;
        }
        g = ge;
    }
done:
    free(cps);
    free(off);
    if (st != CPDIT_OK) {
        free(b.p);
        return st;
    }
    *out = b.p;
    *out_len = b.n;
    return CPDIT_OK;
}
