/* job_items.h — a manifest expanded into items: prompt x size x seed x repeat, streamed.
 *
 * ORDER AND INDEX. Prompts come in order: the inline `prompts:` list first, then the lines of
 * `prompts_file:`. For each prompt, for each size (in order), for each seed (in order), for
 * each repeat 0..repeats-1, one item; item indices count 0, 1, 2, ... over the whole
 * manifest in that order. The same manifest bytes and prompts-file bytes always give the
 * same items with the same indices and file names, on every rank.
 *
 * PER-PROMPT SETTINGS. A prompt mapping's overrides replace the manifest's value:
 * steps/guidance/true_cfg/max_sequence_length/negative_prompt directly; `seed: S` or
 * `seeds:` replace the seed list; `width:`/`height:` replace the size list by one size (a
 * missing side comes from defaults) and `sizes:` by its list; `repeats:` the repeat count.
 * A video manifest's `num_frames:`, `fps:` and `flow_shift:` likewise; there `guidance:`
 * without `true_cfg:` is the true-CFG scale (Wan's guidance_scale).
 *
 * FILE NAMES: the output.name template (parsed by yaml/name_template.h). Text is copied; `{{` and `}}` are literal braces;
 * `{NAME}` or `{NAME:SPEC}` is replaced by the item's value:
 *   {index}   item index (0-based)      {seed}    the seed       {repeat}  0-based repeat
 *   {width}   pixels                    {height}  pixels         {steps}   sampler steps
 *   {slug}    the prompt as a file-name word list: ASCII letters and digits, lower-cased,
 *             every other run of characters (spaces, punctuation, non-ASCII) becomes one
 *             '-', no '-' at either end, at most JOB_SLUG_MAX characters (cut, then any
 *             trailing '-' dropped); "prompt" when nothing is left.
 * SPEC (integers only) is "d" (plain decimal, as without SPEC) or "0Nd" (zero-padded to at
 * least N digits, N in 1..20): {index:05d} → 00042, 123456 stays 123456 (Python's format
 * spec, without the space-padded forms). Unknown names, any other SPEC, a SPEC on {slug},
 * an unclosed '{', a lone '}', a '/' (a name, not a path), a leading '.', a name not ending
 * in the format's extension (".png"; videos ".mp4", ".webp", none for png-frames), or names that could exceed JOB_FILE_NAME_MAX bytes are errors. Two items that
 * get the same file name are an error found during expansion (JOB_ITEMS_CHECK_UNIQUE).
 *
 * MEMORY. Inline prompts are in the manifest; a prompts file is read through a byte source
 * in JOB_ITEMS_READ_CHUNK pieces and only the current line is kept, so 100 000+ prompts cost
 * O(1) memory here (the uniqueness check keeps 16 bytes per item). Cost: O(items).
 */
#ifndef CPDIT_JOB_ITEMS_H
#define CPDIT_JOB_ITEMS_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"
#include "yaml/manifest.h"
#include "yaml/name_template.h"

#ifdef __cplusplus
extern "C" {
#endif

#define JOB_SLUG_MAX NAME_TEMPLATE_SLUG_MAX
#define JOB_FILE_NAME_MAX NAME_TEMPLATE_FILE_MAX
#define JOB_PROMPT_LINE_MAX (1 << 20) /* longest prompts-file line, bytes */
#define JOB_ITEMS_READ_CHUNK (1 << 20) /* bytes asked from the byte source per read */

/* ---------------------------------------------------------------- items */
typedef struct job_item {
    uint64_t index;        /* 0-based, in the order described above */
    uint64_t prompt_index; /* 0-based: inline prompts, then the prompts file's */
    char *prompt;          /* UTF-8 */
    char *negative_prompt; /* NULL: none; "" = the empty prompt (true CFG on, as diffusers) */
    uint64_t seed;
    int width, height; /* pixels */
    int steps;
    int max_sequence_length;
    double guidance, true_cfg;
    int repeat;         /* 0-based */
    /* a video manifest (manifest.is_video): frames 4k + 1, fps of the file, flow_shift (0 =
     * the folder's scheduler's); frames 0 = an image */
    int frames;
    double fps, flow_shift;
    manifest_format format; /* the manifest's output.format */
    manifest_mark mark; /* where the prompt is written */
    int from_prompts_file; /* 1: mark.line is a line of the prompts file */
    char file[JOB_FILE_NAME_MAX + 1]; /* output file name, no folder */
} job_item;

/* Write the template's name for item into out (at least t->max_len + 1 bytes); returns the
 * length. */
size_t job_template_expand(const name_template *t, const job_item *item, char *out,
                           size_t size);

/* The {slug} of prompt into out (JOB_SLUG_MAX + 1 bytes). */
void job_slug(const char *prompt, char *out);

/* Where the prompts file's bytes come from: read up to n bytes into buf and return how many
 * (0 = end of file), or -1 with err filled. Every call on every rank must return the same
 * bytes for the expansion to agree (jobs/job_broadcast.c reads on rank 0 and broadcasts). */
typedef struct job_byte_source {
    long (*read)(void *ctx, char *buf, size_t n, cpdit_error *err);
    void *ctx;
} job_byte_source;

enum {
    JOB_ITEMS_CHECK_UNIQUE = 1u << 0 /* error when two items get the same file name */
};

typedef struct job_items job_items;

/* Start expanding m. src: where the prompts file's bytes come from; NULL = open
 * m->prompts_file here. Errors: the prompts file cannot be opened (where = its path). */
cpdit_status job_items_open(const manifest *m, const job_byte_source *src, unsigned flags,
                            job_items **out, cpdit_error *err);

/* The next item: *item points into it (valid until the next call or close), or NULL after
 * the last one. Errors: bad prompts-file lines ("PROMPTS_FILE:LINE: message"), read
 * errors, duplicate file names ("MANIFEST:LINE:COL" of output.name). */
cpdit_status job_items_next(job_items *it, const job_item **item, cpdit_error *err);

/* Prompts seen so far (all of them once next has returned NULL). */
uint64_t job_items_prompt_count(const job_items *it);

void job_items_close(job_items *it);

/* Deep copy (prompt and negative_prompt duplicated); free with job_item_free. */
cpdit_status job_item_copy(job_item *dst, const job_item *src, cpdit_error *err);
void job_item_free(job_item *item);

/* One full pass: the number of items and prompts (either pointer may be NULL), with the
 * uniqueness check. */
cpdit_status job_items_count(const manifest *m, const job_byte_source *src, uint64_t *n_items,
                             uint64_t *n_prompts, cpdit_error *err);

/* ---------------------------------------------------------------- assignment (job_assign.c)
 * Item i goes to dp group i mod dp: round-robin by index. Deterministic (same manifest and
 * same dp → same assignment, whatever the ring/ulysses degrees or the rank count), needs no
 * communication, and keeps the groups within one item of each other in count; with items of
 * different sizes the cost is balanced only on average. */
int job_assign_group(uint64_t index, int dp);
/* Items of group g among n items. */
uint64_t job_assign_group_count(uint64_t n_items, int dp, int group);

#ifdef __cplusplus
}
#endif
#endif
