#!/bin/sh
# builtin_wan_tiny.sh — the built-in tiny Wan 2.1 pipeline (builtin:wan-tiny, lib/builtin/
# builtin_wan.c), with no download:
#   1. `cpdit builtin list` names it; `cpdit builtin write` twice gives byte-identical folders;
#   2. `cpdit run --model builtin:wan-tiny --prompt P` with no other option writes a 17-frame
#      64x64 MP4 at 16 fps (ffprobe reads it back: frames, size, rate) and the index-line
#      fields on stderr (frames, fps, duration, codec, file);
#   3. --dump writes noise.safetensors (1, 16, 5, 8, 8) and schedule.json (8 UniPC steps from
#      timestep 999); --flow-shift 5 changes the timesteps;
#   4. png-frames on a 4-rank grid (ring 2 x ulysses 2) equal 1 rank within 1 level, and the
#      clip is not constant (spread of the levels > 1);
#   5. bad requests: --frames 8 (not 4k + 1) and --format gif exit 2 naming the option.
# Needs numpy (4's PNG reader) for 4; ffprobe for 2's read-back (skipped without).
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
CPDIT=${CPDIT:-$top_builddir/cpdit}
MPI_RUN=${MPI_RUN:-$top_builddir/tests/mpi-run.sh}
PY=${PYTHON3:-/usr/bin/python3}
REF=$top_srcdir/tests/reference
tmp=$(mktemp -d "${TMPDIR:-/tmp}/builtin_wan_tiny.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export CPDIT_CACHE="$tmp/cache"
fail=0
err() { echo "FAIL: $*"; fail=1; }

"$CPDIT" builtin list | grep -q '^builtin:wan-tiny ' || err "builtin list does not name wan-tiny"
"$CPDIT" builtin write "$tmp/w1" --name wan-tiny >/dev/null && "$CPDIT" builtin write "$tmp/w2" \
    --name wan-tiny >/dev/null || err "builtin write"
diff -r "$tmp/w1" "$tmp/w2" >/dev/null || err "two writes differ"

P="a red circle"
if "$top_builddir/tests/video_writer_tool" available mp4 >/dev/null 2>&1; then
    "$CPDIT" run --model builtin:wan-tiny --prompt "$P" --output "$tmp/o" --dump "$tmp/d" \
        >"$tmp/o.out" 2>"$tmp/o.log" || { err "run"; cat "$tmp/o.log"; }
    f=$(cat "$tmp/o.out")
    grep -q "cpdit: video: frames 17, fps 16, duration 1.062 s, codec h264, file $f\$" \
        "$tmp/o.log" || { err "the video line"; cat "$tmp/o.log"; }
    if command -v ffprobe >/dev/null 2>&1; then
        got=$(ffprobe -v error -count_frames -show_entries \
            stream=nb_read_frames,width,height,r_frame_rate -of csv=p=0 "$f")
        [ "$got" = "64,64,16/1,17" ] || err "ffprobe: $got, want 64,64,16/1,17"
    fi
    grep -q '"timesteps": \[999, ' "$tmp/d/00000/schedule.json" || err "schedule.json"
    n=$(sed 's/.*"timesteps": \[//; s/\].*//' "$tmp/d/00000/schedule.json" | tr ',' '\n' | wc -l)
    [ "$n" = 8 ] || err "$n timesteps, want 8"
    "$PY" -c 'import json,struct,sys
f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; h=json.loads(f.read(n))
sys.exit(h["latents"]["shape"] != [1,16,5,8,8])' "$tmp/d/00000/noise.safetensors" ||
        err "noise.safetensors shape"
else
    echo "SKIP (mp4 only): no mp4 writer in this build"
fi
"$CPDIT" run --model builtin:wan-tiny --prompt "$P" --format png-frames --output "$tmp/s5" \
    --flow-shift 5 --dump "$tmp/d5" >/dev/null 2>&1 || err "--flow-shift 5"
cmp -s "$tmp/d5/00000/schedule.json" "$tmp/d/00000/schedule.json" 2>/dev/null &&
    err "--flow-shift 5 gives the same schedule"

"$CPDIT" run --model builtin:wan-tiny --prompt "$P" --format png-frames --output "$tmp/p1" \
    >/dev/null 2>&1 || err "png-frames, 1 rank"
$MPI_RUN -np 4 "$CPDIT" run --model builtin:wan-tiny --prompt "$P" --format png-frames \
    --output "$tmp/p4" --ring 2 --ulysses 2 >/dev/null 2>&1 || err "png-frames, 4 ranks"
if "$PY" -c 'import numpy' >/dev/null 2>&1; then
    c=00000-0-a-red-circle
    line=$("$PY" "$REF/wan_pipeline_reference.py" compare-frames "$tmp/p1/$c" "$tmp/p4/$c")
    echo "4 ranks vs 1: $line"
    echo "$line" | grep -q '^frames 17 max_levels [01] ' || err "4 ranks vs 1: $line"
    sp=$(echo "$line" | sed 's/.*spread //')
    "$PY" -c "import sys; sys.exit(not float('$sp') > 1)" || err "a constant clip ($sp)"
fi

for bad in "--frames 8:frames" "--format gif:--format"; do
    opt=${bad%%:*} key=${bad#*:}
    # shellcheck disable=SC2086
    msg=$("$CPDIT" run --model builtin:wan-tiny --prompt "$P" $opt --output "$tmp/bad" 2>&1)
    rc=$?
    [ $rc = 2 ] && echo "$msg" | grep -q -- "$key" || err "$opt: exit $rc, $msg"
done
[ $fail = 0 ] && echo PASS
exit $fail
