#!/bin/sh
# threads_forward.sh — the thread count does not change results: `cpdit forward` of a small
# FLUX transformer (4 heads x 64, 1 double + 1 single block, bf16 weights, 48 text + 16x16
# image tokens: every linear layer, attention and norm split over the threads) and of the
# built-in VAE (latent 16 x 24 x 24: decoder convolutions block-parallel), each with
# --threads 1, --threads 2 and CPDIT_THREADS=3, must write byte-identical outputs (cmp), for
# the native (bf16 GEMM) and the fp32 (row-split SGEMM) weight formats. One rank, no mpirun.
# A bad --threads value is a usage error (exit 2). --profile prints the op-class table (a
# linear bf16 row with calls and GFLOP, a packing row with MiB read) and changes no byte.
set -u
CPDIT=${CPDIT:-./cpdit}
top_builddir=${top_builddir:-.}
TOOL="$top_builddir/tests/flux_test_tool"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/threads_forward.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
export CPDIT_QUIET_BINDING=1 # 3 threads on a 2-core machine: no advice wanted here

"$TOOL" make-model "$tmp/m" --heads 4 --head-dim 64 --axes 8,28,28 --layers 1 --single 1 \
    --in 64 --joint 256 --pooled 64 --guidance 1 --dtype BF16 --seed 5 >/dev/null || exit 1
"$TOOL" make-inputs "$tmp/in" --model "$tmp/m" --batch 1 --txt 48 --img-h 16 --img-w 16 \
    >/dev/null || exit 1
"$CPDIT" builtin write "$tmp/b" >/dev/null || { echo "FAIL: builtin write"; exit 1; }
"$TOOL" make-latent "$tmp/lat" --channels 16 --h 24 --w 24 --seed 9 >/dev/null || exit 1

run() { # TAG THREADS-ARGS... : forward the transformer and the VAE
    tag=$1; shift
    for fmt in native fp32; do
        "$@" forward --model "$tmp/m" --component transformer --inputs "$tmp/in" \
            --output "$tmp/t_${fmt}_$tag" --weight-format $fmt ||
            { echo "FAIL: transformer forward ($fmt, $tag)"; fail=1; }
    done
    "$@" forward --model "$tmp/b" --component vae --inputs "$tmp/lat" \
        --output "$tmp/v_$tag" || { echo "FAIL: vae forward ($tag)"; fail=1; }
}
run 1 "$CPDIT" --threads 1
run 2 "$CPDIT" --threads=2
run 3 env CPDIT_THREADS=3 "$CPDIT"
for out in t_native t_fp32 v; do
    for tag in 2 3; do
        if cmp -s "$tmp/${out}_1" "$tmp/${out}_$tag"; then
            echo "ok: $out: $tag threads write the bytes of 1 thread"
        else
            echo "FAIL: $out: $tag threads differ from 1 thread"; fail=1
        fi
    done
done

# --profile: the op-class table on stderr, with the transformer's linear layers and packing
"$CPDIT" --profile --threads 2 forward --model "$tmp/m" --component transformer \
    --inputs "$tmp/in" --output "$tmp/t_prof" 2>"$tmp/prof" >/dev/null
if awk '$1 == "linear" && $2 == "bf16" && $3 > 0 && $5 > 0 { l = 1 }
        $1 == "weights" && $2 == "(pack)" && $NF > 0 { p = 1 }
        END { exit !(l && p) }' "$tmp/prof" && cmp -s "$tmp/t_prof" "$tmp/t_native_1"; then
    echo "ok: --profile prints linear bf16 and packing rows, the output unchanged"
else
    echo "FAIL: --profile table:"; cat "$tmp/prof"; fail=1
fi

"$CPDIT" --threads 0 forward >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -eq 2 ] && grep -q "threads" "$tmp/err"; then
    echo "ok: --threads 0 is refused (exit 2)"
else
    echo "FAIL: --threads 0 gave exit $rc: $(cat "$tmp/err")"; fail=1
fi
exit $fail
