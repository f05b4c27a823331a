#!/bin/sh
# builtin_defaults.sh — a built-in model runs as it is meant to without options: builtin:shapes
# at 128 x 128, 32 T5 tokens, 20 steps, true CFG 4 against the empty prompt (what it was
# trained and checked at); builtin:tiny at 256 x 256. Checks:
#   1. `cpdit run --model builtin:shapes --prompt P` writes the same PNG (bitwise) as the run
#      that spells every setting out, at 128 x 128;
#   2. a manifest that leaves the settings out gets the same defaults (`run --check`), and its
#      images show their prompts (`cpdit builtin sheet`: 2 of 2 right);
#   3. what the user gives wins over the model's defaults (CLI and manifest).
CPDIT=${CPDIT:-./cpdit}
CMP=${top_builddir:-.}/tests/png_compare
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export CPDIT_CACHE="$work/cache"
fail=0
P1="a large red circle in the center on a blue background"
P2="a large blue square in the center on an orange background"
png_size() { # FILE -> "W H" from the IHDR chunk
    od -An -tu1 -j16 -N8 "$1" | awk '{print $3*256+$4, $7*256+$8}'
}
check() { # WHAT EXPECTED ACTUAL
    if [ "$2" = "$3" ]; then echo "ok: $1: $3"; else echo "FAIL: $1: got '$3', want '$2'"; fail=1; fi
}

# 1. CLI: defaults vs everything spelled out
"$CPDIT" run --model builtin:shapes --prompt "$P1" --seed 7 --weight-format fp32 \
    --output "$work/cli-default" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
"$CPDIT" run --model builtin:shapes --prompt "$P1" --seed 7 --weight-format fp32 \
    --width 128 --height 128 --max-sequence-length 32 --steps 20 --true-cfg 4 \
    --negative-prompt "" --output "$work/cli-explicit" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
a=$(ls "$work"/cli-default/*.png); b=$(ls "$work"/cli-explicit/*.png)
check "CLI default size" "128 128" "$(png_size "$a")"
if "$CMP" "$a" "$b" 0 >"$work/cmp" 2>&1; then
    echo "ok: CLI defaults = the settings spelled out (bitwise)"
else
    echo "FAIL: CLI defaults differ from the settings spelled out: $(cat "$work/cmp")"; fail=1
fi
# 3. the user's settings win (a size and true CFG off)
"$CPDIT" run --model builtin:shapes --prompt "$P1" --seed 7 --width 64 --height 96 --steps 2 \
    --true-cfg 1 --output "$work/cli-given" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
check "CLI given size" "64 96" "$(png_size "$(ls "$work"/cli-given/*.png)")"

# 2. manifest without settings
cat >"$work/m.yaml" <<EOF
model: builtin:shapes
seeds: [7]
prompts:
  - $P1
  - $P2
EOF
"$CPDIT" run --check "$work/m.yaml" >"$work/check" 2>&1 || { cat "$work/check"; exit 1; }
check "manifest sizes" "sizes:     128x128" "$(grep '^sizes:' "$work/check")"
check "manifest defaults" \
    "defaults:  steps 20, guidance 3.5, true_cfg 4, max_sequence_length 32, with a negative prompt" \
    "$(grep '^defaults:' "$work/check")"
"$CPDIT" run "$work/m.yaml" --output "$work/batch" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
"$CPDIT" builtin sheet "$work/batch" >"$work/sheet" 2>&1 || { cat "$work/sheet"; exit 1; }
check "manifest images show their prompts" "checked: 2/2 right" \
    "$(grep '^checked:' "$work/batch/contact-sheet.txt")"
# 3. manifest settings win; builtin:tiny keeps 256 x 256
printf 'model: builtin:shapes\ndefaults: {width: 64, steps: 3, true_cfg: 1}\nprompts: [x]\n' \
    >"$work/given.yaml"
"$CPDIT" run --check "$work/given.yaml" >"$work/check" 2>&1 || { cat "$work/check"; exit 1; }
check "manifest given size" "sizes:     64x128" "$(grep '^sizes:' "$work/check")"
check "manifest given settings" \
    "defaults:  steps 3, guidance 3.5, true_cfg 1, max_sequence_length 32, with a negative prompt" \
    "$(grep '^defaults:' "$work/check")"
printf 'model: builtin:tiny\nprompts: [x]\n' >"$work/tiny.yaml"
"$CPDIT" run --check "$work/tiny.yaml" >"$work/check" 2>&1 || { cat "$work/check"; exit 1; }
check "builtin:tiny manifest size" "sizes:     256x256" "$(grep '^sizes:' "$work/check")"
exit $fail
