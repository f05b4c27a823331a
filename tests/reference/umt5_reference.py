#!/usr/bin/python3
"""umt5_reference.py — an independent PyTorch forward of transformers' UMT5EncoderModel (and
T5EncoderModel) with the attention mask, and WanPipeline's prompt embeddings, for cpdit's
UMT5 tests.

usage: umt5_reference.py MODEL_DIR INPUTS.safetensors OUTPUT.safetensors
                         [MODEL_DIR INPUTS OUTPUT ...] [--float64]

MODEL_DIR holds config.json and model.safetensors (or the shards of
model.safetensors.index.json), or is a pipeline root with text_encoder/. model_type "umt5":
every block has its own relative_attention_bias; "t5": block 0's serves all. INPUTS holds
`input_ids` (B, S) and optionally `attention_mask` (B, S) (any dtype; absent = all ones).
OUTPUT gets, float32:
  last_hidden_state (B, S, d_model)  UMT5EncoderModel(input_ids, attention_mask)[0]
  prompt_embeds     (B, S, d_model)  WanPipeline._get_t5_prompt_embeds after the tokenizer:
                                     each item's first mask.gt(0).sum() rows, then zeros

Written from modeling_umt5.py with plain torch ops (transformers is not needed): UMT5LayerNorm
(RMS, variance in fp32), UMT5Attention (q, k, v, o without bias, no 1/sqrt(d_kv) scaling,
compute_bias from the block's own table with bidirectional buckets, position_bias + the
extended mask (1 - mask) * finfo(dtype).min added to the scores, softmax in fp32),
UMT5DenseGatedActDense / UMT5DenseActDense, UMT5Stack as an encoder, final_layer_norm.
The relative position buckets and the ACT2FN activations are text_encoder_reference.py's
(the same in both models). --float64 computes in float64.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import load_model_dir, load_safetensors, save_safetensors  # noqa: E402
from text_encoder_reference import activation, relative_position_bucket  # noqa: E402

# (T5Config, UMT5Config) defaults for keys config.json leaves out
DEFAULTS = {
    "t5": dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
               feed_forward_proj="relu"),
    "umt5": dict(vocab_size=250112, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_heads=6,
                 feed_forward_proj="gated-gelu"),
}
TABLE = "encoder.block.{}.layer.0.SelfAttention.relative_attention_bias.weight"


def encoder_forward(cfg, w, ids, mask, dtype):
    kind = cfg.get("model_type", "t5")
    get = lambda k, d=None: cfg.get(k, DEFAULTS[kind].get(k, d))  # noqa: E731
    D, H, dkv, L = get("d_model"), get("num_heads"), get("d_kv"), get("num_layers")
    nb = get("relative_attention_num_buckets", 32)
    md = get("relative_attention_max_distance", 128)
    eps = get("layer_norm_epsilon", 1e-6)
    proj = get("feed_forward_proj")
    gated = proj.split("-")[0] == "gated"
    act = activation(cfg.get("dense_act_fn", "gelu_new" if proj == "gated-gelu"
                             else proj.split("-")[-1]))
    B, S = ids.shape
    W = lambda n: w[n].to(dtype)  # noqa: E731

    def rms(x, name):
        var = x.pow(2).mean(-1, keepdim=True)
        return W(name) * (x * torch.rsqrt(var + eps))

    def compute_bias(table):  # (1, H, S, S): table[bucket(key - query)]
        rel = torch.arange(S)[None, :] - torch.arange(S)[:, None]
        return table[relative_position_bucket(rel, True, nb, md)].permute(2, 0, 1).unsqueeze(0)

    emb = "encoder.embed_tokens.weight" if "encoder.embed_tokens.weight" in w else "shared.weight"
    x = W(emb)[ids]
    if mask is None:
        mask = torch.ones(B, S)
    extended = (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    bias = None
    for i in range(L):
        p = f"encoder.block.{i}.layer."
        if kind == "umt5" or i == 0:
            bias = compute_bias(W(TABLE.format(i))) + extended
        h = rms(x, p + "0.layer_norm.weight")
        q, k, v = (F.linear(h, W(p + f"0.SelfAttention.{n}.weight")).view(B, S, H, dkv)
                   .transpose(1, 2) for n in "qkv")
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores + bias
        a = torch.softmax(scores.float(), dim=-1).type_as(scores) @ v
        x = x + F.linear(a.transpose(1, 2).reshape(B, S, H * dkv),
                         W(p + "0.SelfAttention.o.weight"))
        h = rms(x, p + "1.layer_norm.weight")
        if gated:
            g = act(F.linear(h, W(p + "1.DenseReluDense.wi_0.weight"))) * \
                F.linear(h, W(p + "1.DenseReluDense.wi_1.weight"))
        else:
            g = act(F.linear(h, W(p + "1.DenseReluDense.wi.weight")))
        x = x + F.linear(g, W(p + "1.DenseReluDense.wo.weight"))
    last = rms(x, "encoder.final_layer_norm.weight")
    seq_lens = mask.gt(0).sum(dim=1).long()
    embeds = torch.stack([torch.cat([u[:n], u.new_zeros(S - n, u.size(1))])
                          for u, n in zip(last, seq_lens)])
    return {"last_hidden_state": last, "prompt_embeds": embeds}


def main(argv):
    dtype = torch.float32
    if "--float64" in argv:
        dtype = torch.float64
        argv = [a for a in argv if a != "--float64"]
    if not argv or len(argv) % 3:
        sys.stderr.write(__doc__)
        return 2
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for i in range(0, len(argv), 3):
        model, inputs, output = argv[i:i + 3]
        if os.path.isfile(os.path.join(model, "text_encoder", "config.json")):
            model = os.path.join(model, "text_encoder")
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        t = load_safetensors(inputs)
        ids = t["input_ids"].to(torch.long)
        mask = t.get("attention_mask")
        with torch.no_grad():
            out = encoder_forward(cfg, load_model_dir(model), ids, mask, dtype)
        save_safetensors(output, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
