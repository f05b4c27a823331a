#!/bin/sh
# The Wan 2.1 VAE decoder (AutoencoderKLWan, lib/models/wan/wan_vae.h) on a small random model
# in diffusers' layout (tests/reference/make_wan_vae.py: base_dim 8, z_dim 4, dim_mult
# [1,2,4,4], temperal_downsample [false,true,true]), through `cpdit forward --component vae`:
#   1. fp32: 3 latent frames (5 x 4) -> 9 frames (40 x 32) equal the plain-torch reference
#      (tests/reference/wan_vae_reference.py, float64, the whole clip at once) within 1e-4
#      (max abs), and so does WanPipeline's de-normalised-latent path (wan_vae_tool denorm);
#      B = 2, 5 latent frames (3 x 6) -> 17 frames too, and the tiled decode (enable_tiling's
#      tiled_decode, 3 x 3 tiles of 32 px every 24 over a 7 x 9 latent); skipped when torch is
#      missing; a latent within one tile decodes as the plain decode (1e-5);
#   2. 2, 3, 4 ranks (rows split, one rank without rows at h = 3) equal 1 rank within 1e-5;
#   3. bf16 weights: native (bf16 convolutions) within 0.05 max abs / 1.5e-2 relative RMS of
#      the fp32 path; the cpu-bf16 backend (bf16 activations), 1 and 3 ranks, within
#      0.08 / 3e-2;
#   4. a bad latent shape is refused naming the tensor, weights that do not fit the config
#      naming the file and the tensor;
#   5. memory: peak RSS decoding 21 latent frames (81 frames) at 16 x 16 (128 x 128) is within
#      2 MiB of decoding 5 (17 frames); keeping the frames would add 12 MiB.
# Needs numpy in $PYTHON3 for the model generator (skip 77 without it).
PY=${PYTHON3:-/usr/bin/python3}
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
CPDIT=${CPDIT:-$top_builddir/cpdit}
TOOL=$top_builddir/tests/wan_vae_tool
REF=$top_srcdir/tests/reference
if ! "$PY" -c 'import numpy' >/dev/null 2>&1; then
    echo "SKIP: $PY cannot import numpy (the model generator)"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-wan-vae-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
set -e
"$PY" "$REF/make_wan_vae.py" model "$tmp/m" --seed 1
"$PY" "$REF/make_wan_vae.py" model "$tmp/mb" --seed 1 --dtype bf16
"$PY" "$REF/make_wan_vae.py" latents "$tmp/in.st" --shape 1,4,3,5,4 --seed 2
"$PY" "$REF/make_wan_vae.py" latents "$tmp/in5.st" --shape 2,4,5,3,6 --seed 3
fwd() { # model input output [ranks] [options]
    m=$1 i=$2 o=$3 n=${4:-1}
    shift 3; [ $# -gt 0 ] && shift
    $MPI_RUN -np "$n" "$CPDIT" forward --model "$m" --component vae --inputs "$i" --output "$o" "$@"
}
fwd "$tmp/m" "$tmp/in.st" "$tmp/c1.st" 1 --weight-format fp32
fwd "$tmp/m" "$tmp/in5.st" "$tmp/c5.st" 1 --weight-format fp32
"$TOOL" denorm "$tmp/m" "$tmp/in.st" "$tmp/cn.st"
"$PY" "$REF/make_wan_vae.py" latents "$tmp/int.st" --shape 1,4,3,7,9 --seed 5
"$TOOL" tiled "$tmp/m" "$tmp/int.st" "$tmp/ct.st" 32 24
"$TOOL" tiled "$tmp/m" "$tmp/in.st" "$tmp/ct1.st" 64 48

# 1. against the torch reference
if "$PY" -c 'import torch' >/dev/null 2>&1; then
    "$PY" "$REF/wan_vae_reference.py" "$tmp/m" "$tmp/in.st" "$tmp/r1.st"
    "$PY" "$REF/wan_vae_reference.py" "$tmp/m" "$tmp/in5.st" "$tmp/r5.st"
    "$PY" "$REF/wan_vae_reference.py" "$tmp/m" "$tmp/in.st" "$tmp/rn.st" --denormalize
    echo "fp32 vs reference, 3 -> 9 frames:"; "$TOOL" compare "$tmp/c1.st" "$tmp/r1.st" 1e-4
    echo "fp32 vs reference, B 2, 5 -> 17 frames:"; "$TOOL" compare "$tmp/c5.st" "$tmp/r5.st" 1e-4
    echo "de-normalised latents vs reference:"; "$TOOL" compare "$tmp/cn.st" "$tmp/rn.st" 1e-4
    "$PY" "$REF/wan_vae_reference.py" "$tmp/m" "$tmp/int.st" "$tmp/rt.st" --tiled 32 24
    echo "tiled (3 x 3 tiles of 32 px every 24) vs reference:"
    "$TOOL" compare "$tmp/ct.st" "$tmp/rt.st" 1e-4
else
    echo "SKIP (comparison only): $PY cannot import torch"
fi

echo "tiled, one tile (64 px over 40 x 32) vs the plain decode:"
"$TOOL" compare "$tmp/ct1.st" "$tmp/c1.st" 1e-5

# 2. ranks vs one rank
for n in 2 3 4; do
    fwd "$tmp/m" "$tmp/in.st" "$tmp/p$n.st" $n --weight-format fp32
    echo "$n ranks vs 1:"; "$TOOL" compare "$tmp/p$n.st" "$tmp/c1.st" 1e-5
done
fwd "$tmp/m" "$tmp/in5.st" "$tmp/p5.st" 4 --weight-format fp32
echo "4 ranks vs 1 (h = 3: a rank without rows):"; "$TOOL" compare "$tmp/p5.st" "$tmp/c5.st" 1e-5
fwd "$tmp/m" "$tmp/in.st" "$tmp/off.st" 2 --weight-format fp32 --vae-parallel off
echo "--vae-parallel off vs 1 rank:"; "$TOOL" compare "$tmp/off.st" "$tmp/c1.st" 1e-5

# 3. bf16
fwd "$tmp/mb" "$tmp/in.st" "$tmp/b32.st" 1 --weight-format fp32
fwd "$tmp/mb" "$tmp/in.st" "$tmp/bn.st" 1
fwd "$tmp/mb" "$tmp/in.st" "$tmp/bb.st" 1 --backend cpu-bf16
fwd "$tmp/mb" "$tmp/in.st" "$tmp/bb3.st" 3 --backend cpu-bf16
echo "bf16 native vs fp32:"; "$TOOL" compare "$tmp/bn.st" "$tmp/b32.st" 0.05 1.5e-2
echo "cpu-bf16 vs fp32:"; "$TOOL" compare "$tmp/bb.st" "$tmp/b32.st" 0.08 3e-2
echo "cpu-bf16 on 3 ranks vs fp32:"; "$TOOL" compare "$tmp/bb3.st" "$tmp/b32.st" 0.08 3e-2
set +e

# 4. a bad shape: (B, C, h, w) as for FLUX
"$PY" "$REF/make_wan_vae.py" latents "$tmp/bad.st" --shape 1,4,5,4 --seed 2
if fwd "$tmp/m" "$tmp/bad.st" "$tmp/bad_out.st" 1 2>"$tmp/bad.err"; then
    echo "FAIL: a 4-D latent_sample was accepted"; exit 1
fi
grep -q 'latent_sample.*(B, 4, T, h, w)' "$tmp/bad.err" || { cat "$tmp/bad.err"; exit 1; }
# weights that do not fit the config: refused at open, naming the file and the tensor
cp -r "$tmp/m" "$tmp/mbad"
sed 's/"base_dim": 8/"base_dim": 16/' "$tmp/m/vae/config.json" >"$tmp/mbad/vae/config.json"
if fwd "$tmp/mbad" "$tmp/in.st" "$tmp/bad_out.st" 1 2>"$tmp/bad.err"; then
    echo "FAIL: weights of base_dim 8 accepted for base_dim 16"; exit 1
fi
grep -q 'diffusion_pytorch_model.safetensors: tensor "decoder.conv_in.weight".*expected' \
    "$tmp/bad.err" || { cat "$tmp/bad.err"; exit 1; }

# 5. memory flat in the clip length
r5=$("$TOOL" rss "$tmp/m" 5 16 16) || exit 1
r21=$("$TOOL" rss "$tmp/m" 21 16 16) || exit 1
echo "T 5: $r5; T 21: $r21"
k5=${r5##* } k21=${r21##* }
[ "${r5%% peak*}" = "frames 17" ] && [ "${r21%% peak*}" = "frames 81" ] || exit 1
if [ $((k21 - k5)) -gt 2048 ]; then
    echo "FAIL: peak RSS grew by $((k21 - k5)) KiB from 5 to 21 latent frames"; exit 1
fi
exit 0
