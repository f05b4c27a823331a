"""wan_vae_reference.py — AutoencoderKLWan's vae.decode in plain torch (float64), written from
the model's definition for the Wan VAE tests, on the WHOLE clip at once (no frame cache):
every causal conv is one conv3d over all frames with kt - 1 zero frames padded on the past
side, so the C decoder's frame-by-frame streaming is checked against an independent form.

  wan_vae_reference.py MODEL_DIR IN.safetensors OUT.safetensors [--denormalize]
                       [--tiled MIN STRIDE]

IN holds latent_sample (B, z_dim, T, h, w); OUT gets sample (B, out_channels, F, 8h, 8w),
F = 1 + 4 (T - 1), clamped to [-1, 1]. --denormalize applies WanPipeline's
latents / (1 / latents_std) + latents_mean (in float32, as the pipeline does) first.
--tiled: enable_tiling's tiled_decode with square tiles of MIN pixels every STRIDE (the tiles
decoded in float64, blended in float32 as diffusers' float32 pipeline would).

Definition (diffusers' AutoencoderKLWan, Wan 2.1, is_residual False):
  post_quant_conv (causal 1x1x1); conv_in (causal 3x3x3); mid: res, attention, res;
  up blocks: num_res_blocks + 1 res blocks, then upsample3d (time_conv on frames 1.. of the
  clip, each frame -> 2 frames: channels [0, C) then [C, 2C); frame 0 passes unchanged) or
  upsample2d, both followed by nearest 2x and a 3x3 conv to C / 2 per frame;
  norm_out, SiLU, conv_out (causal 3x3x3); clamp.
  res: shortcut(x) + conv2(silu(norm2(conv1(silu(norm1(x)))))), shortcut a 1x1x1 conv when
  the channel count changes. RMS norm: x / max(||x||_2 over channels, 1e-12) * sqrt(C) * gamma.
  attention per frame over h*w positions, one head: norm, qkv 1x1 (q, k, v = thirds),
  softmax(q k^T / sqrt(C)) v, proj 1x1, + x."""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import load_model_dir, load_safetensors, save_safetensors  # noqa: E402

DT = torch.float64


class Ref:
    def __init__(self, vae_dir):
        with open(os.path.join(vae_dir, "config.json")) as f:
            self.cfg = json.load(f)
        self.p = {k: v.to(DT) for k, v in
                  load_model_dir(vae_dir, "diffusion_pytorch_model").items()}

    def causal(self, name, x):
        """x (B, C, T, H, W); weight (Cout, Cin, kt, k, k)."""
        w, b = self.p[name + ".weight"], self.p[name + ".bias"]
        kt, k = w.shape[2], w.shape[3]
        x = F.pad(x, (k // 2, k // 2, k // 2, k // 2, kt - 1, 0))
        return F.conv3d(x, w, b)

    def rms(self, name, x):
        g = self.p[name + ".gamma"].reshape(1, -1, *([1] * (x.dim() - 2)))
        n = x.pow(2).sum(dim=1, keepdim=True).sqrt().clamp_min(1e-12)
        return x / n * (x.shape[1] ** 0.5) * g

    def res(self, prefix, x):
        sc = prefix + ".conv_shortcut"
        h = self.causal(sc, x) if sc + ".weight" in self.p else x
        y = self.causal(prefix + ".conv1", F.silu(self.rms(prefix + ".norm1", x)))
        y = self.causal(prefix + ".conv2", F.silu(self.rms(prefix + ".norm2", y)))
        return y + h

    def attention(self, prefix, x):
        B, C, T, H, W = x.shape
        f = x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W)
        n = self.rms(prefix + ".norm", f)
        qkv = F.conv2d(n, self.p[prefix + ".to_qkv.weight"], self.p[prefix + ".to_qkv.bias"])
        qkv = qkv.reshape(B * T, 3 * C, H * W).transpose(1, 2)  # (BT, S, 3C)
        q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
        a = torch.softmax(q @ k.transpose(1, 2) / C ** 0.5, dim=-1) @ v  # (BT, S, C)
        a = a.transpose(1, 2).reshape(B * T, C, H, W)
        o = F.conv2d(a, self.p[prefix + ".proj.weight"], self.p[prefix + ".proj.bias"])
        return o.reshape(B, T, C, H, W).permute(0, 2, 1, 3, 4) + x

    def upsample(self, prefix, x, temporal):
        B, C, T, H, W = x.shape
        if temporal and T > 1:
            tc = self.causal(prefix + ".time_conv", x[:, :, 1:])  # (B, 2C, T-1, H, W)
            tc = tc.reshape(B, 2, C, T - 1, H, W).permute(0, 2, 3, 1, 4, 5)
            x = torch.cat([x[:, :, :1], tc.reshape(B, C, 2 * (T - 1), H, W)], dim=2)
        T = x.shape[2]
        f = x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W)
        f = f.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)  # nearest 2x
        f = F.conv2d(f, self.p[prefix + ".resample.1.weight"], self.p[prefix + ".resample.1.bias"],
                     padding=1)
        return f.reshape(B, T, -1, 2 * H, 2 * W).permute(0, 2, 1, 3, 4)

    def decode(self, z, clamp=True):
        c = self.cfg
        n = len(c["dim_mult"])
        up_t = list(reversed(c["temperal_downsample"]))
        x = self.causal("post_quant_conv", z.to(DT))
        x = self.causal("decoder.conv_in", x)
        x = self.res("decoder.mid_block.resnets.0", x)
        x = self.attention("decoder.mid_block.attentions.0", x)
        x = self.res("decoder.mid_block.resnets.1", x)
        for i in range(n):
            for j in range(c["num_res_blocks"] + 1):
                x = self.res("decoder.up_blocks.%d.resnets.%d" % (i, j), x)
            if i != n - 1:
                x = self.upsample("decoder.up_blocks.%d.upsamplers.0" % i, x, up_t[i])
        x = F.silu(self.rms("decoder.norm_out", x))
        x = self.causal("decoder.conv_out", x)
        return x.clamp(-1.0, 1.0) if clamp else x

    def decode_tiled(self, z, tmin, stride):
        """enable_tiling(tmin, tmin, stride, stride): latent tiles of tmin / 8 every stride / 8,
        each decoded whole (unclamped); tile (i, j) blended in place with the blended tile
        above over its first tmin - stride rows (weights 1 - y/e, y/e) and with the blended
        tile to its left over its first tmin - stride columns; the first stride pixels of each
        kept; clamp."""
        h, w = z.shape[3], z.shape[4]
        lt, ls, blend = tmin // 8, stride // 8, tmin - stride
        if not (w > lt or h > lt):
            return self.decode(z)
        rows = [[self.decode(z[:, :, :, i:i + lt, j:j + lt], clamp=False).float()
                 for j in range(0, w, ls)] for i in range(0, h, ls)]
        for i, row in enumerate(rows):
            for j, t in enumerate(row):
                if i > 0:
                    a = rows[i - 1][j]
                    e = min(a.shape[3], t.shape[3], blend)
                    for y in range(e):
                        t[:, :, :, y] = a[:, :, :, y - e] * (1 - y / e) + t[:, :, :, y] * (y / e)
                if j > 0:
                    a = row[j - 1]
                    e = min(a.shape[4], t.shape[4], blend)
                    for x in range(e):
                        t[..., x] = a[..., x - e] * (1 - x / e) + t[..., x] * (x / e)
        out = torch.cat([torch.cat([t[:, :, :, :stride, :stride] for t in row], dim=4)
                         for row in rows], dim=3)
        return out[:, :, :, :8 * h, :8 * w].clamp(-1.0, 1.0)


def main(argv):
    model, inp, out = argv[1], argv[2], argv[3]
    vae_dir = os.path.join(model, "vae") if os.path.isdir(os.path.join(model, "vae")) else model
    ref = Ref(vae_dir)
    z = load_safetensors(inp)["latent_sample"].float()
    if "--denormalize" in argv:
        zc = ref.cfg["z_dim"]
        mean = torch.tensor(ref.cfg["latents_mean"]).view(1, zc, 1, 1, 1)
        std = 1.0 / torch.tensor(ref.cfg["latents_std"]).view(1, zc, 1, 1, 1)
        z = z / std + mean
    with torch.no_grad():
        if "--tiled" in argv:
            k = argv.index("--tiled")
            y = ref.decode_tiled(z, int(argv[k + 1]), int(argv[k + 2]))
        else:
            y = ref.decode(z)
    save_safetensors(out, {"sample": y.float()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
