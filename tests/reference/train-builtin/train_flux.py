#!/usr/bin/python3
"""train_flux.py — stage 2 of builtin:shapes: the FluxTransformer2DModel, trained with the
rectified-flow (flow-matching) loss on the stage-1 VAE's latents, conditioned as FluxPipeline
conditions (CLIP pooled output + T5 tokens, both frozen at the weights cpdit generates).

    /usr/bin/python3 tests/reference/train-builtin/train_flux.py WORKDIR TEXTDIR [--steps N] [--seed S]

TEXTDIR: `cpdit builtin write TEXTDIR --name shapes --text-only` (configs, tokenizers, text
encoders). WORKDIR: holds vae.safetensors and vae_stats.json from train_vae.py.

Loss: x0 = (VAE mean latent - shift) * scale, packed 2x2; noise n; sigma drawn from a
logit-normal; x_sigma = (1 - sigma) x0 + sigma n; the model predicts v = n - x0 (FluxPipeline's
Euler step x <- x + (sigma_next - sigma) v integrates it from sigma 1 to 0). A caption is
replaced by "" with probability P_UNCOND so that true CFG with an empty negative prompt works.

Speed: every caption of the grammar is encoded once (WORKDIR/text_emb.pt), so a step costs
only the transformer. Conditioning: the frozen encoders' outputs share a large common part
(cosine 0.96-0.98 between prompts one word apart); the first layers that read them
(context_embedder, time_text_embed.text_embedder.linear_1) are initialised to standardise
their input per feature (mean and std over the grammar folded into weight and bias), which
is the same function class, so the C side loads the result unchanged.

Deterministic from the seed; step k's batch comes from a generator seeded with (seed, k); the
checkpoint (WORKDIR/flux.ckpt, every CKPT_SECONDS) holds the model, its EMA and Adam's state.
Every EVAL_EVERY steps: the loss with true vs shuffled captions on a fixed batch, and the
colour check of tests/shapes_accuracy.sh (evalacc.py) on the 16 held-out prompts sampled with
the EMA weights (20 steps, true CFG), printed and drawn into WORKDIR/flux_samples.png.
"""
import argparse
import copy
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # st_io
import evalacc  # noqa: E402
import models  # noqa: E402
import sampler  # noqa: E402
import shapes_config as cfg  # noqa: E402
import shapes_data as data  # noqa: E402
import st_io  # noqa: E402
import text  # noqa: E402

BATCH = 32
LR = 1e-3
WARMUP = 200
DECAY_FROM = 7000    # the learning rate decays (cosine) to 0 from this step to --steps
EMA = 0.999
P_UNCOND = 0.1
POOL_TOLERANCE = 0.02
POOL = 4096          # pre-encoded (scene, latent) pairs; images re-rendered with new jitter
CKPT_SECONDS = 300
LOG_EVERY = 100
EVAL_EVERY = 1000
SAMPLE_STEPS = 20
SAMPLE_CFG = 4.0
# Noise levels: logit-normal(0, 1) for the first steps (mid noise: the colours are learned
# there), then uniform on (0, 1), the sampler's own grid (the layout is decided at high noise,
# which the logit-normal hardly visits): see README.md for the numbers.
SIGMA_UNIFORM_FROM = 3000


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


def build_embeddings(workdir, te, scenes):
    """Every training caption and "" encoded once: {"captions": list, "pooled", "t5"};
    captions[i] is encoded in row i, row 0 is ""."""
    path = os.path.join(workdir, "text_emb.pt")
    if os.path.exists(path):
        return torch.load(path)
    caps = [""] + sorted({w for sc in scenes for w, _, _ in data.captions(*sc)})
    pooled, t5 = [], []
    t = time.time()
    for at in range(0, len(caps), 256):
        p, e = te.embed(caps[at:at + 256])
        te.cache.clear()
        pooled.append(p)
        t5.append(e)
    emb = {"captions": caps, "pooled": torch.cat(pooled), "t5": torch.cat(t5)}
    torch.save(emb, path)
    print("encoded %d captions in %.0fs" % (len(caps), time.time() - t), flush=True)
    return emb


def standardise_input(linear, x):
    """Fold (x - mean) / std (per feature, over the rows of x) into linear's weight and bias."""
    x = x.reshape(-1, x.shape[-1]).double()
    mu, sd = x.mean(0), x.std(0).clamp(min=1e-3)
    with torch.no_grad():
        w = linear.weight.double() / sd[None, :]
        linear.bias.copy_((linear.bias.double() - w @ mu).float())
        linear.weight.copy_(w.float())


def lr_at(step, total):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    at = min(DECAY_FROM, total)
    if step < at:
        return LR
    return LR * 0.5 * (1 + math.cos(math.pi * (step - at) / max(1.0, total - at)))


def batch_at(seed, step, n, pool, scenes, cap_index):
    """(pool rows, caption rows) of step's batch (n of each), from a generator seeded by step."""
    g = torch.Generator().manual_seed(seed * 1000003 + step)
    pick = torch.randint(pool["latents"].shape[0], (n,), generator=g)
    rows = []
    for i in pool["idx"][pick].tolist():
        ws = data.captions(*scenes[i])
        rows.append(cap_index[ws[torch.randint(len(ws), (1,), generator=g).item()][0]])
    rows = torch.tensor(rows)
    drop = torch.rand(n, generator=g) < P_UNCOND
    rows[drop] = 0
    return pick, rows, g


def flow_loss(model, x0, pooled, t5, g, img_ids, txt_ids, uniform):
    n = x0.shape[0]
    if uniform:
        sigma = torch.rand(n, generator=g)
    else:
        sigma = torch.sigmoid(torch.randn(n, generator=g))  # logit-normal(0, 1)
    noise = torch.randn(x0.shape, generator=g)
    xs = (1 - sigma[:, None, None]) * x0 + sigma[:, None, None] * noise
    v = model(xs, t5, pooled, sigma, img_ids, txt_ids)
    return ((v - (noise - x0)) ** 2).mean()


@torch.no_grad()
def evaluate(ema, vae, te, stats, workdir, pool, scenes, emb, cap_index, seed, img_ids, txt_ids):
    """(loss with captions, loss with shuffled captions, held-out scenes right of 16, shape
    colours right, backgrounds right)."""
    pick, rows, _ = batch_at(seed + 999, 0, 256, pool, scenes, cap_index)
    keep = rows != 0
    pick, rows = pick[keep], rows[keep]
    x0 = models.pack_latents(pool["latents"][pick])
    shuf = rows[torch.randperm(len(rows), generator=torch.Generator().manual_seed(5))]
    out = []
    for r in (rows, shuf):
        g = torch.Generator().manual_seed(11)
        out.append(flow_loss(ema, x0, emb["pooled"][r], emb["t5"][r], g, img_ids,
                             txt_ids, True).item())
    prompts = [data.caption_full(*s) for s in data.HELD_OUT]
    imgs = sampler.sample(ema, vae, te, stats, prompts, seed=7, steps=SAMPLE_STEPS,
                          true_cfg=SAMPLE_CFG, size=cfg.IMAGE)
    u8 = [st_io.to_u8(i) for i in imgs]
    res = [evalacc.check(torch.from_numpy(u).permute(2, 0, 1), s)
           for u, s in zip(u8, data.HELD_OUT)]
    st_io.write_png(os.path.join(workdir, "flux_samples.png"), st_io.grid(u8, 4))
    return (out[0], out[1], sum(a and b for a, b in res), sum(a for a, _ in res),
            sum(b for _, b in res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("textdir")
    ap.add_argument("--steps", type=int, default=8500)
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
    emb = build_embeddings(a.workdir, te, scenes)
    cap_index = {c: i for i, c in enumerate(emb["captions"])}
    lat = pool["latents"]
    N, C, H, W = lat.shape
    img_ids = models.latent_image_ids(H // 2, W // 2)
    txt_ids = torch.zeros(cfg.MAX_SEQUENCE_LENGTH, 3)

    model = models.FluxTransformer(cfg.TRANSFORMER)
    standardise_input(model.context_embedder, emb["t5"])
    standardise_input(model.time_text_embed.text_embedder.linear_1, emb["pooled"])
    ema = copy.deepcopy(model)
    for p in ema.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0, betas=(0.9, 0.99))
    ckpt = os.path.join(a.workdir, "flux.ckpt")
    step, seconds = 0, 0.0
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        model.load_state_dict(st["model"])
        ema.load_state_dict(st["ema"])
        opt.load_state_dict(st["opt"])
        step, seconds = st["step"], st.get("seconds", 0.0)
        print("resumed at step %d" % step, flush=True)
    print("transformer parameters: %d" % sum(p.numel() for p in model.parameters()), flush=True)

    t_start = time.time() - seconds
    last_ckpt = time.time()
    acc = 0.0
    while step < a.steps:
        pick, rows, g = batch_at(a.seed, step, BATCH, pool, scenes, cap_index)
        x0 = models.pack_latents(lat[pick])
        lr = lr_at(step, a.steps)
        for pg in opt.param_groups:
            pg["lr"] = lr
        loss = flow_loss(model, x0, emb["pooled"][rows], emb["t5"][rows], g, img_ids, txt_ids,
                         step >= SIGMA_UNIFORM_FROM)
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
        if step % EVAL_EVERY == 0 or step == a.steps:
            ev = evaluate(ema, vae, te, stats, a.workdir, pool, scenes, emb, cap_index, a.seed,
                          img_ids, txt_ids)
            print("eval step %d: loss %.4f, shuffled captions %.4f (gap %.4f); held-out "
                  "%d/16 right (shape colour %d, background %d) at cfg %g" %
                  ((step, ev[0], ev[1], ev[1] - ev[0]) + ev[2:] + (SAMPLE_CFG,)), flush=True)
        if time.time() - last_ckpt > a.ckpt_seconds or step == a.steps:
            tmp = ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "ema": ema.state_dict(),
                        "opt": opt.state_dict(), "step": step,
                        "seconds": time.time() - t_start}, tmp)
            os.replace(tmp, ckpt)
            last_ckpt = time.time()
    print("trained %d steps in %.0fs" % (step, time.time() - t_start), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
