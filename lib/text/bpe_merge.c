/* bpe_merge.c — byte-pair merging, fast (heap) and reference (quadratic) (see bpe_merge.h).
 *
 * The fast version keeps the symbols in a doubly linked list over their original positions (a
 * merge keeps the left position and unlinks the right one) and a min-heap of (rank, left
 * position) entries. Entries go stale when a neighbour changes; a popped entry counts only if
 * the pair now at that position still has that rank (ranks are unique per pair, so this
 * identifies the pair). One pass pops every valid entry of the lowest rank and merges those
 * positions left to right, re-checking each, which is the Python loop's pass; the pairs the
 * merges create are pushed afterwards.
 */
#include "lib/text/bpe_merge.h"

#include <stdlib.h>

#define DEAD (-1)   /* sym[] value of a position merged into its left neighbour */
#define NONE SIZE_MAX

typedef struct heap_entry {
    int32_t rank;
    size_t pos;
} heap_entry;

typedef struct heap {
    heap_entry *e;
    size_t n, cap;
} heap;

static int entry_less(heap_entry a, heap_entry b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static int heap_push(heap *h, int32_t rank, size_t pos)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        heap_entry *e = realloc(h->e, cap * sizeof *e);
        if (!e)
            return -1;
        h->e = e;
        h->cap = cap;
    }
    size_t i = h->n++;
    h->e[i] = (heap_entry){rank, pos};
    while (i > 0 && entry_less(h->e[i], h->e[(i - 1) / 2])) {
        heap_entry t = h->e[i];
        h->e[i] = h->e[(i - 1) / 2];
        h->e[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
    return 0;
}

static heap_entry heap_pop(heap *h)
{
    heap_entry top = h->e[0];
    h->e[0] = h->e[--h->n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && entry_less(h->e[l], h->e[m]))
            m = l;
        if (r < h->n && entry_less(h->e[r], h->e[m]))
            m = r;
        if (m == i)
            break;
        heap_entry t = h->e[i];
        h->e[i] = h->e[m];
        h->e[m] = t;
        i = m;
    }
    return top;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* Push the pair starting at pos (if it has a right neighbour and a rank). */
static int push_pair(heap *h, const int32_t *sym, const size_t *next, size_t pos,
                     bpe_rank_fn rank, const void *ctx)
{
    int32_t m;
    if (pos == NONE || next[pos] == NONE)
        return 0;
    int32_t r = rank(ctx, sym[pos], sym[next[pos]], &m);
    return r >= 0 ? heap_push(h, r, pos) : 0;
}

size_t bpe_merge(int32_t *sym, size_t n, bpe_rank_fn rank, const void *ctx)
{
    if (n < 2)
        return n;
    size_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    size_t *pass = malloc(n * sizeof *pass);
    heap h = {0};
    size_t result = (size_t)-1;
    if (!next || !prev || !pass)
        goto done;
    for (size_t i = 0; i < n; i++) {
        prev[i] = i ? i - 1 : NONE;
        next[i] = i + 1 < n ? i + 1 : NONE;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (push_pair(&h, sym, next, i, rank, ctx) != 0)
            goto done;
    while (h.n > 0) {
        heap_entry top = heap_pop(&h);
        int32_t a, b, merged;
        if (sym[top.pos] == DEAD || next[top.pos] == NONE ||
            rank(ctx, sym[top.pos], sym[next[top.pos]], &merged) != top.rank)
            continue; /* stale */
        a = sym[top.pos];
        b = sym[next[top.pos]];
        size_t np = 0;
        pass[np++] = top.pos;
        while (h.n > 0 && h.e[0].rank == top.rank) {
            heap_entry e = heap_pop(&h);
            int32_t m;
            if (sym[e.pos] != DEAD && next[e.pos] != NONE &&
                rank(ctx, sym[e.pos], sym[next[e.pos]], &m) == top.rank)
                pass[np++] = e.pos;
        }
        qsort(pass, np, sizeof *pass, cmp_size);
        size_t kept = 0;
        for (size_t k = 0; k < np; k++) {
            size_t p = pass[k], q = next[p];
            if ((k > 0 && p == pass[k - 1]) || sym[p] != a || q == NONE || sym[q] != b)
                continue; /* duplicate entry, or consumed by the merge to its left */
            sym[p] = merged;
            sym[q] = DEAD;
            next[p] = next[q];
            if (next[q] != NONE)
                prev[next[q]] = p;
            pass[kept++] = p;
        }
        for (size_t k = 0; k < kept; k++) {
            size_t p = pass[k];
            if (sym[p] == DEAD)
                continue;
            if (push_pair(&h, sym, next, prev[p], rank, ctx) != 0 ||
                push_pair(&h, sym, next, p, rank, ctx) != 0)
                goto done;
        }
    }
    size_t k = 0;
    for (size_t i = 0; i != NONE; i = next[i])
        sym[k++] = sym[i];
    result = k;
done:
    free(next);
    free(prev);
    free(pass);
    free(h.e);
    return result;
}

size_t bpe_merge_reference(int32_t *w, size_t n, bpe_rank_fn rank, const void *ctx)
{
    while (n > 1) {
        int32_t best = -1, first = 0, second = 0, merged = 0, m;
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t r = rank(ctx, w[i], w[i + 1], &m);
            if (r >= 0 && (best < 0 || r < best)) {
                best = r;
                first = w[i];
                second = w[i + 1];
                merged = m;
            }
        }
        if (best < 0)
            break;
        size_t k = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && w[i] == first && w[i + 1] == second) {
                w[k++] = merged;
                i += 2;
            } else {
                w[k++] = w[i++];
            }
        }
        n = k;
    }
    return n;
}
