#!/bin/sh
# cli.sh — the cpdit command line: help, version, and clear errors with exit 2 for
# unknown subcommands and options.
CPDIT=${CPDIT:-./cpdit}
fail=0
out=$(mktemp); err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

# expect CODE PATTERN-in-stdout+stderr -- ARGS...
expect() {
    want=$1; pat=$2; shift 2
    "$CPDIT" "$@" >"$out" 2>"$err"
    got=$?
    if [ "$got" != "$want" ]; then
        echo "FAIL: cpdit $*: exit $got, expected $want"; cat "$err"; fail=1; return
    fi
    if ! cat "$out" "$err" | grep -q -- "$pat"; then
        echo "FAIL: cpdit $*: output lacks '$pat'"; cat "$out" "$err"; fail=1; return
    fi
    echo "ok: cpdit $* -> $got"
}

expect 0 "usage: cpdit" --help
expect 0 "subcommands:" help
expect 2 "usage: cpdit" 
expect 0 "^cpdit [0-9]" --version
expect 0 "cuda: " --version
expect 0 "nccl: " --version
expect 0 "cudnn: " --version
expect 0 "mpi: *Open MPI" --version
expect 0 "hwloc: *[0-9]" --version
expect 0 "blas: " --version
expect 0 "video: *mp4.*webp.*png-frames" --version
expect 0 "configure: " version
expect 2 "unexpected argument 'x'" version x
expect 2 "unknown subcommand 'frobnicate'" frobnicate
expect 2 "unknown option '--frob'" --frob
expect 2 "unknown subcommand 'nope'" help nope
for sub in run submit probe plan tune forward tokenize bench builtin version help; do
    expect 0 "usage: cpdit" help "$sub"
done
expect 0 "usage: cpdit forward" forward --help
expect 0 "--component transformer|vae" help forward
expect 0 "--max-sequence-length" help tokenize
expect 0 "^builtin:tiny" builtin list
expect 2 "no built-in model 'huge'" builtin write /tmp/cpdit-never --name huge
d=$(mktemp -d)
expect 0 "parameters" builtin write "$d/tiny"
[ -f "$d/tiny/model_index.json" ] && [ -f "$d/tiny/transformer/diffusion_pytorch_model.safetensors" ] ||
    { echo "FAIL: builtin write left no folder"; fail=1; }
rm -rf "$d"
exit $fail
