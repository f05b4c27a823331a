/* flux_embeddings.c — the conditioning vector temb and the RoPE table of the FLUX transformer.
 *
 * temb (diffusers' CombinedTimestep[Guidance]TextProjEmbeddings):
 *   t_emb = linear_2(silu(linear_1(sinusoid(1000 t))))          timestep_embedder
 *   g_emb = the same with guidance_embedder, on 1000 g          (guidance_embeds only)
 *   p_emb = linear_2(silu(linear_1(pooled)))                    text_embedder
 *   temb  = t_emb + g_emb + p_emb
 * sinusoid = get_timestep_embedding(x, 256, flip_sin_to_cos=True, downscale_freq_shift=0):
 * frequencies f_i = exp(-ln(10000) i / 128), i < 128, and the output [cos(x f), sin(x f)]
 * (cos first because of flip_sin_to_cos). Computed in fp32 in the order torch does.
 *
 * RoPE (FluxPosEmbed with theta 10000): for axis a of dims_a columns and pair i < dims_a / 2,
 * angle = pos_a * theta^(-2i / dims_a) in float64, cos and sin rounded to fp32, each written
 * twice (repeat_interleave); the axes' columns are concatenated in order.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/models/flux/flux_internal.h"

#define TIMESTEP_MAX_PERIOD 10000.0 /* get_timestep_embedding's max_period */

void flux_timestep_embedding(float *out, const float *t, int B)
{
    const int half = FLUX_TIMESTEP_CHANNELS / 2;
    /* torch: exponent = (-ln(max_period) as fp32) * arange(half) / half, all fp32 */
    const float neg_log_period = (float)(-log(TIMESTEP_MAX_PERIOD));
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * FLUX_TIMESTEP_CHANNELS;
        for (int i = 0; i < half; i++) {
            const float exponent = (neg_log_period * (float)i) / (float)half;
            const float arg = t[b] * expf(exponent);
            o[i] = cosf(arg);
            o[half + i] = sinf(arg);
        }
    }
}

/* y (B, out) = linear_2(silu(linear_1(x))) added into y when accumulate, else stored.
 * x (B, in); h: scratch (B, l1->out); all activations of be. */
static cpdit_status mlp_embed(cpdit_buf *y, const flux_linear *l1, const flux_linear *l2,
                              const cpdit_buf *x, int B, cpdit_buf *h, int accumulate,
                              const cpdit_backend *be, cpdit_error *err)
{
    if (be->linear(h, l1->out, x, l1->in, l1->w, l1->b, B, l1->in, l1->out, 0, err))
        return err ? err->status : CPDIT_ERR_RUNTIME;
    be->act(CPDIT_ACT_SILU, h, h, (size_t)B * l1->out);
    return be->linear(y, l2->out, h, l2->in, l2->w, l2->b, B, l2->in, l2->out, accumulate, err);
}

cpdit_status flux_time_text_embed(cpdit_buf *temb, const flux_transformer *m,
                                  const cpdit_backend *be, const float *timestep,
                                  const float *guidance, const float *pooled, int B,
                                  cpdit_buf *work, cpdit_error *err)
{
    const flux_global_weights *w = &m->global;
    const size_t proj_n = (size_t)B * FLUX_TIMESTEP_CHANNELS;
    /* work, in elements: proj (B, 256), h (B, E), pooled_dev (B, pooled) */
    cpdit_buf *proj = work;
    cpdit_buf *h = cpdit_buf_at(be, proj, (ptrdiff_t)proj_n);
    cpdit_buf *pooled_dev = cpdit_buf_at(be, h, (ptrdiff_t)B * m->cfg.inner_dim);
    float *host = malloc((proj_n + (size_t)B) * sizeof(float)); /* sinusoid, scaled t */
    if (!host)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "flux", "out of memory");
    float *scaled = host + proj_n;
    cpdit_status st;

    for (int b = 0; b < B; b++)
        scaled[b] = timestep[b] * FLUX_TIME_SCALE;
    flux_timestep_embedding(host, scaled, B);
    be->upload_act(proj, host, proj_n);
    st = mlp_embed(temb, &w->time_1, &w->time_2, proj, B, h, 0, be, err);
    if (!st && m->cfg.guidance_embeds) {
        for (int b = 0; b < B; b++)
            scaled[b] = guidance[b] * FLUX_TIME_SCALE;
        flux_timestep_embedding(host, scaled, B);
        be->upload_act(proj, host, proj_n);
        st = mlp_embed(temb, &w->guid_1, &w->guid_2, proj, B, h, 1, be, err);
    }
    free(host);
    if (st)
        return st;
    be->upload_act(pooled_dev, pooled, (size_t)B * m->cfg.pooled_projection_dim);
    return mlp_embed(temb, &w->text_1, &w->text_2, pooled_dev, B, h, 1, be, err);
}

void flux_rope_table(float *cos_out, float *sin_out, const float *ids, int S,
                     const flux_transformer_config *c)
{
    const int D = c->attention_head_dim;
    for (int s = 0; s < S; s++) {
        float *co = cos_out + (size_t)s * D, *so = sin_out + (size_t)s * D;
        int col = 0;
        for (int a = 0; a < c->n_axes; a++) {
            const int dims = c->axes_dims_rope[a];
            const double pos = (double)ids[(size_t)s * c->n_axes + a];
            for (int i = 0; i < dims / 2; i++) {
                /* torch: 1.0 / theta ** (arange(0, dims, 2, float64) / dims) */
                const double freq = 1.0 / pow(FLUX_ROPE_THETA, (double)(2 * i) / (double)dims);
                const double angle = pos * freq;
                const float cv = (float)cos(angle), sv = (float)sin(angle);
                co[col + 2 * i] = co[col + 2 * i + 1] = cv;
                so[col + 2 * i] = so[col + 2 * i + 1] = sv;
            }
            col += dims;
        }
    }
}
