"""flux_ckpt.py — the transformer's checkpoints for train_flux.py:

  WORKDIR/flux.ckpt   full (fp32 model, EMA, Adam's moments, step, seconds): resumes exactly;
                      in the ignored work folder, so it does not outlive the machine
  CKPT_DIR            compact, committed to git (each file < 3 MB): model.safetensors and
                      ema.safetensors in fp16, state.json (step, seconds of training so far);
                      resuming from it restarts Adam with a short warm-up
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(1, os.path.join(HERE, ".."))  # st_io
import st_io  # noqa: E402

CKPT_DIR = os.path.join(HERE, "checkpoint")


def load(workdir, model, ema, opt):
    """Load the newest checkpoint into model / ema / opt -> {"step", "seconds", "warm_from",
    "source"}; step 0 when there is none."""
    full = os.path.join(workdir, "flux.ckpt")
    if os.path.exists(full):
        st = torch.load(full)
        model.load_state_dict(st["model"])
        ema.load_state_dict(st["ema"])
        opt.load_state_dict(st["opt"])
        return {"step": st["step"], "seconds": st["seconds"],
                "warm_from": st.get("warm_from", 0), "source": full}
    state = os.path.join(CKPT_DIR, "state.json")
    if os.path.exists(state):
        with open(state) as f:
            s = json.load(f)
        model.load_state_dict(st_io.load_safetensors(os.path.join(CKPT_DIR, "model.safetensors")))
        ema.load_state_dict(st_io.load_safetensors(os.path.join(CKPT_DIR, "ema.safetensors")))
        return {"step": s["step"], "seconds": s["seconds"], "warm_from": s["step"],
                "source": CKPT_DIR + " (fp16, Adam restarted)"}
    return {"step": 0, "seconds": 0.0, "warm_from": 0, "source": "new"}


def save_full(workdir, model, ema, opt, step, seconds, warm_from):
    path = os.path.join(workdir, "flux.ckpt")
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict(),
                "step": step, "seconds": seconds, "warm_from": warm_from}, tmp)
    os.replace(tmp, path)


def save_compact(ema, model, step, seconds):
    os.makedirs(CKPT_DIR, exist_ok=True)
    meta = {"format": "pt", "producer": "cpdit tests/reference/train-builtin", "steps": str(step)}
    for name, m in (("ema", ema), ("model", model)):
        tmp = os.path.join(CKPT_DIR, name + ".safetensors.tmp")
        st_io.save_safetensors(tmp, m.state_dict(), torch.float16, meta)
        os.replace(tmp, os.path.join(CKPT_DIR, name + ".safetensors"))
    with open(os.path.join(CKPT_DIR, "state.json"), "w") as f:
        json.dump({"step": step, "seconds": round(seconds, 1)}, f, indent=2)
        f.write("\n")
