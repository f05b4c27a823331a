#!/bin/sh
# flux_dev_bench.sh — the FLUX transformer at FLUX.1-dev width (hidden 3072 = 24 heads x 128,
# joint 4096, pooled 768, guidance) with a few blocks (default 1 double + 2 single) of random
# BF16 weights written by tests/flux_test_tool, timed by tests/flux_bench (see its header for
# the columns): 1 rank bf16 path and fp32 path, 2 Ulysses ranks sharing the weights and with a
# copy each. GFLOP/s against the same run's SGEMM and bf16 GEMM rates, PSS per rank, weight
# bytes read after the first step. A benchmark: run by hand (not in make check), e.g.
#   tests/flux_dev_bench.sh [DOUBLE SINGLE IMG_SIDE_TOKENS THREADS]
# Needs ~3 GB of disk in $TMPDIR and ~6 GB of memory.
set -u
top_builddir=${top_builddir:-.}
MPI_RUN=${MPI_RUN:-"$top_builddir/tests/mpi-run.sh"}
TOOL="$top_builddir/tests/flux_test_tool"
BENCH="$top_builddir/tests/flux_bench"
L=${1:-1} S=${2:-2} SIDE=${3:-16} P=${4:-2}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/flux_dev_bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
"$TOOL" make-model "$tmp/m" --heads 24 --head-dim 128 --axes 16,56,56 --layers "$L" \
    --single "$S" --in 64 --joint 4096 --pooled 768 --guidance 1 --dtype BF16 --seed 11 || exit 1
echo "# FLUX.1-dev width: hidden 3072 (24 x 128), $L double + $S single blocks, BF16 weights;"
echo "# 128 text + ${SIDE}x${SIDE} image tokens; $P threads per rank (1 rank), $((P / 2 > 0 ? P / 2 : 1)) per rank (2 ranks)"
OPENBLAS_NUM_THREADS=$P "$MPI_RUN" -np 1 "$BENCH" --model "$tmp/m" --txt 128 --img-h "$SIDE" \
    --img-w "$SIDE" --sgemm-threads "$P" --header
OPENBLAS_NUM_THREADS=$P "$MPI_RUN" -np 1 "$BENCH" --model "$tmp/m" --txt 128 --img-h "$SIDE" \
    --img-w "$SIDE" --sgemm-threads "$P" --weight-format fp32
P2=$((P / 2 > 0 ? P / 2 : 1))
OPENBLAS_NUM_THREADS=$P2 "$MPI_RUN" -np 2 "$BENCH" --model "$tmp/m" --txt 128 --img-h "$SIDE" \
    --img-w "$SIDE" --sgemm-threads "$P" --ulysses 2
OPENBLAS_NUM_THREADS=$P2 "$MPI_RUN" -np 2 "$BENCH" --model "$tmp/m" --txt 128 --img-h "$SIDE" \
    --img-w "$SIDE" --sgemm-threads "$P" --ulysses 2 --no-weight-sharing
