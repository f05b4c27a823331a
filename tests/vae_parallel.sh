#!/bin/sh
# vae_parallel.sh — the VAE decode split by rows over 2, 3, 4 and 8 ranks equals the one-rank
# decode (max |diff| <= 1e-5 · max |single|, checked by tests/test_vae_parallel on rank 0), on
# the built-in VAE and on FLUX.1's decoder config at small latent sizes:
#   uneven bands (5 rows on 2, 7 on 4), latent height below 2 x ranks (one-row bands) and
#   below the rank count (empty ranks: 3 rows on 4, 6 rows on 8).
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
T=${top_builddir:-.}/tests/test_vae_parallel
fail=0
run() { # np config h w [B]
    $MPI_RUN -np "$@" >/dev/null 2>"$work/log" ||
        { echo "FAIL: -np $*"; cat "$work/log"; fail=1; return; }
    grep "relative" "$work/log"
}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
run 2 "$T" builtin 5 3 2
run 3 "$T" builtin 4 5
run 4 "$T" builtin 7 2
run 8 "$T" builtin 6 3
run 2 "$T" flux 3 2
run 3 "$T" flux 5 3
run 4 "$T" flux 3 4
run 8 "$T" flux 9 2
exit $fail
