#!/bin/sh
# index_parts.sh — one writer per index file per node (jobs/job_index.h, NODE PARTS): with
# dp 2 and the second group's leader on "another node" (CPDIT_NODE_NAME), group 0 appends to
# index.jsonl and group 1 to index.node-nodeB.jsonl; rank 0's progress and `cpdit status`
# count both; the next run's resume merges the part into index.jsonl and removes it: one
# line per item, no duplicates. Uses tests/test_job_run_tool (a fake render hook). Exit 77 without mpirun.
: "${MPI_RUN:?MPI_RUN is set by make check}"
: "${CPDIT:?CPDIT is set by make check}"
top_builddir=${top_builddir:-.}
tool="$top_builddir/tests/test_job_run_tool"
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-parts-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }
cat > "$work/m.yaml" <<'YAML'
model: builtin:tiny
output: {dir: out}
seeds: [1, 2, 3]
sizes: [[32, 32]]
prompts: [a red fox, a lazy dog]
YAML
out="$work/out"
"$MPI_RUN" -np 1 env CPDIT_NODE_NAME=nodeA "$tool" run "$work/m.yaml" --output "$out" --dp 2 : \
    -np 1 env CPDIT_NODE_NAME=nodeB "$tool" run "$work/m.yaml" --output "$out" --dp 2 \
    > "$work/run1.log" 2>&1
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { fail "first run: exit $rc"; cat "$work/run1.log"; }
[ -f "$out/index.node-nodeB.jsonl" ] || fail "no part file index.node-nodeB.jsonl: $(ls -a "$out")"
a=$(wc -l < "$out/index.jsonl"); b=$(wc -l < "$out/index.node-nodeB.jsonl")
[ "$a" -eq 3 ] && [ "$b" -eq 3 ] || fail "index.jsonl $a lines, part $b lines; expected 3 and 3"
grep -q '"node":' "$out/index.jsonl" && fail "node recorded outside Slurm"
# rank 0's progress counts the other node's part too: the last line says all 6
tail_progress=$(grep 'progress: ' "$work/run1.log" | tail -n 1)
echo "$tail_progress" | grep -q 'progress: 6/6 items' ||
    { fail "progress counts only rank 0's node: '$tail_progress'"; cat "$work/run1.log"; }
# group 1 renders the odd items
odd=$(sed 's/^{"index":\([0-9]*\),.*/\1/' "$out/index.node-nodeB.jsonl" | awk '$1 % 2 == 1' | wc -l)
[ "$odd" -eq 3 ] || fail "the part file holds items of group 0"
"$CPDIT" status "$out" > "$work/status1" 2>&1 || fail "cpdit status"
grep -q '^total: 6 items, 6 done, 0 failed, 0 left' "$work/status1" || { fail "status"; cat "$work/status1"; }
grep -q '^index: 6 ok lines, 0 failed lines, 0 duplicates, in 2 files' "$work/status1" ||
    { fail "status: index lines"; cat "$work/status1"; }
# the next run (everything done) merges the part into the index
"$MPI_RUN" -np 2 "$tool" run "$work/m.yaml" --output "$out" --dp 2 > "$work/run2.log" 2>&1 ||
    { fail "second run"; cat "$work/run2.log"; }
[ -e "$out/index.node-nodeB.jsonl" ] && fail "the part file was not merged"
n=$(wc -l < "$out/index.jsonl")
u=$(sed 's/.*"file":"\([^"]*\)".*/\1/' "$out/index.jsonl" | sort -u | wc -l)
[ "$n" -eq 6 ] && [ "$u" -eq 6 ] || fail "after the merge: $n lines, $u files; expected 6 and 6"
"$tool" verify "$work/m.yaml" --output "$out" > "$work/verify" 2>&1 || { fail "verify"; cat "$work/verify"; }
exit $status
