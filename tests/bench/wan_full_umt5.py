"""wan_full_umt5.py — a UMT5-XXL-sized UMT5EncoderModel with random bf16 weights in the
transformers layout (the text_encoder/ of the Wan 2.1 diffusers repos), for
tests/bench/wan_full.sh (a benchmark run by hand); numpy only:

  wan_full_umt5.py DIR [--layers 24] [--vocab 256384] [--shards 2] [--seed 5]

Writes DIR/config.json (UMT5-XXL: d_model 4096, d_kv 64, 64 heads, d_ff 10240, gated-gelu,
32 buckets / max distance 128, a relative-bias table in every block) and
DIR/model-0000k-of-0000N.safetensors + model.safetensors.index.json: shared.weight (vocab x
4096) and per block layer.0.SelfAttention.{q,k,v,o,relative_attention_bias}, layer.0.layer_norm,
layer.1.DenseReluDense.{wi_0,wi_1,wo}, layer.1.layer_norm, then encoder.final_layer_norm
(5.7 G parameters at 24 layers, 11.4 GB). Values: linear weights uniform with std
1/sqrt(fan_in) (q also times 1/sqrt(d_kv): T5 does not scale its scores), norm weights
1 +- 0.1, the embedding std 1, bias tables std 0.5; rounded to bf16 (nearest even). Each tensor
is generated and written a chunk at a time and every shard is flushed and dropped from the page
cache when written, so memory stays at a few hundred MB (the machine may be shared).
Exit 0 on success, 2 on bad usage."""
import json
import os
import struct
import sys

import numpy as np

D_MODEL, D_KV, HEADS, D_FF, BUCKETS, MAX_DIST = 4096, 64, 64, 10240, 32, 128
CHUNK = 1 << 24  # elements generated at a time


def tensors(layers, vocab):
    """[(name, shape, kind, gain)] in the order they are written."""
    inner = D_KV * HEADS
    out = [("shared.weight", (vocab, D_MODEL), "embed", 1.0)]
    for i in range(layers):
        b = "encoder.block.%d.layer." % i
        a = b + "0.SelfAttention."
        out += [(a + "q.weight", (inner, D_MODEL), "linear", D_KV ** -0.5),
                (a + "k.weight", (inner, D_MODEL), "linear", 1.0),
                (a + "v.weight", (inner, D_MODEL), "linear", 1.0),
                (a + "o.weight", (D_MODEL, inner), "linear", 1.0),
                (a + "relative_attention_bias.weight", (BUCKETS, HEADS), "embed", 0.5),
                (b + "0.layer_norm.weight", (D_MODEL,), "norm", 1.0),
                (b + "1.DenseReluDense.wi_0.weight", (D_FF, D_MODEL), "linear", 1.0),
                (b + "1.DenseReluDense.wi_1.weight", (D_FF, D_MODEL), "linear", 1.0),
                (b + "1.DenseReluDense.wo.weight", (D_MODEL, D_FF), "linear", 1.0),
                (b + "1.layer_norm.weight", (D_MODEL,), "norm", 1.0)]
    out.append(("encoder.final_layer_norm.weight", (D_MODEL,), "norm", 1.0))
    return out


def to_bf16(a):
    """float32 array -> uint16 bf16 bits, round to nearest even."""
    u = a.view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def write_chunks(f, rng, shape, kind, gain):
    n = int(np.prod(shape))
    sq3 = np.float32(np.sqrt(3.0))
    for lo in range(0, n, CHUNK):
        m = min(CHUNK, n - lo)
        u = rng.random(m, dtype=np.float32) * np.float32(2) - np.float32(1)  # [-1, 1)
        if kind == "linear":  # uniform with std gain / sqrt(fan_in)
            v = u * np.float32(sq3 * gain / np.sqrt(shape[1]))
        elif kind == "norm":
            v = np.float32(1) + u * np.float32(0.1)
        else:  # embeddings: std gain
            v = u * np.float32(sq3 * gain)
        f.write(to_bf16(v.astype(np.float32)).tobytes())


def write_shard(path, items, rng):
    header, at = {}, 0
    for name, shape, _, _ in items:
        nbytes = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + nbytes]}
        at += nbytes
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, shape, kind, gain in items:
            write_chunks(f, rng, shape, kind, gain)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return at


def opt(args, key, default):
    return int(args[args.index(key) + 1]) if key in args else default


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.stderr.write(__doc__)
        return 2
    d, rest = argv[1], argv[2:]
    layers, vocab = opt(rest, "--layers", 24), opt(rest, "--vocab", 256384)
    shards, seed = opt(rest, "--shards", 2), opt(rest, "--seed", 5)
    if layers < 1 or vocab < 2 or shards < 1 or shards > 9:
        sys.stderr.write("wan_full_umt5.py: bad --layers/--vocab/--shards\n")
        return 2
    os.makedirs(d, exist_ok=True)
    cfg = {"architectures": ["UMT5EncoderModel"], "model_type": "umt5",
           "vocab_size": vocab, "d_model": D_MODEL, "d_kv": D_KV, "d_ff": D_FF,
           "num_layers": layers, "num_heads": HEADS, "relative_attention_num_buckets": BUCKETS,
           "relative_attention_max_distance": MAX_DIST, "feed_forward_proj": "gated-gelu",
           "layer_norm_epsilon": 1e-6, "is_encoder_decoder": True, "pad_token_id": 0,
           "eos_token_id": 1, "torch_dtype": "bfloat16"}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    items = tensors(layers, vocab)
    sizes = [2 * int(np.prod(s)) for _, s, _, _ in items]
    total, share = sum(sizes), sum(sizes) / shards
    groups, acc = [[] for _ in range(shards)], 0
    for it, sz in zip(items, sizes):  # in name-list order at equal byte shares
        groups[min(shards - 1, int(acc / share))].append(it)
        acc += sz
    rng = np.random.default_rng(seed)
    weight_map = {}
    for k, g in enumerate(groups):
        name = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        write_shard(os.path.join(d, name), g, rng)
        weight_map.update({t[0]: name for t in g})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
