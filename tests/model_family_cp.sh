#!/bin/sh
# model_family_cp.sh — the family interface's sharded forward (tests/test_model_family_cp.c)
# on 1, 2 and 3 ranks for FLUX (builtin:shapes, 128x128: 64 image + 16 text tokens) and Wan
# (a tiny random WanTransformer3DModel, 12 heads x 16, 8 channels (tokens of 8 x 1x2x2: the
# reorder of proj_out's order is no square transpose), 5 frames at 48x32: 2 x 2 x 3 = 12 video
# tokens, 7 text tokens on every rank): every grid (ring N, ulysses N) equals the 1-rank
# forward within 1e-5. Then `cpdit tune` on the Wan folder (2 ranks, after a quick probe):
# its timed forwards go through the same interface (topology/tune_run.c): a chosen grid.
: "${MPI_RUN:?MPI_RUN is set by make check}"
top_builddir=${top_builddir:-.}
T="$top_builddir/tests/test_model_family_cp"
TOOL="$top_builddir/tests/wan_test_tool"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export CPDIT_CACHE="$work/cache"
"$TOOL" make-model "$work/wan" --heads 12 --head-dim 16 --layers 1 --in 8 --text 16 \
    --ffn 64 --dtype F32 --seed 3 >/dev/null || { echo "FAIL: wan make-model"; exit 1; }
status=0
for np in 1 2 3; do
    if "$MPI_RUN" -np $np "$T" builtin:shapes 128 128 0 16 "$work/wan" 48 32 5 7 >"$work/$np.log" 2>&1; then
        grep '^ok' "$work/$np.log"
    else
        echo "FAIL: $np ranks"; cat "$work/$np.log"; status=1
    fi
done
C=$top_builddir/cpdit
"$MPI_RUN" -np 2 "$C" probe --quick --output "$work/topo.json" >"$work/probe.log" 2>&1 ||
    { echo "FAIL: probe --quick"; cat "$work/probe.log"; exit 1; }
if "$MPI_RUN" -np 2 "$C" tune --model "$work/wan" --width 48 --height 32 --frames 5 \
    --max-sequence-length 7 --topology "$work/topo.json" --report "$work/report" \
    >"$work/tune.log" 2>&1 && grep -q '^chosen: dp' "$work/tune.log"; then
    echo "ok: tune on a Wan folder: $(grep '^chosen:' "$work/tune.log")"
else
    echo "FAIL: tune on a Wan folder"; cat "$work/tune.log"; status=1
fi
exit $status
