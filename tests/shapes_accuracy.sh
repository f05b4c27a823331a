#!/bin/sh
# shapes_accuracy.sh — builtin:shapes draws what the prompt says: the 16 prompts of
# tests/data/shapes/accuracy.yaml (colour/shape/background combinations held out of training)
# on 1 rank and on 4 ranks (data-parallel 2 x Ulysses 2); `cpdit builtin sheet` classifies each
# image's shape region and background by their majority palette colour, and at least
# MIN_RIGHT of 16 must be right on both; every 4-rank image is within 1/255 of the 1-rank one.
# Exit 1 when too few are right (listed in XFAIL_TESTS while the shipped model is below
# MIN_RIGHT: see tests/reference/train-builtin/README.md); exit 99 (a hard error that XFAIL does not
# hide) when cpdit fails or the 4-rank images differ from the 1-rank ones.
CPDIT=${CPDIT:-./cpdit}
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
CMP=${top_builddir:-.}/tests/png_compare
MANIFEST=${top_srcdir:-.}/tests/data/shapes/accuracy.yaml
MIN_RIGHT=14
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export CPDIT_CACHE="$work/cache"
fail=0
hard=0
run() { # NAME NP ARGS...
    name=$1; np=$2; shift 2
    if ! $MPI_RUN -np "$np" "$CPDIT" run "$MANIFEST" --output "$work/$name" --weight-format fp32 "$@" \
            >"$work/$name.log" 2>&1; then
        echo "ERROR: $name: cpdit run failed"; cat "$work/$name.log"; exit 99
    fi
    "$CPDIT" builtin sheet "$work/$name" >"$work/$name.sheet" 2>&1
    cat "$work/$name/contact-sheet.txt"
    right=$(sed -n 's|^checked: \([0-9]*\)/16 right$|\1|p' "$work/$name/contact-sheet.txt")
    if [ -z "$right" ] || [ "$right" -lt "$MIN_RIGHT" ]; then
        echo "FAIL: $name: ${right:-?}/16 right (want >= $MIN_RIGHT)"; fail=1
    else
        echo "ok: $name: $right/16 right"
    fi
}
run one 1
run dp2u2 4 --ulysses 2
worst=0
for f in "$work"/one/[0-9][0-9].png; do
    b=$(basename "$f")
    if ! "$CMP" "$f" "$work/dp2u2/$b" 1 >"$work/cmp" 2>&1; then
        echo "ERROR: $b: 4 ranks vs 1 rank: $(cat "$work/cmp")"; hard=1
    fi
done
[ $hard -eq 0 ] && echo "ok: 16 images of 4 ranks within 1/255 of 1 rank"
[ $hard -eq 0 ] || exit 99
exit $fail
