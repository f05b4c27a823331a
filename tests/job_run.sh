#!/bin/sh
# job_run.sh — the batch runner under MPI with a fake render hook (tests/test_job_run_tool):
#  1. 4 ranks as dp 2 x (ring 1 x ulysses 2): exactly the expected files, fake pixels, one
#     index line each; then 1 rank: byte-identical PNGs.
#  2. a rerun of a finished folder does nothing and leaves the index as it was.
#  3. items failing on a non-leader rank: recorded as failed, the rest done, exit 4; a rerun
#     retries exactly those and the index ends with one line per item.
#  4. a stop request seen by one non-leader rank mid-run (it raises SIGUSR1 itself): its group
#     stops cleanly after 2 items, the other stops too (the stop is relayed to every rank; how
#     far it got depends on timing), exit 3, nothing partial; a rerun completes the set.
# Exit 77 (skip) without mpirun.
: "${MPI_RUN:?MPI_RUN is set by make check}"
top_builddir=${top_builddir:-.}
tool="$top_builddir/tests/test_job_run_tool"
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-jobrun-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

cat > "$work/m.yaml" <<'EOF'
# 5 prompts (3 inline, 2 from more.txt) x 2 sizes x 2 seeds, except one prompt with 1 seed
model: builtin:tiny
output: {dir: out}
defaults: {steps: 4}
seeds: [1, 2]
sizes: [[32, 32], [48, 16]]
prompts:
  - a red fox
  - a lazy dog
  - {prompt: a blue bird, seed: 9}
prompts_file: more.txt
EOF
printf 'a green frog\n# a comment\n\na sleepy dog\n' > "$work/more.txt"
items=18

# run NAME NP EXPECTED_EXIT [tool options...]: run the tool, keep its output in $work/NAME.log
run() {
    name=$1; np=$2; want=$3; shift 3
    "$MPI_RUN" -np "$np" "$tool" run "$work/m.yaml" "$@" > "$work/$name.log" 2>&1
    rc=$?
    [ $rc -eq 77 ] && exit 77
    if [ $rc -ne "$want" ]; then
        fail "$name: exit $rc, want $want"; cat "$work/$name.log"
    fi
}
verify() {
    name=$1; shift
    "$tool" verify "$work/m.yaml" "$@" > "$work/$name.verify" 2>&1 || {
        fail "$name: verify"; cat "$work/$name.verify"; }
}
expect_line() { # expect_line NAME PATTERN FILE
    grep -q -- "$2" "$3" || { fail "$1: no '$2' in $3"; cat "$3"; }
}

# Reruns use 2 ranks as dp 2: the assignment depends on dp only, and MPI starts faster.
# 1. dp 2 x CP 2, then 1 rank: the same bytes
run grid4 4 0 --output "$work/out4" --dp 2 --ulysses 2
verify grid4 --output "$work/out4"
expect_line grid4 "done=$items failed=0 missing=0" "$work/grid4.verify"
expect_line grid4 'dp 2 x ring 1 x ulysses 2 (4 ranks)' "$work/grid4.log"
expect_line grid4 '^ total' "$work/grid4.log"
run grid1 1 0 --output "$work/out1"
verify grid1 --output "$work/out1"
n=0
for f in "$work"/out1/*.png; do
    b=$(basename "$f")
    cmp -s "$f" "$work/out4/$b" || fail "out4/$b differs from the 1-rank image"
    n=$((n + 1))
done
[ $n -eq $items ] || fail "1-rank run wrote $n PNGs, want $items"

# 2. nothing left to do: same index, nothing rewritten
cp "$work/out4/index.jsonl" "$work/index.before"
run again 2 0 --output "$work/out4" --dp 2
expect_line again "$items items, $items already done, 0 to do" "$work/again.log"
cmp -s "$work/out4/index.jsonl" "$work/index.before" || fail "again: the index changed"

# 3. failures on the last cp rank of each group (prompts with "dog": 8 items)
run fail 4 4 --output "$work/outf" --dp 2 --ulysses 2 --fail dog
verify fail --output "$work/outf" --expect-failed dog
expect_line fail "done=10 failed=8" "$work/fail.verify"
expect_line fail 'refusing prompt' "$work/outf/index.jsonl"
expect_line fail '8 items failed' "$work/fail.log"
run refail 2 0 --output "$work/outf" --dp 2
verify refail --output "$work/outf"
expect_line refail "done=$items failed=0" "$work/refail.verify"

# 4. world rank 3 (cp rank 1 of group 1) raises SIGUSR1 after its 2nd item
run stop 4 3 --output "$work/outs" --dp 2 --ulysses 2 --raise-after 2 --raise-rank 3
expect_line stop 'stopped by' "$work/stop.log"
expect_line stop 'exit code 3' "$work/stop.log"
verify stop --output "$work/outs" --partial
# group 1 stops after 2 of its 9; the stop is relayed to group 0, which stops at its next
# poll: after 0 to 9 of its items, as far as its fast fake renders had got
done_n=$(sed -n 's/^done=\([0-9]*\) failed=0 missing=\([0-9]*\).*/\1 \2/p' "$work/stop.verify")
set -- $done_n
if [ $# -ne 2 ] || [ "$1" -lt 2 ] || [ "$1" -gt 11 ] || [ $(($1 + $2)) -ne $items ]; then
    fail "stop: expected 2 to 11 done, none failed, the rest missing: $(cat "$work/stop.verify")"
fi
run restart 2 0 --output "$work/outs" --dp 2
verify restart --output "$work/outs"
expect_line restart "done=$items failed=0 missing=0" "$work/restart.verify"

[ $status -eq 0 ] && echo "ok: job_run.sh"
exit $status
