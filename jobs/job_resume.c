/* job_resume.c — which items are done, and the index rewritten to match the PNGs on disk
 * (the rules are in job_index.h). Runs on rank 0 before any group starts. Cost: one open +
 * two small reads per item with a PNG, one stat per item without; memory: the old index and
 * a hash table over its files. */
#include "jobs/job_index.h"

#include <dirent.h>
#include <errno.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/atomic_file.h"

#define FNV64_OFFSET 0xcbf29ce484222325ull
#define FNV64_PRIME 0x100000001b3ull

/* What is known about an "ok" line's file. */
enum { FILE_UNKNOWN = 0, FILE_COMPLETE, FILE_MISSING };

struct job_resume {
    char *dir;
    char *index_path;
    job_index_contents old;
    size_t *slots; /* hash table: old-entry number + 1 of the LAST ok line per file, 0 empty */
    size_t n_slots;
    unsigned char *state; /* per old entry: FILE_* */
    char **parts;   /* node part files of this index (job_index.h), merged and removed */
    size_t n_parts;
    char **foreign; /* hash set: files with an "ok" line in the folder's other index files */
    size_t n_foreign_slots;
    char *added;          /* new lines for done items that had none */
    size_t added_len, added_cap;
    job_resume_stats stats;
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = FNV64_OFFSET;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * FNV64_PRIME;
    return h;
}

/* The slot of file: the one holding it, or the empty one where it would go. */
static size_t find_slot(const job_resume *r, const char *file)
{
    size_t j = (size_t)(fnv1a(file) & (r->n_slots - 1));
    while (r->slots[j] && strcmp(r->old.entries[r->slots[j] - 1].file, file) != 0)
        j = (j + 1) & (r->n_slots - 1);
    return j;
}

void job_resume_free(job_resume *r)
{
    if (!r)
        return;
    free(r->dir);
    free(r->index_path);
    job_index_contents_free(&r->old);
    free(r->slots);
    free(r->state);
    free(r->added);
    for (size_t i = 0; i < r->n_parts; i++)
        free(r->parts[i]);
    free(r->parts);
    for (size_t i = 0; i < r->n_foreign_slots; i++)
        free(r->foreign[i]);
    free(r->foreign);
    free(r);
}

static size_t foreign_slot(const job_resume *r, const char *file)
{
    size_t j = (size_t)(fnv1a(file) & (r->n_foreign_slots - 1));
    while (r->foreign[j] && strcmp(r->foreign[j], file) != 0)
        j = (j + 1) & (r->n_foreign_slots - 1);
    return j;
}

static int in_foreign(const job_resume *r, const char *file)
{
    return r->n_foreign_slots && r->foreign[foreign_slot(r, file)] != NULL;
}

/* The "ok" files of the other index files of the folder into r->foreign. */
static cpdit_status read_foreign(job_resume *r, const char *own, cpdit_error *err)
{
    DIR *d = opendir(r->dir);
    if (!d)
        return CPDIT_OK; /* no folder yet: nothing elsewhere */
    cpdit_status st = CPDIT_OK;
    size_t used = 0;
    struct dirent *e;
    while (!st && (e = readdir(d)) != NULL) {
        if (!job_index_is_index_name(e->d_name) || strcmp(e->d_name, own) == 0 ||
            job_index_is_node_part(e->d_name, own))
            continue;
        char *p = job_path_join(r->dir, e->d_name);
        job_index_contents c;
        if (!p) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, r->dir, "out of memory");
            break;
        }
        st = job_index_read(p, &c, err);
        free(p);
        for (size_t i = 0; !st && i < c.n; i++) {
            if (!c.entries[i].ok)
                continue;
            if (2 * (used + 1) > r->n_foreign_slots) { /* grow: rehash */
                size_t n = r->n_foreign_slots ? 2 * r->n_foreign_slots : 64;
                char **old = r->foreign;
                size_t n_old = r->n_foreign_slots;
                r->foreign = calloc(n, sizeof *r->foreign);
                if (!r->foreign) {
                    r->foreign = old;
                    st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, r->dir, "out of memory");
                    break;
                }
                r->n_foreign_slots = n;
                for (size_t k = 0; k < n_old; k++)
                    if (old[k])
                        r->foreign[foreign_slot(r, old[k])] = old[k];
                free(old);
            }
            size_t j = foreign_slot(r, c.entries[i].file);
            if (!r->foreign[j]) {
                r->foreign[j] = c.entries[i].file;
                c.entries[i].file = NULL; /* moved */
                used++;
            }
        }
        job_index_contents_free(&c);
    }
    closedir(d);
    return st;
}

/* The node part files of index_name in r->dir, sorted by name (a fixed merge order). */
static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static cpdit_status find_parts(job_resume *r, const char *index_name, cpdit_error *err)
{
    DIR *d = opendir(r->dir);
    if (!d)
        return CPDIT_OK;
    size_t cap = 0;
    cpdit_status st = CPDIT_OK;
    struct dirent *e;
    while (!st && (e = readdir(d)) != NULL) {
        if (!job_index_is_node_part(e->d_name, index_name))
            continue;
        if (r->n_parts == cap) {
            cap = cap ? 2 * cap : 8;
            char **a = realloc(r->parts, cap * sizeof *a);
            if (!a) {
                st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, r->dir, "out of memory");
                break;
            }
            r->parts = a;
        }
        if (!(r->parts[r->n_parts] = job_path_join(r->dir, e->d_name)))
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, r->dir, "out of memory");
        else
            r->n_parts++;
    }
    closedir(d);
    if (r->n_parts > 1)
        qsort(r->parts, r->n_parts, sizeof *r->parts, cmp_names);
    return st;
}

cpdit_status job_resume_begin(const char *out_dir, job_resume **out, cpdit_error *err)
{
    return job_resume_begin_named(out_dir, JOB_INDEX_FILE_NAME, out, err);
}

cpdit_status job_resume_begin_named(const char *out_dir, const char *index_name,
                                    job_resume **out, cpdit_error *err)
{
    *out = NULL;
    job_resume *r = calloc(1, sizeof *r);
    if (!r || !(r->dir = strdup(out_dir)) ||
        !(r->index_path = job_path_join(out_dir, index_name))) {
        job_resume_free(r);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, out_dir, "out of memory");
    }
    cpdit_status st = find_parts(r, index_name, err);
    if (!st)
        st = job_index_read_with_parts(r->index_path, r->parts, r->n_parts, &r->old, err);
    if (!st)
        st = read_foreign(r, index_name, err);
    if (st) {
        job_resume_free(r);
        return st;
    }
    r->n_slots = 16;
    while (r->n_slots < 2 * r->old.n + 2)
        r->n_slots *= 2;
    r->slots = calloc(r->n_slots, sizeof *r->slots);
    r->state = calloc(r->old.n + 1, 1);
    if (!r->slots || !r->state) {
        job_resume_free(r);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, out_dir, "out of memory");
    }
    for (size_t i = 0; i < r->old.n; i++) /* later lines replace earlier ones */
        if (r->old.entries[i].ok)
            r->slots[find_slot(r, r->old.entries[i].file)] = i + 1;
    *out = r;
    return CPDIT_OK;
}

static cpdit_status add_line(job_resume *r, const char *line, size_t len, cpdit_error *err)
{
    if (r->added_len + len > r->added_cap) {
        size_t cap = r->added_cap ? 2 * r->added_cap : 4096;
        while (cap < r->added_len + len)
            cap *= 2;
        char *p = realloc(r->added, cap);
        if (!p)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, r->index_path, "out of memory");
        r->added = p;
        r->added_cap = cap;
    }
    memcpy(r->added + r->added_len, line, len);
    r->added_len += len;
    return CPDIT_OK;
}

cpdit_status job_resume_item(job_resume *r, const job_item *item, int *done, cpdit_error *err)
{
    char *path = job_path_join(r->dir, item->file);
    if (!path)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, r->dir, "out of memory");
    *done = job_output_is_complete(path);
    free(path);
    r->stats.items++;
    size_t j = find_slot(r, item->file);
    if (r->slots[j])
        r->state[r->slots[j] - 1] = *done ? FILE_COMPLETE : FILE_MISSING;
    if (!*done)
        return CPDIT_OK;
    r->stats.done++;
    if (r->slots[j] || in_foreign(r, item->file))
        return CPDIT_OK;
    size_t len;
    char *line = job_index_line(item, NULL, -1.0, NULL, &len);
    if (!line)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, r->index_path, "out of memory");
    cpdit_status st = add_line(r, line, len, err);
    free(line);
    r->stats.reindexed++;
    return st;
}

cpdit_status job_resume_finish(job_resume *r, job_resume_stats *stats, cpdit_error *err)
{
    size_t cap = r->old.len + r->added_len + 1, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, r->index_path, "out of memory");
    size_t kept = 0;
    for (size_t i = 0; i < r->old.n; i++) {
        const job_index_entry *e = &r->old.entries[i];
        int keep = 0;
        if (e->ok && r->slots[find_slot(r, e->file)] == i + 1) {
            if (r->state[i] == FILE_UNKNOWN) { /* a file this manifest does not make */
                char *p = job_path_join(r->dir, e->file);
                r->state[i] = p && job_output_is_complete(p) ? FILE_COMPLETE : FILE_MISSING;
                free(p);
            }
            keep = r->state[i] == FILE_COMPLETE;
        }
        if (keep) {
            memcpy(buf + n, r->old.bytes + e->off, e->len);
            n += e->len;
            kept++;
        }
    }
    if (r->added_len) {
        memcpy(buf + n, r->added, r->added_len);
        n += r->added_len;
    }
    r->stats.dropped = (r->old.n - kept) + r->old.n_corrupt;
    r->stats.torn_bytes = r->old.torn_bytes;
    cpdit_status st = CPDIT_OK;
    int same = r->n_parts == 0 && n == r->old.len && (n == 0 || memcmp(buf, r->old.bytes, n) == 0);
    if (!same) {
        st = atomic_write_buffer(r->index_path, buf, n, err);
        r->stats.rewritten = st == CPDIT_OK;
    }
    for (size_t i = 0; !st && i < r->n_parts; i++) /* merged: the index holds their lines */
        if (unlink(r->parts[i]) != 0 && errno != ENOENT)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, r->parts[i], "cannot remove a merged "
                                 "index part: %s", strerror(errno));
    free(buf);
    if (stats)
        *stats = r->stats;
    return st;
}
