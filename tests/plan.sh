#!/bin/sh
# plan.sh — `cpdit plan` on the synthetic topologies: --help, the ranked table ending with
# the chosen line, --json, and exit 2 with a clear message for bad input (unknown model,
# sizes not multiples of 16, a topology file of another format, no topology).
: "${CPDIT:?CPDIT is set by make check}"
src=${top_srcdir:-.}/tests/data/topology
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

"$CPDIT" plan --help > "$tmp/help" || bad "--help exit $?"
grep -q -- "--topology FILE" "$tmp/help" || bad "--help text"

"$CPDIT" plan --topology "$src/two_nodes_8gpu.json" --model "$src/flux-dev-transformer" \
    --width 2048 --height 2048 > "$tmp/out" 2> "$tmp/err" || bad "plan exit $?"
last=$(tail -n 1 "$tmp/out")
[ "$last" = "chosen: dp 1 ring 2 ulysses 8 unified" ] || bad "last line: $last"
grep -q "^why: predicted from" "$tmp/err" || bad "no reason on stderr"
[ "$(grep -c '^ *[0-9]' "$tmp/out")" -eq 25 ] || bad "expected 25 ranked rows"

"$CPDIT" plan --topology "$src/two_nodes_8gpu.json" --model builtin:tiny --width 512 \
    --height 512 --ranks 8 --json > "$tmp/json" || bad "--json exit $?"
grep -q '"chosen": {"dp": 8, "ring": 1, "ulysses": 1, "variant": "local"}' "$tmp/json" ||
    bad "json chosen: $(cat "$tmp/json" | tail -n 2)"
if [ -n "${PYTHON3:-}" ]; then
    "$PYTHON3" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["candidates"]) == 16, len(d["candidates"])' "$tmp/json" || bad "json does not parse"
fi

expect2() { # expect2 PATTERN ARGS... : exit 2 and PATTERN on stderr
    pat=$1; shift
    "$CPDIT" plan "$@" > /dev/null 2> "$tmp/e"; rc=$?
    [ $rc -eq 2 ] || bad "exit $rc (want 2) for: $*"
    grep -q "$pat" "$tmp/e" || bad "message for $*: $(cat "$tmp/e")"
}
expect2 "format 2" --topology "$src/format2.json" --model builtin:tiny --width 512 --height 512
expect2 "multiple of 16" --topology "$src/cpu_4ranks.json" --model builtin:tiny --width 500 --height 512
expect2 "nope" --topology "$src/cpu_4ranks.json" --model builtin:nope --width 512 --height 512
expect2 "topology FILE" --model builtin:tiny --width 512 --height 512
expect2 "cannot open" --topology "$tmp/missing.json" --model builtin:tiny --width 512 --height 512
expect2 "unknown" --bogus
exit $fail
