#!/bin/sh
# vae_parallel_bf16.sh — the VAE decode split by rows over 2, 3 and 4 ranks with bf16
# activation storage (the "cpu-bf16" table: halo rows and the RGB gather move bf16, the ring
# attention merges bf16 partial outputs) vs one rank on "cpu-bf16" and on "cpu" fp32, checked
# by tests/test_vae_bf16 --parallel on rank 0 (tolerances stated there): a small
# decoder with uneven bands and an empty rank (3 latent rows on 4 ranks), and FLUX.1's config.
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
T=${top_builddir:-.}/tests/test_vae_bf16
fail=0
run() { # np kind h w
    $MPI_RUN -np "$1" "$T" --parallel "$2" "$3" "$4" >/dev/null 2>"$work/log"
    rc=$?
    [ $rc -eq 77 ] && exit 77
    [ $rc -eq 0 ] || { echo "FAIL: -np $*"; cat "$work/log"; fail=1; return; }
    grep "relative" "$work/log"
}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
run 2 small 5 4
run 3 small 7 3
run 4 small 3 5
run 2 flux 3 2
exit $fail
