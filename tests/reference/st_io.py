"""st_io.py — safetensors read/write and PNG writing by hand (only torch, numpy, zlib), shared by
the reference generators here (flux_reference.py, text_encoder_reference.py) and the training tools
of builtin:shapes (train-builtin/)."""
import json
import os
import struct
import zlib

import numpy as np
import torch

DTYPE_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
# stored dtype -> (numpy dtype read, numpy dtype returned): F64 stays float64; half floats and
# integers (token ids, position ids) come back as float32, exact for values below 2^24
READ_AS = {"F32": ("<f4", np.float32), "F64": ("<f8", np.float64), "F16": ("<f2", np.float32),
           "I32": ("<i4", np.float32), "I64": ("<i8", np.float32)}


def load_safetensors(path):
    """name -> tensor: float32 (F32, F16, BF16, I32, I64 on disk) or float64 (F64)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[base + b:base + e]
        dt, shape = info["dtype"], info["shape"]
        if dt == "BF16":  # the high half of a float32
            arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt in READ_AS:
            arr = np.frombuffer(raw, READ_AS[dt][0]).astype(READ_AS[dt][1])
        else:
            raise ValueError("%s: tensor %s: unsupported dtype %s" % (path, name, dt))
        out[name] = torch.from_numpy(arr.reshape(shape).copy())
    return out


def load_model_dir(d, base="model"):
    """A diffusers / transformers folder's weights: BASE.safetensors, or the shards named by
    BASE.safetensors.index.json."""
    single = os.path.join(d, base + ".safetensors")
    if os.path.exists(single):
        return load_safetensors(single)
    with open(os.path.join(d, base + ".safetensors.index.json")) as f:
        index = json.load(f)
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(load_safetensors(os.path.join(d, shard)))
    return out


def save_safetensors(path, tensors, dtype=torch.float32, metadata=None):
    """tensors: dict name -> tensor, written in sorted order as dtype."""
    header, blobs, at = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        shape = list(tensors[name].shape)
        t = tensors[name].detach().to(dtype).reshape(-1).clone()  # stride 1 (also channels_last)
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": DTYPE_NAMES[dtype], "shape": shape,
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)


def to_u8(img):
    """(3, H, W) float [-1, 1] -> (H, W, 3) uint8 exactly as diffusers / cpdit round:
    x / 2 + 0.5, clamp [0, 1], * 255 in float32, round half to even."""
    t = (img.float() / 2 + 0.5).clamp(0, 1)
    u = (t * 255.0).numpy().astype(np.float32)
    return np.rint(u).astype(np.uint8).transpose(1, 2, 0)


def write_png(path, rgb):
    """rgb: (H, W, 3) uint8 numpy array."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def read_png(path):
    """8-bit RGB / RGBA, non-interlaced PNG -> (H, W, 3) uint8 (enough for cpdit's files)."""
    with open(path, "rb") as f:
        data = f.read()
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), "unsupported PNG"
            ch = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * ch
    out = np.zeros((h, stride), np.uint8)
    prev = np.zeros(stride, np.int32)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        cur = np.zeros(stride, np.int32)
        for x in range(stride):
            a = cur[x - ch] if x >= ch else 0
            b = prev[x]
            c = prev[x - ch] if x >= ch else 0
            if ft == 0:
                p = 0
            elif ft == 1:
                p = a
            elif ft == 2:
                p = b
            elif ft == 3:
                p = (a + b) // 2
            else:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            cur[x] = (line[x] + p) & 255
        out[y] = cur
        prev = cur
    return out.reshape(h, w, ch)[:, :, :3]


def grid(images, cols):
    """list of (H, W, 3) uint8 -> one (rows*H, cols*W, 3) uint8 grid."""
    h, w, _ = images[0].shape
    rows = (len(images) + cols - 1) // cols
    g = np.zeros((rows * h, cols * w, 3), np.uint8)
    for i, im in enumerate(images):
        r, c = divmod(i, cols)
        g[r * h:(r + 1) * h, c * w:(c + 1) * w] = im
    return g
