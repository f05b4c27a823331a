#!/usr/bin/python3
"""export.py — ship a trained builtin:shapes: WORKDIR's VAE and the transformer's EMA weights as
bf16 safetensors in lib/builtin/shapes/, and the VAE's latent factors as
lib/builtin/shapes/vae_factors.h (included by lib/builtin/builtin_model.c). Rebuild cpdit
afterwards (make), then check it with torch_pipeline.py.

    /usr/bin/python3 tests/reference/train-builtin/export.py WORKDIR
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))  # tests/reference: st_io
import st_io  # noqa: E402

OUT = os.path.join(HERE, "..", "..", "..", "lib", "builtin", "shapes")


def main():
    work = sys.argv[1]
    with open(os.path.join(work, "vae_stats.json")) as f:
        stats = json.load(f)
    flux = torch.load(os.path.join(work, "flux.ckpt"))
    meta = {"format": "pt", "producer": "cpdit tests/reference/train-builtin", "steps": flux["step"]}
    st_io.save_safetensors(os.path.join(OUT, "transformer.safetensors"), flux["ema"],
                           torch.bfloat16, meta)
    vae = st_io.load_safetensors(os.path.join(work, "vae.safetensors"))
    st_io.save_safetensors(os.path.join(OUT, "vae.safetensors"), vae, torch.bfloat16,
                           {"format": "pt", "producer": "cpdit tests/reference/train-builtin",
                            "steps": stats["steps"]})
    with open(os.path.join(OUT, "vae_factors.h"), "w") as f:
        f.write("/* vae_factors.h — written by tests/reference/train-builtin/export.py: builtin:shapes' VAE "
                "latent\n * statistics (1 / std and mean of the encoder's mean latents over "
                "training images). */\n")
        f.write("#define SHAPES_VAE_SCALING %.9g\n" % stats["scaling_factor"])
        f.write("#define SHAPES_VAE_SHIFT %.9g\n" % stats["shift_factor"])
    print("wrote %s: transformer (step %d), vae (step %d), factors %.6g / %.6g"
          % (OUT, flux["step"], stats["steps"], stats["scaling_factor"], stats["shift_factor"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
