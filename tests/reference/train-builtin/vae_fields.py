#!/usr/bin/python3
"""vae_fields.py — stage 1 of builtin:shapes: the AutoencoderKL whose decoder draws sharp,
anti-aliased shapes from the 16 x 16 latent of per-colour distance fields
(shapes_data.fields_at), built by hand inside diffusers' architecture (no training).

    /usr/bin/python3 tests/reference/train-builtin/vae_fields.py WORKDIR

writes WORKDIR/vae.safetensors (fp32, diffusers names) and WORKDIR/vae_stats.json (the latent's
shift_factor / scaling_factor over training scenes, and the decoder's error against the
renderer), and WORKDIR/vae_samples.png (renderer above, decoder below).

The decoder (field_decoder_init), for latent channels h_k (one per palette colour k):
  conv_in      channel 0 = ANCHOR (a constant), channel 1 + k = h_k
  resnets      identity (conv2 = 0), as models.analytic_init
  upsamplers   nearest 2x, then [1 2 1] / 4 in each direction on channels 1..8 (exactly
               bilinear 2x, half-pixel centres), identity on the anchor: after three, h_k is
               interpolated to full resolution (exact where the field is linear: within
               FIELD_PX of every straight edge)
  shortcut     of the last up block: channels 1 + k = h_k, 9 + k = -h_k (so the one-group
               GroupNorm sees a mean of exactly ANCHOR / C and a spread that the anchor
               dominates: linear to ~0.5 %)
  norm_out     affine: BETA (FIELD_PX h_k + 1/2) and BETA (FIELD_PX h_k - 1/2)
  silu         silu(BETA u) / BETA = relu(u) within 0.28 / BETA
  conv_out     RGB = sum_k colour_k (relu(FIELD_PX h_k + 1/2) - relu(FIELD_PX h_k - 1/2))
               = sum_k colour_k clamp(1/2 - sdf_k, 0, 1): the renderer's coverage.
The encoder keeps models.analytic_init's 8 x 8 block means of RGB; it is not this decoder's
inverse (cpdit runs only the decoder; training computes the fields from the scene).
"""
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, ".."))  # st_io
import models  # noqa: E402
import shapes_config as cfg  # noqa: E402
import shapes_data as data  # noqa: E402
import st_io  # noqa: E402

BETA = 16.0          # silu(BETA u) / BETA is relu(u) to within 0.28 / BETA
TYPICAL_SQ = 7.0     # sum_k h_k^2 at a typical pixel (6 colours at -1, two near an edge)
STATS_SCENES = 1024


def _bilinear(conv, channels):
    """conv (C, C, 3, 3) after a nearest 2x upsampling: [1 2 1] / 4 (x) [1 2 1] / 4 on
    channels, identity elsewhere up to the anchor (channel 0)."""
    conv.weight.zero_()
    conv.bias.zero_()
    k = torch.tensor([0.25, 0.5, 0.25])
    conv.weight[0, 0, 1, 1] = 1.0
    for c in channels:
        conv.weight[c, c] = k[:, None] * k[None, :]


@torch.no_grad()
def field_decoder_init(vae):
    """Overwrite vae.decoder with the field-painting solution (module docstring)."""
    dec = vae.decoder
    n = vae.latent
    C = dec.conv_norm_out.num_channels
    assert C >= 1 + 2 * n and dec.conv_norm_out.num_groups == 1, "needs one group of >= 17"
    A = models.ANCHOR
    fields = range(1, 1 + n)
    dec.conv_in.weight.zero_()
    dec.conv_in.bias.zero_()
    dec.conv_in.bias[0] = A
    for k in range(n):
        dec.conv_in.weight[1 + k, k, 1, 1] = 1.0
    for b in dec.up_blocks:
        if b.upsamplers is not None:
            _bilinear(b.upsamplers[0].conv, fields)
    last = dec.up_blocks[-1].resnets[0].conv_shortcut
    assert last is not None, "the last up block must widen the channels (shortcut)"
    last.weight.zero_()
    last.bias.zero_()
    last.weight[0, 0] = 1.0
    for k in range(n):
        last.weight[1 + k, 1 + k] = 1.0
        last.weight[1 + n + k, 1 + k] = -1.0
    mu = A / C
    sigma = math.sqrt((A * A + 2 * TYPICAL_SQ) / C - mu * mu)
    gn = dec.conv_norm_out
    gn.weight.zero_()
    gn.bias.zero_()
    T = data.FIELD_PX
    for k in range(n):
        gn.weight[1 + k] = BETA * T * sigma
        gn.bias[1 + k] = BETA * (0.5 + T * mu)
        gn.weight[1 + n + k] = -BETA * T * sigma
        gn.bias[1 + n + k] = -BETA * (0.5 + T * mu)
    pal = data.palette_tensor()
    dec.conv_out.weight.zero_()
    dec.conv_out.bias.zero_()
    for k in range(n):
        dec.conv_out.weight[:, 1 + k, 1, 1] = pal[k] / BETA
        dec.conv_out.weight[:, 1 + n + k, 1, 1] = -pal[k] / BETA


def build():
    vae = models.AutoencoderKL(cfg.VAE)
    field_decoder_init(vae)
    return vae.to(memory_format=torch.channels_last)


def main():
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    vae = build()
    vae.eval()
    scenes = data.all_scenes()
    g = torch.Generator().manual_seed(17)
    zs, errs, imgs = [], [], []
    with torch.no_grad():
        for i in range(STATS_SCENES):
            sc = scenes[torch.randint(len(scenes), (1,), generator=g).item()]
            geom = data.jittered(sc, g)
            f = data.fields_at(sc, geom)
            zs.append(f)
            if i < 64:
                x = data.render_at(sc, geom)
                y = vae.decode(f[None].contiguous(memory_format=torch.channels_last))[0]
                errs.append((y - x).abs())
                if i < 16:
                    imgs += [st_io.to_u8(x), st_io.to_u8(y.clamp(-1, 1))]
    z = torch.stack(zs)
    e = torch.stack(errs)
    stats = {"shift_factor": z.mean().item(), "scaling_factor": 1.0 / z.std().item(),
             "decoder_mean_abs_error": e.mean().item(),
             "decoder_pixels_off_by_over_8_of_255": (e > 16 / 255).float().mean().item(),
             "steps": 0}
    print(json.dumps(stats), flush=True)
    with open(os.path.join(work, "vae_stats.json"), "w") as f:
        json.dump(stats, f, indent=2)
    st_io.save_safetensors(os.path.join(work, "vae.safetensors"), vae.state_dict())
    st_io.write_png(os.path.join(work, "vae_samples.png"),
                    st_io.grid(imgs[0::2] + imgs[1::2], 8))
    return 0


if __name__ == "__main__":
    sys.exit(main())
