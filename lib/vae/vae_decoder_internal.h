/* vae_decoder_internal.h — the decoder's parameter table, shared by vae_decoder.c (building and
 * loading it) and vae_decode.c (the forward pass). Offsets index the one float allocation. */
#ifndef CPDIT_VAE_DECODER_INTERNAL_H
#define CPDIT_VAE_DECODER_INTERNAL_H

#include "kernels/backend.h"
#include "lib/vae/vae_decoder.h"

typedef struct vae_param_entry {
    char name[VAE_PARAM_NAME_MAX];
    char alt_name[VAE_PARAM_NAME_MAX]; /* deprecated attention name, or "" */
    int ndim;
    int64_t shape[VAE_PARAM_MAX_DIMS];
    size_t offset, count;
} vae_param_entry;

typedef struct vae_norm_p {
    size_t w, b;
} vae_norm_p;

typedef struct vae_conv_p {
    size_t w, b;
    int cin, cout, k;
    float *packed; /* the backend's packed weights (vae_decoder_prepare), or NULL */
} vae_conv_p;

typedef struct vae_resnet_p {
    int cin, cout;
    vae_norm_p norm1, norm2;
    vae_conv_p conv1, conv2;
    int has_shortcut;
    vae_conv_p shortcut;
} vae_resnet_p;

typedef struct vae_attn_p {
    int c;
    vae_norm_p norm;
    size_t q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;
    struct cpdit_weight *wq, *wk, *wv, *wo; /* the backend's weights (vae_decoder_prepare) */
} vae_attn_p;

typedef struct vae_up_p {
    int n_resnets;
    vae_resnet_p *resnets;
    int has_upsample;
    vae_conv_p upsample;
} vae_up_p;

struct vae_decoder {
    autoencoder_kl_config config;
    cpdit_activation act;
    const cpdit_backend *be;        /* vae_decoder_set_backend; NULL: the default backend */
    const cpdit_backend *packed_be; /* backend that packed the conv weights; NULL: not packed */
    float *be_params;               /* params in packed_be's memory (device backends), or NULL */
    cpdit_weight_format format;     /* of the convolutions (vae_decoder_set_weight_format);
                                       F32 unless set */
    int stored_f32;                 /* the checkpoint's conv weights are fp32: native = fp32 */
    float *params;
    size_t n_floats;
    vae_param_entry *table;
    size_t n_params, cap_params;
    int has_post_quant;
    vae_conv_p post_quant;
    vae_conv_p conv_in;
    vae_resnet_p mid_res[2];
    int has_mid_attn;
    vae_attn_p mid_attn;
    int n_up;
    vae_up_p up[VAE_MAX_BLOCKS];
    vae_norm_p norm_out;
    vae_conv_p conv_out;
};

/* Pointers to every convolution of d (post_quant, conv_in, resnets, upsamplers, conv_out) into
 * list (NULL: only count), in forward order; returns how many. */
int vae_decoder_convs(vae_decoder *d, vae_conv_p **list);
/* Release the packed weights (the next decode packs again). */
void vae_decoder_unpack(vae_decoder *d);

#endif
