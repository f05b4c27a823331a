#!/usr/bin/python3
"""train_flux.py — stage 2 of builtin:shapes: the FluxTransformer2DModel, trained with the
rectified-flow (flow-matching) loss on the stage-1 VAE's latents, conditioned as FluxPipeline
conditions (CLIP pooled output + T5 tokens, both frozen at the weights cpdit generates).

    /usr/bin/python3 tools/train-builtin/train_flux.py WORKDIR TEXTDIR [--steps N] [--seed S]

TEXTDIR: `cpdit builtin write TEXTDIR --name shapes --text-only` (configs, tokenizers, text
encoders). WORKDIR: holds vae.safetensors and vae_stats.json from train_vae.py.

Loss: x0 = (VAE mean latent - shift) * scale, packed 2x2; noise n; sigma drawn from a
logit-normal; x_sigma = (1 - sigma) x0 + sigma n; the model predicts v = n - x0 (FluxPipeline's
Euler step x <- x + (sigma_next - sigma) v integrates it from sigma 1 to 0). A caption is
replaced by "" with probability P_UNCOND so that true CFG with an empty negative prompt works.
Deterministic from the seed; step k's batch comes from a generator seeded with (seed, k); the
checkpoint (WORKDIR/flux.ckpt, every CKPT_SECONDS) holds the model, its EMA and Adam's state.
Writes WORKDIR/flux_samples.png (EMA weights, CFG) at each checkpoint.
"""
import argparse
import copy
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import sampler  # noqa: E402
import shapes_config as cfg  # noqa: E402
import shapes_data as data  # noqa: E402
import st_io  # noqa: E402
import text  # noqa: E402

BATCH = 16
LR = 1e-3
WARMUP = 100
EMA = 0.995
P_UNCOND = 0.1
POOL_TOLERANCE = 0.02
POOL = 4096          # pre-encoded (scene, latent) pairs; images re-rendered with new jitter
CKPT_SECONDS = 300
LOG_EVERY = 25
SAMPLE_STEPS = 20
SAMPLE_CFG = 3.0


def build_pool(workdir, vae, stats, seed, scenes, n_pool):
    """n_pool random scenes with jitter, encoded: (scene indices, latents (n, C, 16, 16)).

    The VAE's encoder (models.analytic_init, kept frozen) computes 8x8 block means of the
    RGB channels into latent channels 0-2 and zeros elsewhere; the pool is computed that way
    directly (cheap on a shared CPU), after checking it against the encoder on 64 images."""
    path = os.path.join(workdir, "latents.pt")
    if os.path.exists(path):
        return torch.load(path)
    g = torch.Generator().manual_seed(seed * 31 + 7)
    idx = torch.randint(len(scenes), (n_pool,), generator=g)
    zs = []
    with torch.no_grad():
        for at in range(0, n_pool, 64):
            x = torch.stack([data.render(scenes[i], g) for i in idx[at:at + 64].tolist()])
            m = torch.zeros(x.shape[0], vae.latent, x.shape[2] // 8, x.shape[3] // 8)
            m[:, :3] = torch.nn.functional.avg_pool2d(x, 8)
            if at == 0:
                e, _ = vae.encode(x.contiguous(memory_format=torch.channels_last))
                err = (e - m).abs().max().item()
                print("pool: block means vs the encoder: max difference %.2e" % err, flush=True)
                if err > POOL_TOLERANCE:
                    raise SystemExit("the VAE's encoder is not the block mean: encode the pool")
            zs.append((m - stats["shift_factor"]) * stats["scaling_factor"])
    pool = {"idx": idx, "latents": torch.cat(zs).contiguous()}
    torch.save(pool, path)
    return pool


def caption_for(scene, g):
    """A random wording of scene that is true of it (all wordings name colour, shape, bg)."""
    ws = data.captions(*scene)
    return ws[torch.randint(len(ws), (1,), generator=g).item()][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("textdir")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pool", type=int, default=POOL)
    ap.add_argument("--ckpt-seconds", type=int, default=CKPT_SECONDS)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    with open(os.path.join(a.workdir, "vae_stats.json")) as f:
        stats = json.load(f)
    vae = models.AutoencoderKL(cfg.VAE).to(memory_format=torch.channels_last)
    vae.load_state_dict(st_io.load_safetensors(os.path.join(a.workdir, "vae.safetensors")))
    vae.eval()
    scenes = data.all_scenes()
    te = text.TextEncoders(a.textdir, cfg.MAX_SEQUENCE_LENGTH)
    pool = build_pool(a.workdir, vae, stats, a.seed, scenes, a.pool)
    lat = pool["latents"]
    N, C, H, W = lat.shape
    img_ids = models.latent_image_ids(H // 2, W // 2)
    txt_ids = torch.zeros(cfg.MAX_SEQUENCE_LENGTH, 3)

    model = models.FluxTransformer(cfg.TRANSFORMER)
    ema = copy.deepcopy(model)
    for p in ema.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0, betas=(0.9, 0.99))
    ckpt = os.path.join(a.workdir, "flux.ckpt")
    step = 0
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        model.load_state_dict(st["model"])
        ema.load_state_dict(st["ema"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
        print("resumed at step %d" % step, flush=True)
    print("transformer parameters: %d" % sum(p.numel() for p in model.parameters()), flush=True)

    sample_prompts = [data.caption_full(*s) for s in data.HELD_OUT[:4]]
    t_start = last_ckpt = time.time()
    acc = 0.0
    while step < a.steps:
        g = torch.Generator().manual_seed(a.seed * 1000003 + step)
        pick = torch.randint(N, (BATCH,), generator=g)
        x0 = models.pack_latents(lat[pick])
        caps = [caption_for(scenes[i], g) for i in pool["idx"][pick].tolist()]
        drop = torch.rand(BATCH, generator=g) < P_UNCOND
        caps = ["" if d else c for c, d in zip(caps, drop.tolist())]
        pooled, t5 = te.embed(caps)
        sigma = torch.sigmoid(torch.randn(BATCH, generator=g))  # logit-normal(0, 1)
        noise = torch.randn(x0.shape, generator=g)
        xs = (1 - sigma[:, None, None]) * x0 + sigma[:, None, None] * noise
        lr = LR * min(1.0, (step + 1) / WARMUP)
        for pg in opt.param_groups:
            pg["lr"] = lr
        v = model(xs, t5, pooled, sigma, img_ids, txt_ids)
        loss = ((v - (noise - x0)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            d = min(EMA, (1 + step) / (10 + step))
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.mul_(d).add_(pm.detach(), alpha=1 - d)
        step += 1
        acc += loss.item()
        if step % LOG_EVERY == 0:
            print("flux step %d loss %.4f lr %.2e %.0fs" %
                  (step, acc / LOG_EVERY, lr, time.time() - t_start), flush=True)
            acc = 0.0
        if time.time() - last_ckpt > a.ckpt_seconds or step == a.steps:
            tmp = ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "ema": ema.state_dict(),
                        "opt": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, ckpt)
            last_ckpt = time.time()
            with torch.no_grad():
                imgs = sampler.sample(ema, vae, te, stats, sample_prompts, seed=0,
                                      steps=SAMPLE_STEPS, true_cfg=SAMPLE_CFG, size=cfg.IMAGE)
            st_io.write_png(os.path.join(a.workdir, "flux_samples.png"),
                            st_io.grid([st_io.to_u8(i) for i in imgs], 4))
            print("checkpoint at step %d (samples: %s)" % (step, " | ".join(sample_prompts[:2])),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
