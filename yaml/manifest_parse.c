/* manifest_parse.c — manifest bytes → document tree, with libyaml's event API.
 *
 * Before libyaml sees the bytes a pre-check walks them once and rejects, with the exact
 * line:col, what libyaml would report badly or not at all: bytes that are not UTF-8, NUL
 * bytes, other control characters and tab characters (YAML forbids tabs in indentation; we
 * forbid them everywhere so that the error is always the same and clear). Lines and columns
 * count characters the way libyaml's marks do (1-based here), with \n, \r\n, \r, U+0085,
 * U+2028 and U+2029 as line breaks.
 *
 * The event loop then builds the tree and refuses, deliberately: anchors and aliases (one
 * value used in several places makes "FILE:LINE:COL" ambiguous), tags, keys that are not
 * scalars, a second document, an empty file, nesting deeper than MF_DEPTH_MAX.
 */
#include "yaml/manifest_internal.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "lib/core/utf8.h"

#define UTF8_BOM_LEN 3
#define FIRST_NON_ASCII 0x80
#define DEL_CHAR 0x7f
#define C1_FIRST 0x80 /* U+0080..U+009F: C1 control characters (U+0085 NEL is a break) */
#define C1_LAST 0x9f
#define NEL_CHAR 0x85
#define LINE_SEPARATOR 0x2028
#define PARAGRAPH_SEPARATOR 0x2029
/* What libyaml expands "!!" to; shown back as "!!" in messages. */
#define YAML_CORE_TAG_PREFIX "tag:yaml.org,2002:"

/* Decode one UTF-8 character at s (n bytes left). Returns its length (1..4) and *cp, or 0
 * for an invalid sequence (bad lead byte, truncated, overlong, surrogate, > U+10FFFF). */
static size_t utf8_decode(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0];
    size_t w;
    unsigned min;
    if (c < FIRST_NON_ASCII) {
        *cp = c;
        return 1;
    }
    if ((c & 0xe0) == 0xc0)
        w = 2, min = 0x80, c &= 0x1f;
    else if ((c & 0xf0) == 0xe0)
        w = 3, min = 0x800, c &= 0x0f;
    else if ((c & 0xf8) == 0xf0)
        w = 4, min = 0x10000, c &= 0x07;
    else
        return 0;
    if (w > n)
        return 0;
    for (size_t i = 1; i < w; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return w;
}

/* The pre-check described at the top of the file. */
static cpdit_status precheck(const char *bytes, size_t len, mf_ctx *c)
{
    const unsigned char *s = (const unsigned char *)bytes;
    size_t i = 0;
    manifest_mark at = {1, 1};
    if (len >= UTF8_BOM_LEN && s[0] == 0xef && s[1] == 0xbb && s[2] == 0xbf)
        i = UTF8_BOM_LEN;
    while (i < len) {
        unsigned cp;
        size_t w = utf8_decode(s + i, len - i, &cp);
        if (w == 0)
            return mf_error(c, at,
                            "the file is not valid UTF-8 (byte 0x%02x); save the manifest as "
                            "UTF-8",
                            s[i]);
        if (cp == '\t')
            return mf_error(c, at,
                            "tab character: YAML indentation must use spaces (inside a "
                            "double-quoted string, write \\t for a tab)");
        if (cp == 0)
            return mf_error(c, at, "NUL byte: a manifest is a UTF-8 text file");
        if (cp == '\n' || cp == '\r' || cp == NEL_CHAR || cp == LINE_SEPARATOR ||
            cp == PARAGRAPH_SEPARATOR) {
            if (cp == '\r' && i + 1 < len && s[i + 1] == '\n')
                w = 2;
            at.line++;
            at.col = 1;
            i += w;
            continue;
        }
        if (cp < 0x20 || cp == DEL_CHAR || (cp >= C1_FIRST && cp <= C1_LAST))
            return mf_error(c, at, "control character U+%04X is not allowed", cp);
        at.col++;
        i += w;
    }
    return CPDIT_OK;
}

static manifest_mark mark_of(yaml_mark_t m)
{
    manifest_mark r = {(int)m.line + 1, (int)m.column + 1};
    return r;
}

static cpdit_status oom(mf_ctx *c)
{
    return cpdit_error_set(c->err, CPDIT_ERR_RUNTIME, c->file, "out of memory");
}

/* libyaml's own error (syntax): its problem at its mark, with the context it names. */
static cpdit_status syntax_error(const yaml_parser_t *p, mf_ctx *c)
{
    if (p->error == YAML_MEMORY_ERROR)
        return oom(c);
    manifest_mark at = mark_of(p->problem_mark);
    if (p->error == YAML_READER_ERROR) /* the pre-check should have caught these */
        return mf_error(c, at, "%s", p->problem ? p->problem : "unreadable input");
    if (p->context) {
        manifest_mark ctx = mark_of(p->context_mark);
        return mf_error(c, at, "YAML syntax error: %s (%s at line %d, column %d)",
                        p->problem ? p->problem : "invalid YAML", p->context, ctx.line,
                        ctx.col);
    }
    return mf_error(c, at, "YAML syntax error: %s", p->problem ? p->problem : "invalid YAML");
}

static const char NO_ANCHORS[] =
    "anchors and aliases are not supported in manifests (they make error positions "
    "ambiguous); write the value out again";

/* Anchor or tag on a node start: both refused. */
static cpdit_status check_decorations(const yaml_char_t *anchor, const yaml_char_t *tag,
                                      manifest_mark at, mf_ctx *c)
{
    if (anchor)
        return mf_error(c, at, "anchor &%s: %s", (const char *)anchor, NO_ANCHORS);
    if (tag) {
        const char *t = (const char *)tag;
        int core = strncmp(t, YAML_CORE_TAG_PREFIX, strlen(YAML_CORE_TAG_PREFIX)) == 0;
        return mf_error(c, at, "tag %s%s: tags are not supported; quote a value to make it a "
                        "string", core ? "!!" : "", core ? t + strlen(YAML_CORE_TAG_PREFIX) : t);
    }
    return CPDIT_OK;
}

/* The next node slot in the innermost open container (or the document slot). Refuses a
 * mapping or list where a key is expected. */
static cpdit_status next_slot(mf_node **stack, int depth, int is_scalar, manifest_mark at,
                              mf_node **slot, mf_ctx *c)
{
    mf_node *top = stack[depth];
    if (top->kind == MF_MAP && top->n_items % 2 == 0 && !is_scalar)
        return mf_error(c, at, "a key must be a plain name (a string), not a mapping or list");
    if (top->kind == MF_NULL && top->n_items > 0) /* the document holder: one root only */
        return mf_error(c, at, "unexpected second value at the document level");
    *slot = mf_node_push(top);
    return *slot ? CPDIT_OK : oom(c);
}

/* One scalar event into slot. Keys stay strings; quoted values are strings; plain values are
 * typed by mf_plain_kind. */
static cpdit_status take_scalar(const yaml_event_t *ev, int is_key, mf_node *slot, mf_ctx *c)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    slot->mark = mark_of(ev->start_mark);
    if (memchr(v, '\0', n))
        return mf_error(c, slot->mark, "a value contains a NUL character (\\0)");
    slot->text = malloc(n + 1);
    if (!slot->text)
        return oom(c);
    memcpy(slot->text, v, n);
    slot->text[n] = '\0';
    slot->len = n;
    if (!cpdit_utf8_valid(slot->text))
        return mf_error(c, slot->mark, "a value is not valid UTF-8 (check its \\u escapes)");
    if (is_key || ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        slot->kind = MF_STRING;
    else
        slot->kind = mf_plain_kind(v, n);
    return CPDIT_OK;
}

cpdit_status mf_parse_yaml(const char *bytes, size_t len, mf_node *root, mf_ctx *c)
{
    memset(root, 0, sizeof *root);
    cpdit_status st = precheck(bytes, len, c);
    if (st)
        return st;

    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return oom(c);
    /* The pre-check accepted a UTF-8 byte-order mark; libyaml, told the encoding, would
     * take it for content, so it starts after it (columns are the same either way). */
    size_t skip = len >= UTF8_BOM_LEN && memcmp(bytes, "\xef\xbb\xbf", UTF8_BOM_LEN) == 0
                      ? UTF8_BOM_LEN
                      : 0;
    yaml_parser_set_input_string(&parser, (const unsigned char *)bytes + skip, len - skip);
    yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);

    mf_node holder; /* MF_NULL kind: holds the document's root node */
    memset(&holder, 0, sizeof holder);
    mf_node *stack[MF_DEPTH_MAX + 2];
    int depth = 0, documents = 0, done = 0;
    stack[0] = &holder;

    while (!done && !st) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            st = syntax_error(&parser, c);
            break;
        }
        manifest_mark at = mark_of(ev.start_mark);
        mf_node *slot = NULL;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++documents > 1)
                st = mf_error(c, at, "a second YAML document ('---'): a manifest is one "
                              "document");
            break;
        case YAML_ALIAS_EVENT:
            st = mf_error(c, at, "alias *%s: %s", (const char *)ev.data.alias.anchor,
                          NO_ANCHORS);
            break;
        case YAML_SCALAR_EVENT: {
            st = check_decorations(ev.data.scalar.anchor, ev.data.scalar.tag, at, c);
            int is_key = stack[depth]->kind == MF_MAP && stack[depth]->n_items % 2 == 0;
            if (!st)
                st = next_slot(stack, depth, 1, at, &slot, c);
            if (!st)
                st = take_scalar(&ev, is_key, slot, c);
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (ev.type == YAML_SEQUENCE_START_EVENT)
                st = check_decorations(ev.data.sequence_start.anchor,
                                       ev.data.sequence_start.tag, at, c);
            else
                st = check_decorations(ev.data.mapping_start.anchor,
                                       ev.data.mapping_start.tag, at, c);
            if (!st && depth >= MF_DEPTH_MAX)
                st = mf_error(c, at, "nested deeper than %d levels", MF_DEPTH_MAX);
            if (!st)
                st = next_slot(stack, depth, 0, at, &slot, c);
            if (!st) {
                slot->kind = ev.type == YAML_SEQUENCE_START_EVENT ? MF_SEQ : MF_MAP;
                slot->mark = at;
                stack[++depth] = slot;
            }
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            if (depth > 0)
                depth--;
            break;
        default: /* stream start, document end */
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);

    if (!st && holder.n_items == 0) {
        manifest_mark first = {1, 1};
        st = mf_error(c, first, "the manifest is empty (expected keys such as model: and "
                      "prompts:)");
    }
    if (st) {
        mf_node_free(&holder);
        return st;
    }
    *root = holder.items[0];
    holder.n_items = 0; /* the root now belongs to the caller */
    mf_node_free(&holder);
    return CPDIT_OK;
}
