#!/bin/sh
# run_auto_grid.sh — where the grid of `cpdit run` comes from when none is given
# (`parallel: auto`, `cpdit run --model` without --ring/--ulysses; topology/grid_choice.h),
# 2 ranks, builtin:tiny at 64x64, 1 step:
#  1. no --topology and no $CPDIT_TOPOLOGY: a quick probe runs at job start; the grid line
#     says so, for one image and for a manifest (summary and every index line's grid.why);
#     it is kept in the output folder: a rerun there uses it (no probe), a rerun with other
#     threads per rank (another layout) probes again;
#  2. a topology file whose "tuned" section measured a grid for this step's whole key
#     (model, size, frames, text tokens, CFG, ranks, threads, backend, dtype): that grid is
#     used (not the prediction), given by --topology and by $CPDIT_TOPOLOGY; an entry with
#     other text tokens is not reused;
#  3. the probe failing on rank 1 only: no hang, every rank data-parallel, the reason printed,
#     the images written;
#  4. a topology file of another format: exit 2 on every rank, a clear message.
# Exit 77 (skip) without mpirun.
: "${MPI_RUN:?MPI_RUN is set by make check}"
: "${CPDIT:?CPDIT is set by make check}"
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-autogrid-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }
unset CPDIT_TOPOLOGY
export CPDIT_MPI_TIMEOUT=300
item="--model builtin:tiny --prompt fox --width 64 --height 64 --steps 1"
cat > "$work/m.yaml" <<'YAML'
model: builtin:tiny
output: {dir: out}
parallel: auto
defaults: {steps: 1, width: 64, height: 64}
seeds: [3]
prompts:
  - a red fox
  - a blue bird
YAML

# run NAME WANT_EXIT ARGS...: cpdit under 2 ranks, output in $work/NAME.log
run() {
    name=$1; want=$2; shift 2
    "$MPI_RUN" -np 2 "$CPDIT" run "$@" > "$work/$name.log" 2>&1
    rc=$?
    [ $rc -eq 77 ] && exit 77
    [ $rc -eq "$want" ] || { fail "$name: exit $rc, want $want"; cat "$work/$name.log"; }
}
expect() { # expect NAME PATTERN: PATTERN in NAME.log
    grep -q -- "$2" "$work/$1.log" || { fail "$1: no '$2' in the log"; cat "$work/$1.log"; }
}
# index_why NAME PATTERN: every index line of $work/NAME/index.jsonl has grid.why ~ PATTERN
index_why() {
    n=$(wc -l < "$work/$1/index.jsonl" 2>/dev/null || echo 0)
    [ "$n" -eq 2 ] || fail "$1: $n index lines, want 2"
    k=$(grep -c "\"why\": *\"$2" "$work/$1/index.jsonl")
    [ "$k" -eq 2 ] || { fail "$1: $k of 2 index lines with why '$2'"; cat "$work/$1/index.jsonl"; }
}

# 1. no file: the quick probe at job start
run item_probe 0 $item --output "$work/item_probe"
expect item_probe "^grid: dp [0-9] ring [0-9] ulysses [0-9] [a-z+-]* (predicted from a quick probe at job start"
[ -s "$work/item_probe/00000-0-fox.png" ] || fail "item_probe: no image"
# 1b. the probe is kept in the output folder (topology/probe_cache.h): a rerun into it on
#     the same hosts and layout plans on it without probing; other threads per rank are
#     another layout: probed again, kept beside
ls -a "$work/item_probe" | grep -q '^\.cpdit-probe-[0-9a-f]*\.json$' || fail "item_probe: no cached probe"
run item_cached 0 $item --output "$work/item_probe"
expect item_cached "^grid: dp [0-9] ring [0-9] ulysses [0-9] [a-z+-]* (predicted from the quick probe of an earlier run on the same hosts and rank layout, cached in $work/item_probe/.cpdit-probe-"
OPENBLAS_NUM_THREADS=2 run item_threads 0 $item --output "$work/item_probe"
expect item_threads "(predicted from a quick probe at job start"
n=$(ls -a "$work/item_probe" | grep -c '^\.cpdit-probe-')
[ "$n" -eq 2 ] || fail "item_probe: $n cached probes, want 2 (one per layout)"
run batch_probe 0 "$work/m.yaml" --output "$work/batch_probe"
expect batch_probe "^grid: dp [0-9] ring [0-9] ulysses [0-9] [a-z+-]* (predicted from a quick probe at job start"
index_why batch_probe "dp [0-9] ring [0-9] ulysses [0-9] [a-z+-]* (predicted from a quick probe"

# 2. measured winners of `cpdit tune` take precedence over predictions: a file from the
#    probe with a tuned entry that makes pure Ulysses fastest (for 2 images the prediction
#    on this machine prefers data parallelism, which the entry says is 500x slower)
"$MPI_RUN" -np 2 "$CPDIT" probe --quick --quiet --output "$work/topo.json" > /dev/null 2>&1 ||
    fail "probe exit $?"
# the key of a step here (topology/tuned_key.h), as `cpdit plan` prints it:
# "request: 64x64, 1 frame, 512 text tokens, CFG off, 2 ranks x 1 thread, cpu F32; ..."
req=$("$CPDIT" plan --topology "$work/topo.json" --model builtin:tiny --width 64 --height 64 \
    --steps 1 --ranks 2 2> /dev/null | sed -n 's/^request: //p')
txt=$(echo "$req" | sed -n 's/.* \([0-9]*\) text tokens.*/\1/p')
thr=$(echo "$req" | sed -n 's/.* ranks x \([0-9]*\) thread.*/\1/p')
be=$(echo "$req" | sed -n 's/.* thread[s]*, \([^ ]*\) \([^;]*\);.*/\1/p')
dt=$(echo "$req" | sed -n 's/.* thread[s]*, \([^ ]*\) \([^;]*\);.*/\2/p')
[ -n "$txt" ] && [ -n "$thr" ] && [ -n "$be" ] && [ -n "$dt" ] || fail "plan's request line: '$req'"
python_tuned() { # $1: the entry's text tokens
    cat > "$work/tuned.json" <<JSON
[{"model": "builtin:tiny", "width": 64, "height": 64, "frames": 1, "text_tokens": $1,
  "cfg": 0, "ranks": 2, "backend": "$be", "dtype": "$dt", "threads_per_rank": $thr,
  "chosen": {"dp": 1, "ring": 1, "ulysses": 2, "variant": "ulysses"},
  "measured": [{"dp": 1, "ring": 1, "ulysses": 2, "variant": "ulysses", "step_s": 0.001},
               {"dp": 2, "ring": 1, "ulysses": 1, "variant": "local", "step_s": 0.5}]}]
JSON
    # append "tuned" as the last key of the probe's object
    sed '$ d' "$work/topo.json" > "$work/topo_tuned.json" &&
        printf ',\n "tuned": %s\n}\n' "$(cat "$work/tuned.json")" >> "$work/topo_tuned.json"
}
# an entry measured with other text tokens is not this run's: predicted, not reused
python_tuned $((txt / 2))
run batch_other 0 "$work/m.yaml" --output "$work/batch_other" --topology "$work/topo_tuned.json"
expect batch_other "^grid: dp [0-9] ring [0-9] ulysses [0-9] [a-z+-]* (predicted from"
python_tuned "$txt"
run batch_tuned 0 "$work/m.yaml" --output "$work/batch_tuned" --topology "$work/topo_tuned.json"
expect batch_tuned "^grid: dp 1 ring 1 ulysses 2 ulysses (measured by cpdit tune"
index_why batch_tuned "dp 1 ring 1 ulysses 2 ulysses (measured by cpdit tune"
CPDIT_TOPOLOGY="$work/topo_tuned.json" run batch_env 0 "$work/m.yaml" --output "$work/batch_env"
expect batch_env "^grid: dp 1 ring 1 ulysses 2 ulysses (measured by cpdit tune"
# without the tuned entry the same file plans by prediction
run batch_file 0 "$work/m.yaml" --output "$work/batch_file" --topology "$work/topo.json"
expect batch_file "^grid: dp [0-9] ring [0-9] ulysses [0-9] [a-z+-]* (predicted from $work/topo.json"

# 3. the probe fails on rank 1 only: data-parallel fallback with the reason, no hang
CPDIT_PROBE_FAIL_RANK=1 run item_fail 0 $item --output "$work/item_fail"
expect item_fail "^grid: dp 2 ring 1 ulysses 1 local (fallback, every rank data-parallel: the quick probe at job start failed (probe: rank 1: failure injected"
[ -s "$work/item_fail/00000-0-fox.png" ] || fail "item_fail: no image"
CPDIT_PROBE_FAIL_RANK=1 run batch_fail 0 "$work/m.yaml" --output "$work/batch_fail"
index_why batch_fail "dp 2 ring 1 ulysses 1 local (fallback, every rank data-parallel"

# 4. a topology file of another format: exit 2, every rank, before any work
run item_bad 2 $item --output "$work/item_bad" --topology "$top_srcdir/tests/data/topology/format2.json"
expect item_bad "format 2"
run batch_bad 2 "$work/m.yaml" --output "$work/batch_bad" --topology "$top_srcdir/tests/data/topology/format2.json"
expect batch_bad "format 2"
[ $status -eq 0 ] && echo "ok: run_auto_grid.sh"
exit $status
