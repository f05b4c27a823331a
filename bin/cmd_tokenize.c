/* cmd_tokenize.c — `cpdit tokenize --model DIR [--max-sequence-length N] PROMPT`.
 *
 * Prints the token ids the pipeline's text encoders would get for PROMPT, unpadded and with
 * the special tokens each tokenizer adds. For FLUX.1, exactly two lines:
 *   clip: <ids>      (tokenizer/: CLIP BPE, cut to 77 ids as FluxPipeline does)
 *   t5: <ids>        (tokenizer_2/: T5 Unigram, cut to N ids, default 512)
 * For a Wan folder (model_index.json's _class_name Wan*, e.g. WanPipeline), one line:
 *   umt5: <ids>      (tokenizer/: google/umt5-xxl's T5TokenizerFast, cut to N ids, default
 *                    512, after WanPipeline's prompt_clean whitespace step; see
 *                    lib/text/prompt_clean.h for what is not reproduced)
 * DIR is a diffusers-layout folder (only model_index.json and the tokenizer folders need to
 * be there) or builtin:NAME, as for `cpdit run`.
 * Over-long prompts are cut with a warning on stderr, as diffusers warns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bin/cli.h"
#include "lib/builtin/builtin_model.h"
#include "lib/io/model_folder.h"
#include "lib/text/prompt_clean.h"
#include "lib/text/tokenizer_clip.h"
#include "lib/text/tokenizer_t5.h"

#define SUB "tokenize"
#define WAN_PIPELINE_PREFIX "Wan" /* WanPipeline, WanImageToVideoPipeline, ...: UMT5 */

static void print_ids(const char *label, const int32_t *ids, size_t n)
{
    printf("%s:", label);
    for (size_t i = 0; i < n; i++)
        printf(" %d", (int)ids[i]);
    putchar('\n');
}

/* The folder of component inside the model folder, or NULL with err filled. */
static char *component_dir(const model_folder *mf, const char *component, cpdit_error *err)
{
    char *dir = NULL;
    if (model_folder_component_dir(mf, component, &dir, err) != CPDIT_OK)
        return NULL;
    return dir;
}

/* A Wan folder: tokenizer/ is UMT5 (a T5 Unigram tokenizer); prints "umt5: ids". */
static int run_tokenize_umt5(const model_folder *mf, const char *prompt, size_t max_seq)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    t5_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0, clean_len = 0;
    int cut = 0, rc = CLI_EXIT_OK;
    char *clean = NULL;
    char *dir = component_dir(mf, "tokenizer", &err);
    if (!dir || t5_tokenizer_load(dir, &tok, &err) != CPDIT_OK ||
        prompt_whitespace_clean(prompt, strlen(prompt), &clean, &clean_len, &err) != CPDIT_OK ||
        t5_tokenizer_encode(tok, clean, clean_len, max_seq, &ids, &n_ids, &cut, &err) !=
            CPDIT_OK) {
        rc = cli_report(&err);
    } else {
        if (prompt_has_html_entity(clean, clean_len))
            fprintf(stderr, "cpdit: " SUB ": warning: the prompt has '&' entities; WanPipeline "
                            "HTML-unescapes them first, cpdit does not\n");
        if (cut)
            fprintf(stderr, "cpdit: " SUB ": warning: the prompt is longer than %zu UMT5 "
                            "tokens (--max-sequence-length); the rest was cut off\n", max_seq);
        print_ids("umt5", ids, n_ids);
        if (fflush(stdout) != 0) {
            perror("cpdit: " SUB ": stdout");
            rc = CLI_EXIT_RUNTIME;
        }
    }
    free(ids);
    free(clean);
    t5_tokenizer_free(tok);
    free(dir);
    return rc;
}

/* The pipeline class names a Wan pipeline. */
static int is_wan_folder(const model_folder *mf)
{
    const char *cls = model_folder_pipeline_class(mf);
    return cls && strncmp(cls, WAN_PIPELINE_PREFIX, strlen(WAN_PIPELINE_PREFIX)) == 0;
}

static int run_tokenize(const char *model, const char *prompt, size_t max_seq)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    model_folder mf;
    memset(&mf, 0, sizeof mf);
    clip_tokenizer *clip = NULL;
    t5_tokenizer *t5 = NULL;
    int32_t *clip_ids = NULL, *t5_ids = NULL;
    size_t n_clip = 0, n_t5 = 0;
    int clip_cut = 0, t5_cut = 0, rc = CLI_EXIT_OK;
    char *clip_dir = NULL, *t5_dir = NULL;

    char dir[4096]; /* builtin:NAME → its cache folder, written when missing (as `run`) */
    if (cli_check_text_option("prompt", prompt, &err) != CPDIT_OK || /* UTF-8, as run's */
        builtin_model_resolve(model, dir, sizeof dir, &err) != CPDIT_OK ||
        model_folder_open(&mf, dir, &err) != CPDIT_OK)
        goto fail;
    if (is_wan_folder(&mf)) {
        rc = run_tokenize_umt5(&mf, prompt, max_seq);
        goto done;
    }
    clip_dir = component_dir(&mf, "tokenizer", &err);
    if (!clip_dir || clip_tokenizer_load(clip_dir, &clip, &err) != CPDIT_OK)
        goto fail;
    t5_dir = component_dir(&mf, "tokenizer_2", &err);
    if (!t5_dir || t5_tokenizer_load(t5_dir, &t5, &err) != CPDIT_OK)
        goto fail;
    size_t len = strlen(prompt);
    if (clip_tokenizer_encode(clip, prompt, len, CLIP_MAX_LENGTH, &clip_ids, &n_clip, &clip_cut,
                              &err) != CPDIT_OK ||
        t5_tokenizer_encode(t5, prompt, len, max_seq, &t5_ids, &n_t5, &t5_cut, &err) != CPDIT_OK)
        goto fail;
    if (clip_cut)
        fprintf(stderr, "cpdit: " SUB ": warning: the prompt is longer than %d CLIP tokens; "
                        "the rest was cut off\n", CLIP_MAX_LENGTH);
    if (t5_cut)
        fprintf(stderr, "cpdit: " SUB ": warning: the prompt is longer than %zu T5 tokens "
                        "(--max-sequence-length); the rest was cut off\n", max_seq);
    print_ids("clip", clip_ids, n_clip);
    print_ids("t5", t5_ids, n_t5);
    if (fflush(stdout) != 0) {
        perror("cpdit: " SUB ": stdout");
        rc = CLI_EXIT_RUNTIME;
    }
    goto done;
fail:
    rc = cli_report(&err);
done:
    free(clip_ids);
    free(t5_ids);
    clip_tokenizer_free(clip);
    t5_tokenizer_free(t5);
    free(clip_dir);
    free(t5_dir);
    model_folder_close(&mf);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL;
    long max_seq = T5_MAX_LENGTH_DEV;
    int options_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (options_done || a[0] != '-' || a[1] == '\0') {
            if (prompt)
                return cli_usage_error(SUB, "expected one PROMPT, got another: '%s' (quote the "
                                            "prompt)", a);
            prompt = a;
            continue;
        }
        const char *value = NULL;
        size_t name_len = strcspn(a, "=");
        if (a[name_len] == '=')
            value = a + name_len + 1;
        if (strcmp(a, "--") == 0) {
            options_done = 1;
        } else if (strncmp(a, "--model", name_len) == 0 && name_len == strlen("--model")) {
            if (!value && (value = i + 1 < argc ? argv[++i] : NULL) == NULL)
                return cli_usage_error(SUB, "--model needs a folder");
            model = value;
        } else if (strncmp(a, "--max-sequence-length", name_len) == 0 &&
                   name_len == strlen("--max-sequence-length")) {
            if (!value && (value = i + 1 < argc ? argv[++i] : NULL) == NULL)
                return cli_usage_error(SUB, "--max-sequence-length needs a number");
            /* FluxPipeline refuses more than 512 */
            if (cli_parse_int(SUB, "--max-sequence-length", value, 1, T5_MAX_LENGTH_DEV,
                              &max_seq) != 0)
                return CLI_EXIT_USAGE;
        } else {
            return cli_usage_error(SUB, "unknown option '%s'", a);
        }
    }
    if (!model)
        return cli_usage_error(SUB, "--model DIR is required");
    if (!prompt)
        return cli_usage_error(SUB, "PROMPT is missing");
    return run_tokenize(model, prompt, (size_t)max_seq);
}
