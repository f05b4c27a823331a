/* tensor_finite.h — find NaN/Inf in a result and the first weight tensor that holds one.
 *
 * A result full of NaN (broken weights, overflow) must never be written as if it were
 * numbers: `run` fails the item, `forward` fails the command. Both say where: the result
 * (its name, how many values, the first index) and, when the weights are the cause, the
 * first weight tensor (in name order) that holds a non-finite value.
 */
#ifndef CPDIT_TENSOR_FINITE_H
#define CPDIT_TENSOR_FINITE_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The number of NaN/Inf values in x[0..n) (float32); *first (may be NULL) gets the index of
 * the first one (n when there is none). One pass. */
size_t cpdit_count_nonfinite(const float *x, size_t n, size_t *first);

/* Scan the weights at path (a .safetensors file, an index .json or a folder, as
 * safetensors_set_open takes) in tensor-name order: name gets the first tensor with a
 * non-finite value, "" when all are finite. Each tensor is converted to float32 in turn
 * (one tensor's worth of memory). Errors: those of opening the weights. */
cpdit_status cpdit_first_nonfinite_weight(const char *path, char *name, size_t size,
                                          cpdit_error *err);

/* The check of a component's result: CPDIT_OK when x[0..n) is finite. Else an error with
 * where = component ("transformer", "vae") and what =
 *   "output \"sample\": 1024 of 1024 values are not finite (NaN or Inf), the first at
 *    index 0; the first non-finite weight is proj_out.bias (in FILE); nothing written"
 * (INPUT: the weights are broken) or, when every weight under weights_path is finite (or
 * weights_path is NULL), "...; the weights are finite: the numerics overflowed; nothing
 * written" (RUNTIME). */
cpdit_status cpdit_check_result_finite(const char *component, const char *tensor,
                                       const float *x, size_t n, const char *weights_path,
                                       cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
