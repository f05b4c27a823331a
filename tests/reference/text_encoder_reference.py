#!/usr/bin/python3
"""text_encoder_reference.py — independent PyTorch forwards of transformers' CLIPTextModel and
T5EncoderModel, for cpdit's text encoder tests.

usage: text_encoder_reference.py KIND MODEL_DIR INPUTS.safetensors OUTPUT.safetensors
                                 [KIND MODEL_DIR INPUTS OUTPUT ...] [--float64]
       text_encoder_reference.py buckets > tests/data/t5_buckets_expected.txt

KIND is clip or t5. MODEL_DIR holds config.json and model.safetensors, or the shards of
model.safetensors.index.json (F32, F16 or BF16 tensors, transformers names). INPUTS holds
`input_ids` (B, S) as I32 or I64. OUTPUT gets `last_hidden_state` (B, S, D) and, for clip,
`pooler_output` (B, D), float32. Several quadruples may be given, to import torch once.

Written from the model definitions with plain torch ops (transformers is not needed):
modeling_clip.py (CLIPTextEmbeddings, CLIPAttention with the causal mask, CLIPMLP,
CLIPEncoderLayer, CLIPTextTransformer and its pooling rule) and modeling_t5.py (T5LayerNorm,
T5Attention with _relative_position_bucket / compute_bias and no score scaling,
T5DenseActDense / T5DenseGatedActDense, T5Stack as an encoder without attention mask).
Computes in float32 like transformers on a CPU; --float64 computes in float64 to see how far an
fp32 implementation is from the exact values.

`buckets` prints torch's relative position buckets for a few (num_buckets, max_distance)
pairs, one line per pair: "NUM MAXDIST FIRST b(FIRST) b(FIRST+1) ...".
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import load_model_dir, load_safetensors, save_safetensors  # noqa: E402

BUCKET_CASES = [(32, 128), (32, 64), (64, 256), (16, 20), (8, 16), (128, 512), (4, 3)]
BUCKET_RANGE = 600  # relative positions -RANGE..RANGE


# ---------------------------------------------------------------- activations (ACT2FN)
def activation(name):
    table = {
        "relu": F.relu,
        "gelu": F.gelu,                                   # exact, erf
        "gelu_new": lambda x: 0.5 * x * (1.0 + torch.tanh(
            math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))),
        "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
        "silu": F.silu,
        "swish": F.silu,
    }
    return table[name]


# ---------------------------------------------------------------- CLIP text model
def clip_forward(cfg, w, ids, dtype):
    if isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    D = cfg.get("hidden_size", 512)
    H = cfg.get("num_attention_heads", 8)
    L = cfg.get("num_hidden_layers", 12)
    eps = cfg.get("layer_norm_eps", 1e-5)
    eos = cfg.get("eos_token_id", 49407)
    act = activation(cfg.get("hidden_act", "quick_gelu"))
    hd = D // H
    scale = hd ** -0.5
    B, S = ids.shape
    W = lambda n: w[n].to(dtype)
    lin = lambda x, p: F.linear(x, W(p + ".weight"), W(p + ".bias"))
    ln = lambda x, p: F.layer_norm(x, (D,), W(p + ".weight"), W(p + ".bias"), eps)

    x = W("text_model.embeddings.token_embedding.weight")[ids] + \
        W("text_model.embeddings.position_embedding.weight")[torch.arange(S)][None]
    # _create_4d_causal_attention_mask: finfo.min above the diagonal
    mask = torch.triu(torch.full((S, S), torch.finfo(dtype).min, dtype=dtype), diagonal=1)
    for i in range(L):
        p = f"text_model.encoder.layers.{i}."
        r = x
        h = ln(x, p + "layer_norm1")
        q = (lin(h, p + "self_attn.q_proj") * scale).view(B, S, H, hd).transpose(1, 2)
        k = lin(h, p + "self_attn.k_proj").view(B, S, H, hd).transpose(1, 2)
        v = lin(h, p + "self_attn.v_proj").view(B, S, H, hd).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-1, -2) + mask, dim=-1) @ v
        a = a.transpose(1, 2).reshape(B, S, D)
        x = r + lin(a, p + "self_attn.out_proj")
        r = x
        h = ln(x, p + "layer_norm2")
        x = r + lin(act(lin(h, p + "mlp.fc1")), p + "mlp.fc2")
    last = ln(x, "text_model.final_layer_norm")
    if eos == 2:   # legacy configs: pool at the largest id (first one on ties)
        idx = ids.to(torch.int).argmax(dim=-1)
    else:
        idx = (ids.to(torch.int) == eos).int().argmax(dim=-1)
    pooled = last[torch.arange(B), idx]
    return {"last_hidden_state": last, "pooler_output": pooled}


# ---------------------------------------------------------------- T5 encoder
def relative_position_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128):
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).to(torch.long) * num_buckets
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, rel, large)


def t5_forward(cfg, w, ids, dtype):
    D = cfg.get("d_model", 512)
    H = cfg.get("num_heads", 8)
    dkv = cfg.get("d_kv", 64)
    L = cfg.get("num_layers", 6)
    nb = cfg.get("relative_attention_num_buckets", 32)
    md = cfg.get("relative_attention_max_distance", 128)
    eps = cfg.get("layer_norm_epsilon", 1e-6)
    proj = cfg.get("feed_forward_proj", "relu")
    parts = proj.split("-")
    gated = parts[0] == "gated"
    act_name = "gelu_new" if proj == "gated-gelu" else parts[-1]
    act_name = cfg.get("dense_act_fn", act_name)
    act = activation(act_name)
    B, S = ids.shape
    W = lambda n: w[n].to(dtype)

    def rms(x, name):  # T5LayerNorm: no mean, no bias; variance in fp32 (or fp64)
        var = x.pow(2).mean(-1, keepdim=True)
        return W(name) * (x * torch.rsqrt(var + eps))

    emb = "encoder.embed_tokens.weight" if "encoder.embed_tokens.weight" in w else "shared.weight"
    x = W(emb)[ids]
    # compute_bias(S, S) of block 0: (1, H, S, S)
    ctx = torch.arange(S, dtype=torch.long)[:, None]
    mem = torch.arange(S, dtype=torch.long)[None, :]
    bucket = relative_position_bucket(mem - ctx, True, nb, md)
    table = W("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
    bias = table[bucket].permute(2, 0, 1).unsqueeze(0)
    for i in range(L):
        p = f"encoder.block.{i}.layer."
        h = rms(x, p + "0.layer_norm.weight")
        q = F.linear(h, W(p + "0.SelfAttention.q.weight")).view(B, S, H, dkv).transpose(1, 2)
        k = F.linear(h, W(p + "0.SelfAttention.k.weight")).view(B, S, H, dkv).transpose(1, 2)
        v = F.linear(h, W(p + "0.SelfAttention.v.weight")).view(B, S, H, dkv).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) + bias          # no 1/sqrt(d_kv)
        a = torch.softmax(scores.float(), dim=-1).type_as(scores) @ v
        a = a.transpose(1, 2).reshape(B, S, H * dkv)
        x = x + F.linear(a, W(p + "0.SelfAttention.o.weight"))
        h = rms(x, p + "1.layer_norm.weight")
        if gated:
            g = act(F.linear(h, W(p + "1.DenseReluDense.wi_0.weight")))
            g = g * F.linear(h, W(p + "1.DenseReluDense.wi_1.weight"))
        else:
            g = act(F.linear(h, W(p + "1.DenseReluDense.wi.weight")))
        x = x + F.linear(g, W(p + "1.DenseReluDense.wo.weight"))
    return {"last_hidden_state": rms(x, "encoder.final_layer_norm.weight")}


def print_buckets():
    rel = torch.arange(-BUCKET_RANGE, BUCKET_RANGE + 1, dtype=torch.long)
    for nb, md in BUCKET_CASES:
        b = relative_position_bucket(rel, True, nb, md)
        print(nb, md, -BUCKET_RANGE, " ".join(str(int(v)) for v in b))


def main(argv):
    dtype = torch.float32
    if "--float64" in argv:
        dtype = torch.float64
        argv = [a for a in argv if a != "--float64"]
    if argv == ["buckets"]:
        print_buckets()
        return 0
    if not argv or len(argv) % 4:
        sys.stderr.write(__doc__)
        return 2
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for i in range(0, len(argv), 4):
        kind, model, inputs, output = argv[i:i + 4]
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        w = load_model_dir(model)
        ids = load_safetensors(inputs)["input_ids"].to(torch.long)
        with torch.no_grad():
            if kind == "clip":
                out = clip_forward(cfg, w, ids, dtype)
            elif kind == "t5":
                out = t5_forward(cfg, w, ids, dtype)
            else:
                sys.stderr.write(f"unknown kind {kind}\n")
                return 2
        save_safetensors(output, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
