#!/bin/sh
# flux_weights_shared.sh — the transformer's weights in node-shared memory (one copy per node,
# MPI-3 shared window, lib/weights/weight_shared_mpi.c): `cpdit forward` on 2 and 4 Ulysses
# ranks sharing the weights, and on 2 ranks each with its own copy (--no-weight-sharing),
# against 1 rank: max|N ranks - 1 rank| / max|1 rank| <= 1e-5, for the bf16 path (default) and
# the fp32 path; --verbose must say the weights are in node-shared memory.
# Model: 4 heads x 64, 1 double + 1 single block, BF16, batch 2, 6 text + 26 image tokens.
# Exit 77 without mpirun.
set -u
CPDIT=${CPDIT:-./cpdit}
top_builddir=${top_builddir:-.}
MPI_RUN=${MPI_RUN:-"$top_builddir/tests/mpi-run.sh"}
TOOL="$top_builddir/tests/flux_test_tool"
TOL=1e-5

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flux_weights_shared.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
"$MPI_RUN" -np 1 true >/dev/null 2>&1
[ $? -eq 77 ] && { echo "SKIP: no mpirun"; exit 77; }

"$TOOL" make-model "$tmp/D" --heads 4 --head-dim 64 --axes 8,28,28 --layers 1 --single 1 \
    --in 32 --joint 48 --pooled 16 --guidance 0 --dtype BF16 --seed 4 &&
    "$TOOL" make-inputs "$tmp/D.in" --model "$tmp/D" --batch 2 --txt 6 --img-h 2 --img-w 13 \
        --seed 4 || { echo "FAIL: making the test model"; exit 1; }
fail=0
fwd() { # NP OUT ARGS...
    np=$1 out=$2; shift 2
    "$MPI_RUN" -np "$np" "$CPDIT" forward --model "$tmp/D" --component transformer \
        --inputs "$tmp/D.in" --output "$tmp/$out" --verbose "$@" >"$tmp/$out.log" 2>&1 ||
        { echo "FAIL: $out: cpdit forward failed:"; cat "$tmp/$out.log"; fail=1; return 1; }
}
for fmt in native fp32; do
    fwd 1 "one.$fmt" --weight-format $fmt --no-weight-sharing || continue
    for spec in "u2:2:--ulysses 2" "u4:4:--ulysses 4" "u2own:2:--ulysses 2 --no-weight-sharing"; do
        name=${spec%%:*} rest=${spec#*:}; np=${rest%%:*} gargs=${rest#*:}
        # shellcheck disable=SC2086
        fwd "$np" "$name.$fmt" --weight-format $fmt $gargs || continue
        if out=$("$TOOL" compare "$tmp/$name.$fmt" "$tmp/one.$fmt" --tol $TOL 2>&1); then
            echo "ok: $name ($np ranks, $fmt weights) vs 1 rank: $out"
        else
            echo "FAIL: $name ($np ranks, $fmt weights) vs 1 rank: $out"; fail=1
        fi
        if [ "$name" = u2own ]; then
            grep -q "node-shared" "$tmp/$name.$fmt.log" &&
                { echo "FAIL: $name: --no-weight-sharing still shares"; fail=1; }
        else
            grep -q "in node-shared memory" "$tmp/$name.$fmt.log" ||
                { echo "FAIL: $name: weights not in node-shared memory:"; cat "$tmp/$name.$fmt.log"; fail=1; }
        fi
    done
done
grep "weights" "$tmp/u4.native.log"
exit $fail
