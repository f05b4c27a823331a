#!/bin/sh
# umt5_encoder.sh — `cpdit forward --component text_encoder` (bin/cmd_forward_text.c) and the
# prompt embeddings (lib/text/umt5_prompt.h) against an independent PyTorch UMT5 forward
# (tests/reference/umt5_reference.py, written from transformers' modeling_umt5.py), on small
# random UMT5 folders written by tests/text_encoder_tool (make-t5 --type umt5: a bias table in
# every block, drawn independently) and padded inputs written by tests/umt5_tool:
#   umt5_a  d_model 32, 4 heads x 8, gated-gelu, 3 layers, BF16; batch 3 x 24 with true
#           lengths 5, 24, 11; input_ids / attention_mask int64
#   umt5_b  d_kv 6 (inner 24 != d_model 32), relu, 2 layers, 2 shards, BF16, a pipeline root
#           (DIR/text_encoder/), weights streamed per layer (--weight-memory 1); batch 2 x 16,
#           lengths 7 and 16, int32
#   umt5_c  max_distance 20 (far buckets), F32; batch 2 x 40: one item fully padded (length 0:
#           uniform attention, as transformers' finfo.min mask gives), one of length 33; float
#           input tensors
#   umt5_d  umt5_a's model without an attention_mask tensor (all ones)
#   t5_m    a plain T5 folder (block 0's table only) with a mask, batch 2 x 10, lengths 3, 10
# Each forward runs --weight-format fp32 (tolerance TOL) and, for the BF16 folders, native
# (bf16 GEMM: TOL_BF16), as max|cpdit - ref| / max|ref|; umt5_c also on --backend cpu-bf16
# (TOL_BF16_ACT). prompt_embeds (umt5_tool
# prompt-embeds: each item's first true-length rows, then zeros) of umt5_a / umt5_c against
# the reference's within TOL. Without python3 + torch the comparisons are skipped; the CLI
# runs, the 2-rank run (the same bytes as 1 rank) and the bad-input checks (exit 2 with the
# tensor named) still count.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
CPDIT=${CPDIT:-$top_builddir/cpdit}
MPI_RUN=${MPI_RUN:-$top_builddir/tests/mpi-run.sh}
TOOL="$top_builddir/tests/text_encoder_tool"
UTOOL="$top_builddir/tests/umt5_tool"
REF="$top_srcdir/tests/reference/umt5_reference.py"
TOL=1e-4
# native: bf16 weights as stored, activations rounded to bf16 at each linear layer's input.
# Seen on umt5_a's shapes over seeds 31..71: 5.3e-3 .. 1.0e-2 (7.2e-3 for the seed used);
# umt5_b 3.6e-3. One bf16 rounding is 2^-9 = 2e-3 relative.
TOL_BF16=1e-2
# --backend cpu-bf16: activations stored in bf16 (rounded once per op), fp32 weights: as
# test_text_bf16's T5 bound (seen: 8e-3 .. 1.2e-2 on these shapes)
TOL_BF16_ACT=2e-2

PY=""
for cand in /usr/bin/python3 "${PYTHON3:-}" python3; do
    [ -n "$cand" ] || continue
    if "$cand" -c 'import torch, numpy' >/dev/null 2>&1; then PY=$cand; break; fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/umt5_encoder.XXXXXX") || exit 1
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

forward() { # NAME MODEL INPUTS OUT [CPDIT OPTIONS...]
    name=$1 model=$2 in=$3 out=$4; shift 4
    step "$name: cpdit forward $*" "$CPDIT" forward --model "$model" --component text_encoder \
        --inputs "$in" --output "$out" "$@"
}

# case NAME MODEL_DIR (for cpdit) MAKE-ARGS INPUT-ARGS BF16(0|1) [CPDIT OPTIONS...]
case_() {
    name=$1 model=$2 margs=$3 iargs=$4 bf16=$5; shift 5
    # shellcheck disable=SC2086
    step "$name: make" "$TOOL" make-t5 "$tmp/$name" $margs || return
    [ "$model" = "$tmp/$name" ] || { mkdir -p "$model" && mv "$tmp/$name" "$model/text_encoder"; }
    # shellcheck disable=SC2086
    step "$name: inputs" "$UTOOL" make-inputs "$tmp/$name.in.safetensors" $iargs || return
    forward "$name" "$model" "$tmp/$name.in.safetensors" "$tmp/$name.out.safetensors" \
        --weight-format fp32 "$@" || return
    ref_args="$ref_args $model $tmp/$name.in.safetensors $tmp/$name.ref.safetensors"
    cases="$cases $name.ref:$name.out:last_hidden_state:$TOL"
    if [ "$bf16" = 1 ]; then
        forward "$name" "$model" "$tmp/$name.in.safetensors" "$tmp/$name.bf16.safetensors" "$@" ||
            return
        cases="$cases $name.ref:$name.bf16:last_hidden_state:$TOL_BF16"
    fi
}

case_ umt5_a "$tmp/umt5_a" "--type umt5 --layers 3 --dtype BF16 --seed 41" \
    "--lengths 5,24,11 --seq 24 --dtype I64 --seed 41" 1
case_ umt5_b "$tmp/umt5_b_root" \
    "--type umt5 --d-kv 6 --ff-proj relu --shards 2 --dtype BF16 --seed 32" \
    "--lengths 7,16 --seq 16 --dtype I32 --seed 32" 1 --weight-memory 1
case_ umt5_c "$tmp/umt5_c" "--type umt5 --max-distance 20 --layers 3 --dtype F32 --seed 33" \
    "--lengths 0,33 --seq 40 --dtype F32 --seed 33" 0
case_ t5_m "$tmp/t5_m" "--type t5 --dtype F32 --seed 34" \
    "--lengths 3,10 --seq 10 --dtype I64 --seed 34" 0
# umt5_a's model, no mask tensor
if step "umt5_d: inputs" "$UTOOL" make-inputs "$tmp/umt5_d.in.safetensors" --lengths 9,24 \
    --seq 24 --no-mask --seed 35 &&
    forward umt5_d "$tmp/umt5_a" "$tmp/umt5_d.in.safetensors" "$tmp/umt5_d.out.safetensors" \
        --weight-format fp32; then
    ref_args="$ref_args $tmp/umt5_a $tmp/umt5_d.in.safetensors $tmp/umt5_d.ref.safetensors"
    cases="$cases umt5_d.ref:umt5_d.out:last_hidden_state:$TOL"
fi
# bf16 activation storage ("cpu-bf16", what the GPU backend keeps) with the masks, umt5_c's
# fully padded item included: TOL_BF16_ACT
if forward umt5_c "$tmp/umt5_c" "$tmp/umt5_c.in.safetensors" "$tmp/umt5_c.act.safetensors" \
    --backend cpu-bf16; then
    cases="$cases umt5_c.ref:umt5_c.act:last_hidden_state:$TOL_BF16_ACT"
fi
# prompt embeds
for n in umt5_a umt5_c; do
    if step "$n: prompt-embeds" "$UTOOL" prompt-embeds "$tmp/$n" "$tmp/$n.in.safetensors" \
        "$tmp/$n.pe.safetensors" --weight-format fp32; then
        cases="$cases $n.ref:$n.pe:prompt_embeds:$TOL"
    fi
done

# 2 ranks: rank 0 computes, the same bytes
if "$MPI_RUN" -np 2 "$CPDIT" forward --model "$tmp/umt5_a" --component text_encoder \
    --inputs "$tmp/umt5_a.in.safetensors" --output "$tmp/umt5_a.np2.safetensors" \
    --weight-format fp32 >"$tmp/np2.log" 2>&1 &&
    cmp -s "$tmp/umt5_a.np2.safetensors" "$tmp/umt5_a.out.safetensors"; then
    echo "ok: 2 ranks: the same bytes as 1 rank"
else
    echo "FAIL: 2 ranks: $(cat "$tmp/np2.log")"; fail=1
fi

# bad input: exit 2 naming the tensor
"$UTOOL" make-inputs "$tmp/short.in.safetensors" --lengths 3 --seq 23 >/dev/null 2>&1
bad_case() { # WHAT INPUTS WANT
    "$CPDIT" forward --model "$tmp/umt5_a" --component text_encoder --inputs "$2" \
        --output "$tmp/bad.safetensors" >"$tmp/bad.log" 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -q "$3" "$tmp/bad.log"; then
        echo "ok: $1: exit 2, $(head -1 "$tmp/bad.log")"
    else
        echo "FAIL: $1: exit $rc, $(cat "$tmp/bad.log") (wanted exit 2 and '$3')"; fail=1
    fi
}
"$UTOOL" make-inputs "$tmp/bad_vocab.in.safetensors" --lengths 20 --seq 20 --vocab 5000 \
    >/dev/null 2>&1
"$UTOOL" make-inputs "$tmp/bad_shape.in.safetensors" --lengths 4,6 --seq 8 --mask-seq 7 \
    >/dev/null 2>&1
bad_case "an id outside the vocabulary" "$tmp/bad_vocab.in.safetensors" "outside the vocabulary"
bad_case "a mask of another shape" "$tmp/bad_shape.in.safetensors" "attention_mask' has shape"

if [ -z "$PY" ]; then
    echo "note: no python3 with torch and numpy: the reference comparisons are skipped"
    exit $fail
fi
# the reference, all cases in one run (importing torch is the slow part)
# shellcheck disable=SC2086
if ! "$PY" "$REF" $ref_args; then
    echo "FAIL: the reference script failed"
    exit 1
fi
for c in $cases; do # REF:GOT:TENSOR:TOL
    ref=${c%%:*} rest=${c#*:}
    got=${rest%%:*} rest=${rest#*:}
    only=${rest%%:*} tol=${rest#*:}
    if out=$("$TOOL" compare "$tmp/$got.safetensors" "$tmp/$ref.safetensors" --tol "$tol" \
        --only "$only"); then
        echo "ok: $got: $out"
    else
        echo "FAIL: $got: $out"; fail=1
    fi
done
exit $fail
