#!/usr/bin/env python3
"""Reference for tests/vae_decoder_reference.sh: AutoencoderKL.decode written from its
definition with plain torch ops (no diffusers), in float64.

    vae_reference.py OUTDIR

For each case writes OUTDIR/<case>/model/{config.json, diffusion_pytorch_model.safetensors}
(random weights with diffusers' tensor names), OUTDIR/<case>/inputs.safetensors (tensor
"latent_sample") and OUTDIR/<case>/expected.safetensors (tensor "sample", float32, computed in
float64 from the weights exactly as stored), and OUTDIR/cases.txt listing the case names.

The decoder (diffusers' Decoder with UpDecoderBlock2D, UNetMidBlock2D, ResnetBlock2D,
Attention): post_quant_conv (1x1, if used) -> conv_in 3x3 -> resnet, attention, resnet ->
up blocks over reversed block_out_channels (layers_per_block + 1 resnets, then nearest 2x +
conv 3x3 except the last) -> GroupNorm -> act -> conv_out 3x3. GroupNorm eps 1e-6 throughout.
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

EPS = 1e-6
DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}

CASES = {
    # FLUX-like: post_quant_conv, shift factor, one extra resnet per block, a channel change.
    "flux_like": dict(block_out_channels=[32, 64], layers_per_block=1, norm_num_groups=8,
                      latent_channels=16, use_post_quant_conv=True, batch=1, h=16, w=16,
                      dtype=torch.float32, legacy_attention=False, scaling_factor=0.3611,
                      shift_factor=0.1159),
    # Three levels (4x upscale), batch 2, non-square, F16 weights on disk, deprecated attention
    # names (query/key/value/proj_attn), no post_quant_conv.
    "three_level": dict(block_out_channels=[16, 32, 32], layers_per_block=2, norm_num_groups=4,
                        latent_channels=4, use_post_quant_conv=False, batch=2, h=8, w=12,
                        dtype=torch.float16, legacy_attention=True, scaling_factor=0.18215,
                        shift_factor=None),
    # No mid-block attention, odd latent sides, BF16 weights.
    "no_attention": dict(block_out_channels=[8, 16], layers_per_block=1, norm_num_groups=8,
                         latent_channels=8, use_post_quant_conv=True, batch=1, h=3, w=5,
                         dtype=torch.bfloat16, legacy_attention=False, scaling_factor=1.0,
                         shift_factor=0.0, mid_block_add_attention=False),
    # Tiled decode (diffusers' enable_tiling / tiled_decode): sample_size 16 gives latent tiles
    # of 8 every 6 rows, blended over 4 pixels; a 3 x 2 grid of tiles, the last ones partial.
    "tiled": dict(block_out_channels=[8, 16], layers_per_block=1, norm_num_groups=4,
                  latent_channels=4, use_post_quant_conv=True, batch=1, h=14, w=11,
                  dtype=torch.float32, legacy_attention=False, scaling_factor=1.0,
                  shift_factor=None, sample_size=16, tiled=True),
}


def write_safetensors(path, tensors):
    """tensors: list of (name, tensor); data laid out in the given order, no gaps."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors:
        t = t.contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def make_params(cfg, gen):
    """Random parameters (name -> tensor on disk dtype), diffusers' names, forward order."""
    p = {}
    dt = cfg["dtype"]

    def conv(name, cin, cout, k):
        std = 1.0 / math.sqrt(cin * k * k)
        p[name + ".weight"] = (torch.randn(cout, cin, k, k, generator=gen) * std).to(dt)
        p[name + ".bias"] = (torch.randn(cout, generator=gen) * 0.1).to(dt)

    def norm(name, c):
        p[name + ".weight"] = (1.0 + 0.2 * torch.randn(c, generator=gen)).to(dt)
        p[name + ".bias"] = (0.2 * torch.randn(c, generator=gen)).to(dt)

    def linear(name, c):
        p[name + ".weight"] = (torch.randn(c, c, generator=gen) / math.sqrt(c)).to(dt)
        p[name + ".bias"] = (torch.randn(c, generator=gen) * 0.1).to(dt)

    def resnet(name, cin, cout):
        norm(name + ".norm1", cin)
        conv(name + ".conv1", cin, cout, 3)
        norm(name + ".norm2", cout)
        conv(name + ".conv2", cout, cout, 3)
        if cin != cout:
            conv(name + ".conv_shortcut", cin, cout, 1)

    ch = cfg["block_out_channels"]
    lat = cfg["latent_channels"]
    if cfg["use_post_quant_conv"]:
        conv("post_quant_conv", lat, lat, 1)
    conv("decoder.conv_in", lat, ch[-1], 3)
    resnet("decoder.mid_block.resnets.0", ch[-1], ch[-1])
    if cfg.get("mid_block_add_attention", True):
        a = "decoder.mid_block.attentions.0"
        norm(a + ".group_norm", ch[-1])
        names = (["query", "key", "value", "proj_attn"] if cfg["legacy_attention"]
                 else ["to_q", "to_k", "to_v", "to_out.0"])
        for n in names:
            linear(a + "." + n, ch[-1])
    resnet("decoder.mid_block.resnets.1", ch[-1], ch[-1])
    rev = list(reversed(ch))
    prev = rev[0]
    for i, c in enumerate(rev):
        for j in range(cfg["layers_per_block"] + 1):
            resnet("decoder.up_blocks.%d.resnets.%d" % (i, j), prev if j == 0 else c, c)
        if i != len(rev) - 1:
            conv("decoder.up_blocks.%d.upsamplers.0.conv" % i, c, c, 3)
        prev = c
    norm("decoder.conv_norm_out", ch[0])
    conv("decoder.conv_out", ch[0], 3, 3)
    # an encoder tensor the decoder must ignore
    p["encoder.conv_in.weight"] = torch.randn(ch[0], 3, 3, 3, generator=gen).to(dt)
    return p


def decode(cfg, p, z):
    """vae.decode(z) in float64 from the definition."""
    q = {k: v.double() for k, v in p.items()}
    groups = cfg["norm_num_groups"]

    def conv(x, name, pad):
        return F.conv2d(x, q[name + ".weight"], q[name + ".bias"], padding=pad)

    def gn(x, name, act):
        y = F.group_norm(x, groups, q[name + ".weight"], q[name + ".bias"], eps=EPS)
        return y * torch.sigmoid(y) if act else y

    def resnet(x, name):
        h = conv(gn(x, name + ".norm1", True), name + ".conv1", 1)
        h = conv(gn(h, name + ".norm2", True), name + ".conv2", 1)
        if name + ".conv_shortcut.weight" in q:
            x = conv(x, name + ".conv_shortcut", 0)
        return x + h

    def attention(x, name):
        B, C, H, W = x.shape
        names = (["query", "key", "value", "proj_attn"] if cfg["legacy_attention"]
                 else ["to_q", "to_k", "to_v", "to_out.0"])
        t = gn(x, name + ".group_norm", False).reshape(B, C, H * W).transpose(1, 2)
        qq, kk, vv = (F.linear(t, q["%s.%s.weight" % (name, n)], q["%s.%s.bias" % (name, n)])
                      for n in names[:3])
        w = torch.softmax(qq @ kk.transpose(1, 2) / math.sqrt(C), dim=-1)
        o = F.linear(w @ vv, q["%s.%s.weight" % (name, names[3])],
                     q["%s.%s.bias" % (name, names[3])])
        return x + o.transpose(1, 2).reshape(B, C, H, W)

    x = z.double()
    if cfg["use_post_quant_conv"]:
        x = conv(x, "post_quant_conv", 0)
    x = conv(x, "decoder.conv_in", 1)
    x = resnet(x, "decoder.mid_block.resnets.0")
    if cfg.get("mid_block_add_attention", True):
        x = attention(x, "decoder.mid_block.attentions.0")
    x = resnet(x, "decoder.mid_block.resnets.1")
    n = len(cfg["block_out_channels"])
    for i in range(n):
        for j in range(cfg["layers_per_block"] + 1):
            x = resnet(x, "decoder.up_blocks.%d.resnets.%d" % (i, j))
        if i != n - 1:
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
            x = conv(x, "decoder.up_blocks.%d.upsamplers.0.conv" % i, 1)
    x = gn(x, "decoder.conv_norm_out", True)
    return conv(x, "decoder.conv_out", 1)


def tiled_decode(cfg, p, z):
    """diffusers' AutoencoderKL.tiled_decode with decode() per tile (float64)."""
    f = 2 ** (len(cfg["block_out_channels"]) - 1)
    ts = cfg["sample_size"]
    tl = ts // f
    overlap = int(tl * 0.75)
    blend = int(ts * 0.25)
    limit = ts - blend
    rows = []
    for i in range(0, z.shape[2], overlap):
        rows.append([decode(cfg, p, z[:, :, i:i + tl, j:j + tl])
                     for j in range(0, z.shape[3], overlap)])

    def blend_v(a, b, e):
        e = min(a.shape[2], b.shape[2], e)
        for y in range(e):
            b[:, :, y, :] = a[:, :, -e + y, :] * (1 - y / e) + b[:, :, y, :] * (y / e)
        return b

    def blend_h(a, b, e):
        e = min(a.shape[3], b.shape[3], e)
        for x in range(e):
            b[:, :, :, x] = a[:, :, :, -e + x] * (1 - x / e) + b[:, :, :, x] * (x / e)
        return b

    out_rows = []
    for i, row in enumerate(rows):
        out_row = []
        for j, t in enumerate(row):
            if i > 0:
                t = blend_v(rows[i - 1][j], t, blend)
            if j > 0:
                t = blend_h(row[j - 1], t, blend)
            out_row.append(t[:, :, :limit, :limit])
        out_rows.append(torch.cat(out_row, dim=3))
    return torch.cat(out_rows, dim=2)


def config_json(cfg):
    n = len(cfg["block_out_channels"])
    c = {"_class_name": "AutoencoderKL", "_diffusers_version": "0.30.0",
         "act_fn": "silu", "block_out_channels": cfg["block_out_channels"],
         "down_block_types": ["DownEncoderBlock2D"] * n, "force_upcast": True,
         "in_channels": 3, "latent_channels": cfg["latent_channels"],
         "latents_mean": None, "latents_std": None,
         "layers_per_block": cfg["layers_per_block"],
         "mid_block_add_attention": cfg.get("mid_block_add_attention", True),
         "norm_num_groups": cfg["norm_num_groups"], "out_channels": 3, "sample_size": cfg.get("sample_size", 64),
         "scaling_factor": cfg["scaling_factor"], "shift_factor": cfg["shift_factor"],
         "up_block_types": ["UpDecoderBlock2D"] * n, "use_post_quant_conv":
         cfg["use_post_quant_conv"], "use_quant_conv": cfg["use_post_quant_conv"]}
    return json.dumps(c, indent=2)


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    names = []
    for i, (name, cfg) in enumerate(CASES.items()):
        gen = torch.Generator().manual_seed(1234 + i)
        d = os.path.join(out, name)
        os.makedirs(os.path.join(d, "model"), exist_ok=True)
        p = make_params(cfg, gen)
        with open(os.path.join(d, "model", "config.json"), "w") as f:
            f.write(config_json(cfg))
        write_safetensors(os.path.join(d, "model", "diffusion_pytorch_model.safetensors"),
                          list(p.items()))
        z = torch.randn(cfg["batch"], cfg["latent_channels"], cfg["h"], cfg["w"], generator=gen)
        write_safetensors(os.path.join(d, "inputs.safetensors"), [("latent_sample", z)])
        with torch.no_grad():
            y = tiled_decode(cfg, p, z) if cfg.get("tiled") else decode(cfg, p, z)
        write_safetensors(os.path.join(d, "expected.safetensors"), [("sample", y.float())])
        names.append(name)
    with open(os.path.join(out, "cases.txt"), "w") as f:
        f.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
