"""evalacc.py — the colour check of tests/shapes_accuracy.sh (lib/builtin/shapes_grammar.c's
shapes_check) in PyTorch, for judging a training run on the held-out scenes as it goes."""
import torch

import shapes_data as data

INNER_SHARE, OUTER_SHARE, OUTER_PAD_PX = 0.3, 1.4, 6.0
PALETTE = torch.tensor([data.COLOURS[c] for c in data.COLOUR_NAMES], dtype=torch.float32)


def check(img_u8, scene):
    """img_u8 (3, H, W) uint8-valued tensor, scene tuple -> (shape colour right, bg right)."""
    c, s, b, z, p = scene
    H, W = img_u8.shape[1:]
    r = data.RADIUS[z]
    cx, cy = data.position_centre(p, z)
    ys = (torch.arange(H, dtype=torch.float64) + 0.5) * 128.0 / H
    xs = (torch.arange(W, dtype=torch.float64) + 0.5) * 128.0 / W
    d = torch.sqrt((xs[None, :] - cx) ** 2 + (ys[:, None] - cy) ** 2)
    px = img_u8.reshape(3, -1).T.float()
    near = ((px[:, None, :] - PALETTE[None]) ** 2).sum(-1).argmin(1)
    inner = (d < INNER_SHARE * r * (1 - data.JITTER_SCALE)).reshape(-1)
    outer = (d > OUTER_SHARE * r * (1 + data.JITTER_SCALE) + OUTER_PAD_PX).reshape(-1)
    fg = torch.bincount(near[inner], minlength=8).argmax().item()
    bg = torch.bincount(near[outer], minlength=8).argmax().item()
    return (fg == data.COLOUR_NAMES.index(c), bg == data.COLOUR_NAMES.index(b))
