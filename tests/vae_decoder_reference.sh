#!/bin/sh
# The VAE decoder against a PyTorch reference written from AutoencoderKL's definition
# (tests/reference/vae_reference.py, plain torch ops in float64): relative error <= 1e-4.
# Skips (77) when the Python interpreter has no torch (Debian: apt-get install python3-torch).
PY=${PYTHON3:-/usr/bin/python3}
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "SKIP: $PY cannot import torch"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-vae-ref-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
"$PY" "$top_srcdir/tests/reference/vae_reference.py" "$tmp" || exit 1
"$top_builddir/tests/test_vae_decoder" --reference "$tmp"
rc=$?
[ $rc -eq 0 ] || exit $rc
# the same decode split by rows over 3 ranks (cpdit forward), against the same reference
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
CPDIT=${CPDIT:-$top_builddir/cpdit}
for c in flux_like three_level; do
    $MPI_RUN -np 3 "$CPDIT" forward --model "$tmp/$c/model" --component vae --weight-format fp32 \
        --inputs "$tmp/$c/inputs.safetensors" --output "$tmp/$c/par.safetensors" || exit 1
    "$top_builddir/tests/test_vae_decoder" --compare "$tmp/$c/par.safetensors" \
        "$tmp/$c/expected.safetensors" || exit 1
done
