"""sampler.py — FluxPipeline's sampling loop in PyTorch, float32, step for step as cpdit runs
it (lib/pipeline/pipeline.c), so that the two can be compared image to image:

  noise   torch.randn((1, C, H/8, W/8), generator=torch.Generator().manual_seed(seed)), packed
  sigmas  np.linspace(1, 1/N, N) in float64, then float32 (the scheduler config's shift is 1:
          no shifting), then a final 0
  step    v = transformer(x, sigma); with CFG v = v_neg + cfg (v - v_neg) (negative prompt "");
          x <- x + (sigma_next - sigma) v, the difference rounded to float32 first
  decode  unpack, z / scaling_factor + shift_factor, VAE decoder, x / 2 + 0.5 to 8 bits
"""
import numpy as np
import torch

import models
import shapes_config as cfg


def sigmas_for(steps):
    s = np.linspace(1.0, 1.0 / steps, steps).astype(np.float32)
    return [float(v) for v in s] + [0.0]


@torch.no_grad()
def sample(transformer, vae, te, stats, prompts, seed, steps, true_cfg, size=cfg.IMAGE,
           negative_prompt=""):
    """One image per prompt, each from the same seed (as cpdit with --seed): list of
    (3, size, size) float images in [-1, 1] (not clamped)."""
    C = cfg.VAE["latent_channels"]
    lh = lw = size // 8
    img_ids = models.latent_image_ids(lh // 2, lw // 2)
    txt_ids = torch.zeros(te.L, 3)
    sig = sigmas_for(steps)
    out = []
    for p in prompts:
        g = torch.Generator().manual_seed(seed)
        noise = torch.randn((1, C, lh, lw), generator=g, dtype=torch.float32)
        x = models.pack_latents(noise)
        pooled, t5 = te.embed([p])
        if true_cfg > 1.0:
            npooled, nt5 = te.embed([negative_prompt])
        for i in range(steps):
            s = torch.tensor([sig[i]], dtype=torch.float32)
            v = transformer(x, t5, pooled, s, img_ids, txt_ids)
            if true_cfg > 1.0:
                vn = transformer(x, nt5, npooled, s, img_ids, txt_ids)
                v = vn + true_cfg * (v - vn)
            dt = float(np.float32(sig[i + 1]) - np.float32(sig[i]))
            x = x + dt * v
        z = models.unpack_latents(x, C, lh, lw)
        z = z / np.float32(stats["scaling_factor"]) + np.float32(stats["shift_factor"])
        out.append(vae.decode(z.contiguous(memory_format=torch.channels_last))[0].contiguous())
    return out
