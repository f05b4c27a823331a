/* tuned_key.h — the key of a measured winner (topo_tuned_key, topo_file.h) made from what a
 * step is: the model's plan shape at the requested size (width, height, frames, text tokens
 * as resolved, CFG = two forwards per step), the rank count, threads per rank and the
 * backend with its activation dtype. `cpdit tune` records under this key, `cpdit plan` and
 * `cpdit run` (parallel: auto) look up under it, so that a run with other tokens, CFG,
 * threads or backend never reuses a winner measured for something else.
 */
#ifndef CPDIT_TUNED_KEY_H
#define CPDIT_TUNED_KEY_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"
#include "lib/models/model_plan.h"
#include "topology/topo_file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Storage for the key's strings. */
typedef struct tuned_key_buf {
    char backend[TOPO_KEY_NAME_MAX], dtype[TOPO_KEY_NAME_MAX];
} tuned_key_buf;

/* Fill k for s on `ranks` ranks with `threads` per rank (0: this process's GEMM threads,
 * kernels/host_runtime.h) on the backend named backend (NULL, "" or "auto": this build's
 * default, cpdit_backend_default). INPUT error naming --backend for an unknown name. k points
 * into s and buf. */
cpdit_status tuned_key_make(const model_plan_shape *s, int ranks, int threads,
                            const char *backend, tuned_key_buf *buf, topo_tuned_key *k,
                            cpdit_error *err);

/* "128x128, 1 frame, 64 text tokens, CFG off, 2 ranks x 1 thread, cpu f32" into out. */
const char *tuned_key_text(const topo_tuned_key *k, char *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
