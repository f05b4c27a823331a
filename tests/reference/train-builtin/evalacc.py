"""evalacc.py — judging an image of builtin:shapes against its scene, for progress during
training (the held-out evaluation): colours, shape kind and place, from the image alone.

  colours  every pixel takes its nearest palette colour; the background is the majority
           colour of the image's border (2 pixels wide), the shape colour the majority of the
           other pixels (at least MIN_SHAPE_PIXELS of them): right when both are the named ones
  kind     on the pixels of the named shape colour (bounding box w x h): fill = pixels / (w h),
           top = the share of them in the box's upper half:
             fill < STAR_FILL: star; else top < TRIANGLE_TOP: triangle; else
             fill >= SQUARE_FILL: square; >= CIRCLE_FILL: circle; else diamond
           (thresholds midway between the shapes as the VAE decodes them, see calibrate())
  place    the centroid of those pixels in the 3 x 3 grid of thirds: "top left" ... "center"
           (only judged where the prompt names a place)
"""
import math

import torch

import shapes_data as data

PALETTE = torch.tensor([data.COLOURS[c] for c in data.COLOUR_NAMES], dtype=torch.float32)
MIN_SHAPE_PIXELS = 40
ANGLE_BINS, ROUND_MAX, STAR_WEIGHT = 36, 0.03, 1.0
ROWS, COLS = ["top", "", "bottom"], ["left", "", "right"]


def place_of(cx, cy, W, H):
    """The place name of the point (cx, cy) in the grid of thirds of a W x H image."""
    r = ROWS[min(2, int(3 * cy / H))]
    c = COLS[min(2, int(3 * cx / W))]
    return " ".join(w for w in (r, c) if w) or "center"


def features(mask):
    """mask (H, W) bool -> (pixels, fill, top share, centroid x, centroid y)."""
    ys, xs = torch.nonzero(mask, as_tuple=True)
    n = len(xs)
    if n == 0:
        return 0, 0.0, 0.0, -1.0, -1.0
    y0, y1, x0, x1 = ys.min().item(), ys.max().item(), xs.min().item(), xs.max().item()
    fill = n / float((y1 - y0 + 1) * (x1 - x0 + 1))
    top = (ys.float() + 0.5 < (y0 + y1 + 1) / 2.0).float().mean().item()
    return n, fill, top, xs.float().mean().item() + 0.5, ys.float().mean().item() + 0.5


def outline_harmonics(mask, cx, cy):
    """The outline seen from the centroid: r(theta) = the farthest mask pixel in each of
    ANGLE_BINS directions; -> (a3, a4, a5 relative to the mean radius, real part of the 4th
    harmonic's phase factor: > 0 corners on the axes (diamond), < 0 on the diagonals)."""
    ys, xs = torch.nonzero(mask, as_tuple=True)
    dx, dy = xs.double() + 0.5 - cx, ys.double() + 0.5 - cy
    th = torch.atan2(-dy, dx)
    b = ((th + math.pi) / (2 * math.pi) * ANGLE_BINS).long().clamp(0, ANGLE_BINS - 1)
    r = torch.zeros(ANGLE_BINS, dtype=torch.float64).scatter_reduce(
        0, b, torch.sqrt(dx * dx + dy * dy) + 0.5, reduce="amax", include_self=True)
    if (r > 0).sum() < ANGLE_BINS // 2:
        return 0.0, 0.0, 0.0, 0.0
    r[r == 0] = r[r > 0].mean()
    ang = (torch.arange(ANGLE_BINS, dtype=torch.float64) + 0.5) / ANGLE_BINS * 2 * math.pi - math.pi
    c = [(r * torch.exp(-1j * k * ang.to(torch.complex128))).sum() / (ANGLE_BINS * r.mean())
         for k in (3, 4, 5)]
    a = [2 * abs(v.item()) for v in c]
    return a[0], a[1], a[2], c[1].real.item() / max(abs(c[1].item()), 1e-12)


def kind_of(mask, cx, cy):
    """The kind of shape the mask is (module docstring)."""
    a3, a4, a5, diag = outline_harmonics(mask, cx, cy)
    if max(a3, a4, a5) < ROUND_MAX:
        return "circle"
    k = max((a3, "triangle"), (a4, "four"), (a5 * STAR_WEIGHT, "star"))[1]
    if k == "four":
        return "diamond" if diag > 0 else "square"
    return k


def check(img_u8, scene):
    """img_u8 (3, H, W) uint8-valued tensor, scene tuple -> dict: colours (bool), kind (the
    kind seen), kind_right, place (the place seen), place_right."""
    c, s, b, _, p = scene
    H, W = img_u8.shape[1:]
    px = img_u8.reshape(3, -1).T.float()
    near = ((px[:, None, :] - PALETTE[None]) ** 2).sum(-1).argmin(1).reshape(H, W)
    border = torch.ones(H, W, dtype=torch.bool)
    border[2:-2, 2:-2] = False
    bg = torch.bincount(near[border], minlength=8).argmax().item()
    rest = near[near != bg]
    fg = torch.bincount(rest, minlength=8).argmax().item() if len(rest) >= MIN_SHAPE_PIXELS \
        else -1
    ci = data.COLOUR_NAMES.index(c)
    n, fill, top, cx, cy = features(near == ci)
    kind = kind_of(near == ci, cx, cy) if n >= MIN_SHAPE_PIXELS else "none"
    place = place_of(cx, cy, W, H) if n >= MIN_SHAPE_PIXELS else "none"
    return {"colours": fg == ci and bg == data.COLOUR_NAMES.index(b), "kind": kind,
            "kind_right": kind == s, "place": place, "place_right": place == p}


def calibrate(vae, n=400):
    """The check on decoded (fields -> VAE decoder) training scenes: the ceiling of the
    evaluation. -> {(shape, size): (scenes, kinds right, places right, colours right)}."""
    import st_io
    g = torch.Generator().manual_seed(5)
    scenes = data.all_scenes()
    out = {}
    with torch.no_grad():
        for _ in range(n):
            sc = scenes[torch.randint(len(scenes), (1,), generator=g).item()]
            f = data.fields_at(sc, data.jittered(sc, g))
            y = vae.decode(f[None].contiguous(memory_format=torch.channels_last))[0]
            r = check(torch.from_numpy(st_io.to_u8(y)).permute(2, 0, 1), sc)
            out.setdefault((sc[1], sc[3]), []).append(r)
    return {k: (len(v), sum(x["kind_right"] for x in v), sum(x["place_right"] for x in v),
                sum(x["colours"] for x in v)) for k, v in sorted(out.items())}
