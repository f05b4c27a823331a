"""text.py — the prompt side of builtin:shapes in PyTorch, frozen: the two tokenizers (as cpdit's
and FluxPipeline's tokenizers treat plain ASCII prompts) and the two text encoders
(tests/reference/text_encoder_reference.py, which cpdit's C encoders match), read from a folder
written by `cpdit builtin write DIR --name shapes --text-only`.

Conditioning as FluxPipeline: CLIP pooled output (77 tokens, padded with <|endoftext|>) and
T5's last hidden state (max_sequence_length tokens, padded with <pad>).
"""
import json
import os
import re
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))  # tests/reference
import text_encoder_reference as ter  # noqa: E402

CLIP_LENGTH = 77
METASPACE = "\u2581"
# CLIP's split pattern restricted to what ASCII text can hold (letters, digits, the rest)
CLIP_PATTERN = re.compile(r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|"
                          r"[a-z]+|[0-9]|[^\sa-z0-9]+", re.IGNORECASE)


def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class ClipTokenizer:
    def __init__(self, folder):
        with open(os.path.join(folder, "vocab.json")) as f:
            self.vocab = json.load(f)
        with open(os.path.join(folder, "merges.txt")) as f:
            lines = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#version")]
        self.ranks = {tuple(l.split(" ")): i for i, l in enumerate(lines)}
        self.b2u = _bytes_to_unicode()
        self.bos = self.vocab["<|startoftext|>"]
        self.eos = self.vocab["<|endoftext|>"]

    def _bpe(self, word):
        syms = list(word[:-1]) + [word[-1] + "</w>"]
        while len(syms) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 30), i)
                     for i, (a, b) in enumerate(zip(syms, syms[1:]))]
            r, i = min(pairs)
            if r == 1 << 30:
                break
            a, b = syms[i], syms[i + 1]
            out, j = [], 0
            while j < len(syms):  # merge every occurrence of (a, b), left to right
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(syms[j])
                    j += 1
            syms = out
        return syms

    def encode(self, text):
        if any(ord(ch) > 127 for ch in text):
            raise ValueError("text.py handles ASCII prompts only: %r" % text)
        text = " ".join(text.split()).lower()
        ids = [self.bos]
        for w in CLIP_PATTERN.findall(text):
            u = "".join(self.b2u[b] for b in w.encode("utf-8"))
            ids.extend(self.vocab[s] for s in self._bpe(u))
        ids.append(self.eos)
        return ids

    def encode_padded(self, text):
        ids = self.encode(text)
        if len(ids) > CLIP_LENGTH:
            ids = ids[:CLIP_LENGTH - 1] + [self.eos]
        return ids + [self.eos] * (CLIP_LENGTH - len(ids))


class T5Tokenizer:
    """Unigram (Viterbi over the pieces' scores) after T5's normalisation of ASCII text."""

    def __init__(self, folder):
        with open(os.path.join(folder, "tokenizer.json")) as f:
            tj = json.load(f)
        vocab = tj["model"]["vocab"]
        self.score = {p: s for p, s in vocab}
        self.id = {p: i for i, (p, _) in enumerate(vocab)}
        self.unk = tj["model"].get("unk_id", 2)
        self.maxlen = max(len(p) for p in self.score)
        self.eos = self.id["</s>"]
        self.pad = self.id["<pad>"]

    def _viterbi(self, s):
        n = len(s)
        best = [(-1e30, -1, None)] * (n + 1)
        best[0] = (0.0, 0, None)
        for i in range(n):
            if best[i][0] <= -1e30:
                continue
            for j in range(i + 1, min(n, i + self.maxlen) + 1):
                p = s[i:j]
                if p in self.score:
                    sc = best[i][0] + self.score[p]
                    if sc > best[j][0]:
                        best[j] = (sc, i, self.id[p])
            if best[i + 1][0] <= -1e30:  # an unknown character
                best[i + 1] = (best[i][0] - 10.0, i, self.unk)
        out, j = [], n
        while j > 0:
            _, i, tid = best[j]
            out.append(tid)
            j = i
        return out[::-1]

    def encode(self, text):
        if any(ord(ch) > 127 for ch in text):
            raise ValueError("text.py handles ASCII prompts only: %r" % text)
        text = re.sub(" {2,}", " ", text.rstrip())
        ids = []
        for word in text.split(" "):
            if word or not ids:
                ids.extend(self._viterbi(METASPACE + word) if word else [])
        return ids + [self.eos]

    def encode_padded(self, text, length):
        ids = self.encode(text)
        if len(ids) > length:
            ids = ids[:length - 1] + [self.eos]
        return ids + [self.pad] * (length - len(ids))


def _load(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f), ter.load_model_dir(d)


class TextEncoders:
    """Frozen CLIP + T5 of a model folder; embed(captions) -> (pooled (B, 32), t5 (B, L, 64))."""

    def __init__(self, model_dir, max_sequence_length):
        self.L = max_sequence_length
        self.clip_tok = ClipTokenizer(os.path.join(model_dir, "tokenizer"))
        self.t5_tok = T5Tokenizer(os.path.join(model_dir, "tokenizer_2"))
        self.clip_cfg, self.clip_w = _load(os.path.join(model_dir, "text_encoder"))
        self.t5_cfg, self.t5_w = _load(os.path.join(model_dir, "text_encoder_2"))
        self.cache = {}

    @torch.no_grad()
    def embed(self, captions):
        todo = sorted({c for c in captions if c not in self.cache})
        if todo:
            cid = torch.tensor([self.clip_tok.encode_padded(c) for c in todo])
            tid = torch.tensor([self.t5_tok.encode_padded(c, self.L) for c in todo])
            pooled = ter.clip_forward(self.clip_cfg, self.clip_w, cid, torch.float32)["pooler_output"]
            t5 = ter.t5_forward(self.t5_cfg, self.t5_w, tid, torch.float32)["last_hidden_state"]
            for i, c in enumerate(todo):
                self.cache[c] = (pooled[i].clone(), t5[i].clone())
        return (torch.stack([self.cache[c][0] for c in captions]),
                torch.stack([self.cache[c][1] for c in captions]))


def check_against_cpdit(cpdit, model_dir, captions, L):
    """Compare this file's token ids with `cpdit tokenize` (the C tokenizers); raise on a
    difference. Returns the number of captions checked."""
    clip, t5 = ClipTokenizer(model_dir + "/tokenizer"), T5Tokenizer(model_dir + "/tokenizer_2")
    for c in captions:
        out = subprocess.run([cpdit, "tokenize", "--model", model_dir, "--max-sequence-length",
                              str(L), c], capture_output=True, text=True, check=True).stdout
        lines = dict(l.split(": ", 1) for l in out.strip().splitlines())
        want_clip = [int(v) for v in lines["clip"].split()]
        want_t5 = [int(v) for v in lines["t5"].split()]
        if clip.encode(c) != want_clip or t5.encode(c) != want_t5:
            raise RuntimeError("tokenizer mismatch for %r:\n clip %s\n want %s\n t5 %s\n want %s"
                               % (c, clip.encode(c), want_clip, t5.encode(c), want_t5))
    return len(captions)
