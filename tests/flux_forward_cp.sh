#!/bin/sh
# flux_forward_cp.sh — `cpdit forward --component transformer` under mpirun on CP grids of 2..8
# ranks (Ring, Ulysses, Unified, the uneven --anything modes, data-parallel groups) against the
# same command on 1 rank: max|N ranks - 1 rank| / max|1 rank| <= 1e-5.
#
# Model A: 3 heads x 16, 2 double + 2 single blocks, BF16, batch 1, 7 text + 15 image tokens
#   (22 tokens: text and image split separately; 8 ranks leave one rank without text; 3 heads
#   leave Ulysses ranks without heads).
# Model D: 4 heads x 64, 1 + 1 blocks, batch 3, 6 text + 26 image tokens (32 in total: neither
#   part divides 4 or 8, but cpdit's layout evens the totals so the strict modes run), and
#   data-parallel groups (batch 3 over 2, 3 or 4 groups: one group without an item).
# Needs no PyTorch. Exit 77 without mpirun or without `cpdit forward` in this build.
set -u
CPDIT=${CPDIT:-./cpdit}
top_builddir=${top_builddir:-.}
MPI_RUN=${MPI_RUN:-"$top_builddir/tests/mpi-run.sh"}
TOOL="$top_builddir/tests/flux_test_tool"
TOL=1e-5

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flux_forward_cp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

if "$CPDIT" forward --model "$tmp/none" --component transformer --inputs x --output y 2>&1 |
    grep -q "does not include"; then
    echo "SKIP: this cpdit has no 'forward' subcommand"
    exit 77
fi
"$MPI_RUN" -np 1 true >/dev/null 2>&1
[ $? -eq 77 ] && { echo "SKIP: no mpirun"; exit 77; }

fail=0
. "${top_srcdir:-.}/tests/flux_cp_models.sh"
make_cp_models "$tmp" || { echo "FAIL: making the test models"; exit 1; }

for m in A D; do
    "$CPDIT" forward --model "$tmp/$m" --component transformer --inputs "$tmp/$m.in" \
        --output "$tmp/$m.1" || { echo "FAIL: $m on 1 rank"; exit 1; }
done

grid() { # MODEL NP ARGS...: run on NP ranks, compare with 1 rank
    m=$1; np=$2; shift 2
    rm -f "$tmp/out"
    if ! "$MPI_RUN" -np "$np" "$CPDIT" forward --model "$tmp/$m" --component transformer \
        --inputs "$tmp/$m.in" --output "$tmp/out" "$@" >"$tmp/log" 2>&1; then
        echo "FAIL: $m -np $np $*: cpdit forward failed:"; sed 's/^/  /' "$tmp/log" | head -20
        fail=1; return
    fi
    if r=$("$TOOL" compare "$tmp/out" "$tmp/$m.1" --tol $TOL 2>&1); then
        echo "ok: $m -np $np $*: $r"
    else
        echo "FAIL: $m -np $np $*: $r"; fail=1
    fi
}

grid A 2 --ring 2
grid A 2 --ulysses 2 --anything
grid A 3 --ulysses 3 --anything
grid A 4 --ring 2 --ulysses 2 --anything
grid A 5 --ring 5 --anything
grid A 6 --ring 3 --ulysses 2 --anything
grid A 7 --ring 7 --anything --attention-backend ring-allgather
grid A 8 --ring 8 --anything
grid A 8 --ulysses 8 --anything
grid D 2
grid D 4
grid D 4 --ulysses 4
grid D 4 --ring 2 --attention-backend ulysses
grid D 6 --ring 2
grid D 8 --ring 2 --ulysses 2 --attention-backend unified-allgather
grid D 8 --ring 4 --ulysses 2

# strict mode refuses what it cannot split, with a message naming --anything, on every rank
rm -f "$tmp/out"
msg=$("$MPI_RUN" -np 3 "$CPDIT" forward --model "$tmp/A" --component transformer \
    --inputs "$tmp/A.in" --output "$tmp/out" --ring 3 2>&1)
rc=$?
if [ $rc -ne 0 ] && echo "$msg" | grep -q -- "pass --anything" && [ ! -e "$tmp/out" ]; then
    echo "ok: A -np 3 --ring 3 (22 tokens) without --anything is refused (exit $rc)"
else
    echo "FAIL: A -np 3 --ring 3 without --anything: exit $rc: $msg"; fail=1
fi
exit $fail
