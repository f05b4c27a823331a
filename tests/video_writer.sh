#!/bin/sh
# video_writer.sh — the videos of lib/io/video_writer.h read back by outside tools.
#   MP4: `ffprobe -v error -count_frames -show_streams -show_format -of json` must show codec
#        h264, pix_fmt yuv420p, BT.709, the size, the frame count (decoded: nb_read_frames),
#        the frame rate as a fraction (16/1, 24000/1001), the duration T/fps, and every metadata
#        key as given (prompt with UTF-8 and XML specials, seed, steps, model, grid); ffmpeg
#        decodes it to raw rgb24 and the mean absolute error vs the source frames must stay
#        under a bound per case (8-bit levels; x264 CRF given; measured values in the table).
#   WebP: `webpmux -info` shows the frame count, the canvas, the loop count, each frame lossless
#         or lossy as asked, and the XMP chunk with the metadata.
# Skips (77) only when neither ffprobe nor webpmux is installed (install-deps.sh --tests
# installs both: ffmpeg, webp) or this build writes neither format; says which part it skips.
set -u
: "${top_builddir:=.}"
TOOL="$top_builddir/tests/video_writer_tool"
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-video-sh-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
fail=0
ran=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# json FILE PATH -> value (via the tool, jansson)
json() { "$TOOL" json "$1" "$2"; }
expect() { # FILE PATH WANT
    got=$(json "$1" "$2" 2>&1)
    [ "$got" = "$3" ] || bad "$(basename "$1"): $2 = '$got', expected '$3'"
}

# mp4 case: NAME T W H FPS CRF FPS_FRACTION MAE_MAX
mp4_case() {
    name=$1 t=$2 w=$3 h=$4 fps=$5 crf=$6 frac=$7 mae_max=$8
    out="$work/$name.mp4"
    if ! "$TOOL" write mp4 "$out" "$t" "$w" "$h" "$fps" "$crf" --raw "$work/$name.rgb" \
            > "$work/$name.txt"; then
        bad "$name: the writer failed"; return
    fi
    ffprobe -v error -count_frames -show_streams -show_format -of json "$out" > "$work/$name.json" \
        || { bad "$name: ffprobe cannot read $out"; return; }
    j="$work/$name.json"
    expect "$j" streams.0.codec_name h264
    expect "$j" streams.0.pix_fmt yuv420p
    expect "$j" streams.0.color_space bt709
    expect "$j" streams.0.width "$w"
    expect "$j" streams.0.height "$h"
    expect "$j" streams.0.nb_read_frames "$t"
    expect "$j" streams.0.r_frame_rate "$frac"
    expect "$j" streams.0.avg_frame_rate "$frac"
    for key in prompt seed steps model grid; do
        want=$(sed -n "s/^tag\.$key=//p" "$work/$name.txt")
        expect "$j" "format.tags.$key" "$want"
    done
    dur=$(json "$j" streams.0.duration)
    want=$(sed -n 's/^duration=//p' "$work/$name.txt")
    awk -v a="$dur" -v b="$want" 'BEGIN { d = a - b; exit !(d < 1e-3 && d > -1e-3) }' \
        || bad "$name: duration $dur, the writer says $want"
    bytes=$(sed -n 's/^bytes=//p' "$work/$name.txt")
    expect "$j" format.size "$bytes"
    ffmpeg -v error -i "$out" -f rawvideo -pix_fmt rgb24 -y "$work/$name.dec.rgb" \
        || { bad "$name: ffmpeg cannot decode $out"; return; }
    m=$("$TOOL" mae "$work/$name.rgb" "$work/$name.dec.rgb") || { bad "$name: $m"; return; }
    mae=$(echo "$m" | sed -n 's/^mae=\([0-9.]*\).*/\1/p')
    printf '  %-10s %3d frames %4dx%-4d fps %-10s crf %2s  %7s bytes  mean abs error %s levels (bound %s)\n' \
        "$name" "$t" "$w" "$h" "$frac" "$crf" "$bytes" "$mae" "$mae_max"
    awk -v a="$mae" -v b="$mae_max" 'BEGIN { exit !(a < b) }' \
        || bad "$name: mean absolute error $mae levels >= $mae_max"
    ran=$((ran + 1))
}

# webp case: NAME T W H [--lossy Q]
webp_case() {
    name=$1 t=$2 w=$3 h=$4; shift 4
    out="$work/$name.webp"
    "$TOOL" write webp "$out" "$t" "$w" "$h" 16 "$@" > "$work/$name.txt" \
        || { bad "$name: the writer failed"; return; }
    webpmux -info "$out" > "$work/$name.info" 2>&1 || { bad "$name: webpmux cannot read it"; return; }
    grep -q "^Canvas size: $w x $h\$" "$work/$name.info" || bad "$name: canvas not $w x $h"
    grep -q "Number of frames: $t\$" "$work/$name.info" || bad "$name: not $t frames"
    grep -q "Loop Count : 0" "$work/$name.info" || bad "$name: loop count not 0"
    grep -q "Features present:.*animation.*XMP metadata" "$work/$name.info" \
        || bad "$name: no animation + XMP metadata"
    kind=lossy
    case " $* " in *" --lossless "*) kind=lossless ;; esac
    n_kind=$(grep -c "^ *[0-9]*:.* $kind\$" "$work/$name.info")
    [ "$n_kind" = "$t" ] || bad "$name: $n_kind of $t frames are $kind"
    if ! webpmux -get xmp "$out" -o "$work/$name.xmp" >/dev/null 2>&1 ||
            ! grep -q '<cpdit:seed>42</cpdit:seed>' "$work/$name.xmp"; then
        bad "$name: XMP has no seed"
    fi
    echo "  $name: $t $kind frames ${w}x$h, $(sed -n 's/^bytes=//p' "$work/$name.txt") bytes, webpmux reads it"
    ran=$((ran + 1))
}

if why=$("$TOOL" available mp4); then
    if command -v ffprobe >/dev/null 2>&1 && command -v ffmpeg >/dev/null 2>&1; then
        echo "mp4 read back by ffprobe/ffmpeg:"
        # bounds: 4:2:0 chroma alone costs 2.76 levels on the 64x64 clip (CRF 0 measures that);
        # measured 3.26 / 3.47 / 3.05 (64x64, 80x48, one frame; CRF 18), 1.47 (256x256, CRF 18) and
        # 1.78 (256x256, CRF 28) with Debian 12's libx264
        mp4_case clip17 17 64 64 16 18 16/1 4.0
        mp4_case ntsc9 9 80 48 23.976 18 24000/1001 4.0
        mp4_case single 1 64 64 16 18 16/1 4.0
        mp4_case big 17 256 256 16 18 16/1 2.0
        mp4_case crf28 17 256 256 16 28 16/1 3.5
    else
        echo "SKIP (mp4 part): ffprobe/ffmpeg not found (apt-get install ffmpeg)" >&2
    fi
else
    echo "SKIP (mp4 part): $why" >&2
fi

if why=$("$TOOL" available webp); then
    if command -v webpmux >/dev/null 2>&1; then
        echo "webp read back by webpmux:"
        webp_case anim17 17 64 64 --lossless
        webp_case lossy17 17 64 64
        webp_case odd5 5 65 33 --lossy 90
    else
        echo "SKIP (webp part): webpmux not found (apt-get install webp)" >&2
    fi
else
    echo "SKIP (webp part): $why" >&2
fi

[ $fail -eq 0 ] || exit 1
if [ $ran -eq 0 ]; then
    echo "SKIP: nothing to check (no ffprobe/webpmux, or no mp4/webp in this build)" >&2
    exit 77
fi
echo "video_writer.sh: $ran clips checked"
exit 0
