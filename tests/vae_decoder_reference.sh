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
