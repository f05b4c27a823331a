"""shapes_data.py — the grammar of builtin:shapes, its procedural images and their latents.

A scene is the tuple (colour, shape, background, size, place): 8 colours (shape and background
differ), 5 shapes, 3 sizes, 9 places (the centre, 4 corners, 4 edges), in a 128 x 128 image.
A caption names the scene in one of many wordings, composed of slots (see caption()): the
noun phrase ("a small red circle", article and size word optional), the place phrase
("in the top left corner", "at the centre", "in the middle", ...) and the background phrase
("on a blue background", "on blue", ", blue background", background first: "a blue background
with ..."). A caption that leaves the size or the place out stands for a random one.

Held out of training (no image, no caption): the (colour, shape, background) triples of
HELD_OUT_TRIPLES (the 16 scenes of tests/shapes_accuracy.sh among them) and the wordings whose
slot combination is in HELD_OUT_FORMS (every slot value itself is trained, only the
combination is new). heldout_prompts() draws the held-out evaluation from both:
tests/reference/train-builtin/heldout_prompts.txt.

The image is anti-aliased from the shape's signed distance (sdf, pixels, < 0 inside):
coverage = clamp(0.5 - sdf, 0, 1). The latent (latent_fields) is one channel per palette
colour, sampled at the centres of the 8 x 8 pixel blocks: clamp(-sdf_k / FIELD_PX, -1, 1),
where sdf_k is the signed distance of the region painted in colour k (the shape for its
colour, the outside of the shape for the background, +infinity for the other colours). The
VAE's decoder (vae_fields.py) interpolates these fields bilinearly to full resolution and
paints clamp(0.5 + FIELD_PX * field_k) of each colour: sharp, anti-aliased edges from a
16 x 16 latent.

Only torch (CPU) is needed. Everything is drawn from a torch.Generator: same seed, same data.
"""
import math

import torch

IMAGE_SIZE = 128
BLOCK = 8            # VAE downsampling: one latent sample per 8 x 8 pixels
FIELD_PX = 16.0      # field = clamp(-sdf / FIELD_PX, -1, 1): linear within 16 px of an edge

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
SHAPES = ["circle", "square", "triangle", "diamond", "star"]
SIZES = ["tiny", "small", "large"]
SIZE_WORDS = {"tiny": ["tiny"], "small": ["small"], "large": ["large", "big"]}
PLACES = ["center", "top left", "top right", "bottom left", "bottom right",
          "top", "bottom", "left", "right"]

# Shape "radius" (half the side of the bounding box) in pixels, per size; centres of the
# places: corners and edges sit RADIUS + MARGIN from the image's edges.
RADIUS = {"tiny": 12.0, "small": 17.0, "large": 30.0}
MARGIN = 8.0
JITTER_PX = 3.0       # centre jitter, uniform +-
JITTER_SCALE = 0.08   # radius jitter, uniform +- (relative)


def place_centre(place, size):
    """(x, y) centre in pixels of place for size (no jitter)."""
    r = RADIUS[size]
    lo, hi, mid = r + MARGIN, IMAGE_SIZE - r - MARGIN, IMAGE_SIZE / 2.0
    x = lo if "left" in place else hi if "right" in place else mid
    y = lo if "top" in place else hi if "bottom" in place else mid
    return x, y


# --------------------------------------------------------------------------- held out

# The 16 scenes of tests/shapes_accuracy.sh (tests/data/shapes/accuracy.yaml) ...
ACCURACY_SCENES = [
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
HELD_OUT = ACCURACY_SCENES  # the old name (tests and tools that import it)
# ... and 24 more triples, 3 per shape colour, the new shape (star) among them.
EXTRA_TRIPLES = [
    ("red", "star", "white"), ("red", "square", "purple"), ("red", "diamond", "black"),
    ("green", "star", "blue"), ("green", "circle", "red"), ("green", "triangle", "white"),
    ("blue", "star", "yellow"), ("blue", "circle", "green"), ("blue", "diamond", "red"),
    ("yellow", "star", "black"), ("yellow", "square", "blue"), ("yellow", "triangle", "orange"),
    ("orange", "star", "green"), ("orange", "square", "white"), ("orange", "diamond", "blue"),
    ("purple", "star", "orange"), ("purple", "triangle", "black"), ("purple", "diamond", "yellow"),
    ("white", "star", "purple"), ("white", "circle", "orange"), ("white", "diamond", "green"),
    ("black", "star", "red"), ("black", "square", "white"), ("black", "triangle", "blue"),
]
HELD_OUT_TRIPLES = {(c, s, b) for c, s, b, _, _ in ACCURACY_SCENES} | set(EXTRA_TRIPLES)


# --------------------------------------------------------------------------- wordings

def _a(word):
    return "an" if word[0] in "aeiou" else "a"


# place phrases per kind of place; {p} is the place's name ("top left", "left", ...)
PLACE_FORMS = {
    "center": ["in the center", "in the centre", "in the middle", "at the center",
               "at the centre"],
    "corner": ["in the {p} corner", "at the {p}", "in the {p}", "at the {p} corner"],
    "edge": ["at the {p}", "at the {p} edge", "on the {p} side"],
}
# background phrases after the shape ({b} colour, {ab} its article) and before it
BG_AFTER = ["on {ab} {b} background", "on {b}", ", {b} background", "with {ab} {b} background"]
BG_BEFORE = ["{ab} {b} background with", "on {ab} {b} background,", "{b} background,"]
ORDERS = ["shape place bg", "shape bg place", "bg shape place"]

# (order, background form, place form index or -1 = no place, size word named, article) combos
# never used in training; every one of their slot values is trained in other combinations.
HELD_OUT_FORMS = {
    ("shape place bg", 2, 2), ("shape place bg", 3, 4), ("shape bg place", 1, 1),
    ("shape bg place", 3, 3), ("bg shape place", 0, 2), ("bg shape place", 2, 0),
    ("shape place bg", 1, -1), ("bg shape place", 1, -1),
}


def place_kind(place):
    return "center" if place == "center" else "corner" if " " in place else "edge"


def form_key(order, bg_form, place_form):
    """The held-out key of a wording: (order, background form, place form or -1). Without a
    place "shape bg place" and "shape place bg" are the same words: one key."""
    if place_form < 0 and order == "shape bg place":
        order = "shape place bg"
    return (order, bg_form, place_form)


def caption(scene, order, bg_form, place_form, size_word, article):
    """The wording of scene with the given slot choices (see ORDERS, BG_AFTER / BG_BEFORE,
    PLACE_FORMS: place_form -1 leaves the place out; size_word None leaves the size out;
    article False drops "a"/"an" before the shape)."""
    c, s, b, z, p = scene
    np_words = ([size_word] if size_word else []) + [c, s]
    noun = " ".join(([_a(np_words[0])] if article else []) + np_words)
    where = ""
    if place_form >= 0:
        forms = PLACE_FORMS[place_kind(p)]
        where = forms[place_form % len(forms)].format(p=p)
    if order == "bg shape place":
        text = "%s %s %s" % (BG_BEFORE[bg_form % len(BG_BEFORE)].format(b=b, ab=_a(b)),
                             noun, where)
    else:
        bg = BG_AFTER[bg_form % len(BG_AFTER)].format(b=b, ab=_a(b))
        if order == "shape place bg":
            text = "%s %s %s" % (noun, where, bg)
        else:
            text = "%s %s%s" % (noun, bg, (", " + where) if where else "")
        if not article and text[0] == " ":
            text = text[1:]
    return " ".join(text.replace(" ,", ",").split())


def caption_full(c, s, b, z, p):
    """The canonical wording (the one the tests and the README use)."""
    where = "in the center" if p == "center" else "in the %s corner" % p if " " in p else \
        "at the %s" % p
    return "%s %s %s %s %s on %s %s background" % (_a(z), z, c, s, where, _a(b), b)


def random_caption(gen, scene, held_out=False):
    """(caption, names_size, names_place) for scene with random slot choices: a training
    wording (form not in HELD_OUT_FORMS), or with held_out a held-out one."""
    while True:
        r = torch.randint(1 << 30, (6,), generator=gen).tolist()
        order = ORDERS[r[0] % len(ORDERS)]
        nb = len(BG_BEFORE) if order == "bg shape place" else len(BG_AFTER)
        bg_form = r[1] % nb
        place_form = r[2] % 7 - 1  # -1 (no place) in 1 of 7
        names_size = r[3] % 5 != 0
        words = SIZE_WORDS[scene[3]]
        size_word = words[r[4] % len(words)] if names_size else None
        article = r[5] % 6 != 0
        if place_form >= 0:
            place_form %= len(PLACE_FORMS[place_kind(scene[4])])
        if (form_key(order, bg_form, place_form) in HELD_OUT_FORMS) == held_out:
            return (caption(scene, order, bg_form, place_form, size_word, article),
                    names_size, place_form >= 0)


def all_scenes():
    """Every training scene (fg != bg, held-out triples removed), in a fixed order."""
    out = []
    for c in COLOUR_NAMES:
        for s in SHAPES:
            for b in COLOUR_NAMES:
                if b == c or (c, s, b) in HELD_OUT_TRIPLES:
                    continue
                for z in SIZES:
                    for p in PLACES:
                        out.append((c, s, b, z, p))
    return out


def heldout_prompts(n_per_triple=2, seeds=(1, 2, 3)):
    """The held-out evaluation: for every held-out triple n_per_triple scenes with random size
    and place, each in a held-out wording, sampled at each of seeds.
    -> list of (seed, prompt, scene, names_size, names_place)."""
    g = torch.Generator().manual_seed(31)
    triples = sorted(HELD_OUT_TRIPLES)
    out = []
    for c, s, b in triples:
        for _ in range(n_per_triple):
            z = SIZES[torch.randint(len(SIZES), (1,), generator=g).item()]
            p = PLACES[torch.randint(len(PLACES), (1,), generator=g).item()]
            cap, ns, npl = random_caption(g, (c, s, b, z, p), held_out=True)
            out.append((cap, (c, s, b, z, p), ns, npl))
    return [(seed, cap, sc, ns, npl) for seed in seeds for cap, sc, ns, npl in out]


# --------------------------------------------------------------------------- geometry

def sdf(shape, xx, yy, cx, cy, r):
    """Signed distance (pixels, < 0 inside) of shape centred at (cx, cy), half-size r, at the
    points (xx, yy) (tensors of one shape)."""
    dx, dy = xx - cx, yy - cy
    if shape == "circle":
        return torch.sqrt(dx * dx + dy * dy) - r
    if shape == "square":
        # same visual area class as the circle; the Chebyshev distance (mitred outside the
        # corners: sharper corners once the 8-pixel field is interpolated, same coverage)
        r = r * 0.88
        return torch.maximum(dx.abs() - r, dy.abs() - r)
    if shape == "diamond":  # a square turned 45 degrees (L1 ball)
        return (dx.abs() + dy.abs() - r * 1.15) / math.sqrt(2.0)
    if shape == "triangle":  # equilateral, apex up, centroid at the centre
        k = math.sqrt(3.0)
        R = r * 1.15
        d_bottom = dy - R / 2.0
        d_left = (-k * dx - dy - R) / 2.0
        d_right = (k * dx - dy - R) / 2.0
        return torch.maximum(d_bottom, torch.maximum(d_left, d_right))
    if shape == "star":
        return _star_sdf(dx, dy, r * 1.2, STAR_INNER)
    raise ValueError(shape)


STAR_INNER = 0.55  # the inner vertices' radius as a share of the points' radius


def _star_sdf(dx, dy, R, inner):
    """Five-pointed star, one point up, points at radius R, inner vertices at inner * R: the
    distance to the nearest edge of its 10-gon outline, negative inside (exact)."""
    ang = torch.atan2(dx, -dy)  # 0 = up, clockwise
    sector = 2 * math.pi / 5
    a = torch.remainder(ang + sector / 2, sector) - sector / 2  # fold into one point's sector
    a = a.abs()
    rho = torch.sqrt(dx * dx + dy * dy)
    px, py = rho * torch.sin(a), rho * torch.cos(a)  # folded point: x >= 0, tip on +y
    # edge from the tip (0, R) to the inner vertex at angle sector / 2
    vx, vy = inner * R * math.sin(sector / 2), inner * R * math.cos(sector / 2)
    ex, ey = vx - 0.0, vy - R
    L2 = ex * ex + ey * ey
    t = (((px - 0.0) * ex + (py - R) * ey) / L2).clamp(0.0, 1.0)
    qx, qy = px - t * ex, py - (R + t * ey)
    dist = torch.sqrt(qx * qx + qy * qy)
    inside = (px * ey - (py - R) * ex) > 0  # on the centre's side of the edge
    return torch.where(inside, -dist, dist)


def jittered(scene, gen):
    """(cx, cy, r) of scene, jittered when gen is given."""
    _, _, _, z, p = scene
    cx, cy = place_centre(p, z)
    r = RADIUS[z]
    if gen is not None:
        j = torch.rand(3, generator=gen).tolist()
        cx += (2 * j[0] - 1) * JITTER_PX
        cy += (2 * j[1] - 1) * JITTER_PX
        r *= 1 + (2 * j[2] - 1) * JITTER_SCALE
    return cx, cy, r


def _grid(n, step):
    ax = (torch.arange(n, dtype=torch.float32) + 0.5) * step
    yy, xx = torch.meshgrid(ax, ax, indexing="ij")
    return xx, yy


def palette_tensor():
    """(8, 3) palette colours in [-1, 1]."""
    return torch.tensor([COLOURS[c] for c in COLOUR_NAMES], dtype=torch.float32) / 127.5 - 1


def render_at(scene, geom, size=IMAGE_SIZE):
    """(3, size, size) float in [-1, 1] for scene with geometry geom = (cx, cy, r) in
    128-pixel units."""
    c, s, b, _, _ = scene
    cx, cy, r = geom
    k = IMAGE_SIZE / size
    xx, yy = _grid(size, k)
    cover = (0.5 - sdf(s, xx, yy, cx, cy, r) / k).clamp(0.0, 1.0)
    pal = palette_tensor()
    fg, bg = pal[COLOUR_NAMES.index(c)][:, None, None], pal[COLOUR_NAMES.index(b)][:, None, None]
    return bg + (fg - bg) * cover[None]


def render(scene, gen=None):
    """(3, 128, 128) float in [-1, 1] for a scene; jittered when gen is given."""
    return render_at(scene, jittered(scene, gen))


def fields_at(scene, geom):
    """(8, 16, 16) latent fields of scene (see the module's docstring), unnormalised."""
    c, s, b, _, _ = scene
    n = IMAGE_SIZE // BLOCK
    xx, yy = _grid(n, BLOCK)
    d = sdf(s, xx, yy, *geom)
    out = torch.full((len(COLOURS), n, n), -1.0)
    out[COLOUR_NAMES.index(c)] = (-d / FIELD_PX).clamp(-1.0, 1.0)
    out[COLOUR_NAMES.index(b)] = (d / FIELD_PX).clamp(-1.0, 1.0)
    return out


def sample_scenes(gen, n, scenes):
    """n random (scene, caption) pairs from scenes with training wordings; a wording that
    omits the size or place gets a random one in its scene."""
    idx = torch.randint(len(scenes), (n,), generator=gen).tolist()
    out = []
    for i in idx:
        sc = scenes[i]
        cap, _, _ = random_caption(gen, sc)
        out.append((sc, cap))
    return out


def corpus_sentences():
    """A few wordings of every shape and colour (the tokenizers' corpus is C's, fixed)."""
    g = torch.Generator().manual_seed(3)
    return [random_caption(g, sc)[0] for sc in all_scenes()[::97]]


HELDOUT_FILE = "heldout_prompts.txt"


def write_heldout(path):
    """heldout_prompts.txt: one tab-separated line per image: seed, prompt, colour, shape,
    background, size ("-" when the prompt does not name it), place ("-" likewise)."""
    with open(path, "w") as f:
        f.write("# builtin:shapes held-out evaluation (tests/reference/train-builtin/shapes_data.py"
                " write_heldout):\n# (colour, shape, background) triples and wordings never "
                "used in training. Tab-separated:\n# seed  prompt  colour  shape  background  "
                "size|-  place|-\n")
        for seed, prompt, (c, s, b, z, p), ns, npl in heldout_prompts():
            f.write("\t".join([str(seed), prompt, c, s, b, z if ns else "-",
                               p if npl else "-"]) + "\n")


if __name__ == "__main__":
    import os
    write_heldout(os.path.join(os.path.dirname(os.path.abspath(__file__)), HELDOUT_FILE))
