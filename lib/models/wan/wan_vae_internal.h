/* wan_vae_internal.h — the Wan VAE decoder's modules as the backend holds them, shared by
 * wan_vae_weights.c (config, making the weights) and wan_vae_decode.c (the forward pass).
 *
 * A causal conv with kt temporal taps becomes ONE 2D conv over kt·Cin channels: its input
 * (rows, W, kt·Cin) stacks, per pixel, the kt - 1 previous input frames (its cache: diffusers'
 * feat_cache of CACHE_T = kt - 1 frames, zeros before the clip) and the current frame, oldest
 * first; its packed weights are the Conv3d's (Cout, Cin, kt, K, K) reordered to
 * (Cout, kt·Cin, K, K), channel j·Cin + ci = tap j of input channel ci.
 */
#ifndef CPDIT_WAN_VAE_INTERNAL_H
#define CPDIT_WAN_VAE_INTERNAL_H

#include "kernels/backend.h"
#include "lib/io/safetensors.h"
#include "lib/models/wan/wan_vae.h"

#define WAN_VAE_MAX_RES 8      /* residual blocks per up block (num_res_blocks + 1) */
#define WAN_VAE_TAPS 3         /* temporal taps of the 3x3x3 convs and of time_conv */
#define WAN_VAE_NAME_MAX 128

typedef struct wv_conv {
    const float *packed;  /* be->conv2d's packed weights over taps·cin channels (be->free) */
    float *b;             /* bias (cout) fp32, backend memory */
    int cin, cout;        /* per frame */
    int taps;             /* 1 (a 1x1x1 conv or a 2D conv) or WAN_VAE_TAPS (causal) */
    int k;                /* spatial kernel: 1 or 3 */
    int win;              /* its cache's index (taps > 1), else -1 */
} wv_conv;

typedef struct wv_res {
    int cin, cout;
    float *g1, *g2;       /* WanRMS_norm gammas (cin), (cout): backend memory */
    wv_conv c1, c2;
    int has_sc;
    wv_conv sc;           /* conv_shortcut 1x1x1 */
} wv_res;

typedef struct wv_attn {
    int c;
    float *g;             /* norm gamma (c) */
    cpdit_weight *w[3];   /* q, k, v: rows [0, C), [C, 2C), [2C, 3C) of to_qkv (be->linear) */
    float *b[3];
    cpdit_weight *wo;     /* proj */
    float *bo;
} wv_attn;

enum { WV_UP_NONE = 0, WV_UP_2D, WV_UP_3D };

typedef struct wv_up {
    int n_res;
    wv_res res[WAN_VAE_MAX_RES];
    int mode;             /* WV_UP_* */
    wv_conv resample;     /* resample.1: conv 3x3, C -> C/2, after the nearest 2x */
    wv_conv time_conv;    /* upsample3d: causal 3x1x1, C -> 2C */
} wv_up;

struct wan_vae {
    wan_vae_config cfg;
    char *dir;                    /* the vae folder */
    const cpdit_backend *be;      /* wan_vae_set_backend; NULL: default */
    cpdit_weight_format format;   /* F32 unless set */
    safetensors_set *set;         /* open while the weights exist (matrices may map it) */
    const cpdit_backend *made_be; /* the weights exist for (made_be, made_format) */
    cpdit_weight_format made_format;
    int n_windows;
    wv_conv post_quant, conv_in;
    wv_res mid[2];
    wv_attn attn;
    int n_up;
    wv_up up[WAN_VAE_MAX_LEVELS];
    float *g_out;                 /* norm_out gamma */
    wv_conv conv_out;
};

/* Make the backend's weights for be and d->format (nothing when they exist for both).
 * Errors (INPUT, naming the file and tensor): a missing tensor, a wrong shape or dtype;
 * RUNTIME: memory. */
cpdit_status wan_vae_prepare(wan_vae *d, const cpdit_backend *be, cpdit_error *err);
/* Release the backend's weights. */
void wan_vae_unprepare(wan_vae *d);
/* wan_vae_decode_frames_to with clamp = 0: the frames as the decoder makes them (the tiled
 * decode blends them before it clamps). */
cpdit_status wan_vae_decode_frames_clamp(wan_vae *d, const cp_grid *g, int sink, const float *z,
                                         int B, int T, int h, int w, int clamp,
                                         wan_vae_frame_fn fn, void *fn_ctx, cpdit_error *err);
/* Every conv of d in forward order into list (NULL: count only); returns the count. */
int wan_vae_convs(wan_vae *d, wv_conv **list);

#endif
