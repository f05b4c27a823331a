/* wan_latents.c — patchify / unpatchify of Wan latents and the tokens' RoPE positions. */
#include "config.h"

#include <limits.h>
#include <stddef.h>

#include "lib/models/wan/wan_latents.h"

#define WAN_LATENTS_WHERE "wan latents"

cpdit_status wan_token_grid(const wan_transformer_config *cfg, int F, int H, int W, int *pf,
                            int *ph, int *pw, cpdit_error *err)
{
    static const char *const axis[WAN_AXES] = {"frames (F)", "height (H)", "width (W)"};
    const int size[WAN_AXES] = {F, H, W};
    int n[WAN_AXES];
    for (int a = 0; a < WAN_AXES; a++) {
        const int p = cfg->patch_size[a];
        if (size[a] < 1 || size[a] % p)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, WAN_LATENTS_WHERE,
                                   "latent %s is %d; it must be a positive multiple of the "
                                   "patch size %d",
                                   axis[a], size[a], p);
        n[a] = size[a] / p;
        if (n[a] > cfg->rope_max_seq_len)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, WAN_LATENTS_WHERE,
                                   "latent %s is %d = %d patches; the model's RoPE table "
                                   "(rope_max_seq_len) has %d",
                                   axis[a], size[a], n[a], cfg->rope_max_seq_len);
    }
    if ((long long)n[0] * n[1] * n[2] > INT_MAX / 2)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, WAN_LATENTS_WHERE,
                               "%d x %d x %d patches is too many tokens", n[0], n[1], n[2]);
    *pf = n[0];
    *ph = n[1];
    *pw = n[2];
    return CPDIT_OK;
}

void wan_patchify(float *out, const float *x, int B, int C, int F, int H, int W, int pt, int ph,
                  int pw)
{
    const int nf = F / pt, nh = H / ph, nw = W / pw;
    const size_t S = (size_t)nf * nh * nw, P = (size_t)C * pt * ph * pw;
    for (int b = 0; b < B; b++)
        for (int f = 0; f < nf; f++)
            for (int h = 0; h < nh; h++)
                for (int w = 0; w < nw; w++) {
                    const size_t s = ((size_t)f * nh + h) * nw + w;
                    float *o = out + ((size_t)b * S + s) * P;
                    for (int c = 0; c < C; c++)
                        for (int kt = 0; kt < pt; kt++)
                            for (int kh = 0; kh < ph; kh++)
                                for (int kw = 0; kw < pw; kw++) {
                                    const size_t src =
                                        ((((size_t)b * C + c) * F + (size_t)f * pt + kt) * H +
                                         (size_t)h * ph + kh) * W + (size_t)w * pw + kw;
                                    *o++ = x[src];
                                }
                }
}

void wan_unpatchify(float *out, const float *y, int B, int Cout, int F, int H, int W, int pt,
                    int ph, int pw)
{
    const int nf = F / pt, nh = H / ph, nw = W / pw;
    const size_t S = (size_t)nf * nh * nw, P = (size_t)Cout * pt * ph * pw;
    for (int b = 0; b < B; b++)
        for (int f = 0; f < nf; f++)
            for (int h = 0; h < nh; h++)
                for (int w = 0; w < nw; w++) {
                    const size_t s = ((size_t)f * nh + h) * nw + w;
                    const float *v = y + ((size_t)b * S + s) * P;
                    for (int kt = 0; kt < pt; kt++)
                        for (int kh = 0; kh < ph; kh++)
                            for (int kw = 0; kw < pw; kw++)
                                for (int c = 0; c < Cout; c++) {
                                    const size_t dst =
                                        ((((size_t)b * Cout + c) * F + (size_t)f * pt + kt) * H +
                                         (size_t)h * ph + kh) * W + (size_t)w * pw + kw;
                                    out[dst] = *v++;
                                }
                }
}

void wan_token_positions(float *pos, int pf, int ph, int pw)
{
    size_t s = 0;
    for (int f = 0; f < pf; f++)
        for (int h = 0; h < ph; h++)
            for (int w = 0; w < pw; w++, s++) {
                pos[3 * s + 0] = (float)f;
                pos[3 * s + 1] = (float)h;
                pos[3 * s + 2] = (float)w;
            }
}
