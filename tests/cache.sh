#!/bin/sh
# cache.sh — fewer transformer evaluations (lib/pipeline/pipeline_cache.h) on builtin:shapes:
#  1. cache off is the same run bit for bit: no --cache, --cache none, and fbcache with a
#     threshold no step gets under (its hooks run at every forward, nothing is skipped) give
#     identical fp32 images (--dump image.safetensors) and PNGs;
#  2. the quickstart manifest (8 prompts x 2 seeds, 20 / 28 steps, true CFG) with fbcache:0.2
#     and with taylorseer runs >= 1.5x fewer full forwards (the index lines' "cache" records)
#     and the builtin colour check (`cpdit builtin sheet`) stays within 1 image of uncached;
#  3. on ring 2, ulysses 2 and 2 x 2 every rank logs the same cached-step pattern as 1 rank
#     (--verbose), and the PNG is within 1/255 of the 1-rank one;
#  4. bad specs are refused (exit 2) naming --cache / cache.
CPDIT=${CPDIT:-./cpdit}
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
CMP=${top_builddir:-.}/tests/png_compare
SRC=${top_srcdir:-.}
MIN_RATIO=1.5  # full forwards uncached / cached run, at least
SHEET_SLACK=1  # colour-check images right: at most this many fewer than uncached
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail=0
prompt="a large red circle in the center on a blue background"
one() { # NAME NP ARGS... (one item, 20 steps, true CFG 4: builtin:shapes' defaults)
    name=$1; np=$2; shift 2
    if ! $MPI_RUN -np "$np" "$CPDIT" run --model builtin:shapes --prompt "$prompt" --seed 1 \
        --weight-format fp32 --output "$work/$name" "$@" >"$work/$name.log" 2>&1; then
        echo "FAIL: $name"; cat "$work/$name.log"; fail=1; return 1
    fi
}

# 1. off = unchanged
one off 1 --dump "$work/d_off" && one none 1 --cache none --dump "$work/d_none" &&
    one never 1 --cache fbcache:1e-9 --dump "$work/d_never" || exit 1
grep -q "cache fbcache:1e-09: 40 forwards full, 0 cached" "$work/never.log" ||
    { echo "FAIL: fbcache:1e-9 skipped a forward"; cat "$work/never.log"; fail=1; }
for x in none never; do
    cmp "$work/d_off/00000/image.safetensors" "$work/d_$x/00000/image.safetensors" &&
        cmp "$work"/off/*.png "$work"/$x/*.png ||
        { echo "FAIL: cache $x changed the image"; fail=1; }
done

# 2. quickstart: fewer full forwards, the colour check within one image
quick() { # NAME [--cache SPEC]
    name=$1; shift
    if ! "$CPDIT" run "$SRC/jobs/examples/quickstart.yaml" --output "$work/q_$name" "$@" \
        >"$work/q_$name.log" 2>&1 ||
        ! "$CPDIT" builtin sheet "$work/q_$name" >"$work/q_$name.sheet" 2>&1; then
        echo "FAIL: quickstart $name"; cat "$work/q_$name.log" "$work/q_$name.sheet"; fail=1
        return 1
    fi
    sed -n 's/.*colour check: \([0-9]*\)\/.*/\1/p' "$work/q_$name.sheet"
}
right_off=$(quick off) || exit 1
for spec in fbcache:0.2 taylorseer; do
    right=$(quick "$spec" --cache "$spec") || continue
    full=$(grep -o '"full":[0-9]*' "$work/q_$spec/index.jsonl" | awk -F: '{s += $2} END {print s + 0}')
    cached=$(grep -o '"cached":[0-9]*' "$work/q_$spec/index.jsonl" | awk -F: '{s += $2} END {print s + 0}')
    ratio=$(awk -v f="$full" -v c="$cached" 'BEGIN {printf "%.3f", (f > 0 ? (f + c) / f : 0)}')
    echo "quickstart $spec: $full full + $cached cached forwards (${ratio}x fewer full), colour check $right vs $right_off uncached"
    awk -v r="$ratio" -v m=$MIN_RATIO 'BEGIN {exit !(r >= m)}' ||
        { echo "FAIL: $spec: only ${ratio}x fewer full forwards"; fail=1; }
    [ "$right" -ge $((right_off - SHEET_SLACK)) ] ||
        { echo "FAIL: $spec: colour check $right < $right_off - $SHEET_SLACK"; fail=1; }
    grep -q "cache $spec\|cache taylorseer:1,5" "$work/q_$spec.log" ||
        { echo "FAIL: $spec: no cache line in the run summary"; fail=1; }
done

# 3. the grids agree: every rank the same cached steps as 1 rank, the same image
for spec in fbcache:0.2 taylorseer; do
    one "g1_$spec" 1 --cache "$spec" --verbose || continue
    ref=$(sed -n 's/.*cache steps //p' "$work/g1_$spec.log")
    case $ref in *C*) ;; *) echo "FAIL: $spec cached nothing on 1 rank"; fail=1 ;; esac
    for g in "2 r2 --ring 2" "2 u2 --ulysses 2" "4 r2u2 --ring 2 --ulysses 2"; do
        set -- $g; np=$1; tag=$2; shift 2
        one "g${tag}_$spec" "$np" --cache "$spec" --verbose "$@" || continue
        n=$(grep -c "cache steps $ref\$" "$work/g${tag}_$spec.log")
        [ "$n" = "$np" ] || { echo "FAIL: $spec $tag: $n of $np ranks logged $ref"; \
            grep "cache steps" "$work/g${tag}_$spec.log"; fail=1; }
        "$CMP" "$work"/g1_$spec/*.png "$work"/g${tag}_$spec/*.png 1 >/dev/null ||
            { echo "FAIL: $spec $tag: image differs from 1 rank by more than 1/255"; fail=1; }
    done
done

# 4. refused
for bad in fbcache:0 fbcache:x taylorseer:0,5 taylorseer:1 magcache; do
    "$CPDIT" run --model builtin:shapes --prompt x --output "$work/bad" --cache "$bad" \
        >"$work/bad.log" 2>&1
    rc=$?
    [ $rc = 2 ] && grep -q -- "--cache" "$work/bad.log" ||
        { echo "FAIL: --cache $bad: exit $rc"; cat "$work/bad.log"; fail=1; }
done
printf 'model: builtin:shapes\nprompts: [x]\ncache: taylorseer:9,1\n' >"$work/bad.yaml"
"$CPDIT" run "$work/bad.yaml" --check >"$work/bady.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "cache" "$work/bady.log" ||
    { echo "FAIL: manifest cache: taylorseer:9,1: exit $rc"; cat "$work/bady.log"; fail=1; }
[ $fail = 0 ] && echo "cache: OK"
exit $fail
