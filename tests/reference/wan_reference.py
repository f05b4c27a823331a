#!/usr/bin/python3
"""wan_reference.py — an independent PyTorch forward of diffusers' WanTransformer3DModel (Wan 2.1
text-to-video).

usage: wan_reference.py MODEL_DIR INPUTS.safetensors OUTPUT.safetensors [MODEL_DIR ...]
                        [--float64]

Reads MODEL_DIR/config.json and MODEL_DIR/diffusion_pytorch_model.safetensors (or its sharded
index; F32, F16 or BF16 tensors under diffusers' names), the inputs named as the forward's
arguments: hidden_states (B, C, F, H, W), timestep (B) in diffusers units (0..1000, as
WanPipeline passes the scheduler's t) and encoder_hidden_states (B, L, text_dim); writes
`sample` (B, out_channels, F, H, W) float32.

Written from the model's definition with plain torch ops (diffusers is not needed):
transformer_wan.py (WanRotaryPosEmbed, WanTimeTextImageEmbedding, WanAttention /
WanAttnProcessor, WanTransformerBlock, the model's forward), embeddings.py
(get_timestep_embedding, TimestepEmbedding, PixArtAlphaTextProjection, get_1d_rotary_pos_embed),
attention.py / activations.py (FeedForward with GELU(approximate="tanh")) and normalization.py
(FP32LayerNorm); torch.nn.RMSNorm over the whole inner dimension (all heads at once).

The points an implementation gets wrong most easily, as diffusers has them:
  - RoPE: head dim D splits into t = D - 2 (D // 6) and h = w = 2 (D // 6) channels, in that
    order; each part rotates consecutive pairs (2i, 2i+1) by angle pos * 10000^(-2i / part)
    with pos the token's patch index (frame, row, column); no RoPE in cross-attention;
  - q and k are RMS-normalised over all heads together (weight of length heads * D) before
    the heads are split, in self- and cross-attention alike (k of the text tokens too);
  - the block's modulation is scale_shift_table (1, 6, dim) + time_proj(silu(temb)) viewed as
    (B, 6, dim), chunked as shift, scale, gate (self-attention), shift, scale, gate (FFN);
    the output layer's is scale_shift_table (1, 2, dim) + temb (not its projection), chunked as
    shift, scale;
  - norm1 / norm3 / norm_out are LayerNorms without weights, norm2 (before cross-attention,
    cross_attn_norm) one with weight and bias; all eps from the config (1e-6);
  - the cross-attention output is added without a gate;
  - FFN and text embedder use GELU's tanh approximation, the time embedder SiLU;
  - timestep embedding: freq_dim channels, cos first (flip_sin_to_cos), no frequency shift;
  - patch embedding = Conv3d with stride = kernel = patch_size; proj_out's vector per token is
    (pt, ph, pw, out_channels) with channels fastest, unpatchified to (B, C, F, H, W).

By default it computes in float32 as diffusers does on a CPU in fp32; --float64 computes in
float64 (everything but the RoPE table, which diffusers rounds to float32 after building it in
float64) to measure how close an fp32 implementation comes to the exact values.

safetensors files are read and written by hand (st_io.py), so only torch and numpy are needed.
Several (model, inputs, output) triples may be given, to pay for importing torch once. Exit
status 0 on success, 2 on bad usage.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import load_model_dir, load_safetensors, save_safetensors  # noqa: E402

ROPE_THETA = 10000.0   # WanRotaryPosEmbed(theta=10000)
MAX_PERIOD = 10000     # get_timestep_embedding's max_period
N_MODULATION = 6       # a block's shift / scale / gate for self-attention and FFN
N_OUT_MODULATION = 2   # the output layer's shift / scale

# WanTransformer3DModel.__init__ defaults (a config.json may leave any of them out)
DEFAULTS = {"patch_size": [1, 2, 2], "num_attention_heads": 40, "attention_head_dim": 128,
            "in_channels": 16, "out_channels": 16, "text_dim": 4096, "freq_dim": 256,
            "ffn_dim": 13824, "num_layers": 40, "cross_attn_norm": True,
            "qk_norm": "rms_norm_across_heads", "eps": 1e-6, "image_dim": None,
            "added_kv_proj_dim": None, "rope_max_seq_len": 1024, "pos_embed_seq_len": None}


def rope_split(head_dim):
    """(t, h, w) channel counts of one head: h = w = 2 (D // 6), t the rest."""
    hw = 2 * (head_dim // 6)
    return head_dim - 2 * hw, hw, hw


class Wan:
    def __init__(self, config, weights, dtype):
        c = dict(DEFAULTS)
        c.update({k: v for k, v in config.items() if not k.startswith("_")})
        for key in ("image_dim", "added_kv_proj_dim", "pos_embed_seq_len"):
            if c[key] is not None:
                raise ValueError("config %s = %s: image conditioning (I2V) is not covered"
                                 % (key, c[key]))
        self.c = c
        self.heads = c["num_attention_heads"]
        self.head_dim = c["attention_head_dim"]
        self.dim = self.heads * self.head_dim
        self.out_channels = c["out_channels"] or c["in_channels"]
        self.patch = list(c["patch_size"])
        self.eps = float(c["eps"])
        self.dtype = dtype
        self.w = {k: v.to(dtype) for k, v in weights.items()}

    # ---- layers
    def linear(self, x, name):
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def layer_norm(self, x, name=None):
        """FP32LayerNorm(dim, eps): without weights, or with NAME.weight / NAME.bias."""
        wt = self.w[name + ".weight"] if name else None
        b = self.w[name + ".bias"] if name else None
        return F.layer_norm(x, (x.shape[-1],), wt, b, self.eps)

    def rms_norm(self, x, name):
        """torch.nn.RMSNorm(heads * D, eps) over the last (unsplit) dimension."""
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.w[name]

    # ---- embeddings
    def timestep_proj(self, t):
        """get_timestep_embedding(t, freq_dim, flip_sin_to_cos=True, downscale_freq_shift=0):
        (B) -> (B, freq_dim), cos half first. fp32 as diffusers, float64 with --float64."""
        n = self.c["freq_dim"]
        half = n // 2
        work = torch.float64 if self.dtype == torch.float64 else torch.float32
        exponent = -math.log(MAX_PERIOD) * torch.arange(0, half, dtype=torch.float32).to(work)
        freqs = torch.exp(exponent / half)
        ang = t[:, None].to(work) * freqs[None, :]
        emb = torch.cat([torch.cos(ang), torch.sin(ang)], dim=-1)
        if n % 2:
            emb = F.pad(emb, (0, 1))
        return emb.to(self.dtype)

    def rope_table(self, pf, ph, pw):
        """cos, sin (S, D) for the pf x ph x pw patch grid in (f, h, w) row-major order; each
        angle repeated for the two channels of its pair (get_1d_rotary_pos_embed with use_real,
        repeat_interleave_real, float64 frequencies, then rounded to float32)."""
        parts = rope_split(self.head_dim)
        grids = torch.meshgrid(torch.arange(pf), torch.arange(ph), torch.arange(pw),
                               indexing="ij")
        cos_out, sin_out = [], []
        for dim, pos in zip(parts, grids):
            freqs = 1.0 / (ROPE_THETA ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
            ang = torch.outer(pos.reshape(-1).double(), freqs)
            cos_out.append(ang.cos().repeat_interleave(2, dim=1).float())
            sin_out.append(ang.sin().repeat_interleave(2, dim=1).float())
        return torch.cat(cos_out, dim=-1), torch.cat(sin_out, dim=-1)

    @staticmethod
    def apply_rope(x, cos, sin):
        """x (B, S, heads, D): pair (2i, 2i+1) -> (a cos - b sin, a sin + b cos)."""
        c = cos[None, :, None, 0::2].to(x.dtype)
        s = sin[None, :, None, 1::2].to(x.dtype)
        a, b = x.unflatten(-1, (-1, 2)).unbind(-1)
        return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)

    def attention(self, q, k, v):
        """q (B, Sq, heads, D), k / v (B, Sk, heads, D) -> (B, Sq, heads * D); softmax(q k^T /
        sqrt(D)) v without mask."""
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        p = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]), dim=-1)
        o = (p @ v).transpose(1, 2)
        return o.reshape(o.shape[0], o.shape[1], -1)

    def attn(self, p, x, ctx, rope):
        """WanAttention: q from x (B, S, dim), k / v from ctx (x itself for self-attention);
        q, k RMS-normalised across heads, then split; RoPE on q, k when given."""
        kv = x if ctx is None else ctx
        q = self.rms_norm(self.linear(x, p + "to_q"), p + "norm_q.weight")
        k = self.rms_norm(self.linear(kv, p + "to_k"), p + "norm_k.weight")
        v = self.linear(kv, p + "to_v")
        q, k, v = (t.unflatten(2, (self.heads, -1)) for t in (q, k, v))
        if rope is not None:
            q, k = self.apply_rope(q, *rope), self.apply_rope(k, *rope)
        return self.linear(self.attention(q, k, v), p + "to_out.0")

    # ---- blocks
    def block(self, i, x, ctx, tproj, rope):
        """WanTransformerBlock: x (B, S, dim), ctx (B, L, dim) embedded text, tproj (B, 6, dim)."""
        p = "blocks.%d." % i
        mod = self.w[p + "scale_shift_table"] + tproj
        shift_sa, scale_sa, gate_sa, shift_ff, scale_ff, gate_ff = mod.chunk(N_MODULATION, dim=1)
        n = self.layer_norm(x) * (1 + scale_sa) + shift_sa
        x = x + self.attn(p + "attn1.", n, None, rope) * gate_sa
        n = self.layer_norm(x, p + "norm2") if self.c["cross_attn_norm"] else x
        x = x + self.attn(p + "attn2.", n, ctx, None)
        n = self.layer_norm(x) * (1 + scale_ff) + shift_ff
        ff = self.linear(F.gelu(self.linear(n, p + "ffn.net.0.proj"), approximate="tanh"),
                         p + "ffn.net.2")
        return x + ff * gate_ff

    def forward(self, inp):
        d = self.dtype
        hs = inp["hidden_states"].to(d)
        B, C, Fr, H, W = hs.shape
        pt, ph, pw = self.patch
        if Fr % pt or H % ph or W % pw:
            raise ValueError("latent %dx%dx%d does not divide into patches %s"
                             % (Fr, H, W, self.patch))
        gf, gh, gw = Fr // pt, H // ph, W // pw
        if max(gf, gh, gw) > self.c["rope_max_seq_len"]:
            raise ValueError("patch grid %dx%dx%d beyond rope_max_seq_len" % (gf, gh, gw))
        rope = self.rope_table(gf, gh, gw)

        # patch embedding: Conv3d(kernel = stride = patch) = linear over (C, kt, kh, kw) patches
        patches = hs.reshape(B, C, gf, pt, gh, ph, gw, pw).permute(0, 2, 4, 6, 1, 3, 5, 7)
        patches = patches.reshape(B, gf * gh * gw, C * pt * ph * pw)
        wconv = self.w["patch_embedding.weight"].reshape(self.dim, -1)
        x = F.linear(patches, wconv, self.w["patch_embedding.bias"])

        t = inp["timestep"].reshape(-1)
        if t.numel() == 1 and B > 1:
            t = t.expand(B)
        e = "condition_embedder."
        temb = self.linear(F.silu(self.linear(self.timestep_proj(t), e + "time_embedder.linear_1")),
                           e + "time_embedder.linear_2")
        tproj = self.linear(F.silu(temb), e + "time_proj").unflatten(1, (N_MODULATION, -1))
        ctx = self.linear(F.gelu(self.linear(inp["encoder_hidden_states"].to(d),
                                             e + "text_embedder.linear_1"), approximate="tanh"),
                          e + "text_embedder.linear_2")

        for i in range(self.c["num_layers"]):
            x = self.block(i, x, ctx, tproj, rope)

        mod = self.w["scale_shift_table"] + temb[:, None, :]
        shift, scale = mod.chunk(N_OUT_MODULATION, dim=1)
        x = self.layer_norm(x) * (1 + scale) + shift
        y = self.linear(x, "proj_out")  # (B, S, pt * ph * pw * out)
        y = y.reshape(B, gf, gh, gw, pt, ph, pw, self.out_channels)
        return y.permute(0, 7, 1, 4, 2, 5, 3, 6).reshape(B, self.out_channels, Fr, H, W)


def load_weights(model_dir):
    single = os.path.join(model_dir, "diffusion_pytorch_model.safetensors")
    if os.path.exists(single):
        return load_safetensors(single)
    return load_model_dir(model_dir, "diffusion_pytorch_model")


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if not args or len(args) % 3:
        sys.stderr.write(__doc__)
        return 2
    dtype = torch.float64 if "--float64" in argv else torch.float32
    for at in range(0, len(args), 3):
        model_dir, inputs_path, out_path = args[at:at + 3]
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
        inputs = load_safetensors(inputs_path)
        with torch.no_grad():
            out = Wan(config, load_weights(model_dir), dtype).forward(inputs)
        save_safetensors(out_path, {"sample": out})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
