#!/bin/sh
# topology_probe.sh — `cpdit probe` on this machine: --help, bad options (exit 2, before MPI),
# an unwritable output (exit 2 on every rank, nothing measured), a quick probe on 1 and 4 ranks
# (file complete and consistent, checked by tests/topology_check.py), and 4 ranks that claim
# two hosts through CPDIT_HOSTNAME (pairs across them classified cross_node); the library
# call cpdit_probe_run with a second transport in the NCCL hook (tests/test_probe_run).
# Exit 77 (skip) without mpirun or python3.
: "${MPI_RUN:?MPI_RUN is set by make check}" "${CPDIT:?CPDIT is set by make check}"
top_srcdir=${top_srcdir:-.}
PY=${PYTHON3:-python3}
command -v "$PY" >/dev/null 2>&1 || { echo "SKIP: no python3 for the JSON checks"; exit 77; }
CHECK="$PY $top_srcdir/tests/topology_check.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

"$CPDIT" probe --help > "$tmp/help" || fail "probe --help exit $?"
grep -q "^usage: cpdit probe" "$tmp/help" && grep -q "^DESCRIPTION" "$tmp/help" && grep -q -- "--output FILE" "$tmp/help" || fail "probe --help is not the manual"
for bad in "--bogus" "--pairs 0" "--pairs x" "extra" "--output"; do
    # shellcheck disable=SC2086
    "$CPDIT" probe $bad > /dev/null 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "probe $bad: exit $rc, want 2"
    grep -q "^cpdit: probe: " "$tmp/err" || fail "probe $bad: no 'cpdit: probe:' message"
done

"$MPI_RUN" -np 2 "$CPDIT" probe --quick --output "$tmp/missing/t.json" > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 2 ] || fail "unwritable --output: exit $rc, want 2"
grep -q "missing" "$tmp/err" || fail "unwritable --output: message does not name the path"

"$MPI_RUN" -np 1 "$CPDIT" probe --quick --output "$tmp/one.json" > "$tmp/out1" 2>&1 || fail "probe on 1 rank: exit $?"
$CHECK "$tmp/one.json" --ranks 1 --hosts-of 0 --compute || fail "1-rank topology file"

"$MPI_RUN" -np 4 "$CPDIT" probe --quick --output "$tmp/four.json" > "$tmp/out4" 2>&1 || { cat "$tmp/out4"; fail "probe on 4 ranks: exit $?"; }
$CHECK "$tmp/four.json" --ranks 4 --hosts-of 0,0,0,0 --compute || fail "4-rank topology file"
grep -q "cpdit probe: 4 rank(s) on 1 host(s)" "$tmp/out4" || fail "4-rank summary line missing"

# two emulated hosts (no network between them: only the classification is checked)
"$MPI_RUN" -np 4 sh -c 'CPDIT_HOSTNAME=fake$((OMPI_COMM_WORLD_RANK / 2)) exec "$0" "$@"' \
    "$CPDIT" probe --quick --no-compute --output "$tmp/two.json" > "$tmp/out2" 2>&1 || { cat "$tmp/out2"; fail "probe with CPDIT_HOSTNAME: exit $?"; }
$CHECK "$tmp/two.json" --ranks 4 --hosts-of 0,0,1,1 || fail "CPDIT_HOSTNAME topology file"
grep -q '"name": "fake1"' "$tmp/two.json" || fail "host name from CPDIT_HOSTNAME missing"
# the library call with a second transport in the NCCL hook (tests/test_probe_run.c)
for np in 2 4; do
    "$MPI_RUN" -np $np "${top_builddir:-.}/tests/test_probe_run" || fail "test_probe_run on $np ranks"
done
[ $status -eq 0 ] && echo "ok: cpdit probe"
exit $status
