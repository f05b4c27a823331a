/* flux_plan.h — FLUX.1's planner shape (model_plan.h) from its transformer config.
 *
 * Tokens: image (W/16)·(H/16) (VAE 8x, 2x2 packing), text = the request's text_tokens, or
 * when 0 the pipeline's default (512 for guidance-distilled models such as FLUX.1-dev, 256
 * otherwise; lib/pipeline/pipeline.c); both in the sharded sequence (flux_shard_layout).
 * One attention kind: Ld + Ls joint self-attention calls over text + image.
 */
#ifndef CPDIT_FLUX_PLAN_H
#define CPDIT_FLUX_PLAN_H

#include "lib/models/model_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLUX_PLAN_T5_LEN_DEV 512
#define FLUX_PLAN_T5_LEN_SCHNELL 256
#define FLUX_PLAN_PIXELS_PER_TOKEN 16 /* VAE downsampling 8 x packing 2 */

struct flux_transformer_config;

/* Fill s from a transformer config and a request (sizes multiples of 16, else INPUT error
 * where = "width"/"height"; frames > 1: INPUT error, FLUX makes images). family, key are
 * left to the caller (model_plan_shape_load). */
cpdit_status flux_plan_shape(model_plan_shape *s, const struct flux_transformer_config *c,
                             const model_request *req, cpdit_error *err);

/* The same from a folder (pipeline root or transformer folder): its transformer config. */
cpdit_status flux_plan_shape_load(model_plan_shape *s, const char *dir,
                                  const model_request *req, cpdit_error *err);

/* Rank `rank` of `cp`: its text and image tokens (flux_shard_layout). */
cpdit_status flux_plan_rank_tokens(const model_plan_shape *s, int cp, int rank, int *text,
                                   int *image, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
