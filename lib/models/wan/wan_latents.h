/* wan_latents.h — Wan's latent video <-> token geometry (pure host functions, no backend).
 *
 * A latent video is (B, C, F, H, W) (diffusers' hidden_states). The transformer's patch
 * embedding is a Conv3d with kernel = stride = patch (pt, ph, pw): each token is one patch, a
 * vector of C*pt*ph*pw values in the order of the Conv3d weight's (C, kt, kh, kw) flattening,
 * and the tokens follow the patch grid (pf, ph', pw') = (F/pt, H/ph, W/pw) row-major (frame
 * slowest, width fastest), as diffusers' flatten(2).transpose(1, 2) orders them.
 * proj_out gives each token pt*ph*pw*Cout values, in (kt, kh, kw, c) order (c fastest), which
 * diffusers' reshape/permute puts back to (B, Cout, F, H, W).
 */
#ifndef CPDIT_WAN_LATENTS_H
#define CPDIT_WAN_LATENTS_H

#include "lib/core/cpdit_error.h"
#include "lib/models/wan/wan_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The patch grid of a latent (F, H, W): *pf, *ph, *pw = F/pt, H/ph, W/pw. INPUT errors: a
 * size not positive, not divisible by its patch size, or more patches along an axis than
 * the RoPE table has (rope_max_seq_len); more than INT_MAX / 2 tokens. */
cpdit_status wan_token_grid(const wan_transformer_config *cfg, int F, int H, int W, int *pf,
                            int *ph, int *pw, cpdit_error *err);

/* out (B, S, C*pt*ph*pw) <- x (B, C, F, H, W), S = (F/pt)(H/ph)(W/pw) tokens in (f, h, w)
 * row-major order; each token's vector in (c, kt, kh, kw) order. F, H, W divisible. */
void wan_patchify(float *out, const float *x, int B, int C, int F, int H, int W, int pt, int ph,
                  int pw);

/* out (B, Cout, F, H, W) <- y (B, S, pt*ph*pw*Cout), each token's vector in (kt, kh, kw, c)
 * order (diffusers' proj_out + unpatchify). */
void wan_unpatchify(float *out, const float *y, int B, int Cout, int F, int H, int W, int pt,
                    int ph, int pw);

/* pos (S, 3): the (f, h, w) patch index of each token of a (pf, ph, pw) grid in token order
 * (the RoPE positions). */
void wan_token_positions(float *pos, int pf, int ph, int pw);

#ifdef __cplusplus
}
#endif
#endif
