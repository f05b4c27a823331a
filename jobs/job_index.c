/* job_index.c — index lines (jansson), single-write appends, the tolerant reader, PNG
 * completeness and temp-file cleanup (see job_index.h). */
#include "jobs/job_index.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobs/job_slurm.h"
#include "lib/io/atomic_file.h"
#include "lib/io/video_writer.h"
#include "lib/io/regular_file.h"

/* Digits kept for reals (guidance, seconds): enough for any value a user types. */
#define INDEX_REAL_PRECISION 10
#define NEW_FILE_MODE 0666 /* before the umask, as fopen() would */
#define PNG_SIGNATURE_LEN 8
#define PNG_IEND_CHUNK_LEN 12 /* length 0, "IEND", CRC */
#define READ_CHUNK (1 << 20)

static const unsigned char PNG_SIGNATURE[PNG_SIGNATURE_LEN] = {0x89, 'P',  'N',  'G',
                                                               0x0d, 0x0a, 0x1a, 0x0a};
static const unsigned char PNG_IEND[PNG_IEND_CHUNK_LEN] = {0, 0, 0, 0, 'I', 'E',
                                                           'N', 'D', 0xae, 0x42, 0x60, 0x82};

char *job_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    if (slash)
        p[a++] = '/';
    memcpy(p + a, name, b + 1);
    return p;
}

void job_item_times_clear(job_item_times *t)
{
    t->text_s = t->sample_s = t->step_max_s = t->vae_load_s = t->vae_s = t->write_s = -1.0;
    t->steps = -1;
    t->read_step1_bytes = t->read_later_bytes = -1;
    t->cache_spec[0] = t->cache_steps[0] = 0;
    t->cache_full = t->cache_cached = 0;
    t->cache_saved_s = 0.0;
    t->cache_state_bytes = 0;
}

static json_t *seconds_or_null(double s)
{
    return s >= 0 ? json_real(s) : json_null();
}

static json_t *times_object(const job_item_times *t)
{
    return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "text_s", seconds_or_null(t->text_s),
                     "sample_s", seconds_or_null(t->sample_s), "steps",
                     t->steps >= 0 ? json_integer(t->steps) : json_null(), "step_max_s",
                     seconds_or_null(t->step_max_s), "vae_load_s",
                     seconds_or_null(t->vae_load_s), "vae_s", seconds_or_null(t->vae_s),
                     "write_s", seconds_or_null(t->write_s));
}

char *job_index_line(const job_item *item, const job_grid_info *grid, double seconds,
                     const char *error, size_t *len)
{
    return job_index_line_timed(item, grid, seconds, NULL, error, len);
}

char *job_index_line_timed(const job_item *item, const job_grid_info *grid, double seconds,
                           const job_item_times *times, const char *error, size_t *len)
{
    json_t *o = json_object();
    json_t *g = grid ? json_pack("{s:i,s:i,s:i}", "dp", grid->dp, "ring", grid->ring,
                                 "ulysses", grid->ulysses)
                     : json_null();
    if (g && grid && grid->why)
        json_object_set_new(g, "why", json_string(grid->why));
    if (g && grid && grid->vae)
        json_object_set_new(g, "vae", json_string(grid->vae));
    if (!o || !g) {
        json_decref(o);
        json_decref(g);
        return NULL;
    }
    int bad = 0;
    bad |= json_object_set_new(o, "index", json_integer((json_int_t)item->index));
    bad |= json_object_set_new(o, "prompt", json_string(item->prompt));
    bad |= json_object_set_new(o, "seed", json_integer((json_int_t)item->seed));
    bad |= json_object_set_new(o, "width", json_integer(item->width));
    bad |= json_object_set_new(o, "height", json_integer(item->height));
    bad |= json_object_set_new(o, "steps", json_integer(item->steps));
    /* a video's guidance is Wan's guidance_scale: the true-CFG scale */
    bad |= json_object_set_new(o, "guidance",
                               json_real(item->frames > 0 ? item->true_cfg : item->guidance));
    bad |= json_object_set_new(o, "grid", g);
    const job_slurm_info *sl = grid ? grid->slurm : NULL;
    if (sl && sl->job_id[0]) {
        json_t *j = json_object();
        if (!j)
            bad = 1;
        else {
            bad |= json_object_set_new(j, "job_id", json_string(sl->job_id));
            bad |= json_object_set_new(j, "array_job_id", sl->array_job_id[0]
                                                              ? json_string(sl->array_job_id)
                                                              : json_null());
            bad |= json_object_set_new(j, "array_task_id",
                                       sl->array_task_id >= 0 ? json_integer(sl->array_task_id)
                                                              : json_null());
            bad |= json_object_set_new(j, "array_task_count",
                                       sl->array_task_count > 0
                                           ? json_integer(sl->array_task_count)
                                           : json_null());
            bad |= json_object_set_new(j, "restart_count", json_integer(sl->restart_count));
            bad |= json_object_set_new(j, "node", grid->node ? json_string(grid->node)
                                                             : json_null());
            bad |= json_object_set_new(o, "slurm", j);
        }
    }
    bad |= json_object_set_new(o, "seconds", seconds >= 0 ? json_real(seconds) : json_null());
    if (times) {
        json_t *t = times_object(times);
        bad |= !t || json_object_set_new(o, "times", t);
    }
    if (times && times->cache_spec[0]) {
        json_t *c = json_pack("{s:s,s:i,s:i,s:f,s:I,s:s}", "spec", times->cache_spec, "full",
                              times->cache_full, "cached", times->cache_cached, "saved_s",
                              times->cache_saved_s, "state_bytes",
                              (json_int_t)times->cache_state_bytes, "steps",
                              times->cache_steps);
        bad |= !c || json_object_set_new(o, "cache", c);
    }
    if (item->frames > 0) { /* a video: what the file holds (job_run.h VIDEOS) */
        static const char *const codec[] = {"png", "h264", "webp-lossy", "png"};
        bad |= json_object_set_new(o, "frames", json_integer(item->frames));
        bad |= json_object_set_new(o, "fps", json_real(item->fps));
        bad |= json_object_set_new(o, "duration", json_real(item->frames / item->fps));
        bad |= json_object_set_new(o, "format", json_string(manifest_format_name(item->format)));
        bad |= json_object_set_new(o, "codec", json_string(codec[item->format]));
    }
    bad |= json_object_set_new(o, "file", json_string(item->file));
    bad |= json_object_set_new(o, "status", json_string(error ? "failed" : "ok"));
    bad |= json_object_set_new(o, "error", error ? json_string(error) : json_null());
    char *text = bad ? NULL
                     : json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                         JSON_REAL_PRECISION(INDEX_REAL_PRECISION));
    json_decref(o);
    if (!text)
        return NULL;
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (!line) {
        free(text);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    if (len)
        *len = n + 1;
    return line;
}

cpdit_status job_index_append(const char *path, const char *line, size_t len,
                              cpdit_error *err)
{
    int fd;
    cpdit_status st = cpdit_open_output(path, "cannot open the index", O_WRONLY | O_APPEND |
                                        O_CREAT, NEW_FILE_MODE, &fd, err);
    if (st)
        return st;
    ssize_t n;
    do
        n = write(fd, line, len);
    while (n < 0 && errno == EINTR);
    int e = errno;
    int rc = close(fd);
    if (n < 0 || (size_t)n != len)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path,
                               "appending an index line: %s (wrote %zd of %zu bytes)",
                               n < 0 ? strerror(e) : "short write", n < 0 ? (ssize_t)0 : n,
                               len);
    if (rc != 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "closing the index: %s",
                               strerror(errno));
    return CPDIT_OK;
}

void job_index_contents_free(job_index_contents *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        free(c->entries[i].file);
    free(c->entries);
    free(c->bytes);
    memset(c, 0, sizeof *c);
}

/* The whole file into a new buffer; a missing file is empty. */
static cpdit_status slurp(const char *path, char **bytes, size_t *len, cpdit_error *err)
{
    *bytes = NULL;
    *len = 0;
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return CPDIT_OK;
    int fd;
    cpdit_status st = cpdit_open_regular(path, "cannot open the index", &fd, err);
    if (st)
        return st;
    size_t cap = 0, n = 0;
    char *buf = NULL;
    for (;;) {
        if (n + READ_CHUNK > cap) {
            char *nb = realloc(buf, cap + READ_CHUNK + 1);
            if (!nb) {
                free(buf);
                close(fd);
                return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
            }
            buf = nb;
            cap += READ_CHUNK;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "reading the index: %s",
                                   strerror(e));
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    *bytes = buf;
    *len = n;
    return CPDIT_OK;
}

static cpdit_status parse_contents(const char *path, job_index_contents *out, cpdit_error *err);

cpdit_status job_index_read(const char *path, job_index_contents *out, cpdit_error *err)
{
    memset(out, 0, sizeof *out);
    cpdit_status st = slurp(path, &out->bytes, &out->len, err);
    if (st)
        return st;
    return parse_contents(path, out, err);
}

cpdit_status job_index_read_with_parts(const char *path, char *const *parts, size_t n_parts,
                                       job_index_contents *out, cpdit_error *err)
{
    memset(out, 0, sizeof *out);
    cpdit_status st = slurp(path, &out->bytes, &out->len, err);
    for (size_t i = 0; !st && i < n_parts; i++) {
        char *b;
        size_t n;
        if ((st = slurp(parts[i], &b, &n, err)))
            break;
        /* a torn last line must not swallow the next file's first line: end it */
        int fix = out->len > 0 && out->bytes[out->len - 1] != '\n';
        char *nb = n || fix ? realloc(out->bytes, out->len + (size_t)fix + n + 1) : out->bytes;
        if (!nb) {
            free(b);
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
            break;
        }
        out->bytes = nb;
        if (fix)
            out->bytes[out->len++] = '\n';
        if (n)
            memcpy(out->bytes + out->len, b, n);
        out->len += n;
        out->bytes[out->len] = '\0';
        free(b);
    }
    if (st) {
        free(out->bytes);
        memset(out, 0, sizeof *out);
        return st;
    }
    return parse_contents(path, out, err);
}

static cpdit_status parse_contents(const char *path, job_index_contents *out, cpdit_error *err)
{
    size_t cap = 0, pos = 0;
    while (pos < out->len) {
        char *nl = memchr(out->bytes + pos, '\n', out->len - pos);
        if (!nl) { /* torn last line (killed mid-write): ignored */
            out->torn_bytes = out->len - pos;
            break;
        }
        size_t llen = (size_t)(nl - (out->bytes + pos)) + 1;
        json_error_t jerr;
        json_t *j = json_loadb(out->bytes + pos, llen - 1, 0, &jerr);
        const char *file = j ? json_string_value(json_object_get(j, "file")) : NULL;
        const char *status = j ? json_string_value(json_object_get(j, "status")) : NULL;
        if (!file || !status) {
            if (llen > 1) /* an empty line is not worth counting */
                out->n_corrupt++;
        } else {
            if (out->n == cap) {
                size_t nc = cap ? 2 * cap : 64;
                job_index_entry *e = realloc(out->entries, nc * sizeof *e);
                if (!e) {
                    json_decref(j);
                    job_index_contents_free(out);
                    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
                }
                out->entries = e;
                cap = nc;
            }
            job_index_entry *e = &out->entries[out->n];
            e->file = strdup(file);
            e->ok = strcmp(status, "ok") == 0;
            e->off = pos;
            e->len = llen;
            if (!e->file) {
                json_decref(j);
                job_index_contents_free(out);
                return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
            }
            out->n++;
        }
        json_decref(j);
        pos += llen;
    }
    return CPDIT_OK;
}

int job_png_is_complete(const char *path)
{
    int fd;
    cpdit_error ignored;
    if (cpdit_open_regular(path, NULL, &fd, &ignored)) /* a FIFO is not opened: no hang */
        return 0;
    unsigned char head[PNG_SIGNATURE_LEN], tail[PNG_IEND_CHUNK_LEN];
    struct stat st;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
             st.st_size >= PNG_SIGNATURE_LEN + PNG_IEND_CHUNK_LEN &&
             pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head &&
             pread(fd, tail, sizeof tail, st.st_size - PNG_IEND_CHUNK_LEN) ==
                 (ssize_t)sizeof tail &&
             memcmp(head, PNG_SIGNATURE, sizeof head) == 0 &&
             memcmp(tail, PNG_IEND, sizeof tail) == 0;
    close(fd);
    return ok;
}

cpdit_status job_remove_temp_files(const char *dir, int *removed, cpdit_error *err)
{
    if (removed)
        *removed = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return CPDIT_OK;
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot list the output folder: %s",
                               strerror(errno));
    }
    cpdit_status st = CPDIT_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!atomic_file_is_temp_name(e->d_name))
            continue;
        char *p = job_path_join(dir, e->d_name);
        if (!p) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
            break;
        }
        /* a png-frames writer leaves a temporary folder (lib/io/video_writer.h) */
        if (unlink(p) == 0 || (errno == EISDIR && cpdit_video_remove_temp_folder(p) == 0)) {
            if (removed)
                (*removed)++;
        } else if (errno != ENOENT) {
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, p, "cannot remove a stale temporary "
                                 "file: %s", strerror(errno));
            free(p);
            break;
        }
        free(p);
    }
    closedir(d);
    return st;
}

int job_index_is_index_name(const char *name)
{
    size_t n = strlen(name);
    return strcmp(name, JOB_INDEX_FILE_NAME) == 0 ||
           (strncmp(name, "index.", 6) == 0 && n > 12 && strcmp(name + n - 6, ".jsonl") == 0);
}

void job_index_node_name(const char *index_name, const char *host, char *out, size_t size)
{
    size_t stem = strlen(index_name);
    if (stem > 6 && strcmp(index_name + stem - 6, ".jsonl") == 0)
        stem -= 6;
    int n = snprintf(out, size, "%.*s.node-", (int)stem, index_name);
    size_t k = n > 0 ? (size_t)n : 0;
    for (const char *h = host; *h && k + 7 < size; h++) {
        char c = *h;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        out[k++] = ok ? c : '_';
    }
    snprintf(out + k, size - k, ".jsonl");
}

int job_index_is_node_part(const char *name, const char *index_name)
{
    size_t stem = strlen(index_name), n = strlen(name);
    if (stem > 6 && strcmp(index_name + stem - 6, ".jsonl") == 0)
        stem -= 6;
    return n > stem + 12 && strncmp(name, index_name, stem) == 0 &&
           strncmp(name + stem, ".node-", 6) == 0 && strcmp(name + n - 6, ".jsonl") == 0;
}
