/* job_template.c — the output.name template language and {slug} (see job_items.h). */
#include "jobs/job_items.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLUG_EMPTY "prompt"
#define PNG_SUFFIX ".png"
/* Longest decimal text of each placeholder's values (manifest.h limits), characters. */
#define DIGITS_U64 20  /* {index} */
#define DIGITS_SEED 19 /* 0 .. 2^63-1 */
#define DIGITS_SIDE 4  /* <= MANIFEST_SIDE_MAX */
#define DIGITS_STEPS 4 /* <= MANIFEST_STEPS_MAX */
#define DIGITS_REPEAT 7 /* < MANIFEST_REPEATS_MAX */

static const struct {
    const char *name;
    job_template_kind kind;
    int digits; /* 0 for {slug} */
} PLACEHOLDERS[] = {
    {"index", JT_INDEX, DIGITS_U64},    {"seed", JT_SEED, DIGITS_SEED},
    {"slug", JT_SLUG, 0},               {"width", JT_WIDTH, DIGITS_SIDE},
    {"height", JT_HEIGHT, DIGITS_SIDE}, {"steps", JT_STEPS, DIGITS_STEPS},
    {"repeat", JT_REPEAT, DIGITS_REPEAT},
};
#define N_PLACEHOLDERS (sizeof PLACEHOLDERS / sizeof PLACEHOLDERS[0])
#define KNOWN_LIST "{index}, {seed}, {slug}, {width}, {height}, {steps}, {repeat}"

void job_template_free(job_template *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_parts; i++)
        free(t->parts[i].literal);
    free(t->parts);
    memset(t, 0, sizeof *t);
}

static job_template_part *push_part(job_template *t)
{
    job_template_part *p = realloc(t->parts, (t->n_parts + 1) * sizeof *p);
    if (!p)
        return NULL;
    t->parts = p;
    p = &t->parts[t->n_parts++];
    memset(p, 0, sizeof *p);
    return p;
}

/* SPEC of an integer placeholder: "d" or "0Nd"; *width = N (0 for "d"). 0 if not valid. */
static int parse_spec(const char *s, size_t n, int *width)
{
    *width = 0;
    if (n == 1 && s[0] == 'd')
        return 1;
    if (n < 3 || s[0] != '0' || s[n - 1] != 'd')
        return 0;
    int w = 0;
    for (size_t i = 1; i + 1 < n; i++) {
        if (s[i] < '0' || s[i] > '9' || w > JOB_TEMPLATE_INT_WIDTH_MAX)
            return 0;
        w = w * 10 + (s[i] - '0');
    }
    if (w < 1 || w > JOB_TEMPLATE_INT_WIDTH_MAX)
        return 0;
    *width = w;
    return 1;
}

/* Free what t holds and report a template problem (where is filled in by the caller). */
static cpdit_status fail(job_template *t, cpdit_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cpdit_status fail(job_template *t, cpdit_error *err, const char *fmt, ...)
{
    va_list ap;
    job_template_free(t);
    va_start(ap, fmt);
    cpdit_status st = cpdit_error_vset(err, CPDIT_ERR_INPUT, "", fmt, ap);
    va_end(ap);
    return st;
}

static cpdit_status out_of_memory(job_template *t, cpdit_error *err)
{
    job_template_free(t);
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "", "out of memory");
}

/* Add the literal lit[0..len) as a part. */
static cpdit_status add_literal(job_template *t, const char *lit, size_t len, cpdit_error *err)
{
    job_template_part *p = push_part(t);
    if (!p || !(p->literal = strndup(lit, len)))
        return out_of_memory(t, err);
    p->kind = JT_LITERAL;
    t->max_len += len;
    return CPDIT_OK;
}

/* The placeholder text[0..len) ("{name}" or "{name:spec}", braces included) as a part. */
static cpdit_status add_placeholder(job_template *t, const char *text, size_t len,
                                    cpdit_error *err)
{
    const char *name = text + 1, *close = text + len - 1;
    const char *colon = memchr(name, ':', (size_t)(close - name));
    size_t name_len = (size_t)((colon ? colon : close) - name);
    size_t k = 0;
    while (k < N_PLACEHOLDERS && (strlen(PLACEHOLDERS[k].name) != name_len ||
                                  strncmp(PLACEHOLDERS[k].name, name, name_len) != 0))
        k++;
    if (k == N_PLACEHOLDERS)
        return fail(t, err, "unknown placeholder %.*s (known: " KNOWN_LIST ")", (int)len, text);
    int width = 0;
    if (colon && PLACEHOLDERS[k].kind == JT_SLUG)
        return fail(t, err, "%.*s: {slug} takes no format", (int)len, text);
    if (colon && !parse_spec(colon + 1, (size_t)(close - colon - 1), &width))
        return fail(t, err, "%.*s: unsupported format; use {%s} or {%s:05d} (zero-padded to 5 "
                    "digits)", (int)len, text, PLACEHOLDERS[k].name, PLACEHOLDERS[k].name);
    job_template_part *p = push_part(t);
    if (!p)
        return out_of_memory(t, err);
    p->kind = PLACEHOLDERS[k].kind;
    p->width = width;
    int digits = PLACEHOLDERS[k].digits;
    t->max_len += p->kind == JT_SLUG ? JOB_SLUG_MAX : (size_t)(width > digits ? width : digits);
    return CPDIT_OK;
}

cpdit_status job_template_parse(const char *text, job_template *out, cpdit_error *err)
{
    memset(out, 0, sizeof *out);
    size_t n = strlen(text), suffix = strlen(PNG_SUFFIX);
    if (n == 0)
        return fail(out, err, "empty file name template");
    if (strchr(text, '/'))
        return fail(out, err, "a file name, not a path: no '/' (put folders in output.dir)");
    if (text[0] == '.')
        return fail(out, err, "the name must not start with '.' (hidden and temporary files "
                    "start with '.')");
    if (n < suffix || strcmp(text + n - suffix, PNG_SUFFIX) != 0)
        return fail(out, err, "the name must end in \".png\"");
    char *lit = malloc(n + 1);
    if (!lit)
        return out_of_memory(out, err);
    size_t ln = 0, i = 0;
    cpdit_status st = CPDIT_OK;
    while (!st && i < n) {
        char ch = text[i];
        if ((ch == '{' || ch == '}') && text[i + 1] == ch) { /* {{ or }} */
            lit[ln++] = ch;
            i += 2;
        } else if (ch == '}') {
            st = fail(out, err, "a single '}' (write '}}' for a literal brace)");
        } else if ((unsigned char)ch < 0x20 || ch == 0x7f) {
            st = fail(out, err, "control character in the name");
        } else if (ch != '{') {
            lit[ln++] = ch;
            i++;
        } else {
            const char *close = strchr(text + i, '}');
            const char *reopen = strchr(text + i + 1, '{');
            if (!close || (reopen && reopen < close)) {
                st = fail(out, err, "'{' without a closing '}' (write '{{' for a literal "
                          "brace)");
                break;
            }
            if (ln > 0)
                st = add_literal(out, lit, ln, err);
            ln = 0;
            if (!st)
                st = add_placeholder(out, text + i, (size_t)(close - text - i) + 1, err);
            i = (size_t)(close - text) + 1;
        }
    }
    if (!st && ln > 0)
        st = add_literal(out, lit, ln, err);
    free(lit);
    if (st)
        return st;
    if (out->max_len > JOB_FILE_NAME_MAX)
        return fail(out, err, "names could be up to %zu bytes long; the limit is %d",
                    out->max_len, JOB_FILE_NAME_MAX);
    return CPDIT_OK;
}

size_t job_template_expand(const job_template *t, const job_item *item, char *out, size_t size)
{
    size_t o = 0;
    char num[JOB_SLUG_MAX + JOB_TEMPLATE_INT_WIDTH_MAX + DIGITS_U64 + 2]; /* a number or the slug */
    if (size == 0)
        return 0;
    out[0] = '\0';
    for (size_t i = 0; i < t->n_parts; i++) {
        const job_template_part *p = &t->parts[i];
        const char *piece = num;
        uint64_t v = 0;
        switch (p->kind) {
        case JT_LITERAL: piece = p->literal; break;
        case JT_SLUG: job_slug(item->prompt, num); break;
        case JT_INDEX: v = item->index; break;
        case JT_SEED: v = item->seed; break;
        case JT_WIDTH: v = (uint64_t)item->width; break;
        case JT_HEIGHT: v = (uint64_t)item->height; break;
        case JT_STEPS: v = (uint64_t)item->steps; break;
        case JT_REPEAT: v = (uint64_t)item->repeat; break;
        }
        if (p->kind != JT_LITERAL && p->kind != JT_SLUG)
            snprintf(num, sizeof num, "%0*" PRIu64, p->width, v);
        size_t len = strlen(piece);
        if (o + len >= size)
            len = size - 1 - o;
        memcpy(out + o, piece, len);
        o += len;
        out[o] = '\0';
    }
    return o;
}

void job_slug(const char *prompt, char *out)
{
    size_t o = 0;
    int pending_dash = 0;
    for (const unsigned char *s = (const unsigned char *)prompt; *s && o < JOB_SLUG_MAX; s++) {
        unsigned char ch = *s;
        int alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9');
        if (!alnum) {
            pending_dash = o > 0;
            continue;
        }
        if (pending_dash) {
            out[o++] = '-';
            pending_dash = 0;
            if (o == JOB_SLUG_MAX)
                break;
        }
        out[o++] = (char)((ch >= 'A' && ch <= 'Z') ? ch - 'A' + 'a' : ch);
    }
    while (o > 0 && out[o - 1] == '-')
        o--;
    out[o] = '\0';
    if (o == 0)
        strcpy(out, SLUG_EMPTY);
}
