#!/bin/sh
# topology_probe.sh — `cpdit probe` on this machine: --help, bad options (exit 2, before MPI),
# an unwritable output (exit 2 on every rank, nothing measured), a quick probe on 1 and 4 ranks
# (file complete and consistent, checked by tests/topology_check.py), and 4 ranks that claim
# two hosts through CPDIT_HOSTNAME (pairs across them classified cross_node); the library
# call cpdit_probe_run with a second transport in the NCCL hook (tests/test_probe_run); with
# --model/--width/--height, times at the model's own shapes for every CP degree (exactly the
# linear-layer sets and attention calls the grids of 2 ranks run), and exit 2 for a bad model
# or size on every rank.
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
for bad in "--bogus" "--pairs 0" "--pairs x" "extra" "--output" "--model builtin:tiny" \
    "--width 64" "--model builtin:tiny --width 64 --height 64 --no-compute"; do
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
# compute at the shapes of builtin:tiny at 64x64 (512 text + 16 image tokens, 6 heads of 16)
"$MPI_RUN" -np 2 "$CPDIT" probe --quick --model builtin:tiny --width 64 --height 64 \
    --output "$tmp/shapes.json" > "$tmp/outs" 2>&1 || { cat "$tmp/outs"; fail "probe --model: exit $?"; }
grep -q "builtin:tiny at 64x64: one forward's linear layers + element-wise work per rank: cp 1 " "$tmp/outs" ||
    fail "probe --model: no summary line"
"$PY" - "$tmp/shapes.json" <<'EOF2' || fail "compute.shapes"
import json, sys
d = json.load(open(sys.argv[1]))
sh = d["compute"]["shapes"]
assert len(sh) == 1, sh
e = sh[0]
assert (e["model"], e["width"], e["height"], e["txt_tokens"], e["img_tokens"], e["ranks"]) == \
    ("builtin:tiny", 64, 64, 512, 16, 2), e
# cp 1: all 528 tokens; cp 2: rank 0 holds 256 text + 8 image tokens
lin = {(x["cp"], x["txt_tokens"], x["img_tokens"]) for x in e["linear"]}
assert lin == {(1, 512, 16), (2, 256, 8)}, lin
att = {(x["sq"], x["skv"], x["heads"], x["head_dim"]) for x in e["attention"]}
# local; Ulysses 2 (3 heads each); ring 2: all-gather (264 x 528) and one block (264 x 264)
assert att == {(528, 528, 6, 16), (528, 528, 3, 16), (264, 528, 6, 16), (264, 264, 6, 16)}, att
for x in e["linear"] + e["attention"]:
    assert x["time_s"] > 0 and x["flops"] > 0, x
for x in e["linear"]:
    assert x["gemm_s"] > 0 and x["elementwise_s"] > 0, x
    assert abs(x["gemm_s"] + x["elementwise_s"] - x["time_s"]) <= 1e-5 * x["time_s"], x
assert e["sync_s"] >= 0 and e["sync_chunk_s"] > 0, e
l1 = [x for x in e["linear"] if x["cp"] == 1][0]
# 2 double + 2 single blocks of hidden 96, MLP 384, and the embedders, over 528 tokens
E, F = 96, 384
macs = 528 * (2 * (4 * E * E + 2 * E * F) + 2 * (3 * E * E + E * F + (E + F) * E)) \
    + 16 * (64 * E + E * 64) + 512 * 64 * E
assert abs(l1["flops"] / (2 * macs) - 1) < 1e-5, (l1["flops"], 2 * macs)  # 6 digits in the file
print("shapes ok")
EOF2
for bad in "builtin:nope --width 64 --height 64" "builtin:tiny --width 100 --height 64"; do
    # shellcheck disable=SC2086
    CPDIT_MPI_TIMEOUT=120 "$MPI_RUN" -np 2 "$CPDIT" probe --quick --output "$tmp/x.json" \
        --model $bad > /dev/null 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "probe --model $bad: exit $rc, want 2"
done
grep -q "multiple of 16" "$tmp/err" || fail "width 100: $(cat "$tmp/err")"
# the library call with a second transport in the NCCL hook (tests/test_probe_run.c)
for np in 2 4; do
    "$MPI_RUN" -np $np "${top_builddir:-.}/tests/test_probe_run" || fail "test_probe_run on $np ranks"
done
[ $status -eq 0 ] && echo "ok: cpdit probe"
exit $status
