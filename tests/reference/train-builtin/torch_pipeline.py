#!/usr/bin/python3
"""torch_pipeline.py — builtin:shapes sampled by PyTorch (FluxPipeline's loop, sampler.py) from
a model folder written by cpdit, to compare with cpdit's own PNGs for the same prompts and seed.

    /usr/bin/python3 tests/reference/train-builtin/torch_pipeline.py MODEL_DIR OUTDIR --seed S --steps N
        [--true-cfg C] [--size 128] [--max-sequence-length 32] PROMPT...

MODEL_DIR: `cpdit builtin write MODEL_DIR --name shapes` (every weight and config is read from
it: the bf16 weights as stored, computed in float32). Writes OUTDIR/NN.png, one per prompt in
order (NN = 00, 01, ...). Exit 0, or 77 when torch is missing (a test's "skip").
"""
import argparse
import json
import os
import sys

try:
    import torch
except ImportError:
    sys.stderr.write("torch_pipeline.py: no torch (use Debian's /usr/bin/python3 with "
                     "python3-torch); skipping\n")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, ".."))  # tests/reference: st_io
import models  # noqa: E402
import sampler  # noqa: E402
import st_io  # noqa: E402
import text  # noqa: E402


def load_json(path):
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--true-cfg", type=float, default=1.0)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--max-sequence-length", type=int, default=32)
    ap.add_argument("prompts", nargs="+")
    a = ap.parse_args()
    torch.set_num_threads(1)
    d = a.model_dir
    tcfg = load_json(os.path.join(d, "transformer", "config.json"))
    vcfg = load_json(os.path.join(d, "vae", "config.json"))
    sched = load_json(os.path.join(d, "scheduler", "scheduler_config.json"))
    if sched.get("use_dynamic_shifting") or sched.get("shift", 1.0) != 1.0:
        sys.exit("torch_pipeline.py: only the unshifted schedule of builtin:shapes is implemented")
    transformer = models.FluxTransformer(tcfg)
    transformer.load_state_dict(st_io.load_safetensors(
        os.path.join(d, "transformer", "diffusion_pytorch_model.safetensors")))
    vae = models.AutoencoderKL(vcfg).to(memory_format=torch.channels_last)
    vae.load_state_dict(st_io.load_safetensors(
        os.path.join(d, "vae", "diffusion_pytorch_model.safetensors")))
    transformer.eval()
    vae.eval()
    te = text.TextEncoders(d, a.max_sequence_length)
    stats = {"scaling_factor": vcfg["scaling_factor"], "shift_factor": vcfg["shift_factor"]}
    imgs = sampler.sample(transformer, vae, te, stats, a.prompts, a.seed, a.steps, a.true_cfg,
                          a.size)
    os.makedirs(a.outdir, exist_ok=True)
    for i, im in enumerate(imgs):
        st_io.write_png(os.path.join(a.outdir, "%02d.png" % i), st_io.to_u8(im))
    return 0


if __name__ == "__main__":
    sys.exit(main())
