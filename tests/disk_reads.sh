#!/bin/sh
# disk_reads.sh — "no disk reads after the first step when the weights fit in memory": the
# per-step storage reads that `cpdit run --verbose` prints (/proc/self/io read_bytes around each
# sampler step; lib/pipeline/disk_reads.h) on a builtin:tiny folder written to a disk-backed
# folder of the build tree, 4 steps at 64x64, while a helper drops the folder's checkpoint
# files from the page cache every few ms (posix_fadvise DONTNEED, python3), so that any read
# of the weights during a step has to go to the disk:
#   resident (--weight-memory 1G: the 2.1 MB transformer is made once at load): steps 2-4 read
#       at most BOUND bytes each (0 seen). The bound allows for code pages of cpdit or of a
#       library evicted by other processes and faulted back in (a readahead window or two of
#       128 KiB); it is far below the 2.1 MB of bf16 weights every streamed step needs.
#   streamed (--weight-memory 64K: the transformer's blocks are made at every step, their map
#       pages dropped after packing), 8 steps: steps 2-8 read more than 3 x BOUND in all (0 to
#       19 MB per step seen: it depends on the race with the dropper, hence 7 steps), so the
#       check can fail.
# Exit 77 where the kernel does not report reads (no /proc/self/io), without python3, or when
# reading a dropped file shows no reads on this filesystem (tmpfs, or accounting off).
set -u
CPDIT=${CPDIT:-./cpdit}
top_builddir=${top_builddir:-.}
PY=${PYTHON3:-python3}
BOUND=262144
command -v "$PY" >/dev/null 2>&1 || PY=python3
command -v "$PY" >/dev/null 2>&1 || { echo "SKIP: no python3 (drops pages with posix_fadvise)"; exit 77; }
[ -r /proc/self/io ] || { echo "SKIP: no /proc/self/io: the kernel does not report reads"; exit 77; }
work=$(mktemp -d "$top_builddir/tests/disk_reads.XXXXXX") || exit 1
dropper=""
cleanup() {
    [ -n "$dropper" ] && kill "$dropper" 2>/dev/null && wait "$dropper" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
fs=$(stat -f -c %T "$work" 2>/dev/null)
case $fs in tmpfs|ramfs) echo "SKIP: $work is on $fs (no block device)"; exit 77 ;; esac

# the page dropper: fsync each file once (dirty pages cannot be dropped), then drop them all
# every 2 ms until killed; with --probe FILE: drop FILE, read it, print the bytes read
cat >"$work/drop.py" <<'EOF'
import glob, os, sys, time
def drop(f):
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
def read_bytes():
    with open('/proc/self/io') as io:
        for line in io:
            if line.startswith('read_bytes:'):
                return int(line.split()[1])
    return -1
if sys.argv[1] == '--probe':
    f = sys.argv[2]
    fd = os.open(f, os.O_RDONLY); os.fsync(fd); os.close(fd)
    drop(f)
    r0 = read_bytes()
    with open(f, 'rb') as h:
        h.read()
    print(read_bytes() - r0)
    sys.exit(0)
files = glob.glob(os.path.join(sys.argv[1], '**', '*.safetensors'), recursive=True)
for f in files:
    fd = os.open(f, os.O_RDONLY); os.fsync(fd); os.close(fd)
while True:
    for f in files:
        drop(f)
    time.sleep(0.002)
EOF

model="$work/model"
"$CPDIT" builtin write "$model" --name tiny >"$work/write.log" 2>&1 ||
    { echo "FAIL: cpdit builtin write"; cat "$work/write.log"; exit 1; }
probe=$("$PY" "$work/drop.py" --probe "$model/transformer/diffusion_pytorch_model.safetensors")
[ "${probe:-0}" -gt 0 ] 2>/dev/null ||
    { echo "SKIP: reading a dropped file read ${probe:-?} bytes from storage here ($fs)"; exit 77; }
echo "ok: probe: a dropped 2.1 MB file read $probe bytes from storage ($fs)"

"$PY" "$work/drop.py" "$model" &
dropper=$!
sleep 1

fail=0
# run NAME WEIGHT_MEMORY STEPS: prints the bytes read in steps 2.., one line each (failures on
# stderr, status 1)
run() {
    "$CPDIT" run --model "$model" --prompt "a lighthouse" --seed 7 --width 64 --height 64 \
        --steps "$3" --max-sequence-length 64 --verbose --weight-memory "$2" \
        --output "$work/$1" >"$work/$1.log" 2>&1 ||
        { echo "FAIL: $1: cpdit run failed"; cat "$work/$1.log"; return 1; } >&2
    grep -q "^\[cpdit[^]]*\] step 1/$3 [0-9.]* s, disk read [0-9]* bytes$" "$work/$1.log" ||
        { echo "FAIL: $1: no step lines with disk reads"; cat "$work/$1.log"; return 1; } >&2
    grep -q "^cpdit: disk read: step 1 [0-9]* bytes, later steps [0-9]* bytes$" "$work/$1.log" ||
        { echo "FAIL: $1: no disk read summary"; cat "$work/$1.log"; return 1; } >&2
    sed -n "s/^\[cpdit[^]]*\] step \([2-9]\|1[0-9]\)\/$3 [0-9.]* s, disk read \([0-9]*\) bytes$/\2/p" \
        "$work/$1.log"
}

if reads=$(run resident 1G 4); then
    echo "ok: resident: steps 2-4 read $(echo $reads) bytes"
    for r in $reads; do
        [ "$r" -le $BOUND ] || { echo "FAIL: resident: a step after the first read $r bytes (bound $BOUND)"; fail=1; }
    done
    [ "$(echo "$reads" | wc -l)" -eq 3 ] || { echo "FAIL: resident: not 3 later steps"; fail=1; }
else
    fail=1
fi
if reads=$(run streamed 64K 8); then
    total=0
    for r in $reads; do total=$((total + r)); done
    echo "ok: streamed: steps 2-8 read $(echo $reads) bytes"
    [ "$(echo "$reads" | wc -l)" -eq 7 ] || { echo "FAIL: streamed: not 7 later steps"; fail=1; }
    [ $total -gt $((3 * BOUND)) ] ||
        { echo "FAIL: streamed: steps 2-8 read $total bytes: the pages were not dropped?"; fail=1; }
else
    fail=1
fi
exit $fail
