#!/bin/sh
# refuse2.sh — what cannot work is refused early and clearly, round 2 (issue 28), each case
# with its exit code and exact message; nothing here decides pass/fail by a fixed sleep:
#   2. writers never replace what is not a regular file: a FIFO and a link to /dev/null as
#      the destination of probe, the index, the folder lock, a PNG, the sbatch script and
#      forward --output are refused with exit 2 and left as they were
#   1. FIFOs are refused unopened (no hang): as --topology and $CPDIT_TOPOLOGY (plan, run,
#      tune), as the manifest (run --check, submit --dry-run), as the manifest that
#      .cpdit-run.json names (status); a character device as --topology is refused unread
#   4. forward on NaN weights (vae on 1 rank, transformer on 2, the T5 text encoder): exit 2
#      naming the component, the output tensor, the count, the first index and the first
#      non-finite weight; no file
#   8. one-image mode checks before it loads the model (a missing model folder is not even
#      reached): invalid UTF-8 in --prompt / --negative-prompt, --output naming a regular file
#      or a path through one; `tokenize` refuses invalid UTF-8 too
#   7. the command line and the manifest share one table of limits: seed -1, width 8192,
#      steps 1001, guidance 101 refused by both; the largest allowed values pass both
#   9. messages that say what is wrong: an implausible num_layers in config.json (not "out of
#      memory"), an implausible array_task_count in .cpdit-run.json, `status` on a missing
#      folder and on a file, a killed run's stale lock (not "running"), safetensors links in a
#      loop, `forward --model builtin:tiny` (works), an empty config.json (no column 0), a raw
#      ESC in a text prompts file (refused, as in a manifest)
#  10. topology files validated (`FILE: key: message`, exit 2): rank_map naming host 99 of
#      one, "hosts": [], a negative bandwidth (fit and p2p row), sgemm_flops 1e-308, a
#      duplicate "format" key; the unchanged fixture still plans
#   6. plan enumerates grids over the divisors of the rank count: --ranks 1048576 (the
#      maximum) and 1000000 finish (the limit, 60 s, is far above the measured 0.02 s and
#      far below the hours the quadratic enumeration took) with a choice
#  11. SIGUSR1 to ONE rank of a dp 2 run (each rank its own group, 3 items each), while both
#      are held before writing their first PNG: the other group stops too (the stop is
#      relayed to every rank): exit 3, "stopped by SIGUSR1: 4 items left", exactly the 2 PNGs
#      that were being written (before, the other group rendered all 3 of its items)
#   5. `cpdit launch mpirun ...`, started as a process group leader, and SIGTERM to its whole
#      group (as kill -TERM -PGID, Ctrl-C or a batch system sends it) while both ranks are
#      held before their first PNG: mpirun is not hit, the ranks get USR1 and stop cleanly:
#      launch exits 3 ("stopped, resumable"), the stop marker, the 2 PNGs being written;
#      a launcher exiting 1 after the run wrote its stop marker: 3; otherwise its own status
CPDIT=${CPDIT:-./cpdit}
top_srcdir=$(cd "${top_srcdir:-.}" && pwd)
: "${MPI_RUN:?MPI_RUN is set by make check}"
top_builddir=$(cd "${top_builddir:-.}" && pwd)
PY=${PYTHON3:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-refuse2-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
status=0
fail() { echo "FAIL: $*"; status=1; }

# expect NAME CODE PATTERN -- COMMAND...: exit CODE and PATTERN (grep -E) in stdout+stderr
expect() {
    name=$1; want=$2; pat=$3; shift 4
    "$@" > "$name.log" 2>&1
    got=$?
    if [ "$got" != "$want" ]; then
        fail "$name: exit $got, want $want"; cat "$name.log"
    elif [ -n "$pat" ] && ! grep -q -E -- "$pat" "$name.log"; then
        fail "$name: no '$pat' in the output"; cat "$name.log"
    else
        echo "ok: $name -> $got"
    fi
}
# one rank: an MPI singleton (about half of mpirun's start-up); the time limit makes a hang
# fail rather than stall (the cases with 2 ranks go through mpi-run.sh, which has one too)
one_rank="timeout 300"
one="--model builtin:tiny --prompt x --width 32 --height 32 --steps 1 --ring 1 --ulysses 1"
has_numpy=no
"$PY" -c "import numpy" 2>/dev/null && has_numpy=yes

# 2. writers: a FIFO, or a link to a character device, is never replaced or written into
kind_fifo="is a FIFO \(named pipe\), not a regular file"
kind_link="is a symbolic link to a character device, not a regular file"
# dests DIR NAME: DIR/NAME.fifo a FIFO, DIR/NAME.link a link to /dev/null
dests() { mkdir -p "$1" && mkfifo "$1/$2.fifo" && ln -s /dev/null "$1/$2.link"; }
# intact DIR NAME: both still what they were
intact() {
    [ -p "$1/$2.fifo" ] || fail "$1/$2.fifo was replaced: $(ls -l "$1/$2.fifo")"
    [ -L "$1/$2.link" ] || fail "$1/$2.link was replaced: $(ls -l "$1/$2.link")"
}
dests w probe
expect probe-fifo 2 "^cpdit: w/probe.fifo: cannot write the output file: $kind_fifo" -- \
    $one_rank "$CPDIT" probe --quick --no-compute --quiet --output w/probe.fifo
expect probe-link 2 "^cpdit: w/probe.link: cannot write the output file: $kind_link" -- \
    $one_rank "$CPDIT" probe --quick --no-compute --quiet --output w/probe.link
intact w probe
printf 'model: builtin:tiny\ndefaults: {width: 32, height: 32, steps: 1}\nparallel: {ring: 1, ulysses: 1}\nprompts: [a]\n' > a.yaml
mkdir ix-fifo ix-link lock-fifo sbatch-fifo
mkfifo ix-fifo/index.jsonl lock-fifo/.cpdit-lock sbatch-fifo/cpdit-job.sbatch
ln -s /dev/null ix-link/index.jsonl
expect index-fifo 2 "^cpdit: --output: the index \"ix-fifo/index.jsonl\": $kind_fifo" -- \
    $one_rank "$CPDIT" run a.yaml --output ix-fifo
expect index-link 2 "^cpdit: --output: the index \"ix-link/index.jsonl\": $kind_link" -- \
    "$CPDIT" run a.yaml --check --output ix-link
expect lock-fifo 2 "^cpdit: lock-fifo/.cpdit-lock: the lock: $kind_fifo" -- \
    $one_rank "$CPDIT" run a.yaml --output lock-fifo
expect sbatch-fifo 2 "^cpdit: .*/sbatch-fifo/cpdit-job.sbatch: cannot write the output file: $kind_fifo" -- \
    env PATH=/nonexistent "$CPDIT" submit a.yaml --output sbatch-fifo
[ -p ix-fifo/index.jsonl ] && [ -L ix-link/index.jsonl ] && [ -p lock-fifo/.cpdit-lock ] &&
    [ -p sbatch-fifo/cpdit-job.sbatch ] || fail "writers: a FIFO or link was replaced: $(ls -lR)"
mkdir png-fifo png-link && mkfifo png-fifo/00000-0-x.png && ln -s /dev/null png-link/00000-0-x.png
for k in fifo link; do
    eval kind=\$kind_$k
    expect "png-$k" 2 "^cpdit: png-$k/00000-0-x.png: cannot write the output file: $kind" -- \
        $one_rank "$CPDIT" run $one --output "png-$k"
done
[ -p png-fifo/00000-0-x.png ] && [ -L png-link/00000-0-x.png ] || fail "png: replaced: $(ls -l png-*)"
# st_write FILE NAME SHAPE FILL [NAME SHAPE FILL...]: a float32 safetensors file
st_write() {
    "$PY" - "$@" <<'P'
import json, struct, sys
path, a, header, blobs, off = sys.argv[1], sys.argv[2:], {}, [], 0
for name, shape, fill in zip(a[0::3], a[1::3], a[2::3]):
    shape = [int(d) for d in shape.split("x")]
    n = 1
    for d in shape: n *= d
    b = struct.pack("<%df" % n, *([float(fill)] * n))
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
h = json.dumps(header).encode(); h += b" " * (-len(h) % 8)
open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
P
}
# st_poison FILE TENSOR: every value of TENSOR becomes NaN (F32, BF16 or F16), in place
st_poison() {
    "$PY" - "$@" <<'P'
import json, struct, sys
path, name = sys.argv[1], sys.argv[2]
d = bytearray(open(path, "rb").read()); n = struct.unpack("<Q", d[:8])[0]
t = json.loads(d[8:8 + n])[name]; a, b = t["data_offsets"]
nan = {"F32": struct.pack("<f", float("nan")), "BF16": b"\xc0\x7f", "F16": b"\x00\x7e"}[t["dtype"]]
d[8 + n + a:8 + n + b] = nan * ((b - a) // len(nan))
open(path, "wb").write(bytes(d))
P
}
if command -v "$PY" > /dev/null; then
    "$CPDIT" builtin write tiny > /dev/null || fail "builtin write"
    st_write latent.safetensors latent_sample 1x16x2x2 0.5
    dests fw out
    for k in fifo link; do
        eval kind=\$kind_$k
        expect "forward-$k" 2 "^cpdit: fw/out.$k: cannot write the output file: $kind" -- \
            $one_rank "$CPDIT" forward --model tiny --component vae \
            --inputs latent.safetensors --output "fw/out.$k"
    done
    intact fw out
else
    echo "note: no $PY: forward cases skipped"
fi

# 1. FIFOs as inputs: refused before any open, so no writer is needed and nothing hangs
mkfifo topo.fifo man.fifo
fifo_topo="^cpdit: topo.fifo: the topology file: $kind_fifo"
plan="plan --ranks 4 --model builtin:tiny --width 32 --height 32"
expect plan-topology 2 "$fifo_topo" -- timeout 60 "$CPDIT" $plan --topology topo.fifo
expect plan-topology-env 2 "$fifo_topo" -- env CPDIT_TOPOLOGY=topo.fifo timeout 60 "$CPDIT" $plan
expect run-topology 2 "$fifo_topo" -- $one_rank "$CPDIT" run --model builtin:tiny \
    --prompt x --width 32 --height 32 --steps 1 --topology topo.fifo
expect tune-topology-env 2 "$fifo_topo" -- env CPDIT_TOPOLOGY=topo.fifo \
    $one_rank "$CPDIT" tune --model builtin:tiny --width 32 --height 32
expect plan-dev-zero 2 "^cpdit: /dev/zero: the topology file: is a character device, not a regular file" -- \
    timeout 60 "$CPDIT" $plan --topology /dev/zero
fifo_man="^cpdit: man.fifo: cannot open the manifest: $kind_fifo"
expect run-manifest 2 "$fifo_man" -- timeout 60 "$CPDIT" run man.fifo --check
expect submit-manifest 2 "$fifo_man" -- timeout 60 "$CPDIT" submit man.fifo --dry-run
mkdir st-fifo && printf '{"manifest": "%s/man.fifo", "array_task_count": 1}\n' "$work" > st-fifo/.cpdit-run.json
expect status-manifest 2 "^cpdit: $work/man.fifo: cannot open the manifest: $kind_fifo" -- \
    timeout 60 "$CPDIT" status st-fifo

# 4. forward on NaN weights: an error naming the component, the output tensor and the first
#    non-finite weight; no output file
if command -v "$PY" > /dev/null; then
    cp -RL tiny nan_vae && st_poison nan_vae/vae/diffusion_pytorch_model.safetensors decoder.conv_out.bias
    expect forward-nan-vae 2 "^cpdit: vae: output \"sample\": 768 of 768 values are not finite \(NaN or Inf\), the first at index 0; the first non-finite weight is decoder.conv_out.bias \(in nan_vae/vae/diffusion_pytorch_model.safetensors\); nothing written" -- \
        $one_rank "$CPDIT" forward --model nan_vae --component vae \
        --inputs latent.safetensors --output nan-vae.safetensors
    cp -RL tiny nan_tr && st_poison nan_tr/transformer/diffusion_pytorch_model.safetensors proj_out.bias
    st_write tr-in.safetensors hidden_states 1x4x64 0.1 encoder_hidden_states 1x2x64 0.1 \
        pooled_projections 1x32 0.1 timestep 1 0.5 guidance 1 3.5 img_ids 4x3 0 txt_ids 2x3 0
    expect forward-nan-transformer 2 "^cpdit: transformer: output \"sample\": 256 of 256 values are not finite \(NaN or Inf\), the first at index 0; the first non-finite weight is proj_out.bias \(in nan_tr/transformer/diffusion_pytorch_model.safetensors\); nothing written" -- \
        $MPI_RUN -np 2 "$CPDIT" forward --model nan_tr --component transformer \
        --inputs tr-in.safetensors --output nan-tr.safetensors --ulysses 2
    cp -RL tiny/text_encoder_2 nan_t5 && st_poison nan_t5/model.safetensors encoder.final_layer_norm.weight
    st_write ids.safetensors input_ids 1x4 5
    expect forward-nan-text 2 "^cpdit: text_encoder: output \"last_hidden_state\": 256 of 256 values are not finite \(NaN or Inf\), the first at index 0; the first non-finite weight is encoder.final_layer_norm.weight \(in nan_t5/model.safetensors\); nothing written" -- \
        "$CPDIT" forward --model nan_t5 --component text_encoder --inputs ids.safetensors \
        --output nan-t5.safetensors
    ls nan-vae.safetensors nan-tr.safetensors nan-t5.safetensors 2> /dev/null &&
        fail "forward-nan: an output was written"
    # the same inputs on finite weights: written (the check does not refuse good numbers)
    $one_rank "$CPDIT" forward --model tiny --component transformer \
        --inputs tr-in.safetensors --output tr-out.safetensors > finite.log 2>&1 &&
        [ -f tr-out.safetensors ] || { fail "forward-finite: not written"; cat finite.log; }
fi

# 8. one-image mode: refused before the model is opened (the folder does not exist)
bad=$(printf 'a\377b')
touch afile
early="run --model $work/no-such-model --width 32 --height 32 --steps 1 --ring 1 --ulysses 1"
expect item-utf8 2 "^cpdit: --prompt: not valid UTF-8; pass the text as UTF-8" -- \
    $one_rank "$CPDIT" $early --prompt "$bad"
expect item-utf8-negative 2 "^cpdit: --negative-prompt: not valid UTF-8; pass the text as UTF-8" -- \
    $one_rank "$CPDIT" $early --prompt x --negative-prompt "$bad" --true-cfg 2
expect item-output-file 2 '^cpdit: --output: "afile" is a regular file, not a folder' -- \
    $one_rank "$CPDIT" $early --prompt x --output afile
expect item-output-through 2 '^cpdit: --output: "afile/x": a part of the path is a file, not a folder' -- \
    $one_rank "$CPDIT" $early --prompt x --output afile/x
expect tokenize-utf8 2 "^cpdit: prompt: not valid UTF-8; pass the text as UTF-8" -- \
    "$CPDIT" tokenize --model builtin:tiny "$bad"

# 7. one table of limits: each value refused (or accepted) by the command line and the manifest
limit() { # limit NAME OPTION VALUE CLI_PATTERN MANIFEST_PATTERN
    printf 'model: builtin:tiny\ndefaults: {%s: %s}\nprompts: [a]\n' "$2" "$3" > "lim-$1.yaml"
    expect "limit-$1-cli" 2 "$4" -- "$CPDIT" run --prompt x --$2 "$3" --output afile
    expect "limit-$1-manifest" 2 "$5" -- "$CPDIT" run "lim-$1.yaml" --check
}
limit seed seed -1 "^cpdit: run: --seed: expected an integer in \[0, 9223372036854775807\], got '-1'" \
    "^cpdit: lim-seed.yaml:2:18: defaults.seed: must be between 0 and 9223372036854775807, got -1"
limit width width 8192 "^cpdit: run: --width: 8192 is out of range \[16, 4096\]" \
    "^cpdit: lim-width.yaml:2:19: defaults.width: 8192 is out of range \(16 to 4096 pixels\)"
limit steps steps 1001 "^cpdit: run: --steps: 1001 is out of range \[1, 1000\]" \
    "^cpdit: lim-steps.yaml:2:19: defaults.steps: must be between 1 and 1000, got 1001"
limit guidance guidance 101 "^cpdit: run: --guidance: expected a number in \[0, 100\], got '101'" \
    "^cpdit: lim-guidance.yaml:2:22: defaults.guidance: must be a finite number between 0 and 100, got 101"
# the largest allowed values: the command line parses them (and stops at --output afile),
# the manifest checks
expect limit-max-cli 2 '^cpdit: --output: "afile" is a regular file, not a folder' -- \
    $one_rank "$CPDIT" run --prompt x --seed 9223372036854775807 --width 4096 \
    --height 4096 --steps 1000 --guidance 100 --output afile
printf 'model: builtin:tiny\ndefaults: {seed: 9223372036854775807, width: 4096, height: 4096, steps: 1000, guidance: 100}\nprompts: [a]\n' > lim-max.yaml
expect limit-max-manifest 0 ' 4096x4096  1000 ' -- "$CPDIT" run lim-max.yaml --check

# 9. messages
[ -d tiny ] || "$CPDIT" builtin write tiny > /dev/null || fail "builtin write"
copy_model() { rm -rf "$1" && cp -RL "$work/tiny" "$1"; }
copy_model big && sed 's/"num_layers": 2/"num_layers": 1000000000/' tiny/transformer/config.json > big/transformer/config.json
small="--prompt x --width 32 --height 32 --steps 1 --ring 1 --ulysses 1 --output out9"
expect implausible-layers 2 '^cpdit: big/transformer/config.json: key "num_layers": 1000000000 is implausible \(at most 1024\); the config is probably corrupt' -- \
    $one_rank "$CPDIT" run --model big $small
copy_model empty && : > empty/vae/config.json
expect empty-config 2 '^cpdit: empty/vae/config.json: the file is empty; expected a JSON object' -- \
    $one_rank "$CPDIT" run --model empty $small
copy_model loopst && rm loopst/vae/diffusion_pytorch_model.safetensors &&
    ln -s model.safetensors loopst/vae/diffusion_pytorch_model.safetensors &&
    ln -s diffusion_pytorch_model.safetensors loopst/vae/model.safetensors
expect safetensors-loop 2 '^cpdit: loopst/vae/diffusion_pytorch_model.safetensors: symbolic link loop' -- \
    $one_rank "$CPDIT" run --model loopst $small
printf 'model: builtin:tiny\nprompts: [a]\n' > st9.yaml
mkdir st9 && printf '{"manifest": "%s/st9.yaml", "array_task_count": 1000000000}\n' "$work" > st9/.cpdit-run.json
expect status-array 2 '^cpdit: st9/.cpdit-run.json: array_task_count: 1000000000 is implausible \(0 to 1000000 tasks\); the record is corrupt' -- \
    "$CPDIT" status st9
expect status-missing 2 "^cpdit: $work/no-such-folder: no such folder" -- "$CPDIT" status "$work/no-such-folder"
expect status-file 2 '^cpdit: st9.yaml: is a regular file, not an output folder' -- "$CPDIT" status st9.yaml
# a lock left by a killed run on this host: its pid is gone (a process that has exited)
printf '{"manifest": "%s/st9.yaml", "array_task_count": 1}\n' "$work" > st9/.cpdit-run.json
sh -c 'exit 0' & gone=$!
wait $gone
printf 'host=%s pid=%s job=- restart=0 time=%s\n' "$(uname -n)" "$gone" "$(date +%s)" > st9/.cpdit-lock
# exit 3: the one item is left (cpdit status exit codes, issue 27)
expect status-stale 3 "^stale lock: .cpdit-lock \(host=$(uname -n) pid=$gone job=-; its process is gone" -- \
    "$CPDIT" status st9
grep -q '^running:' status-stale.log && fail "status-stale: the stale lock is shown as running"
printf 'host=%s pid=%s job=- restart=0 time=%s\n' "$(uname -n)" "$$" "$(date +%s)" > st9/.cpdit-lock
expect status-live 3 "^running: .cpdit-lock \(host=$(uname -n) pid=$$ job=-\)" -- "$CPDIT" status st9
printf 'a red fox\nan \033[31m escape\n' > esc.txt
printf 'model: builtin:tiny\nprompts_file: esc.txt\n' > esc.yaml
expect prompts-esc 2 '^cpdit: esc.txt:2: control character U\+001B is not allowed' -- "$CPDIT" run esc.yaml --check
if command -v "$PY" > /dev/null; then
    expect forward-builtin 0 "" -- "$CPDIT" forward --model builtin:tiny --component vae \
        --inputs latent.safetensors --output builtin-out.safetensors
    [ -s builtin-out.safetensors ] || fail "forward-builtin: no output"
fi

# 10. topology files: ranges and cross-references
if command -v "$PY" > /dev/null; then
    "$PY" - "$top_srcdir/tests/data/topology/cpu_4ranks.json" <<'P'
import copy, json, sys
base = json.load(open(sys.argv[1]))
def w(name, f):
    d = copy.deepcopy(base); f(d); json.dump(d, open(name, "w"))
w("t-host99.json", lambda d: d["rank_map"][0].__setitem__("host", 99))
w("t-nohosts.json", lambda d: d.__setitem__("hosts", []))
w("t-negfit.json", lambda d: d["links"]["fits"]["same_numa"].__setitem__("beta_Bps", -5e9))
w("t-negp2p.json", lambda d: d["links"]["p2p"][0].__setitem__("bw_Bps", -1e9))
w("t-flops.json", lambda d: d["compute"].__setitem__("sgemm_flops", 1e-308))
open("t-dup.json", "w").write(json.dumps(base).replace('"format": 1,', '"format": 1, "format": 1,', 1))
P
    plan4="plan --ranks 4 --model builtin:tiny --width 32 --height 32 --topology"
    expect topo-host99 2 '^cpdit: t-host99.json: rank_map\[0\].host: 99, but "hosts" lists 1 host \(0..0\)' -- \
        "$CPDIT" $plan4 t-host99.json
    expect topo-nohosts 2 '^cpdit: t-nohosts.json: hosts: empty; the 4 ranks of rank_map need at least one host' -- \
        "$CPDIT" $plan4 t-nohosts.json
    expect topo-negfit 2 '^cpdit: t-negfit.json: links.fits.same_numa.beta_Bps: -5e\+09 is implausible \(1000 to 1e\+15 B/s\)' -- \
        "$CPDIT" $plan4 t-negfit.json
    expect topo-negp2p 2 '^cpdit: t-negp2p.json: links.p2p\[0\].bw_Bps: -1e\+09 is negative' -- \
        "$CPDIT" $plan4 t-negp2p.json
    expect topo-flops 2 '^cpdit: t-flops.json: compute.sgemm_flops: 1e-308 is implausible \(1e\+06 to 1e\+18 FLOP/s\)' -- \
        "$CPDIT" $plan4 t-flops.json
    expect topo-dup 2 "^cpdit: t-dup.json: line 1 column [0-9]+: duplicate object key near '\"format\"'" -- \
        "$CPDIT" $plan4 t-dup.json
    expect topo-good 0 '^chosen: ' -- "$CPDIT" $plan4 "$top_srcdir/tests/data/topology/cpu_4ranks.json"
fi

# 6. plan in O(divisors): a million ranks
for n in 1048576 1000000; do
    expect "plan-$n" 0 "^chosen: dp [0-9]+ ring [0-9]+ ulysses [0-9]+ " -- timeout 60 "$CPDIT" plan \
        --ranks "$n" --model builtin:tiny --width 32 --height 32 \
        --topology "$top_srcdir/tests/data/topology/two_nodes_8gpu.json"
done

# 11. a stop seen by one rank reaches every rank (made deterministic with the test hold of
#     jobs/job_run.h: the ranks wait before writing their first PNG; the log says when the
#     signalled rank has relayed the stop; no fixed sleep decides anything)
cat > stop.yaml <<'E'
model: builtin:tiny
defaults: {steps: 2, width: 32, height: 32}
seeds: [1, 2, 3]
prompts: [a red fox, a blue bird]
E
: > hold
"$MPI_RUN" -np 2 env CPDIT_TEST_HOLD="write:$work/hold" "$CPDIT" run stop.yaml --output out11 \
    --dp 2 > stop.log 2>&1 &
run_pid=$!
# wait_log PATTERN [LOG]: until LOG (stop.log) has PATTERN (or the run ended / 120 s passed)
wait_log() {
    i=0
    while [ $i -lt 1200 ] && ! grep -q -- "$1" "${2:-stop.log}"; do
        kill -0 "$run_pid" 2> /dev/null || break
        sleep 0.1; i=$((i + 1))
    done
    grep -q -- "$1" "${2:-stop.log}"
}
if wait_log "test hold at write: rank 0 pid" && wait_log "test hold at write: rank 1 pid"; then
    p0=$(sed -n 's/.*test hold at write: rank 0 pid \([0-9]*\) .*/\1/p' stop.log | head -n 1)
    kill -USR1 "$p0"
    wait_log "rank 0: stop relayed to the other 1 ranks" || fail "stop: no relay line"
    rm -f hold
    wait "$run_pid"; rc=$?
    [ $rc -eq 3 ] || { fail "stop: exit $rc, want 3"; cat stop.log; }
    grep -q 'stopped by SIGUSR1: 4 items left' stop.log || { fail "stop: summary"; cat stop.log; }
    n=$(ls out11 | grep -c '\.png$')
    [ "$n" -eq 2 ] || { fail "stop: $n PNGs, want 2 (the other group went on)"; ls out11; cat stop.log; }
    [ $status -eq 0 ] && echo "ok: stop-relay -> $rc, $n PNGs"
else
    rm -f hold; wait "$run_pid"; fail "stop: the ranks did not reach the hold"; cat stop.log
fi

# 5. SIGTERM to the process group of `cpdit launch mpirun ...`: exit 3, resumable
MPIRUN_PROG=$(sed -n 's/^MPIRUN="\(.*\)"$/\1/p' "$MPI_RUN")
if [ -x "$MPIRUN_PROG" ] && command -v setsid > /dev/null; then
    : > hold
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 \
        OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1 \
        setsid "$CPDIT" launch "$MPIRUN_PROG" --timeout 300 --oversubscribe \
        --bind-to none -np 2 env CPDIT_TEST_HOLD="write:$work/hold" "$CPDIT" run stop.yaml \
        --output out5 --dp 2 > launch.log 2>&1 &
    run_pid=$!
    if wait_log "test hold at write: rank 0 pid" launch.log &&
        wait_log "test hold at write: rank 1 pid" launch.log; then
        # setsid made launch (this pid) the leader of a new group: TERM to all of that group
        [ "$(ps -o pgid= -p "$run_pid" | tr -d ' ')" = "$run_pid" ] ||
            fail "launch: not a process group leader"
        kill -TERM "-$run_pid" || fail "launch: could not signal its group"
        wait_log "stop relayed to the other 1 ranks" launch.log || fail "launch: the ranks got no stop"
        rm -f hold
        wait "$run_pid"; rc=$?
        [ $rc -eq 3 ] || { fail "launch: exit $rc, want 3"; cat launch.log; }
        grep -q 'stopped by SIGUSR1: 4 items left' launch.log || { fail "launch: summary"; cat launch.log; }
        [ -f out5/.cpdit-stopped ] || fail "launch: no stop marker: $(ls -a out5)"
        n=$(ls out5 | grep -c '\.png$')
        [ "$n" -eq 2 ] || { fail "launch: $n PNGs, want 2"; cat launch.log; }
        [ $status -eq 0 ] && echo "ok: launch-term -> $rc, $n PNGs"
    else
        rm -f hold; wait "$run_pid"; fail "launch: the ranks did not reach the hold"; cat launch.log
    fi
else
    echo "note: no mpirun or setsid: the launch case is skipped"
fi
# a launcher that exits 1 although the run wrote its stop marker meanwhile: 3 all the same
mkdir outm
expect launch-marker 3 "^cpdit: launch: sh exited with 1, but the run stopped cleanly \(stop marker outm/.cpdit-stopped\): exit 3, resumable" -- \
    "$CPDIT" launch sh -c ': > outm/.cpdit-stopped; exit 1' run --output outm
expect launch-status 5 "" -- "$CPDIT" launch sh -c 'exit 5' run --output outm

[ $status -eq 0 ] && echo "ok: refuse2.sh"
exit $status
