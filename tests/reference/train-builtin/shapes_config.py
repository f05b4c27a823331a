"""shapes_config.py — the sizes of builtin:shapes. lib/builtin/builtin_model.c (SHAPES) has the
same numbers: the C side writes the configs, this side trains weights that fit them."""

VAE = {
    # 4 levels: 8x, as FLUX (cpdit's pipeline needs it); the last (full-resolution) level
    # holds the anchor and +-1 copies of the 8 fields (vae_fields.py)
    "block_out_channels": [24, 16, 16, 16],
    "layers_per_block": 1,
    "norm_num_groups": 1,  # one group: see models.analytic_init
    "latent_channels": 8,
    "mid_block_add_attention": False,  # fully convolutional: trained on crops, cheap on CPUs
}

TRANSFORMER = {
    "in_channels": 32,            # 8 latent channels packed 2x2
    "num_layers": 1,              # double-stream blocks
    "num_single_layers": 2,
    "attention_head_dim": 24,
    "num_attention_heads": 4,     # inner 96; 4 heads: Ulysses 2 and 4 split them evenly
    "joint_attention_dim": 64,    # T5 d_model
    "pooled_projection_dim": 32,  # CLIP projection_dim
    "axes_dims_rope": [8, 8, 8],
    "guidance_embeds": False,     # true CFG with an empty negative prompt (see README)
    "patch_size": 1,
}

IMAGE = 128                 # training resolution (pixels): 16 x 16 latents, 64 image tokens
MAX_SEQUENCE_LENGTH = 32    # T5 tokens the transformer is trained with
