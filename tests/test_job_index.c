/* test_job_index.c — the JSONL index and resume: line format (parsed back with jansson),
 * O_APPEND appends from 4 processes at once never interleave, the reader ignores a torn last
 * line and corrupt lines, PNG completeness (IEND), stale temp-file removal, and the resume
 * rewrite: one line per complete PNG, re-made lines for PNGs without one, everything else
 * dropped, and no rewrite when nothing changes. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jobs/job_index.h"
#include "jobs/job_slurm.h"
#include "lib/io/png_writer.h"
#include "yaml/manifest.h"
#include "tests/test_util.h"
#include "tests/test_tmpdir.h"

#define WRITERS 4
#define LINES_PER_WRITER 250
#define IMG_SIDE 16

static job_item make_item(uint64_t index, const char *prompt, const char *file)
{
    job_item x;
    memset(&x, 0, sizeof x);
    x.index = index;
    x.prompt = (char *)prompt;
    x.negative_prompt = NULL;
    x.seed = 100 + index;
    x.width = x.height = IMG_SIDE;
    x.steps = 4;
    x.guidance = 3.5;
    snprintf(x.file, sizeof x.file, "%s", file);
    return x;
}

static void test_line(void)
{
    job_item x = make_item(3, "a \"quoted\"\nprompt — café", "00003-103-a.png");
    job_grid_info gi = {.dp = 2, .ring = 1, .ulysses = 2};
    size_t len;
    char *line = job_index_line(&x, &gi, 1.25, NULL, &len);
    CHECK(line && len == strlen(line) && line[len - 1] == '\n');
    CHECK(line && strchr(line, '\n') == line + len - 1); /* one physical line */
    json_error_t jerr;
    json_t *j = line ? json_loads(line, 0, &jerr) : NULL;
    CHECK(j != NULL);
    if (j) {
        CHECK(json_integer_value(json_object_get(j, "index")) == 3);
        CHECK(strcmp(json_string_value(json_object_get(j, "prompt")), x.prompt) == 0);
        CHECK(json_integer_value(json_object_get(j, "seed")) == 103);
        CHECK(json_integer_value(json_object_get(j, "width")) == IMG_SIDE);
        CHECK(json_integer_value(json_object_get(j, "steps")) == 4);
        CHECK_NEAR(json_real_value(json_object_get(j, "guidance")), 3.5, 0);
        CHECK_NEAR(json_real_value(json_object_get(j, "seconds")), 1.25, 0);
        CHECK(json_integer_value(json_object_get(json_object_get(j, "grid"), "ulysses")) == 2);
        CHECK(strcmp(json_string_value(json_object_get(j, "file")), x.file) == 0);
        CHECK(strcmp(json_string_value(json_object_get(j, "status")), "ok") == 0);
        CHECK(json_is_null(json_object_get(j, "error")));
        json_decref(j);
    }
    free(line);
    line = job_index_line(&x, NULL, -1, "the render hook failed", &len);
    j = line ? json_loads(line, 0, &jerr) : NULL;
    CHECK(j && strcmp(json_string_value(json_object_get(j, "status")), "failed") == 0);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "error")),
                      "the render hook failed") == 0);
    CHECK(j && json_is_null(json_object_get(j, "seconds")) &&
          json_is_null(json_object_get(j, "grid")));
    json_decref(j);
    free(line);
}

/* WRITERS processes append LINES_PER_WRITER lines each at the same time; every line must come
 * out whole. */
static void test_concurrent_appends(const char *dir)
{
    char *path = tmp_path(dir, "concurrent.jsonl");
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            char prompt[64], file[64];
            for (int i = 0; i < LINES_PER_WRITER; i++) {
                snprintf(prompt, sizeof prompt, "writer %d line %d padding padding", w, i);
                snprintf(file, sizeof file, "w%d-%d.png", w, i);
                job_item x = make_item((uint64_t)(w * LINES_PER_WRITER + i), prompt, file);
                size_t len;
                char *line = job_index_line(&x, NULL, 0.5, NULL, &len);
                cpdit_error err;
                if (!line || job_index_append(path, line, len, &err) != CPDIT_OK)
                    _exit(1);
                free(line);
            }
            _exit(0);
        }
    }
    for (int w = 0; w < WRITERS; w++) {
        int status = 1;
        waitpid(pids[w], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    job_index_contents c;
    cpdit_error err;
    CHECK(job_index_read(path, &c, &err) == CPDIT_OK);
    CHECK(c.n == WRITERS * LINES_PER_WRITER && c.n_corrupt == 0 && c.torn_bytes == 0);
    job_index_contents_free(&c);
    free(path);
}

static void test_reader(const char *dir)
{
    char *path = tmp_path(dir, "torn.jsonl");
    job_item a = make_item(0, "a", "a.png"), b = make_item(1, "b", "b.png");
    size_t la, lb;
    char *line_a = job_index_line(&a, NULL, 1, NULL, &la);
    char *line_b = job_index_line(&b, NULL, 1, "boom", &lb);
    cpdit_error err;
    CHECK(job_index_append(path, line_a, la, &err) == CPDIT_OK);
    CHECK(job_index_append(path, "not json at all\n", 16, &err) == CPDIT_OK);
    CHECK(job_index_append(path, line_b, lb, &err) == CPDIT_OK);
    CHECK(job_index_append(path, line_a, la / 2, &err) == CPDIT_OK); /* killed mid-line */
    job_index_contents c;
    CHECK(job_index_read(path, &c, &err) == CPDIT_OK);
    CHECK(c.n == 2 && c.n_corrupt == 1 && c.torn_bytes == la / 2);
    if (c.n == 2) {
        CHECK(strcmp(c.entries[0].file, "a.png") == 0 && c.entries[0].ok);
        CHECK(strcmp(c.entries[1].file, "b.png") == 0 && !c.entries[1].ok);
        CHECK(c.entries[1].len == lb &&
              memcmp(c.bytes + c.entries[1].off, line_b, lb) == 0);
    }
    job_index_contents_free(&c);
    char *missing = tmp_path(dir, "missing.jsonl");
    CHECK(job_index_read(missing, &c, &err) == CPDIT_OK && c.n == 0 && c.len == 0);
    job_index_contents_free(&c);
    free(missing);
    free(line_a);
    free(line_b);
    free(path);
}

/* A small PNG at dir/name; 0 on success. */
static int write_png(const char *dir, const char *name)
{
    uint8_t rgb[IMG_SIDE * IMG_SIDE * 3];
    for (size_t i = 0; i < sizeof rgb; i++)
        rgb[i] = (uint8_t)(i * 7);
    char *p = tmp_path(dir, name);
    cpdit_error err;
    int rc = cpdit_png_write_rgb8(p, rgb, IMG_SIDE, IMG_SIDE, NULL, 0, &err) == CPDIT_OK ? 0
                                                                                          : -1;
    free(p);
    return rc;
}

/* Copy dir/from to dir/to without its last `cut` bytes. */
static void truncated_copy(const char *dir, const char *from, const char *to, size_t cut)
{
    char *pf = tmp_path(dir, from), *pt = tmp_path(dir, to);
    size_t n = 0;
    char *bytes = tmp_read(pf, &n);
    FILE *f = fopen(pt, "wb");
    if (f && bytes && n > cut)
        fwrite(bytes, 1, n - cut, f);
    if (f)
        fclose(f);
    free(bytes);
    free(pf);
    free(pt);
}

static int png_complete(const char *dir, const char *name)
{
    char *p = tmp_path(dir, name);
    int ok = job_png_is_complete(p);
    free(p);
    return ok;
}

static void test_png_and_temp_files(const char *dir)
{
    CHECK(write_png(dir, "good.png") == 0);
    truncated_copy(dir, "good.png", "cut.png", 5);
    CHECK(tmp_write(dir, "text.png", "not a png, long enough to have a tail........") == 0);
    CHECK(tmp_write(dir, "empty.png", "") == 0);
    CHECK(png_complete(dir, "good.png") == 1);
    CHECK(png_complete(dir, "cut.png") == 0);
    CHECK(png_complete(dir, "text.png") == 0);
    CHECK(png_complete(dir, "empty.png") == 0);
    CHECK(png_complete(dir, "nothing.png") == 0);
    CHECK(job_png_is_complete(dir) == 0); /* a folder */

    CHECK(tmp_write(dir, ".good.png.tmp.Ab12Cd", "partial") == 0);
    CHECK(tmp_write(dir, ".index.jsonl.tmp.zzzzzz", "partial") == 0);
    CHECK(tmp_write(dir, ".x.tmp.12345", "five random characters: not ours") == 0);
    int removed = -1;
    cpdit_error err;
    CHECK(job_remove_temp_files(dir, &removed, &err) == CPDIT_OK && removed == 2);
    CHECK(tmp_count_temp_files(dir) == 1);
    char *nodir = tmp_path(dir, "no-such-folder");
    CHECK(job_remove_temp_files(nodir, &removed, &err) == CPDIT_OK && removed == 0);
    free(nodir);
}

/* The resume rules of job_index.h on one folder. */
static void test_resume(void)
{
    char *dir = tmpdir_make("resume");
    CHECK(dir != NULL);
    if (!dir)
        return;
    job_item items[6];
    char names[6][32];
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof names[i], "item%d.png", i);
        items[i] = make_item((uint64_t)i, "p", names[i]);
    }
    for (int i = 0; i < 4; i++)
        CHECK(write_png(dir, names[i]) == 0);
    CHECK(write_png(dir, "whole4.png") == 0);
    truncated_copy(dir, "whole4.png", names[4], 12); /* item 4: IEND missing */
    char *w4 = tmp_path(dir, "whole4.png");
    unlink(w4);
    free(w4);
    CHECK(write_png(dir, "other.png") == 0); /* not an item of this manifest */
    job_item other = make_item(99, "o", "other.png"), gone = make_item(98, "g", "gone.png");

    char *index = tmp_path(dir, JOB_INDEX_FILE_NAME);
    cpdit_error err;
    size_t len;
    char *l;
#define APPEND(item, error)                                                                    \
    do {                                                                                       \
        l = job_index_line(&(item), NULL, 2.0, (error), &len);                               \
        CHECK(job_index_append(index, l, len, &err) == CPDIT_OK);                              \
        free(l);                                                                               \
    } while (0)
    APPEND(items[0], NULL); /* superseded by the later line for item 0 */
    APPEND(items[1], NULL);
    APPEND(other, NULL);
    APPEND(items[5], "it failed"); /* failed: dropped, item 5 is retried */
    APPEND(items[4], NULL);        /* PNG incomplete: dropped, redone */
    APPEND(gone, NULL);            /* PNG missing: dropped */
    CHECK(job_index_append(index, "garbage\n", 8, &err) == CPDIT_OK);
    l = job_index_line(&items[0], NULL, 3.0, NULL, &len); /* the last line for item 0 */
    CHECK(job_index_append(index, l, len, &err) == CPDIT_OK);
    char *last0 = l;
    CHECK(job_index_append(index, "{\"index\": 7, \"pro", 17, &err) == CPDIT_OK); /* torn */
#undef APPEND

    job_resume *r;
    job_resume_stats st;
    CHECK(job_resume_begin(dir, &r, &err) == CPDIT_OK);
    int done[6];
    for (int i = 0; i < 6; i++)
        CHECK(job_resume_item(r, &items[i], &done[i], &err) == CPDIT_OK);
    CHECK(job_resume_finish(r, &st, &err) == CPDIT_OK);
    job_resume_free(r);
    CHECK(done[0] && done[1] && done[2] && done[3] && !done[4] && !done[5]);
    CHECK(st.items == 6 && st.done == 4 && st.reindexed == 2 && st.rewritten == 1);
    CHECK(st.dropped == 5 && st.torn_bytes == 17); /* item0 (old), 5, 4, gone, garbage */

    job_index_contents c;
    CHECK(job_index_read(index, &c, &err) == CPDIT_OK);
    static const char *const want[] = {"item1.png", "other.png", "item0.png", "item2.png",
                                       "item3.png"};
    CHECK(c.n == 5 && c.n_corrupt == 0 && c.torn_bytes == 0);
    for (size_t i = 0; i < c.n && i < 5; i++) {
        CHECK_MSG(strcmp(c.entries[i].file, want[i]) == 0, "line %zu: %s", i,
                  c.entries[i].file);
        CHECK(c.entries[i].ok);
    }
    if (c.n == 5) /* the kept line for item 0 is the last one, byte for byte */
        CHECK(c.entries[2].len == len && memcmp(c.bytes + c.entries[2].off, last0, len) == 0);
    job_index_contents_free(&c);
    free(last0);

    /* a second resume over the same folder changes nothing */
    CHECK(job_resume_begin(dir, &r, &err) == CPDIT_OK);
    for (int i = 0; i < 6; i++)
        CHECK(job_resume_item(r, &items[i], &done[i], &err) == CPDIT_OK);
    CHECK(job_resume_finish(r, &st, &err) == CPDIT_OK);
    job_resume_free(r);
    CHECK(st.done == 4 && st.reindexed == 0 && st.dropped == 0 && st.rewritten == 0);
    CHECK(tmp_count_temp_files(dir) == 0);
    free(index);
    tmpdir_remove(dir);
    free(dir);
}

/* A lock whose holder is a zombie (killed, its parent gone, init not reaping yet) is stale,
 * as a live holder's is not: a killed run must not block the rerun. */
static void test_lock_zombie_holder(const char *dir)
{
    char host[256], path[4096], line[512];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    snprintf(path, sizeof path, "%s/.cpdit-lock", dir);
    pid_t child = fork();
    if (child == 0)
        _exit(0); /* a zombie until we reap it */
    CHECK(child > 0);
    if (child <= 0)
        return;
    for (int i = 0; i < 200; i++) { /* until the kernel shows it as a zombie */
        char st[64], buf[256];
        snprintf(st, sizeof st, "/proc/%ld/stat", (long)child);
        FILE *f = fopen(st, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')');
        if (rp && rp[1] == ' ' && rp[2] == 'Z')
            break;
        usleep(10000);
    }
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fprintf(f, "host=%s pid=%ld job=- restart=0\n", host, (long)child);
        fclose(f);
    }
    CHECK_MSG(job_lock_is_live(path, line, sizeof line) == 0, "a zombie holder's lock is stale");
    waitpid(child, NULL, 0);
    f = fopen(path, "w");
    if (f) {
        fprintf(f, "host=%s pid=%ld job=- restart=0\n", host, (long)getpid());
        fclose(f);
    }
    CHECK_MSG(job_lock_is_live(path, line, sizeof line) == 1, "a live holder's lock is live");
    unlink(path);
}

int main(void)
{
    char *dir = tmpdir_make("index");
    CHECK(dir != NULL);
    if (!dir)
        TEST_MAIN_END();
    test_line();
    test_concurrent_appends(dir);
    test_reader(dir);
    test_png_and_temp_files(dir);
    test_resume();
    test_lock_zombie_holder(dir);
    tmpdir_remove(dir);
    free(dir);
    TEST_MAIN_END();
}
