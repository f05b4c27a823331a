#!/usr/bin/python3
"""flux_reference.py — an independent PyTorch forward of diffusers' FluxTransformer2DModel.

usage: flux_reference.py MODEL_DIR INPUTS.safetensors OUTPUT.safetensors [MODEL_DIR ...]
                         [--float64]

Reads MODEL_DIR/config.json and MODEL_DIR/diffusion_pytorch_model.safetensors (F32, F16 or
BF16 tensors, diffusers names), the inputs named as the forward's arguments (hidden_states,
encoder_hidden_states, pooled_projections, timestep, img_ids, txt_ids[, guidance]), and writes
`sample` (float32). Written from the model's definition with plain torch ops (diffusers is not
needed): transformer_flux.py (FluxTransformerBlock, FluxSingleTransformerBlock, the model's
forward), embeddings.py (get_timestep_embedding, TimestepEmbedding,
CombinedTimestep[Guidance]TextProjEmbeddings, FluxPosEmbed / get_1d_rotary_pos_embed,
apply_rotary_emb), attention_processor.py (FluxAttnProcessor2_0) and normalization.py
(AdaLayerNormZero, AdaLayerNormZeroSingle, AdaLayerNormContinuous, RMSNorm).

By default it computes in float32 as diffusers does on a CPU in fp32; --float64 computes in
float64 (everything but the RoPE table, which diffusers builds in float64 anyway) to measure
how close an fp32 implementation comes to the exact values.

safetensors files are read and written by hand (st_io.py: 8-byte header length, JSON header, data), so
only torch and numpy are needed. Several (model, inputs, output) triples may be given, to pay
for importing torch once. Exit status 0 on success, 2 on bad usage.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import load_safetensors, save_safetensors  # noqa: E402

TIMESTEP_CHANNELS = 256     # Timesteps(num_channels=256, flip_sin_to_cos=True, shift=0)
MAX_PERIOD = 10000          # get_timestep_embedding's max_period
ROPE_THETA = 10000          # FluxPosEmbed(theta=10000)
EPS = 1e-6                  # every LayerNorm / RMSNorm of the model
TIME_SCALE = 1000           # timestep and guidance are multiplied by this in forward()


class Flux:
    def __init__(self, config, weights, dtype):
        self.c = config
        self.w = {k: v.to(dtype) for k, v in weights.items()}
        self.dtype = dtype
        self.heads = config["num_attention_heads"]
        self.head_dim = config["attention_head_dim"]
        self.axes = config.get("axes_dims_rope", [16, 56, 56])

    # ---- layers
    def linear(self, x, name):
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def layer_norm(self, x):  # nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        return F.layer_norm(x, (x.shape[-1],), eps=EPS)

    def rms_norm(self, x, name):  # diffusers RMSNorm(head_dim, eps=1e-6), with weight
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + EPS) * self.w[name]

    def gelu(self, x):
        return F.gelu(x, approximate="tanh")

    # ---- embeddings
    def timestep_proj(self, t):
        """get_timestep_embedding(t, 256, flip_sin_to_cos=True, downscale_freq_shift=0)."""
        half = TIMESTEP_CHANNELS // 2
        exponent = -math.log(MAX_PERIOD) * torch.arange(0, half, dtype=torch.float32)
        exponent = exponent / (half - 0)
        emb = torch.exp(exponent)
        emb = t[:, None].float() * emb[None, :]
        emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)  # flip: cos first
        return emb.to(self.dtype)

    def mlp_embed(self, x, name):  # TimestepEmbedding / PixArtAlphaTextProjection(act silu)
        return self.linear(F.silu(self.linear(x, name + ".linear_1")), name + ".linear_2")

    def rope_table(self, ids):
        """FluxPosEmbed: per axis get_1d_rotary_pos_embed(use_real, repeat_interleave_real)."""
        pos = ids.float()
        cos_out, sin_out = [], []
        for i, dim in enumerate(self.axes[:ids.shape[-1]]):
            freqs = 1.0 / (ROPE_THETA ** (torch.arange(0, dim, 2, dtype=torch.float64)[: dim // 2] / dim))
            angles = torch.outer(pos[:, i].double(), freqs)
            cos_out.append(angles.cos().repeat_interleave(2, dim=1).float())
            sin_out.append(angles.sin().repeat_interleave(2, dim=1).float())
        return torch.cat(cos_out, dim=-1), torch.cat(sin_out, dim=-1)

    def apply_rope(self, x, cos, sin):
        """apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-1); x (B, H, S, D)."""
        cos, sin = cos[None, None].to(x.dtype), sin[None, None].to(x.dtype)
        x_real, x_imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
        x_rot = torch.stack([-x_imag, x_real], dim=-1).flatten(3)
        return x * cos + x_rot * sin

    def split_heads(self, t):  # (B, S, H*D) -> (B, H, S, D)
        return t.view(t.shape[0], -1, self.heads, self.head_dim).transpose(1, 2)

    def attention(self, q, k, v):  # scaled_dot_product_attention, no mask
        scale = 1.0 / math.sqrt(q.shape[-1])
        p = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1)
        o = p @ v
        return o.transpose(1, 2).reshape(q.shape[0], -1, self.heads * self.head_dim)

    # ---- blocks
    def double_block(self, i, x, c, temb, cos, sin):
        p = "transformer_blocks.%d." % i
        st = F.silu(temb)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = \
            self.linear(st, p + "norm1.linear").chunk(6, dim=1)
        c_shift_msa, c_scale_msa, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = \
            self.linear(st, p + "norm1_context.linear").chunk(6, dim=1)
        nx = self.layer_norm(x) * (1 + scale_msa[:, None]) + shift_msa[:, None]
        nc = self.layer_norm(c) * (1 + c_scale_msa[:, None]) + c_shift_msa[:, None]

        q = self.rms_norm(self.split_heads(self.linear(nx, p + "attn.to_q")), p + "attn.norm_q.weight")
        k = self.rms_norm(self.split_heads(self.linear(nx, p + "attn.to_k")), p + "attn.norm_k.weight")
        v = self.split_heads(self.linear(nx, p + "attn.to_v"))
        cq = self.rms_norm(self.split_heads(self.linear(nc, p + "attn.add_q_proj")),
                           p + "attn.norm_added_q.weight")
        ck = self.rms_norm(self.split_heads(self.linear(nc, p + "attn.add_k_proj")),
                           p + "attn.norm_added_k.weight")
        cv = self.split_heads(self.linear(nc, p + "attn.add_v_proj"))
        q = self.apply_rope(torch.cat([cq, q], dim=2), cos, sin)
        k = self.apply_rope(torch.cat([ck, k], dim=2), cos, sin)
        v = torch.cat([cv, v], dim=2)
        o = self.attention(q, k, v)
        T = c.shape[1]
        c_attn, x_attn = o[:, :T], o[:, T:]
        x_attn = self.linear(x_attn, p + "attn.to_out.0")
        c_attn = self.linear(c_attn, p + "attn.to_add_out")

        x = x + gate_msa[:, None] * x_attn
        nx = self.layer_norm(x) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
        ff = self.linear(self.gelu(self.linear(nx, p + "ff.net.0.proj")), p + "ff.net.2")
        x = x + gate_mlp[:, None] * ff

        c = c + c_gate_msa[:, None] * c_attn
        nc = self.layer_norm(c) * (1 + c_scale_mlp[:, None]) + c_shift_mlp[:, None]
        ffc = self.linear(self.gelu(self.linear(nc, p + "ff_context.net.0.proj")),
                          p + "ff_context.net.2")
        c = c + c_gate_mlp[:, None] * ffc
        return x, c

    def single_block(self, i, h, temb, cos, sin):
        p = "single_transformer_blocks.%d." % i
        shift, scale, gate = self.linear(F.silu(temb), p + "norm.linear").chunk(3, dim=1)
        n = self.layer_norm(h) * (1 + scale[:, None]) + shift[:, None]
        mlp = self.gelu(self.linear(n, p + "proj_mlp"))
        q = self.rms_norm(self.split_heads(self.linear(n, p + "attn.to_q")), p + "attn.norm_q.weight")
        k = self.rms_norm(self.split_heads(self.linear(n, p + "attn.to_k")), p + "attn.norm_k.weight")
        v = self.split_heads(self.linear(n, p + "attn.to_v"))
        o = self.attention(self.apply_rope(q, cos, sin), self.apply_rope(k, cos, sin), v)
        out = self.linear(torch.cat([o, mlp], dim=2), p + "proj_out")
        return h + gate[:, None] * out

    def forward(self, inp):
        d = self.dtype
        hs = inp["hidden_states"].to(d)
        x = self.linear(hs, "x_embedder")
        timestep = inp["timestep"].to(d).reshape(-1) * TIME_SCALE
        if timestep.numel() == 1 and hs.shape[0] > 1:
            timestep = timestep.expand(hs.shape[0])
        temb = self.mlp_embed(self.timestep_proj(timestep), "time_text_embed.timestep_embedder")
        if self.c.get("guidance_embeds", False):
            g = inp["guidance"].to(d).reshape(-1) * TIME_SCALE
            if g.numel() == 1 and hs.shape[0] > 1:
                g = g.expand(hs.shape[0])
            temb = temb + self.mlp_embed(self.timestep_proj(g), "time_text_embed.guidance_embedder")
        temb = temb + self.mlp_embed(inp["pooled_projections"].to(d),
                                     "time_text_embed.text_embedder")
        c = self.linear(inp["encoder_hidden_states"].to(d), "context_embedder")
        txt_ids, img_ids = inp["txt_ids"], inp["img_ids"]
        if txt_ids.ndim == 3:  # deprecated batched ids: diffusers takes item 0
            txt_ids = txt_ids[0]
        if img_ids.ndim == 3:
            img_ids = img_ids[0]
        cos, sin = self.rope_table(torch.cat([txt_ids, img_ids], dim=0))

        for i in range(self.c.get("num_layers", 19)):
            x, c = self.double_block(i, x, c, temb, cos, sin)
        h = torch.cat([c, x], dim=1)
        for i in range(self.c.get("num_single_layers", 38)):
            h = self.single_block(i, h, temb, cos, sin)
        h = h[:, c.shape[1]:]
        scale, shift = self.linear(F.silu(temb), "norm_out.linear").chunk(2, dim=1)
        h = self.layer_norm(h) * (1 + scale)[:, None, :] + shift[:, None, :]
        return self.linear(h, "proj_out")


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if not args or len(args) % 3:
        sys.stderr.write(__doc__)
        return 2
    dtype = torch.float64 if "--float64" in argv else torch.float32
    for at in range(0, len(args), 3):
        model_dir, inputs_path, out_path = args[at:at + 3]
        with open(model_dir + "/config.json") as f:
            config = json.load(f)
        weights = load_safetensors(model_dir + "/diffusion_pytorch_model.safetensors")
        inputs = load_safetensors(inputs_path)
        with torch.no_grad():
            out = Flux(config, weights, dtype).forward(inputs)
        save_safetensors(out_path, {"sample": out})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
