#!/bin/sh
# fuzz_build.sh — the libFuzzer targets build from their own rule, `make fuzz` (issue 28: the
# manifest target's hand-kept source list had gone stale and no longer linked), and each one
# runs its whole seed corpus once without a finding (-runs=0: the corpus only, no mutation;
# .ci/run fuzzes each for 60 s). Skips (77) where configure found no clang with libFuzzer.
top_srcdir=$(cd "${top_srcdir:-.}" && pwd)
top_builddir=$(cd "${top_builddir:-.}" && pwd)
log=$(mktemp "${TMPDIR:-/tmp}/cpdit-fuzz-build-XXXXXX") || exit 1
new=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-fuzz-new-XXXXXX") || exit 1
trap 'rm -f "$log"; rm -rf "$new"' EXIT
${MAKE:-make} -s -C "$top_builddir" fuzz > "$log" 2>&1
rc=$?
if grep -q 'configure found none' "$log"; then
    echo "no clang with libFuzzer: skip"; exit 77
fi
[ $rc -eq 0 ] || { echo "FAIL: make fuzz (exit $rc)"; tail -n 30 "$log"; exit 1; }
status=0
for t in "fuzz_manifest_libfuzzer manifest" "fuzz-safetensors-header safetensors_header"; do
    set -- $t
    # libFuzzer writes new inputs into its first folder: a scratch one, never the seeds
    "$top_builddir/tests/fuzz/$1" -runs=0 "$new" "$top_srcdir/tests/fuzz/corpus/$2" > "$log" 2>&1 ||
        { echo "FAIL: $1 on its seed corpus"; tail -n 30 "$log"; status=1; continue; }
    grep -q 'INITED\|Done' "$log" || { echo "FAIL: $1 ran nothing"; cat "$log"; status=1; continue; }
    echo "ok: $1 ($(ls "$top_srcdir/tests/fuzz/corpus/$2" | wc -l) seeds)"
done
exit $status
