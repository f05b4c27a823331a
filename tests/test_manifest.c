/* test_manifest.c — the manifest parser on valid manifests: every key lands in the right field,
 * defaults, typing of plain scalars, flow style / CRLF / BOM, paths relative to the manifest,
 * command-line overrides, prompts-file lines (text and JSONL) and the --check plan. The bad
 * manifests and their exact messages are in test_manifest_bad.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/job_items.h"
#include "jobs/job_run.h"
#include "yaml/manifest.h"
#include "tests/test_util.h"
#include "tests/test_tmpdir.h"

#define FULL_MANIFEST                                                                     \
    "# every key\n"                                                                       \
    "model: models/flux\n"                                                                \
    "output: { dir: out/run1, name: \"{seed}-{index:03d}.png\" }\n"                       \
    "defaults:\n"                                                                         \
    "  steps: 8\n"                                                                        \
    "  guidance: 4\n"                                                                     \
    "  negative_prompt: blurry\n"                                                         \
    "  true_cfg: 1.5\n"                                                                   \
    "  max_sequence_length: 256\n"                                                        \
    "seeds: [3, 1, 2]\n"                                                                  \
    "sizes: [[208, 208], [1024, 768]]\n"                                                  \
    "repeats: 2\n"                                                                        \
    "prompts:\n"                                                                          \
    "  - a red fox\n"                                                                     \
    "  - 1984\n"                                                                          \
    "  - { prompt: \"a dog\", steps: 12, seed: 7, width: 512 }\n"                         \
    "  - prompt: 一只猫 café\n"                                                           \
    "    seeds: { count: 4, start: 100 }\n"                                               \
    "    sizes: [[64, 32]]\n"                                                             \
    "    guidance: 0\n"                                                                   \
    "    negative_prompt: \"\"\n"                                                         \
    "    true_cfg: 2\n"                                                                   \
    "    max_sequence_length: 77\n"                                                       \
    "    repeats: 1\n"                                                                    \
    "prompts_file: lists/more.jsonl\n"                                                    \
    "parallel: { dp: 2, ring: 3, ulysses: 4, anything: true }\n"

static manifest *parse(const char *path, const char *text, unsigned flags, cpdit_error *err)
{
    manifest *m = NULL;
    cpdit_error_clear(err);
    manifest_parse_bytes(path, text, strlen(text), flags, &m, err);
    return m;
}

static void test_full(void)
{
    cpdit_error err;
    manifest *m = parse("jobs/batch.yaml", FULL_MANIFEST, 0, &err);
    CHECK_MSG(m != NULL, "%s: %s", err.where, err.what);
    if (!m)
        return;
    CHECK(strcmp(m->base_dir, "jobs") == 0);
    CHECK(strcmp(m->model, "jobs/models/flux") == 0); /* relative to the manifest */
    CHECK(m->model_is_builtin == 0);
    CHECK(m->model_mark.line == 2 && m->model_mark.col == 8);
    CHECK(strcmp(m->output_dir, "out/run1") == 0); /* relative to the working directory */
    CHECK(strcmp(m->name_template, "{seed}-{index:03d}.png") == 0);
    const manifest_settings *b = &m->base;
    CHECK(b->steps == 8);
    CHECK_NEAR(b->guidance, 4.0, 0);
    CHECK(strcmp(b->negative_prompt, "blurry") == 0);
    CHECK_NEAR(b->true_cfg, 1.5, 0);
    CHECK(b->max_sequence_length == 256);
    CHECK(b->seeds.n == 3 && b->seeds.list && manifest_seed_at(&b->seeds, 0) == 3 &&
          manifest_seed_at(&b->seeds, 2) == 2);
    CHECK(b->n_sizes == 2 && b->sizes[1].width == 1024 && b->sizes[1].height == 768);
    CHECK(b->repeats == 2);
    CHECK(b->width == MANIFEST_DEFAULT_SIDE && b->height == MANIFEST_DEFAULT_SIDE);
    CHECK(m->n_prompts == 4);
    if (m->n_prompts == 4) {
        CHECK(strcmp(m->prompts[0].text, "a red fox") == 0 && m->prompts[0].over.set == 0);
        CHECK(strcmp(m->prompts[1].text, "1984") == 0); /* a plain integer is text here */
        const manifest_prompt *p = &m->prompts[2];
        CHECK(strcmp(p->text, "a dog") == 0);
        CHECK(p->over.set == (MANIFEST_SET_STEPS | MANIFEST_SET_SEED | MANIFEST_SET_WIDTH));
        CHECK(p->over.steps == 12 && p->over.seed == 7 && p->over.width == 512);
        CHECK(p->mark.line == 16 && p->mark.col == 5);
        p = &m->prompts[3];
        CHECK(strcmp(p->text, "一只猫 café") == 0);
        CHECK(p->over.seeds.list == NULL && p->over.seeds.start == 100 && p->over.seeds.n == 4);
        CHECK(p->over.n_sizes == 1 && p->over.sizes[0].width == 64 &&
              p->over.sizes[0].height == 32);
        CHECK_NEAR(p->over.guidance, 0.0, 0);
        CHECK((p->over.set & MANIFEST_SET_NEGATIVE) && p->over.negative_prompt[0] == '\0');
        CHECK(p->over.max_sequence_length == 77 && p->over.repeats == 1);
        CHECK_NEAR(p->over.true_cfg, 2.0, 0);
    }
    CHECK(strcmp(m->prompts_file, "jobs/lists/more.jsonl") == 0);
    CHECK(m->prompts_format == MANIFEST_PROMPTS_JSONL);
    CHECK(m->prompts_file_mark.line == 25 && m->prompts_file_mark.col == 15);
    CHECK(!m->parallel.is_auto && m->parallel.dp == 2 && m->parallel.ring == 3 &&
          m->parallel.ulysses == 4 && m->parallel.anything == 1);

    /* the same manifest with file checks: the prompts file does not exist here */
    manifest *m2 = parse("jobs/batch.yaml", FULL_MANIFEST, MANIFEST_CHECK_FILES, &err);
    CHECK(m2 == NULL && err.status == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.where, "jobs/batch.yaml:2:8"); /* the model folder first */
    manifest_free(m2);
    manifest_free(m);
}

static void test_defaults_and_overrides(void)
{
    cpdit_error err;
    manifest *m = parse("m.yaml", "model: builtin:tiny\nprompts: [a]\n", 0, &err);
    CHECK_MSG(m != NULL, "%s: %s", err.where, err.what);
    if (!m)
        return;
    const manifest_settings *b = &m->base;
    CHECK(m->model_is_builtin && strcmp(m->model, "builtin:tiny") == 0);
    CHECK(strcmp(m->base_dir, "") == 0);
    CHECK(b->steps == MANIFEST_DEFAULT_STEPS && b->repeats == 1);
    CHECK_NEAR(b->guidance, MANIFEST_DEFAULT_GUIDANCE, 0);
    CHECK_NEAR(b->true_cfg, MANIFEST_DEFAULT_TRUE_CFG, 0);
    CHECK(b->max_sequence_length == MANIFEST_DEFAULT_SEQ_LEN);
    CHECK(b->negative_prompt == NULL); /* not given: no true CFG (given "": CFG, as diffusers) */
    CHECK(b->seeds.n == 1 && manifest_seed_at(&b->seeds, 0) == MANIFEST_DEFAULT_SEED);
    /* builtin:tiny's own size (lib/builtin builtin_model_run_defaults); a folder: 1024 */
    CHECK(b->n_sizes == 1 && b->sizes[0].width == 256 && b->sizes[0].height == 256);
    CHECK(strcmp(m->output_dir, MANIFEST_DEFAULT_OUTPUT_DIR) == 0);
    CHECK(strcmp(m->name_template, MANIFEST_DEFAULT_NAME) == 0);
    CHECK(m->parallel.is_auto && m->prompts_file == NULL);

    manifest_overrides ov = MANIFEST_OVERRIDES_NONE;
    CHECK(manifest_apply_overrides(m, &ov, &err) == CPDIT_OK && m->parallel.is_auto);
    ov.output_dir = "/tmp/elsewhere";
    ov.ulysses = 2;
    ov.anything = 1;
    CHECK(manifest_apply_overrides(m, &ov, &err) == CPDIT_OK);
    CHECK(strcmp(m->output_dir, "/tmp/elsewhere") == 0);
    CHECK(!m->parallel.is_auto && m->parallel.dp == 0 && m->parallel.ring == 1 &&
          m->parallel.ulysses == 2 && m->parallel.anything == 1);
    manifest_overrides bad = MANIFEST_OVERRIDES_NONE;
    bad.ring = -3;
    CHECK(manifest_apply_overrides(m, &bad, &err) == CPDIT_ERR_INPUT);
    CHECK(strcmp(err.where, "--ring") == 0);
    CHECK_STR_CONTAINS(err.what, "must be between 1 and");
    manifest_free(m);

    /* seeds as a range, defaults.seed without seeds:, width alone in defaults */
    m = parse("dir/sub/m.yaml",
              "model: builtin:tiny\nprompts: [x]\ndefaults: {seed: 42, width: 512}\n"
              "prompts_file: /abs/p.txt\n",
              0, &err);
    CHECK_MSG(m != NULL, "%s: %s", err.where, err.what);
    if (m) {
        CHECK(m->base.seeds.n == 1 && manifest_seed_at(&m->base.seeds, 0) == 42);
        CHECK(m->base.sizes[0].width == 512 && m->base.sizes[0].height == 256);
        CHECK(strcmp(m->prompts_file, "/abs/p.txt") == 0); /* absolute: unchanged */
        CHECK(m->prompts_format == MANIFEST_PROMPTS_TEXT);
        manifest_free(m);
    }
    /* builtin:shapes runs as trained unless told otherwise; what is given wins */
    m = parse("m.yaml", "model: builtin:shapes\nprompts: [x]\ndefaults: {steps: 3}\n", 0, &err);
    CHECK_MSG(m != NULL, "%s: %s", err.where, err.what);
    if (m) {
        const manifest_settings *s = &m->base;
        CHECK(s->sizes[0].width == 128 && s->sizes[0].height == 128 && s->steps == 3);
        CHECK(s->max_sequence_length == 32 && s->negative_prompt && !s->negative_prompt[0]);
        CHECK_NEAR(s->true_cfg, 4.0, 0);
        manifest_free(m);
    }
    m = parse("m.yaml", "model: builtin:tiny\nprompts: [x]\nseeds: {count: 4, start: 10}\n", 0,
              &err);
    CHECK(m && m->base.seeds.n == 4 && manifest_seed_at(&m->base.seeds, 3) == 13);
    manifest_free(m);
}

/* Flow style, CRLF line ends, a UTF-8 BOM and block scalars parse like the block form, and
 * error positions count CRLF as one line break and characters (not bytes) as columns. */
static void test_syntax_variants(void)
{
    cpdit_error err;
    manifest *m = parse("f.yaml",
                        "{model: builtin:tiny, prompts: [a, {prompt: b}], seeds: [5], "
                        "parallel: auto}",
                        0, &err);
    CHECK_MSG(m && m->n_prompts == 2 && m->parallel.is_auto, "%s: %s", err.where, err.what);
    manifest_free(m);
    m = parse("c.yaml",
              "\xef\xbb\xbfmodel: builtin:tiny\r\nprompts:\r\n  - |\r\n    two\r\n    lines\r\n",
              0, &err);
    CHECK_MSG(m && m->n_prompts == 1 && strcmp(m->prompts[0].text, "two\nlines\n") == 0,
              "%s: %s", err.where, err.what);
    manifest_free(m);
    m = parse("c.yaml", "model: builtin:tiny\r\nprompts: [a]\r\ndefaults: {steps: x}\r\n", 0,
              &err);
    CHECK(m == NULL && strcmp(err.where, "c.yaml:3:19") == 0);
    m = parse("u.yaml", "model: builtin:tiny\nprompts: [\"été\", {prompt: x, stepz: 1}]\n", 0,
              &err);
    CHECK(m == NULL && strcmp(err.where, "u.yaml:2:30") == 0);
    CHECK_STR_CONTAINS(err.what, "did you mean \"steps\"?");
}

static void test_prompt_lines(void)
{
    cpdit_error err;
    manifest_prompt p;
    static const char *const skipped[] = {"", "   ", "\r", "# comment", "  # indented comment"};
    for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++) {
        CHECK(manifest_prompt_parse_line(MANIFEST_PROMPTS_TEXT, "p.txt", 1, skipped[i],
                                         strlen(skipped[i]), &p, &err) == CPDIT_OK);
        CHECK(p.text == NULL);
    }
    const char *l = "  a cat in a hat \t\r";
    CHECK(manifest_prompt_parse_line(MANIFEST_PROMPTS_TEXT, "p.txt", 2, l, strlen(l), &p,
                                     &err) == CPDIT_OK);
    CHECK(p.text && strcmp(p.text, "a cat in a hat") == 0 && p.over.set == 0);
    manifest_prompt_free(&p);
    l = "bad \xff byte";
    CHECK(manifest_prompt_parse_line(MANIFEST_PROMPTS_TEXT, "p.txt", 7, l, strlen(l), &p,
                                     &err) == CPDIT_ERR_INPUT);
    CHECK(strcmp(err.where, "p.txt:7") == 0);

    l = "{\"prompt\": \"a dog\", \"steps\": 3, \"seeds\": [1, 2], \"guidance\": 2.5}";
    CHECK(manifest_prompt_parse_line(MANIFEST_PROMPTS_JSONL, "p.jsonl", 3, l, strlen(l), &p,
                                     &err) == CPDIT_OK);
    CHECK(p.text && strcmp(p.text, "a dog") == 0 && p.over.steps == 3 &&
          p.over.seeds.n == 2 && p.mark.line == 3);
    CHECK_NEAR(p.over.guidance, 2.5, 0);
    manifest_prompt_free(&p);
    l = "\"just a string\"";
    CHECK(manifest_prompt_parse_line(MANIFEST_PROMPTS_JSONL, "p.jsonl", 4, l, strlen(l), &p,
                                     &err) == CPDIT_OK);
    CHECK(p.text && strcmp(p.text, "just a string") == 0);
    manifest_prompt_free(&p);
    l = "{\"prompt\": \"x\", \"steps\": \"4\"}";
    CHECK(manifest_prompt_parse_line(MANIFEST_PROMPTS_JSONL, "p.jsonl", 5, l, strlen(l), &p,
                                     &err) == CPDIT_ERR_INPUT);
    CHECK(strcmp(err.where, "p.jsonl:5") == 0);
    CHECK(strcmp(err.what, "steps: expected an integer, got string \"4\"") == 0);
    l = "{\"prompt\": \"x\", \"prompt\": \"y\"}";
    CHECK(manifest_prompt_parse_line(MANIFEST_PROMPTS_JSONL, "p.jsonl", 6, l, strlen(l), &p,
                                     &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "invalid JSON");
    l = "[1, 2]";
    CHECK(manifest_prompt_parse_line(MANIFEST_PROMPTS_JSONL, "p.jsonl", 8, l, strlen(l), &p,
                                     &err) == CPDIT_ERR_INPUT);
}

static void test_check_command(void)
{
    char *dir = tmpdir_make("manifest");
    CHECK(dir != NULL);
    if (!dir)
        return;
    char *out_dir = tmp_path(dir, "out");
    char body[1024];
    snprintf(body, sizeof body,
             "model: builtin:tiny\noutput: {dir: %s}\ndefaults: {steps: 4, width: 208, "
             "height: 208}\nseeds: [1, 2]\nprompts: [\"a red fox\", \"a blue bird\"]\n"
             "prompts_file: p.txt\n",
             out_dir);
    CHECK(tmp_write(dir, "m.yaml", body) == 0);
    CHECK(tmp_write(dir, "p.txt", "# comment\n\na green frog\n") == 0);
    char *path = tmp_path(dir, "m.yaml"), *report = tmp_path(dir, "report.txt");
    FILE *f = fopen(report, "w");
    cpdit_error err;
    cpdit_error_clear(&err);
    manifest_overrides ov = MANIFEST_OVERRIDES_NONE;
    ov.dp = 2;
    CHECK(f && manifest_check_command(path, &ov, f, &err) == CPDIT_OK);
    if (f)
        fclose(f);
    char *text = tmp_read(report, NULL);
    CHECK_STR_CONTAINS(text, "items:     6 = 3 prompts x 1 size x 2 seeds x 1 repeat\n");
    CHECK_STR_CONTAINS(text, "prompts:   3 (2 inline, 1 from");
    CHECK_STR_CONTAINS(text, "grid:      dp 2 x ring 1 x ulysses 1 = 2 ranks");
    CHECK_STR_CONTAINS(text, "00000-1-a-red-fox.png");
    CHECK_STR_CONTAINS(text, "00005-2-a-green-frog.png");
    CHECK_STR_CONTAINS(text, "the output folder does not exist yet; 6 to do");
    CHECK(!tmp_exists(out_dir)); /* --check writes nothing */
    free(text);
    free(path);
    free(report);
    free(out_dir);
    tmpdir_remove(dir);
    free(dir);
}

/* The shipped examples parse and expand: quickstart with every file check (it must run as
 * is), batch-flux-dev without the model-folder check (its path is a placeholder). */
static void test_examples(void)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    cpdit_error err;
    manifest *m = NULL;
    uint64_t n = 0, np = 0;
    snprintf(path, sizeof path, "%s/jobs/examples/quickstart.yaml", top ? top : ".");
    CHECK_MSG(manifest_load(path, MANIFEST_CHECK_FILES, &m, &err) == CPDIT_OK, "%s: %s",
              err.where, err.what);
    if (m) {
        CHECK(job_items_count(m, NULL, &n, &np, &err) == CPDIT_OK && n == 16 && np == 8);
        CHECK(m->model_is_builtin && m->base.sizes[0].width == 128 && m->base.steps == 20);
        manifest_free(m);
    }
    snprintf(path, sizeof path, "%s/jobs/examples/batch-flux-dev.yaml", top ? top : ".");
    CHECK_MSG(manifest_load(path, 0, &m, &err) == CPDIT_OK, "%s: %s", err.where, err.what);
    if (m) {
        /* 5 prompts: 4 seeds x 3 sizes, but one has 1 seed and one 1 size */
        CHECK_MSG(job_items_count(m, NULL, &n, &np, &err) == CPDIT_OK, "%s: %s", err.where,
                  err.what);
        CHECK(np == 5 && n == 12 + 3 + 12 + 4 + 12);
        CHECK(m->parallel.ulysses == 4 && m->parallel.dp == 0 && !m->parallel.is_auto);
        manifest_free(m);
    }
    /* batch-wan: the folder is a placeholder, its mp4 says video */
    snprintf(path, sizeof path, "%s/jobs/examples/batch-wan.yaml", top ? top : ".");
    CHECK_MSG(manifest_load(path, 0, &m, &err) == CPDIT_OK, "%s: %s", err.where, err.what);
    if (m) {
        CHECK(job_items_count(m, NULL, &n, &np, &err) == CPDIT_OK && np == 4 && n == 7);
        CHECK(m->is_video && m->base.num_frames == 81 && m->base.flow_shift == 3.0 &&
              m->base.width == 832 && m->base.height == 480 && m->base.true_cfg == 5.0 &&
              m->base.negative_prompt && strlen(m->base.negative_prompt) > 200);
        manifest_free(m);
    }
}

/* Video manifests: the model's defaults (builtin:wan-tiny's, model_defaults.h), the video
 * keys per prompt and in defaults, guidance as the true-CFG scale, the format's extension in
 * the default name, and a folder model's kind with and without MANIFEST_READ_MODEL. */
static void test_video(void)
{
    cpdit_error err;
    manifest *m = parse("v.yaml",
                        "model: builtin:wan-tiny\n"
                        "defaults: {num_frames: 9, flow_shift: 3.0, guidance: 6}\n"
                        "prompts:\n"
                        "  - a fox\n"
                        "  - {prompt: a boat, fps: 8, num_frames: 5, true_cfg: 2}\n"
                        "  - {prompt: a kite, guidance: 4}\n",
                        0, &err);
    CHECK_MSG(m != NULL, "%s: %s", err.where, err.what);
    if (!m)
        return;
    CHECK(m->is_video && m->format == MANIFEST_FORMAT_MP4);
    CHECK(strcmp(m->name_template, "{index:05d}-{seed}-{slug}.mp4") == 0);
    CHECK(m->base.width == 64 && m->base.height == 64 && m->base.steps == 8); /* wan-tiny's */
    CHECK(m->base.negative_prompt && m->base.negative_prompt[0] == '\0');
    job_items *it = NULL;
    CHECK(job_items_open(m, NULL, JOB_ITEMS_CHECK_UNIQUE, &it, &err) == CPDIT_OK);
    const job_item *x;
    /* frames, fps, flow_shift, true_cfg per item */
    const int frames[3] = {9, 5, 9};
    const double fps[3] = {16, 8, 16}, cfg[3] = {6, 2, 4};
    for (int k = 0; it && k < 3; k++) {
        CHECK(job_items_next(it, &x, &err) == CPDIT_OK && x);
        if (!x)
            break;
        CHECK_MSG(x->frames == frames[k] && x->fps == fps[k] && x->flow_shift == 3.0 &&
                      x->true_cfg == cfg[k] && x->format == MANIFEST_FORMAT_MP4,
                  "item %d: %d frames, %g fps, shift %g, cfg %g", k, x->frames, x->fps,
                  x->flow_shift, x->true_cfg);
        CHECK(strlen(x->file) > 4 && strcmp(x->file + strlen(x->file) - 4, ".mp4") == 0);
    }
    job_items_close(it);
    manifest_free(m);
    /* png-frames: names without an extension; an image model's items have no frames */
    m = parse("f.yaml", "model: builtin:wan-tiny\noutput: {format: png-frames}\nprompts: [a]\n",
              0, &err);
    CHECK(m && m->format == MANIFEST_FORMAT_PNG_FRAMES && m->base.num_frames == 17 &&
          strcmp(m->name_template, "{index:05d}-{seed}-{slug}") == 0);
    manifest_free(m);
    m = parse("i.yaml", "model: builtin:tiny\nprompts: [a]\n", 0, &err);
    CHECK(m && !m->is_video && m->format == MANIFEST_FORMAT_PNG && m->base.num_frames == 0);
    manifest_free(m);
    /* a folder not read: image unless a video key says otherwise; with a video key, Wan's */
    m = parse("d.yaml", "model: /nonexistent/wan\ndefaults: {fps: 24}\nprompts: [a]\n", 0,
              &err);
    CHECK(m && m->is_video && m->base.num_frames == 81 && m->base.width == 832 &&
          m->base.fps == 24 && m->base.true_cfg == 5.0);
    manifest_free(m);
    m = parse("d.yaml", "model: /nonexistent/flux\nprompts: [a]\n", MANIFEST_READ_MODEL, &err);
    CHECK(m && !m->is_video && m->base.width == 1024); /* unreadable: FLUX.1's */
    manifest_free(m);
    /* an image model refuses video keys at their position */
    m = parse("b.yaml", "model: builtin:tiny\nprompts: [{prompt: a, fps: 8}]\n", 0, &err);
    CHECK(!m && err.status == CPDIT_ERR_INPUT && strcmp(err.where, "b.yaml:2:11") == 0 &&
          strstr(err.what, "fps: builtin:tiny makes images"));
}

int main(void)
{
    test_full();
    test_defaults_and_overrides();
    test_syntax_variants();
    test_prompt_lines();
    test_check_command();
    test_examples();
    test_video();
    TEST_MAIN_END();
}
