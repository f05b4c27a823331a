/* bpe_merge.h — byte-pair merging of a symbol sequence with a table of ranked merges, with the
 * exact semantics of GPT-2 / CLIP `bpe()` in Python:
 *
 *   repeat: among all adjacent pairs that have a rank, take the lowest rank (A, B); replace
 *   every occurrence of A B, scanning left to right without overlap, by the merged symbol;
 *   until no adjacent pair has a rank (or one symbol is left).
 *
 * bpe_merge runs it in O(n log n) with a heap of pair positions (each pass takes all current
 * occurrences of the lowest rank, in position order); bpe_merge_reference is the plain
 * quadratic loop, kept as the reference the tests compare against.
 */
#ifndef CPDIT_BPE_MERGE_H
#define CPDIT_BPE_MERGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The rank (>= 0) of merging symbols left and right, and the merged symbol in *merged; -1
 * when the pair is no merge. Ranks must be unique per pair. */
typedef int32_t (*bpe_rank_fn)(const void *ctx, int32_t left, int32_t right, int32_t *merged);

/* Merge sym[0..n) in place; returns the new length (the merged symbols in sym[0..len)), or
 * (size_t)-1 when out of memory. */
size_t bpe_merge(int32_t *sym, size_t n, bpe_rank_fn rank, const void *ctx);

/* The same by the quadratic loop of the Python code (no allocation). */
size_t bpe_merge_reference(int32_t *sym, size_t n, bpe_rank_fn rank, const void *ctx);

#ifdef __cplusplus
}
#endif
#endif
