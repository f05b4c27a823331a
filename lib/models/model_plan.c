/* model_plan.c — the family-neutral planner shape: family dispatch and the helpers the
 * families and the planner share (model_plan.h). */
#include "lib/models/model_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/builtin/builtin_model.h"
#include "lib/models/flux_plan.h"
#include "lib/models/model_detect.h"
#include "lib/models/wan/wan_plan.h"

/* The planner's view of each family (the lead folds this into the family table). */
typedef struct plan_family {
    const char *name;
    model_plan_shape_fn shape;
    model_plan_rank_tokens_fn rank_tokens;
} plan_family;

static const plan_family plan_families[] = {
    {"flux", flux_plan_shape_load, flux_plan_rank_tokens},
    {"wan", wan_plan_shape_load, wan_plan_rank_tokens},
};
#define N_PLAN_FAMILIES (sizeof plan_families / sizeof plan_families[0])

static const plan_family *family_named(const char *name)
{
    for (size_t i = 0; i < N_PLAN_FAMILIES; i++)
        if (strcmp(plan_families[i].name, name) == 0)
            return &plan_families[i];
    return NULL;
}

void model_request_defaults(model_request *r)
{
    memset(r, 0, sizeof *r);
}

cpdit_status model_plan_shape_load(model_plan_shape *s, const char *model,
                                   const model_request *req, cpdit_error *err)
{
    char dir[MODEL_PLAN_KEY_MAX], family[MODEL_DETECT_NAME_MAX];
    memset(s, 0, sizeof *s);
    if (!model || !model[0])
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "model", "missing (a folder or builtin:NAME)");
    cpdit_status st = builtin_model_resolve(model, dir, sizeof dir, err);
    if (st)
        return st;
    if ((st = model_family_of(dir, family, err)))
        return st;
    const plan_family *f = family_named(family);
    if (!f)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, model,
                               "the %s family has no planner shape", family);
    if ((st = f->shape(s, dir, req, err)))
        return st;
    snprintf(s->family, sizeof s->family, "%s", f->name);
    if (builtin_model_is_spec(model)) {
        snprintf(s->key, sizeof s->key, "%s", model);
    } else {
        char *real = realpath(model, NULL);
        snprintf(s->key, sizeof s->key, "%s", real ? real : model);
        free(real);
    }
    return CPDIT_OK;
}

cpdit_status model_plan_rank_tokens(const model_plan_shape *s, int cp, int rank, int *text,
                                    int *image, cpdit_error *err)
{
    const plan_family *f = family_named(s->family);
    *text = *image = 0;
    if (!f)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "model", "unknown family \"%s\"",
                               s->family);
    if (cp < 1 || rank < 0 || rank >= cp)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "model", "rank %d of %d ranks", rank, cp);
    return f->rank_tokens(s, cp, rank, text, image, err);
}

double model_plan_rank_linear_flops(const model_plan_shape *s, double share)
{
    return (s->linear_flops - s->replicated_flops) * share + s->replicated_flops;
}

int model_plan_gemm_rows(const model_plan_shape *s, const model_gemm *g, int text, int image)
{
    switch (g->rows) {
    case MODEL_ROWS_TEXT: return text;
    case MODEL_ROWS_IMAGE: return image;
    case MODEL_ROWS_SEQ: return text + image;
    case MODEL_ROWS_TEXT_ALL: return (int)s->text_tokens;
    default: return 0;
    }
}

void model_plan_add_attention(model_plan_shape *s, int count, long long q, long long kv,
                              int sharded)
{
    if (s->n_attn < MODEL_PLAN_MAX_ATTN)
        s->attn[s->n_attn++] =
            (model_attention_kind){count, q, kv, s->heads, s->head_dim, sharded};
}

void model_plan_add_gemm(model_plan_shape *s, model_rows rows, int k, int n, int count)
{
    if (s->n_gemm < MODEL_PLAN_MAX_GEMM)
        s->gemm[s->n_gemm++] = (model_gemm){(int)rows, k, n, count};
}

void model_plan_add_block_ops(model_plan_shape *s, model_block_ops ops)
{
    if (s->n_block_kinds < MODEL_PLAN_MAX_BLOCK_KINDS)
        s->block_ops[s->n_block_kinds++] = ops;
}

cpdit_status model_plan_check_request(const model_request *req, int multiple, int max_text,
                                      cpdit_error *err)
{
    if (req->width < multiple || req->width > MODEL_PLAN_MAX_SIDE || req->width % multiple)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "width", "%d: must be a multiple of %d in "
                               "[%d, %d]", req->width, multiple, multiple, MODEL_PLAN_MAX_SIDE);
    if (req->height < multiple || req->height > MODEL_PLAN_MAX_SIDE || req->height % multiple)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "height", "%d: must be a multiple of %d in "
                               "[%d, %d]", req->height, multiple, multiple, MODEL_PLAN_MAX_SIDE);
    if (req->text_tokens < 0 || req->text_tokens > max_text)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "max_sequence_length",
                               "%d is out of range [1, %d]", req->text_tokens, max_text);
    if (req->frames < 0 || req->frames > MODEL_PLAN_MAX_FRAMES)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "frames", "%d is out of range [1, %d]",
                               req->frames, MODEL_PLAN_MAX_FRAMES);
    return CPDIT_OK;
}
