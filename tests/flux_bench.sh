#!/bin/sh
# flux_bench.sh — the FLUX transformer benchmark (not part of `make check`): a CPU-sized model
# (hidden 512 = 8 heads x 64, 2 double + 4 single blocks, BF16 weights, guidance) on
# 128 text + 32x32 image tokens, timed on several grids against the 2-thread SGEMM rate, plus
# `cpdit forward` as a whole process (weights loaded and converted, inputs read, output
# written) next to the PyTorch reference forward of the same model when PyTorch is there.
#
#   sh tests/flux_bench.sh            (from the build folder; CPDIT may point at cpdit)
# Results go into PERFORMANCE.md by hand.
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
CPDIT=${CPDIT:-$top_builddir/cpdit}
MPI_RUN=${MPI_RUN:-"$top_builddir/tests/mpi-run.sh"}
TOOL="$top_builddir/tests/flux_test_tool"
BENCH="$top_builddir/tests/flux_bench"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/flux_bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

"$TOOL" make-model "$tmp/m" --heads 8 --head-dim 64 --axes 8,28,28 --layers 2 --single 4 \
    --in 64 --joint 4096 --pooled 768 --guidance 1 --dtype BF16 --seed 7 || exit 1
"$TOOL" make-inputs "$tmp/in" --model "$tmp/m" --batch 1 --txt 128 --img-h 32 --img-w 32 || exit 1

echo "# FLUX transformer forward, hidden 512 (8 x 64), 2 double + 4 single blocks, BF16 weights"
OPENBLAS_NUM_THREADS=2 "$MPI_RUN" -np 1 "$BENCH" --model "$tmp/m" --header
OPENBLAS_NUM_THREADS=1 "$MPI_RUN" -np 2 "$BENCH" --model "$tmp/m" --ring 2
OPENBLAS_NUM_THREADS=1 "$MPI_RUN" -np 2 "$BENCH" --model "$tmp/m" --ulysses 2
OPENBLAS_NUM_THREADS=1 "$MPI_RUN" -np 4 "$BENCH" --model "$tmp/m" --ring 2 --ulysses 2

echo "# whole process: cpdit forward (1 rank, 2 threads, fp32 weight path) vs the PyTorch reference"
t0=$(date +%s.%N)
OPENBLAS_NUM_THREADS=2 "$CPDIT" forward --model "$tmp/m" --component transformer \
    --inputs "$tmp/in" --output "$tmp/out" --verbose --weight-format fp32
t1=$(date +%s.%N)
echo "cpdit forward: $(echo "$t1 - $t0" | bc) s wall"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    t0=$(date +%s.%N)
    /usr/bin/python3 "$top_srcdir/tests/reference/flux_reference.py" "$tmp/m" "$tmp/in" "$tmp/ref"
    t1=$(date +%s.%N)
    echo "PyTorch reference (import, load, forward): $(echo "$t1 - $t0" | bc) s wall"
    "$TOOL" compare "$tmp/out" "$tmp/ref" --tol 1e-4
fi
