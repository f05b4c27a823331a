/* manifest_node.c — the document tree of the manifest parsers: building, typing plain
 * scalars, converting JSONL values, typed reads with "expected X, got Y" messages, and the
 * "did you mean" suggestion (see manifest_internal.h). */
#include "yaml/manifest_internal.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Children arrays start at this many entries and double. */
#define MF_FIRST_CAPACITY 4
/* Suggest a known key when at most this many single-character edits away ... */
#define MF_SUGGEST_MAX_EDITS 3
/* ... and at most a third of the word's length (so "ab" does not suggest "seed"). */
#define MF_SUGGEST_LEN_DIVISOR 3
/* Longest key considered for suggestions (longer ones are never close to a known key). */
#define MF_SUGGEST_WORD_MAX 64

void mf_node_free(mf_node *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n_items; i++)
        mf_node_free(&n->items[i]);
    free(n->items);
    free(n->text);
    memset(n, 0, sizeof *n);
}

mf_node *mf_node_push(mf_node *parent)
{
    if (parent->n_items == parent->cap_items) {
        size_t cap = parent->cap_items ? 2 * parent->cap_items : MF_FIRST_CAPACITY;
        mf_node *p = realloc(parent->items, cap * sizeof *p);
        if (!p)
            return NULL;
        parent->items = p;
        parent->cap_items = cap;
    }
    mf_node *child = &parent->items[parent->n_items++];
    memset(child, 0, sizeof *child);
    return child;
}

size_t mf_map_size(const mf_node *map) { return map->n_items / 2; }
const mf_node *mf_map_key(const mf_node *map, size_t i) { return &map->items[2 * i]; }
const mf_node *mf_map_value(const mf_node *map, size_t i) { return &map->items[2 * i + 1]; }

static int all_digits(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

static int text_is(const char *s, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(s, word, n) == 0;
}

/* YAML 1.2 core schema, decimal only: [-+]?[0-9]+ is an integer;
 * [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? and [-+]?.inf / .nan are floats. */
mf_kind mf_plain_kind(const char *s, size_t n)
{
    if (n == 0 || text_is(s, n, "~") || text_is(s, n, "null") || text_is(s, n, "Null") ||
        text_is(s, n, "NULL"))
        return MF_NULL;
    if (text_is(s, n, "true") || text_is(s, n, "True") || text_is(s, n, "TRUE") ||
        text_is(s, n, "false") || text_is(s, n, "False") || text_is(s, n, "FALSE"))
        return MF_BOOL;
    size_t i = 0;
    if (s[0] == '-' || s[0] == '+')
        i = 1;
    if (all_digits(s + i, n - i))
        return MF_INT;
    const char *r = s + i;
    size_t m = n - i;
    if (text_is(r, m, ".inf") || text_is(r, m, ".Inf") || text_is(r, m, ".INF") ||
        (i == 0 && (text_is(r, m, ".nan") || text_is(r, m, ".NaN") || text_is(r, m, ".NAN"))))
        return MF_FLOAT;
    size_t int_digits = 0, frac_digits = 0, k = 0;
    while (k < m && r[k] >= '0' && r[k] <= '9')
        k++, int_digits++;
    if (k < m && r[k] == '.') {
        k++;
        while (k < m && r[k] >= '0' && r[k] <= '9')
            k++, frac_digits++;
    }
    if (int_digits + frac_digits == 0)
        return MF_STRING;
    if (k < m && (r[k] == 'e' || r[k] == 'E')) {
        k++;
        if (k < m && (r[k] == '-' || r[k] == '+'))
            k++;
        if (!all_digits(r + k, m - k))
            return MF_STRING;
        k = m;
    }
    return k == m ? MF_FLOAT : MF_STRING;
}

cpdit_status mf_error(mf_ctx *c, manifest_mark at, const char *fmt, ...)
{
    char where[CPDIT_ERROR_WHERE_MAX];
    if (at.col > 0)
        snprintf(where, sizeof where, "%s:%d:%d", c->file, at.line, at.col);
    else
        snprintf(where, sizeof where, "%s:%d", c->file, at.line);
    va_list ap;
    va_start(ap, fmt);
    cpdit_status st = cpdit_error_vset(c->err, CPDIT_ERR_INPUT, where, fmt, ap);
    va_end(ap);
    return st;
}

/* Copy at most MF_QUOTE_MAX characters of s into buf, escaping quotes and control bytes,
 * adding "..." when cut. Counts UTF-8 characters, never splitting one. */
void mf_quote(const char *s, size_t n, char *buf, size_t size)
{
    size_t o = 0, chars = 0, i = 0;
    while (i < n && o + 8 < size) {
        if (chars == MF_QUOTE_MAX) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)ch;
            i++;
        } else if (ch < 0x20) {
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", ch);
            i++;
        } else {
            size_t w = ch < 0x80 ? 1 : ch < 0xe0 ? 2 : ch < 0xf0 ? 3 : 4;
            if (i + w > n)
                w = n - i;
            memcpy(buf + o, s + i, w);
            o += w;
            i += w;
        }
        chars++;
    }
    buf[o] = '\0';
}

const char *mf_describe(const mf_node *n, char *buf, size_t size)
{
    char q[MF_QUOTE_MAX * 4 + 16];
    switch (n->kind) {
    case MF_NULL:
        snprintf(buf, size, "null (nothing)");
        break;
    case MF_BOOL:
        snprintf(buf, size, "boolean %s", n->text);
        break;
    case MF_INT:
        mf_quote(n->text, n->len, q, sizeof q);
        snprintf(buf, size, "integer %s", q);
        break;
    case MF_FLOAT:
        mf_quote(n->text, n->len, q, sizeof q);
        snprintf(buf, size, "number %s", q);
        break;
    case MF_STRING:
        mf_quote(n->text, n->len, q, sizeof q);
        snprintf(buf, size, "string \"%s\"", q);
        break;
    case MF_MAP:
        snprintf(buf, size, "a mapping");
        break;
    case MF_SEQ:
        snprintf(buf, size, "a list");
        break;
    }
    return buf;
}

/* "expected WANT for WHAT, got ..." at n. */
static cpdit_status wrong_type(mf_ctx *c, const mf_node *n, const char *want, const char *what)
{
    char d[MF_QUOTE_MAX * 4 + 32];
    return mf_error(c, n->mark, "%s: expected %s, got %s", what, want,
                    mf_describe(n, d, sizeof d));
}

cpdit_status mf_get_int(mf_ctx *c, const mf_node *n, const char *what, int64_t lo, int64_t hi,
                        int64_t *out)
{
    if (n->kind != MF_INT)
        return wrong_type(c, n, "an integer", what);
    errno = 0;
    char *end;
    long long v = strtoll(n->text, &end, 10);
    if (errno == ERANGE || *end != '\0' || v < lo || v > hi)
        return mf_error(c, n->mark, "%s: must be between %lld and %lld, got %s", what,
                        (long long)lo, (long long)hi, n->text);
    *out = v;
    return CPDIT_OK;
}

cpdit_status mf_get_number(mf_ctx *c, const mf_node *n, const char *what, double lo, double hi,
                           double *out)
{
    if (n->kind != MF_INT && n->kind != MF_FLOAT)
        return wrong_type(c, n, "a number", what);
    const char *t = n->text;
    double v;
    const char *digits = (t[0] == '-' || t[0] == '+') ? t + 1 : t;
    if (digits[0] == '.' && (digits[1] == 'i' || digits[1] == 'I'))
        v = t[0] == '-' ? -INFINITY : INFINITY;
    else if (digits[0] == '.' && (digits[1] == 'n' || digits[1] == 'N'))
        v = NAN;
    else
        v = strtod(t, NULL);
    if (!isfinite(v) || v < lo || v > hi)
        return mf_error(c, n->mark, "%s: must be a finite number between %g and %g, got %s",
                        what, lo, hi, t);
    *out = v;
    return CPDIT_OK;
}

cpdit_status mf_get_bool(mf_ctx *c, const mf_node *n, const char *what, int *out)
{
    if (n->kind != MF_BOOL)
        return wrong_type(c, n, "a boolean (true or false)", what);
    *out = n->text[0] == 't' || n->text[0] == 'T';
    return CPDIT_OK;
}

cpdit_status mf_get_string(mf_ctx *c, const mf_node *n, const char *what, char **out)
{
    if (n->kind != MF_STRING && n->kind != MF_INT && n->kind != MF_FLOAT)
        return wrong_type(c, n, "a string", what);
    *out = strdup(n->text);
    if (!*out)
        return cpdit_error_set(c->err, CPDIT_ERR_RUNTIME, c->file, "out of memory");
    return CPDIT_OK;
}

cpdit_status mf_expect(mf_ctx *c, const mf_node *n, mf_kind k, const char *what)
{
    if (n->kind == k)
        return CPDIT_OK;
    return wrong_type(c, n, k == MF_MAP ? "a mapping" : "a list", what);
}

/* Levenshtein distance of a and b (both at most MF_SUGGEST_WORD_MAX bytes). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[MF_SUGGEST_WORD_MAX + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *mf_closest(const char *word, const char *const *names, size_t count)
{
    if (strlen(word) > MF_SUGGEST_WORD_MAX)
        return NULL;
    size_t limit = strlen(word) / MF_SUGGEST_LEN_DIVISOR;
    if (limit < 1)
        limit = 1;
    if (limit > MF_SUGGEST_MAX_EDITS)
        limit = MF_SUGGEST_MAX_EDITS;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (size_t i = 0; i < count; i++) {
        if (strlen(names[i]) > MF_SUGGEST_WORD_MAX)
            continue;
        size_t d = edit_distance(word, names[i]);
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best;
}

/* ---------------------------------------------------------------- JSON (JSONL prompts) */
static cpdit_status set_text(mf_node *out, const char *s, size_t n, mf_ctx *c)
{
    out->text = malloc(n + 1);
    if (!out->text)
        return cpdit_error_set(c->err, CPDIT_ERR_RUNTIME, c->file, "out of memory");
    memcpy(out->text, s, n);
    out->text[n] = '\0';
    out->len = n;
    return CPDIT_OK;
}

static cpdit_status from_json(const json_t *j, int line, int depth, mf_node *out, mf_ctx *c)
{
    char num[64];
    out->mark.line = line;
    out->mark.col = 0;
    if (depth > MF_DEPTH_MAX)
        return mf_error(c, out->mark, "JSON nested deeper than %d levels", MF_DEPTH_MAX);
    switch (json_typeof(j)) {
    case JSON_NULL:
        out->kind = MF_NULL;
        return set_text(out, "null", 4, c);
    case JSON_TRUE:
    case JSON_FALSE:
        out->kind = MF_BOOL;
        return json_is_true(j) ? set_text(out, "true", 4, c) : set_text(out, "false", 5, c);
    case JSON_INTEGER:
        out->kind = MF_INT;
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
        return set_text(out, num, strlen(num), c);
    case JSON_REAL:
        out->kind = MF_FLOAT;
        snprintf(num, sizeof num, "%.17g", json_real_value(j));
        return set_text(out, num, strlen(num), c);
    case JSON_STRING:
        out->kind = MF_STRING;
        return set_text(out, json_string_value(j), json_string_length(j), c);
    case JSON_ARRAY: {
        out->kind = MF_SEQ;
        for (size_t i = 0; i < json_array_size(j); i++) {
            mf_node *ch = mf_node_push(out);
            if (!ch)
                return cpdit_error_set(c->err, CPDIT_ERR_RUNTIME, c->file, "out of memory");
            cpdit_status st = from_json(json_array_get(j, i), line, depth + 1, ch, c);
            if (st)
                return st;
        }
        return CPDIT_OK;
    }
    case JSON_OBJECT: {
        out->kind = MF_MAP;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            mf_node *k = mf_node_push(out);
            if (!k)
                return cpdit_error_set(c->err, CPDIT_ERR_RUNTIME, c->file, "out of memory");
            k->kind = MF_STRING;
            k->mark.line = line;
            cpdit_status st = set_text(k, key, strlen(key), c);
            mf_node *v = st ? NULL : mf_node_push(out);
            if (!st && !v)
                return cpdit_error_set(c->err, CPDIT_ERR_RUNTIME, c->file, "out of memory");
            if (!st)
                st = from_json(val, line, depth + 1, v, c);
            if (st)
                return st;
        }
        return CPDIT_OK;
    }
    }
    return mf_error(c, out->mark, "unsupported JSON value");
}

cpdit_status mf_node_from_json(const void *json, int line, mf_node *out, mf_ctx *c)
{
    memset(out, 0, sizeof *out);
    return from_json((const json_t *)json, line, 0, out, c);
}
