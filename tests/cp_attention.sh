#!/bin/sh
# cp_attention.sh — context-parallel attention against single-rank attention
# (tests/test_cp_attention): every variant on every grid of 8 ranks (1x1 .. 8x1, 1x8, 2x4,
# 4x2, with dp 8/4/2/1), of 6 ranks (odd degrees: 3x2, 2x3, 3x1, 1x3, 6x1, 1x6) and of 1 rank.
# Exit 77 (skip) when there is no mpirun.
: "${MPI_RUN:?MPI_RUN is set by make check}"
top_builddir=${top_builddir:-.}
status=0
for np in 8 6 1; do
    "$MPI_RUN" -np "$np" "$top_builddir/tests/test_cp_attention"
    rc=$?
    if [ $rc -eq 77 ]; then exit 77; fi
    if [ $rc -ne 0 ]; then
        echo "FAIL: test_cp_attention on $np ranks (exit $rc)"; status=1
    else
        echo "ok: test_cp_attention on $np ranks"
    fi
done
exit $status
