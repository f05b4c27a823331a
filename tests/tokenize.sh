#!/bin/sh
# tokenize.sh — `cpdit tokenize`: the two output lines for FLUX.1's real tokenizer files laid out
# as a diffusers folder (tokenizer/ + tokenizer_2/ symlinks in a temporary folder; also with
# spiece.model instead of tokenizer.json), truncation warnings, and exit 2 with the missing
# file named for bad folders and options. A Wan folder (model_index.json WanPipeline, tokenizer/ =
# UMT5) prints one `umt5:` line: on tests/data/tokenizers/umt5-toy always, on T5's real files too.
# The real files come from $CPDIT_TOKENIZER_DATA, else $top_srcdir/../shared/data/tokenizers;
# without them only the error cases run.
CPDIT=${CPDIT:-./cpdit}
top_srcdir=${top_srcdir:-.}
DATA=${CPDIT_TOKENIZER_DATA:-$top_srcdir/../shared/data/tokenizers}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out
err=$tmp/err

# run CODE ARGS...: cpdit ARGS must exit with CODE
run() {
    want=$1; shift
    "$CPDIT" "$@" >"$out" 2>"$err"
    got=$?
    if [ "$got" != "$want" ]; then
        echo "FAIL: cpdit $*: exit $got, expected $want"; cat "$out" "$err"; fail=1; return 1
    fi
    return 0
}

# has FILE PATTERN
has() {
    if ! grep -q -- "$2" "$1"; then
        echo "FAIL: expected '$2' in:"; cat "$1"; fail=1
    fi
}

"$CPDIT" tokenize --model "$tmp" x >"$out" 2>"$err"
if grep -q "does not include" "$err"; then
    echo "SKIP: this cpdit has no tokenize subcommand wired in"; exit 77
fi

# ---- errors that need no tokenizer files
run 2 tokenize x && has "$err" "model DIR is required"
run 2 tokenize --model "$tmp" && has "$err" "PROMPT is missing"
run 2 tokenize --model "$tmp" a b && has "$err" "expected one PROMPT"
run 2 tokenize --model "$tmp" --frob x && has "$err" "unknown option '--frob'"
run 2 tokenize --model "$tmp" --max-sequence-length 513 x && has "$err" "out of range"
run 2 tokenize --model "$tmp" --max-sequence-length abc x && has "$err" "expected an integer"
run 2 tokenize --model "$tmp/nowhere" x && has "$err" "nowhere"
mkdir -p "$tmp/bad/tokenizer" "$tmp/bad/tokenizer_2"
run 2 tokenize --model "$tmp/bad" x && has "$err" "tokenizer/vocab.json"
echo '{"<|startoftext|>": 0, "<|endoftext|>": 1}' >"$tmp/bad/tokenizer/vocab.json"
echo '#version: 0.2' >"$tmp/bad/tokenizer/merges.txt"
run 2 tokenize --model "$tmp/bad" x && has "$err" "tokenizer_2/tokenizer.json"
echo '{"model": {"type": "WordPiece"}}' >"$tmp/bad/tokenizer_2/tokenizer.json"
run 2 tokenize --model "$tmp/bad" x && has "$err" "WordPiece"

# ---- a Wan folder: model_index.json WanPipeline, tokenizer/ = UMT5 (T5TokenizerFast). The toy
# tokenizer.json (tests/data/tokenizers/umt5-toy/README lists its ids) has UMT5's shape.
WAN_INDEX='{"_class_name": "WanPipeline", "_diffusers_version": "0.33.0.dev0",
 "tokenizer": ["transformers", "T5TokenizerFast"], "text_encoder": ["transformers", "UMT5EncoderModel"],
 "transformer": ["diffusers", "WanTransformer3DModel"], "scheduler": ["diffusers", "UniPCMultistepScheduler"],
 "vae": ["diffusers", "AutoencoderKLWan"]}'
mkdir -p "$tmp/wan"
printf '%s\n' "$WAN_INDEX" >"$tmp/wan/model_index.json"
run 2 tokenize --model "$tmp/wan" x && has "$err" "tokenizer"
mkdir -p "$tmp/wan/tokenizer"
run 2 tokenize --model "$tmp/wan" x && has "$err" "tokenizer/tokenizer.json"
cp "$top_srcdir/tests/data/tokenizers/umt5-toy/tokenizer.json" "$tmp/wan/tokenizer/"
# ▁photo ▁of ▁ a ▁cat </s>; one line, nothing on stderr
if run 0 tokenize --model "$tmp/wan" "photo of a cat"; then
    printf 'umt5: 266 267 259 260 265 1\n' >"$tmp/want"
    cmp -s "$out" "$tmp/want" || { echo "FAIL: Wan ids of 'photo of a cat':"; cat "$out"; fail=1; }
    [ -s "$err" ] && { echo "FAIL: unexpected stderr:"; cat "$err"; fail=1; }
fi
# WanPipeline's prompt_clean: runs of whitespace (tab, newline, U+3000) -> one space, stripped
run 0 tokenize --model "$tmp/wan" "$(printf '\t photo \n\343\200\200of  a cat  ')" &&
    has "$out" "^umt5: 266 267 259 260 265 1$"
# sentinels, byte fallback for é (C3 A9), an empty prompt
run 0 tokenize --model "$tmp/wan" "ab<extra_id_0>$(printf '\303\251')" &&
    has "$out" "^umt5: 263 270 259 198 172 1$"
run 0 tokenize --model "$tmp/wan" "" && has "$out" "^umt5: 1$"
# truncation keeps </s>, with the warning; the HTML-entity warning
run 0 tokenize --model "$tmp/wan" --max-sequence-length 3 "photo of a cat" &&
    has "$out" "^umt5: 266 267 1$" && has "$err" "longer than 3 UMT5 tokens"
run 0 tokenize --model "$tmp/wan" "a &amp; b" && has "$err" "HTML-unescapes"
[ "$(wc -l <"$out")" -eq 1 ] || { echo "FAIL: not one line"; cat "$out"; fail=1; }

if [ ! -d "$DATA/clip-vit-large-patch14" ] || [ ! -d "$DATA/t5-v1_1-xxl" ]; then
    echo "note: no tokenizer files in $DATA; id checks skipped"
    [ $fail = 0 ] && echo "ok: error cases"
    exit $fail
fi

# ---- real ids (FluxPipeline's tokenizers on the FLUX.1 files)
mkdir -p "$tmp/flux"
ln -s "$(cd "$DATA/clip-vit-large-patch14" && pwd)" "$tmp/flux/tokenizer"
ln -s "$(cd "$DATA/t5-v1_1-xxl" && pwd)" "$tmp/flux/tokenizer_2"

if run 0 tokenize --model "$tmp/flux" "a photo of a cat"; then
    printf 'clip: 49406 320 1125 539 320 2368 49407\nt5: 3 9 1202 13 3 9 1712 1\n' >"$tmp/want"
    cmp -s "$out" "$tmp/want" || { echo "FAIL: ids of 'a photo of a cat':"; cat "$out"; fail=1; }
    [ -s "$err" ] && { echo "FAIL: unexpected stderr:"; cat "$err"; fail=1; }
fi
# a tokenizer_2/ with only spiece.model (+ tokenizer_config.json): the same ids
mkdir -p "$tmp/spm/tokenizer_2"
ln -s "$(cd "$DATA/clip-vit-large-patch14" && pwd)" "$tmp/spm/tokenizer"
for f in spiece.model tokenizer_config.json; do
    ln -s "$(cd "$DATA/t5-v1_1-xxl" && pwd)/$f" "$tmp/spm/tokenizer_2/$f"
done
run 0 tokenize --model "$tmp/spm" "a photo of a cat" && has "$out" "^t5: 3 9 1202 13 3 9 1712 1$"
run 0 tokenize --model "$tmp/flux" "" && has "$out" "^clip: 49406 49407$" && has "$out" "^t5: 1$"
run 0 tokenize --model "$tmp/flux" -- "-dash café 東京" &&
    has "$out" "^clip: 49406 268 10206 15304 27667 365 21078 361 49407$" &&
    has "$out" "^t5: 3 18 26 3198 11949 3 2 1$"

long="a photo of a cat"
i=0
while [ $i -lt 30 ]; do long="$long and a dog"; i=$((i + 1)); done
if run 0 tokenize --model "$tmp/flux" --max-sequence-length 64 "$long"; then
    [ "$(wc -l <"$out")" -eq 2 ] || { echo "FAIL: not two lines"; fail=1; }
    n_clip=$(sed -n 's/^clip: //p' "$out" | wc -w)
    n_t5=$(sed -n 's/^t5: //p' "$out" | wc -w)
    [ "$n_clip" -eq 77 ] || { echo "FAIL: $n_clip CLIP ids, expected 77"; fail=1; }
    [ "$n_t5" -eq 64 ] || { echo "FAIL: $n_t5 T5 ids, expected 64"; fail=1; }
    has "$out" "^clip: 49406 .* 49407$"
    has "$out" "^t5: .* 1$"
    has "$err" "longer than 77 CLIP tokens"
    has "$err" "longer than 64 T5 tokens"
fi
run 0 tokenize --model "$tmp/flux" --max-sequence-length=512 "$long" && has "$err" "CLIP"
grep -q "T5 tokens" "$err" && { echo "FAIL: T5 warning under 512"; fail=1; }

# a Wan folder over real Unigram files (T5's vocabulary standing in for UMT5's): the T5 ids
mkdir -p "$tmp/wanreal"
printf '%s\n' "$WAN_INDEX" >"$tmp/wanreal/model_index.json"
ln -s "$(cd "$DATA/t5-v1_1-xxl" && pwd)" "$tmp/wanreal/tokenizer"
run 0 tokenize --model "$tmp/wanreal" "  a photo of  a cat " &&
    has "$out" "^umt5: 3 9 1202 13 3 9 1712 1$"

[ $fail = 0 ] && echo "ok: cpdit tokenize"
exit $fail
