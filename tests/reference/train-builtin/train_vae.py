#!/usr/bin/python3
"""train_vae.py — stage 1 of builtin:shapes: the AutoencoderKL, trained as an autoencoder on the
procedural shapes (L1 + MSE reconstruction of a sampled latent, a small KL term).

    /usr/bin/python3 tests/reference/train-builtin/train_vae.py WORKDIR [--steps N] [--seed S]

Deterministic from the seed: step k's batch is drawn from a generator seeded with (seed, k),
so a run resumed from WORKDIR/vae.ckpt (written every CKPT_SECONDS and at the end) continues
exactly as an uninterrupted one. Prints the loss; writes WORKDIR/vae_samples.png (top rows
inputs, bottom rows reconstructions). At the end it measures the latents' mean and standard
deviation over a fixed set of images (the shift_factor / scaling_factor of the VAE config) and
writes WORKDIR/vae.safetensors (fp32, diffusers names) and WORKDIR/vae_stats.json.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # st_io
import models  # noqa: E402
import shapes_config as cfg  # noqa: E402
import shapes_data as data  # noqa: E402
import st_io  # noqa: E402

BATCH = 8
CROP = 64  # training windows (pixels), multiples of 8 apart
LR = 1.5e-3
LR_DECODER = 3e-4
WARMUP = 100
KL_WEIGHT = 1e-4
CKPT_SECONDS = 180
LOG_EVERY = 25
STATS_IMAGES = 512


def batch_for(seed, step, scenes):
    """BATCH random CROP x CROP windows of rendered images (the VAE is convolutional)."""
    g = torch.Generator().manual_seed(seed * 1000003 + step)
    x, _, _ = data.sample_batch(g, BATCH, scenes)
    off = torch.randint(0, (data.IMAGE_SIZE - CROP) // 8 + 1, (BATCH, 2), generator=g) * 8
    x = torch.stack([x[i, :, o[0]:o[0] + CROP, o[1]:o[1] + CROP] for i, o in enumerate(off.tolist())])
    return x.contiguous(memory_format=torch.channels_last), g


def save(path, vae, opt, step):
    tmp = path + ".tmp"
    torch.save({"model": vae.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--decoder-only", action="store_true",
                    help="train the decoder only (the encoder keeps models.analytic_init's "
                         "weights, so the latents, and a transformer trained on them, stay "
                         "valid); LR_DECODER; no statistics (they depend on the encoder only)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.workdir, exist_ok=True)
    torch.manual_seed(a.seed)
    vae = models.AutoencoderKL(cfg.VAE).to(memory_format=torch.channels_last)  # 20x faster convs
    base_lr = LR_DECODER if a.decoder_only else LR
    if a.decoder_only:
        for p in vae.encoder.parameters():
            p.requires_grad_(False)
    opt = torch.optim.Adam([p for p in vae.parameters() if p.requires_grad], lr=base_lr)
    ckpt = os.path.join(a.workdir, "vae.ckpt")
    step = 0
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        vae.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
        print("resumed at step %d" % step, flush=True)
    scenes = data.all_scenes()
    t_start = last_ckpt = time.time()
    acc = 0.0
    while step < a.steps:
        x, g = batch_for(a.seed, step, scenes)
        lr = base_lr * min(1.0, (step + 1) / WARMUP) * (0.1 + 0.9 * (1 - step / a.steps))  # warm-up, linear decay
        for pg in opt.param_groups:
            pg["lr"] = lr
        mean, logvar = vae.encode(x)
        eps = torch.randn(mean.shape, generator=g)
        z = mean + torch.exp(0.5 * logvar) * eps
        y = vae.decode(z)
        rec = (y - x).abs().mean() + ((y - x) ** 2).mean()
        kl = 0.5 * (mean ** 2 + logvar.exp() - 1 - logvar).mean()
        loss = rec + KL_WEIGHT * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        acc += rec.item()
        if step % LOG_EVERY == 0:
            print("vae step %d rec %.5f kl %.3f lr %.2e %.1fs" %
                  (step, acc / LOG_EVERY, kl.item(), lr, time.time() - t_start), flush=True)
            acc = 0.0
        if time.time() - last_ckpt > CKPT_SECONDS or step == a.steps:
            save(ckpt, vae, opt, step)
            last_ckpt = time.time()
            with torch.no_grad():
                imgs = [st_io.to_u8(i) for i in torch.cat([x, y.clamp(-1, 1)])]
            st_io.write_png(os.path.join(a.workdir, "vae_samples.png"), st_io.grid(imgs, BATCH))
    if a.decoder_only:
        st_io.save_safetensors(os.path.join(a.workdir, "vae.safetensors"), vae.state_dict())
        print("decoder-only: %d steps, %.0fs" % (step, time.time() - t_start), flush=True)
        return 0
    # latent statistics of the mean latents over a fixed set of images
    vae.eval()
    g = torch.Generator().manual_seed(a.seed * 7 + 3)
    zs, err = [], 0.0
    with torch.no_grad():
        for _ in range(STATS_IMAGES // 64):
            x, _, _ = data.sample_batch(g, 64, scenes)
            x = x.contiguous(memory_format=torch.channels_last)
            m, _ = vae.encode(x)
            zs.append(m)
            err = max(err, (vae.decode(m) - x).abs().max().item())
    z = torch.cat(zs)
    stats = {"shift_factor": z.mean().item(), "scaling_factor": 1.0 / z.std().item(),
             "max_abs_reconstruction_error": err, "steps": step,
             "seconds": time.time() - t_start}
    print(json.dumps(stats), flush=True)
    with open(os.path.join(a.workdir, "vae_stats.json"), "w") as f:
        json.dump(stats, f, indent=2)
    st_io.save_safetensors(os.path.join(a.workdir, "vae.safetensors"), vae.state_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main())
