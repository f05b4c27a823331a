#!/bin/sh
# shapes_torch.sh — builtin:shapes as cpdit renders it and as PyTorch renders it
# (tests/reference/train-builtin/torch_pipeline.py: FluxPipeline's loop in float32, torch.randn noise from
# the same seed, the same bf16 weights read from the folder cpdit writes) agree within 1/255 on
# every pixel of 4 prompts, with true CFG. Skips (77) without python3 + torch + numpy.
CPDIT=${CPDIT:-./cpdit}
CMP=${top_builddir:-.}/tests/png_compare
TOOLS=${top_srcdir:-.}/tests/reference/train-builtin
PY=${PYTHON3:-/usr/bin/python3}
"$PY" -c "import torch, numpy" 2>/dev/null || { echo "no python3 with torch and numpy: skip"; exit 77; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
SEED=11
STEPS=12
CFG=3
set -- "a large red circle in the center on a blue background" \
       "a small white square in the top right corner on a purple background" \
       "a large yellow triangle in the bottom left corner on a green background" \
       "an orange background with a large black diamond in the center"
"$CPDIT" builtin write "$work/model" --name shapes >/dev/null || { echo "FAIL: builtin write"; exit 1; }
{
    echo "model: $work/model"
    echo "output: {dir: $work/cpdit, name: \"{index:02d}.png\"}"
    echo "defaults: {steps: $STEPS, width: 128, height: 128, max_sequence_length: 32,"
    echo "           true_cfg: $CFG, negative_prompt: \"\"}"
    echo "seeds: [$SEED]"
    echo "prompts:"
    for p in "$@"; do echo "  - $p"; done
} >"$work/m.yaml"
"$CPDIT" run "$work/m.yaml" --weight-format fp32 >"$work/cpdit.log" 2>&1 || { echo "FAIL: cpdit run"; cat "$work/cpdit.log"; exit 1; }
"$PY" "$TOOLS/torch_pipeline.py" "$work/model" "$work/torch" --seed $SEED --steps $STEPS \
    --true-cfg $CFG --size 128 --max-sequence-length 32 "$@" || { echo "FAIL: torch_pipeline.py"; exit 1; }
fail=0
for i in 00 01 02 03; do
    if "$CMP" "$work/cpdit/$i.png" "$work/torch/$i.png" 1 >"$work/cmp" 2>&1; then
        echo "ok: prompt $i: cpdit vs PyTorch $(cat "$work/cmp")"
    else
        echo "FAIL: prompt $i: cpdit vs PyTorch $(cat "$work/cmp")"; fail=1
    fi
done
exit $fail
