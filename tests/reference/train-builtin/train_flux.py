#!/usr/bin/python3
"""train_flux.py — stage 2 of builtin:shapes: the FluxTransformer2DModel, trained with the
rectified-flow (flow-matching) loss on the latent fields of shapes_data.py (decoded by the VAE of
vae_fields.py), conditioned as FluxPipeline conditions (CLIP pooled output + T5 tokens, both
frozen at the weights cpdit generates).

    nice -n 19 /usr/bin/python3 tests/reference/train-builtin/train_flux.py WORKDIR TEXTDIR [--steps N]

TEXTDIR: `cpdit builtin write TEXTDIR --name shapes --text-only` (configs, tokenizers, text
encoders). WORKDIR: holds vae_stats.json from vae_fields.py.

Loss: x0 = (fields - shift) * scale, packed 2x2; noise n; sigma uniform on (0, 1) or
logit-normal(0, 1) (half the batch each); x_sigma = (1 - sigma) x0 + sigma n; the model predicts
v = n - x0. A caption is replaced by "" with probability P_UNCOND (true CFG with the empty
negative prompt).

Captions: a pool of POOL (scene, wording) pairs in training wordings (shapes_data.random_caption),
encoded once (WORKDIR/captions.pt); each step draws pool rows, re-draws the size / place a
wording leaves out, jitters the geometry and computes the fields afresh.

Checkpoints: WORKDIR/flux.ckpt (model, EMA, Adam) every --ckpt-seconds; the compact one that
is committed (CKPT_DIR: model and EMA weights in fp16, step and time in state.json) every
--commit-seconds. A run resumes from WORKDIR/flux.ckpt, else from CKPT_DIR (Adam restarts
with a short warm-up). Every --eval-every steps: the held-out check (evalacc.py) on
EVAL_PROMPTS of heldout_prompts.txt with the EMA weights (20 steps, true CFG 4), printed and
drawn into WORKDIR/flux_samples.png, and appended to WORKDIR/eval.log.
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
import flux_ckpt  # noqa: E402
import models  # noqa: E402
import sampler  # noqa: E402
import shapes_config as cfg  # noqa: E402
import shapes_data as data  # noqa: E402
import st_io  # noqa: E402
import text  # noqa: E402

BATCH = 32
LR = 1e-3
WARMUP = 200
RESUME_WARMUP = 100  # Adam restarted from the compact checkpoint
EMA = 0.999
P_UNCOND = 0.1
POOL = 24576         # pre-encoded (scene, wording) pairs
LOG_EVERY = 100
SAMPLE_STEPS = 20
SAMPLE_CFG = 4.0
EVAL_PROMPTS = 48   # the first prompts of heldout_prompts.txt (seed 1) checked while training


def build_captions(workdir, te, seed, scenes, n_pool):
    """n_pool (scene, training wording) pairs, encoded once: {"scene", "names_size",
    "names_place" (n_pool), "pooled" (n_pool + 1, 32), "t5" (n_pool + 1, L, 64)}; row 0 of
    the encodings is "", row 1 + i is pair i's wording."""
    path = os.path.join(workdir, "captions.pt")
    if os.path.exists(path):
        return torch.load(path)
    g = torch.Generator().manual_seed(seed * 31 + 7)
    idx = torch.randint(len(scenes), (n_pool,), generator=g).tolist()
    caps, ns, npl = [""], [], []
    for i in idx:
        c, a, b = data.random_caption(g, scenes[i])
        caps.append(c)
        ns.append(a)
        npl.append(b)
    pooled, t5 = [], []
    t = time.time()
    for at in range(0, len(caps), 256):
        p, e = te.embed(caps[at:at + 256])
        te.cache.clear()
        pooled.append(p)
        t5.append(e)
    pool = {"scene": torch.tensor(idx), "names_size": torch.tensor(ns),
            "names_place": torch.tensor(npl), "captions": caps,
            "pooled": torch.cat(pooled), "t5": torch.cat(t5)}
    torch.save(pool, path)
    print("encoded %d captions in %.0fs" % (len(caps), time.time() - t), flush=True)
    return pool


def standardise_input(linear, x):
    """Fold (x - mean) / std (per feature, over the rows of x) into linear's weight and bias."""
    x = x.reshape(-1, x.shape[-1]).double()
    mu, sd = x.mean(0), x.std(0).clamp(min=1e-3)
    with torch.no_grad():
        w = linear.weight.double() / sd[None, :]
        linear.bias.copy_((linear.bias.double() - w @ mu).float())
        linear.weight.copy_(w.float())


def lr_at(step, total, decay_from, warm_from):
    """Warm-up (from step warm_from), constant LR, a cosine to 0 from decay_from to total."""
    w = WARMUP if warm_from == 0 else RESUME_WARMUP
    if step - warm_from < w:
        return LR * (step - warm_from + 1) / w
    if step < decay_from:
        return LR
    return LR * 0.5 * (1 + math.cos(math.pi * (step - decay_from) / max(1.0, total - decay_from)))


def batch_at(seed, step, n, pool, scenes, stats):
    """Step's batch from a generator seeded by step: x0 (n, 8, 16, 16) normalised fields,
    caption rows (n) into pool["pooled"] / pool["t5"] (0 = ""), the generator."""
    g = torch.Generator().manual_seed(seed * 1000003 + step)
    pick = torch.randint(len(pool["scene"]), (n,), generator=g).tolist()
    xs = []
    for i in pick:
        c, s, b, z, p = scenes[pool["scene"][i].item()]
        r = torch.randint(1 << 20, (2,), generator=g).tolist()
        if not pool["names_size"][i]:
            z = data.SIZES[r[0] % len(data.SIZES)]
        if not pool["names_place"][i]:
            p = data.PLACES[r[1] % len(data.PLACES)]
        sc = (c, s, b, z, p)
        xs.append(data.fields_at(sc, data.jittered(sc, g)))
    x0 = (torch.stack(xs) - stats["shift_factor"]) * stats["scaling_factor"]
    rows = torch.tensor(pick) + 1
    rows[torch.rand(n, generator=g) < P_UNCOND] = 0
    return x0, rows, g


def flow_loss(model, x0, pooled, t5, g, img_ids, txt_ids):
    """Rectified-flow loss; sigma uniform for the first half of the batch, logit-normal for
    the rest (the layout is decided at high noise, the colours at mid noise)."""
    n = x0.shape[0]
    sigma = torch.rand(n, generator=g)
    h = n // 2
    sigma[h:] = torch.sigmoid(torch.randn(n - h, generator=g))
    noise = torch.randn(x0.shape, generator=g)
    xs = (1 - sigma[:, None, None]) * x0 + sigma[:, None, None] * noise
    v = model(xs, t5, pooled, sigma, img_ids, txt_ids)
    return ((v - (noise - x0)) ** 2).mean()


def heldout(n=None):
    """The held-out prompts (seed, prompt, scene, names_size, names_place), the first n."""
    out = data.heldout_prompts()
    return out if n is None else out[:n]


@torch.no_grad()
def evaluate(ema, vae, te, stats, workdir, items, sample_path=None):
    """Held-out check of items (heldout()): counts of colours right, kinds right, places right
    (of those naming a place), all right; and the number naming a place."""
    res, u8s = [], []
    for seed, prompt, sc, _, names_place in items:
        img = sampler.sample(ema, vae, te, stats, [prompt], seed=seed, steps=SAMPLE_STEPS,
                             true_cfg=SAMPLE_CFG, size=cfg.IMAGE)[0]
        u8 = st_io.to_u8(img)
        u8s.append(u8)
        r = evalacc.check(torch.from_numpy(u8).permute(2, 0, 1), sc)
        r["names_place"] = names_place
        res.append(r)
    if sample_path:
        st_io.write_png(sample_path, st_io.grid(u8s, 8))
    named = [r for r in res if r["names_place"]]
    return {"n": len(res), "colours": sum(r["colours"] for r in res),
            "kind": sum(r["kind_right"] for r in res),
            "place": sum(r["place_right"] for r in named), "named_place": len(named),
            "all": sum(r["colours"] and r["kind_right"] and
                       (r["place_right"] or not r["names_place"]) for r in res)}


def eval_line(step, ev):
    return ("eval step %d: held-out %d prompts: colours %d, kind %d, place %d/%d, all %d"
            % (step, ev["n"], ev["colours"], ev["kind"], ev["place"], ev["named_place"],
               ev["all"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("textdir")
    ap.add_argument("--steps", type=int, default=60000)
    ap.add_argument("--decay-from", type=int, default=50000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pool", type=int, default=POOL)
    ap.add_argument("--ckpt-seconds", type=int, default=600)
    ap.add_argument("--commit-seconds", type=int, default=1800)
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--stop-after", type=int, default=0, help="stop after this many steps")
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
    pool = build_captions(a.workdir, te, a.seed, scenes, a.pool)
    n_lat = data.IMAGE_SIZE // data.BLOCK
    img_ids = models.latent_image_ids(n_lat // 2, n_lat // 2)
    txt_ids = torch.zeros(cfg.MAX_SEQUENCE_LENGTH, 3)

    model = models.FluxTransformer(cfg.TRANSFORMER)
    standardise_input(model.context_embedder, pool["t5"])
    standardise_input(model.time_text_embed.text_embedder.linear_1, pool["pooled"])
    ema = copy.deepcopy(model)
    for p in ema.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0, betas=(0.9, 0.99))
    st = flux_ckpt.load(a.workdir, model, ema, opt)
    step, seconds, warm_from = st["step"], st["seconds"], st["warm_from"]
    print("transformer parameters: %d; start at step %d (%s)" %
          (sum(p.numel() for p in model.parameters()), step, st["source"]), flush=True)
    items = heldout(EVAL_PROMPTS)
    t_start = time.time() - seconds
    t_run = time.time()
    last_ckpt = last_commit = time.time()
    acc, first = 0.0, step
    while step < a.steps and (a.stop_after == 0 or step - first < a.stop_after):
        x0, rows, g = batch_at(a.seed, step, BATCH, pool, scenes, stats)
        x0 = models.pack_latents(x0)
        lr = lr_at(step, a.steps, a.decay_from, warm_from)
        for pg in opt.param_groups:
            pg["lr"] = lr
        loss = flow_loss(model, x0, pool["pooled"][rows], pool["t5"][rows], g, img_ids, txt_ids)
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
            el = time.time() - t_run
            print("flux step %d loss %.4f lr %.2e %.0fs (%.2f steps/s this run)" %
                  (step, acc / LOG_EVERY, lr, time.time() - t_start, (step - first) / el),
                  flush=True)
            acc = 0.0
        if step % a.eval_every == 0 or step == a.steps:
            ev = evaluate(ema, vae, te, stats, a.workdir, items,
                          os.path.join(a.workdir, "flux_samples.png"))
            line = eval_line(step, ev)
            print(line, flush=True)
            with open(os.path.join(a.workdir, "eval.log"), "a") as f:
                f.write(line + "\n")
        done = step == a.steps or (a.stop_after and step - first >= a.stop_after)
        if time.time() - last_ckpt > a.ckpt_seconds or done:
            flux_ckpt.save_full(a.workdir, model, ema, opt, step, time.time() - t_start,
                                warm_from)
            last_ckpt = time.time()
        if time.time() - last_commit > a.commit_seconds or done:
            flux_ckpt.save_compact(ema, model, step, time.time() - t_start)
            last_commit = time.time()
    print("trained to step %d, %.0fs in all" % (step, time.time() - t_start), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
