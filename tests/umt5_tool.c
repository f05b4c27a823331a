/* umt5_tool.c — helper of tests/umt5_encoder.sh:
 *   make-inputs OUT --lengths N,N,... --seq S --vocab V [--dtype I64|I32|F32] [--no-mask]
 *               [--seed N] [--mask-seq M]
 *       input_ids (B, S) (B = the number of lengths) as a tokenizer gives them: item b has
 *       lengths[b] real ids (random in [2, V), the last one </s> = 1), then <pad> = 0;
 *       attention_mask (B, S) 1 / 0 in the same dtype (not with --no-mask; --mask-seq M: only
 *       its first M columns, a bad input)
 *   prompt-embeds MODEL INPUTS OUT [--weight-format fp32|native]
 *       umt5_prompt_embeds (lib/text/umt5_prompt.h): prompt_embeds (B, S, d_model) F32
 *   time MODEL --seq S [--len N] [--reps R] [--weight-format fp32|native]
 *       the best of R forwards (default 3) of one item of S tokens, N of them real with the
 *       mask (default: no mask); prints "forward_ms <best wall> cpu_ms <best process CPU>"
 * Exit 0 on success, 1 on error, 2 on bad usage.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/io/safetensors.h"
#include "lib/text/t5_encoder.h"
#include "lib/text/umt5_prompt.h"

#define MAX_ITEMS 64
#define EOS_ID 1
#define FIRST_WORD_ID 2 /* after <pad> 0 and </s> 1 */

static int usage(void)
{
    fprintf(stderr, "usage: umt5_tool make-inputs|prompt-embeds|time ... (see the source)\n");
    return 2;
}

static int fail(const cpdit_error *err)
{
    char buf[2048];
    fprintf(stderr, "%s\n", cpdit_error_format(err, buf, sizeof buf));
    return 1;
}

static const char *opt(int argc, char **argv, const char *name)
{
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return NULL;
}

static int opt_int(int argc, char **argv, const char *name, int def)
{
    const char *v = opt(argc, argv, name);
    return v ? atoi(v) : def;
}

static int has_flag(int argc, char **argv, const char *name)
{
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], name))
            return 1;
    return 0;
}

static text_encoder_options options(int argc, char **argv)
{
    text_encoder_options o = text_encoder_options_default();
    const char *wf = opt(argc, argv, "--weight-format");
    if (wf && cpdit_weight_format_from_name(wf) >= 0)
        o.weight_format = (cpdit_weight_format)cpdit_weight_format_from_name(wf);
    return o;
}

static int cmd_make_inputs(int argc, char **argv)
{
    const int S = opt_int(argc, argv, "--seq", 16), V = opt_int(argc, argv, "--vocab", 1000);
    const char *lens_s = opt(argc, argv, "--lengths"), *dt_s = opt(argc, argv, "--dtype");
    const cpdit_dtype dt = dt_s ? cpdit_dtype_from_name(dt_s) : CPDIT_DTYPE_I64;
    unsigned seed = (unsigned)opt_int(argc, argv, "--seed", 1);
    int lens[MAX_ITEMS], B = 0;
    if (argc < 3 || !lens_s || S < 1 || V <= FIRST_WORD_ID || dt == CPDIT_DTYPE_INVALID)
        return usage();
    for (const char *p = lens_s; *p && B < MAX_ITEMS; B++) {
        lens[B] = atoi(p);
        if (lens[B] < 0 || lens[B] > S)
            return usage();
        p = strchr(p, ',') ? strchr(p, ',') + 1 : "";
    }
    if (B < 1)
        return usage();
    float *ids = malloc(sizeof(float) * (size_t)B * S);
    float *mask = malloc(sizeof(float) * (size_t)B * S);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            seed = seed * 1664525u + 1013904223u;
            const int real = s < lens[b];
            const int word = FIRST_WORD_ID + (int)((seed >> 8) % (unsigned)(V - FIRST_WORD_ID));
            ids[b * S + s] = (float)(!real ? 0 : s == lens[b] - 1 ? EOS_ID : word);
            mask[b * S + s] = (float)real;
        }
    const int MS = opt_int(argc, argv, "--mask-seq", S);
    if (MS < 1 || MS > S)
        return free(ids), free(mask), usage();
    for (int b = 0; b < B; b++) /* (B, MS): the first MS columns */
        memmove(mask + (size_t)b * MS, mask + (size_t)b * S, (size_t)MS * sizeof *mask);
    const int64_t shape[2] = {B, S}, mshape[2] = {B, MS};
    safetensors_write_tensor t[2] = {{"input_ids", dt, 2, shape, ids, CPDIT_DTYPE_F32},
                                     {"attention_mask", dt, 2, mshape, mask, CPDIT_DTYPE_F32}};
    /* the integer dtypes are not conversion targets of the writer: convert here */
    int64_t *i64 = NULL;
    int32_t *i32 = NULL;
    if (dt == CPDIT_DTYPE_I64 || dt == CPDIT_DTYPE_I32) {
        i64 = malloc(sizeof *i64 * 2 * (size_t)B * S);
        i32 = malloc(sizeof *i32 * 2 * (size_t)B * S);
        for (size_t i = 0; i < (size_t)B * S; i++) {
            i64[i] = (int64_t)ids[i];
            i64[(size_t)B * S + i] = (int64_t)mask[i]; /* the first B * MS are used */
            i32[i] = (int32_t)ids[i];
            i32[(size_t)B * S + i] = (int32_t)mask[i];
        }
        for (int k = 0; k < 2; k++) {
            t[k].data = dt == CPDIT_DTYPE_I64 ? (const void *)(i64 + (size_t)k * B * S)
                                              : (const void *)(i32 + (size_t)k * B * S);
            t[k].src_dtype = dt;
        }
    }
    cpdit_error err;
    const int rc = safetensors_write(argv[2], t, has_flag(argc, argv, "--no-mask") ? 1 : 2,
                                     NULL, 0, &err)
                       ? fail(&err)
                       : 0;
    free(ids);
    free(mask);
    free(i64);
    free(i32);
    return rc;
}

/* input_ids and attention_mask of path as int32 (B, S). */
static int read_inputs(const char *path, int32_t **ids, int32_t **mask, int *B, int *S,
                       cpdit_error *err)
{
    safetensors_file *f = NULL;
    if (safetensors_open(&f, path, err))
        return -1;
    const safetensors_tensor *t[2] = {safetensors_find(f, "input_ids"),
                                      safetensors_find(f, "attention_mask")};
    int rc = 0;
    if (!t[0] || !t[1] || t[0]->ndim != 2 || t[0]->nelem != t[1]->nelem) {
        fprintf(stderr, "%s: needs input_ids and attention_mask (B, S)\n", path);
        rc = -1;
    } else {
        *B = (int)t[0]->shape[0];
        *S = (int)t[0]->shape[1];
        int32_t **dst[2] = {ids, mask};
        float *tmp = malloc(sizeof(float) * t[0]->nelem);
        for (int k = 0; k < 2 && !rc; k++) {
            *dst[k] = malloc(sizeof(int32_t) * t[0]->nelem);
            rc = safetensors_tensor_read_f32(t[k], tmp, t[k]->nelem, err) ? -1 : 0;
            for (size_t i = 0; !rc && i < t[0]->nelem; i++)
                (*dst[k])[i] = (int32_t)tmp[i];
        }
        free(tmp);
    }
    safetensors_close(f);
    return rc;
}

static int cmd_prompt_embeds(int argc, char **argv)
{
    if (argc < 5)
        return usage();
    cpdit_error err;
    text_encoder_options o = options(argc, argv);
    t5_encoder *m = NULL;
    int32_t *ids = NULL, *mask = NULL;
    int B = 0, S = 0, rc = 0;
    if (t5_encoder_load(argv[2], &o, &m, &err))
        return fail(&err);
    if (read_inputs(argv[3], &ids, &mask, &B, &S, &err)) {
        t5_encoder_free(m);
        return 1;
    }
    const int D = t5_encoder_get_config(m)->d_model;
    float *e = malloc(sizeof(float) * (size_t)B * S * D);
    const int64_t shape[3] = {B, S, D};
    safetensors_write_tensor t = {"prompt_embeds", CPDIT_DTYPE_F32, 3, shape, e, CPDIT_DTYPE_F32};
    if (umt5_prompt_embeds(m, ids, mask, B, S, e, NULL, &err) ||
        safetensors_write(argv[4], &t, 1, NULL, 0, &err))
        rc = fail(&err);
    free(e);
    free(ids);
    free(mask);
    t5_encoder_free(m);
    return rc;
}

static double now_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmd_time(int argc, char **argv)
{
    const int S = opt_int(argc, argv, "--seq", 512), N = opt_int(argc, argv, "--len", -1);
    const int reps = opt_int(argc, argv, "--reps", 3);
    if (argc < 3 || S < 1 || N > S || reps < 1)
        return usage();
    cpdit_error err;
    text_encoder_options o = options(argc, argv);
    t5_encoder *m = NULL;
    if (t5_encoder_load(argv[2], &o, &m, &err))
        return fail(&err);
    const t5_encoder_config *c = t5_encoder_get_config(m);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)S), *mask = malloc(sizeof(int32_t) * (size_t)S);
    float *h = malloc(sizeof(float) * (size_t)S * c->d_model);
    for (int s = 0; s < S; s++) {
        ids[s] = (int32_t)((s * 7919 + 13) % c->vocab_size);
        mask[s] = N < 0 || s < N;
    }
    double best = -1, best_cpu = -1;
    int rc = 0;
    for (int r = 0; r < reps && !rc; r++) {
        const double t0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
        if (t5_encoder_forward_masked(m, ids, N < 0 ? NULL : mask, 1, S, h, &err))
            rc = fail(&err);
        const double dt = now_ms(CLOCK_MONOTONIC) - t0;
        const double dc = now_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
        best = best < 0 || dt < best ? dt : best;
        best_cpu = best_cpu < 0 || dc < best_cpu ? dc : best_cpu;
    }
    if (!rc)
        printf("forward_ms %.1f cpu_ms %.1f (%s, %d layers, d_model %d, %d heads, d_ff %d, "
               "%d tokens%s)\n",
               best, best_cpu, c->per_layer_bias ? "umt5" : "t5", c->num_layers, c->d_model,
               c->num_heads, c->d_ff, S, N < 0 ? ", no mask" : ", masked");
    free(ids);
    free(mask);
    free(h);
    t5_encoder_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (!strcmp(argv[1], "make-inputs"))
        return cmd_make_inputs(argc, argv);
    if (!strcmp(argv[1], "prompt-embeds"))
        return cmd_prompt_embeds(argc, argv);
    if (!strcmp(argv[1], "time"))
        return cmd_time(argc, argv);
    return usage();
}
