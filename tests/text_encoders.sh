#!/bin/sh
# text_encoders.sh — cpdit's CLIP text model and T5 encoder against an independent PyTorch
# forward (tests/reference/text_encoder_reference.py, written from transformers' model code),
# on small random checkpoints in the transformers layout written by tests/text_encoder_tool:
#   clip_a  hidden 32, 2 layers, 4 heads, quick_gelu, eos 500 (pool at the first 500), F32,
#           batch 2 x 77
#   clip_b  hidden 48, 3 layers, 3 heads, gelu (erf), eos 2 (legacy: pool at the largest id,
#           not at the 500s padding it), BF16,
#           batch 3 x 77
#   clip_c  hidden 32, 1 layer, 2 heads, gelu_new, F16, 1 x 20, weights streamed
#   t5_a    d_model 32, d_kv 8, 4 heads, gated-gelu, 2 layers, F32, batch 2 x 40
#   t5_b    d_kv 6 (inner 24 != d_model 32), relu, embed_tokens, 2 shards, BF16, 1 x 77,
#           weights streamed
#   t5_c    gated-gelu, max_distance 20 (far buckets), 3 layers, BF16, 1 x 150, streamed
#   enc_toy text_encode on a pipeline folder with toy tokenizers (prompts of 0..400 chars)
#   enc_real the same with FLUX.1's real tokenizer files, when present
# Tolerance: max|cpdit - ref| / max|ref| <= 1e-4 for every output (fp32 both ways).
# Exit 77 when no python3 with torch and numpy is found.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
TOOL="$top_builddir/tests/text_encoder_tool"
REF="$top_srcdir/tests/reference/text_encoder_reference.py"
TOL=1e-4
# The bf16 path (the default: bf16 weights as stored, activations rounded to bf16 in each
# linear layer's product) against the same fp32 reference: max|diff| / max|ref| <= 3e-2 (seen:
# <= 1e-2 on these 1-3 layer models; bf16 keeps 8 bits of mantissa, 2^-9 = 2e-3 per rounding).
TOL_BF16=3e-2
DATA=${CPDIT_TOKENIZER_DATA:-$top_srcdir/../shared/data/tokenizers}

PY=""
for cand in /usr/bin/python3 "${PYTHON3:-}" python3; do
    [ -n "$cand" ] || continue
    if "$cand" -c 'import torch, numpy' >/dev/null 2>&1; then PY=$cand; break; fi
done
if [ -z "$PY" ]; then
    echo "SKIP: no python3 with torch and numpy for the reference"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/text_encoders.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ref_args=""
cases=""

step() { # DESCRIPTION COMMAND...
    what=$1; shift
    if ! out=$("$@" 2>&1); then
        echo "FAIL: $what: $out"; fail=1; return 1
    fi
}

# model_case NAME KIND "MAKE ARGS" "IDS ARGS" [--stream]
model_case() {
    name=$1 kind=$2 margs=$3 iargs=$4 stream=${5:-}
    # shellcheck disable=SC2086
    step "$name: make" "$TOOL" make-$kind "$tmp/$name" $margs || return
    # shellcheck disable=SC2086
    step "$name: ids" "$TOOL" make-ids "$tmp/$name.ids.safetensors" $iargs || return
    # shellcheck disable=SC2086
    step "$name: forward" "$TOOL" forward $kind "$tmp/$name" "$tmp/$name.ids.safetensors" \
        "$tmp/$name.out.safetensors" $stream --weight-format fp32 || return
    # shellcheck disable=SC2086
    step "$name: forward (bf16 path)" "$TOOL" forward $kind "$tmp/$name" \
        "$tmp/$name.ids.safetensors" "$tmp/$name.bf16.safetensors" $stream || return
    ref_args="$ref_args $kind $tmp/$name $tmp/$name.ids.safetensors $tmp/$name.ref.safetensors"
    cases="$cases $name.ref:$name.out:all:$TOL $name.ref:$name.bf16:all:$TOL_BF16"
}

model_case clip_a clip "--eos 500 --dtype F32 --seed 1" "--batch 2 --seq 77 --vocab 1000 --eos 500 --eos-at 9"
model_case clip_b clip "--hidden 48 --layers 3 --heads 3 --act gelu --eos 2 --dtype BF16 --seed 2" \
    "--batch 3 --seq 77 --vocab 1000 --eos 500 --eos-at 5 --seed 2"
model_case clip_c clip "--layers 1 --heads 2 --act gelu_new --dtype F16 --seed 3" \
    "--batch 1 --seq 20 --vocab 1000 --seed 3" --stream
model_case t5_a t5 "--dtype F32 --seed 4" "--batch 2 --seq 40 --vocab 1000 --eos 1 --eos-at 30 --seed 4"
model_case t5_b t5 "--d-kv 6 --ff-proj relu --embed encoder --shards 2 --dtype BF16 --seed 5" \
    "--batch 1 --seq 77 --vocab 1000 --seed 5" --stream
model_case t5_c t5 "--max-distance 20 --layers 3 --dtype BF16 --seed 6" \
    "--batch 1 --seq 150 --vocab 1000 --seed 6" --stream

# text_encode end to end: the reference runs on the ids the tokenizers gave
encode_case() { # NAME MAX_SEQ PIPELINE-ARGS -- PROMPTS...
    name=$1 L=$2; shift 2
    pargs=""; while [ "$1" != "--" ]; do pargs="$pargs $1"; shift; done; shift
    # shellcheck disable=SC2086
    step "$name: make-pipeline" "$TOOL" make-pipeline "$tmp/$name" $pargs || return
    step "$name: encode" "$TOOL" encode "$tmp/$name" "$tmp/$name" --max-seq "$L" \
        --weight-format fp32 "$@" || return
    ref_args="$ref_args clip $tmp/$name/text_encoder $tmp/$name.clip_ids.safetensors $tmp/$name.clip_ref.safetensors"
    ref_args="$ref_args t5 $tmp/$name/text_encoder_2 $tmp/$name.t5_ids.safetensors $tmp/$name.t5_ref.safetensors"
    cases="$cases $name.clip_ref:$name.clip:pooler_output:$TOL $name.t5_ref:$name.t5:all:$TOL"
}
long=$(printf 'abc de %.0s' $(seq 1 60))
encode_case enc_toy 16 -- "abc de" "" "$long"
if [ -d "$DATA/clip-vit-large-patch14" ] && [ -d "$DATA/t5-v1_1-xxl" ]; then
    encode_case enc_real 64 --tokenizers "$DATA" -- \
        "A photo of a cat, 4K — café 東京 🐱" "an astronaut riding a horse on the moon"
else
    echo "note: no tokenizer files in $DATA: enc_real skipped"
fi

# the reference, all cases in one run (importing torch is the slow part)
# shellcheck disable=SC2086
if ! "$PY" "$REF" $ref_args; then
    echo "FAIL: the reference script failed"
    exit 1
fi
for c in $cases; do # REF:GOT:TENSOR:TOL (TENSOR all = every tensor of REF)
    ref=${c%%:*} rest=${c#*:}
    got=${rest%%:*} rest=${rest#*:}
    only=${rest%%:*} tol=${rest#*:}
    if out=$("$TOOL" compare "$tmp/$got.safetensors" "$tmp/$ref.safetensors" --tol $tol \
        --only "$only"); then
        echo "ok: $got: $out"
    else
        echo "FAIL: $got: $out"; fail=1
    fi
done
exit $fail
