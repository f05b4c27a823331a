#!/bin/sh
# wan_forward.sh — `cpdit forward --component transformer` on one rank for Wan 2.1
# (WanTransformer3DModel) against an independent PyTorch forward
# (tests/reference/wan_reference.py, written from diffusers' model code), on small random Wan
# folders in the diffusers layout (tests/wan_test_tool):
#   A  3 heads x 16 (RoPE t,h,w = 8,4,4), 2 layers, F32, batch 2, latent 3x4x6 (18 tokens),
#      7 text tokens of which the last 2 are zero (as WanPipeline pads)
#   B  2 heads x 20 (RoPE 8,6,6), 2 layers, BF16, batch 2, latent 2x6x4 (12 tokens), 6 text,
#      freq_dim 64
#   C  odd latent 5x6x10 (F x H x W; 75 tokens, patch 1x2x2), 2 heads x 24 (8,8,8), 1 layer,
#      16 -> 12 channels, BF16, 9 text tokens
#   D  cross_attn_norm false (no norm2 weights), 3 heads x 12 (4,4,4), 2 layers, F32, batch 3,
#      latent 2x4x4, 4 text tokens, eps 1e-2 (large enough that a hard-coded 1e-6 shows)
#   E  patch 2x1x2 (non-default; Conv3d kernel and unpatchify order), 2 heads x 16, 1 layer,
#      8 channels, F16, latent 4x3x6 (2x3x3 tokens), 5 text tokens
#   W  Wan2.1-1.3B width, 1 layer: 12 heads x 128 (RoPE 44,42,42), ffn 8960, text 4096, BF16,
#      latent 2x4x6 (12 tokens), 8 text tokens
# Tolerance vs the reference: max|cpdit - ref| / max|ref| <= 1e-4 for the fp32 path
# (--weight-format fp32); <= 1e-2 for the default bf16 path (weights as stored, the linear
# layers' inputs rounded to bf16); the fp32 path also within 1e-4 of the reference computed in
# float64.
# Without PyTorch too (exact equality, tol 0): E's weights in 3 shards with an index = one
# file; E under a pipeline root (model_index.json + transformer/) = the component folder; A
# with a config that leaves every defaulted key out and out_channels null = A; B with its
# weights streamed block by block (--weight-memory 1K, with and without prefetch) = resident,
# on both paths; one timestep of shape (1) for a batch of 2 = that value given per item.
# Without PyTorch those comparisons are skipped; what still runs: the fp32 and bf16 paths agree
# within 1e-2 and are finite, the output has the latent's shape, and bad inputs are refused
# with exit 2 and a message naming the key or tensor (latent not divisible by the patch, text
# of the wrong width, an I2V config key, a checkpoint with fewer blocks than the config).
# Exit 77 when this cpdit has no Wan forward.
set -u
CPDIT=${CPDIT:-./cpdit}
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
TOOL="$top_builddir/tests/wan_test_tool"
REF="$top_srcdir/tests/reference/wan_reference.py"
TOL_REF=1e-4
TOL_BF16=1e-2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wan_forward.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

forward() { # MODEL INPUTS OUTPUT [OPTIONS]: the fp32 path unless OPTIONS say otherwise
    m=$1 i=$2 o=$3; shift 3
    "$CPDIT" forward --model "$m" --component transformer --inputs "$i" --output "$o" \
        --weight-format fp32 "$@"
}

# cpdit must have `forward` and know WanTransformer3DModel
"$TOOL" make-model "$tmp/probe" --layers 1 --dtype F32 >/dev/null &&
    "$TOOL" make-inputs "$tmp/probe.in" --model "$tmp/probe" >/dev/null ||
    { echo "FAIL: wan_test_tool"; exit 1; }
if ! msg=$(forward "$tmp/probe" "$tmp/probe.in" "$tmp/probe.out" 2>&1) &&
    echo "$msg" | grep -q 'does not include\|expected "FluxTransformer2DModel"'; then
    echo "SKIP: this cpdit has no Wan forward: $msg"
    exit 77
fi

# PyTorch: Debian's python3-torch lives in /usr/bin/python3, not necessarily the first python3
PY=""
for cand in /usr/bin/python3 "${PYTHON3:-}" python3; do
    [ -n "$cand" ] || continue
    if "$cand" -c 'import torch, numpy' >/dev/null 2>&1; then PY=$cand; break; fi
done
[ -n "$PY" ] || echo "note: no python3 with torch and numpy: the reference comparisons are skipped"

fail=0
ref_args=""   # (model, inputs, expected) triples for one run of the reference script
ref64_args="" # the same for its --float64 run
ref_names=""
check() { # WHAT COMMAND...: run, report
    what=$1; shift
    if out=$("$@" 2>&1); then
        echo "ok: $what: $out"
    else
        echo "FAIL: $what: $out"; fail=1
    fi
}

case_run() { # NAME MAKE-MODEL-ARGS -- MAKE-INPUTS-ARGS
    name=$1; shift
    margs=""; while [ "$1" != "--" ]; do margs="$margs $1"; shift; done; shift
    # shellcheck disable=SC2086
    "$TOOL" make-model "$tmp/$name" $margs || { echo "FAIL: $name: make-model"; fail=1; return; }
    "$TOOL" make-inputs "$tmp/$name.in" --model "$tmp/$name" "$@" ||
        { echo "FAIL: $name: make-inputs"; fail=1; return; }
    t0=$(date +%s.%N)
    if ! forward "$tmp/$name" "$tmp/$name.in" "$tmp/$name.out"; then
        echo "FAIL: $name: cpdit forward failed"; fail=1; return
    fi
    t1=$(date +%s.%N)
    if ! forward "$tmp/$name" "$tmp/$name.in" "$tmp/$name.bf16" --weight-format native; then
        echo "FAIL: $name: cpdit forward (bf16 path) failed"; fail=1; return
    fi
    t2=$(date +%s.%N)
    awk -v n="$name" -v a="$t0" -v b="$t1" -v c="$t2" \
        'BEGIN { printf "note: %s: fp32 path %.2f s, bf16 path %.2f s\n", n, b - a, c - b }'
    check "$name bf16 path vs fp32 path" "$TOOL" compare "$tmp/$name.bf16" "$tmp/$name.out" \
        --tol $TOL_BF16
    ref_args="$ref_args $tmp/$name $tmp/$name.in $tmp/$name.ref"
    ref64_args="$ref64_args $tmp/$name $tmp/$name.in $tmp/$name.ref64"
    ref_names="$ref_names $name"
}

case_run A --heads 3 --head-dim 16 --layers 2 --in 16 --text 32 --ffn 96 --dtype F32 \
    --seed 1 -- --batch 2 --frames 3 --height 4 --width 6 --text-len 7 --text-valid 5 --seed 1
case_run B --heads 2 --head-dim 20 --layers 2 --in 16 --text 24 --ffn 80 --freq 64 \
    --dtype BF16 --seed 2 -- --batch 2 --frames 2 --height 6 --width 4 --text-len 6 --seed 2
case_run C --heads 2 --head-dim 24 --layers 1 --in 16 --out 12 --text 40 --ffn 72 \
    --dtype BF16 --seed 3 -- --batch 1 --frames 5 --height 6 --width 10 --text-len 9 --seed 3
case_run D --heads 3 --head-dim 12 --layers 2 --in 8 --text 16 --ffn 48 --cross-attn-norm 0 \
    --eps 0.01 --dtype F32 --seed 4 -- --batch 3 --frames 2 --height 4 --width 4 --text-len 4 --seed 4
case_run E --heads 2 --head-dim 16 --layers 1 --in 8 --text 16 --ffn 64 --patch 2,1,2 \
    --dtype F16 --seed 5 -- --batch 1 --frames 4 --height 3 --width 6 --text-len 5 --seed 5
case_run W --heads 12 --head-dim 128 --layers 1 --in 16 --text 4096 --ffn 8960 --dtype BF16 \
    --seed 6 -- --batch 1 --frames 2 --height 4 --width 6 --text-len 8 --seed 6

# the PyTorch reference, all cases in one run (importing torch is the slow part)
if [ -n "$PY" ] && [ -n "$ref_args" ]; then
    # shellcheck disable=SC2086
    if "$PY" "$REF" $ref_args; then
        for n in $ref_names; do
            check "$n vs PyTorch" "$TOOL" compare "$tmp/$n.out" "$tmp/$n.ref" --tol $TOL_REF
            check "$n (bf16 path) vs PyTorch" "$TOOL" compare "$tmp/$n.bf16" "$tmp/$n.ref" \
                --tol $TOL_BF16
        done
    else
        echo "FAIL: the reference script failed"; fail=1
    fi
    # shellcheck disable=SC2086
    # shellcheck disable=SC2086
    if "$PY" "$REF" $ref64_args --float64; then
        for n in $ref_names; do
            check "$n vs PyTorch in float64" "$TOOL" compare "$tmp/$n.out" "$tmp/$n.ref64" \
                --tol $TOL_REF
        done
    else
        echo "FAIL: the reference script (--float64) failed"; fail=1
    fi
fi

# ---- the same model in other folder layouts: exactly the same result
same() { # WHAT MODEL INPUTS WANT [OPTIONS]
    what=$1 m=$2 i=$3 w=$4; shift 4
    rm -f "$tmp/same.out"
    if forward "$m" "$i" "$tmp/same.out" "$@"; then
        check "$what" "$TOOL" compare "$tmp/same.out" "$w" --tol 0
    else
        echo "FAIL: $what: cpdit forward failed"; fail=1
    fi
}
"$TOOL" make-model "$tmp/E_shards" --heads 2 --head-dim 16 --layers 1 --in 8 --text 16 \
    --ffn 64 --patch 2,1,2 --dtype F16 --seed 5 --shards 3 &&
    same "E in 3 shards + index.json = one file" "$tmp/E_shards" "$tmp/E.in" "$tmp/E.out"
mkdir -p "$tmp/root" && cp -r "$tmp/E" "$tmp/root/transformer" &&
    printf '{"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"]}\n' \
        >"$tmp/root/model_index.json" &&
    same "E under a pipeline root = the component folder" "$tmp/root" "$tmp/E.in" "$tmp/E.out"
mkdir "$tmp/A_def" && grep -v '"eps"\|"freq_dim"\|"qk_norm"\|"rope_max_seq_len"\|"cross_attn_norm"\|"added_kv_proj_dim"\|"image_dim"\|"patch_size"' \
    "$tmp/A/config.json" | sed 's/"out_channels": 16/"out_channels": null/' >"$tmp/A_def/config.json" &&
    ln -s "$tmp/A/diffusion_pytorch_model.safetensors" "$tmp/A_def/" &&
    same "A with diffusers' defaults left out, out_channels null = A" "$tmp/A_def" \
        "$tmp/A.in" "$tmp/A.out"
if "$TOOL" make-inputs "$tmp/B.same.in" --model "$tmp/B" --batch 2 --frames 2 --height 6 \
    --width 4 --text-len 6 --seed 2 --timestep same &&
    "$TOOL" make-inputs "$tmp/B.single.in" --model "$tmp/B" --batch 2 --frames 2 --height 6 \
        --width 4 --text-len 6 --seed 2 --timestep single &&
    forward "$tmp/B" "$tmp/B.same.in" "$tmp/B.same.out"; then
    same "B with timestep (1) for batch 2 = the same timestep per item" "$tmp/B" \
        "$tmp/B.single.in" "$tmp/B.same.out"
else
    echo "FAIL: B with timestep (1): making the inputs or the per-item run failed"; fail=1
fi
for path in native fp32; do
    want=$tmp/B.out
    [ $path = native ] && want=$tmp/B.bf16
    for pf in "" --no-weight-prefetch; do
        same "B streamed ($path${pf:+, $pf}) = resident" "$tmp/B" "$tmp/B.in" "$want" \
            --weight-format $path --weight-memory 1K --verbose $pf 2>"$tmp/stream.log"
        grep -q "streamed per block" "$tmp/stream.log" ||
            { echo "FAIL: B streamed ($path${pf:+, $pf}): not streamed:"; cat "$tmp/stream.log"; fail=1; }
    done
done

# ---- bad input: exit 2, a message naming what is wrong
refused() { # NAME PATTERN MODEL INPUTS
    msg=$(forward "$3" "$4" "$tmp/bad.out" 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && echo "$msg" | grep -q -- "$2" && [ ! -e "$tmp/bad.out" ]; then
        echo "ok: $1 -> exit 2: $msg"
    else
        echo "FAIL: $1: exit $rc (want 2, a message with '$2', no output): $msg"; fail=1
    fi
    rm -f "$tmp/bad.out"
}
"$TOOL" make-inputs "$tmp/odd.in" --model "$tmp/A" --frames 2 --height 5 --width 4 >/dev/null &&
    refused "latent height 5 with patch 1x2x2" "hidden_states" "$tmp/A" "$tmp/odd.in"
"$TOOL" make-inputs "$tmp/E_odd.in" --model "$tmp/E" --frames 3 --height 3 --width 6 \
    >/dev/null && refused "3 frames with patch 2x1x2" "hidden_states" "$tmp/E" "$tmp/E_odd.in"
"$TOOL" make-inputs "$tmp/text.in" --model "$tmp/A" --text-dim 24 >/dev/null &&
    refused "text_dim 24 on model A (32)" "encoder_hidden_states" "$tmp/A" "$tmp/text.in"
"$TOOL" make-inputs "$tmp/chan.in" --model "$tmp/A" --channels 8 >/dev/null &&
    refused "8 latent channels on model A (16)" "hidden_states" "$tmp/A" "$tmp/chan.in"

mkdir "$tmp/A_i2v" && sed 's/"image_dim": null/"image_dim": 1280/' "$tmp/A/config.json" \
    >"$tmp/A_i2v/config.json" && ln -s "$tmp/A/diffusion_pytorch_model.safetensors" "$tmp/A_i2v/"
refused "image_dim set (I2V)" "image_dim" "$tmp/A_i2v" "$tmp/A.in"

for n in 1 3; do
    mkdir "$tmp/A_$n" && sed "s/\"num_layers\": 2/\"num_layers\": $n/" "$tmp/A/config.json" \
        >"$tmp/A_$n/config.json" && ln -s "$tmp/A/diffusion_pytorch_model.safetensors" "$tmp/A_$n/"
done
refused "num_layers 3 vs a 2-block checkpoint" "blocks\.2\." "$tmp/A_3" "$tmp/A.in"
refused "num_layers 1 vs a 2-block checkpoint" "blocks\.1\." "$tmp/A_1" "$tmp/A.in"

mkdir "$tmp/D_norm" && sed 's/"cross_attn_norm": false/"cross_attn_norm": true/' \
    "$tmp/D/config.json" >"$tmp/D_norm/config.json" &&
    ln -s "$tmp/D/diffusion_pytorch_model.safetensors" "$tmp/D_norm/"
refused "cross_attn_norm true without norm2 weights" "norm2" "$tmp/D_norm" "$tmp/D.in"

[ -z "$PY" ] && echo "note: PyTorch comparisons skipped (no python3 with torch)"
exit $fail
