#!/usr/bin/env python3
"""A whole WanPipeline text-to-video run in plain torch / numpy, composed from the independent
references beside it, for tests/wan_pipeline.sh:

    wan_pipeline_reference.py MODEL OUT_DIR --ids "1 2 3" --neg-ids "1" --frames 9 --height 64
        --width 64 --steps 4 --guidance 5.0 --seed 0 [--flow-shift S] [--max-len 512]

What WanPipeline.__call__ does, from its definition (diffusers' pipeline_wan.py):
  prompt embeds   the tokenizer's ids (given: --ids / --neg-ids, unpadded, with </s>) padded to
                  max_sequence_length with <pad> (0), mask 1 on the true ids; UMT5 encoder
                  (umt5_reference.encoder_forward, float32) -> rows after the true length
                  replaced by zeros (WanPipeline._get_t5_prompt_embeds)
  latents         torch.randn((1, C, (F - 1) // 4 + 1, H // 8, W // 8), generator =
                  torch.Generator().manual_seed(seed), float32)  (prepare_latents)
  scheduler       UniPC with flow sigmas (unipc_reference: schedule and step in float32);
                  flow_shift from scheduler_config.json unless --flow-shift
  each step       t = the integer timestep; v = transformer(latents, t, prompt embeds)
                  (wan_reference.Wan, float32); with guidance > 1 also v_u on the negative
                  embeds and v = v_u + guidance (v - v_u); latents = scheduler.step(v, t, latents)
  decode          latents / (1 / latents_std) + latents_mean; AutoencoderKLWan decode
                  (wan_vae_reference.Ref, float64, clamped to [-1, 1]); VideoProcessor:
                  (x / 2 + 0.5).clamp(0, 1)
Writes OUT_DIR/frames.safetensors: "frames" (F, H, W, 3) float32 in [0, 1] (before the 8-bit
conversion), "latents" (1, C, F', H', W') the sampled latents, "noise" the initial latents.

    wan_pipeline_reference.py compare OUT_DIR FRAMES_DIR [NOISE.safetensors]
prints "frames N max_levels M mean_levels A noise_max E": cpdit's PNG frames (FRAMES_DIR/
frame_NNNNN.png) against the reference frames converted to 8 bits as diffusers' numpy_to_pil
does (x * 255, rounded), and cpdit's --dump noise against the reference's; exit 1 when the
frame counts or sizes differ.

    wan_pipeline_reference.py compare-frames DIR_A DIR_B
prints "frames N max_levels M mean_levels A spread S" for two folders of PNG frames (numpy
only; S = the standard deviation of A's levels, so that a constant clip is seen).
"""
import struct
import zlib
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import load_model_dir, save_safetensors  # noqa: E402
import umt5_reference  # noqa: E402
import unipc_reference  # noqa: E402
import wan_reference  # noqa: E402
import wan_vae_reference  # noqa: E402

F32 = np.float32
VAE_TIME, VAE_SPACE = 4, 8


def opt(argv, name, default):
    return argv[argv.index(name) + 1] if name in argv else default


def prompt_embeds(model, cfg, w, ids, L):
    ids = ids[:L]
    n = len(ids)
    x = torch.zeros(1, L, dtype=torch.long)
    m = torch.zeros(1, L, dtype=torch.long)
    x[0, :n] = torch.tensor(ids)
    m[0, :n] = 1
    h = umt5_reference.encoder_forward(cfg, w, x, m, torch.float32)
    h = h["last_hidden_state"] if isinstance(h, dict) else h
    out = torch.zeros_like(h)
    out[:, :n] = h[:, :n]
    return out


def read_png(path):
    """An 8-bit RGB, non-interlaced PNG (what cpdit writes) -> (H, W, 3) uint8."""
    with open(path, "rb") as f:
        data = f.read()
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype == 2, "not 8-bit RGB"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, bpp, stride = zlib.decompress(idat), 3, w * 3
    out = np.zeros((h, stride), np.int32)
    for y in range(h):
        ft, row = raw[y * (stride + 1)], np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1)
        prev = out[y - 1] if y else np.zeros(stride, np.int32)
        cur = row.astype(np.int32)
        if ft in (0, 2):
            cur = (cur + (prev if ft == 2 else 0)) & 255
        else:
            cur = cur.copy()
            for x in range(stride):
                a = cur[x - bpp] if x >= bpp else 0
                c = prev[x - bpp] if x >= bpp else 0
                b = prev[x]
                if ft == 1:
                    pr = a
                elif ft == 3:
                    pr = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (cur[x] + pr) & 255
        out[y] = cur
    return out.reshape(h, w, 3).astype(np.uint8)


def compare(argv):
    from st_io import load_safetensors
    ref = load_safetensors(os.path.join(argv[2], "frames.safetensors"))
    frames = ref["frames"].numpy().astype(F32)
    want = np.round(frames * F32(255)).astype(np.int32)
    names = sorted(n for n in os.listdir(argv[3]) if n.startswith("frame_") and n.endswith(".png"))
    if len(names) != want.shape[0]:
        print("frames %d, the reference has %d" % (len(names), want.shape[0]))
        return 1
    got = np.stack([read_png(os.path.join(argv[3], n)) for n in names]).astype(np.int32)
    if got.shape != want.shape:
        print("shape %s, the reference %s" % (got.shape, want.shape))
        return 1
    d = np.abs(got - want)
    noise = -1.0
    if len(argv) > 4:
        noise = float((load_safetensors(argv[4])["latents"] - ref["noise"]).abs().max())
    print("frames %d max_levels %d mean_levels %.4f noise_max %g"
          % (len(names), d.max(), d.mean(), noise))
    return 0


def frames_of(d):
    names = sorted(n for n in os.listdir(d) if n.startswith("frame_") and n.endswith(".png"))
    return np.stack([read_png(os.path.join(d, n)) for n in names]).astype(np.int32)


def compare_frames(argv):
    a, b = frames_of(argv[2]), frames_of(argv[3])
    if a.shape != b.shape:
        print("shapes %s and %s" % (a.shape, b.shape))
        return 1
    d = np.abs(a - b)
    print("frames %d max_levels %d mean_levels %.4f spread %.2f"
          % (a.shape[0], d.max(), d.mean(), a.std()))
    return 0


def main(argv):
    if argv[1] == "compare":
        return compare(argv)
    if argv[1] == "compare-frames":
        return compare_frames(argv)
    model, out_dir = argv[1], argv[2]
    frames = int(opt(argv, "--frames", "9"))
    H, W = int(opt(argv, "--height", "64")), int(opt(argv, "--width", "64"))
    steps, guidance = int(opt(argv, "--steps", "4")), float(opt(argv, "--guidance", "5.0"))
    seed, L = int(opt(argv, "--seed", "0")), int(opt(argv, "--max-len", "512"))
    ids = [int(t) for t in opt(argv, "--ids", "").split()]
    neg = [int(t) for t in opt(argv, "--neg-ids", "").split()]
    with open(os.path.join(model, "scheduler", "scheduler_config.json")) as f:
        shift = float(opt(argv, "--flow-shift", json.load(f)["flow_shift"]))
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    with torch.no_grad():
        te = os.path.join(model, "text_encoder")
        with open(os.path.join(te, "config.json")) as f:
            tcfg = json.load(f)
        tw = load_model_dir(te)
        pos = prompt_embeds(model, tcfg, tw, ids, L)
        negv = prompt_embeds(model, tcfg, tw, neg, L) if guidance > 1 else None

        tr = os.path.join(model, "transformer")
        with open(os.path.join(tr, "config.json")) as f:
            wcfg = json.load(f)
        net = wan_reference.Wan(wcfg, wan_reference.load_weights(tr), torch.float32)
        C = wcfg["in_channels"]
        shape = (1, C, (frames - 1) // VAE_TIME + 1, H // VAE_SPACE, W // VAE_SPACE)
        g = torch.Generator().manual_seed(seed)
        noise = torch.randn(shape, generator=g, dtype=torch.float32)

        cfg = unipc_reference.CONFIGS["wan"]
        sigmas, timesteps = unipc_reference.unipc_schedule(steps, shift, cfg["final"])
        sched = unipc_reference.UniPC(cfg, sigmas)
        np.seterr(divide="ignore", invalid="ignore")
        x = noise.numpy().astype(F32)
        for i in range(steps):
            t = torch.tensor([float(timesteps[i])])
            lat = torch.from_numpy(x)
            v = net.forward({"hidden_states": lat, "timestep": t,
                             "encoder_hidden_states": pos}).float()
            if negv is not None:
                vu = net.forward({"hidden_states": lat, "timestep": t,
                                  "encoder_hidden_states": negv}).float()
                v = vu + guidance * (v - vu)
            x = sched.step(v.numpy().astype(F32), x)

        vae = wan_vae_reference.Ref(os.path.join(model, "vae"))
        zc = vae.cfg["z_dim"]
        mean = torch.tensor(vae.cfg["latents_mean"]).view(1, zc, 1, 1, 1)
        std = 1.0 / torch.tensor(vae.cfg["latents_std"]).view(1, zc, 1, 1, 1)
        z = torch.from_numpy(x) / std + mean
        y = vae.decode(z).float()  # (1, 3, F, H, W) in [-1, 1]
        video = (y / 2 + 0.5).clamp(0, 1)[0].permute(1, 2, 3, 0).contiguous()
    os.makedirs(out_dir, exist_ok=True)
    save_safetensors(os.path.join(out_dir, "frames.safetensors"),
                     {"frames": video, "latents": torch.from_numpy(x), "noise": noise})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
