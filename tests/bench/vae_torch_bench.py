#!/usr/bin/env python3
"""The FLUX.1 VAE decode in PyTorch, for `tests/bench/vae_bench.sh` (side by side with
`cpdit bench vae`).

    vae_torch_bench.py THREADS SIZE [SIZE...]

FLUX.1's decoder config (block_out_channels 128/256/512/512, 2 layers per block, 32 groups,
16 latent channels, no post-quant conv), random float32 weights, written with the ops
diffusers' AutoencoderKL.decode runs on the CPU (F.conv2d, F.group_norm, SiLU, nearest
interpolate, one-head attention as softmax(q k^T / sqrt(C)) v, no dropout), torch.no_grad,
torch.set_num_threads(THREADS). Prints one line per size: size, time (best of 1 after a small
warm-up), GFLOP/s (the FLOP count of vae_decode_flops: convolutions 2·pixels·Cin·Cout·K², the
attention's 4 linears and 4·S²·C), peak RSS of the process (MiB).
"""
import math
import resource
import sys
import time

import torch
import torch.nn.functional as F

CH = [128, 256, 512, 512]
LAYERS = 2
GROUPS = 32
LATENT = 16
EPS = 1e-6


def make_params(gen):
    p = {}

    def conv(name, cin, cout, k):
        s = math.sqrt(3.0 / (cin * k * k))
        p[name + ".weight"] = (torch.rand(cout, cin, k, k, generator=gen) * 2 - 1) * s
        p[name + ".bias"] = (torch.rand(cout, generator=gen) * 2 - 1) * 0.1

    def norm(name, c):
        p[name + ".weight"] = 1 + (torch.rand(c, generator=gen) * 2 - 1) * 0.1
        p[name + ".bias"] = (torch.rand(c, generator=gen) * 2 - 1) * 0.1

    def resnet(name, cin, cout):
        norm(name + ".norm1", cin)
        conv(name + ".conv1", cin, cout, 3)
        norm(name + ".norm2", cout)
        conv(name + ".conv2", cout, cout, 3)
        if cin != cout:
            conv(name + ".conv_shortcut", cin, cout, 1)

    top = CH[-1]
    conv("conv_in", LATENT, top, 3)
    resnet("mid.0", top, top)
    norm("attn.norm", top)
    for n in ("q", "k", "v", "o"):
        conv("attn." + n, top, top, 1)
    resnet("mid.1", top, top)
    prev = top
    for i, ch in enumerate(reversed(CH)):
        for j in range(LAYERS + 1):
            resnet("up.%d.%d" % (i, j), prev if j == 0 else ch, ch)
        if i != len(CH) - 1:
            conv("up.%d.upsample" % i, ch, ch, 3)
        prev = ch
    norm("norm_out", CH[0])
    conv("conv_out", CH[0], 3, 3)
    return p


def decode(p, z):
    def conv(x, name, pad):
        return F.conv2d(x, p[name + ".weight"], p[name + ".bias"], padding=pad)

    def gn(x, name, act):
        y = F.group_norm(x, GROUPS, p[name + ".weight"], p[name + ".bias"], eps=EPS)
        return F.silu(y) if act else y

    def resnet(x, name):
        h = conv(gn(x, name + ".norm1", True), name + ".conv1", 1)
        h = conv(gn(h, name + ".norm2", True), name + ".conv2", 1)
        if name + ".conv_shortcut.weight" in p:
            x = conv(x, name + ".conv_shortcut", 0)
        return x + h

    def attention(x):
        B, C, H, W = x.shape
        t = gn(x, "attn.norm", False).reshape(B, C, H * W).transpose(1, 2)
        q, k, v = (F.linear(t, p["attn.%s.weight" % n][:, :, 0, 0], p["attn.%s.bias" % n])
                   for n in "qkv")
        w = torch.softmax(torch.baddbmm(torch.empty(B, H * W, H * W), q, k.transpose(1, 2),
                                        beta=0, alpha=1 / math.sqrt(C)), dim=-1)
        o = F.linear(w @ v, p["attn.o.weight"][:, :, 0, 0], p["attn.o.bias"])
        return x + o.transpose(1, 2).reshape(B, C, H, W)

    x = conv(z, "conv_in", 1)
    x = resnet(x, "mid.0")
    x = attention(x)
    x = resnet(x, "mid.1")
    for i in range(len(CH)):
        for j in range(LAYERS + 1):
            x = resnet(x, "up.%d.%d" % (i, j))
        if i != len(CH) - 1:
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
            x = conv(x, "up.%d.upsample" % i, 1)
    x = gn(x, "norm_out", True)
    return conv(x, "conv_out", 1)


def flops(p, h, w):
    total, pixels = 0.0, h * w
    order = ["conv_in"]
    for m in ("mid.0", "mid.1"):
        order += [m + ".conv1", m + ".conv2"]
    for i in range(len(CH)):
        for j in range(LAYERS + 1):
            n = "up.%d.%d" % (i, j)
            order += [n + ".conv1", n + ".conv2"]
            if n + ".conv_shortcut.weight" in p:
                order.append(n + ".conv_shortcut")
        if i != len(CH) - 1:
            order.append("up.%d.upsample" % i)
    order.append("conv_out")
    for name in order:
        if name.endswith("upsample"):
            pixels *= 4
        co, ci, k, _ = p[name + ".weight"].shape
        total += 2.0 * pixels * ci * co * k * k
    S, C = h * w, CH[-1]
    return total + 4 * 2.0 * S * C * C + 4.0 * S * S * C


def main():
    threads = int(sys.argv[1])
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    p = make_params(gen)
    with torch.no_grad():
        decode(p, torch.randn(1, LATENT, 2, 2, generator=gen))  # warm-up
        for size in (int(s) for s in sys.argv[2:]):
            h = w = size // 8
            z = torch.randn(1, LATENT, h, w, generator=gen)
            t0 = time.perf_counter()
            decode(p, z)
            t = time.perf_counter() - t0
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            print("torch %dx%d threads %d time_s %.3f GFLOP/s %.1f peak_RSS_MiB %.0f" %
                  (size, size, threads, t, flops(p, h, w) / t * 1e-9, rss), flush=True)


if __name__ == "__main__":
    main()
