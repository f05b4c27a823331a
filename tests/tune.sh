#!/bin/sh
# tune.sh — `cpdit tune` on builtin:tiny under 2 ranks (small image, 1 timed round): the
# quick probe writes the topology file, report.json has the candidates with predicted and
# measured times and chosen = the measured fastest, the topology file records it ("tuned",
# replaced on a rerun, not appended), `cpdit plan` then chooses the measured winner; bad input
# (missing folder, unknown built-in, width 100, a format-2 topology file) fails on every rank
# with exit 2, and a failure on one rank only (the start-up probe, injected on rank 1 with
# CPDIT_PROBE_FAIL_RANK) ends every rank with exit 1 instead of hanging.
: "${CPDIT:?CPDIT is set by make check}"
: "${MPI_RUN:?MPI_RUN is set by make check}"
srcdir_abs=$(cd "${top_srcdir:-.}" && pwd) || exit 1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
cd "$tmp" || exit 1
args="--model builtin:tiny --width 128 --height 128 --max-sequence-length 64 --rounds 1 --budget 0 --top 2"

"$MPI_RUN" -np 2 "$CPDIT" tune $args > out1 2> err1
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { cat err1; bad "tune exit $rc"; exit 1; }
[ -f cpdit-topology.json ] || bad "no cpdit-topology.json written"
[ -f cpdit-report/report.md ] && [ -f cpdit-report/report.json ] || bad "no report"
chosen=$(grep '^chosen: ' out1)
[ -n "$chosen" ] || bad "no chosen line"
if grep -q "No charts" cpdit-report/report.md; then
    echo "built without PLplot: no charts expected"
else
    for f in bandwidth.png predicted_vs_measured.png; do
        [ -s "cpdit-report/$f" ] || bad "chart $f missing"
    done
fi

check_json() { # the report's structure, chosen = measured best, the topology file's entry
    "$PYTHON3" - "$@" <<'PY'
import json, sys
r = json.load(open("cpdit-report/report.json"))
t = json.load(open(sys.argv[1]))
c = r["candidates"]
assert len(c) >= 2, c
for x in c:
    for k in ("dp", "ring", "ulysses", "variant", "predicted_s", "measured_s"):
        assert k in x, (k, x)
    assert x["dp"] * x["ring"] * x["ulysses"] == 2, x
    assert x["predicted_s"] > 0
ok = [x for x in c if x["measured_s"] is not None]
best = min(ok, key=lambda x: x["objective"]["seconds"])
ch = r["chosen"]
same = lambda a, b: all(a[k] == b[k] for k in ("dp", "ring", "ulysses", "variant"))
if not same(ch, best): # only a tie may give the choice to another (simpler) grid
    cx = [x for x in ok if same(x, ch)][0]
    assert cx["objective"]["tied"] and best["objective"]["tied"], (ch, best)
    assert cx["dp"] >= best["dp"], (cx, best)
for x in ok:
    st = x["stats"]
    assert st["n"] == len(x["samples"]) >= 1 and st["min_s"] <= st["median_s"] <= st["max_s"], x
    assert abs(st["median_s"] - x["measured_s"]) < 1e-12, x
assert r["objective"] == "latency" and r["images"] == 1, (r["objective"], r["images"])
assert any(x["dp"] == 2 for x in c), "all-data-parallel baseline missing"
assert any(x["dp"] == 1 and x["ring"] == 1 and x["ulysses"] == 2 for x in c), "pure Ulysses baseline missing"
tu = [e for e in t.get("tuned", []) if e["model"] == "builtin:tiny" and e["width"] == 128 and e["ranks"] == 2]
assert len(tu) == 1, t.get("tuned")
assert all(tu[0]["chosen"][k] == ch[k] for k in ("dp", "ring", "ulysses", "variant"))
assert t["format"] == 1 and "links" in t and "compute" in t
assert [e for e in t["compute"].get("shapes", []) if e["model"] == "builtin:tiny" and e["width"] == 128], "no compute.shapes for the model"
print("report ok: chosen", ch, "measured", best["measured_s"])
PY
}
if [ -n "${PYTHON3:-}" ]; then
    check_json cpdit-topology.json || bad "report.json / topology check"
fi

# again with the file given: the entry is replaced, plan picks the measured winner
cp cpdit-topology.json topo.json
"$MPI_RUN" -np 2 "$CPDIT" tune $args --topology topo.json --report rep2 > out2 2> err2 ||
    { cat err2; bad "second tune exit $?"; }
if [ -n "${PYTHON3:-}" ]; then
    "$PYTHON3" -c 'import json,sys; t=json.load(open(sys.argv[1])); n=[e["model"] for e in t["tuned"]].count("builtin:tiny"); assert n == 1, n; assert len(t["compute"]["shapes"]) == 1' topo.json ||
        bad "tuned entry or compute.shapes duplicated"
fi
chosen2=$(grep '^chosen: ' out2)
plan=$("$CPDIT" plan --topology topo.json --model builtin:tiny --width 128 --height 128 \
    --max-sequence-length 64 2> /dev/null | tail -n 1)
[ "$plan" = "$chosen2" ] || bad "plan chose '$plan', tune measured '$chosen2'"

# bad input: every rank stops with exit 2 (the test harness's time limit catches a hang)
CPDIT_MPI_TIMEOUT=120 "$MPI_RUN" -np 2 "$CPDIT" tune --model "$tmp/nothing" --width 128 \
    --height 128 > /dev/null 2> err3
rc=$?
[ $rc -eq 2 ] || bad "missing model: exit $rc (want 2)"
CPDIT_MPI_TIMEOUT=120 "$MPI_RUN" -np 2 "$CPDIT" tune --model builtin:tiny --width 100 \
    --height 128 > /dev/null 2> err4
rc=$?
[ $rc -eq 2 ] || bad "width 100: exit $rc (want 2)"
grep -q "multiple of 16" err4 || bad "width message: $(cat err4)"
CPDIT_MPI_TIMEOUT=120 "$MPI_RUN" -np 2 "$CPDIT" tune --model builtin:nope --width 128 \
    --height 128 > /dev/null 2> err5
rc=$?
[ $rc -eq 2 ] || bad "unknown built-in model: exit $rc (want 2)"
grep -q "nope" err5 || bad "unknown model message: $(cat err5)"
CPDIT_MPI_TIMEOUT=120 "$MPI_RUN" -np 2 "$CPDIT" tune $args \
    --topology "$srcdir_abs/tests/data/topology/format2.json" > /dev/null 2> err6
rc=$?
[ $rc -eq 2 ] || bad "format 2 topology: exit $rc (want 2)"
grep -q "format 2" err6 || bad "format 2 message: $(cat err6)"
# one rank fails (the quick probe at start, no file here): every rank stops, exit 1, no hang
mkdir nofile && cd nofile || exit 1
CPDIT_PROBE_FAIL_RANK=1 CPDIT_MPI_TIMEOUT=120 "$MPI_RUN" -np 2 "$CPDIT" tune $args \
    > /dev/null 2> err7
rc=$?
[ $rc -eq 1 ] || bad "probe failing on rank 1: exit $rc (want 1; 124 = hung)"
grep -q "rank 1: failure injected" err7 || bad "rank 1 failure message: $(cat err7)"
cd .. || exit 1
"$CPDIT" tune --help | grep -q -- "--top K" || bad "tune --help"
exit $fail
