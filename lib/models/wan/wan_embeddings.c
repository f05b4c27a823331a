/* wan_embeddings.c — the Wan transformer's conditioning (WanTimeTextImageEmbedding without
 * the image part) and its RoPE table (WanRotaryPosEmbed).
 *
 *   sinusoid = get_timestep_embedding(t, freq_dim, flip_sin_to_cos=True, shift 0)
 *   temb     = linear_2(silu(linear_1(sinusoid)))          time_embedder
 *   tproj    = time_proj(silu(temb))                       (B, 6 inner)
 *   ctx      = linear_2(gelu_tanh(linear_1(text)))          text_embedder (PixArt-alpha's)
 * RoPE: the head dim is split into (t, h, w) = (D - 2 (D/6) 2, 2 (D/6), 2 (D/6)) columns;
 * axis a's pair i rotates by pos_a * theta^(-2i / dims_a) (float64, cos and sin stored fp32,
 * each twice: the pairs are adjacent (x[2i], x[2i+1]) as diffusers' apply_rotary_emb).
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "lib/models/wan/wan_internal.h"

#define TIMESTEP_MAX_PERIOD 10000.0 /* get_timestep_embedding's max_period */

void wan_timestep_embedding(float *out, const float *t, int B, int dim)
{
    const int half = dim / 2;
    /* torch: exponent = (-ln(max_period) as fp32) * arange(half) / half, all fp32 */
    const float neg_log_period = (float)(-log(TIMESTEP_MAX_PERIOD));
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * dim;
        for (int i = 0; i < half; i++) {
            const float exponent = (neg_log_period * (float)i) / (float)half;
            const float arg = t[b] * expf(exponent);
            o[i] = cosf(arg);
            o[half + i] = sinf(arg);
        }
    }
}

cpdit_status wan_time_embed(cpdit_buf *temb, cpdit_buf *tproj, const wan_transformer *m,
                            const cpdit_backend *be, const float *timestep, int B,
                            cpdit_buf *work, cpdit_error *err)
{
    const wan_global_weights *w = &m->global;
    const int E = m->cfg.inner_dim, fd = m->cfg.freq_dim;
    const size_t proj_n = (size_t)B * fd;
    /* work: sinusoid (B, freq_dim), hidden (B, E), silu(temb) (B, E) */
    cpdit_buf *proj = work;
    cpdit_buf *h = cpdit_buf_at(be, proj, (ptrdiff_t)proj_n);
    cpdit_buf *st_emb = cpdit_buf_at(be, h, (ptrdiff_t)B * E);
    float *host = malloc(proj_n * sizeof(float));
    if (!host)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WAN_WHERE, "out of memory");
    wan_timestep_embedding(host, timestep, B, fd);
    be->upload_act(proj, host, proj_n);
    free(host);
    cpdit_status st = be->linear(h, E, proj, fd, w->time_1.w, w->time_1.b, B, fd, E, 0, err);
    if (st)
        return st;
    be->act(CPDIT_ACT_SILU, h, h, (size_t)B * E);
    if ((st = be->linear(temb, E, h, E, w->time_2.w, w->time_2.b, B, E, E, 0, err)))
        return st;
    be->act(CPDIT_ACT_SILU, st_emb, temb, (size_t)B * E);
    return be->linear(tproj, w->time_proj.out, st_emb, E, w->time_proj.w, w->time_proj.b, B, E,
                      w->time_proj.out, 0, err);
}

cpdit_status wan_text_embed(cpdit_buf *ctx, const wan_transformer *m, const cpdit_backend *be,
                            const cpdit_buf *ehs, int rows, cpdit_buf *hidden, cpdit_error *err)
{
    const wan_global_weights *w = &m->global;
    const int E = m->cfg.inner_dim, T = m->cfg.text_dim;
    if (rows == 0)
        return CPDIT_OK;
    cpdit_status st = cpdit_linear_act(be, hidden, E, ehs, T, w->text_1.w, w->text_1.b, rows, T,
                                       E, CPDIT_ACT_GELU_TANH, err);
    if (st)
        return st;
    return be->linear(ctx, E, hidden, E, w->text_2.w, w->text_2.b, rows, E, E, 0, err);
}

void wan_rope_table(float *cos_out, float *sin_out, const float *pos, int S,
                    const wan_transformer_config *c)
{
    const int D = c->attention_head_dim;
    for (int s = 0; s < S; s++) {
        float *co = cos_out + (size_t)s * D, *so = sin_out + (size_t)s * D;
        int col = 0;
        for (int a = 0; a < WAN_AXES; a++) {
            const int dims = c->rope_dims[a];
            const double p = (double)pos[(size_t)s * WAN_AXES + a];
            for (int i = 0; i < dims / 2; i++) {
                /* torch: 1.0 / theta ** (arange(0, dims, 2, float64) / dims) */
                const double freq = 1.0 / pow(WAN_ROPE_THETA, (double)(2 * i) / (double)dims);
                const double angle = p * freq;
                const float cv = (float)cos(angle), sv = (float)sin(angle);
                co[col + 2 * i] = co[col + 2 * i + 1] = cv;
                so[col + 2 * i] = so[col + 2 * i + 1] = sv;
            }
            col += dims;
        }
    }
}
