#!/bin/sh
# forward_vae.sh — `cpdit forward --component vae` on the built-in model's VAE: reads
# latent_sample, writes sample (1, 3, 8h, 8w) float32; split by rows over 2 ranks the same
# numbers (max |diff| <= 1e-5 max |out|), with --vae-parallel off (rank 0 alone) the same bytes;
# a missing input tensor is a clear error with exit 2. A bf16 copy of the VAE: the default
# (native) bf16 convolutions within VAE_BF16_TOL of the fp32 path, and split over 2 ranks the
# same numbers again. (The decoder's numbers are checked against
# PyTorch in vae_decoder_reference.sh.) Needs python3 with numpy to write the input file.
CPDIT=${CPDIT:-./cpdit}
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
PY=${PYTHON3:-/usr/bin/python3}
"$PY" -c "import numpy" 2>/dev/null || { echo "no python3 with numpy: skip"; exit 77; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail=0
"$CPDIT" builtin write "$work/model" >/dev/null || { echo "FAIL: builtin write"; exit 1; }
"$PY" - "$work" <<'PY' || exit 1
import json, struct, sys
import numpy as np
def write(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        b = arr.astype('<f4').tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(header).encode(); h += b' ' * (-len(h) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
def read(path):
    d = open(path, 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; hdr = json.loads(d[8:8 + n])
    t = hdr["sample"]; a, b = t["data_offsets"]
    return np.frombuffer(d[8 + n + a:8 + n + b], '<f4').reshape(t["shape"]), t["dtype"]
rng = np.random.default_rng(3)
write(sys.argv[1] + "/in.safetensors", {"latent_sample": rng.standard_normal((1, 16, 5, 7))})
write(sys.argv[1] + "/bad.safetensors", {"latents": rng.standard_normal((1, 16, 5, 7))})
PY
"$CPDIT" forward --model "$work/model" --component vae --inputs "$work/in.safetensors" \
    --output "$work/out1.safetensors" || { echo "FAIL: forward vae on 1 rank"; fail=1; }
$MPI_RUN -np 2 "$CPDIT" forward --model "$work/model" --component vae \
    --inputs "$work/in.safetensors" --output "$work/out2.safetensors" ||
    { echo "FAIL: forward vae on 2 ranks"; fail=1; }
# a bf16 copy of the VAE (FLUX's checkpoints are bf16): native = bf16 convolutions
mkdir -p "$work/bf16" && cp -r "$work/model/vae" "$work/bf16/" || exit 1
"$PY" - "$work/model/vae/diffusion_pytorch_model.safetensors" \
    "$work/bf16/vae/diffusion_pytorch_model.safetensors" <<'PY' || exit 1
import json, struct, sys
import numpy as np
d = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; hdr = json.loads(d[8:8 + n])
out, blobs, off = {}, [], 0
for k, t in hdr.items():
    if k == "__metadata__":
        out[k] = t; continue
    a, b = t["data_offsets"]; x = np.frombuffer(d[8 + n + a:8 + n + b], '<f4')
    u = x.view('<u4').astype(np.uint64)
    h = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype('<u2')   # round to nearest even
    blobs.append(h.tobytes()); out[k] = {"dtype": "BF16", "shape": t["shape"],
                                         "data_offsets": [off, off + len(blobs[-1])]}
    off += len(blobs[-1])
j = json.dumps(out).encode(); j += b' ' * (-len(j) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(j)) + j + b''.join(blobs))
PY
for f in native fp32; do
    "$CPDIT" forward --model "$work/bf16" --component vae --inputs "$work/in.safetensors" \
        --output "$work/bf16-$f.safetensors" --weight-format $f ||
        { echo "FAIL: forward vae (bf16 checkpoint, $f)"; fail=1; }
done
$MPI_RUN -np 2 "$CPDIT" forward --model "$work/bf16" --component vae \
    --inputs "$work/in.safetensors" --output "$work/bf16-native2.safetensors" ||
    { echo "FAIL: forward vae on 2 ranks (bf16 checkpoint)"; fail=1; }
$MPI_RUN -np 2 "$CPDIT" forward --model "$work/model" --component vae --vae-parallel off \
    --inputs "$work/in.safetensors" --output "$work/out2off.safetensors" ||
    { echo "FAIL: forward vae on 2 ranks, --vae-parallel off"; fail=1; }
"$PY" - "$work" <<'PY' || fail=1
import json, struct, sys
import numpy as np
VAE_BF16_TOL = 2e-2  # measured: see the printed figure
def read(path):
    d = open(path, 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; hdr = json.loads(d[8:8 + n])
    t = hdr["sample"]; a, b = t["data_offsets"]
    return np.frombuffer(d[8 + n + a:8 + n + b], '<f4').reshape(t["shape"]), t["dtype"]
a, dt = read(sys.argv[1] + "/out1.safetensors"); b, _ = read(sys.argv[1] + "/out2.safetensors")
c, _ = read(sys.argv[1] + "/out2off.safetensors")
rel = float(np.abs(a.astype(np.float64) - b).max() / np.abs(a).max())
# bf16 convolutions (the default, native) against the fp32 reference path: bf16 rounding of
# the inputs of ~20 convolutions, not equal, but close
bn, _ = read(sys.argv[1] + "/bf16-native.safetensors")
bf, _ = read(sys.argv[1] + "/bf16-fp32.safetensors")
b2, _ = read(sys.argv[1] + "/bf16-native2.safetensors")
relf = float(np.abs(bn.astype(np.float64) - bf).max() / np.abs(bf).max())
rel2 = float(np.abs(bn.astype(np.float64) - b2).max() / np.abs(bn).max())
print("bf16 checkpoint: native (bf16 convolutions) vs fp32 relative %.3g, 1 vs 2 ranks "
      "(native) relative %.3g" % (relf, rel2))
ok = dt == "F32" and a.shape == (1, 3, 40, 56) and np.isfinite(a).all() and a.std() > 1e-3 \
     and rel <= 1e-5 and np.array_equal(a, c) and 0 < relf <= VAE_BF16_TOL and rel2 <= 1e-5
print("sample", a.shape, dt, "std %.3g" % a.std(), "1 vs 2 ranks relative %.3g" % rel,
      "--vae-parallel off equal:", np.array_equal(a, c))
sys.exit(0 if ok else 1)
PY
"$CPDIT" forward --model "$work/model" --component vae --inputs "$work/bad.safetensors" \
    --output "$work/out3.safetensors" >"$work/log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "latent_sample" "$work/log" && [ ! -e "$work/out3.safetensors" ] ||
    { echo "FAIL: missing latent_sample gave exit $rc"; cat "$work/log"; fail=1; }
exit $fail
