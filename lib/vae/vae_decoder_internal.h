/* vae_decoder_internal.h — the decoder's parameter table, shared by vae_decoder.c (building it,
 * making the weights through the weight loader) and vae_decode.c (the forward pass). The
 * modules below hold the weights as the backend made them: pointers the loader publishes at
 * vae_decoder_prepare. */
#ifndef CPDIT_VAE_DECODER_INTERNAL_H
#define CPDIT_VAE_DECODER_INTERNAL_H

#include "kernels/backend.h"
#include "lib/vae/vae_decoder.h"
#include "lib/weights/weight_loader.h"

typedef struct vae_param_entry {
    char name[VAE_PARAM_NAME_MAX];
    char alt_name[VAE_PARAM_NAME_MAX]; /* deprecated attention name, or "" */
    int ndim;
    int64_t shape[VAE_PARAM_MAX_DIMS];
    size_t offset, count;              /* its floats in the host params (created decoders) */
    weight_kind kind;                  /* VECTOR (norms, biases), CONV, MATRIX (attention) */
    void *dst;                         /* where the loader publishes it (weight_loader_add) */
} vae_param_entry;

/* Norm weight and bias: fp32 in the backend's memory. */
typedef struct vae_norm_p {
    const float *w, *b;
} vae_norm_p;

typedef struct vae_conv_p {
    const float *packed; /* the backend's packed weights (be->conv2d) */
    const float *b;      /* bias (Cout), backend memory */
    int cin, cout, k;
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
    const cpdit_weight *wq, *wk, *wv, *wo; /* Linear(C, C) weights (be->linear) */
    const float *q_b, *k_b, *v_b, *o_b;
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
    cpdit_weight_format format;     /* vae_decoder_set_weight_format; F32 unless set */
    /* The weights' source: a checkpoint (vae_decoder_load: the set, kept open, its tensors in
     * their stored dtype) or host fp32 values (vae_decoder_create: params, writable through
     * vae_decoder_param_at, seen by the loader as the tensors host[]). */
    safetensors_set *set;
    float *params;
    safetensors_tensor *host;       /* [n_params] over params */
    size_t n_floats;
    /* The weights as the backend made them: wl_open = the loader holds the registered table;
     * prepared for (wl.be, wl.format) once wl.prepared. */
    weight_loader wl;
    int wl_open;
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
/* Make the weights for be in d->format (nothing when they exist for both already): every
 * parameter through the weight loader. Errors: conversion (INPUT), out of memory (RUNTIME). */
cpdit_status vae_decoder_prepare(vae_decoder *d, const cpdit_backend *be, cpdit_error *err);
/* Release the backend's weights (the next decode makes them again). */
void vae_decoder_unpack(vae_decoder *d);

#endif
