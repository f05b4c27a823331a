/* text_encoder_tool.c — helper of tests/text_encoders.sh:
 *   make-clip DIR [--vocab N --hidden N --intermediate N --layers N --heads N --positions N
 *                  --eos N --act NAME --dtype F32|BF16|F16 --seed N]
 *   make-t5 DIR [--vocab N --d-model N --d-kv N --d-ff N --layers N --heads N --buckets N
 *                --max-distance N --ff-proj NAME --dtype D --seed N --shards 1|2 --embed
 *                shared|encoder --type t5|umt5]
 *       a random model in the transformers layout (text_encoder_fixtures.h; tiny defaults)
 *   make-pipeline DIR [--tokenizers DATA]
 *       tokenizer/, tokenizer_2/ (toy ones, or symlinks to DATA/clip-vit-large-patch14 and
 *       DATA/t5-v1_1-xxl), text_encoder/ and text_encoder_2/ (tiny random, bf16)
 *   make-ids OUT --batch B --seq S --vocab V [--eos ID --eos-at K --seed N]
 *       input_ids (B, S) I32, random in [0, V) (ids at columns >= K + b set to eos)
 *   forward clip|t5 MODEL IDS OUT [--stream] [--weight-format fp32|native]
 *       cpdit's forward: last_hidden_state (and pooler_output for clip), F32
 *   encode PIPELINE OUT_PREFIX --max-seq L PROMPT...
 *       text_encode: OUT_PREFIX.clip_ids / .t5_ids (input_ids) and OUT_PREFIX.clip (pooler_
 *       output) / .t5 (last_hidden_state), each a .safetensors file
 *   compare GOT REF --tol T [--only NAME|all]
 *       every tensor of REF (or only NAME) must be in GOT with its shape and
 *       max|got-ref|/max|ref| <= T
 * Exit 0 on success, 1 on a failed comparison or error, 2 on bad usage.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/text/clip_text_model.h"
#include "lib/io/safetensors.h"
#include "lib/text/t5_encoder.h"
#include "lib/text/text_encode.h"
#include "tests/text_encoder_fixtures.h"

static int usage(void)
{
    fprintf(stderr, "usage: text_encoder_tool make-clip|make-t5|make-pipeline|make-ids|"
                    "forward|encode|compare ... (see the source)\n");
    return 2;
}

static int fail(const cpdit_error *err)
{
    char buf[2048];
    fprintf(stderr, "%s\n", cpdit_error_format(err, buf, sizeof buf));
    return 1;
}

/* The value after option `name` in argv[i..), or NULL. */
static const char *opt(int argc, char **argv, int from, const char *name)
{
    for (int i = from; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return NULL;
}

static int opt_int(int argc, char **argv, int from, const char *name, int def)
{
    const char *v = opt(argc, argv, from, name);
    return v ? atoi(v) : def;
}

static cpdit_dtype opt_dtype(int argc, char **argv, int from)
{
    const char *v = opt(argc, argv, from, "--dtype");
    return v ? cpdit_dtype_from_name(v) : CPDIT_DTYPE_F32;
}

static int write_f32(const char *path, const char *name, const float *data, int ndim,
                     const int64_t *shape, cpdit_error *err)
{
    safetensors_write_tensor t = {name, CPDIT_DTYPE_F32, ndim, shape, data, CPDIT_DTYPE_F32};
    return safetensors_write(path, &t, 1, NULL, 0, err) ? -1 : 0;
}

static int write_ids(const char *path, const int32_t *ids, int B, int S, cpdit_error *err)
{
    const int64_t shape[2] = {B, S};
    safetensors_write_tensor t = {"input_ids", CPDIT_DTYPE_I32, 2, shape, ids, CPDIT_DTYPE_I32};
    return safetensors_write(path, &t, 1, NULL, 0, err) ? -1 : 0;
}

static int cmd_make(int argc, char **argv, int clip)
{
    cpdit_error err;
    const uint32_t seed = (uint32_t)opt_int(argc, argv, 3, "--seed", 1);
    const cpdit_dtype dt = opt_dtype(argc, argv, 3);
    if (argc < 3 || dt == CPDIT_DTYPE_INVALID)
        return usage();
    if (clip) {
        clip_fixture f = clip_fixture_tiny();
        f.vocab = opt_int(argc, argv, 3, "--vocab", f.vocab);
        f.hidden = opt_int(argc, argv, 3, "--hidden", f.hidden);
        f.intermediate = opt_int(argc, argv, 3, "--intermediate", f.intermediate);
        f.layers = opt_int(argc, argv, 3, "--layers", f.layers);
        f.heads = opt_int(argc, argv, 3, "--heads", f.heads);
        f.max_positions = opt_int(argc, argv, 3, "--positions", f.max_positions);
        f.eos_token_id = opt_int(argc, argv, 3, "--eos", f.eos_token_id);
        if (opt(argc, argv, 3, "--act"))
            f.act = opt(argc, argv, 3, "--act");
        return fixture_write_clip(argv[2], &f, dt, seed, &err) ? fail(&err) : 0;
    }
    t5_fixture f = t5_fixture_tiny();
    f.vocab = opt_int(argc, argv, 3, "--vocab", f.vocab);
    f.d_model = opt_int(argc, argv, 3, "--d-model", f.d_model);
    f.d_kv = opt_int(argc, argv, 3, "--d-kv", f.d_kv);
    f.d_ff = opt_int(argc, argv, 3, "--d-ff", f.d_ff);
    f.layers = opt_int(argc, argv, 3, "--layers", f.layers);
    f.heads = opt_int(argc, argv, 3, "--heads", f.heads);
    f.buckets = opt_int(argc, argv, 3, "--buckets", f.buckets);
    f.max_distance = opt_int(argc, argv, 3, "--max-distance", f.max_distance);
    f.shards = opt_int(argc, argv, 3, "--shards", f.shards);
    if (opt(argc, argv, 3, "--ff-proj"))
        f.ff_proj = opt(argc, argv, 3, "--ff-proj");
    const char *type = opt(argc, argv, 3, "--type"); /* t5 (default) or umt5 */
    if (type && strcmp(type, "t5") && strcmp(type, "umt5"))
        return usage();
    f.umt5 = type && !strcmp(type, "umt5");
    const char *embed = opt(argc, argv, 3, "--embed");
    if (embed)
        f.embed_as_shared = strcmp(embed, "encoder") != 0;
    return fixture_write_t5(argv[2], &f, dt, seed, &err) ? fail(&err) : 0;
}

static int cmd_make_pipeline(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    const char *root = argv[2], *data = opt(argc, argv, 3, "--tokenizers");
    char p[4096];
    cpdit_error err;
    clip_fixture cf = clip_fixture_tiny();
    t5_fixture tf = t5_fixture_tiny();
    cf.eos_token_id = CLIP_LEGACY_EOS_TOKEN_ID; /* FLUX.1's text_encoder/config.json */
    if (data) {
        cf.vocab = 49408;
        tf.vocab = 32128;
    }
    mkdir(root, 0755);
    snprintf(p, sizeof p, "%s/text_encoder", root);
    if (fixture_write_clip(p, &cf, CPDIT_DTYPE_BF16, 21, &err))
        return fail(&err);
    snprintf(p, sizeof p, "%s/text_encoder_2", root);
    if (fixture_write_t5(p, &tf, CPDIT_DTYPE_BF16, 22, &err))
        return fail(&err);
    if (data) {
        char src[4200], *abs;
        snprintf(src, sizeof src, "%s/clip-vit-large-patch14", data);
        snprintf(p, sizeof p, "%s/tokenizer", root);
        abs = realpath(src, NULL);
        if (!abs || symlink(abs, p))
            return free(abs), fprintf(stderr, "cannot link %s\n", src), 1;
        free(abs);
        snprintf(src, sizeof src, "%s/t5-v1_1-xxl", data);
        snprintf(p, sizeof p, "%s/tokenizer_2", root);
        abs = realpath(src, NULL);
        if (!abs || symlink(abs, p))
            return free(abs), fprintf(stderr, "cannot link %s\n", src), 1;
        free(abs);
        return 0;
    }
    snprintf(p, sizeof p, "%s/tokenizer", root);
    if (fixture_write_clip_tokenizer(p))
        return 1;
    snprintf(p, sizeof p, "%s/tokenizer_2", root);
    return fixture_write_t5_tokenizer(p) ? 1 : 0;
}

static int cmd_make_ids(int argc, char **argv)
{
    const int B = opt_int(argc, argv, 3, "--batch", 1), S = opt_int(argc, argv, 3, "--seq", 8);
    const int V = opt_int(argc, argv, 3, "--vocab", 1000), eos = opt_int(argc, argv, 3, "--eos", 0);
    const int eos_at = opt_int(argc, argv, 3, "--eos-at", -1);
    uint32_t seed = (uint32_t)opt_int(argc, argv, 3, "--seed", 1);
    if (argc < 3 || B < 1 || S < 1 || V < 1)
        return usage();
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)B * S);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            seed = seed * 1664525u + 1013904223u;
            ids[b * S + s] = (eos_at >= 0 && s >= eos_at + b) ? eos : (int32_t)((seed >> 8) % V);
        }
    cpdit_error err;
    const int rc = write_ids(argv[2], ids, B, S, &err) ? fail(&err) : 0;
    free(ids);
    return rc;
}

static int cmd_forward(int argc, char **argv)
{
    if (argc < 6)
        return usage();
    const int clip = !strcmp(argv[2], "clip");
    text_encoder_options o = text_encoder_options_default();
    for (int i = 6; i < argc; i++) {
        if (!strcmp(argv[i], "--stream"))
            o.cache_bytes = 0;
        if (!strcmp(argv[i], "--weight-format") && i + 1 < argc) {
            const int f = cpdit_weight_format_from_name(argv[++i]);
            if (f < 0)
                return usage();
            o.weight_format = (cpdit_weight_format)f;
        }
    }
    cpdit_error err;
    safetensors_file *in = NULL;
    if (safetensors_open(&in, argv[4], &err))
        return fail(&err);
    const safetensors_tensor *t = safetensors_find(in, "input_ids");
    if (!t || t->ndim != 2) {
        safetensors_close(in);
        fprintf(stderr, "%s: no 2-D input_ids\n", argv[4]);
        return 1;
    }
    const int B = (int)t->shape[0], S = (int)t->shape[1];
    int32_t *ids = malloc(sizeof(int32_t) * t->nelem);
    float *tmp = malloc(sizeof(float) * t->nelem);
    safetensors_tensor_read_f32(t, tmp, t->nelem, &err);
    for (size_t i = 0; i < t->nelem; i++)
        ids[i] = (int32_t)tmp[i];
    free(tmp);
    safetensors_close(in);
    int rc = 0;
    float *h = NULL, *pooled = NULL;
    if (clip) {
        clip_text_model *m = NULL;
        if (clip_text_model_load(argv[3], &o, &m, &err))
            return free(ids), fail(&err);
        const int D = clip_text_model_config(m)->hidden_size;
        h = malloc(sizeof(float) * (size_t)B * S * D);
        pooled = malloc(sizeof(float) * (size_t)B * D);
        if (clip_text_model_forward(m, ids, B, S, h, pooled, &err)) {
            rc = fail(&err);
        } else {
            const int64_t sh[3] = {B, S, D}, sp[2] = {B, D};
            safetensors_write_tensor w[2] = {
                {"last_hidden_state", CPDIT_DTYPE_F32, 3, sh, h, CPDIT_DTYPE_F32},
                {"pooler_output", CPDIT_DTYPE_F32, 2, sp, pooled, CPDIT_DTYPE_F32}};
            if (safetensors_write(argv[5], w, 2, NULL, 0, &err))
                rc = fail(&err);
        }
        clip_text_model_free(m);
    } else {
        t5_encoder *m = NULL;
        if (t5_encoder_load(argv[3], &o, &m, &err))
            return free(ids), fail(&err);
        const int D = t5_encoder_get_config(m)->d_model;
        h = malloc(sizeof(float) * (size_t)B * S * D);
        const int64_t sh[3] = {B, S, D};
        if (t5_encoder_forward(m, ids, B, S, h, &err) ||
            write_f32(argv[5], "last_hidden_state", h, 3, sh, &err))
            rc = fail(&err);
        t5_encoder_free(m);
    }
    free(ids);
    free(h);
    free(pooled);
    return rc;
}

static int cmd_encode(int argc, char **argv)
{
    const int L = opt_int(argc, argv, 4, "--max-seq", 16);
    int first = 4;
    while (first < argc && !strncmp(argv[first], "--", 2))
        first += 2;
    const int B = argc - first;
    if (argc < 4 || B < 1)
        return usage();
    cpdit_error err;
    text_encoders *te = NULL;
    text_encoder_options eo = text_encoder_options_default();
    const char *wf = opt(argc, argv, 4, "--weight-format");
    if (wf && cpdit_weight_format_from_name(wf) < 0)
        return usage();
    if (wf)
        eo.weight_format = (cpdit_weight_format)cpdit_weight_format_from_name(wf);
    if (text_encoders_load(argv[2], &eo, &te, &err))
        return fail(&err);
    const int P = text_encoders_pooled_dim(te), T = text_encoders_t5_dim(te);
    float *pooled = malloc(sizeof(float) * (size_t)B * P);
    float *tokens = malloc(sizeof(float) * (size_t)B * L * T);
    int32_t *cids = malloc(sizeof(int32_t) * (size_t)B * CLIP_MAX_LENGTH);
    int32_t *tids = malloc(sizeof(int32_t) * (size_t)B * L);
    int *flags = calloc((size_t)B, sizeof(int));
    int rc = 0;
    cpdit_status st = text_encode(te, (const char *const *)argv + first, NULL, B, L, pooled,
                                  tokens, flags, &err);
    for (int b = 0; b < B && !st; b++)
        st = text_encode_tokenize(te, argv[first + b], NULL, L, cids + b * CLIP_MAX_LENGTH,
                                  tids + (size_t)b * L, NULL, &err);
    if (st) {
        rc = fail(&err);
    } else {
        char p[4096];
        const int64_t sp[2] = {B, P}, st3[3] = {B, L, T};
        for (int b = 0; b < B; b++)
            if (flags[b])
                fprintf(stderr, "warning: prompt %d truncated (flags %d)\n", b, flags[b]);
        snprintf(p, sizeof p, "%s.clip_ids.safetensors", argv[3]);
        if (!rc && write_ids(p, cids, B, CLIP_MAX_LENGTH, &err))
            rc = fail(&err);
        snprintf(p, sizeof p, "%s.t5_ids.safetensors", argv[3]);
        if (!rc && write_ids(p, tids, B, L, &err))
            rc = fail(&err);
        snprintf(p, sizeof p, "%s.clip.safetensors", argv[3]);
        if (!rc && write_f32(p, "pooler_output", pooled, 2, sp, &err))
            rc = fail(&err);
        snprintf(p, sizeof p, "%s.t5.safetensors", argv[3]);
        if (!rc && write_f32(p, "last_hidden_state", tokens, 3, st3, &err))
            rc = fail(&err);
    }
    text_encoders_free(te);
    free(pooled);
    free(tokens);
    free(cids);
    free(tids);
    free(flags);
    return rc;
}

static int cmd_compare(int argc, char **argv)
{
    const char *tol_s = opt(argc, argv, 4, "--tol");
    if (argc < 4 || !tol_s)
        return usage();
    const double tol = atof(tol_s);
    const char *only = opt(argc, argv, 4, "--only");
    if (only && !strcmp(only, "all"))
        only = NULL;
    cpdit_error err;
    safetensors_file *a = NULL, *r = NULL;
    if (safetensors_open(&a, argv[2], &err) || safetensors_open(&r, argv[3], &err)) {
        safetensors_close(a);
        return fail(&err);
    }
    int rc = 0, compared = 0;
    for (size_t i = 0; i < safetensors_count(r); i++) {
        const safetensors_tensor *tr = safetensors_tensor_at(r, i);
        if (only && strcmp(tr->name, only))
            continue;
        const safetensors_tensor *ta = safetensors_find(a, tr->name);
        if (!ta || ta->nelem != tr->nelem || ta->ndim != tr->ndim ||
            memcmp(ta->shape, tr->shape, sizeof(int64_t) * (size_t)tr->ndim)) {
            printf("%s: missing or of another shape\n", tr->name);
            rc = 1;
            continue;
        }
        float *x = malloc(sizeof(float) * tr->nelem), *y = malloc(sizeof(float) * tr->nelem);
        safetensors_tensor_read_f32(ta, x, ta->nelem, &err);
        safetensors_tensor_read_f32(tr, y, tr->nelem, &err);
        double md = 0, mr = 0;
        for (size_t k = 0; k < tr->nelem; k++) {
            md = fmax(md, fabs((double)x[k] - y[k]));
            mr = fmax(mr, fabs((double)y[k]));
        }
        const double rel = mr > 0 ? md / mr : md;
        compared++;
        printf("%s: max|diff| %.3g, max|ref| %.3g, relative %.3g (tol %.3g); ",
               tr->name, md, mr, rel, tol);
        if (!(rel <= tol) || !isfinite(mr) || mr == 0)
            rc = 1;
        free(x);
        free(y);
    }
    printf("\n");
    if (!compared) {
        printf("nothing compared\n");
        rc = 1;
    }
    safetensors_close(a);
    safetensors_close(r);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (!strcmp(argv[1], "make-clip"))
        return cmd_make(argc, argv, 1);
    if (!strcmp(argv[1], "make-t5"))
        return cmd_make(argc, argv, 0);
    if (!strcmp(argv[1], "make-pipeline"))
        return cmd_make_pipeline(argc, argv);
    if (!strcmp(argv[1], "make-ids"))
        return cmd_make_ids(argc, argv);
    if (!strcmp(argv[1], "forward"))
        return cmd_forward(argc, argv);
    if (!strcmp(argv[1], "encode"))
        return cmd_encode(argc, argv);
    if (!strcmp(argv[1], "compare"))
        return cmd_compare(argc, argv);
    return usage();
}
