#!/bin/sh
# tune_key.sh — the key of a measured winner (topology/tuned_key.h), 2 ranks, builtin:tiny
# at 64x64, 1 step: `cpdit tune MANIFEST` plans and times with the manifest's own settings
# (64 T5 tokens, 1 step, its 2 items: throughput), records them in the tuned entry
# (text_tokens, cfg, frames, threads_per_rank, backend, dtype); `cpdit plan MANIFEST` reads
# the same defaults and chooses tune's winner; `cpdit run` of that manifest reuses the winner
# ("measured by cpdit tune"), while the same manifest with 32 tokens, or with true CFG and a
# negative prompt, does not (it is predicted instead). The probe prints its per-size tables
# (size, avg and min time, algbw, busbw), one row per row of its JSON. Exit 77 (skip) without
# mpirun.
: "${CPDIT:?CPDIT is set by make check}"
: "${MPI_RUN:?MPI_RUN is set by make check}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-tunekey-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
unset CPDIT_TOPOLOGY
export CPDIT_MPI_TIMEOUT=300
cd "$tmp" || exit 1
manifest() { # manifest FILE TOKENS [EXTRA DEFAULTS]
    cat > "$1" <<YAML
model: builtin:tiny
output: {dir: out-$1}
parallel: auto
defaults: {steps: 1, width: 64, height: 64, max_sequence_length: $2$3}
seeds: [3]
prompts:
  - a red fox
  - a blue bird
YAML
}
manifest m64.yaml 64
manifest m32.yaml 32
manifest cfg64.yaml 64 ', true_cfg: 4.0, negative_prompt: ""'

"$MPI_RUN" -np 2 "$CPDIT" probe --quick --output topo.json > probe.out 2> /dev/null
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { bad "probe exit $rc"; exit 1; }
# the probe prints its per-size tables (nccl-tests style), one row per measured size
grep -q '^  class  *pair  *size_B  *avg_us  *min_us  *algbw_GB/s  *busbw_GB/s$' probe.out ||
    bad "probe: no point-to-point table header"
grep -q '^  op  *ranks class  *size_B  *avg_us  *algbw_GB/s  *busbw_GB/s$' probe.out ||
    bad "probe: no collectives table header"
if [ -n "${PYTHON3:-}" ]; then
    "$PYTHON3" - <<'PY' || bad "probe's tables do not match its JSON"
import json, re
t = json.load(open("topo.json"))["links"]
out = open("probe.out").read().splitlines()
p2p = [l for l in out if re.match(r"^  \w+ +\d+-\d+ +\d+ ", l)]
col = [l for l in out if re.match(r"^  (alltoall|allgather|sendrecv_ring) +\d+ ", l)]
assert len(p2p) == len(t["p2p"]) and len(col) == len(t["collectives"]), (len(p2p), len(col))
for l, r in zip(p2p, t["p2p"]):
    f = l.split()
    assert int(f[2]) == r["bytes"] and abs(float(f[3]) - r["time_s_avg"] * 1e6) < 1e-3 + 1e-3 * r["time_s_avg"] * 1e6, (l, r)
PY
fi
"$MPI_RUN" -np 2 "$CPDIT" tune m64.yaml --topology topo.json --rounds 1 --budget 0 --top 1 \
    > tune.out 2> tune.err || { cat tune.err; bad "tune exit $?"; exit 1; }
grep -q '^key: 64x64, 1 frame, 64 text tokens, CFG off, 2 ranks x ' tune.out ||
    bad "tune's key line: $(grep '^key' tune.out)"
grep -q '^objective: throughput (2 images, 1 steps each)' tune.out ||
    bad "tune's objective line: $(grep '^objective' tune.out)"
chosen=$(grep '^chosen: ' tune.out)
if [ -n "${PYTHON3:-}" ]; then
    "$PYTHON3" - <<'PY' || bad "tuned entry's key"
import json
t = json.load(open("topo.json"))
e = [x for x in t["tuned"] if x["model"] == "builtin:tiny"]
assert len(e) == 1, e
e = e[0]
want = {"width": 64, "height": 64, "frames": 1, "text_tokens": 64, "cfg": 0, "ranks": 2,
        "images": 2}
assert all(e[k] == v for k, v in want.items()), e
assert e["threads_per_rank"] >= 1 and e["backend"] and e["dtype"], e
print("tuned key:", {k: e[k] for k in e if k not in ("measured", "chosen")})
PY
fi
# plan of the same manifest: its defaults (64 tokens, 1 step, 2 items) and tune's winner
"$CPDIT" plan m64.yaml --topology topo.json > plan.out 2> plan.err || bad "plan exit $?"
grep -q '^request: 64x64, 1 frame, 64 text tokens, CFG off, 2 ranks x .*; 1 steps (manifest m64.yaml)' plan.out ||
    bad "plan's request line: $(grep '^request' plan.out)"
[ "$(tail -n 1 plan.out)" = "$chosen" ] || bad "plan chose '$(tail -n 1 plan.out)', tune '$chosen'"
grep -q "measured by cpdit tune" plan.err || bad "plan did not use the measurement: $(cat plan.err)"
# the default 512 tokens is another key: plan predicts
"$CPDIT" plan --model builtin:tiny --width 64 --height 64 --topology topo.json > /dev/null \
    2> plan512.err
grep -q "predicted from" plan512.err || bad "512 tokens reused the 64-token winner: $(cat plan512.err)"

run() { # run NAME MANIFEST: the grid line of `cpdit run`
    "$MPI_RUN" -np 2 "$CPDIT" run "$2" --topology topo.json > "$1.log" 2>&1 ||
        { cat "$1.log"; bad "$1: run exit $?"; }
    grep '^grid: ' "$1.log"
}
g=$(run same m64.yaml)
echo "$g" | grep -q "(measured by cpdit tune" || bad "same key not reused: $g"
echo "same key:  $g"
g=$(run tokens m32.yaml)
echo "$g" | grep -q "(predicted from" || bad "32 tokens reused the 64-token winner: $g"
echo "32 tokens: $g"
g=$(run cfg cfg64.yaml)
echo "$g" | grep -q "(predicted from" || bad "true CFG reused the CFG-off winner: $g"
echo "with CFG:  $g"
exit $fail
