#!/bin/sh
# job_video.sh — manifest batches of clips on builtin:wan-tiny (9 frames of 64x64, 2 steps):
#   1. --check lists frames, fps and format per item, the names end in .mp4;
#   2. 1 rank: four MP4s; ffprobe reads each back (9 frames, its fps: 16, or 8 where the
#      prompt says, 64x64); the index has one line per item with frames, fps, duration,
#      format, codec and the file;
#      the defaults' negative_prompt is in the clip's metadata and changes its frames;
#   3. 2 ranks, 2 dp groups: the same four files, frames equal to 1 rank's (decoded RGB, byte
#      for byte), the index the same items;
#   4. SIGKILL of every rank while each group leader holds a clip half written (the test
#      hold before the write, CPDIT_TEST_HOLD) leaves temporary files only; a planted torn MP4
#      under a final name and a torn index line; the rerun leaves exactly the set: six MP4s
#      with 9 frames each, six index lines with six different files, no temporary name;
#   5. png-frames and webp: a folder of 9 frame PNGs, an animated WebP; a rerun finds them done;
#   6. --vae-parallel world on 3 ranks as 3 dp groups (2 clips: group 2 idles and still decodes):
#      every frame PNG within 1/255 of the 1-rank frames, the index says "vae":"world" and the
#      summary how the decode ran (each of the 3 ranks took part in both decodes).
# Exit 77 (skip) without mp4 support or ffprobe.
set -u
top_builddir=${top_builddir:-.}
CPDIT=${CPDIT:-$top_builddir/cpdit}
MPI_RUN=${MPI_RUN:-$top_builddir/tests/mpi-run.sh}
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
CPDIT=$(abs "$CPDIT") MPI_RUN=$(abs "$MPI_RUN") # the test works in its own folder
PNGC=$(abs "$top_builddir/tests/png_compare")
"$top_builddir/tests/video_writer_tool" available mp4 >/dev/null 2>&1 || {
    echo "skip: no mp4 in this build"; exit 77; }
command -v ffprobe >/dev/null 2>&1 && command -v ffmpeg >/dev/null 2>&1 || {
    echo "skip: no ffprobe/ffmpeg"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-video-XXXXXX") || exit 1
bg=
cleanup() {
    [ -n "$bg" ] && kill -9 "$bg" 2>/dev/null
    for p in $(sed -n 's/.*test hold at write: rank [0-9]* pid \([0-9]*\).*/\1/p' \
               "$work"/*.log 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

cat > "$work/m.yaml" <<'YAML'
model: builtin:wan-tiny
output: {dir: out}
defaults:
  width: 64
  height: 64
  num_frames: 9
  steps: 2
  flow_shift: 3.0
  negative_prompt: "blurry, static"
seeds: [1, 2]
prompts:
  - a red fox
  - {prompt: a paper boat, fps: 8}
YAML
lines() { if [ -f "$1/index.jsonl" ]; then wc -l < "$1/index.jsonl"; else echo 0; fi; }
# probe FILE: "frames,rate,width,height" of the first video stream
probe() {
    ffprobe -v error -count_frames -select_streams v:0 -show_entries \
        stream=nb_read_frames,r_frame_rate,width,height -of csv=p=0 "$1" |
        awk -F, '{print $4 "," $3 "," $1 "," $2}'
}
rgb_sum() { ffmpeg -v error -i "$1" -f rawvideo -pix_fmt rgb24 - | md5sum | cut -d' ' -f1; }
# check_set DIR N: N complete clips (9 frames, 64x64, their fps), N index lines, one per file
check_set() {
    n=$(ls "$1" | grep -c '\.mp4$')
    [ "$n" -eq "$2" ] || fail "$1: $n MP4s, want $2"
    [ "$(lines "$1")" -eq "$2" ] || fail "$1: $(lines "$1") index lines, want $2"
    u=$(sed -n 's/.*"file":"\([^"]*\)".*/\1/p' "$1/index.jsonl" | sort -u | wc -l)
    [ "$u" -eq "$2" ] || fail "$1: $u distinct files in the index, want $2"
    ls -A "$1" | grep -q '\.tmp\.' && fail "$1: a temporary name is left: $(ls -A "$1")"
    for f in "$1"/*.mp4; do
        case "$f" in *paper-boat*) want="9,8/1,64,64" ;; *) want="9,16/1,64,64" ;; esac
        got=$(probe "$f")
        [ "$got" = "$want" ] || fail "ffprobe $f: $got, want $want"
    done
}

# 1. the plan
cd "$work" || exit 1
"$CPDIT" run m.yaml --check > check.out 2>&1 || { fail "--check"; cat check.out; }
grep -q '^video: *9 frames at 16 fps (0.56 s), mp4, flow_shift 3$' check.out ||
    { fail "--check: no video line"; cat check.out; }
grep -q ' 2 *9 *8 *mp4  00002-1-a-paper-boat.mp4 ' check.out ||
    { fail "--check: item 2's frames/fps/format"; cat check.out; }

# 2. one rank
"$CPDIT" run m.yaml --output one > one.log 2>&1 || { fail "1 rank"; cat one.log; }
check_set one 4
grep -q '"steps":2,"guidance":5.0,' one/index.jsonl || fail "index: guidance is the CFG scale"
for k in 0 1 2 3; do
    case $k in 2|3) fps=8.0 dur=1.125 ;; *) fps=16.0 dur=0.5625 ;; esac
    grep -q "^{\"index\":$k,.*\"frames\":9,\"fps\":$fps,\"duration\":$dur,\"format\":\"mp4\",\"codec\":\"h264\",\"file\":\"0000$k-[12]-a-[a-z-]*\.mp4\",\"status\":\"ok\"" \
        one/index.jsonl || { fail "index line $k"; cat one/index.jsonl; }
done
ffprobe -v error -show_entries format_tags=negative_prompt,flow_shift,frames -of csv=p=0 \
    one/00000-1-a-red-fox.mp4 | grep -q '^blurry, static,3,9$\|^9,3,blurry, static$\|blurry' ||
    fail "the clip's metadata"

# the negative prompt reaches the pipeline: without it the same item's frames differ
sed -e 's/  negative_prompt: "blurry, static"/  negative_prompt: ""/' -e 's/seeds: \[1, 2\]/seeds: [1]/' \
    m.yaml > n.yaml
"$CPDIT" run n.yaml --output neg > neg.log 2>&1 || { fail "negative_prompt run"; cat neg.log; }
[ "$(rgb_sum neg/00000-1-a-red-fox.mp4)" != "$(rgb_sum one/00000-1-a-red-fox.mp4)" ] ||
    fail "negative_prompt has no effect"

# 3. two dp groups
"$MPI_RUN" -np 2 "$CPDIT" run m.yaml --output two --dp 2 > two.log 2>&1 ||
    { fail "2 dp groups"; cat two.log; }
check_set two 4
for f in one/*.mp4; do
    b=$(basename "$f")
    [ "$(rgb_sum "$f")" = "$(rgb_sum "two/$b")" ] || fail "$b: 2 dp groups differ from 1 rank"
done
grep -q '"grid":{"dp":2,' two/index.jsonl || fail "2 dp groups: grid on the index lines"

# 4. SIGKILL while clips are half written, torn files, rerun
cat > k.yaml <<'YAML'
model: builtin:wan-tiny
output: {dir: kill}
defaults: {width: 64, height: 64, num_frames: 9, steps: 2}
seeds: [1, 2]
prompts: [a red fox, a blue kite, a green frog]
YAML
touch hold
: > kill.log # before the background run opens it: the loop below reads it at once
CPDIT_TEST_HOLD="write:$work/hold" "$MPI_RUN" -np 2 "$CPDIT" run k.yaml --dp 2 \
    > kill.log 2>&1 &
bg=$!
i=0
while [ "$(grep -c 'test hold at write' kill.log)" -lt 2 ] && kill -0 "$bg" 2>/dev/null &&
      [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
[ "$(grep -c 'test hold at write' kill.log)" -eq 2 ] || { fail "no hold"; cat kill.log; }
ls -A kill | grep -q '^\.0000[01]-.*\.mp4\.tmp\.' || fail "no half-written clip: $(ls -A kill)"
for p in $(sed -n 's/.*test hold at write: rank [0-9]* pid \([0-9]*\).*/\1/p' kill.log); do
    kill -9 "$p"
done
wait "$bg"; bg=
# the lock's holder must be gone, not a zombie that mpirun has yet to reap (kill -0 passes)
for p in $(sed -n 's/.*test hold at write: rank [0-9]* pid \([0-9]*\).*/\1/p' kill.log); do
    i=0
    while [ -e "/proc/$p" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
done
rm -f hold
ls kill | grep -q '\.mp4$' && fail "a clip under its final name after the kill: $(ls kill)"
head -c 9000 one/00000-1-a-red-fox.mp4 > kill/00004-1-a-green-frog.mp4 # torn
printf '{"index": 1, "prompt": "a torn li' >> kill/index.jsonl
"$MPI_RUN" -np 2 "$CPDIT" run k.yaml --dp 2 > rerun.log 2>&1 || { fail "rerun"; cat rerun.log; }
grep -q 'temporary files removed' rerun.log || fail "rerun: no temporary files removed"
check_set kill 6
n=$("$CPDIT" run k.yaml --check | sed -n 's/^resume: *\([0-9]*\) of 6 items already done.*/\1/p')
[ "$n" = 6 ] || fail "--check after the rerun: $n of 6 done"

# 5. png-frames and webp
for fmt in png-frames webp; do
    sed -e "s/output: {dir: out}/output: {dir: $fmt, format: $fmt}/" -e 's/seeds: \[1, 2\]/seeds: [3]/' \
        m.yaml > f.yaml
    "$CPDIT" run f.yaml > "$fmt.log" 2>&1 || { fail "$fmt"; cat "$fmt.log"; }
    "$CPDIT" run f.yaml > "$fmt.2.log" 2>&1 || fail "$fmt rerun"
    grep -q '2 items in the manifest, 2 already done' "$fmt.2.log" ||
        { fail "$fmt: the rerun did not find the clips done"; cat "$fmt.2.log"; }
done
[ "$(ls png-frames/00000-3-a-red-fox | grep -c '^frame_0000[0-8]\.png$')" -eq 9 ] ||
    fail "png-frames: $(ls png-frames/00000-3-a-red-fox)"
head -c 4 webp/00001-3-a-paper-boat.webp | grep -q RIFF || fail "webp: not a RIFF file"
grep -q '"format":"png-frames","codec":"png","file":"00000-3-a-red-fox"' png-frames/index.jsonl ||
    fail "png-frames index line"

# 6. the world decode: every rank of the job decodes each clip, frames gathered on its owner
sed -e "s/output: {dir: out}/output: {dir: world, format: png-frames}/" \
    -e 's/seeds: \[1, 2\]/seeds: [3]/' m.yaml > w.yaml
"$MPI_RUN" -np 3 "$CPDIT" run w.yaml --output world --dp 3 --vae-parallel world \
    > world.log 2>&1 || { fail "world decode, 3 ranks"; cat world.log; }
nf=0
for d in png-frames/0000*/; do
    b=$(basename "$d")
    for f in "$d"frame_*.png; do
        nf=$((nf + 1))
        "$PNGC" "$f" "world/$b/$(basename "$f")" 1 > cmp.out 2>&1 ||
            fail "world decode: $b/$(basename "$f") vs 1 rank: $(cat cmp.out)"
    done
done
[ $nf -eq 18 ] || fail "world decode: compared $nf frames, want 18"
[ "$(grep -c '"vae":"world"' world/index.jsonl)" -eq 2 ] ||
    { fail "world decode: index lines"; cat world/index.jsonl; }
grep -q 'vae decode: 2 clips, .*split over all 3 ranks of the job.*; each rank took part in 2)' world.log ||
    { fail "world decode: the summary"; cat world.log; }
[ $status -eq 0 ] && echo "ok: world decode: 18 frames of 2 clips on 3 ranks within 1/255 of 1 rank"

[ $status -eq 0 ] && echo "ok: job_video.sh"
exit $status
