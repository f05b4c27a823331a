#!/bin/sh
# grid.sh — the process grid (tests/test_grid) and the MPI communicator (tests/test_comm)
# under several rank counts: 6 ranks give the odd grids (3x2, 2x3, 3x1, ...), 8 the powers of
# two with dp > 1; the communicator runs on 1 rank (everything to itself) and 5 (uneven).
# Exit 77 (skip) when there is no mpirun.
: "${MPI_RUN:?MPI_RUN is set by make check}"
top_builddir=${top_builddir:-.}
status=0
run() {
    np=$1; prog=$2
    "$MPI_RUN" -np "$np" "$top_builddir/tests/$prog"
    rc=$?
    if [ $rc -eq 77 ]; then exit 77; fi
    if [ $rc -ne 0 ]; then
        echo "FAIL: $prog on $np ranks (exit $rc)"; status=1
    else
        echo "ok: $prog on $np ranks"
    fi
}
run 6 test_grid
run 8 test_grid
run 1 test_comm
run 5 test_comm
exit $status
