#!/bin/sh
# vae_bench.sh — FLUX.1's VAE decode: cpdit split over 1, 2, 4 ranks (one core each: one BLAS
# thread per rank) and PyTorch on one thread, side by side. A benchmark, not a test: prints
# tables, gates nothing.
#
#   tests/bench/vae_bench.sh [SIZES] [RANKS]      defaults: "256 512" and "1 2 4"
#
# Environment: CPDIT (./cpdit), MPI_RUN (tests/mpi-run.sh), PYTHON3 (/usr/bin/python3, needs
# torch). The load average is printed before each run: on a shared machine the absolute times
# move with it; compare ratios measured close together.
CPDIT=${CPDIT:-./cpdit}
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
PY=${PYTHON3:-/usr/bin/python3}
SIZES=${1:-"256 512"}
RANKS=${2:-"1 2 4"}
here=$(dirname "$0")
list=$(echo $SIZES | tr ' ' ',')
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -m)"
for n in $RANKS; do
    echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    OPENBLAS_NUM_THREADS=1 $MPI_RUN -np "$n" "$CPDIT" bench vae --sizes "$list" || exit 1
done
if "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    OMP_NUM_THREADS=1 "$PY" "$here/vae_torch_bench.py" 1 $SIZES || exit 1
else
    echo "# PyTorch: $PY cannot import torch; skipped"
fi
