#!/bin/sh
# comm_gpu.sh — the GPU communicators (tests/test_comm_gpu) on 1, 2 and 4 ranks: host-staged
# MPI always, NCCL where every rank has a GPU of its own. Exit 77 (skip) without a GPU or mpirun.
: "${MPI_RUN:?MPI_RUN is set by make check}"
top_builddir=${top_builddir:-.}
status=0
for np in 1 2 4; do
    "$MPI_RUN" -np "$np" "$top_builddir/tests/test_comm_gpu"
    rc=$?
    [ $rc -eq 77 ] && exit 77
    if [ $rc -ne 0 ]; then echo "FAIL: test_comm_gpu on $np ranks (exit $rc)"; status=1
    else echo "ok: test_comm_gpu on $np ranks"; fi
done
exit $status
