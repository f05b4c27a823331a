#!/bin/sh
# contact_sheet_video.sh — `cpdit builtin sheet` of folders of clips (builtin:wan-tiny, 2 clips
# of 9 frames at 64x64, 2 steps, the same seeds in every format):
#   1. png-frames: the sheet is 2 rows of first / middle / last frame (208 x 146: three 64-pixel
#      tiles 2 apart, 6 pixels of gutter around each cell), contact-sheet.txt names
#      "(frames 0, 4, 8 of 9)"; each of the 6 tiles equals its frame PNG exactly;
#   2. mp4: the same layout; each tile equals (within 1 level) ffmpeg's decode of that frame
#      (select=eq(n,F)) converted as the stream is tagged: BT.709, limited range, full chroma
#      interpolation (ffmpeg's default conversion assumes BT.601: 8.7 levels off on average,
#      and further from the source frames), and is within a mean of MEAN_MAX levels of the
#      png-frames tile (lossy coding of these noisy random-weight frames costs 17-19);
#   3. webp: the same layout; each tile within a mean of MEAN_MAX levels of its png-frames
#      frame and nearer to it than to the next frame's PNG (the right frame);
#   4. an index line whose "frames" disagrees with its clip (10 for 9) is refused, naming the
#      clip and both counts, with no contact-sheet file written.
# Exit 77 (skip) without mp4 support or ffmpeg.
set -u
top_builddir=${top_builddir:-.}
CPDIT=${CPDIT:-$top_builddir/cpdit}
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
CPDIT=$(abs "$CPDIT")
PNGC=$(abs "$top_builddir/tests/png_compare")
VTOOL=$(abs "$top_builddir/tests/video_writer_tool")
"$VTOOL" available mp4 >/dev/null 2>&1 || {
    echo "skip: no mp4 in this build"; exit 77; }
command -v ffmpeg >/dev/null 2>&1 || { echo "skip: no ffmpeg"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-sheetv-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
status=0
fail() { echo "FAIL: $*"; status=1; }

MEAN_MAX=24
BT709=scale=in_color_matrix=bt709:in_range=tv:out_range=pc:flags=bicubic+accurate_rnd+full_chroma_int,format=rgb24
formats="png-frames mp4"
"$VTOOL" available webp >/dev/null 2>&1 \
    && formats="$formats webp"
for f in $formats; do
    cat > "m_$f.yaml" <<YAML
model: builtin:wan-tiny
output: {dir: out_$f, format: $f}
defaults: {width: 64, height: 64, num_frames: 9, steps: 2}
seeds: [1]
prompts: [a red fox, a paper boat]
YAML
    "$CPDIT" run "m_$f.yaml" > "run_$f.log" 2>&1 || { fail "run $f"; cat "run_$f.log"; continue; }
    "$CPDIT" builtin sheet "out_$f" > "sheet_$f.log" 2>&1 || { fail "sheet $f"; cat "sheet_$f.log"; continue; }
    grep -q "2 clips (first, middle, last frame);" "sheet_$f.log" || fail "$f: $(cat "sheet_$f.log")"
    size=$(file "out_$f/contact-sheet.png" | sed -n 's/.*PNG image data, \([0-9]* x [0-9]*\),.*/\1/p')
    [ "$size" = "208 x 146" ] || fail "$f: sheet is $size, expected 208 x 146"
    n=$(grep -c "(frames 0, 4, 8 of 9): a" "out_$f/contact-sheet.txt")
    [ "$n" = 2 ] || { fail "$f: $n clip lines"; cat "out_$f/contact-sheet.txt"; }
done

# clip K (0, 1), frame F: the file (png-frames) or the ffmpeg decode (mp4); tile (X, Y)
tile_at() { # K T -> X,Y of tile T (0 1 2) of row K
    echo "$((6 + $2 * 66)),$((6 + $1 * 70))"
}
clip_of() { sed -n "$(($1 + 1))s/^[0-9]* 0 \([^ ]*\) (frames.*/\1/p" "$2/contact-sheet.txt"; }
for k in 0 1; do
    t=0
    for fr in 0 4 8; do
        at=$(tile_at $k $t)
        c=$(clip_of $k out_png-frames)
        png=out_png-frames/$c/frame_0000$fr.png
        r=$("$PNGC" out_png-frames/contact-sheet.png "$png" 0 --at "$at" 2>&1) \
            || fail "png-frames clip $k frame $fr tile at $at: $r"
        m=$(clip_of $k out_mp4)
        ffmpeg -v error -i "out_mp4/$m" -vf "select=eq(n\,$fr),$BT709" -frames:v 1 \
            -y "dec_${k}_$fr.png" || fail "ffmpeg cannot decode out_mp4/$m"
        r=$("$PNGC" out_mp4/contact-sheet.png "dec_${k}_$fr.png" 1 --at "$at" 2>&1) \
            || fail "mp4 clip $k frame $fr vs ffmpeg's decode: $r"
        r=$("$PNGC" out_mp4/contact-sheet.png "$png" 255 --at "$at" --mean $MEAN_MAX 2>&1) \
            || fail "mp4 clip $k frame $fr vs the PNG frame: $r"
        echo "mp4 clip $k frame $fr vs png-frames: $r"
        case $formats in *webp*)
            r=$("$PNGC" out_webp/contact-sheet.png "$png" 255 --at "$at" --mean $MEAN_MAX 2>&1) \
                || fail "webp clip $k frame $fr vs the PNG frame: $r"
            echo "webp clip $k frame $fr vs png-frames: $r"
            mine=$(echo "$r" | sed -n 's/.*mean \([0-9.]*\).*/\1/p')
            next=out_png-frames/$c/frame_0000$(( fr == 8 ? 7 : fr + 1 )).png
            other=$("$PNGC" out_webp/contact-sheet.png "$next" 255 --at "$at" --mean 255 2>&1 |
                    sed -n 's/.*mean \([0-9.]*\).*/\1/p')
            awk -v a="$mine" -v b="$other" 'BEGIN { exit !(a < b) }' \
                || fail "webp clip $k tile $t: mean $mine to frame $fr, $other to $next" ;;
        esac
        t=$((t + 1))
    done
done

# 4. the index disagrees with the clip: refused, nothing written
rm -f out_mp4/contact-sheet.*
sed -i '1s/"frames":9/"frames":10/' out_mp4/index.jsonl
if "$CPDIT" builtin sheet out_mp4 > bad.log 2>&1; then
    fail "a clip of 9 frames indexed as 10 was accepted"
fi
grep -q "holds 9 frames, its index line says 10" bad.log || fail "message: $(cat bad.log)"
ls out_mp4/contact-sheet.* >/dev/null 2>&1 && fail "a contact-sheet file was written"
[ $status = 0 ] && echo "contact_sheet_video.sh: ok ($formats)"
exit $status
