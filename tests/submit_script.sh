#!/bin/sh
# submit_script.sh — `cpdit submit --dry-run` against golden files (tests/data/sbatch/*.sbatch)
# for several resource combinations, with the varying paths and the version normalised; and a
# bad manifest refused with FILE:LINE:COL (exit 2), nothing written. No Slurm needed.
# CPDIT_UPDATE_GOLDEN=1 rewrites the golden files instead of comparing (then review the diff).
: "${CPDIT:?CPDIT is set by make check}"
top_srcdir=${top_srcdir:-.}
golden="$top_srcdir/tests/data/sbatch"
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-submit-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }
# the absolute program path the script records: the libtool wrapper in a build tree
prog=$(cd "$(dirname "$CPDIT")" && pwd)/$(basename "$CPDIT")
version=$("$CPDIT" --version | sed -n '1s/^cpdit \([^ ]*\).*/\1/p')

cat > "$work/batch.yaml" <<'YAML'
model: builtin:tiny
output: {dir: out}
defaults: {steps: 2, width: 32, height: 32}
seeds: [1, 2]
prompts: [a red fox, a blue bird]
parallel: auto
YAML
cat > "$work/grid.yaml" <<'YAML'
model: builtin:tiny
output: {dir: out}
prompts: [a red fox]
parallel: {ring: 2, ulysses: 2, anything: true}
YAML

# case NAME MANIFEST ARGS...: compare the dry-run script with golden/NAME.sbatch
case_() {
    name=$1 manifest=$2
    shift 2
    (cd "$work" && "$CPDIT" submit "$manifest" --dry-run "$@") > "$work/$name.raw" 2> "$work/$name.err" || {
        fail "$name: exit $?"; cat "$work/$name.err"; return; }
    sed -e "s|$prog|@CPDIT@|g" -e "s|$work|@WORK@|g" -e "s|(cpdit $version)|(cpdit @VERSION@)|" \
        "$work/$name.raw" > "$work/$name.sbatch"
    if [ -n "${CPDIT_UPDATE_GOLDEN:-}" ]; then
        cp "$work/$name.sbatch" "$golden/$name.sbatch"
    elif ! diff -u "$golden/$name.sbatch" "$work/$name.sbatch"; then
        fail "$name: the script differs from $golden/$name.sbatch"
    fi
    bash -n "$work/$name.raw" || fail "$name: not valid bash"
}
case_ cpu-partition batch.yaml --partition cpu --nodes 1 --ntasks-per-node 4 --cpus-per-task 2 --time 00:30:00
case_ gpu-2x4 grid.yaml --nodes 2 --gpus-per-node 4 --time 02:00:00 --account proj42 --qos high
case_ gpu-grid-override batch.yaml --nodes 2 --gpus-per-node 4 --dp 2 --ring 1 --ulysses 4 --output results/run1
case_ array batch.yaml --array 4 --partition debug --time 1:00:00 --signal-lead 300
case_ extra-options batch.yaml --topology topo.json -- --constraint=h100 --mail-type END --exclusive

# parallel: auto takes the topology file from $CPDIT_TOPOLOGY at submit time as from --topology
(cd "$work" && CPDIT_TOPOLOGY=envtopo.json "$CPDIT" submit batch.yaml --dry-run) > "$work/env.sbatch" 2>&1 ||
    fail "CPDIT_TOPOLOGY at submit: exit $?"
grep -q "^RUN_ARGS=(--output \"\$OUTPUT\" --topology '$work/envtopo.json')\$" "$work/env.sbatch" ||
    { fail "CPDIT_TOPOLOGY at submit: not passed as --topology"; grep RUN_ARGS "$work/env.sbatch"; }
# a fixed grid: the topology file is not passed on (and the script says so)
(cd "$work" && "$CPDIT" submit grid.yaml --dry-run --topology t.json) > "$work/fixed.sbatch" 2>&1
grep '^RUN_ARGS' "$work/fixed.sbatch" | grep -q -- '--topology' && fail "fixed grid: --topology passed"
grep -q 'the grid is fixed above, so it is not passed on' "$work/fixed.sbatch" ||
    fail "fixed grid with --topology: no comment"

# nothing was written by the dry runs
[ -e "$work/out" ] || [ -e "$work/results" ] && fail "--dry-run wrote files: $(ls "$work")"

# a bad manifest: FILE:LINE:COL, exit 2, nothing written or queued (PATH has no sbatch here)
cat > "$work/bad.yaml" <<'YAML'
model: builtin:tiny
output: {dir: badout}
defaults: {steps: 0}
prompts: [a red fox]
YAML
(cd "$work" && PATH=/nonexistent "$CPDIT" submit bad.yaml) > "$work/bad.out" 2> "$work/bad.err"
rc=$?
[ $rc -eq 2 ] || fail "bad manifest: exit $rc, expected 2"
grep -q 'bad.yaml:3:[0-9]*: ' "$work/bad.err" || { fail "bad manifest: no FILE:LINE:COL"; cat "$work/bad.err"; }
[ -e "$work/badout" ] && fail "bad manifest: the output folder was created"
[ -s "$work/bad.out" ] && fail "bad manifest: printed a job id"

# --weight-format is passed on to the run; an unknown format is refused (exit 2)
(cd "$work" && "$CPDIT" submit grid.yaml --dry-run --weight-format fp32) > "$work/wf.sbatch" 2>&1 ||
    fail "--weight-format fp32: exit $?"
grep -q "^RUN_ARGS=(--output \"\$OUTPUT\" --weight-format 'fp32')\$" "$work/wf.sbatch" ||
    { fail "--weight-format fp32: not passed on"; grep RUN_ARGS "$work/wf.sbatch"; }
(cd "$work" && "$CPDIT" submit grid.yaml --dry-run --weight-format fp13) >/dev/null 2>"$work/wf.err"
[ $? -eq 2 ] && grep -q "weight-format" "$work/wf.err" || fail "--weight-format fp13: not refused with exit 2"

# contradicting options and a missing sbatch are errors, not scripts
(cd "$work" && "$CPDIT" submit batch.yaml --dry-run --gpus-per-node 4 --ntasks-per-node 2) >/dev/null 2>&1
[ $? -eq 2 ] || fail "--ntasks-per-node other than --gpus-per-node: not refused with exit 2"
(cd "$work" && PATH=/nonexistent "$CPDIT" submit batch.yaml --output nosbatch) > "$work/ns.out" 2> "$work/ns.err"
rc=$?
[ $rc -eq 1 ] || fail "no sbatch: exit $rc, expected 1"
grep -q 'cannot run sbatch' "$work/ns.err" || { fail "no sbatch: message"; cat "$work/ns.err"; }
[ -f "$work/nosbatch/cpdit-job.sbatch" ] || fail "no sbatch: the script was not written"
exit $status
