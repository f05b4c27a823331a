/* name_template.c — parsing the output.name template language of manifests (see
 * name_template.h); expansion for an item is jobs/job_template.c. */
#include "yaml/name_template.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PNG_SUFFIX ".png"
/* Longest decimal text of each placeholder's values (manifest.h limits), characters. */
#define DIGITS_U64 NAME_TEMPLATE_U64_DIGITS /* {index} */
#define DIGITS_SEED 19 /* 0 .. 2^63-1 */
#define DIGITS_SIDE 4  /* <= MANIFEST_SIDE_MAX */
#define DIGITS_STEPS 4 /* <= MANIFEST_STEPS_MAX */
#define DIGITS_REPEAT 7 /* < MANIFEST_REPEATS_MAX */

static const struct {
    const char *name;
    name_template_kind kind;
    int digits; /* 0 for {slug} */
} PLACEHOLDERS[] = {
    {"index", NT_INDEX, DIGITS_U64},    {"seed", NT_SEED, DIGITS_SEED},
    {"slug", NT_SLUG, 0},               {"width", NT_WIDTH, DIGITS_SIDE},
    {"height", NT_HEIGHT, DIGITS_SIDE}, {"steps", NT_STEPS, DIGITS_STEPS},
    {"repeat", NT_REPEAT, DIGITS_REPEAT},
};
#define N_PLACEHOLDERS (sizeof PLACEHOLDERS / sizeof PLACEHOLDERS[0])
#define KNOWN_LIST "{index}, {seed}, {slug}, {width}, {height}, {steps}, {repeat}"

void name_template_free(name_template *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_parts; i++)
        free(t->parts[i].literal);
    free(t->parts);
    memset(t, 0, sizeof *t);
}

static name_template_part *push_part(name_template *t)
{
    name_template_part *p = realloc(t->parts, (t->n_parts + 1) * sizeof *p);
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
        if (s[i] < '0' || s[i] > '9' || w > NAME_TEMPLATE_INT_WIDTH_MAX)
            return 0;
        w = w * 10 + (s[i] - '0');
    }
    if (w < 1 || w > NAME_TEMPLATE_INT_WIDTH_MAX)
        return 0;
    *width = w;
    return 1;
}

/* Free what t holds and report a template problem (where is filled in by the caller). */
static cpdit_status fail(name_template *t, cpdit_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cpdit_status fail(name_template *t, cpdit_error *err, const char *fmt, ...)
{
    va_list ap;
    name_template_free(t);
    va_start(ap, fmt);
    cpdit_status st = cpdit_error_vset(err, CPDIT_ERR_INPUT, "", fmt, ap);
    va_end(ap);
    return st;
}

static cpdit_status out_of_memory(name_template *t, cpdit_error *err)
{
    name_template_free(t);
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "", "out of memory");
}

/* Add the literal lit[0..len) as a part. */
static cpdit_status add_literal(name_template *t, const char *lit, size_t len, cpdit_error *err)
{
    name_template_part *p = push_part(t);
    if (!p || !(p->literal = strndup(lit, len)))
        return out_of_memory(t, err);
    p->kind = NT_LITERAL;
    t->max_len += len;
    return CPDIT_OK;
}

/* The placeholder text[0..len) ("{name}" or "{name:spec}", braces included) as a part. */
static cpdit_status add_placeholder(name_template *t, const char *text, size_t len,
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
    if (colon && PLACEHOLDERS[k].kind == NT_SLUG)
        return fail(t, err, "%.*s: {slug} takes no format", (int)len, text);
    if (colon && !parse_spec(colon + 1, (size_t)(close - colon - 1), &width))
        return fail(t, err, "%.*s: unsupported format; use {%s} or {%s:05d} (zero-padded to 5 "
                    "digits)", (int)len, text, PLACEHOLDERS[k].name, PLACEHOLDERS[k].name);
    name_template_part *p = push_part(t);
    if (!p)
        return out_of_memory(t, err);
    p->kind = PLACEHOLDERS[k].kind;
    p->width = width;
    int digits = PLACEHOLDERS[k].digits;
    t->max_len += p->kind == NT_SLUG ? NAME_TEMPLATE_SLUG_MAX : (size_t)(width > digits ? width : digits);
    return CPDIT_OK;
}

cpdit_status name_template_parse(const char *text, name_template *out, cpdit_error *err)
{
    return name_template_parse_as(text, PNG_SUFFIX, out, err);
}

cpdit_status name_template_parse_as(const char *text, const char *ext, name_template *out,
                                    cpdit_error *err)
{
    memset(out, 0, sizeof *out);
    size_t n = strlen(text), suffix = strlen(ext);
    if (n == 0)
        return fail(out, err, "empty file name template");
    if (strchr(text, '/'))
        return fail(out, err, "a file name, not a path: no '/' (put folders in output.dir)");
    if (text[0] == '.')
        return fail(out, err, "the name must not start with '.' (hidden and temporary files "
                    "start with '.')");
    if (n < suffix || strcmp(text + n - suffix, ext) != 0)
        return fail(out, err, "the name must end in \"%s\"", ext);
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
    if (out->max_len > NAME_TEMPLATE_FILE_MAX)
        return fail(out, err, "names could be up to %zu bytes long; the limit is %d",
                    out->max_len, NAME_TEMPLATE_FILE_MAX);
    return CPDIT_OK;
}

