/* job_status.c — `cpdit status OUTPUT_DIR` / `cpdit run MANIFEST --status`: items done,
 * failed and left per array task, from the PNGs and the index files (see job_run.h). */
#include "jobs/job_run.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jobs/job_index.h"
#include "jobs/job_slurm.h"
#include "lib/io/regular_file.h"

#define FNV64_OFFSET 0xcbf29ce484222325ull
#define FNV64_PRIME 0x100000001b3ull

/* A hash map file name → counts of "ok" and "failed" lines over every index file. */
typedef struct line_count {
    char *file;
    unsigned ok, failed;
} line_count;

typedef struct line_map {
    line_count *slots;
    size_t n_slots, used;
    uint64_t ok_lines, failed_lines;
    int files;
} line_map;

static uint64_t fnv1a(const char *s)
{
    uint64_t h = FNV64_OFFSET;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * FNV64_PRIME;
    return h;
}

static line_count *map_find(line_map *m, const char *file)
{
    if (!m->n_slots)
        return NULL;
    size_t j = (size_t)(fnv1a(file) & (m->n_slots - 1));
    while (m->slots[j].file && strcmp(m->slots[j].file, file) != 0)
        j = (j + 1) & (m->n_slots - 1);
    return &m->slots[j];
}

static int map_grow(line_map *m)
{
    size_t n = m->n_slots ? 2 * m->n_slots : 256;
    line_count *old = m->slots;
    size_t n_old = m->n_slots;
    m->slots = calloc(n, sizeof *m->slots);
    if (!m->slots) {
        m->slots = old;
        return -1;
    }
    m->n_slots = n;
    for (size_t i = 0; i < n_old; i++)
        if (old[i].file)
            *map_find(m, old[i].file) = old[i];
    free(old);
    return 0;
}

static void map_free(line_map *m)
{
    for (size_t i = 0; i < m->n_slots; i++)
        free(m->slots[i].file);
    free(m->slots);
}

static cpdit_status read_index_files(const char *dir, line_map *map, cpdit_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return CPDIT_OK;
    cpdit_status st = CPDIT_OK;
    struct dirent *e;
    while (!st && (e = readdir(d)) != NULL) {
        if (!job_index_is_index_name(e->d_name))
            continue;
        char *p = job_path_join(dir, e->d_name);
        job_index_contents c;
        if (!p || (st = job_index_read(p, &c, err))) {
            if (!p)
                st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
            free(p);
            break;
        }
        free(p);
        map->files++;
        for (size_t i = 0; i < c.n; i++) {
            if (2 * (map->used + 1) > map->n_slots && map_grow(map)) {
                st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
                break;
            }
            line_count *lc = map_find(map, c.entries[i].file);
            if (!lc->file) {
                lc->file = c.entries[i].file;
                c.entries[i].file = NULL;
                map->used++;
            }
            if (c.entries[i].ok)
                lc->ok++, map->ok_lines++;
            else
                lc->failed++, map->failed_lines++;
        }
        job_index_contents_free(&c);
    }
    closedir(d);
    return st;
}

/* The manifest path and task count recorded by the last run (.cpdit-run.json). */
static cpdit_status read_run_record(const char *dir, char **manifest_path, int *shares,
                                    cpdit_error *err)
{
    char *p = job_path_join(dir, JOB_RUN_RECORD_NAME);
    json_error_t jerr;
    cpdit_error ignored;
    FILE *rf = p ? cpdit_fopen_regular(p, NULL, &ignored) : NULL; /* never a FIFO */
    json_t *o = rf ? json_loadf(rf, 0, &jerr) : NULL;
    if (rf)
        fclose(rf);
    const char *mp = o ? json_string_value(json_object_get(o, "manifest")) : NULL;
    json_int_t k = o ? json_integer_value(json_object_get(o, "array_task_count")) : 0;
    cpdit_status st = CPDIT_OK;
    struct stat sb;
    if (manifest_path && !*manifest_path && stat(dir, &sb) != 0) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, dir, "no such folder: %s", strerror(errno));
    } else if (manifest_path && !*manifest_path && !S_ISDIR(sb.st_mode)) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, dir, "is %s, not an output folder",
                             cpdit_file_kind(sb.st_mode));
    } else if (o && (k < 0 || k > JOB_ARRAY_TASKS_MAX)) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, p, "array_task_count: %lld is implausible "
                             "(0 to %d tasks); the record is corrupt", (long long)k,
                             JOB_ARRAY_TASKS_MAX);
    } else if (manifest_path && !*manifest_path) {
        if (!mp)
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, dir, "no cpdit run has started in this "
                                 "folder yet (no %s); name the manifest: cpdit run MANIFEST "
                                 "--status --output %s", JOB_RUN_RECORD_NAME, dir);
        else if (!(*manifest_path = strdup(mp)))
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    }
    *shares = k > 1 ? (int)k : 1;
    json_decref(o);
    free(p);
    return st;
}

cpdit_status job_status_command(const char *output_dir, const char *manifest_path,
                                const manifest_overrides *ov, FILE *out, cpdit_error *err)
{
    return job_status_totals(output_dir, manifest_path, ov, out, NULL, err);
}

int job_status_exit_code(const uint64_t totals[4])
{
    if (totals[2] > 0)
        return JOB_EXIT_ITEMS_FAILED;
    return totals[3] > 0 ? JOB_EXIT_REQUEUE : JOB_EXIT_OK;
}

cpdit_status job_status_totals(const char *output_dir, const char *manifest_path,
                               const manifest_overrides *ov, FILE *out, uint64_t totals[4],
                               cpdit_error *err)
{
    char *mpath = manifest_path ? strdup(manifest_path) : NULL;
    int shares = 1;
    manifest *m = NULL;
    line_map map;
    memset(&map, 0, sizeof map);
    cpdit_status st = CPDIT_OK;
    if (output_dir) /* `cpdit status DIR`: the manifest from the run record */
        st = read_run_record(output_dir, &mpath, &shares, err);
    if (!st)
        st = manifest_load(mpath, 0, &m, err);
    manifest_overrides o2 = MANIFEST_OVERRIDES_NONE;
    if (ov)
        o2 = *ov;
    if (output_dir)
        o2.output_dir = output_dir;
    if (!st)
        st = manifest_apply_overrides(m, &o2, err);
    if (!st && !output_dir) /* `run --status`: the task count from the record, if any */
        st = read_run_record(m->output_dir, NULL, &shares, err);
    if (!st)
        st = read_index_files(m->output_dir, &map, err);
    job_items *it = NULL;
    if (!st)
        st = job_items_open(m, NULL, 0, &it, err);
    uint64_t *cnt = st ? NULL : calloc((size_t)shares * 4, sizeof *cnt); /* items done failed left */
    if (!st && !cnt)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "status", "out of memory");
    const job_item *x;
    uint64_t dups = 0;
    while (!st && !(st = job_items_next(it, &x, err)) && x) {
        uint64_t *c = &cnt[(x->index % (uint64_t)shares) * 4];
        char *p = job_path_join(m->output_dir, x->file);
        line_count *lc = map_find(&map, x->file);
        int has = lc && lc->file;
        c[0]++;
        if (p && job_output_is_complete(p))
            c[1]++;
        else if (has && lc->failed)
            c[2]++;
        else
            c[3]++;
        if (has && lc->ok > 1)
            dups += lc->ok - 1;
        free(p);
    }
    job_items_close(it);
    if (!st) {
        uint64_t t[4] = {0, 0, 0, 0};
        fprintf(out, "output:   %s\nmanifest: %s\n", m->output_dir, m->path);
        if (shares > 1)
            fprintf(out, "array:    %d tasks; task k renders the items whose index is k modulo "
                         "%d (index.task-k-of-%d.jsonl)\n", shares, shares, shares);
        for (int k = 0; k < shares; k++) {
            uint64_t *c = &cnt[k * 4];
            for (int j = 0; j < 4; j++)
                t[j] += c[j];
            if (shares > 1)
                fprintf(out, "array task %d of %d: %llu items, %llu done, %llu failed, "
                        "%llu left\n", k, shares, (unsigned long long)c[0],
                        (unsigned long long)c[1], (unsigned long long)c[2],
                        (unsigned long long)c[3]);
        }
        fprintf(out, "total: %llu items, %llu done, %llu failed, %llu left\n",
                (unsigned long long)t[0], (unsigned long long)t[1], (unsigned long long)t[2],
                (unsigned long long)t[3]);
        if (totals)
            memcpy(totals, t, sizeof t);
        fprintf(out, "index: %llu ok lines, %llu failed lines, %llu duplicates, in %d file%s\n",
                (unsigned long long)map.ok_lines, (unsigned long long)map.failed_lines,
                (unsigned long long)dups, map.files, map.files == 1 ? "" : "s");
        DIR *d = opendir(m->output_dir);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, JOB_LOCK_PREFIX, strlen(JOB_LOCK_PREFIX)) == 0 &&
                !strstr(e->d_name, ".tmp-") && !strstr(e->d_name, ".stale-")) {
                char *p = job_path_join(m->output_dir, e->d_name);
                char line[256] = "";
                int live = p ? job_lock_is_live(p, line, sizeof line) : -1;
                if (live == 0) { /* as a starting run judges it: its holder is gone */
                    fprintf(out, "stale lock: %s (%s; its process is gone: the run was killed "
                                 "and resumes when rerun)\n", e->d_name, line);
                    free(p);
                    continue;
                }
                fprintf(out, "running: %s (%s)\n", e->d_name, line);
                free(p);
            } else if (strncmp(e->d_name, ".cpdit-stopped", 14) == 0) {
                fprintf(out, "stopped: %s (a run was stopped by a signal; it resumes when "
                             "requeued or rerun)\n", e->d_name);
            }
        }
        if (d)
            closedir(d);
    }
    free(cnt);
    map_free(&map);
    manifest_free(m);
    free(mpath);
    return st;
}
