#!/bin/sh
# vae_world.sh — `--vae-parallel world` (issue 14): the VAE decode split over every rank of the
# job, not only the item's CP group. On 4 ranks as dp 2 x ulysses 2 (builtin:tiny, 208x208,
# exact fp32 weight path), the world decode gives the same image as the group decode: the
# decoded floats (--dump's image.safetensors) within 1e-5 relative (the 2- and the 4-rank row
# splits differ only in float summation order: GroupNorm moments, the mid-block attention's
# ring), hence PNGs within 1/255 in at most 0.1% of the values:
#   1. one prompt (`cpdit run --prompt`): group 1 has no item and joins the decode; and with
#      true CFG on 4 groups of one rank (group 1 the negative branch, groups 2-3 idle);
#   2. a 3-item manifest (items 0, 2 on group 0, item 1 on group 1: round 2 has one image and
#      group 1 idles through it), `vae_parallel: world` in the manifest and --vae-parallel
#      world on the command line; the index lines say "vae":"world", the summary says how the
#      decode ran; a rerun finds every item done;
#   3. world with tiling is refused (exit 2), from the command line and from the manifest.
# Exit 77 (skip) without mpirun.
: "${MPI_RUN:?MPI_RUN is set by make check}"
: "${CPDIT:?CPDIT is set by make check}"
top_builddir=${top_builddir:-.}
tool="$top_builddir/tests/test_job_run_tool"
ftool="$top_builddir/tests/flux_test_tool"
TOL=1e-5
CMP="$top_builddir/tests/png_compare"
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-vaeworld-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
export CPDIT_CACHE="$work/cache"
status=0
fail() { echo "FAIL: $*"; status=1; }
grid="--ring 1 --ulysses 2"

# ---- 1. one prompt
item="--model builtin:tiny --prompt 'a lighthouse at dusk' --seed 7 --steps 2 --width 208"
item="$item --height 208 --max-sequence-length 64 --weight-format fp32"
for v in on world; do
    eval "\"$MPI_RUN\" -np 4 \"$CPDIT\" run $item $grid --vae-parallel $v --output \"$work/item-$v\" --dump \"$work/dump-$v\"" \
        > "$work/item-$v.log" 2>&1
    rc=$?
    [ $rc -eq 77 ] && exit 77
    [ $rc -eq 0 ] || { fail "one prompt, --vae-parallel $v: exit $rc"; cat "$work/item-$v.log"; }
done
grep -q "vae decode: .*split over all ranks of the job" "$work/item-world.log" ||
    { fail "one prompt: the world run does not say how it decoded"; cat "$work/item-world.log"; }
grep -q "vae decode: .*split over the CP group" "$work/item-on.log" ||
    fail "one prompt: the group run does not say how it decoded"
if "$ftool" compare "$work/dump-world/00000/image.safetensors" \
    "$work/dump-on/00000/image.safetensors" --tensor image --tol $TOL > "$work/cmp" 2>&1; then
    echo "ok: one prompt, world decode vs group decode, fp32 image: $(cat "$work/cmp")"
else
    fail "one prompt, world vs group (fp32 image, tol $TOL): $(cat "$work/cmp")"
fi
"$tool" compare "$work/item-on" "$work/item-world" --max-diff 1 --max-fraction 0.001 \
    > "$work/cmp" 2>&1 && echo "ok: one prompt, PNG: $(tail -1 "$work/cmp")" ||
    fail "one prompt, world vs group PNG: $(cat "$work/cmp")"

# ---- 1b. true CFG on 4 groups of 1 rank: group 1 computes the negative branch
# (CFG-parallel), groups 2 and 3 have nothing to do; with world all four decode
cfg="--model builtin:tiny --prompt 'a lighthouse' --negative-prompt blurry --true-cfg 3"
cfg="$cfg --seed 2 --steps 2 --width 208 --height 208 --max-sequence-length 32"
cfg="$cfg --weight-format fp32 --ring 1 --ulysses 1"
for v in on world; do
    eval "\"$MPI_RUN\" -np 4 \"$CPDIT\" run $cfg --vae-parallel $v --output \"$work/cfg-$v\" --dump \"$work/cfgdump-$v\"" \
        > "$work/cfg-$v.log" 2>&1 || { fail "CFG, --vae-parallel $v: exit $?"; cat "$work/cfg-$v.log"; }
done
if "$ftool" compare "$work/cfgdump-world/00000/image.safetensors" \
    "$work/cfgdump-on/00000/image.safetensors" --tensor image --tol $TOL > "$work/cmp" 2>&1; then
    echo "ok: CFG-parallel + idle groups, world decode vs CP rank 0, fp32 image: $(cat "$work/cmp")"
else
    fail "CFG-parallel, world vs rank 0 (fp32 image, tol $TOL): $(cat "$work/cmp")"
fi

# ---- 2. a batch of 3 items
cat > "$work/m.yaml" <<'YAML'
model: builtin:tiny
output: {dir: out}
defaults: {steps: 2, width: 208, height: 208, max_sequence_length: 64}
seeds: [3]
prompts:
  - a red fox in fresh snow
  - a harbour at night
  - 一只戴着帽子的猫
YAML
sed 's/^model:/vae_parallel: world\nmodel:/' "$work/m.yaml" > "$work/mw.yaml"
batch() { # NAME MANIFEST ARGS...
    name=$1; man=$2; shift 2
    "$MPI_RUN" -np 4 "$CPDIT" run "$man" --output "$work/$name" --weight-format fp32 \
        --dp 2 --ulysses 2 --dump "$work/dump-$name" "$@" > "$work/$name.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { fail "$name: exit $rc"; cat "$work/$name.log"; return 1; }
    n=$(wc -l < "$work/$name/index.jsonl" 2>/dev/null || echo 0)
    [ "$n" -eq 3 ] || fail "$name: $n index lines, want 3"
}
batch group "$work/m.yaml"
batch world "$work/mw.yaml"
batch worldcli "$work/m.yaml" --vae-parallel world
for name in world worldcli; do
    for i in 00000 00001 00002; do
        if "$ftool" compare "$work/dump-$name/$i/image.safetensors" \
            "$work/dump-group/$i/image.safetensors" --tensor image --tol $TOL > "$work/cmp" 2>&1; then
            echo "ok: 3-item batch, item $i, $name decode vs group decode, fp32 image: $(cat "$work/cmp")"
        else
            fail "3-item batch, item $i, $name vs group (fp32 image, tol $TOL): $(cat "$work/cmp")"
        fi
    done
    if "$tool" compare "$work/group" "$work/$name" --max-diff 1 --max-fraction 0.001 \
        > "$work/cmp" 2>&1; then
        echo "ok: 3-item batch, $name decode vs group decode, PNGs: $(tail -1 "$work/cmp")"
    else
        fail "3-item batch, $name vs group PNGs: $(cat "$work/cmp")"
    fi
    [ "$(grep -c '"vae":"world"' "$work/$name/index.jsonl")" -eq 3 ] ||
        fail "$name: index lines without \"vae\":\"world\""
    grep -q "vae decode: 3 images, .*split over all 4 ranks of the job.*; each rank took part in 3)" "$work/$name.log" ||
        { fail "$name: the summary does not say how the decode ran"; cat "$work/$name.log"; }
done
[ "$(grep -c '"vae":"group"' "$work/group/index.jsonl")" -eq 3 ] ||
    fail "group: index lines without \"vae\":\"group\""
# resume: a rerun of the world batch has nothing left to do (and still exits 0)
batch world "$work/mw.yaml"
grep -q "3 items, 3 already done, 0 to do" "$work/world.log" ||
    { fail "world rerun: items were not found done"; cat "$work/world.log"; }

# ---- 3. world and tiling exclude each other
"$CPDIT" run --model builtin:tiny --prompt x --vae-parallel world --vae-tiling \
    > "$work/t1.log" 2>&1
[ $? -eq 2 ] && grep -q "choose one" "$work/t1.log" || { fail "world + --vae-tiling"; cat "$work/t1.log"; }
"$CPDIT" run "$work/mw.yaml" --vae-tiling --check > "$work/t2.log" 2>&1
[ $? -eq 2 ] && grep -q "choose one" "$work/t2.log" || { fail "vae_parallel: world + --vae-tiling"; cat "$work/t2.log"; }
sed 's/^vae_parallel: world/vae_parallel: everywhere/' "$work/mw.yaml" > "$work/bad.yaml"
"$CPDIT" run "$work/bad.yaml" --check > "$work/t3.log" 2>&1
[ $? -eq 2 ] && grep -q "use on (split" "$work/t3.log" || { fail "vae_parallel: everywhere"; cat "$work/t3.log"; }
[ $status -eq 0 ] && echo "ok: vae_world"
exit $status
