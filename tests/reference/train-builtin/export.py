#!/usr/bin/python3
"""export.py — a trained builtin:shapes out of the training folder, two ways:

    /usr/bin/python3 tests/reference/train-builtin/export.py WORKDIR
        ship it: the transformer's EMA weights (bf16) and the VAE (fp32: the field decoder's
        norm biases need more than bf16's 8 bits) into lib/builtin/shapes/, and the VAE's
        latent factors into lib/builtin/shapes/vae_factors.h (included by
        lib/builtin/builtin_model.c, whose SHAPES sizes must be shapes_config.py's); then make

    /usr/bin/python3 tests/reference/train-builtin/export.py WORKDIR --model-dir DIR
        try it through cpdit before shipping: DIR is `cpdit builtin write DIR --name shapes`;
        its transformer and VAE configs get shapes_config.py's sizes and the factors, their
        weights the trained ones (same dtypes); `model: DIR` in a manifest then runs it

The transformer comes from WORKDIR/flux.ckpt, or the committed checkpoint (flux_ckpt.py) when
there is none.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, ".."))  # tests/reference: st_io
import flux_ckpt  # noqa: E402
import shapes_config as cfg  # noqa: E402
import st_io  # noqa: E402

OUT = os.path.join(HERE, "..", "..", "..", "lib", "builtin", "shapes")
PRODUCER = "cpdit tests/reference/train-builtin"


def ema_weights(work):
    """(EMA state dict, step) from WORKDIR/flux.ckpt or flux_ckpt.CKPT_DIR."""
    full = os.path.join(work, "flux.ckpt")
    if os.path.exists(full):
        st = torch.load(full)
        return st["ema"], st["step"]
    with open(os.path.join(flux_ckpt.CKPT_DIR, "state.json")) as f:
        step = json.load(f)["step"]
    return st_io.load_safetensors(os.path.join(flux_ckpt.CKPT_DIR, "ema.safetensors")), step


def patch_config(path, values):
    with open(path) as f:
        c = json.load(f)
    c.update(values)
    with open(path, "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("--model-dir")
    a = ap.parse_args()
    with open(os.path.join(a.workdir, "vae_stats.json")) as f:
        stats = json.load(f)
    ema, step = ema_weights(a.workdir)
    vae = st_io.load_safetensors(os.path.join(a.workdir, "vae.safetensors"))
    tmeta = {"format": "pt", "producer": PRODUCER, "steps": step}
    vmeta = {"format": "pt", "producer": PRODUCER, "steps": stats["steps"]}
    factors = {"scaling_factor": stats["scaling_factor"], "shift_factor": stats["shift_factor"]}
    if a.model_dir:
        d = a.model_dir
        st_io.save_safetensors(os.path.join(d, "transformer", "diffusion_pytorch_model.safetensors"),
                               ema, torch.bfloat16, tmeta)
        st_io.save_safetensors(os.path.join(d, "vae", "diffusion_pytorch_model.safetensors"),
                               vae, torch.float32, vmeta)
        patch_config(os.path.join(d, "transformer", "config.json"),
                     {k: v for k, v in cfg.TRANSFORMER.items()})
        patch_config(os.path.join(d, "vae", "config.json"), dict(cfg.VAE, **factors))
        print("patched %s: transformer step %d, factors %.6g / %.6g"
              % (d, step, factors["scaling_factor"], factors["shift_factor"]))
        return 0
    st_io.save_safetensors(os.path.join(OUT, "transformer.safetensors"), ema, torch.bfloat16,
                           tmeta)
    st_io.save_safetensors(os.path.join(OUT, "vae.safetensors"), vae, torch.float32, vmeta)
    with open(os.path.join(OUT, "vae_factors.h"), "w") as f:
        f.write("/* vae_factors.h — written by tests/reference/train-builtin/export.py: builtin:shapes' VAE "
                "latent\n * statistics (1 / std and mean of the latent fields over training "
                "scenes). */\n")
        f.write("#define SHAPES_VAE_SCALING %.9g\n" % stats["scaling_factor"])
        f.write("#define SHAPES_VAE_SHIFT %.9g\n" % stats["shift_factor"])
    print("wrote %s: transformer (step %d), vae, factors %.6g / %.6g"
          % (OUT, step, stats["scaling_factor"], stats["shift_factor"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
