#!/bin/sh
# plan_video.sh — the planner on a video model (Wan 2.1, found from _class_name):
#   `cpdit plan --frames 81` on Wan2.1-1.3B's config at 480x832 on 8 ranks of one 8-GPU node:
#     32760 video tokens (21 x 30 x 52), 512 text tokens on every rank, 30 local
#     cross-attention calls named, 12 heads over Ulysses 8 = ulysses+anything, --json with
#     "frames": 81, one video -> every rank on it (dp 1);
#   bad input, exit 2: frames not 4k + 1, FLUX with --frames;
#   `cpdit probe --model WAN --frames 5` (2 ranks) times the Wan shapes: the cross-attention
#     call (rank's queries x all text keys, all heads) is among the attention shapes, the text
#     projections are replicated (linear FLOPs at cp 1 = 2 x cp 2 - replicated, to the
#     file's 6 digits), and `cpdit plan` on that file prices the local grid from those times
#     (compute = linear + blocks x (self + cross attention), to the 6 digits printed).
: "${CPDIT:?CPDIT is set by make check}"
: "${MPI_RUN:?MPI_RUN is set by make check}"
src=$(cd "${top_srcdir:-.}/tests/data/topology" && pwd) || exit 1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
wan="$src/wan21-1.3b-transformer"

"$CPDIT" plan --topology "$src/two_nodes_8gpu.json" --model "$wan" --width 832 --height 480 \
    --frames 81 --ranks 8 > "$tmp/out" 2> "$tmp/err" || bad "plan exit $?"
grep -q "512 text (on every rank) + 32760 video tokens (832x480, 81 frames)" "$tmp/out" ||
    bad "token line: $(sed -n 2p "$tmp/out")"
grep -q "^attention: 30 local calls per forward (32760 queries x 512 keys" "$tmp/out" ||
    bad "no cross-attention line"
grep -Eq '^ +[0-9]+ +1 +1 +8 ulysses\+anything ' "$tmp/out" || bad "ulysses 8 is not +anything"
grep -Eq '^ +[0-9]+ +1 +8 +1 ring ' "$tmp/out" || bad "ring 8 needs no +anything"
tail -n 1 "$tmp/out" | grep -q "^chosen: dp 1 " || bad "chosen: $(tail -n 1 "$tmp/out")"
"$CPDIT" plan --topology "$src/two_nodes_8gpu.json" --model "$wan" --width 832 --height 480 \
    --frames 81 --ranks 8 --json > "$tmp/json" || bad "--json exit $?"
grep -q '"family": "wan", "frames": 81, "txt_tokens": 512, "img_tokens": 32760' "$tmp/json" ||
    bad "json head: $(head -c 300 "$tmp/json")"

expect2() { # expect2 PATTERN ARGS... : exit 2 and PATTERN on stderr
    pat=$1; shift
    "$CPDIT" plan "$@" > /dev/null 2> "$tmp/e"; rc=$?
    [ $rc -eq 2 ] || bad "exit $rc (want 2) for: $*"
    grep -q "$pat" "$tmp/e" || bad "message for $*: $(cat "$tmp/e")"
}
expect2 "4k + 1 frames" --topology "$src/cpu_4ranks.json" --model "$wan" --width 832 \
    --height 480 --frames 80
expect2 "FLUX makes images" --topology "$src/cpu_4ranks.json" --model builtin:tiny \
    --width 512 --height 512 --frames 5

# a tiny Wan: the probe times its own shapes (no weights needed)
mkdir -p "$tmp/wan-tiny" && cat > "$tmp/wan-tiny/config.json" <<'EOF'
{"_class_name": "WanTransformer3DModel", "num_layers": 2, "num_attention_heads": 4,
 "attention_head_dim": 16, "ffn_dim": 128, "text_dim": 32, "in_channels": 4,
 "out_channels": 4, "freq_dim": 16, "patch_size": [1, 2, 2], "image_dim": null}
EOF
CPDIT_MPI_TIMEOUT=120 "$MPI_RUN" -np 2 "$CPDIT" probe --quick --quiet --model "$tmp/wan-tiny" \
    --width 64 --height 64 --frames 5 --max-sequence-length 16 --output "$tmp/topo.json" \
    > "$tmp/probe.out" 2>&1
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { cat "$tmp/probe.out"; bad "probe exit $rc"; exit 1; }
"$CPDIT" plan --topology "$tmp/topo.json" --model "$tmp/wan-tiny" --width 64 --height 64 \
    --frames 5 --max-sequence-length 16 --json > "$tmp/tiny.json" 2> "$tmp/e" ||
    bad "plan on the probe's file: $(cat "$tmp/e")"
if [ -n "${PYTHON3:-}" ]; then
    "$PYTHON3" - "$tmp/topo.json" "$tmp/tiny.json" <<'PY' || bad "probe shapes / plan check"
import json, sys
t = json.load(open(sys.argv[1]))
e = t["compute"]["shapes"][0]
# 5 frames -> 2 latent frames x (64/16) x (64/16) = 32 video tokens, 16 text tokens
assert (e["frames"], e["img_tokens"], e["txt_tokens"]) == (5, 32, 16), e
lin = {l["cp"]: l for l in e["linear"]}
assert (lin[2]["txt_tokens"], lin[2]["img_tokens"]) == (0, 16), lin[2]
E, L, T, TD = 64, 2, 16, 32
rep = 2 * (T * (TD * E + E * E) + L * T * 2 * E * E)   # text embedder + cross K/V
# the file keeps 6 significant digits
assert abs(lin[1]["flops"] - (2 * lin[2]["flops"] - rep)) <= 1e-5 * lin[1]["flops"], lin
att = {(a["sq"], a["skv"], a["heads"]): a["time_s"] for a in e["attention"]}
for need in [(32, 32, 4), (32, 16, 4), (16, 16, 4), (32, 32, 2), (16, 32, 4)]:
    assert need in att, (need, sorted(att))
p = json.load(open(sys.argv[2]))
loc = [c for c in p["candidates"] if c["dp"] == 2][0]
want = lin[1]["time_s"] + L * (att[(32, 32, 4)] + att[(32, 16, 4)])
assert abs(loc["compute_s"] - want) <= 1e-5 * want, (loc["compute_s"], want)
PY
fi
exit $fail
