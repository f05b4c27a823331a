/* job_check.c — `cpdit run MANIFEST --check`: validate everything a run would, print the
 * expanded plan, write nothing (see job_run.h). */
#include "jobs/job_run.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jobs/job_index.h"

#define CHECK_SHOW_ITEMS 8     /* items listed under "first items" */
#define CHECK_PROMPT_CHARS 48  /* prompt text shown per item, bytes (cut at a UTF-8 start) */
#define CHECK_SIZES_SHOWN 6
#define NUM_SHIFT 32
#define PLURAL(n) ((n) == 1 ? "" : "s")

/* The first bytes of s, at most max, not cutting a UTF-8 character; "..." when cut. */
static void short_text(const char *s, char *buf, size_t max)
{
    size_t n = strlen(s);
    if (n <= max) {
        memcpy(buf, s, n + 1);
        return;
    }
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
        max--;
    memcpy(buf, s, max);
    memcpy(buf + max, "...", 4);
}

static void print_grid(FILE *out, const manifest_parallel *p)
{
    if (p->is_auto) {
        fprintf(out, "grid:      auto (chosen at run time from the rank count and the machine)\n");
        return;
    }
    int cp = p->ring * p->ulysses;
    if (p->dp)
        fprintf(out, "grid:      dp %d x ring %d x ulysses %d = %d ranks%s\n", p->dp, p->ring,
                p->ulysses, p->dp * cp, p->anything ? ", anything" : "");
    else
        fprintf(out, "grid:      ring %d x ulysses %d per group, dp = ranks / %d%s\n", p->ring,
                p->ulysses, cp, p->anything ? ", anything" : "");
}

cpdit_status manifest_check_command(const char *path, const manifest_overrides *ov, FILE *out,
                                    cpdit_error *err)
{
    manifest *m = NULL;
    cpdit_status st = manifest_load(path, MANIFEST_CHECK_FILES | MANIFEST_READ_MODEL, &m, err);
    if (!st)
        st = manifest_apply_overrides(m, ov, err);
    int out_exists = 0;
    if (!st)
        st = job_check_model_name(m, err);
    if (!st)
        st = job_check_output_format(m, err);
    if (!st)
        st = job_check_output_dir(m, &out_exists, err);
    job_items *it = NULL;
    if (!st)
        st = job_items_open(m, NULL, JOB_ITEMS_CHECK_UNIQUE, &it, err);
    if (st) {
        manifest_free(m);
        return st;
    }
    int dp = m->parallel.is_auto ? 0 : m->parallel.dp;
    job_item first[CHECK_SHOW_ITEMS];
    size_t n_first = 0;
    uint64_t n = 0, done = 0;
    const job_item *x;
    while (!(st = job_items_next(it, &x, err)) && x) {
        if (n_first < CHECK_SHOW_ITEMS && !(st = job_item_copy(&first[n_first], x, err)))
            n_first++;
        if (st)
            break;
        if (out_exists) {
            char *p = job_path_join(m->output_dir, x->file);
            done += p && job_output_is_complete(p);
            free(p);
        }
        n++;
    }
    uint64_t n_prompts = job_items_prompt_count(it);
    job_items_close(it);
    if (!st) {
        const manifest_settings *b = &m->base;
        fprintf(out, "manifest:  %s (valid)\n", m->path);
        fprintf(out, "model:     %s\n", m->model);
        fprintf(out, "prompts:   %llu (%zu inline", (unsigned long long)n_prompts, m->n_prompts);
        if (m->prompts_file)
            fprintf(out, ", %llu from %s", (unsigned long long)(n_prompts - m->n_prompts),
                    m->prompts_file);
        fprintf(out, ")\n");
        uint64_t product = n_prompts * b->n_sizes * b->seeds.n * (uint64_t)b->repeats;
        if (product == n)
            fprintf(out, "items:     %llu = %llu prompt%s x %zu size%s x %zu seed%s x %d "
                    "repeat%s\n", (unsigned long long)n, (unsigned long long)n_prompts,
                    PLURAL(n_prompts), b->n_sizes, PLURAL(b->n_sizes), b->seeds.n,
                    PLURAL(b->seeds.n), b->repeats, PLURAL(b->repeats));
        else
            fprintf(out, "items:     %llu (some prompts override seeds, sizes or repeats)\n",
                    (unsigned long long)n);
        fprintf(out, "sizes:    ");
        for (size_t i = 0; i < b->n_sizes && i < CHECK_SIZES_SHOWN; i++)
            fprintf(out, " %dx%d", b->sizes[i].width, b->sizes[i].height);
        fprintf(out, "%s\n", b->n_sizes > CHECK_SIZES_SHOWN ? " ..." : "");
        if (m->is_video) /* Wan's guidance_scale is the true-CFG scale */
            fprintf(out, "defaults:  steps %d, guidance (true CFG) %g, max_sequence_length %d%s\n",
                    b->steps, b->true_cfg, b->max_sequence_length,
                    b->negative_prompt ? ", with a negative prompt" : "");
        else
            fprintf(out, "defaults:  steps %d, guidance %g, true_cfg %g, max_sequence_length "
                    "%d%s\n", b->steps, b->guidance, b->true_cfg, b->max_sequence_length,
                    b->negative_prompt ? ", with a negative prompt" : "");
        if (m->is_video) {
            char shift[NUM_SHIFT] = "the scheduler's";
            if (b->flow_shift > 0)
                snprintf(shift, sizeof shift, "%g", b->flow_shift);
            fprintf(out, "video:     %d frames at %g fps (%.2f s), %s, flow_shift %s\n",
                    b->num_frames, b->fps, b->num_frames / b->fps,
                    manifest_format_name(m->format), shift);
        }
        print_grid(out, &m->parallel);
        fprintf(out, "output:    %s/%s (index %s/%s)\n", m->output_dir, m->name_template,
                m->output_dir, JOB_INDEX_FILE_NAME);
        if (out_exists)
            fprintf(out, "resume:    %llu of %llu items already done (complete %s); %llu to "
                    "do\n", (unsigned long long)done, (unsigned long long)n,
                    m->is_video ? "videos" : "PNGs", (unsigned long long)(n - done));
        else
            fprintf(out, "resume:    the output folder does not exist yet; %llu to do\n",
                    (unsigned long long)n);
        int fw = (int)strlen("file");
        for (size_t i = 0; i < n_first; i++)
            if ((int)strlen(first[i].file) > fw)
                fw = (int)strlen(first[i].file);
        fprintf(out, "first items:\n  %7s %s%10s %9s %5s%s  %-*s  %s\n", "index",
                dp ? "group " : "", "seed", "size", "steps",
                m->is_video ? " frames    fps     format" : "", fw, "file", "prompt");
        for (size_t i = 0; i < n_first; i++) {
            const job_item *y = &first[i];
            char size[32], group[16] = "", text[CHECK_PROMPT_CHARS + 4];
            snprintf(size, sizeof size, "%dx%d", y->width, y->height);
            if (dp)
                snprintf(group, sizeof group, "%5d ", job_assign_group(y->index, dp));
            short_text(y->prompt, text, CHECK_PROMPT_CHARS);
            char video[64] = "";
            if (m->is_video)
                snprintf(video, sizeof video, " %6d %6g %10s", y->frames, y->fps,
                         manifest_format_name(y->format));
            fprintf(out, "  %7llu %s%10llu %9s %5d%s  %-*s  %s\n", (unsigned long long)y->index,
                    group, (unsigned long long)y->seed, size, y->steps, video, fw, y->file,
                    text);
        }
        if (n > n_first)
            fprintf(out, "  ... %llu more\n", (unsigned long long)(n - n_first));
    }
    for (size_t i = 0; i < n_first; i++)
        job_item_free(&first[i]);
    manifest_free(m);
    return st;
}
