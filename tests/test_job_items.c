/* test_job_items.c — expansion of manifests into items: the file-name template language,
 * {slug}, the item order and per-prompt overrides, prompts files (text / JSONL, through a
 * byte source that returns 1 byte at a time), 100 000 streamed prompts, duplicate names, and
 * the round-robin assignment to dp groups. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobs/job_items.h"
#include "yaml/manifest.h"
#include "tests/test_util.h"
#include "tests/test_tmpdir.h"

#define BIG_PROMPTS 100000
/* Generous bound for expanding BIG_PROMPTS x 2 seeds (about 0.2 s here): a quadratic pass
 * would take minutes. */
#define BIG_SECONDS_MAX 20.0

static manifest *parse(const char *path, const char *text)
{
    manifest *m = NULL;
    cpdit_error err;
    if (manifest_parse_bytes(path, text, strlen(text), 0, &m, &err) != CPDIT_OK)
        fprintf(stderr, "parse: %s: %s\n", err.where, err.what);
    return m;
}

static void expect_template_error(const char *text, const char *needle)
{
    name_template t;
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK_MSG(name_template_parse(text, &t, &err) == CPDIT_ERR_INPUT, "template %s", text);
    CHECK_STR_CONTAINS(err.what, needle);
}

static void test_template(void)
{
    name_template t;
    cpdit_error err;
    job_item x;
    memset(&x, 0, sizeof x);
    x.index = 42;
    x.seed = 1234567;
    x.width = 208;
    x.height = 96;
    x.steps = 4;
    x.repeat = 3;
    x.prompt = "A red Fox, in the snow!";
    char out[JOB_FILE_NAME_MAX + 1];
    CHECK(name_template_parse("{index:05d}-{seed}-{slug}.png", &t, &err) == CPDIT_OK);
    job_template_expand(&t, &x, out, sizeof out);
    CHECK(strcmp(out, "00042-1234567-a-red-fox-in-the-snow.png") == 0);
    CHECK(t.max_len == 20 + 1 + 19 + 1 + JOB_SLUG_MAX + 4);
    name_template_free(&t);
    CHECK(name_template_parse("{{x}}_{width}x{height}_s{steps}_r{repeat:d}_{index:03d}.png", &t,
                             &err) == CPDIT_OK);
    job_template_expand(&t, &x, out, sizeof out);
    CHECK_MSG(strcmp(out, "{x}_208x96_s4_r3_042.png") == 0, "%s", out);
    name_template_free(&t);
    x.index = 123456; /* wider than the padding: not cut */
    CHECK(name_template_parse("{index:05d}.png", &t, &err) == CPDIT_OK);
    job_template_expand(&t, &x, out, sizeof out);
    CHECK(strcmp(out, "123456.png") == 0);
    name_template_free(&t);

    expect_template_error("{nope}.png", "unknown placeholder {nope}");
    expect_template_error("{index:5d}.png", "unsupported format");
    expect_template_error("{index:x}.png", "unsupported format");
    expect_template_error("{index:021d}.png", "unsupported format");
    expect_template_error("{slug:05d}.png", "{slug} takes no format");
    expect_template_error("{index.png", "without a closing");
    expect_template_error("a}b.png", "single '}'");
    expect_template_error("{index}.jpg", "must end in \".png\"");
    expect_template_error("d/{index}.png", "not a path");
    expect_template_error(".{index}.png", "must not start with '.'");
    expect_template_error("", "empty");
    expect_template_error("{slug}{slug}{slug}{slug}{slug}{slug}.png", "the limit is 255");
}

static void test_slug(void)
{
    static const struct {
        const char *prompt, *slug;
    } cases[] = {
        {"A red Fox!", "a-red-fox"},
        {"  --hello--world--  ", "hello-world"},
        {"一只猫 café", "caf"},
        {"Über cool", "ber-cool"},
        {"", "prompt"},
        {"!!!", "prompt"},
        {"0123 4567", "0123-4567"},
        /* the first 48 characters end in '-', which is dropped */
        {"the quick brown fox jumps over the lazy dog and the quick cat",
         "the-quick-brown-fox-jumps-over-the-lazy-dog-and"},
    };
    char out[JOB_SLUG_MAX + 1];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        job_slug(cases[i].prompt, out);
        CHECK_MSG(strcmp(out, cases[i].slug) == 0, "slug(\"%s\") = \"%s\", want \"%s\"",
                  cases[i].prompt, out, cases[i].slug);
        CHECK(strlen(out) <= JOB_SLUG_MAX);
    }
    job_slug("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbbb", out); /* 47 a's, '-' */
    CHECK(strlen(out) == 47 && out[46] == 'a');
}

/* Expand m fully into a new array of copies; *n = count. */
static job_item *expand_all(const manifest *m, const job_byte_source *src, size_t *n,
                            cpdit_error *err)
{
    job_items *it;
    job_item *all = NULL;
    *n = 0;
    if (job_items_open(m, src, JOB_ITEMS_CHECK_UNIQUE, &it, err) != CPDIT_OK)
        return NULL;
    const job_item *x;
    while (job_items_next(it, &x, err) == CPDIT_OK && x) {
        all = realloc(all, (*n + 1) * sizeof *all);
        job_item_copy(&all[*n], x, err);
        (*n)++;
    }
    job_items_close(it);
    return all;
}

static void free_all(job_item *all, size_t n)
{
    for (size_t i = 0; i < n; i++)
        job_item_free(&all[i]);
    free(all);
}

static void test_order_and_overrides(void)
{
    manifest *m = parse("m.yaml",
                        "model: builtin:tiny\n"
                        "defaults: {steps: 4, guidance: 2, negative_prompt: ugly}\n"
                        "seeds: [5, 6]\n"
                        "sizes: [[32, 32], [64, 48]]\n"
                        "repeats: 2\n"
                        "prompts:\n"
                        "  - first\n"
                        "  - {prompt: second, seed: 9, width: 128, steps: 7, repeats: 1,\n"
                        "     negative_prompt: \"\"}\n"
                        "  - {prompt: third, seeds: {count: 3, start: 100}, sizes: [[16, 16]],\n"
                        "     height: 16}\n");
    CHECK(m == NULL); /* sizes with height: refused */
    m = parse("m.yaml", "model: builtin:tiny\n"
                        "defaults: {steps: 4, guidance: 2, negative_prompt: ugly}\n"
                        "seeds: [5, 6]\n"
                        "sizes: [[32, 32], [64, 48]]\n"
                        "repeats: 2\n"
                        "prompts:\n"
                        "  - first\n"
                        "  - {prompt: second, seed: 9, width: 128, steps: 7, repeats: 1,\n"
                        "     negative_prompt: \"\"}\n"
                        "  - {prompt: third, seeds: {count: 3, start: 100}, sizes: [[16, 16]]}\n");
    CHECK(m != NULL);
    if (!m)
        return;
    cpdit_error err;
    size_t n;
    job_item *all = expand_all(m, NULL, &n, &err);
    /* first: 2 sizes x 2 seeds x 2 repeats = 8; second: 1 x 1 x 1; third: 1 x 3 x 2 = 6 */
    CHECK(n == 15);
    if (n == 15) {
        for (size_t i = 0; i < n; i++)
            CHECK(all[i].index == i);
        /* first prompt: size-major, then seed, then repeat */
        CHECK(all[0].seed == 5 && all[0].width == 32 && all[0].repeat == 0);
        CHECK(all[1].seed == 5 && all[1].width == 32 && all[1].repeat == 1);
        CHECK(all[2].seed == 6 && all[2].width == 32 && all[2].repeat == 0);
        CHECK(all[4].seed == 5 && all[4].width == 64 && all[4].height == 48);
        CHECK(all[7].seed == 6 && all[7].width == 64 && all[7].repeat == 1);
        CHECK(all[0].steps == 4 && strcmp(all[0].negative_prompt, "ugly") == 0);
        CHECK_NEAR(all[0].guidance, 2.0, 0);
        CHECK(strcmp(all[0].file, "00000-5-first.png") == 0);
        /* second: one seed, width 128 with the defaults' height (1024), 7 steps */
        CHECK(all[8].seed == 9 && all[8].width == 128 && all[8].height == 1024);
        CHECK(all[8].steps == 7 && all[8].negative_prompt[0] == '\0');
        CHECK(all[8].prompt_index == 1 && all[8].mark.line == 8);
        CHECK(strcmp(all[8].file, "00008-9-second.png") == 0);
        /* third: seeds 100..102, two repeats each */
        CHECK(all[9].seed == 100 && all[10].seed == 100 && all[14].seed == 102);
        CHECK(all[14].width == 16 && all[14].repeat == 1 && all[14].prompt_index == 2);
    }
    free_all(all, n);
    uint64_t ni = 0, np = 0;
    CHECK(job_items_count(m, NULL, &ni, &np, &err) == CPDIT_OK && ni == 15 && np == 3);
    manifest_free(m);

    /* two items with the same name */
    m = parse("d.yaml", "model: builtin:tiny\noutput: {name: \"{slug}.png\"}\n"
                        "prompts: [a cat, x, A CAT]\n");
    CHECK(m != NULL);
    if (m) {
        CHECK(job_items_count(m, NULL, &ni, NULL, &err) == CPDIT_ERR_INPUT);
        CHECK(strcmp(err.where, "d.yaml:2:16") == 0);
        CHECK_STR_CONTAINS(err.what, "items 0 and 2 the same file name \"a-cat.png\"");
        manifest_free(m);
    }
}

/* A byte source that hands out 1 byte per read: lines are assembled across reads. */
typedef struct drip {
    const char *text;
    size_t pos, len;
} drip;

static long drip_read(void *ctx, char *buf, size_t n, cpdit_error *err)
{
    drip *d = ctx;
    (void)err;
    if (d->pos == d->len || n == 0)
        return 0;
    buf[0] = d->text[d->pos++];
    return 1;
}

static void test_prompts_files(void)
{
    char *dir = tmpdir_make("items");
    CHECK(dir != NULL);
    if (!dir)
        return;
    CHECK(tmp_write(dir, "p.txt", "# header\n\nalpha\r\n  beta  \n#gamma\ndelta") == 0);
    CHECK(tmp_write(dir, "p.jsonl", "{\"prompt\": \"one\", \"seed\": 11}\n\n\"two\"\n"
                                    "{\"prompt\": \"three\", \"sizes\": [[32, 16]]}\n") == 0);
    char *mpath = tmp_path(dir, "m.yaml");
    manifest *m = parse(mpath, "model: builtin:tiny\nprompts: [inline]\nprompts_file: p.txt\n");
    CHECK(m != NULL);
    cpdit_error err;
    size_t n;
    if (m) {
        job_item *all = expand_all(m, NULL, &n, &err);
        CHECK(n == 4);
        if (n == 4) {
            CHECK(strcmp(all[0].prompt, "inline") == 0 && !all[0].from_prompts_file);
            CHECK(strcmp(all[1].prompt, "alpha") == 0 && all[1].from_prompts_file &&
                  all[1].mark.line == 3);
            CHECK(strcmp(all[2].prompt, "beta") == 0 && all[2].mark.line == 4);
            CHECK(strcmp(all[3].prompt, "delta") == 0 && all[3].mark.line == 6);
            CHECK(all[3].prompt_index == 3);
        }
        free_all(all, n);
        /* the same through a 1-byte-per-read source */
        char *bytes = tmp_read(m->prompts_file, NULL);
        drip d = {bytes, 0, bytes ? strlen(bytes) : 0};
        job_byte_source src = {drip_read, &d};
        all = expand_all(m, &src, &n, &err);
        CHECK(n == 4 && strcmp(all[3].prompt, "delta") == 0);
        free_all(all, n);
        free(bytes);
        manifest_free(m);
    }
    m = parse(mpath, "model: builtin:tiny\nprompts_file: p.jsonl\nseeds: [1, 2]\n");
    CHECK(m != NULL && m->prompts_format == MANIFEST_PROMPTS_JSONL);
    if (m) {
        job_item *all = expand_all(m, NULL, &n, &err);
        CHECK(n == 5); /* one: seed 11 only; two: 2 seeds; three: 2 seeds at 32x16 */
        if (n == 5) {
            CHECK(all[0].seed == 11 && strcmp(all[0].prompt, "one") == 0);
            CHECK(all[2].seed == 2 && strcmp(all[2].prompt, "two") == 0 &&
                  all[2].mark.line == 3);
            CHECK(all[4].width == 32 && all[4].height == 16 && all[4].mark.line == 4);
        }
        free_all(all, n);
        manifest_free(m);
    }
    /* a line over the limit */
    char *longline = malloc(JOB_PROMPT_LINE_MAX + 16);
    memset(longline, 'x', JOB_PROMPT_LINE_MAX + 8);
    strcpy(longline + JOB_PROMPT_LINE_MAX + 8, "\n");
    CHECK(tmp_write(dir, "long.txt", longline) == 0);
    free(longline);
    m = parse(mpath, "model: builtin:tiny\nprompts_file: long.txt\n");
    if (m) {
        uint64_t ni;
        CHECK(job_items_count(m, NULL, &ni, NULL, &err) == CPDIT_ERR_INPUT);
        CHECK_STR_CONTAINS(err.where, "long.txt:1");
        CHECK_STR_CONTAINS(err.what, "line longer than");
        manifest_free(m);
    }
    free(mpath);
    tmpdir_remove(dir);
    free(dir);
}

static void test_many_prompts(void)
{
    char *dir = tmpdir_make("items-big");
    CHECK(dir != NULL);
    if (!dir)
        return;
    char *ppath = tmp_path(dir, "big.txt"), *mpath = tmp_path(dir, "m.yaml");
    FILE *f = fopen(ppath, "w");
    for (int i = 0; f && i < BIG_PROMPTS; i++)
        fprintf(f, "prompt number %d, a small red fox in the snow at dawn\n", i);
    if (f)
        fclose(f);
    manifest *m = parse(mpath, "model: builtin:tiny\nprompts_file: big.txt\nseeds: [1, 2]\n");
    CHECK(m != NULL);
    if (m) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        uint64_t ni = 0, np = 0;
        cpdit_error err;
        CHECK(job_items_count(m, NULL, &ni, &np, &err) == CPDIT_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        CHECK(ni == 2 * BIG_PROMPTS && np == BIG_PROMPTS);
        CHECK_MSG(s < BIG_SECONDS_MAX, "%.2f s", s);
        fprintf(stderr, "expanded %d prompts into %llu items in %.3f s\n", BIG_PROMPTS,
                (unsigned long long)ni, s);
        /* spot check: the last item */
        job_items *it;
        const job_item *x = NULL;
        job_item keep;
        memset(&keep, 0, sizeof keep);
        CHECK(job_items_open(m, NULL, 0, &it, &err) == CPDIT_OK);
        while (job_items_next(it, &x, &err) == CPDIT_OK && x) {
            if (x->index + 1 == 2 * BIG_PROMPTS)
                job_item_copy(&keep, x, &err);
        }
        job_items_close(it);
        CHECK(keep.index == 2 * BIG_PROMPTS - 1 && keep.seed == 2);
        CHECK(strcmp(keep.file, "199999-2-prompt-number-99999-a-small-red-fox-in-the-snow.png") ==
              0);
        job_item_free(&keep);
        manifest_free(m);
    }
    free(ppath);
    free(mpath);
    tmpdir_remove(dir);
    free(dir);
}

static void test_assign(void)
{
    CHECK(job_assign_group(0, 1) == 0 && job_assign_group(7, 1) == 0);
    CHECK(job_assign_group(7, 3) == 1 && job_assign_group(9, 3) == 0);
    CHECK(job_assign_group_count(7, 3, 0) == 3);
    CHECK(job_assign_group_count(7, 3, 1) == 2);
    CHECK(job_assign_group_count(7, 3, 2) == 2);
    CHECK(job_assign_group_count(2, 4, 3) == 0);
    CHECK(job_assign_group_count(5, 1, 0) == 5);
    /* every item lands in exactly one group, and the counts agree */
    for (int dp = 1; dp <= 5; dp++) {
        uint64_t counts[5] = {0}, total = 0;
        for (uint64_t i = 0; i < 23; i++)
            counts[job_assign_group(i, dp)]++;
        for (int g = 0; g < dp; g++) {
            CHECK(counts[g] == job_assign_group_count(23, dp, g));
            total += counts[g];
        }
        CHECK(total == 23);
    }
}

int main(void)
{
    test_template();
    test_slug();
    test_order_and_overrides();
    test_prompts_files();
    test_many_prompts();
    test_assign();
    TEST_MAIN_END();
}
