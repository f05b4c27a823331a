#!/usr/bin/python3
"""make_tokenizer_ids.py — expected token ids for tests/test_tokenizers.c.

Writes tests/data/tokenizers/expected_ids.jsonl: one JSON object per prompt with its name,
the prompt ("prompt", or "prompt_hex" for bytes that are not valid UTF-8), and the full,
untruncated ids of FLUX.1's two tokenizers ("clip", "t5"), special tokens included.

Both tokenizers are re-implemented here in plain Python, step by step after the code FLUX.1
runs (written from reading it, not copied):

* CLIP: transformers' slow CLIPTokenizer without ftfy (diffusers' FluxPipeline loads the slow
  class): BasicTokenizer(strip_accents=False, do_split_on_punc=False), the IGNORECASE pattern
  of tokenization_clip.py through the `regex` module, bytes_to_unicode and BPE over
  merges.txt.
* T5: the fast T5TokenizerFast pipeline of the `tokenizers` library as tokenizer.json (and
  transformers' conversion from spiece.model with add_prefix_space=True, legacy=True, which
  FluxPipeline triggers) describe it: special tokens split off the raw text, Precompiled
  charsmap normalizer (per extended grapheme cluster, shortest trie match, as the
  spm_precompiled crate does), Strip(right), Replace(" {2,}" -> "▁"), Metaspace
  (prepend_scheme "always", split), Unigram Viterbi with fused unknowns, then "</s>".

As an outside check, the T5 ids are compared with Debian's python3-sentencepiece on
spiece.model; the prompts where the fast pipeline and sentencepiece legitimately differ are
listed on stderr (special-token strings, grapheme quirks of the Precompiled normalizer).

Run with Debian's /usr/bin/python3 (apt-get install python3-regex python3-sentencepiece):
    /usr/bin/python3 tests/reference/make_tokenizer_ids.py [TOKENIZER_DATA_DIR]
TOKENIZER_DATA_DIR defaults to ../shared/data/tokenizers next to the repository.
"""
import base64
import json
import os
import struct
import sys
import unicodedata

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(REPO, "tests", "data", "tokenizers", "expected_ids.jsonl")

LONG_CLIP = (
    "A breathtaking panoramic view of an ancient mountain village at golden hour, with "
    "terraced rice fields cascading down the slopes, wooden houses with curved tile roofs, "
    "lanterns glowing softly along narrow cobblestone paths, a river winding through the "
    "valley below reflecting the orange and purple sky, mist rising from the forests, "
    "farmers returning home with baskets, children playing near a stone bridge, highly "
    "detailed, cinematic lighting, 8k resolution, photorealistic, shot on a 35mm lens"
)
LONG_T5 = " ".join([LONG_CLIP] * 5) + " The end."

PROMPTS = [
    ("simple", "a photo of a cat"),
    ("sign", "A cat holding a sign that says hello world"),
    ("punctuation", "Hello, world! How's it going?? (great...) -- yes; no: maybe/perhaps [ok] "
                    "{fine} <tag> @user #hash $5 100% a&b *star* ~tilde~ `code` \"quoted\" "
                    "'single' a_b a-b a+b=c"),
    ("numbers", "1234 and 3.14, 1,000,000 -42 0.5e-3 2nd 3rd 1st 10x 007 ½ ²"),
    ("apostrophes", "don't it's we're they've I'm we'll he'd DON'T IT'S rock'n'roll o'clock "
                    "'s ''ll x'ſ"),
    ("accents", "café naïve résumé Ångström Crème Brûlée São Paulo Zürich"),
    ("decomposed_accents", "cafe\u0301 nai\u0308ve e\u0301\u0301 A\u030a"),
    ("cjk", "東京タワー 夜景"),
    ("chinese", "一只可爱的猫在桌子上，看着窗外。"),
    ("korean_japanese", "서울의 밤 풍경 ひらがな カタカナ \u1100\u1161"),
    ("emoji", "🐱🚀 cat astronaut 👩‍🚀 👍🏽 🇯🇵 ❤️ ☕"),
    ("spaces", "  leading and trailing   spaces  "),
    ("tabs_newlines", "tabs\tand\nnewlines\r\nmixed  \t  end\x0bvt\x0cff"),
    ("zero_width", "zero\u200bwidth\u200cnon\u200djoiner\ufefftext soft\u00adhyphen"),
    ("unicode_spaces", "non\u00a0breaking\u2009thin\u3000ideographic\u2028line\u2029para\x85nel"),
    ("clip_specials", "a <|endoftext|> b<|startoftext|>c <|ENDOFTEXT|> <|ſtartoftext|>"),
    ("t5_specials", "<extra_id_0> mask </s> <pad>x<unk> <extra_id_99>end"),
    ("greek_turkish", "ΟΔΟΣ ΣΟΦΟΣ Σ ΑΣ. İstanbul ǅemal"),
    ("fullwidth", "ＦＵＬＬ ｗｉｄｔｈ １２３ ！？ ﬁne ﬂow Ⅻ ℃ ㎏ ｅ\u0301 ＡＢ\u0301"),
    ("math_symbols", "E = mc² ∑ ∫ √2 ≈ 1.414 → ← ★ © ® ™ ° ± × ÷"),
    ("scripts", "مرحبا بالعالم नमस्ते दुनिया สวัสดีชาวโลก Привет, МИР! שלום"),
    ("mixed_case", "HeLLo WoRLD ThIs Is CAPS McDonald's iPhone"),
    ("url_email", "https://example.com/path?q=1&x=y user@example.org C:\\dir\\file.txt"),
    ("repeats", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!! ........... ----"),
    ("metaspace_literal", "hello ▁ world▁▁x ▁"),
    ("long_words", "supercalifragilisticexpialidocious "
                   "pneumonoultramicroscopicsilicovolcanoconiosis"),
    ("combining_marks", "a\u0345b x\u20dd \u0301start"),
    ("crlf", "line1\r\nline2\rline3"),
    ("long_clip", LONG_CLIP),
    ("long_t5", LONG_T5),
    ("empty", ""),
    ("whitespace_only", "   \t\n "),
    ("single_letter", "a"),
    ("single_dot", "."),
    ("invalid_utf8", b"bad \xff\xfe bytes \xc3\x28 ok \xe2\x82 end \xed\xa0\x80 \xf0\x9f\x90"),
    ("nul_byte", b"nul\x00char"),
]

# ---------------------------------------------------------------- CLIP (slow CLIPTokenizer)

CLIP_PATTERN = regex.compile(
    r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
    regex.IGNORECASE)
CLIP_SPECIALS = ["<|startoftext|>", "<|endoftext|>"]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def is_chinese_char(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or
            0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
            0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def basic_tokenize(text):
    """BasicTokenizer(do_lower_case=True, strip_accents=False, do_split_on_punc=False)."""
    out = []
    for ch in text:
        cp = ord(ch)
        ws = ch in " \t\n\r" or unicodedata.category(ch) == "Zs"
        if not ws and (cp == 0 or cp == 0xFFFD or unicodedata.category(ch).startswith("C")):
            continue
        out.append(" " if ws else ch)
    text = "".join(" " + c + " " if is_chinese_char(ord(c)) else c for c in out)
    text = unicodedata.normalize("NFC", text)
    words = [w.lower() for w in text.strip().split()]
    return " ".join(" ".join(words).strip().split())


class ClipReference:
    def __init__(self, folder):
        with open(os.path.join(folder, "vocab.json"), encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(os.path.join(folder, "merges.txt"), encoding="utf-8") as f:
            merges = f.read().strip().split("\n")[1:49152 - 256 - 2 + 1]
        self.ranks = {tuple(m.split()): i for i, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.bos = self.encoder["<|startoftext|>"]
        self.eos = self.encoder["<|endoftext|>"]

    def bpe(self, token):
        if token in CLIP_SPECIALS:
            return [token]
        word = list(token[:-1]) + [token[-1] + "</w>"]
        while len(word) > 1:
            pairs = [(word[i], word[i + 1]) for i in range(len(word) - 1)]
            ranked = [p for p in pairs if p in self.ranks]
            if not ranked:
                break
            first, second = min(ranked, key=lambda p: self.ranks[p])
            new, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == first and word[i + 1] == second:
                    new.append(first + second)
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = new
        return word

    def tokenize_segment(self, text):
        ids = []
        for piece in CLIP_PATTERN.findall(basic_tokenize(text)):
            mapped = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder.get(t, self.eos) for t in self.bpe(mapped))
        return ids

    def encode(self, text):
        """bos + ids + eos; special-token texts split off first (PreTrainedTokenizer.tokenize)."""
        ids = [self.bos]
        split = regex.split(r"(<\|startoftext\|>|<\|endoftext\|>)", text)
        for part in split:
            if part in CLIP_SPECIALS:
                ids.append(self.encoder[part])
            elif part:
                ids.extend(self.tokenize_segment(part))
        return ids + [self.eos]


# ---------------------------------------------------------------- T5 (fast tokenizer)

WHITE_SPACE = set([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029,
                   0x202F, 0x205F, 0x3000] + list(range(0x2000, 0x200B)))


class Precompiled:
    """The sentencepiece charsmap (darts-clone double array + normalized strings)."""

    def __init__(self, blob):
        trie_size = struct.unpack("<I", blob[:4])[0]
        self.array = struct.unpack("<%dI" % (trie_size // 4), blob[4:4 + trie_size])
        self.normalized = blob[4 + trie_size:]

    def first_prefix(self, key):
        a = self.array

        def offset(u):
            return (u >> 10) << ((u & (1 << 9)) >> 6)

        pos = offset(a[0])
        for c in key:
            if c == 0:
                break
            pos ^= c
            unit = a[pos]
            if unit & ((1 << 31) | 0xFF) != c:
                return None
            pos ^= offset(unit)
            if (unit >> 8) & 1:
                return a[pos] & ((1 << 31) - 1)
        return None

    def transform(self, chunk):
        idx = self.first_prefix(chunk.encode("utf-8"))
        if idx is None:
            return None
        end = self.normalized.index(b"\0", idx)
        return self.normalized[idx:end].decode("utf-8")

    def normalize(self, text):
        out = []
        for g in regex.findall(r"\X", text):
            if len(g.encode("utf-8")) < 6:
                norm = self.transform(g)
                if norm is not None:
                    out.append(norm)
                    continue
            for ch in g:
                norm = self.transform(ch)
                out.append(ch if norm is None else norm)
        return "".join(out)


class T5Reference:
    def __init__(self, folder):
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            j = json.load(f)
        norms = j["normalizer"]["normalizers"]
        assert [n["type"] for n in norms] == ["Precompiled", "Strip", "Replace"], norms
        self.pre = Precompiled(base64.b64decode(norms[0]["precompiled_charsmap"]))
        assert j["pre_tokenizer"]["type"] == "Metaspace"
        assert j["pre_tokenizer"]["prepend_scheme"] == "always"
        model = j["model"]
        assert model["type"] == "Unigram" and not model["byte_fallback"]
        self.vocab = model["vocab"]
        self.unk = model["unk_id"]
        self.ids = {p: i for i, (p, _) in enumerate(self.vocab)}
        self.min_score = min(s for _, s in self.vocab)
        self.maxlen = max(len(p.encode("utf-8")) for p, _ in self.vocab)
        self.specials = sorted((t["content"] for t in j["added_tokens"]), key=len, reverse=True)
        self.special_ids = {t["content"]: t["id"] for t in j["added_tokens"]}
        self.eos = self.ids["</s>"]

    def unigram(self, word):
        """encode_optimized of tokenizers' Unigram, on the UTF-8 bytes of word."""
        b = word.encode("utf-8")
        n = len(b)
        best = [None] * (n + 1)  # (score, start, id)
        best[0] = (0.0, None, None)
        unk_score = self.min_score - 10.0
        starts = [i for i in range(n) if (b[i] & 0xC0) != 0x80]
        for s in starts:
            base = best[s][0]
            lead = b[s]
            mblen = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
            single = False
            for e in range(s + 1, min(n, s + self.maxlen) + 1):
                try:
                    piece = b[s:e].decode("utf-8")
                except UnicodeDecodeError:
                    continue
                pid = self.ids.get(piece)
                if pid is None:
                    continue
                cand = self.vocab[pid][1] + base
                if best[e] is None or cand > best[e][0]:
                    best[e] = (cand, s, pid)
                if e - s == mblen:
                    single = True
            if not single:
                e = s + mblen
                cand = unk_score + base
                if best[e] is None or cand > best[e][0]:
                    best[e] = (cand, s, self.unk)
        pieces = []
        e = n
        fused = None
        while e > 0:
            _, s, pid = best[e]
            text = b[s:e].decode("utf-8")
            if pid == self.unk:
                fused = text + (fused or "")
            else:
                if fused is not None:
                    pieces.append(fused)
                    fused = None
                pieces.append(text)
            e = s
        if fused is not None:
            pieces.append(fused)
        pieces.reverse()
        return [self.ids.get(p, self.unk) for p in pieces]

    def encode_segment(self, text):
        text = self.pre.normalize(text)
        while text and ord(text[-1]) in WHITE_SPACE:
            text = text[:-1]
        text = regex.sub(" {2,}", "\u2581", text)
        text = text.replace(" ", "\u2581")
        if not text:
            return []
        if not text.startswith("\u2581"):
            text = "\u2581" + text
        words = regex.findall("\u2581[^\u2581]*", text)
        ids = []
        for w in words:
            ids.extend(self.unigram(w))
        return ids

    def encode(self, text):
        ids = []
        pattern = "(" + "|".join(regex.escape(s) for s in self.specials) + ")"
        for part in regex.split(pattern, text):
            if part in self.special_ids:
                ids.append(self.special_ids[part])
            elif part:
                ids.extend(self.encode_segment(part))
        return ids + [self.eos]


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "..", "shared", "data",
                                                              "tokenizers")
    clip = ClipReference(os.path.join(data, "clip-vit-large-patch14"))
    t5 = T5Reference(os.path.join(data, "t5-v1_1-xxl"))
    try:
        import sentencepiece
        spm = sentencepiece.SentencePieceProcessor(
            model_file=os.path.join(data, "t5-v1_1-xxl", "spiece.model"))
    except ImportError:
        spm = None
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as out:
        for name, prompt in PROMPTS:
            text = prompt.decode("utf-8", "replace") if isinstance(prompt, bytes) else prompt
            rec = {"name": name}
            if isinstance(prompt, bytes):
                rec["prompt_hex"] = prompt.hex()
            else:
                rec["prompt"] = prompt
            rec["clip"] = clip.encode(text)
            rec["t5"] = t5.encode(text)
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
            if spm is not None:
                ref = spm.encode(text) + [1]
                if ref != rec["t5"]:
                    print(f"t5 differs from sentencepiece: {name}: fast {rec['t5'][:24]} "
                          f"spm {ref[:24]}", file=sys.stderr)
            print(f"{name}: clip {len(rec['clip'])} t5 {len(rec['t5'])}", file=sys.stderr)


if __name__ == "__main__":
    main()
