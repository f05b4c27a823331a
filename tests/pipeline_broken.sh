#!/bin/sh
# pipeline_broken.sh — a runtime failure on one rank inside a collective stage ends the job
# instead of hanging, and the library does not abort by itself: CPDIT_TEST_FAIL_FORWARD=1 makes
# CP rank 1's first forward fail (lib/pipeline/pipeline_sample.c). The pipeline returns
# CPDIT_ERR_BROKEN (its peer is inside the forward's collectives) and bin/ ends the job
# (cli_end_job_if_broken -> MPI_Abort):
#   A  2 ranks, ulysses 2: non-zero exit within the time limit (CPDIT_MPI_TIMEOUT=60: a hang
#      fails with 124), "(aborting the job)" and the reason on stderr, no PNG;
#   B  the same failure on 1 rank (CP rank 0 of a 1-rank grid): nothing is broken, so the
#      item fails normally: exit 1, the reason, no "aborting";
#   C  without the variable, the 2-rank run succeeds (the hook is off).
CPDIT=${CPDIT:-./cpdit}
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export CPDIT_CACHE="$work/cache"
args="--model builtin:shapes --prompt 'a red circle' --steps 2"
fail=0
run() { # NAME NP FAIL-RANK ARGS...
    name=$1; np=$2; fr=$3; shift 3
    eval "CPDIT_MPI_TIMEOUT=60 CPDIT_TEST_FAIL_FORWARD=$fr $MPI_RUN -np $np \"$CPDIT\" run $args \
        --output \"$work/$name\" $*" >"$work/$name.log" 2>&1
}
t0=$(date +%s)
run A 2 1 --ulysses 2 --ring 1; rc=$?
t=$(( $(date +%s) - t0 ))
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "FAIL: A: exit $rc after ${t}s (want a non-zero exit, not the time limit)"; fail=1
fi
grep -q 'forward failed (CPDIT_TEST_FAIL_FORWARD).*(aborting the job)' "$work/A.log" ||
    { echo "FAIL: A: no '(aborting the job)' line with the reason"; cat "$work/A.log"; fail=1; }
[ -z "$(ls "$work/A"/*.png 2>/dev/null)" ] || { echo "FAIL: A: a PNG was written"; fail=1; }
[ $fail -eq 0 ] && echo "ok: A: one rank's failed forward ended the 2-rank job (exit $rc, ${t}s)"
run B 1 0; rc=$?
if [ $rc -ne 1 ] || ! grep -q 'forward failed (CPDIT_TEST_FAIL_FORWARD)' "$work/B.log" ||
    grep -q 'aborting the job' "$work/B.log"; then
    echo "FAIL: B: exit $rc (want 1), the reason and no abort"; cat "$work/B.log"; fail=1
else
    echo "ok: B: on 1 rank the item fails normally (exit 1)"
fi
run C 2 "" --ulysses 2 --ring 1; rc=$?
if [ $rc -ne 0 ] || [ -z "$(ls "$work/C"/*.png 2>/dev/null)" ]; then
    echo "FAIL: C: exit $rc without the hook"; cat "$work/C.log"; fail=1
else
    echo "ok: C: without the hook the 2-rank run writes its PNG"
fi
exit $fail
