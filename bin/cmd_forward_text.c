/* cmd_forward_text.c — `cpdit forward --component text_encoder`: the text encoder part of
 * cmd_forward (see cmd_forward.h). Reads input_ids (B, S) and, when present, attention_mask
 * (B, S) (int64, int32 or any float dtype holding integers; mask values 0 / 1; absent = all
 * ones), runs the encoder of DIR (a pipeline root: its text_encoder/; or the component folder
 * itself) and writes last_hidden_state (B, S, d_model) float32: transformers'
 * UMT5EncoderModel(input_ids, attention_mask).last_hidden_state for Wan's umt5 folders,
 * T5EncoderModel's for a plain T5 folder (lib/text/t5_encoder.h).
 *
 * Rank 0 computes and writes; the other ranks of the job wait for its status without spinning
 * on a core. --backend, --attention-backend and --weight-format (fp32: the exact path) apply;
 * --weight-memory SIZE is the budget of resident matrices (default
 * TEXT_ENCODER_DEFAULT_CACHE_BYTES: UMT5-XXL streams per layer). */
#include "config.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bin/cli.h"
#include "bin/cmd_forward.h"
#include "bin/forward_ranks.h"
#include "lib/io/safetensors.h"
#include "lib/io/tensor_finite.h"
#include "lib/text/t5_encoder.h"

#define TEXT_WHERE "text_encoder"
#define TEXT_COMPONENT_DIR "text_encoder"
#define TEXT_IDS_NAME "input_ids"
#define TEXT_MASK_NAME "attention_mask"
#define TEXT_OUTPUT_NAME "last_hidden_state"
#define TEXT_MAX_ID 16777216.0f   /* 2^24: integers up to here are exact in float */

/* DIR/text_encoder when it holds a config.json, else DIR itself; *out malloc'd. */
static cpdit_status component_dir(const char *model, char **out, cpdit_error *err)
{
    char *sub = NULL;
    struct stat sb;
    if (asprintf(&sub, "%s/%s/config.json", model, TEXT_COMPONENT_DIR) < 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, TEXT_WHERE, "out of memory");
    if (stat(sub, &sb) == 0 && S_ISREG(sb.st_mode)) {
        sub[strlen(sub) - strlen("/config.json")] = '\0';
        *out = sub;
        return CPDIT_OK;
    }
    free(sub);
    *out = strdup(model);
    return *out ? CPDIT_OK : cpdit_error_set(err, CPDIT_ERR_RUNTIME, TEXT_WHERE, "out of memory");
}

/* A (B, S) tensor of integers (any dtype) into dst (B*S int32). */
static cpdit_status read_int_table(const safetensors_tensor *t, int32_t *dst, const char *path,
                                   cpdit_error *err)
{
    float *tmp = malloc((t->nelem ? t->nelem : 1) * sizeof *tmp);
    if (!tmp)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    cpdit_status st = safetensors_tensor_read_f32(t, tmp, t->nelem, err);
    for (size_t i = 0; !st && i < t->nelem; i++) {
        const float v = tmp[i];
        if (!(v > -TEXT_MAX_ID && v < TEXT_MAX_ID) || v != (float)(int32_t)v)
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                                 "tensor '%s': value %g at %zu is not an integer id", t->name,
                                 (double)v, i);
        else
            dst[i] = (int32_t)v;
    }
    free(tmp);
    return st;
}

/* input_ids and attention_mask (NULL *mask when absent) of the inputs file. */
static cpdit_status load_inputs(const char *path, int32_t **ids, int32_t **mask, int *B, int *S,
                                cpdit_error *err)
{
    safetensors_file *f = NULL;
    *ids = *mask = NULL;
    cpdit_status st = safetensors_open(&f, path, err);
    if (st)
        return st;
    for (size_t i = 0; !st && i < safetensors_count(f); i++) {
        const char *name = safetensors_tensor_at(f, i)->name;
        if (strcmp(name, TEXT_IDS_NAME) && strcmp(name, TEXT_MASK_NAME))
            st = cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                                 "unexpected tensor '%s'; the text encoder takes " TEXT_IDS_NAME
                                 " and " TEXT_MASK_NAME,
                                 name);
    }
    const safetensors_tensor *t = safetensors_find(f, TEXT_IDS_NAME);
    const safetensors_tensor *tm = safetensors_find(f, TEXT_MASK_NAME);
    char got[96];
    if (!st && !t)
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "missing tensor '" TEXT_IDS_NAME "'");
    if (!st && (t->ndim != 2 || t->shape[0] < 1 || t->shape[1] < 1 || t->shape[0] > INT32_MAX ||
                t->shape[1] > INT32_MAX)) {
        safetensors_shape_text(got, sizeof got, t->shape, t->ndim, "()");
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                             "tensor '" TEXT_IDS_NAME "' has shape %s; expected (B, S), both "
                             ">= 1", got);
    }
    if (!st && tm &&
        (tm->ndim != 2 || tm->shape[0] != t->shape[0] || tm->shape[1] != t->shape[1])) {
        safetensors_shape_text(got, sizeof got, tm->shape, tm->ndim, "()");
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                             "tensor '" TEXT_MASK_NAME "' has shape %s; expected (%lld, %lld) "
                             "as " TEXT_IDS_NAME, got, (long long)t->shape[0],
                             (long long)t->shape[1]);
    }
    if (!st) {
        *B = (int)t->shape[0];
        *S = (int)t->shape[1];
        *ids = malloc(t->nelem * sizeof **ids);
        if (tm)
            *mask = malloc(t->nelem * sizeof **mask);
        if (!*ids || (tm && !*mask))
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    if (!st)
        st = read_int_table(t, *ids, path, err);
    if (!st && tm)
        st = read_int_table(tm, *mask, path, err);
    safetensors_close(f);
    return st;
}

/* Rank 0's work: load, forward, write. */
static cpdit_status forward_rank0(const forward_options *opt, cpdit_error *err)
{
    text_encoder_options o = text_encoder_options_default();
    const cpdit_attention_kernel *kernel = NULL;
    t5_encoder *m = NULL;
    char *dir = NULL;
    int32_t *ids = NULL, *mask = NULL;
    float *out = NULL;
    int B = 0, S = 0;
    const double t0 = forward_now_s();
    cpdit_status st = cli_backend_resolve(opt->backend, opt->attention_backend, &o.backend,
                                          &kernel, err);
    if (!st) {
        o.attention_kernel = kernel->name;
        if (opt->weight_format)
            o.weight_format = (cpdit_weight_format)cpdit_weight_format_from_name(
                opt->weight_format);
        if (opt->weight_memory)
            o.cache_bytes = opt->weight_memory;
        st = component_dir(opt->model, &dir, err);
    }
    if (!st)
        st = t5_encoder_load(dir, &o, &m, err);
    if (!st)
        st = load_inputs(opt->inputs, &ids, &mask, &B, &S, err);
    const size_t D = m ? (size_t)t5_encoder_get_config(m)->d_model : 0;
    if (!st && !(out = malloc((size_t)B * S * D * sizeof *out)))
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, TEXT_WHERE, "out of memory for the output");
    const double t1 = forward_now_s();
    if (!st)
        st = t5_encoder_forward_masked(m, ids, mask, B, S, out, err);
    const double t2 = forward_now_s();
    if (!st) {
        const int64_t shape[3] = {B, S, (int64_t)D};
        safetensors_write_tensor wt = {TEXT_OUTPUT_NAME, CPDIT_DTYPE_F32, 3, shape, out,
                                       CPDIT_DTYPE_F32};
        st = cpdit_check_result_finite("text_encoder", TEXT_OUTPUT_NAME, out, (size_t)B * S * D,
                                       dir, err); /* NaN/Inf: named, nothing written */
        if (!st)
            st = safetensors_write(opt->output, &wt, 1, NULL, 0, err);
    }
    if (!st && opt->verbose) {
        text_weight_stats ws;
        t5_encoder_weight_stats(m, &ws);
        fprintf(stderr,
                "cpdit: forward: text encoder %s (%s, %zu parameters), weights %s, %s; batch "
                "%d x %d tokens%s\n"
                "cpdit: forward: load %.3f s, forward %.3f s (weights made in %.3f s, the "
                "forward waited %.3f s)\n",
                dir, t5_encoder_get_config(m)->per_layer_bias ? "umt5" : "t5",
                t5_encoder_param_count(m), cpdit_weight_format_name(o.weight_format),
                ws.streaming ? "streamed per layer" : "resident", B, S,
                mask ? ", with attention_mask" : "", t1 - t0, t2 - t1, ws.create_s, ws.stall_s);
    }
    free(out);
    free(ids);
    free(mask);
    free(dir);
    t5_encoder_free(m);
    return st;
}

cpdit_status text_encoder_forward_command(const forward_options *opt, cpdit_error *err)
{
    const cpdit_status st = opt->world_rank == 0 ? forward_rank0(opt, err) : CPDIT_OK;
    return forward_wait_rank0(opt->world_rank, st, "the text encoder failed on rank 0", err);
}
