/* tensor_finite.c — NaN/Inf in results, and the first weight that holds one
 * (tensor_finite.h). */
#include "lib/io/tensor_finite.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/safetensors.h"

size_t cpdit_count_nonfinite(const float *x, size_t n, size_t *first)
{
    size_t bad = 0, at = n;
    for (size_t i = 0; i < n; i++) {
        int nf = !isfinite(x[i]);
        if (nf && at == n)
            at = i;
        bad += (size_t)nf;
    }
    if (first)
        *first = at;
    return bad;
}

cpdit_status cpdit_first_nonfinite_weight(const char *path, char *name, size_t size,
                                          cpdit_error *err)
{
    name[0] = '\0';
    safetensors_set *set = NULL;
    cpdit_status st = safetensors_set_open(&set, path, err);
    if (st)
        return st;
    float *buf = NULL;
    size_t cap = 0;
    const size_t count = safetensors_set_count(set);
    for (size_t i = 0; !st && i < count && !name[0]; i++) {
        const safetensors_tensor *t = safetensors_set_tensor_at(set, i);
        if (t->nelem > cap) {
            float *nb = realloc(buf, t->nelem * sizeof *nb);
            if (!nb) {
                st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, t->name, "out of memory");
                break;
            }
            buf = nb;
            cap = t->nelem;
        }
        if (!(st = safetensors_tensor_read_f32(t, buf, t->nelem, err)) &&
            cpdit_count_nonfinite(buf, t->nelem, NULL))
            snprintf(name, size, "%s (in %s)", t->name, t->file);
    }
    free(buf);
    safetensors_set_close(set);
    return st;
}

cpdit_status cpdit_check_result_finite(const char *component, const char *tensor,
                                       const float *x, size_t n, const char *weights_path,
                                       cpdit_error *err)
{
    size_t first;
    const size_t bad = cpdit_count_nonfinite(x, n, &first);
    if (!bad)
        return CPDIT_OK;
    char weight[CPDIT_ERROR_WHAT_MAX / 2] = "";
    cpdit_error scan;
    cpdit_error_clear(&scan);
    if (weights_path && cpdit_first_nonfinite_weight(weights_path, weight, sizeof weight, &scan))
        weight[0] = '\0'; /* the weights loaded before: an error now only loses the hint */
    if (weight[0])
        return cpdit_error_set(err, CPDIT_ERR_INPUT, component,
                               "output \"%s\": %zu of %zu values are not finite (NaN or Inf), "
                               "the first at index %zu; the first non-finite weight is %s; "
                               "nothing written", tensor, bad, n, first, weight);
    return cpdit_error_set(err, CPDIT_ERR_RUNTIME, component,
                           "output \"%s\": %zu of %zu values are not finite (NaN or Inf), the "
                           "first at index %zu; %s; nothing written", tensor, bad, n, first,
                           weights_path ? "the weights are finite: the numerics overflowed"
                                        : "the weights or the numerics are broken");
}
