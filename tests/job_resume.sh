#!/bin/sh
# job_resume.sh — nothing lost, nothing twice (tests/test_job_run_tool, a slow fake hook):
#  1. kill-and-resume: a run on 2 ranks (dp 2) is killed with SIGKILL (every rank at once) at
#     three points (after 2, 3 and 3 more index lines), a torn index line and a stale
#     temporary file are planted, and a last run completes: exactly one complete PNG with the
#     right pixels and exactly one index line per item, no temporary files, nothing else.
#  2. SIGUSR1 to every rank (Slurm's warning signal): exit 3, the summary says so, every PNG
#     present is complete and indexed, some items are left; a rerun completes the set.
#     (A signal seen by one rank only is tested in job_run.sh.)
# Exit 77 (skip) without mpirun.
: "${MPI_RUN:?MPI_RUN is set by make check}"
top_builddir=${top_builddir:-.}
tool="$top_builddir/tests/test_job_run_tool"
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-resume-XXXXXX") || exit 1
bg=
cleanup() { # a run still in the background (the test failed midway): stop its ranks
    if [ -n "$bg" ]; then
        for f in "$work"/pids/rank.*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
        kill -9 "$bg" 2>/dev/null
    fi
    rm -rf "$work"
}
trap cleanup EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

cat > "$work/m.yaml" <<'EOF'
# 5 prompts x 2 sizes x 2 seeds = 20 items
model: builtin:tiny
output: {dir: out}
seeds: [1, 2]
sizes: [[64, 64], [32, 48]]
prompts: [a red fox, a lazy dog, a blue bird, a green frog, a sleepy cat]
EOF
items=20
out="$work/out"

lines() { if [ -f "$out/index.jsonl" ]; then wc -l < "$out/index.jsonl"; else echo 0; fi; }

# start NAME SLEEP_MS: a 2-rank run in the background, its pids in $work/pids
start() {
    rm -rf "$work/pids"; mkdir -p "$work/pids"
    "$MPI_RUN" -np 2 "$tool" run "$work/m.yaml" --output "$out" --dp 2 --sleep-ms "$2" \
        --pid-dir "$work/pids" > "$work/$1.log" 2>&1 &
    bg=$!
}
# wait_lines N: until the index has N lines or the run ended (10 s at most)
wait_lines() {
    i=0
    while [ "$(lines)" -lt "$1" ] && kill -0 "$bg" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.05; i=$((i + 1))
    done
}
# signal_ranks SIG [RANK]: send SIG to every rank (or one) of the background run
signal_ranks() {
    i=0
    while [ "$(ls "$work/pids" | wc -l)" -lt 2 ] && kill -0 "$bg" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.05; i=$((i + 1))
    done
    for f in "$work"/pids/rank.${2:-*}; do [ -f "$f" ] && kill "-$1" "$(cat "$f")" 2>/dev/null; done
}
finish() { wait "$bg"; rc=$?; bg=; return $rc; }
verify() {
    "$tool" verify "$work/m.yaml" --output "$out" "$@" > "$work/verify.out" 2>&1 || {
        fail "verify $*"; cat "$work/verify.out"; }
}

# 1. SIGKILL at three points (each run resumes the previous one)
for more in 2 3 3; do
    target=$(($(lines) + more))
    start kill$target 100
    wait_lines $target
    sleep 0.03
    signal_ranks KILL
    finish
    [ $rc -eq 77 ] && exit 77
    echo "killed after >= $target lines: $(lines) lines, $(ls "$out" | grep -c '\.png$') PNGs"
    if [ $more -eq 3 ] && [ ! -f "$work/planted" ]; then
        printf '{"index": 3, "prompt": "a torn li' >> "$out/index.jsonl"
        echo partial > "$out/.00004-1-a-lazy-dog.png.tmp.AbCdEf"
        touch "$work/planted"
    fi
done
"$MPI_RUN" -np 2 "$tool" run "$work/m.yaml" --output "$out" --dp 2 > "$work/final.log" 2>&1 ||
    { fail "final run"; cat "$work/final.log"; }
verify
grep -q "done=$items failed=0 missing=0" "$work/verify.out" || fail "after kills: $(cat "$work/verify.out")"
[ "$(lines)" -eq $items ] || fail "index has $(lines) lines, want $items"

# 2. SIGUSR1 to every rank, then a full run
rm -rf "$out"
start usr1 120
wait_lines 3
signal_ranks USR1
finish
[ $rc -eq 3 ] || { fail "SIGUSR1: exit $rc, want 3"; cat "$work/usr1.log"; }
grep -q 'stopped by SIGUSR1' "$work/usr1.log" || { fail "SIGUSR1: no summary"; cat "$work/usr1.log"; }
grep -q '^ total' "$work/usr1.log" || fail "SIGUSR1: no summary table"
verify --partial
missing=$(sed -n 's/.*missing=\([0-9]*\).*/\1/p' "$work/verify.out")
[ "${missing:-0}" -gt 0 ] || fail "SIGUSR1: nothing left to do ($(cat "$work/verify.out"))"

"$MPI_RUN" -np 2 "$tool" run "$work/m.yaml" --output "$out" --dp 2 > "$work/last.log" 2>&1 ||
    { fail "last run"; cat "$work/last.log"; }
verify
grep -q "done=$items failed=0 missing=0" "$work/verify.out" || fail "after stops: $(cat "$work/verify.out")"

[ $status -eq 0 ] && echo "ok: job_resume.sh"
exit $status
