#!/bin/sh
# unipc_reference.sh — runs tests/reference/unipc_reference.py (numpy) now and checks the C
# schedules and updates against its fresh output (tests/test_unipc_schedule FILE), and that the
# shipped tests/data/unipc_expected.txt is what the script writes. Skips (77) without numpy;
# tests/test_unipc_schedule checks the shipped data either way.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
PY=${PYTHON3:-/usr/bin/python3}
if ! "$PY" -c "import numpy" 2>/dev/null; then
    echo "SKIP: no numpy for $PY"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" "$top_srcdir/tests/reference/unipc_reference.py" >"$tmp/expected.txt" || {
    echo "FAIL: unipc_reference.py"; exit 1; }
fail=0
# the header line names the numpy version; the data lines must be the shipped ones
grep -v '^#' "$tmp/expected.txt" >"$tmp/fresh"
grep -v '^#' "$top_srcdir/tests/data/unipc_expected.txt" >"$tmp/shipped"
cmp -s "$tmp/fresh" "$tmp/shipped" || {
    echo "FAIL: tests/data/unipc_expected.txt differs from what unipc_reference.py writes now"
    fail=1; }
"$top_builddir/tests/test_unipc_schedule" "$tmp/expected.txt" || fail=1
[ $fail = 0 ] && echo "ok: UniPC / Euler against a fresh numpy reference"
exit $fail
