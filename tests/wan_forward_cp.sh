#!/bin/sh
# wan_forward_cp.sh — `cpdit forward --component transformer` for Wan 2.1 under mpirun on CP
# grids of 2, 3, 4, 6 and 8 ranks, every attention variant (ring, ring-allgather, ulysses,
# unified, unified-allgather, with and without --anything), against the same command on 1 rank:
# max|N ranks - 1 rank| / max|1 rank| <= 1e-5.
#
# Model P: 3 heads x 16, 2 layers, BF16; inputs P: batch 2, latent 3x4x6 = 18 video tokens,
#   7 text tokens (the last 2 zero). 18 tokens divide 2, 3 and 6 but not 4 or 8; 3 heads leave
#   Ulysses groups of 2, 4 or 8 uneven (some ranks without a head).
# Model Q: 12 heads x 8 (Wan2.1-1.3B's head count), 1 layer, BF16; inputs Q: batch 1, latent
#   2x8x8 = 32 tokens (divides 2, 4, 8, not 3 or 6), 5 text tokens; inputs U: the odd latent
#   5x6x10 = 75 tokens (divides 3, not 2, 4, 6, 8); inputs S: latent 1x4x6 = 6 tokens (on 8
#   ranks 2 hold no video token). 12 heads do not split over Ulysses 8.
# The default (bf16) path and, on about a third of the grids, the fp32 path (--weight-format
# fp32: fp32 activations through the CP exchanges), each against 1 rank on the same path.
# Also data-parallel groups (batch 2 of P over 2 groups, and over 3: one group without an item) and a strict grid on tokens that do
# not divide: refused with exit 2 naming --anything on every rank, or run and equal.
# The text tokens are not sharded (every rank holds all of them). Needs no PyTorch.
# Exit 77 without mpirun or without a Wan forward in this cpdit.
set -u
CPDIT=${CPDIT:-./cpdit}
top_builddir=${top_builddir:-.}
MPI_RUN=${MPI_RUN:-"$top_builddir/tests/mpi-run.sh"}
TOOL="$top_builddir/tests/wan_test_tool"
TOL=1e-5

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wan_forward_cp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

"$TOOL" make-model "$tmp/P" --heads 3 --head-dim 16 --layers 2 --in 16 --text 32 --ffn 96 \
    --dtype BF16 --seed 11 &&
    "$TOOL" make-inputs "$tmp/P.in" --model "$tmp/P" --batch 2 --frames 3 --height 4 \
        --width 6 --text-len 7 --text-valid 5 --seed 11 &&
    "$TOOL" make-model "$tmp/Q" --heads 12 --head-dim 8 --layers 1 --in 16 --text 24 \
        --ffn 128 --dtype BF16 --seed 12 &&
    "$TOOL" make-inputs "$tmp/Q.in" --model "$tmp/Q" --batch 1 --frames 2 --height 8 \
        --width 8 --text-len 5 --seed 12 &&
    "$TOOL" make-inputs "$tmp/U.in" --model "$tmp/Q" --batch 1 --frames 5 --height 6 \
        --width 10 --text-len 5 --seed 13 &&
    "$TOOL" make-inputs "$tmp/S.in" --model "$tmp/Q" --batch 1 --frames 1 --height 4 \
        --width 6 --text-len 5 --seed 14 ||
    { echo "FAIL: making the test models"; exit 1; }

# inputs -> model
model_of() { case $1 in U | S) echo Q ;; *) echo "$1" ;; esac; }

if ! msg=$("$CPDIT" forward --model "$tmp/P" --component transformer --inputs "$tmp/P.in" \
    --output "$tmp/P.1" 2>&1); then
    if echo "$msg" | grep -q 'does not include\|expected "FluxTransformer2DModel"'; then
        echo "SKIP: this cpdit has no Wan forward: $msg"
        exit 77
    fi
    echo "FAIL: P on 1 rank: $msg"; exit 1
fi
"$MPI_RUN" -np 1 true >/dev/null 2>&1
[ $? -eq 77 ] && { echo "SKIP: no mpirun"; exit 77; }

for i in P Q U S; do
    [ $i = P ] || "$CPDIT" forward --model "$tmp/$(model_of $i)" --component transformer \
        --inputs "$tmp/$i.in" --output "$tmp/$i.1" || { echo "FAIL: $i on 1 rank"; exit 1; }
    "$CPDIT" forward --model "$tmp/$(model_of $i)" --component transformer \
        --inputs "$tmp/$i.in" --output "$tmp/$i.1.fp32" --weight-format fp32 ||
        { echo "FAIL: $i on 1 rank (fp32 path)"; exit 1; }
done

fail=0
grid() { # INPUTS NP ARGS...: run on NP ranks, compare with 1 rank on the same path
    i=$1; np=$2; shift 2
    want=$tmp/$i.1
    case " $* " in *" --weight-format fp32 "*) want=$tmp/$i.1.fp32 ;; esac
    rm -f "$tmp/out"
    if ! "$MPI_RUN" -np "$np" "$CPDIT" forward --model "$tmp/$(model_of "$i")" \
        --component transformer --inputs "$tmp/$i.in" --output "$tmp/out" "$@" \
        >"$tmp/log" 2>&1; then
        echo "FAIL: $i -np $np $*: cpdit forward failed:"; sed 's/^/  /' "$tmp/log" | head -20
        fail=1; return
    fi
    if r=$("$TOOL" compare "$tmp/out" "$want" --tol $TOL 2>&1); then
        echo "ok: $i -np $np $*: $r"
    else
        echo "FAIL: $i -np $np $*: $r"; fail=1
    fi
}

# 2 ranks: 1x2 and 2x1
grid P 2 --ring 2 --attention ring
grid P 2 --ring 2 --attention ring-allgather
grid P 2 --ulysses 2 --attention ulysses --anything --weight-format fp32
grid Q 2 --ulysses 2 --attention ulysses
grid U 2 --ring 2 --attention ring --anything --weight-format fp32
grid Q 2 --ring 2 --attention unified                 # degenerate unified grids: 2x1, 1x3
grid P 2                                              # data parallel: one item per group
# 3 ranks
grid P 3 --ring 3 --attention ring
grid P 3 --ulysses 3 --attention ulysses
grid Q 3 --ring 3 --attention ring-allgather --anything --weight-format fp32
grid Q 3 --ulysses 3 --attention ulysses --anything
grid U 3 --ring 3 --attention ring-allgather --weight-format fp32
grid Q 3 --ulysses 3 --attention unified-allgather --anything
grid P 3                                              # data parallel: a group without an item
# 4 ranks: 2x2, 1x4, 4x1
grid P 4 --ring 2 --ulysses 2 --attention unified --anything
grid P 4 --ring 2 --ulysses 2 --attention unified-allgather --anything
grid Q 4 --ulysses 4 --attention ulysses
grid Q 4 --ring 4 --attention ring
grid Q 4 --ring 2 --ulysses 2 --attention unified --weight-format fp32
grid U 4 --ring 4 --attention ring-allgather --anything
grid U 4 --ring 2 --ulysses 2 --attention unified-allgather --anything --weight-format fp32
grid P 4 --ring 2 --attention ring                    # 2 data-parallel groups x ring 2
# 6 ranks: 2x3, 3x2
grid P 6 --ring 2 --ulysses 3 --attention unified
grid P 6 --ring 3 --ulysses 2 --attention unified-allgather --anything
grid Q 6 --ring 3 --ulysses 2 --attention unified --anything --weight-format fp32
grid Q 6 --ring 6 --attention ring-allgather --anything
grid U 6 --ring 2 --ulysses 3 --attention ulysses --anything --weight-format fp32
# 8 ranks: 2x4, 1x8, 8x1
grid Q 8 --ring 2 --ulysses 4 --attention unified
grid Q 8 --ulysses 8 --attention ulysses --anything --weight-format fp32
grid Q 8 --ring 8 --attention ring
grid P 8 --ring 8 --attention ring-allgather --anything
grid P 8 --ring 4 --ulysses 2 --attention ulysses --anything
grid U 8 --ring 2 --ulysses 4 --attention unified-allgather --anything --weight-format fp32
grid S 8 --ring 8 --attention ring --anything --weight-format fp32  # 2 ranks without tokens
grid S 8 --ring 2 --ulysses 4 --attention unified --anything

# a strict grid on tokens that do not divide (75 over 4): refused with exit 2 and a message
# naming --anything, no output written; or run as if --anything had been given
rm -f "$tmp/out"
msg=$("$MPI_RUN" -np 4 "$CPDIT" forward --model "$tmp/Q" --component transformer \
    --inputs "$tmp/U.in" --output "$tmp/out" --ring 4 --attention ring 2>&1)
rc=$?
if [ $rc -eq 2 ] && echo "$msg" | grep -q -- "--anything" && [ ! -e "$tmp/out" ]; then
    echo "ok: U -np 4 --ring 4 (75 tokens) without --anything is refused (exit 2)"
elif [ $rc -eq 0 ] && r=$("$TOOL" compare "$tmp/out" "$tmp/U.1" --tol $TOL 2>&1); then
    echo "ok: U -np 4 --ring 4 (75 tokens) without --anything runs uneven: $r"
else
    echo "FAIL: U -np 4 --ring 4 without --anything: exit $rc: $msg"; fail=1
fi
exit $fail
