/* token_map.h — a hash table from byte strings (token texts) to int32 ids, as the tokenizers
 * need for vocabularies of tens of thousands of entries. Keys are copied into the table;
 * lookups take (pointer, length) so they work on slices of a larger buffer. */
#ifndef CPDIT_TOKEN_MAP_H
#define CPDIT_TOKEN_MAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct token_map token_map;

/* A new empty map sized for about expected entries (it grows as needed); NULL when out of
 * memory. */
token_map *token_map_new(size_t expected);
void token_map_free(token_map *m);

/* Set key[0..len) -> value, replacing an existing value. Returns 0, or -1 when out of
 * memory (the map is unchanged then). */
int token_map_put(token_map *m, const char *key, size_t len, int32_t value);

/* 1 and *value when key[0..len) is present, else 0 (value untouched). */
int token_map_get(const token_map *m, const char *key, size_t len, int32_t *value);

size_t token_map_count(const token_map *m);

#ifdef __cplusplus
}
#endif
#endif
