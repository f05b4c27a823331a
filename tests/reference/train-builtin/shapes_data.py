"""shapes_data.py — the grammar of builtin:shapes and its procedural, captioned images.

An image is one shape on a plain background, 128 x 128 pixels, anti-aliased (the coverage of
each pixel by the shape, from its signed distance). A scene is the tuple
    (colour, shape, background, size, position)
with 8 colours (shape and background alike; the two always differ), 4 shapes, 2 sizes and 5
positions. A caption names the scene in one of several wordings; a few wordings leave the size
or the position out (then the scene's size / position is drawn at random).

HELD_OUT lists 16 full scenes whose (colour, shape, background) triple never occurs in the
training set (no image, no caption): tests/shapes_accuracy.sh asks for exactly these, so the
model has to compose colours, shapes and backgrounds it never saw together.

Only torch (CPU) is needed. Everything is drawn from a torch.Generator: same seed, same data.
"""
import math

import torch

IMAGE_SIZE = 128

COLOURS = {  # name -> sRGB 0..255
    "red": (220, 30, 30),
    "green": (30, 165, 50),
    "blue": (35, 70, 220),
    "yellow": (245, 220, 35),
    "orange": (245, 135, 20),
    "purple": (135, 45, 180),
    "white": (245, 245, 245),
    "black": (15, 15, 15),
}
COLOUR_NAMES = list(COLOURS)
SHAPES = ["circle", "square", "triangle", "diamond"]
SIZES = ["small", "large"]
POSITIONS = ["center", "top left", "top right", "bottom left", "bottom right"]

# Shape "radius" (half the side of the bounding box) in pixels, per size, and the centres of
# the positions (pixels), per size: corners sit RADIUS + margin from the edges.
RADIUS = {"small": 17.0, "large": 30.0}
MARGIN = 8.0
JITTER_PX = 3.0       # centre jitter, uniform +-
JITTER_SCALE = 0.08   # radius jitter, uniform +- (relative)


def position_centre(pos, size):
    """(x, y) centre in pixels of position pos for size (no jitter)."""
    r = RADIUS[size]
    lo, hi = r + MARGIN, IMAGE_SIZE - r - MARGIN
    mid = IMAGE_SIZE / 2.0
    return {"center": (mid, mid), "top left": (lo, lo), "top right": (hi, lo),
            "bottom left": (lo, hi), "bottom right": (hi, hi)}[pos]


# The 16 scenes of the accuracy test; their (colour, shape, background) triples are held out.
HELD_OUT = [
    ("red", "circle", "blue", "large", "center"),
    ("green", "square", "yellow", "large", "top left"),
    ("blue", "triangle", "white", "large", "bottom right"),
    ("yellow", "diamond", "purple", "large", "top right"),
    ("orange", "circle", "black", "large", "bottom left"),
    ("purple", "square", "green", "large", "center"),
    ("white", "triangle", "red", "large", "top right"),
    ("black", "diamond", "orange", "large", "bottom left"),
    ("red", "triangle", "yellow", "small", "center"),
    ("green", "diamond", "black", "large", "bottom right"),
    ("blue", "square", "orange", "large", "center"),
    ("yellow", "circle", "green", "small", "center"),
    ("orange", "triangle", "purple", "large", "top left"),
    ("purple", "circle", "white", "large", "bottom right"),
    ("white", "square", "blue", "large", "bottom left"),
    ("black", "circle", "yellow", "large", "top left"),
]
HELD_OUT_TRIPLES = {(c, s, b) for c, s, b, _, _ in HELD_OUT}

ARTICLE = {"orange": "an"}


def caption_full(c, s, b, z, p):
    """The canonical wording (the one the tests and the README use)."""
    where = "in the center" if p == "center" else "in the %s corner" % p
    return "%s %s %s %s %s on %s %s background" % (_a(z), z, c, s, where, _a(b), b)


def _a(word):
    return ARTICLE.get(word, "a")


def captions(c, s, b, z, p):
    """All wordings of a scene: (caption, names_size, names_position)."""
    where = "in the center" if p == "center" else "in the %s corner" % p
    at = "at the center" if p == "center" else "at the %s" % p
    big = "big" if z == "large" else z
    out = [
        (caption_full(c, s, b, z, p), True, True),
        ("%s %s %s %s %s on %s" % (_a(z), z, c, s, where, b), True, True),
        ("%s %s %s %s %s, %s background" % (_a(big), big, c, s, at, b), True, True),
        ("%s %s %s on %s %s background, %s" % (z, c, s, _a(b), b, where), True, True),
        ("%s %s background with %s %s %s %s %s" % (_a(b), b, _a(z), z, c, s, where), True, True),
        ("%s %s %s on %s %s background" % (_a(c), c, s, _a(b), b), False, False),
        ("%s %s %s %s on %s %s background" % (_a(c), c, s, where, _a(b), b), False, True),
        ("%s %s %s %s on %s %s background" % (_a(z), z, c, s, _a(b), b), True, False),
    ]
    return out


def all_scenes():
    """Every training scene (fg != bg, held-out triples removed), in a fixed order."""
    out = []
    for c in COLOUR_NAMES:
        for s in SHAPES:
            for b in COLOUR_NAMES:
                if b == c or (c, s, b) in HELD_OUT_TRIPLES:
                    continue
                for z in SIZES:
                    for p in POSITIONS:
                        out.append((c, s, b, z, p))
    return out


def _sdf(shape, xx, yy, cx, cy, r):
    """Signed distance (pixels, < 0 inside) of the shape centred at (cx, cy), half-size r."""
    dx, dy = xx - cx, yy - cy
    if shape == "circle":
        return torch.sqrt(dx * dx + dy * dy) - r
    if shape == "square":
        r = r * 0.88  # same visual area class as the circle
        qx, qy = dx.abs() - r, dy.abs() - r
        outside = torch.sqrt(qx.clamp(min=0) ** 2 + qy.clamp(min=0) ** 2)
        return outside + torch.maximum(qx, qy).clamp(max=0)
    if shape == "diamond":  # a square turned 45 degrees (L1 ball); exact enough for coverage
        return (dx.abs() + dy.abs() - r * 1.15) / math.sqrt(2.0)
    if shape == "triangle":  # equilateral, apex up, centroid at the centre
        k = math.sqrt(3.0)
        R = r * 1.15
        # edges: bottom y = cy + R/2, two slanted edges through the apex (cx, cy - R)
        d_bottom = dy - R / 2.0
        d_left = (-k * dx - dy - R) / 2.0
        d_right = (k * dx - dy - R) / 2.0
        return torch.maximum(d_bottom, torch.maximum(d_left, d_right))
    raise ValueError(shape)


def render(scene, gen=None):
    """(3, 128, 128) float in [-1, 1] for a scene; jittered when gen is given."""
    c, s, b, z, p = scene
    cx, cy = position_centre(p, z)
    r = RADIUS[z]
    if gen is not None:
        j = torch.rand(3, generator=gen)
        cx += (2 * j[0].item() - 1) * JITTER_PX
        cy += (2 * j[1].item() - 1) * JITTER_PX
        r *= 1 + (2 * j[2].item() - 1) * JITTER_SCALE
    ax = torch.arange(IMAGE_SIZE, dtype=torch.float32) + 0.5
    yy, xx = torch.meshgrid(ax, ax, indexing="ij")
    cover = (0.5 - _sdf(s, xx, yy, cx, cy, r)).clamp(0.0, 1.0)
    fg = torch.tensor(COLOURS[c], dtype=torch.float32)[:, None, None] / 127.5 - 1
    bg = torch.tensor(COLOURS[b], dtype=torch.float32)[:, None, None] / 127.5 - 1
    return bg + (fg - bg) * cover[None]


def sample_batch(gen, n, scenes):
    """n random (image, caption, scene) from scenes: images (n, 3, 128, 128), captions list.
    Wordings that omit the size / position are paired with a random size / position."""
    idx = torch.randint(len(scenes), (n,), generator=gen).tolist()
    imgs, caps, used = [], [], []
    for i in idx:
        sc = scenes[i]
        ws = captions(*sc)
        cap, _, _ = ws[torch.randint(len(ws), (1,), generator=gen).item()]
        imgs.append(render(sc, gen))
        caps.append(cap)
        used.append(sc)
    return torch.stack(imgs), caps, used


def corpus_sentences():
    """Every word of the grammar in the wordings above, for the tokenizers' corpus."""
    out = []
    for c in COLOUR_NAMES:
        for s in SHAPES:
            out.extend(w for w, _, _ in captions(c, s, "black" if c != "black" else "white",
                                                   SIZES[len(out) % 2], POSITIONS[len(out) % 5]))
    return out
