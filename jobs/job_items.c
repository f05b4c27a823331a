/* job_items.c — streaming expansion of a manifest into items (see job_items.h): inline
 * prompts, then the prompts file line by line; per prompt the size x seed x repeat loop;
 * file names from the template; the duplicate-name check. */
#include "jobs/job_items.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/regular_file.h" /* a FIFO is refused, never waited on */

/* Duplicate-name table: open addressing, grown to keep it at most half full. */
#define UNIQUE_FIRST_SLOTS 1024
#define FNV64_OFFSET 0xcbf29ce484222325ull
#define FNV64_PRIME 0x100000001b3ull

typedef struct unique_slot {
    uint64_t hash;
    uint64_t index_plus_1; /* 0 = empty */
} unique_slot;

struct job_items {
    const manifest *m;
    job_byte_source src;
    FILE *own_fp; /* when reading the prompts file here */
    unsigned flags;
    name_template tmpl;

    /* the prompts file: the current chunk and the line being assembled */
    char *chunk;
    size_t chunk_len, chunk_pos;
    int file_open, file_eof;
    char *line;
    size_t line_len, line_cap;
    int line_no;

    /* the current prompt and where its loops stand */
    size_t next_inline;
    const manifest_prompt *cur;
    manifest_prompt file_prompt; /* owned, when cur points at it */
    manifest_seeds seeds;
    const manifest_size *sizes;
    size_t n_sizes;
    manifest_size one_size;
    int repeats;
    size_t size_i, seed_i;
    int repeat_i;
    int have_prompt;

    uint64_t next_index, n_prompts;
    uint64_t n_counted; /* items of the prompts started so far (MANIFEST_ITEMS_MAX) */
    job_item item;

    unique_slot *slots;
    size_t n_slots, n_used;
};

static long file_read(void *ctx, char *buf, size_t n, cpdit_error *err)
{
    job_items *it = ctx;
    size_t got = fread(buf, 1, n, it->own_fp);
    if (got == 0 && ferror(it->own_fp)) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, it->m->prompts_file, "read error: %s",
                        strerror(errno));
        return -1;
    }
    return (long)got;
}

cpdit_status job_items_open(const manifest *m, const job_byte_source *src, unsigned flags,
                            job_items **out, cpdit_error *err)
{
    *out = NULL;
    job_items *it = calloc(1, sizeof *it);
    if (!it)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, m->path, "out of memory");
    it->m = m;
    it->flags = flags;
    cpdit_status st = name_template_parse_as(m->name_template,
                                             manifest_format_extension(m->format), &it->tmpl,
                                             err);
    if (st) {
        cpdit_error_prefix_where(err, m->path);
        free(it);
        return st;
    }
    if (m->prompts_file) {
        if (src) {
            it->src = *src;
        } else {
            it->own_fp = cpdit_fopen_regular(m->prompts_file, "cannot open the prompts file",
                                             err);
            if (!it->own_fp) {
                st = err ? err->status : CPDIT_ERR_INPUT;
                job_items_close(it);
                return st;
            }
            it->src.read = file_read;
            it->src.ctx = it;
        }
        it->chunk = malloc(JOB_ITEMS_READ_CHUNK);
        if (!it->chunk) {
            job_items_close(it);
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, m->path, "out of memory");
        }
        it->file_open = 1;
    }
    *out = it;
    return CPDIT_OK;
}

void job_items_close(job_items *it)
{
    if (!it)
        return;
    if (it->own_fp)
        fclose(it->own_fp);
    name_template_free(&it->tmpl);
    free(it->chunk);
    free(it->line);
    manifest_prompt_free(&it->file_prompt);
    free(it->slots);
    free(it);
}

uint64_t job_items_prompt_count(const job_items *it) { return it->n_prompts; }

/* Append bytes to the line being assembled. */
static cpdit_status line_append(job_items *it, const char *p, size_t n, cpdit_error *err)
{
    if (it->line_len + n > JOB_PROMPT_LINE_MAX) {
        char where[CPDIT_ERROR_WHERE_MAX];
        snprintf(where, sizeof where, "%s:%d", it->m->prompts_file, it->line_no);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, where, "line longer than %d bytes",
                               JOB_PROMPT_LINE_MAX);
    }
    if (it->line_len + n + 1 > it->line_cap) {
        size_t cap = it->line_cap ? it->line_cap : 256;
        while (cap < it->line_len + n + 1)
            cap *= 2;
        char *l = realloc(it->line, cap);
        if (!l)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, it->m->prompts_file, "out of memory");
        it->line = l;
        it->line_cap = cap;
    }
    memcpy(it->line + it->line_len, p, n);
    it->line_len += n;
    it->line[it->line_len] = '\0';
    return CPDIT_OK;
}

/* The next complete line of the prompts file into it->line; *got = 0 at the end. */
static cpdit_status next_line(job_items *it, int *got, cpdit_error *err)
{
    *got = 0;
    it->line_len = 0;
    if (it->file_eof)
        return CPDIT_OK;
    it->line_no++;
    for (;;) {
        if (it->chunk_pos == it->chunk_len) {
            long n = it->src.read(it->src.ctx, it->chunk, JOB_ITEMS_READ_CHUNK, err);
            if (n < 0)
                return err ? err->status : CPDIT_ERR_RUNTIME;
            it->chunk_len = (size_t)n;
            it->chunk_pos = 0;
            if (n == 0) {
                it->file_eof = 1;
                *got = it->line_len > 0; /* a last line without '\n' still counts */
                return CPDIT_OK;
            }
        }
        char *start = it->chunk + it->chunk_pos;
        size_t avail = it->chunk_len - it->chunk_pos;
        char *nl = memchr(start, '\n', avail);
        size_t take = nl ? (size_t)(nl - start) : avail;
        cpdit_status st = line_append(it, start, take, err);
        if (st)
            return st;
        it->chunk_pos += take + (nl ? 1 : 0);
        if (nl) {
            *got = 1;
            return CPDIT_OK;
        }
    }
}

/* Make p the current prompt: resolve its seeds, sizes and repeats. */
static void start_prompt(job_items *it, const manifest_prompt *p)
{
    const manifest_settings *b = &it->m->base, *o = &p->over;
    it->cur = p;
    if (o->set & MANIFEST_SET_SEEDS) {
        it->seeds = o->seeds;
    } else if (o->set & MANIFEST_SET_SEED) {
        it->seeds.list = NULL;
        it->seeds.start = o->seed;
        it->seeds.n = 1;
    } else {
        it->seeds = b->seeds;
    }
    if (o->set & MANIFEST_SET_SIZES) {
        it->sizes = o->sizes;
        it->n_sizes = o->n_sizes;
    } else if (o->set & (MANIFEST_SET_WIDTH | MANIFEST_SET_HEIGHT)) {
        it->one_size.width = (o->set & MANIFEST_SET_WIDTH) ? o->width : b->width;
        it->one_size.height = (o->set & MANIFEST_SET_HEIGHT) ? o->height : b->height;
        it->sizes = &it->one_size;
        it->n_sizes = 1;
    } else {
        it->sizes = b->sizes;
        it->n_sizes = b->n_sizes;
    }
    it->repeats = (o->set & MANIFEST_SET_REPEATS) ? o->repeats : b->repeats;
    it->size_i = it->seed_i = 0;
    it->repeat_i = 0;
    it->have_prompt = 1;
    it->n_prompts++;
}

/* Advance to the next prompt; *got = 0 when there is none. */
static cpdit_status next_prompt(job_items *it, int *got, cpdit_error *err)
{
    *got = 0;
    if (it->next_inline < it->m->n_prompts) {
        const manifest_prompt *p = &it->m->prompts[it->next_inline++];
        cpdit_status st = manifest_items_add(it->m, p, it->m->path, &it->n_counted, err);
        if (st)
            return st;
        start_prompt(it, p);
        *got = 1;
        return CPDIT_OK;
    }
    while (it->file_open) {
        int have;
        cpdit_status st = next_line(it, &have, err);
        if (st)
            return st;
        if (!have) {
            it->file_open = 0;
            if (it->n_prompts == it->m->n_prompts) /* a prompts file with no prompt in it */
                return cpdit_error_set(err, CPDIT_ERR_INPUT, it->m->prompts_file,
                                       "no prompts in the file (only empty lines and "
                                       "comments)");
            return CPDIT_OK;
        }
        manifest_prompt_free(&it->file_prompt);
        st = manifest_prompt_parse_line(it->m->prompts_format, it->m->prompts_file,
                                        it->line_no, it->line, it->line_len, &it->file_prompt,
                                        err);
        if (st)
            return st;
        if (it->file_prompt.text) {
            /* counted before its items are made: a huge count never grows memory */
            if ((st = manifest_items_add(it->m, &it->file_prompt, it->m->prompts_file,
                                         &it->n_counted, err)))
                return st;
            start_prompt(it, &it->file_prompt);
            *got = 1;
            return CPDIT_OK;
        }
    }
    return CPDIT_OK;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = FNV64_OFFSET;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * FNV64_PRIME;
    return h;
}

/* Record the current item's file name; error when an earlier item has the same name (a
 * 64-bit hash match: a false alarm needs ~4e9 items). */
static cpdit_status check_unique(job_items *it, cpdit_error *err)
{
    if (2 * (it->n_used + 1) > it->n_slots) {
        size_t n = it->n_slots ? 2 * it->n_slots : UNIQUE_FIRST_SLOTS;
        unique_slot *s = calloc(n, sizeof *s);
        if (!s)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, it->m->path, "out of memory");
        for (size_t i = 0; i < it->n_slots; i++) {
            if (!it->slots[i].index_plus_1)
                continue;
            size_t j = (size_t)(it->slots[i].hash & (n - 1));
            while (s[j].index_plus_1)
                j = (j + 1) & (n - 1);
            s[j] = it->slots[i];
        }
        free(it->slots);
        it->slots = s;
        it->n_slots = n;
    }
    uint64_t h = fnv1a(it->item.file);
    size_t j = (size_t)(h & (it->n_slots - 1));
    while (it->slots[j].index_plus_1) {
        if (it->slots[j].hash == h) {
            char where[CPDIT_ERROR_WHERE_MAX];
            const manifest *m = it->m;
            if (m->name_mark.line > 0)
                snprintf(where, sizeof where, "%s:%d:%d", m->path, m->name_mark.line,
                         m->name_mark.col);
            else
                snprintf(where, sizeof where, "%s", m->path);
            return cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                                   "output.name \"%s\" gives items %llu and %llu the same file "
                                   "name \"%s\"; add {index} to it",
                                   m->name_template,
                                   (unsigned long long)(it->slots[j].index_plus_1 - 1),
                                   (unsigned long long)it->item.index, it->item.file);
        }
        j = (j + 1) & (it->n_slots - 1);
    }
    it->slots[j].hash = h;
    it->slots[j].index_plus_1 = it->item.index + 1;
    it->n_used++;
    return CPDIT_OK;
}

cpdit_status job_items_next(job_items *it, const job_item **item, cpdit_error *err)
{
    *item = NULL;
    if (it->have_prompt && it->size_i == it->n_sizes)
        it->have_prompt = 0;
    if (!it->have_prompt) {
        int got;
        cpdit_status st = next_prompt(it, &got, err);
        if (st || !got)
            return st;
    }
    const manifest_settings *b = &it->m->base, *o = &it->cur->over;
    job_item *x = &it->item;
    x->index = it->next_index++;
    x->prompt_index = it->n_prompts - 1;
    x->prompt = it->cur->text;
    x->negative_prompt = (o->set & MANIFEST_SET_NEGATIVE) ? o->negative_prompt
                                                          : b->negative_prompt;
    x->seed = manifest_seed_at(&it->seeds, it->seed_i);
    x->width = it->sizes[it->size_i].width;
    x->height = it->sizes[it->size_i].height;
    x->steps = (o->set & MANIFEST_SET_STEPS) ? o->steps : b->steps;
    x->max_sequence_length = (o->set & MANIFEST_SET_SEQ_LEN) ? o->max_sequence_length
                                                              : b->max_sequence_length;
    x->guidance = (o->set & MANIFEST_SET_GUIDANCE) ? o->guidance : b->guidance;
    x->true_cfg = (o->set & MANIFEST_SET_TRUE_CFG) ? o->true_cfg : b->true_cfg;
    x->frames = 0, x->fps = 0.0, x->flow_shift = 0.0;
    x->format = it->m->format;
    if (it->m->is_video) {
        /* Wan's guidance_scale is true CFG: a prompt's guidance: without true_cfg: says it */
        if ((o->set & MANIFEST_SET_GUIDANCE) && !(o->set & MANIFEST_SET_TRUE_CFG))
            x->true_cfg = o->guidance;
        x->frames = (o->set & MANIFEST_SET_FRAMES) ? o->num_frames : b->num_frames;
        x->fps = (o->set & MANIFEST_SET_FPS) ? o->fps : b->fps;
        x->flow_shift = (o->set & MANIFEST_SET_FLOW_SHIFT) ? o->flow_shift : b->flow_shift;
    }
    x->repeat = it->repeat_i;
    x->mark = it->cur->mark;
    x->from_prompts_file = it->cur == &it->file_prompt;
    job_template_expand(&it->tmpl, x, x->file, sizeof x->file);

    /* advance: repeat, then seed, then size */
    if (++it->repeat_i == it->repeats) {
        it->repeat_i = 0;
        if (++it->seed_i == it->seeds.n) {
            it->seed_i = 0;
            it->size_i++;
        }
    }
    if (it->flags & JOB_ITEMS_CHECK_UNIQUE) {
        cpdit_status st = check_unique(it, err);
        if (st)
            return st;
    }
    *item = x;
    return CPDIT_OK;
}

cpdit_status job_item_copy(job_item *dst, const job_item *src, cpdit_error *err)
{
    *dst = *src;
    dst->prompt = strdup(src->prompt);
    dst->negative_prompt = src->negative_prompt ? strdup(src->negative_prompt) : NULL;
    if (!dst->prompt || (src->negative_prompt && !dst->negative_prompt)) {
        job_item_free(dst);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "items", "out of memory");
    }
    return CPDIT_OK;
}

void job_item_free(job_item *item)
{
    if (!item)
        return;
    free(item->prompt);
    free(item->negative_prompt);
    item->prompt = item->negative_prompt = NULL;
}

cpdit_status job_items_count(const manifest *m, const job_byte_source *src, uint64_t *n_items,
                             uint64_t *n_prompts, cpdit_error *err)
{
    job_items *it;
    uint64_t n = 0;
    cpdit_status st = job_items_open(m, src, JOB_ITEMS_CHECK_UNIQUE, &it, err);
    if (st)
        return st;
    const job_item *x;
    while (!(st = job_items_next(it, &x, err)) && x)
        n++;
    if (!st) {
        if (n_items)
            *n_items = n;
        if (n_prompts)
            *n_prompts = job_items_prompt_count(it);
    }
    job_items_close(it);
    return st;
}
