/* job_template.c — the output.name template (yaml/name_template.h) expanded for an item, and
 * {slug} (see job_items.h). */
#include "jobs/job_items.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define SLUG_EMPTY "prompt"

size_t job_template_expand(const name_template *t, const job_item *item, char *out, size_t size)
{
    size_t o = 0;
    char num[JOB_SLUG_MAX + NAME_TEMPLATE_INT_WIDTH_MAX + NAME_TEMPLATE_U64_DIGITS + 2]; /* a number or the slug */
    if (size == 0)
        return 0;
    out[0] = '\0';
    for (size_t i = 0; i < t->n_parts; i++) {
        const name_template_part *p = &t->parts[i];
        const char *piece = num;
        uint64_t v = 0;
        switch (p->kind) {
        case NT_LITERAL: piece = p->literal; break;
        case NT_SLUG: job_slug(item->prompt, num); break;
        case NT_INDEX: v = item->index; break;
        case NT_SEED: v = item->seed; break;
        case NT_WIDTH: v = (uint64_t)item->width; break;
        case NT_HEIGHT: v = (uint64_t)item->height; break;
        case NT_STEPS: v = (uint64_t)item->steps; break;
        case NT_REPEAT: v = (uint64_t)item->repeat; break;
        }
        if (p->kind != NT_LITERAL && p->kind != NT_SLUG)
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
