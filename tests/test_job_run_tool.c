/* test_job_run_tool.c — drives the batch runner with a fake render hook, and checks what a run
 * left in its output folder. Used by tests/job_run.sh, tests/job_resume.sh and
 * tests/job_pipeline.sh.
 *
 *   test_job_run_tool run MANIFEST [--output DIR] [--dp N] [--ring R] [--ulysses U]
 *                     [--sleep-ms MS] [--fail TEXT] [--raise-after N --raise-rank R]
 *                     [--pid-dir DIR]
 *       under mpirun: manifest_load_world + job_run; exits with job_exit_code.
 *       The fake hook checks that every rank of the group renders the same item (an allreduce
 *       over the CP group), sleeps MS on every rank, fails on the group's LAST cp rank for
 *       prompts containing TEXT (so the error has to travel to the leader), and paints the
 *       leader's image from the item alone (fake_pixel), so every grid gives the same pixels.
 *       --raise-after N --raise-rank R: world rank R sends itself SIGUSR1 after its N-th item.
 *       --pid-dir DIR: each rank writes DIR/rank.R with its pid (for kill -9 / kill -USR1).
 *
 *   test_job_run_tool verify MANIFEST --output DIR [--expect-failed TEXT] [--partial]
 *       no MPI. Every item must have a complete PNG with the fake pixels and its prompt in
 *       the text chunk, and exactly one "ok" index line that matches it; items whose prompt
 *       contains TEXT must instead have no PNG and exactly one "failed" line. With --partial
 *       an item may also be missing altogether (no PNG, no line). The index must have no torn
 *       or corrupt lines and no other lines; the folder nothing but the index and the PNGs.
 *       Prints "done=D failed=F missing=M" and exits 0, or 1 with the reasons.
 *
 *   test_job_run_tool compare DIR_A DIR_B [--max-diff N] [--max-fraction F]
 *       the same PNG names in both folders, the same sizes, pixel values within N (default 0)
 *       of each other and at most a fraction F (default 0) of the values different. For real
 *       renders on different grids (tests/job_pipeline.sh), where float sums in another order
 *       may move a value across a rounding boundary.
 */
#include <dirent.h>
#include <jansson.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/cp/comm.h"
#include "jobs/job_index.h"
#include "jobs/job_sbatch.h"
#include "jobs/job_slurm.h"
#include "jobs/job_run.h"
#include "lib/io/png_reader.h"

#define MAX_PATH_LEN 4096
#define MS_PER_S 1000
#define NS_PER_MS 1000000L

typedef struct tool_opts {
    const char *manifest, *output, *fail, *pid_dir, *expect_failed, *other_dir;
    int dp, ring, ulysses, sleep_ms, raise_after, raise_rank, partial, max_diff;
    double max_fraction;
} tool_opts;

typedef struct fake_ctx {
    const tool_opts *o;
    int rendered; /* items this rank has rendered */
} fake_ctx;

static uint32_t text_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The fake image: a gradient from the seed and the prompt, nothing else. */
static void fake_pixel(const job_item *x, int px, int py, uint8_t out[3])
{
    uint32_t h = text_hash(x->prompt);
    out[0] = (uint8_t)(px * 7 + x->seed);
    out[1] = (uint8_t)(py * 13 + (x->seed >> 8) + (uint32_t)x->repeat * 31);
    out[2] = (uint8_t)(px + py + h);
}

static cpdit_status fake_render(const job_item *item, const cp_grid *g, uint8_t **rgb, int *w,
                                int *h, job_item_times *times, void *ctx, cpdit_error *err)
{
    fake_ctx *fc = ctx;
    (void)times; /* nothing measured: the index line's times stay null */
    const tool_opts *o = fc->o;
    long long v[2] = {(long long)item->index, -(long long)item->index};
    if (g->cp_size > 1 &&
        cpdit_comm_allreduce(g->cp, v, 2, CPDIT_COMM_INT64, CPDIT_COMM_MAX, err) != CPDIT_OK)
        return err->status;
    if (v[0] != -v[1])
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "fake", "the group renders different "
                               "items (%lld and %lld)", v[0], -v[1]);
    if (o->sleep_ms > 0) {
        struct timespec ts = {o->sleep_ms / MS_PER_S, (o->sleep_ms % MS_PER_S) * NS_PER_MS};
        nanosleep(&ts, NULL);
    }
    fc->rendered++;
    if (o->raise_after > 0 && fc->rendered == o->raise_after && g->world_rank == o->raise_rank)
        raise(SIGUSR1);
    if (o->fail && strstr(item->prompt, o->fail) && g->cp_rank == g->cp_size - 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "fake", "refusing prompt \"%s\" on cp rank "
                               "%d", item->prompt, g->cp_rank);
    if (g->cp_rank != 0)
        return CPDIT_OK;
    *w = item->width;
    *h = item->height;
    *rgb = malloc((size_t)item->width * (size_t)item->height * 3);
    if (!*rgb)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "fake", "out of memory");
    for (int y = 0; y < item->height; y++)
        for (int x = 0; x < item->width; x++)
            fake_pixel(item, x, y, *rgb + ((size_t)y * (size_t)item->width + (size_t)x) * 3);
    return CPDIT_OK;
}

static int run_mode(const tool_opts *o)
{
    int rank;
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (o->pid_dir) {
        char p[MAX_PATH_LEN];
        snprintf(p, sizeof p, "%s/rank.%d", o->pid_dir, rank);
        FILE *f = fopen(p, "w");
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    manifest_overrides ov = MANIFEST_OVERRIDES_NONE;
    ov.output_dir = o->output;
    ov.dp = o->dp;
    ov.ring = o->ring;
    ov.ulysses = o->ulysses;
    manifest *m = NULL;
    cpdit_error err;
    cpdit_error_clear(&err);
    job_summary sum;
    memset(&sum, 0, sizeof sum);
    cpdit_status st = manifest_load_world(o->manifest, &ov, MPI_COMM_WORLD, &m, &err);
    if (!st) {
        fake_ctx fc = {o, 0};
        job_runner_hooks hooks = {.render_item = fake_render, .ctx = &fc, .log = stdout};
        st = job_run(m, &hooks, MPI_COMM_WORLD, &sum, &err);
    }
    if (st && rank == 0)
        fprintf(stderr, "cpdit: %s: %s\n", err.where, err.what);
    int code = job_exit_code(st, &sum);
    if (rank == 0)
        printf("exit code %d\n", code);
    manifest_free(m);
    fflush(stdout);
    MPI_Finalize();
    return code;
}

/* ---------------------------------------------------------------- verify */
static int problems = 0; /* verify and compare */
#define PROBLEM(...)                                                                           \
    do {                                                                                       \
        problems++;                                                                            \
        if (problems <= 20) {                                                                  \
            fprintf(stderr, "verify: " __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                               \
        }                                                                                      \
    } while (0)

/* Index lines of one file name: how many ok / failed, and the last ok one. */
static void lines_for(const job_index_contents *c, const char *file, int *ok, int *failed,
                      json_t **last_ok)
{
    *ok = *failed = 0;
    *last_ok = NULL;
    for (size_t i = 0; i < c->n; i++) {
        if (strcmp(c->entries[i].file, file) != 0)
            continue;
        if (c->entries[i].ok) {
            (*ok)++;
            json_decref(*last_ok);
            *last_ok = json_loadb(c->bytes + c->entries[i].off, c->entries[i].len - 1, 0, NULL);
        } else {
            (*failed)++;
        }
    }
}

static void check_png(const char *path, const job_item *x)
{
    cpdit_png_image img;
    cpdit_error err;
    if (cpdit_png_read_rgb8(path, &img, &err) != CPDIT_OK) {
        PROBLEM("%s: %s", path, err.what);
        return;
    }
    if (img.width != x->width || img.height != x->height) {
        PROBLEM("%s: %dx%d, want %dx%d", path, img.width, img.height, x->width, x->height);
    } else {
        long bad = 0;
        for (int py = 0; py < x->height; py++)
            for (int px = 0; px < x->width; px++) {
                uint8_t want[3];
                fake_pixel(x, px, py, want);
                bad += memcmp(img.rgb + ((size_t)py * (size_t)x->width + (size_t)px) * 3, want,
                              3) != 0;
            }
        if (bad)
            PROBLEM("%s: %ld pixels differ from the fake image", path, bad);
    }
    const char *prompt = cpdit_png_image_text(&img, "prompt", NULL);
    if (!prompt || strcmp(prompt, x->prompt) != 0)
        PROBLEM("%s: prompt text chunk \"%s\"", path, prompt ? prompt : "(none)");
    cpdit_png_image_free(&img);
}

static int verify_mode(const tool_opts *o)
{
    manifest *m = NULL;
    cpdit_error err;
    if (manifest_load(o->manifest, MANIFEST_CHECK_FILES, &m, &err) != CPDIT_OK) {
        fprintf(stderr, "verify: %s: %s\n", err.where, err.what);
        return 1;
    }
    manifest_overrides ov = MANIFEST_OVERRIDES_NONE;
    ov.output_dir = o->output;
    manifest_apply_overrides(m, &ov, &err);
    char *index = job_path_join(m->output_dir, JOB_INDEX_FILE_NAME);
    job_index_contents c;
    if (job_index_read(index, &c, &err) != CPDIT_OK) {
        fprintf(stderr, "verify: %s: %s\n", err.where, err.what);
        return 1;
    }
    if (c.torn_bytes || c.n_corrupt)
        PROBLEM("index: %zu torn bytes, %zu corrupt lines", c.torn_bytes, c.n_corrupt);
    job_items *it;
    const job_item *x;
    size_t done = 0, failed = 0, missing = 0, n_items = 0;
    if (job_items_open(m, NULL, JOB_ITEMS_CHECK_UNIQUE, &it, &err) != CPDIT_OK) {
        fprintf(stderr, "verify: %s: %s\n", err.where, err.what);
        return 1;
    }
    while (job_items_next(it, &x, &err) == CPDIT_OK && x) {
        n_items++;
        char *png = job_path_join(m->output_dir, x->file);
        int complete = job_png_is_complete(png), exists = access(png, F_OK) == 0, ok, bad;
        json_t *line;
        lines_for(&c, x->file, &ok, &bad, &line);
        int should_fail = o->expect_failed && strstr(x->prompt, o->expect_failed);
        if (should_fail) {
            if (exists)
                PROBLEM("%s: exists, but the item should have failed", x->file);
            if (bad != 1 || ok != 0)
                PROBLEM("%s: %d failed and %d ok lines, want 1 failed", x->file, bad, ok);
            failed++;
        } else if (!exists && ok == 0 && bad == 0 && o->partial) {
            missing++;
        } else {
            if (!complete)
                PROBLEM("%s: no complete PNG", x->file);
            else
                check_png(png, x);
            if (ok != 1 || bad != 0)
                PROBLEM("%s: %d ok and %d failed lines, want exactly 1 ok", x->file, ok, bad);
            if (line && (json_integer_value(json_object_get(line, "seed")) != (json_int_t)x->seed ||
                         json_integer_value(json_object_get(line, "index")) != (json_int_t)x->index ||
                         json_integer_value(json_object_get(line, "width")) != x->width ||
                         json_integer_value(json_object_get(line, "height")) != x->height ||
                         json_integer_value(json_object_get(line, "steps")) != x->steps ||
                         strcmp(json_string_value(json_object_get(line, "prompt")), x->prompt)))
                PROBLEM("%s: the index line does not match the item", x->file);
            done++;
        }
        json_decref(line);
        free(png);
    }
    job_items_close(it);
    if (c.n != done + failed)
        PROBLEM("index: %zu lines for %zu done + %zu failed items", c.n, done, failed);
    /* nothing else in the folder: the index and one PNG per done item (besides the run
     * record and a stop marker, jobs/job_slurm.h; a lock left behind is a problem) */
    DIR *d = opendir(m->output_dir);
    size_t entries = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            !strcmp(e->d_name, JOB_RUN_RECORD_NAME) ||
            !strncmp(e->d_name, JOB_STOP_MARKER_PREFIX, strlen(JOB_STOP_MARKER_PREFIX)))
            continue;
        if (!strncmp(e->d_name, JOB_LOCK_PREFIX, strlen(JOB_LOCK_PREFIX)))
            PROBLEM("a lock was left: %s", e->d_name);
        entries++;
        if (strstr(e->d_name, ".tmp."))
            PROBLEM("temporary file left: %s", e->d_name);
    }
    if (d)
        closedir(d);
    if (entries != done + (access(index, F_OK) == 0))
        PROBLEM("%zu entries in %s, want %zu PNGs + the index", entries, m->output_dir, done);
    printf("done=%zu failed=%zu missing=%zu items=%zu\n", done, failed, missing, n_items);
    job_index_contents_free(&c);
    free(index);
    manifest_free(m);
    return problems ? 1 : 0;
}

/* ---------------------------------------------------------------- compare */
static int is_png_name(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return n > 4 && strcmp(e->d_name + n - 4, ".png") == 0;
}

static int compare_mode(const tool_opts *o)
{
    const char *da = o->manifest, *db = o->other_dir;
    struct dirent **la, **lb;
    int na = scandir(da, &la, is_png_name, alphasort), nb = scandir(db, &lb, is_png_name, alphasort);
    long long values = 0, differing = 0;
    int worst = 0;
    if (na < 0 || nb < 0 || na != nb || na == 0)
        PROBLEM("%d PNGs in %s, %d in %s", na, da, nb, db);
    for (int i = 0; i < na && i < nb && na == nb; i++) {
        if (strcmp(la[i]->d_name, lb[i]->d_name) != 0) {
            PROBLEM("%s/%s vs %s/%s: different names", da, la[i]->d_name, db, lb[i]->d_name);
            continue;
        }
        char pa[MAX_PATH_LEN], pb[MAX_PATH_LEN];
        snprintf(pa, sizeof pa, "%s/%s", da, la[i]->d_name);
        snprintf(pb, sizeof pb, "%s/%s", db, lb[i]->d_name);
        cpdit_png_image a, b;
        cpdit_error err;
        if (cpdit_png_read_rgb8(pa, &a, &err) || cpdit_png_read_rgb8(pb, &b, &err)) {
            PROBLEM("%s", err.what);
            continue;
        }
        if (a.width != b.width || a.height != b.height) {
            PROBLEM("%s: %dx%d vs %dx%d", la[i]->d_name, a.width, a.height, b.width, b.height);
        } else {
            size_t n = (size_t)a.width * (size_t)a.height * 3;
            for (size_t k = 0; k < n; k++) {
                int d = abs((int)a.rgb[k] - (int)b.rgb[k]);
                differing += d != 0;
                worst = d > worst ? d : worst;
            }
            values += (long long)n;
        }
        cpdit_png_image_free(&a);
        cpdit_png_image_free(&b);
    }
    for (int i = 0; i < na; i++)
        free(la[i]);
    for (int i = 0; i < nb; i++)
        free(lb[i]);
    if (na >= 0)
        free(la);
    if (nb >= 0)
        free(lb);
    double fraction = values ? (double)differing / (double)values : 0.0;
    printf("compared %d images: %lld of %lld values differ (%.5f%%), max difference %d\n", na,
           differing, values, 100.0 * fraction, worst);
    if (worst > o->max_diff || fraction > o->max_fraction)
        PROBLEM("beyond the tolerance: max difference %d (allowed %d), fraction %.6f (allowed "
                "%.6f)", worst, o->max_diff, fraction, o->max_fraction);
    return problems ? 1 : 0;
}

int main(int argc, char **argv)
{
    tool_opts o;
    memset(&o, 0, sizeof o);
    o.raise_rank = -1;
    if (argc < 3) {
        fprintf(stderr, "usage: %s run|verify MANIFEST [options]\n", argv[0]);
        return 2;
    }
    o.manifest = argv[2];
    int first_option = 3;
    if (!strcmp(argv[1], "compare")) {
        if (argc < 4) {
            fprintf(stderr, "usage: %s compare DIR_A DIR_B [options]\n", argv[0]);
            return 2;
        }
        o.other_dir = argv[3];
        first_option = 4;
    }
    for (int i = first_option; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--partial")) {
            o.partial = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "%s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--output")) o.output = v;
        else if (!strcmp(a, "--dp")) o.dp = atoi(v);
        else if (!strcmp(a, "--ring")) o.ring = atoi(v);
        else if (!strcmp(a, "--ulysses")) o.ulysses = atoi(v);
        else if (!strcmp(a, "--sleep-ms")) o.sleep_ms = atoi(v);
        else if (!strcmp(a, "--fail")) o.fail = v;
        else if (!strcmp(a, "--raise-after")) o.raise_after = atoi(v);
        else if (!strcmp(a, "--raise-rank")) o.raise_rank = atoi(v);
        else if (!strcmp(a, "--pid-dir")) o.pid_dir = v;
        else if (!strcmp(a, "--expect-failed")) o.expect_failed = v;
        else if (!strcmp(a, "--max-diff")) o.max_diff = atoi(v);
        else if (!strcmp(a, "--max-fraction")) o.max_fraction = atof(v);
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (!strcmp(argv[1], "run"))
        return run_mode(&o);
    if (!strcmp(argv[1], "verify"))
        return verify_mode(&o);
    if (!strcmp(argv[1], "compare"))
        return compare_mode(&o);
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
