#!/bin/sh
# forward_vae.sh — `cpdit forward --component vae` on the built-in model's VAE: reads
# latent_sample, writes sample (1, 3, 8h, 8w) float32; split by rows over 2 ranks the same
# numbers (max |diff| <= 1e-5 max |out|), with --vae-parallel off (rank 0 alone) the same bytes;
# a missing input tensor is a clear error with exit 2. (The decoder's numbers are checked against
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
$MPI_RUN -np 2 "$CPDIT" forward --model "$work/model" --component vae --vae-parallel off \
    --inputs "$work/in.safetensors" --output "$work/out2off.safetensors" ||
    { echo "FAIL: forward vae on 2 ranks, --vae-parallel off"; fail=1; }
"$PY" - "$work" <<'PY' || fail=1
import json, struct, sys
import numpy as np
def read(path):
    d = open(path, 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; hdr = json.loads(d[8:8 + n])
    t = hdr["sample"]; a, b = t["data_offsets"]
    return np.frombuffer(d[8 + n + a:8 + n + b], '<f4').reshape(t["shape"]), t["dtype"]
a, dt = read(sys.argv[1] + "/out1.safetensors"); b, _ = read(sys.argv[1] + "/out2.safetensors")
c, _ = read(sys.argv[1] + "/out2off.safetensors")
rel = float(np.abs(a.astype(np.float64) - b).max() / np.abs(a).max())
ok = dt == "F32" and a.shape == (1, 3, 40, 56) and np.isfinite(a).all() and a.std() > 1e-3 \
     and rel <= 1e-5 and np.array_equal(a, c)
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
