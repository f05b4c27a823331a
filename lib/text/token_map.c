/* token_map.c — open-addressing (linear probing) hash table of byte strings to int32 ids.
 * Keys live in one growing arena; slots hold (hash, key offset, key length, value). */
#include "lib/text/token_map.h"

#include <stdlib.h>
#include <string.h>

#define TOKEN_MAP_MIN_SLOTS 64
#define TOKEN_MAP_MAX_LOAD_NUM 7 /* grow past 7/10 full */
#define TOKEN_MAP_MAX_LOAD_DEN 10
#define FNV_OFFSET 1469598103934665603ull
#define FNV_PRIME 1099511628211ull

typedef struct slot {
    uint64_t hash;
    size_t key_off;
    size_t key_len;
    int32_t value;
    int used;
} slot;

struct token_map {
    slot *slots;
    size_t n_slots; /* a power of two */
    size_t count;
    char *arena;
    size_t arena_len, arena_cap;
};

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= FNV_PRIME;
    }
    return h ^ (h >> 29);
}

token_map *token_map_new(size_t expected)
{
    token_map *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    size_t want = expected * TOKEN_MAP_MAX_LOAD_DEN / TOKEN_MAP_MAX_LOAD_NUM + 1;
    m->n_slots = TOKEN_MAP_MIN_SLOTS;
    while (m->n_slots < want)
        m->n_slots *= 2;
    m->slots = calloc(m->n_slots, sizeof *m->slots);
    if (!m->slots) {
        free(m);
        return NULL;
    }
    return m;
}

void token_map_free(token_map *m)
{
    if (!m)
        return;
    free(m->slots);
    free(m->arena);
    free(m);
}

size_t token_map_count(const token_map *m)
{
    return m->count;
}

static slot *find_slot(const token_map *m, const char *key, size_t len, uint64_t h)
{
    size_t mask = m->n_slots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        slot *s = &m->slots[i];
        if (!s->used)
            return s;
        if (s->hash == h && s->key_len == len && memcmp(m->arena + s->key_off, key, len) == 0)
            return s;
    }
}

static int grow(token_map *m)
{
    size_t n = m->n_slots * 2;
    slot *fresh = calloc(n, sizeof *fresh);
    if (!fresh)
        return -1;
    for (size_t i = 0; i < m->n_slots; i++) {
        if (!m->slots[i].used)
            continue;
        size_t j = (size_t)m->slots[i].hash & (n - 1);
        while (fresh[j].used)
            j = (j + 1) & (n - 1);
        fresh[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = fresh;
    m->n_slots = n;
    return 0;
}

int token_map_put(token_map *m, const char *key, size_t len, int32_t value)
{
    uint64_t h = hash_bytes(key, len);
    slot *s = find_slot(m, key, len, h);
    if (s->used) {
        s->value = value;
        return 0;
    }
    if ((m->count + 1) * TOKEN_MAP_MAX_LOAD_DEN > m->n_slots * TOKEN_MAP_MAX_LOAD_NUM) {
        if (grow(m) != 0)
            return -1;
        s = find_slot(m, key, len, h);
    }
    if (m->arena_len + len + 1 > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap : 4096;
        while (cap < m->arena_len + len + 1)
            cap *= 2;
        char *a = realloc(m->arena, cap);
        if (!a)
            return -1;
        m->arena = a;
        m->arena_cap = cap;
    }
    memcpy(m->arena + m->arena_len, key, len);
    m->arena[m->arena_len + len] = '\0';
    s->hash = h;
    s->key_off = m->arena_len;
    s->key_len = len;
    s->value = value;
    s->used = 1;
    m->arena_len += len + 1;
    m->count++;
    return 0;
}

int token_map_get(const token_map *m, const char *key, size_t len, int32_t *value)
{
    const slot *s = find_slot(m, key, len, hash_bytes(key, len));
    if (!s->used)
        return 0;
    *value = s->value;
    return 1;
}
