#!/bin/sh
# wan_pipeline.sh — `cpdit run` of a tiny Wan 2.1 text-to-video folder (WanPipeline layout:
# transformer/ from tests/wan_test_tool, text_encoder/ UMT5 from tests/text_encoder_tool,
# tokenizer/ the built-in tiny T5 tokenizer, vae/ from tests/reference/make_wan_vae.py,
# scheduler/ Wan 2.1's UniPC config) against an independent plain-torch WanPipeline
# (tests/reference/wan_pipeline_reference.py: umt5_reference + wan_reference + unipc_reference
# + wan_vae_reference composed as WanPipeline.__call__ does), 9 frames of 64x64, 4 steps, CFG
# 5.0 with the empty negative prompt (WanPipeline's default), from the token ids
# `cpdit tokenize` gives (the tokenizer is tested against transformers' elsewhere):
#   1. 1 rank, --weight-format fp32: every frame within 1/255 (TOL_LEVELS) of the reference
#      after 8-bit conversion; the --dump noise equal to torch.randn(generator(seed)) exactly;
#   2. a 4-rank grid (ring 2 x ulysses 2) and 4 ranks as two CFG-parallel groups (ring 2): the
#      same bound;
#   3. the run without CFG (--guidance 1) is NOT within the bound (the comparison can fail);
#   4. the default output is an MP4 that ffprobe reads: 9 frames, 16 fps (--fps 8: 8), 64x64.
# Without torch the comparisons are skipped (2-4's runs and 4's checks still count); without
# numpy (the VAE generator) the test is skipped.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
CPDIT=${CPDIT:-$top_builddir/cpdit}
MPI_RUN=${MPI_RUN:-$top_builddir/tests/mpi-run.sh}
REF=$top_srcdir/tests/reference
PY=${PYTHON3:-/usr/bin/python3}
TOL_LEVELS=1
if ! "$PY" -c 'import numpy' >/dev/null 2>&1; then
    echo "SKIP: $PY cannot import numpy (the VAE generator)"
    exit 77
fi
have_torch=0
"$PY" -c 'import torch' >/dev/null 2>&1 && have_torch=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wan_pipeline.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
M=$tmp/m

# ---- the folder
set -e
"$CPDIT" builtin write "$tmp/bt" --text-only >/dev/null
mkdir -p "$M/scheduler"
cp -r "$tmp/bt/tokenizer_2" "$M/tokenizer"
vocab=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["model"]["vocab"]))' \
    "$M/tokenizer/tokenizer.json")
"$top_builddir/tests/wan_test_tool" make-model "$M/transformer" --layers 2 --heads 2 \
    --head-dim 16 --in 4 --text 32 --ffn 64 --freq 32 --dtype F32 >/dev/null
"$top_builddir/tests/text_encoder_tool" make-t5 "$M/text_encoder" --type umt5 --vocab "$vocab" \
    --d-model 32 --d-kv 8 --heads 4 --d-ff 64 --layers 2 --dtype F32 >/dev/null
"$PY" "$REF/make_wan_vae.py" model "$M" --z-dim 4 --seed 3
cat > "$M/scheduler/scheduler_config.json" <<'JSON'
{"_class_name": "UniPCMultistepScheduler", "_diffusers_version": "0.33.0",
 "disable_corrector": [], "final_sigmas_type": "zero", "flow_shift": 3.0,
 "lower_order_final": true, "num_train_timesteps": 1000, "predict_x0": true,
 "prediction_type": "flow_prediction", "solver_order": 2, "solver_p": null,
 "solver_type": "bh2", "thresholding": false, "timestep_spacing": "linspace",
 "use_flow_sigmas": true, "use_karras_sigmas": false}
JSON
cat > "$M/model_index.json" <<'JSON'
{"_class_name": "WanPipeline", "_diffusers_version": "0.33.0",
 "scheduler": ["diffusers", "UniPCMultistepScheduler"],
 "text_encoder": ["transformers", "UMT5EncoderModel"],
 "tokenizer": ["transformers", "T5TokenizerFast"],
 "transformer": ["diffusers", "WanTransformer3DModel"], "vae": ["diffusers", "AutoencoderKLWan"]}
JSON
set +e

PROMPT="a red circle"
run() { # NP OUT [options]: png frames into OUT
    np=$1 out=$2; shift 2
    $MPI_RUN -np "$np" "$CPDIT" run --model "$M" --prompt "$PROMPT" --frames 9 --width 64 \
        --height 64 --steps 4 --weight-format fp32 --format png-frames --output "$out" "$@" \
        >"$out.log" 2>&1 || { echo "FAIL: cpdit run $*:"; cat "$out.log"; fail=1; }
}
run 1 "$tmp/r1" --dump "$tmp/d1"
run 4 "$tmp/r4" --ring 2 --ulysses 2
run 4 "$tmp/r4cfg" --ring 2 --ulysses 1
run 1 "$tmp/rnocfg" --guidance 1
clip=00000-0-a-red-circle
for d in r1 r4 r4cfg rnocfg; do
    n=$(ls "$tmp/$d/$clip" 2>/dev/null | grep -c '^frame_.*\.png$')
    [ "$n" = 9 ] || { echo "FAIL: $d: $n frames, want 9"; fail=1; }
done

if [ "$have_torch" = 1 ]; then
    ids=$("$CPDIT" tokenize --model "$M" "$PROMPT" | sed -n 's/^umt5: //p')
    neg=$("$CPDIT" tokenize --model "$M" "" | sed -n 's/^umt5: //p')
    "$PY" "$REF/wan_pipeline_reference.py" "$M" "$tmp/ref" --ids "$ids" --neg-ids "$neg" \
        --frames 9 --height 64 --width 64 --steps 4 --guidance 5.0 --seed 0 ||
        { echo "FAIL: reference"; exit 1; }
    check() { # NAME DIR [NOISE] [expect-fail]
        line=$("$PY" "$REF/wan_pipeline_reference.py" compare "$tmp/ref" "$2/$clip" ${3:-}) ||
            { echo "FAIL: $1: $line"; fail=1; return; }
        echo "$1: $line"
        lv=$(echo "$line" | sed 's/.*max_levels \([0-9]*\).*/\1/')
        if [ "${4:-}" = expect-fail ]; then
            [ "$lv" -gt "$TOL_LEVELS" ] ||
                { echo "FAIL: $1 within $TOL_LEVELS levels: the comparison cannot fail"; fail=1; }
        elif [ "$lv" -gt "$TOL_LEVELS" ]; then
            echo "FAIL: $1: $lv levels > $TOL_LEVELS"; fail=1
        fi
    }
    check "1 rank vs reference" "$tmp/r1" "$tmp/d1/00000/noise.safetensors"
    nm=$("$PY" "$REF/wan_pipeline_reference.py" compare "$tmp/ref" "$tmp/r1/$clip" \
        "$tmp/d1/00000/noise.safetensors" | sed 's/.*noise_max //')
    [ "$nm" = 0 ] || { echo "FAIL: --dump noise differs from torch.randn by $nm"; fail=1; }
    check "ring 2 x ulysses 2 vs reference" "$tmp/r4"
    check "2 CFG-parallel groups of ring 2 vs reference" "$tmp/r4cfg"
    check "no CFG vs reference (must differ)" "$tmp/rnocfg" "" expect-fail
else
    echo "SKIP (comparisons only): $PY cannot import torch"
fi

# ---- MP4 (the default format), when this build writes it
if ! "$top_builddir/tests/video_writer_tool" available mp4 >/dev/null 2>&1; then
    echo "SKIP (mp4 only): this build has no mp4 writer"
else
    "$CPDIT" run --model "$M" --prompt "$PROMPT" --frames 9 --width 64 --height 64 --steps 1 \
        --fps 8 --output "$tmp/mp4" >"$tmp/mp4.out" 2>"$tmp/mp4.log" ||
        { echo "FAIL: mp4 run"; cat "$tmp/mp4.log"; fail=1; }
    f=$(cat "$tmp/mp4.out")
    grep -q "cpdit: video: frames 9, fps 8, duration 1.125 s, codec h264, file $f" "$tmp/mp4.log" ||
        { echo "FAIL: the video line"; cat "$tmp/mp4.log"; fail=1; }
    case $f in *.mp4) ;; *) echo "FAIL: not an .mp4: $f"; fail=1 ;; esac
    if command -v ffprobe >/dev/null 2>&1; then
        got=$(ffprobe -v error -count_frames -show_entries \
            stream=nb_read_frames,width,height,r_frame_rate -of csv=p=0 "$f")
        [ "$got" = "64,64,8/1,9" ] || { echo "FAIL: ffprobe: $got, want 64,64,8/1,9"; fail=1; }
        echo "ffprobe: $got"
    fi
fi
[ $fail = 0 ] && echo "PASS"
exit $fail
