#!/bin/sh
# bf16_activations.sh — the model code with bf16 activation storage, end to end on this machine:
# the "cpu-bf16" table (kernels/cpu/backend_cpu_bf16.c) stores every activation as bf16 between
# ops, as the "cuda" table does, so a wrong element offset, stride or count anywhere in the
# model code (transformer, CP attention, VAE, pipeline) shows here without a GPU.
#
# 1. `cpdit forward --component transformer` on cpu-bf16, 1 rank, against the fp32 "cpu" table:
#    max|bf16 - fp32| / max|fp32| <= TOL_FWD, and NOT bitwise equal (bf16 storage really ran).
# 2. The same on CP grids (Ring, Ulysses, Unified, uneven --anything, data-parallel groups) on
#    cpu-bf16 against 1-rank fp32 (<= TOL_FWD) and against 1-rank cpu-bf16 (<= TOL_GRID: only
#    the attention order and the merges' bf16 rounding differ).
# 3. `cpdit forward --component vae` on cpu-bf16 against cpu (<= TOL_VAE), 1 rank and split
#    over 2 ranks by rows.
# 4. The whole pipeline (text encoders, 20 steps with true CFG, VAE) of builtin:shapes on
#    cpu-bf16 and cpu: `cpdit builtin sheet` reads at least MIN_RIGHT_BF16 of the 16 held-out
#    accuracy prompts right on cpu-bf16, and at most one fewer than on cpu.
# Model A / D are the ones of flux_forward_cp.sh. Needs no PyTorch; numpy only for the VAE part.
set -u
CPDIT=${CPDIT:-./cpdit}
top_builddir=${top_builddir:-.}
MPI_RUN=${MPI_RUN:-"$top_builddir/tests/mpi-run.sh"}
TOOL="$top_builddir/tests/flux_test_tool"
PY=${PYTHON3:-/usr/bin/python3}
TOL_FWD=${TOL_FWD:-2e-2}
TOL_GRID=${TOL_GRID:-2e-2}
TOL_VAE=${TOL_VAE:-2e-2}
MIN_RIGHT_BF16=13 # of 16: fp32 gets 14 (shapes_accuracy.sh); bf16 may lose one

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bf16_activations.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export CPDIT_CACHE="$tmp/cache"

"$CPDIT" --version 2>&1 | grep -q 'cpu-bf16' || { echo "SKIP: no cpu-bf16 table"; exit 77; }
"$MPI_RUN" -np 1 true >/dev/null 2>&1
[ $? -eq 77 ] && { echo "SKIP: no mpirun"; exit 77; }

fail=0
. "${top_srcdir:-.}/tests/flux_cp_models.sh"
make_cp_models "$tmp" || { echo "FAIL: making the test models"; exit 1; }

# ---- 1. one rank: fp32 reference, bf16 within TOL_FWD and not bitwise equal
for m in A D; do
    for be in cpu cpu-bf16; do
        "$CPDIT" forward --model "$tmp/$m" --component transformer --inputs "$tmp/$m.in" \
            --output "$tmp/$m.$be" --backend $be || { echo "FAIL: $m on 1 rank, $be"; exit 1; }
    done
    if r=$("$TOOL" compare "$tmp/$m.cpu-bf16" "$tmp/$m.cpu" --tol $TOL_FWD 2>&1); then
        echo "ok: $m 1 rank cpu-bf16 vs cpu: $r"
    else
        echo "FAIL: $m 1 rank cpu-bf16 vs cpu: $r"; fail=1
    fi
    if cmp -s "$tmp/$m.cpu-bf16" "$tmp/$m.cpu"; then
        echo "FAIL: $m: cpu-bf16 output is bitwise the fp32 one: bf16 storage did not run"; fail=1
    fi
done

# ---- 2. CP grids on cpu-bf16
grid() { # MODEL NP ARGS...
    m=$1; np=$2; shift 2
    rm -f "$tmp/out"
    if ! "$MPI_RUN" -np "$np" "$CPDIT" forward --model "$tmp/$m" --component transformer \
        --inputs "$tmp/$m.in" --output "$tmp/out" --backend cpu-bf16 "$@" >"$tmp/log" 2>&1; then
        echo "FAIL: $m -np $np $*: cpdit forward failed:"; sed 's/^/  /' "$tmp/log" | head -20
        fail=1; return
    fi
    if r=$("$TOOL" compare "$tmp/out" "$tmp/$m.cpu" --tol $TOL_FWD 2>&1); then
        echo "ok: $m -np $np $* vs fp32 1 rank: $r"
    else
        echo "FAIL: $m -np $np $* vs fp32 1 rank: $r"; fail=1
    fi
    if r=$("$TOOL" compare "$tmp/out" "$tmp/$m.cpu-bf16" --tol $TOL_GRID 2>&1); then
        echo "ok: $m -np $np $* vs bf16 1 rank: $r"
    else
        echo "FAIL: $m -np $np $* vs bf16 1 rank: $r"; fail=1
    fi
}
grid A 2 --ring 2
grid A 2 --ulysses 2 --anything
grid A 4 --ring 2 --ulysses 2 --anything
grid A 5 --ring 5 --anything
grid A 3 --ring 3 --anything --attention-backend ring-allgather
grid D 2
grid D 4 --ulysses 4
grid D 4 --ring 2 --attention-backend ulysses
grid D 8 --ring 2 --ulysses 2 --attention-backend unified-allgather

# ---- 3. the VAE decoder, 1 rank and split by rows over 2 ranks
if "$PY" -c "import numpy" 2>/dev/null; then
    "$CPDIT" builtin write "$tmp/model" >/dev/null || { echo "FAIL: builtin write"; exit 1; }
    "$PY" - "$tmp/vae.in" <<'PY' || exit 1
import json, struct, sys
import numpy as np
x = np.random.default_rng(3).standard_normal((1, 16, 5, 7)).astype('<f4').tobytes()
h = json.dumps({"latent_sample": {"dtype": "F32", "shape": [1, 16, 5, 7],
                                  "data_offsets": [0, len(x)]}}).encode()
h += b' ' * (-len(h) % 8)
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + x)
PY
    for be in cpu cpu-bf16; do
        "$CPDIT" forward --model "$tmp/model" --component vae --inputs "$tmp/vae.in" \
            --output "$tmp/vae.$be" --backend $be || { echo "FAIL: vae, $be"; fail=1; }
    done
    "$MPI_RUN" -np 2 "$CPDIT" forward --model "$tmp/model" --component vae \
        --inputs "$tmp/vae.in" --output "$tmp/vae.2" --backend cpu-bf16 ||
        { echo "FAIL: vae on 2 ranks, cpu-bf16"; fail=1; }
    for got in cpu-bf16 2; do
        if r=$("$TOOL" compare "$tmp/vae.$got" "$tmp/vae.cpu" --tol $TOL_VAE 2>&1); then
            echo "ok: vae $got vs cpu: $r"
        else
            echo "FAIL: vae $got vs cpu: $r"; fail=1
        fi
    done
    cmp -s "$tmp/vae.cpu-bf16" "$tmp/vae.cpu" &&
        { echo "FAIL: vae: cpu-bf16 output is bitwise the fp32 one"; fail=1; }
else
    echo "note: no python3 with numpy: VAE part skipped"
fi

# ---- 4. the whole pipeline: builtin:shapes on its 16 held-out accuracy prompts
MANIFEST=${top_srcdir:-.}/tests/data/shapes/accuracy.yaml
for be in cpu cpu-bf16; do
    if ! "$CPDIT" run "$MANIFEST" --output "$tmp/acc.$be" --weight-format fp32 --backend $be \
            >"$tmp/run.log" 2>&1; then
        echo "FAIL: cpdit run on $be:"; sed 's/^/  /' "$tmp/run.log" | head; fail=1; continue
    fi
    "$CPDIT" builtin sheet "$tmp/acc.$be" >"$tmp/sheet.log" 2>&1
done
right() { sed -n 's|^checked: \([0-9]*\)/16 right$|\1|p' "$1/contact-sheet.txt" 2>/dev/null; }
rc=$(right "$tmp/acc.cpu"); rb=$(right "$tmp/acc.cpu-bf16")
rc=${rc:-0}; rb=${rb:-0}
if [ "$rb" -ge "$MIN_RIGHT_BF16" ] && [ "$rb" -ge $((rc - 1)) ]; then
    echo "ok: pipeline builtin:shapes: cpu-bf16 $rb/16 right, cpu $rc/16"
else
    echo "FAIL: pipeline builtin:shapes: cpu-bf16 $rb/16 right (want >= $MIN_RIGHT_BF16 and >= cpu's $rc - 1)"
    fail=1
fi
exit $fail
