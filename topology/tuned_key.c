/* tuned_key.c — the key of a measured winner (tuned_key.h). */
#include "topology/tuned_key.h"

#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/host_runtime.h"
#include "lib/core/dtype.h"

cpdit_status tuned_key_make(const model_plan_shape *s, int ranks, int threads,
                            const char *backend, tuned_key_buf *buf, topo_tuned_key *k,
                            cpdit_error *err)
{
    const cpdit_backend *be = !backend || !backend[0] || strcmp(backend, "auto") == 0
                                  ? cpdit_backend_default()
                                  : cpdit_backend_by_name(backend);
    if (!be)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "--backend",
                               "'%s': no such backend in this build", backend);
    snprintf(buf->backend, sizeof buf->backend, "%s", be->name);
    snprintf(buf->dtype, sizeof buf->dtype, "%s", cpdit_dtype_name(be->act_dtype));
    memset(k, 0, sizeof *k);
    k->model = s->key;
    k->width = s->width;
    k->height = s->height;
    k->frames = s->frames > 0 ? s->frames : 1;
    k->text_tokens = (int)s->text_tokens;
    k->cfg = s->forwards_per_step > 1;
    k->ranks = ranks;
    k->threads = threads > 0 ? threads : cpdit_host_gemm_threads();
    k->backend = buf->backend;
    k->dtype = buf->dtype;
    return CPDIT_OK;
}

const char *tuned_key_text(const topo_tuned_key *k, char *out, size_t n)
{
    snprintf(out, n, "%dx%d, %d frame%s, %d text tokens, CFG %s, %d ranks x %d thread%s, %s %s",
             k->width, k->height, k->frames, k->frames == 1 ? "" : "s", k->text_tokens,
             k->cfg ? "on" : "off", k->ranks, k->threads, k->threads == 1 ? "" : "s",
             k->backend ? k->backend : "?", k->dtype ? k->dtype : "?");
    return out;
}
