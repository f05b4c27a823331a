#!/bin/sh
# status_exit.sh — `cpdit status` and `cpdit run MANIFEST --status` exit with the documented
# codes (cpdit --help): 0 when every item is done, 3 while items are left (a PNG removed),
# 4 when an item failed (its PNG removed and a "failed" index line); and every subcommand's
# --help lists the exit codes 0-4, `cpdit help --help` exits 0. builtin:tiny, 2 images at
# 64x64, 1 step, 1 rank. Exit 77 (skip) without mpirun.
: "${CPDIT:?CPDIT is set by make check}"
: "${MPI_RUN:?MPI_RUN is set by make check}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-status-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
cd "$tmp" || exit 1
cat > m.yaml <<'YAML'
model: builtin:tiny
output: {dir: out}
defaults: {steps: 1, width: 64, height: 64}
seeds: [3]
prompts:
  - a red fox
  - a blue bird
YAML
"$MPI_RUN" -np 1 "$CPDIT" run m.yaml > run.log 2>&1
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { cat run.log; bad "run exit $rc"; exit 1; }
st() { # st WANT: both status forms exit WANT
    "$CPDIT" status out > s1.out 2>&1; a=$?
    "$CPDIT" run m.yaml --status > s2.out 2>&1; b=$?
    [ $a -eq "$1" ] && [ $b -eq "$1" ] || { cat s1.out; bad "status exit $a / run --status $b, want $1"; }
}
st 0
rm out/00001-3-a-blue-bird.png
st 3
grep -q '^total: 2 items, 1 done, 0 failed, 1 left' s1.out || bad "status line: $(cat s1.out)"
printf '{"index":1,"prompt":"a blue bird","seed":3,"file":"00001-3-a-blue-bird.png","status":"failed","error":"injected"}\n' >> out/index.jsonl
st 4
grep -q '^total: 2 items, 1 done, 1 failed, 0 left' s1.out || bad "status line: $(cat s1.out)"
for sub in run submit status probe plan tune forward tokenize bench builtin version help; do
    "$CPDIT" "$sub" --help > h.out 2>&1 || bad "$sub --help exit $?"
    for code in 0 1 2 3 4; do
        grep -q "^  $code  " h.out || bad "$sub --help: no exit code $code"
    done
done
"$CPDIT" help --help > /dev/null 2>&1 || bad "cpdit help --help exit $?"
exit $fail
