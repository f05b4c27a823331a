"""make_wan_vae.py — a small random AutoencoderKLWan in diffusers' layout (numpy only), for the
Wan VAE tests: a pipeline root with model_index.json and vae/{config.json,
diffusion_pytorch_model.safetensors} holding the DECODER's tensors (post_quant_conv.*,
decoder.*) with their diffusers names and shapes; optionally a latent input file.

  make_wan_vae.py model DIR [--seed S] [--dtype f32|bf16] [--base-dim N] [--z-dim N]
  make_wan_vae.py latents OUT.safetensors --shape B,C,T,h,w [--seed S] [--scale X]

Weights: uniform +-sqrt(3 / fan_in) (unit variance through each conv), biases +-0.1,
RMS-norm gammas 1 +- 0.1; latents standard normal times --scale. The module list follows
WanDecoder3d.__init__ (is_residual False): dims = base * [m[-1], reversed(m)...], up block
i > 0 takes dims[i] // 2 channels, upsample3d where reversed(temperal_downsample)[i]."""
import json
import os
import struct
import sys

import numpy as np


def write_st(path, tensors, dtype="F32"):
    header, blobs, at = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float32)
        if dtype == "BF16":  # round to nearest even on the high half
            u = a.view(np.uint32).astype(np.uint64)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            raw = u.tobytes()
        else:
            raw = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def decoder_params(cfg):
    """name -> shape of the decoder's tensors."""
    z, base, mult = cfg["z_dim"], cfg["base_dim"], cfg["dim_mult"]
    nres = cfg["num_res_blocks"]
    up_t = list(reversed(cfg["temperal_downsample"]))
    dims = [base * mult[-1]] + [base * m for m in reversed(mult)]
    p = {}

    def conv(name, cout, cin, k):  # k: (kt, kh, kw) or (kh, kw)
        p[name + ".weight"] = (cout, cin) + tuple(k)
        p[name + ".bias"] = (cout,)

    def res(prefix, cin, cout):
        p[prefix + ".norm1.gamma"] = (cin, 1, 1, 1)
        conv(prefix + ".conv1", cout, cin, (3, 3, 3))
        p[prefix + ".norm2.gamma"] = (cout, 1, 1, 1)
        conv(prefix + ".conv2", cout, cout, (3, 3, 3))
        if cin != cout:
            conv(prefix + ".conv_shortcut", cout, cin, (1, 1, 1))

    conv("post_quant_conv", z, z, (1, 1, 1))
    conv("decoder.conv_in", dims[0], z, (3, 3, 3))
    res("decoder.mid_block.resnets.0", dims[0], dims[0])
    a = "decoder.mid_block.attentions.0"
    p[a + ".norm.gamma"] = (dims[0], 1, 1)
    conv(a + ".to_qkv", 3 * dims[0], dims[0], (1, 1))
    conv(a + ".proj", dims[0], dims[0], (1, 1))
    res("decoder.mid_block.resnets.1", dims[0], dims[0])
    for i in range(len(mult)):
        cin = dims[i] // 2 if i > 0 else dims[i]
        cout = dims[i + 1]
        for j in range(nres + 1):
            res("decoder.up_blocks.%d.resnets.%d" % (i, j), cin, cout)
            cin = cout
        if i != len(mult) - 1:
            u = "decoder.up_blocks.%d.upsamplers.0" % i
            conv(u + ".resample.1", cout // 2, cout, (3, 3))
            if up_t[i]:
                conv(u + ".time_conv", 2 * cout, cout, (3, 1, 1))
    p["decoder.norm_out.gamma"] = (dims[-1], 1, 1, 1)
    conv("decoder.conv_out", cfg["out_channels"], dims[-1], (3, 3, 3))
    return p


def random_params(shapes, rng):
    out = {}
    for name, shape in shapes.items():
        if name.endswith(".gamma"):
            v = 1.0 + rng.uniform(-0.1, 0.1, shape)
        elif name.endswith(".bias"):
            v = rng.uniform(-0.1, 0.1, shape)
        else:
            bound = np.sqrt(3.0 / int(np.prod(shape[1:])))
            v = rng.uniform(-bound, bound, shape)
        out[name] = v.astype(np.float32)
    return out


def opt(args, key, default):
    return args[args.index(key) + 1] if key in args else default


def main(argv):
    what, path, rest = argv[1], argv[2], argv[3:]
    rng = np.random.default_rng(int(opt(rest, "--seed", "0")))
    if what == "latents":
        shape = tuple(int(x) for x in opt(rest, "--shape", "1,4,3,5,4").split(","))
        scale = float(opt(rest, "--scale", "1.0"))
        write_st(path, {"latent_sample": rng.standard_normal(shape) * scale})
        return 0
    z = int(opt(rest, "--z-dim", "4"))
    cfg = {"_class_name": "AutoencoderKLWan", "_diffusers_version": "0.33.0",
           "base_dim": int(opt(rest, "--base-dim", "8")), "z_dim": z, "dim_mult": [1, 2, 4, 4],
           "num_res_blocks": 2, "attn_scales": [], "temperal_downsample": [False, True, True],
           "dropout": 0.0, "in_channels": 3, "out_channels": 3,
           "latents_mean": [round(float(x), 4) for x in rng.uniform(-1, 1, z)],
           "latents_std": [round(float(x), 4) for x in rng.uniform(0.5, 3, z)]}
    os.makedirs(os.path.join(path, "vae"), exist_ok=True)
    with open(os.path.join(path, "model_index.json"), "w") as f:
        json.dump({"_class_name": "WanPipeline", "_diffusers_version": "0.33.0",
                   "vae": ["diffusers", "AutoencoderKLWan"]}, f, indent=1)
    with open(os.path.join(path, "vae", "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    dtype = "BF16" if opt(rest, "--dtype", "f32") == "bf16" else "F32"
    write_st(os.path.join(path, "vae", "diffusion_pytorch_model.safetensors"),
             random_params(decoder_params(cfg), rng), dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
