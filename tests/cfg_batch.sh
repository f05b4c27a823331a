#!/bin/sh
# cfg_batch.sh — CFG-parallel inside a batch (job_runner_hooks.render_pair): a manifest of 8
# builtin:shapes items with true CFG (4 prompts x 2 seeds; true_cfg 4 against "") plus one
# item without CFG, on 4 ranks as dp 4 = 2 CFG pairs, gives PNGs within 1/255 of the 1-rank
# run (sequential CFG), every group of the 4 renders 4 items (the summary's per-group rows,
# partners marked), the index has one line per item, and a second run finds nothing to do.
# Stop: on 2 ranks (one pair), SIGUSR1 to rank 0 ALONE while it writes its first PNG (the
# test hold of jobs/job_run.h) stops both groups before the next item (they agree over the
# pair): exit 3, one PNG, one index line; the rerun renders exactly the rest.
CPDIT=${CPDIT:-./cpdit}
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
CMP=${top_builddir:-.}/tests/png_compare
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail=0
cat >"$work/cfg.yaml" <<EOF
model: builtin:shapes
defaults: {steps: 8, width: 128, height: 128, max_sequence_length: 32, true_cfg: 4,
           negative_prompt: ""}
seeds: [1, 2]
prompts:
  - a large red circle in the center on a blue background
  - a small yellow triangle in the top left corner on a black background
  - a green diamond on an orange background
  - an orange background with a large purple triangle in the center
  - {prompt: "a big blue circle at the top right, yellow background", true_cfg: 1, seed: 5}
EOF
"$CPDIT" run "$work/cfg.yaml" --output "$work/seq" >"$work/seq.log" 2>&1 ||
    { echo "FAIL: 1 rank"; cat "$work/seq.log"; exit 1; }
$MPI_RUN -np 4 "$CPDIT" run "$work/cfg.yaml" --dp 4 --output "$work/par" >"$work/par.log" 2>&1 ||
    { echo "FAIL: dp 4"; cat "$work/par.log"; exit 1; }
n=0
for f in "$work"/seq/*.png; do
    n=$((n + 1))
    "$CMP" "$f" "$work/par/$(basename "$f")" 1 >/dev/null ||
        { echo "FAIL: $(basename "$f") differs by more than 1/255"; fail=1; }
done
[ $n = 9 ] || { echo "FAIL: $n PNGs from the 1-rank run, want 9"; fail=1; }
lines=$(wc -l <"$work/par/index.jsonl")
[ "$lines" = 9 ] || { echo "FAIL: $lines index lines, want 9"; fail=1; }
# every group busy: groups 0-3 each rendered 4 or 5 items (pair 0 has 5: 0 2 4 6 8), the
# partners marked; the total counts each item once
for g in 0 1 2 3; do
    grep -Eq "^ +$g +$g +[45] +[45] +0 +0 +[0-9.]+" "$work/par.log" ||
        { echo "FAIL: group $g's summary row"; fail=1; }
done
[ "$(grep -c 'CFG partner' "$work/par.log")" = 2 ] || { echo "FAIL: partner rows"; fail=1; }
grep -Eq "^ +total +4 +9 +9 +0 +0" "$work/par.log" || { echo "FAIL: total row"; fail=1; }
[ $fail = 0 ] || cat "$work/par.log"
# resume: nothing left
$MPI_RUN -np 4 "$CPDIT" run "$work/cfg.yaml" --dp 4 --output "$work/par" >"$work/again.log" 2>&1 &&
    grep -q "9 already done, 0 to do" "$work/again.log" ||
    { echo "FAIL: the second run"; cat "$work/again.log"; fail=1; }
# stop
out="$work/stop"
: >"$work/hold"
$MPI_RUN -np 2 env CPDIT_TEST_HOLD="write:$work/hold" "$CPDIT" run "$work/cfg.yaml" --dp 2 \
    --output "$out" >"$work/stop.log" 2>&1 &
run_pid=$!
p0=
i=0
while [ $i -lt 1200 ] && [ -z "$p0" ] && kill -0 $run_pid 2>/dev/null; do
    p0=$(sed -n 's/.*test hold at write: rank 0 pid \([0-9]*\) .*/\1/p' "$work/stop.log" | head -n 1)
    [ -n "$p0" ] || sleep 0.1
    i=$((i + 1))
done
if [ -n "$p0" ]; then
    kill -USR1 "$p0"
    rm -f "$work/hold"
    wait $run_pid
    rc=$?
    npng=$(ls "$out" | grep -c '\.png$')
    [ $rc = 3 ] && [ "$npng" = 1 ] && [ "$(wc -l <"$out/index.jsonl")" = 1 ] ||
        { echo "FAIL: stop: exit $rc, $npng PNGs"; cat "$work/stop.log"; fail=1; }
    $MPI_RUN -np 2 "$CPDIT" run "$work/cfg.yaml" --dp 2 --output "$out" >"$work/rerun.log" 2>&1 ||
        { echo "FAIL: rerun after the stop"; cat "$work/rerun.log"; fail=1; }
    u=$(sed 's/.*"file":"\([^"]*\)".*/\1/' "$out/index.jsonl" | sort -u | wc -l)
    [ "$(ls "$out" | grep -c '\.png$')" = 9 ] && [ "$(wc -l <"$out/index.jsonl")" = 9 ] &&
        [ "$u" = 9 ] || { echo "FAIL: after the rerun: $u distinct of $(wc -l <"$out/index.jsonl") lines"; fail=1; }
    for f in "$work"/seq/*.png; do
        "$CMP" "$f" "$out/$(basename "$f")" 1 >/dev/null ||
            { echo "FAIL: stop + rerun: $(basename "$f") differs"; fail=1; }
    done
else
    echo "FAIL: stop: rank 0 did not reach the hold point"; cat "$work/stop.log"; fail=1
    kill $run_pid 2>/dev/null
fi
[ $fail = 0 ] && echo "cfg_batch: OK ($n PNGs within 1/255 of sequential CFG)"
exit $fail
