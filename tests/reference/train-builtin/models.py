"""models.py — trainable PyTorch modules of diffusers' AutoencoderKL and FluxTransformer2DModel
whose state_dict() names are diffusers' names, written with plain torch ops after
tests/reference/vae_reference.py and tests/reference/flux_reference.py (the independent
forwards cpdit's C code is checked against), so a trained state dict is a diffusers checkpoint.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

EPS = 1e-6
TIMESTEP_CHANNELS = 256
MAX_PERIOD = 10000
ROPE_THETA = 10000
TIME_SCALE = 1000
LOGVAR_INIT = -6.0
ANCHOR = 20.0      # the constant channel that makes GroupNorm nearly linear (analytic_init)
SILU_SHIFT = 8.0   # silu(u + 8) = u + 8 within 3e-3 for |u| <= 1.5


# ------------------------------------------------------------------ AutoencoderKL

class Resnet(nn.Module):  # ResnetBlock2D (groups, eps 1e-6, silu, no time embedding)
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=EPS)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, cout, eps=EPS)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.conv_shortcut = nn.Conv2d(cin, cout, 1)
        else:
            self.conv_shortcut = None

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        if self.conv_shortcut is not None:
            x = self.conv_shortcut(x)
        return x + h


class MidAttention(nn.Module):  # Attention(heads=1, dim_head=C, residual, group norm)
    def __init__(self, c, groups):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, c, eps=EPS)
        self.to_q = nn.Linear(c, c)
        self.to_k = nn.Linear(c, c)
        self.to_v = nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c)])

    def forward(self, x):
        B, C, H, W = x.shape
        t = self.group_norm(x).reshape(B, C, H * W).transpose(1, 2)
        q, k, v = self.to_q(t), self.to_k(t), self.to_v(t)
        w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(C), dim=-1)
        o = self.to_out[0](w @ v)
        return x + o.transpose(1, 2).reshape(B, C, H, W)


class MidBlock(nn.Module):
    def __init__(self, c, groups, attention):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(c, c, groups), Resnet(c, c, groups)])
        self.attentions = nn.ModuleList([MidAttention(c, groups)]) if attention else None

    def forward(self, x):
        x = self.resnets[0](x)
        if self.attentions is not None:
            x = self.attentions[0](x)
        return self.resnets[1](x)


class Downsample(nn.Module):  # Downsample2D(use_conv, padding=0): pad (0,1,0,1), stride 2
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=0)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):  # Upsample2D: nearest 2x, conv 3x3
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class DownBlock(nn.Module):
    def __init__(self, cin, cout, n, groups, down):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(cin if j == 0 else cout, cout, groups)
                                      for j in range(n)])
        self.downsamplers = nn.ModuleList([Downsample(cout)]) if down else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](x)
        return x


class UpBlock(nn.Module):
    def __init__(self, cin, cout, n, groups, up):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(cin if j == 0 else cout, cout, groups)
                                      for j in range(n)])
        self.upsamplers = nn.ModuleList([Upsample(cout)]) if up else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x)
        return x


class Encoder(nn.Module):
    def __init__(self, ch, layers, groups, latent, attention):
        super().__init__()
        self.conv_in = nn.Conv2d(3, ch[0], 3, padding=1)
        blocks, prev = [], ch[0]
        for i, c in enumerate(ch):
            blocks.append(DownBlock(prev, c, layers, groups, i != len(ch) - 1))
            prev = c
        self.down_blocks = nn.ModuleList(blocks)
        self.mid_block = MidBlock(ch[-1], groups, attention)
        self.conv_norm_out = nn.GroupNorm(groups, ch[-1], eps=EPS)
        self.conv_out = nn.Conv2d(ch[-1], 2 * latent, 3, padding=1)

    def forward(self, x):
        x = self.conv_in(x)
        for b in self.down_blocks:
            x = b(x)
        x = self.mid_block(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class Decoder(nn.Module):
    def __init__(self, ch, layers, groups, latent, attention):
        super().__init__()
        self.conv_in = nn.Conv2d(latent, ch[-1], 3, padding=1)
        self.mid_block = MidBlock(ch[-1], groups, attention)
        rev = list(reversed(ch))
        blocks, prev = [], rev[0]
        for i, c in enumerate(rev):
            blocks.append(UpBlock(prev, c, layers + 1, groups, i != len(rev) - 1))
            prev = c
        self.up_blocks = nn.ModuleList(blocks)
        self.conv_norm_out = nn.GroupNorm(groups, ch[0], eps=EPS)
        self.conv_out = nn.Conv2d(ch[0], 3, 3, padding=1)

    def forward(self, z):
        x = self.conv_in(z)
        x = self.mid_block(x)
        for b in self.up_blocks:
            x = b(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


def _center(conv, cout, cin, value):
    """conv.weight[cout, cin] = value at the centre tap (1x1: the only tap)."""
    k = conv.weight.shape[-1] // 2
    conv.weight[cout, cin, k, k] = value


def _identity_channels(conv, n):
    """conv passes channels 0..n-1 through unchanged (centre taps), nothing else."""
    conv.weight.zero_()
    conv.bias.zero_()
    for c in range(n):
        _center(conv, c, c, 1.0)


@torch.no_grad()
def analytic_init(vae, groups):
    """Start the autoencoder at a hand-made solution inside diffusers' architecture, which
    training then refines: the latent's channels 0-2 are the image's RGB averaged over 8x8
    blocks (others 0), and the decoder paints each block in that colour.

    Every residual branch is zero (conv2 = 0: each ResnetBlock2D is the identity), the
    shortcuts and upsampler convolutions pass channels through, the downsamplers average
    2x2 blocks. The only GroupNorms left on the path are the two conv_norm_out (one group):
    there channel 0 holds the constant ANCHOR and channels 4-6 the negatives of channels 1-3,
    so the group's mean is exactly ANCHOR / C and its spread nearly constant: the norm is
    linear to within ~1 %, and its affine weights undo the scale; a shift of SILU_SHIFT makes
    the following silu the identity, and conv_out removes the shift.
    """
    assert groups == 1, "analytic_init needs norm_num_groups 1"
    enc, dec = vae.encoder, vae.decoder
    lat = vae.latent
    for m in vae.modules():
        if isinstance(m, Resnet):
            m.conv2.weight.zero_()
            m.conv2.bias.zero_()
            if m.conv_shortcut is not None:
                _identity_channels(m.conv_shortcut, 7)
        elif isinstance(m, Downsample):  # taps (0,0) (0,1) (1,0) (1,1) of the padded input
            m.conv.weight.zero_()
            m.conv.bias.zero_()
            for c in range(m.conv.out_channels):
                m.conv.weight[c, c, 0:2, 0:2] = 0.25
        elif isinstance(m, Upsample):
            _identity_channels(m.conv, m.conv.out_channels)
        elif isinstance(m, MidAttention):
            m.to_out[0].weight.zero_()
            m.to_out[0].bias.zero_()

    def source(conv, signs_from):  # channel 0 anchor, 1-3 = +x, 4-6 = -x
        conv.weight.zero_()
        conv.bias.zero_()
        conv.bias[0] = ANCHOR
        for i in range(3):
            _center(conv, 1 + i, signs_from + i, 1.0)
            _center(conv, 4 + i, signs_from + i, -1.0)

    def norm_out(gn, conv_out, cout_first, n_out):
        C = gn.num_channels
        sigma = ANCHOR * math.sqrt(C - 1) / C  # the group's std with x = 0
        gn.weight.fill_(1.0)
        gn.bias.zero_()
        for i in range(3):
            gn.weight[1 + i] = sigma
            gn.bias[1 + i] = SILU_SHIFT + ANCHOR / C  # undoes the mean, then the silu shift
        conv_out.weight.zero_()
        conv_out.bias.zero_()
        for i in range(3):
            _center(conv_out, cout_first + i, 1 + i, 1.0)
            conv_out.bias[cout_first + i] = -SILU_SHIFT
        return n_out

    source(enc.conv_in, 0)
    norm_out(enc.conv_norm_out, enc.conv_out, 0, lat)
    enc.conv_out.bias[lat:] = LOGVAR_INIT
    source(dec.conv_in, 0)
    norm_out(dec.conv_norm_out, dec.conv_out, 0, 3)


class AutoencoderKL(nn.Module):
    """use_quant_conv / use_post_quant_conv false (as FLUX.1)."""

    def __init__(self, cfg):
        super().__init__()
        ch, n, g = cfg["block_out_channels"], cfg["layers_per_block"], cfg["norm_num_groups"]
        lat, att = cfg["latent_channels"], cfg["mid_block_add_attention"]
        self.encoder = Encoder(ch, n, g, lat, att)
        self.decoder = Decoder(ch, n, g, lat, att)
        self.latent = lat
        analytic_init(self, g)

    def encode(self, x):
        """-> (mean, logvar), each (B, latent, H/8, W/8)."""
        m = self.encoder(x)
        return m[:, :self.latent], m[:, self.latent:].clamp(-30.0, 20.0)

    def decode(self, z):
        return self.decoder(z)


# ------------------------------------------------------------------ FluxTransformer2DModel

class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + EPS) * self.weight


class MLPEmbed(nn.Module):  # TimestepEmbedding / PixArtAlphaTextProjection(act silu)
    def __init__(self, cin, d):
        super().__init__()
        self.linear_1 = nn.Linear(cin, d)
        self.linear_2 = nn.Linear(d, d)

    def forward(self, x):
        return self.linear_2(F.silu(self.linear_1(x)))


class TimeTextEmbed(nn.Module):
    def __init__(self, d, pooled, guidance):
        super().__init__()
        self.timestep_embedder = MLPEmbed(TIMESTEP_CHANNELS, d)
        if guidance:
            self.guidance_embedder = MLPEmbed(TIMESTEP_CHANNELS, d)
        self.text_embedder = MLPEmbed(pooled, d)


class AdaLN(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.linear = nn.Linear(d, n * d)


class FF(nn.Module):  # FeedForward(gelu-approximate): net.0.proj, net.2
    def __init__(self, d):
        super().__init__()
        self.net = nn.ModuleList([nn.Module(), nn.Identity(), nn.Linear(4 * d, d)])
        self.net[0].proj = nn.Linear(d, 4 * d)

    def forward(self, x):
        return self.net[2](F.gelu(self.net[0].proj(x), approximate="tanh"))


class DoubleAttn(nn.Module):
    def __init__(self, d, hd):
        super().__init__()
        for n in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"):
            setattr(self, n, nn.Linear(d, d))
        for n in ("norm_q", "norm_k", "norm_added_q", "norm_added_k"):
            setattr(self, n, RMSNorm(hd))
        self.to_out = nn.ModuleList([nn.Linear(d, d)])
        self.to_add_out = nn.Linear(d, d)


class SingleAttn(nn.Module):
    def __init__(self, d, hd):
        super().__init__()
        for n in ("to_q", "to_k", "to_v"):
            setattr(self, n, nn.Linear(d, d))
        self.norm_q = RMSNorm(hd)
        self.norm_k = RMSNorm(hd)


class DoubleBlock(nn.Module):
    def __init__(self, d, hd):
        super().__init__()
        self.norm1 = AdaLN(d, 6)
        self.norm1_context = AdaLN(d, 6)
        self.attn = DoubleAttn(d, hd)
        self.ff = FF(d)
        self.ff_context = FF(d)


class SingleBlock(nn.Module):
    def __init__(self, d, hd):
        super().__init__()
        self.norm = AdaLN(d, 3)
        self.proj_mlp = nn.Linear(d, 4 * d)
        self.attn = SingleAttn(d, hd)
        self.proj_out = nn.Linear(5 * d, d)


def timestep_proj(t):
    """get_timestep_embedding(t, 256, flip_sin_to_cos=True, downscale_freq_shift=0)."""
    half = TIMESTEP_CHANNELS // 2
    exponent = -math.log(MAX_PERIOD) * torch.arange(0, half, dtype=torch.float32) / half
    emb = t[:, None].float() * torch.exp(exponent)[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    return torch.cat([emb[:, half:], emb[:, :half]], dim=-1)


def rope_table(ids, axes):
    cos_out, sin_out = [], []
    pos = ids.float()
    for i, dim in enumerate(axes):
        freqs = 1.0 / (ROPE_THETA ** (torch.arange(0, dim, 2, dtype=torch.float64)[: dim // 2] / dim))
        angles = torch.outer(pos[:, i].double(), freqs)
        cos_out.append(angles.cos().repeat_interleave(2, dim=1).float())
        sin_out.append(angles.sin().repeat_interleave(2, dim=1).float())
    return torch.cat(cos_out, dim=-1), torch.cat(sin_out, dim=-1)


def apply_rope(x, cos, sin):
    cos, sin = cos[None, None], sin[None, None]
    x_real, x_imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    x_rot = torch.stack([-x_imag, x_real], dim=-1).flatten(3)
    return x * cos + x_rot * sin


class FluxTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c = cfg
        self.heads, self.hd = cfg["num_attention_heads"], cfg["attention_head_dim"]
        d = self.heads * self.hd
        self.axes = cfg["axes_dims_rope"]
        self.x_embedder = nn.Linear(cfg["in_channels"], d)
        self.time_text_embed = TimeTextEmbed(d, cfg["pooled_projection_dim"],
                                             cfg["guidance_embeds"])
        self.context_embedder = nn.Linear(cfg["joint_attention_dim"], d)
        self.transformer_blocks = nn.ModuleList([DoubleBlock(d, self.hd)
                                                 for _ in range(cfg["num_layers"])])
        self.single_transformer_blocks = nn.ModuleList([SingleBlock(d, self.hd)
                                                        for _ in range(cfg["num_single_layers"])])
        self.norm_out = AdaLN(d, 2)
        self.proj_out = nn.Linear(d, cfg["in_channels"])
        self._init()

    def _init(self):
        # adaLN-Zero: modulations and the output start at zero (the blocks start as identities)
        for m in self.modules():
            if isinstance(m, AdaLN):
                nn.init.zeros_(m.linear.weight)
                nn.init.zeros_(m.linear.bias)
        nn.init.zeros_(self.proj_out.weight)
        nn.init.zeros_(self.proj_out.bias)

    def split_heads(self, t):
        return t.view(t.shape[0], -1, self.heads, self.hd).transpose(1, 2)

    def attention(self, q, k, v):
        scale = 1.0 / math.sqrt(q.shape[-1])
        p = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1)
        o = p @ v
        return o.transpose(1, 2).reshape(q.shape[0], -1, self.heads * self.hd)

    @staticmethod
    def ln(x):
        return F.layer_norm(x, (x.shape[-1],), eps=EPS)

    def double_block(self, b, x, c, temb, cos, sin):
        st = F.silu(temb)
        sh, sc, g, sh2, sc2, g2 = b.norm1.linear(st).chunk(6, dim=1)
        csh, csc, cg, csh2, csc2, cg2 = b.norm1_context.linear(st).chunk(6, dim=1)
        nx = self.ln(x) * (1 + sc[:, None]) + sh[:, None]
        nc = self.ln(c) * (1 + csc[:, None]) + csh[:, None]
        a = b.attn
        q = a.norm_q(self.split_heads(a.to_q(nx)))
        k = a.norm_k(self.split_heads(a.to_k(nx)))
        v = self.split_heads(a.to_v(nx))
        cq = a.norm_added_q(self.split_heads(a.add_q_proj(nc)))
        ck = a.norm_added_k(self.split_heads(a.add_k_proj(nc)))
        cv = self.split_heads(a.add_v_proj(nc))
        q = apply_rope(torch.cat([cq, q], dim=2), cos, sin)
        k = apply_rope(torch.cat([ck, k], dim=2), cos, sin)
        v = torch.cat([cv, v], dim=2)
        o = self.attention(q, k, v)
        T = c.shape[1]
        x = x + g[:, None] * a.to_out[0](o[:, T:])
        x = x + g2[:, None] * b.ff(self.ln(x) * (1 + sc2[:, None]) + sh2[:, None])
        c = c + cg[:, None] * a.to_add_out(o[:, :T])
        c = c + cg2[:, None] * b.ff_context(self.ln(c) * (1 + csc2[:, None]) + csh2[:, None])
        return x, c

    def single_block(self, b, h, temb, cos, sin):
        sh, sc, g = b.norm.linear(F.silu(temb)).chunk(3, dim=1)
        n = self.ln(h) * (1 + sc[:, None]) + sh[:, None]
        mlp = F.gelu(b.proj_mlp(n), approximate="tanh")
        a = b.attn
        q = a.norm_q(self.split_heads(a.to_q(n)))
        k = a.norm_k(self.split_heads(a.to_k(n)))
        v = self.split_heads(a.to_v(n))
        o = self.attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)
        return h + g[:, None] * b.proj_out(torch.cat([o, mlp], dim=2))

    def forward(self, hidden_states, encoder_hidden_states, pooled, timestep, img_ids, txt_ids,
                guidance=None):
        """hidden_states (B, S, in), encoder_hidden_states (B, L, joint), pooled (B, P),
        timestep (B,) = sigma in [0, 1], img_ids (S, 3), txt_ids (L, 3) -> (B, S, in)."""
        x = self.x_embedder(hidden_states)
        tte = self.time_text_embed
        temb = tte.timestep_embedder(timestep_proj(timestep * TIME_SCALE))
        if self.c["guidance_embeds"]:
            temb = temb + tte.guidance_embedder(timestep_proj(guidance * TIME_SCALE))
        temb = temb + tte.text_embedder(pooled)
        c = self.context_embedder(encoder_hidden_states)
        cos, sin = rope_table(torch.cat([txt_ids, img_ids], dim=0), self.axes)
        for b in self.transformer_blocks:
            x, c = self.double_block(b, x, c, temb, cos, sin)
        h = torch.cat([c, x], dim=1)
        for b in self.single_transformer_blocks:
            h = self.single_block(b, h, temb, cos, sin)
        h = h[:, c.shape[1]:]
        scale, shift = self.norm_out.linear(F.silu(temb)).chunk(2, dim=1)
        h = self.ln(h) * (1 + scale)[:, None, :] + shift[:, None, :]
        return self.proj_out(h)


def pack_latents(z):
    """(B, C, H, W) -> (B, H/2 * W/2, 4C), FluxPipeline._pack_latents."""
    B, C, H, W = z.shape
    z = z.view(B, C, H // 2, 2, W // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return z.reshape(B, (H // 2) * (W // 2), C * 4)


def unpack_latents(x, C, H, W):
    B = x.shape[0]
    x = x.view(B, H // 2, W // 2, C, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(B, C, H, W)


def latent_image_ids(h2, w2):
    """(h2*w2, 3): (0, row, col), FluxPipeline._prepare_latent_image_ids."""
    ids = torch.zeros(h2, w2, 3)
    ids[..., 1] = torch.arange(h2)[:, None]
    ids[..., 2] = torch.arange(w2)[None, :]
    return ids.reshape(h2 * w2, 3)
