/* text_encoder_bench.c — time encoding one prompt with CPU-sized text encoders.
 *
 * usage: text_encoder_bench [--dir DIR] [--reps N] [--max-seq L] [--t5-layers N]
 *                           [--t5-width large|xxl] [--stream-budget-mib M] [--cold]
 *                           [--streamed-only]
 *                           [--tokenizers DATA]
 *
 * Writes (once, into DIR, default a temporary folder removed at the end) a pipeline folder with
 * random BF16 weights: text_encoder/ of CLIP ViT-L/14's true size (hidden 768, 12 layers,
 * 12 heads, MLP 3072, vocab 49408) and text_encoder_2/ a T5 v1.1-large-like encoder (d_model
 * 1024, 16 heads x 64, d_ff 2816, gated-gelu, 8 layers by default, vocab 32128; --t5-width xxl:
 * T5-XXL's widths, d_model 4096, 64 heads x 64, d_ff 10240, 386 MB of bf16 per layer), and the real
 * tokenizers from DATA (default $CPDIT_TOKENIZER_DATA) when given, else toy ones (the compute
 * is the same: CLIP always runs 77 tokens and T5 L tokens). Then prints one table: load time, and the best of N runs of the CLIP
 * forward (77 tokens), the T5 forward (L tokens) and text_encode (both), with the weights
 * resident (made once at load within the default budget) and streamed (a budget of
 * --stream-budget-mib, default 0: made per layer at every forward, the next layer on a helper
 * thread), and for streaming what making the T5's weights cost (s on any thread) and how
 * long its forwards waited for them (s), per T5 forward. --cold: the T5's checkpoint files are
 * dropped from the page cache (posix_fadvise DONTNEED) before every forward, so that streaming
 * reads them from the disk as a model larger than memory would.
 * A folder already in DIR (from an earlier run, or another build of this benchmark) is used as
 * it is.
 */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/host_runtime.h"
#include "tests/test_tmpdir.h"
#include "lib/text/text_encode.h"
#include "tests/text_encoder_fixtures.h"

#define BENCH_PROMPT "a photograph of an astronaut riding a horse on the moon, highly detailed"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int die(const cpdit_error *err)
{
    char buf[2048];
    fprintf(stderr, "%s\n", cpdit_error_format(err, buf, sizeof buf));
    return 1;
}

static int make_folder(const char *root, int t5_layers, int xxl, const char *data)
{
    char p[4096], src[4200];
    cpdit_error err;
    clip_fixture cf = {49408, 768, 3072, 12, 12, 77, 2, "quick_gelu", 1e-5};
    t5_fixture tf = {32128, 1024, 64, 2816, t5_layers, 16, 32, 128, "gated-gelu", 1e-6, 1, 1, 0};
    if (xxl) { /* T5 v1.1 XXL (FLUX.1's text_encoder_2) */
        tf.d_model = 4096;
        tf.d_ff = 10240;
        tf.heads = 64;
    }
    snprintf(p, sizeof p, "%s/text_encoder", root);
    if (fixture_write_clip(p, &cf, CPDIT_DTYPE_BF16, 1, &err))
        return die(&err);
    snprintf(p, sizeof p, "%s/text_encoder_2", root);
    if (fixture_write_t5(p, &tf, CPDIT_DTYPE_BF16, 2, &err))
        return die(&err);
    snprintf(src, sizeof src, "%s/clip-vit-large-patch14", data ? data : "");
    snprintf(p, sizeof p, "%s/tokenizer", root);
    if (data && data[0] && access(src, R_OK) == 0) {
        char *abs = realpath(src, NULL);
        int bad = !abs || symlink(abs, p);
        free(abs);
        snprintf(src, sizeof src, "%s/t5-v1_1-xxl", data);
        snprintf(p, sizeof p, "%s/tokenizer_2", root);
        abs = realpath(src, NULL);
        bad = bad || !abs || symlink(abs, p);
        free(abs);
        return bad;
    }
    if (fixture_write_clip_tokenizer(p))
        return 1;
    snprintf(p, sizeof p, "%s/tokenizer_2", root);
    return fixture_write_t5_tokenizer(p);
}

/* Drop the page cache's copy of the T5's checkpoint files (dir/text_encoder_2/\*.safetensors):
 * the next read comes from the disk. */
static void drop_t5_files(const char *dir)
{
    char sub[4096], path[4400];
    snprintf(sub, sizeof sub, "%s/text_encoder_2", dir);
    DIR *d = opendir(sub);
    if (!d)
        return;
    const struct dirent *e;
    while ((e = readdir(d))) {
        const size_t n = strlen(e->d_name);
        if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors"))
            continue;
        snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
        const int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    closedir(d);
}

/* Best of reps runs, in ms; -1 on error. cold: the T5's files dropped before each run. */
static double time_encode(const text_encoders *te, int which, int L, int reps, const char *cold,
                          cpdit_error *err)
{
    const char *prompt = BENCH_PROMPT;
    const int P = text_encoders_pooled_dim(te), T = text_encoders_t5_dim(te);
    float *pooled = malloc(sizeof(float) * (size_t)P);
    float *tokens = malloc(sizeof(float) * (size_t)L * T);
    int32_t clip_ids[CLIP_MAX_LENGTH], *t5_ids = malloc(sizeof(int32_t) * (size_t)L);
    double best = -1;
    if (text_encode_tokenize(te, prompt, NULL, L, clip_ids, t5_ids, NULL, err))
        goto out;
    for (int r = 0; r < reps; r++) {
        if (cold)
            drop_t5_files(cold);
        const double t0 = now_ms();
        cpdit_status st;
        if (which == 0)
            st = clip_text_model_forward(text_encoders_clip(te), clip_ids, 1, CLIP_MAX_LENGTH,
                                         NULL, pooled, err);
        else if (which == 1)
            st = t5_encoder_forward(text_encoders_t5(te), t5_ids, 1, L, tokens, err);
        else
            st = text_encode(te, &prompt, NULL, 1, L, pooled, tokens, NULL, err);
        const double dt = now_ms() - t0;
        if (st) {
            best = -1;
            goto out;
        }
        if (best < 0 || dt < best)
            best = dt;
    }
out:
    free(pooled);
    free(tokens);
    free(t5_ids);
    return best;
}

int main(int argc, char **argv)
{
    cpdit_host_runtime_init(argc, argv);
    const char *dir = NULL, *data = getenv("CPDIT_TOKENIZER_DATA");
    int reps = 3, L = T5_MAX_LENGTH_SCHNELL, t5_layers = 8, xxl = 0, cold = 0, first_mode = 0;
    long stream_mib = 0;
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "--cold") || !strcmp(argv[i], "--streamed-only")) {
            if (!strcmp(argv[i], "--cold"))
                cold = 1;
            else
                first_mode = 1;
            i--;
            continue;
        }
        if (i + 1 >= argc)
            goto usage;
        if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-seq"))
            L = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokenizers"))
            data = argv[i + 1];
        else if (!strcmp(argv[i], "--t5-layers"))
            t5_layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--t5-width") && !strcmp(argv[i + 1], "xxl"))
            xxl = 1;
        else if (!strcmp(argv[i], "--t5-width") && !strcmp(argv[i + 1], "large"))
            xxl = 0;
        else if (!strcmp(argv[i], "--stream-budget-mib"))
            stream_mib = atol(argv[i + 1]);
        else
            goto usage;
    }
    if (reps < 1 || L < 1 || L > TEXT_ENCODE_MAX_SEQUENCE_LENGTH || t5_layers < 1 ||
        stream_mib < 0)
        return fprintf(stderr, "bad option value\n"), 2;
    char *tmp = NULL;
    if (!dir) {
        tmp = tmpdir_make("text-bench");
        if (!tmp)
            return 1;
        dir = tmp;
    }
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/text_encoder/config.json", dir);
    if (access(cfg, R_OK) && make_folder(dir, t5_layers, xxl, data)) {
        fprintf(stderr, "cannot write the models into %s\n", dir);
        return 1;
    }
    printf("# text encoders in %s: CLIP-L size (768 x 12 layers) + a T5 (see its config.json; "
           "written now: d_model %d x %d layers), BF16 on disk, one prompt, T5 length %d, "
           "best of %d%s\n",
           dir, xxl ? 4096 : 1024, t5_layers, L, reps,
           cold ? ", T5 files dropped from the page cache before each forward" : "");
    printf("# %-10s %10s %12s %12s %14s %16s %14s\n", "weights", "load_ms", "clip_77_ms",
           "t5_ms", "encode_ms", "t5_make_s/fwd", "t5_wait_s/fwd");
    int rc = 0;
    for (int mode = first_mode; mode < 2 && !rc; mode++) {
        text_encoder_options o = text_encoder_options_default();
        if (mode == 1)
            o.cache_bytes = (size_t)stream_mib << 20;
        cpdit_error err;
        text_encoders *te = NULL;
        const double t0 = now_ms();
        if (text_encoders_load(dir, &o, &te, &err)) {
            rc = die(&err);
            break;
        }
        const double load = now_ms() - t0;
        const char *cold_dir = cold ? dir : NULL;
        text_weight_stats s0, s1;
        t5_encoder_weight_stats(text_encoders_t5(te), &s0);
        const double c = time_encode(te, 0, L, reps, cold_dir, &err);
        const double t = c < 0 ? -1 : time_encode(te, 1, L, reps, cold_dir, &err);
        const double e = t < 0 ? -1 : time_encode(te, 2, L, reps, cold_dir, &err);
        t5_encoder_weight_stats(text_encoders_t5(te), &s1);
        const double n_t5 = 2.0 * reps; /* forwards of the T5: alone, then in text_encode */
        if (e < 0)
            rc = die(&err);
        else
            printf("  %-10s %10.1f %12.1f %12.1f %14.1f %16.2f %14.2f\n",
                   s1.streaming ? "streamed" : "resident", load, c, t, e,
                   (s1.create_s - s0.create_s) / n_t5, (s1.stall_s - s0.stall_s) / n_t5);
        text_encoders_free(te);
    }
    if (tmp) {
        tmpdir_remove(tmp);
        free(tmp);
    }
    return rc;
usage:
    fprintf(stderr, "usage: text_encoder_bench [--dir DIR] [--reps N] [--max-seq L] "
                    "[--t5-layers N] [--t5-width large|xxl] [--stream-budget-mib M] [--cold] "
                    "[--streamed-only] [--tokenizers DATA]\n");
    return 2;
}
