#!/bin/sh
# install-deps.sh [--tests|--bench] — install the Debian 12 packages cpdit builds with; with
# --tests also what the test suite uses to build reference data (python3-numpy, python3-torch,
# clang for the fuzz targets, iproute2 for the network-namespace test, ffmpeg's ffprobe and
# webp's webpmux to read back the videos cpdit writes) and Slurm + munge
# (tests/slurm.sh starts a one-machine Slurm of its own); with --bench also oneDNN (libdnnl-dev,
# ~40 MB: only the benchmark tests/bench/vae_conv_onednn uses it; not in CI). Idempotent: only
# missing packages are installed. Needs root or sudo.
set -eu
pkgs="build-essential autoconf automake libtool pkg-config
      libopenmpi-dev openmpi-bin libyaml-dev libpng-dev libhwloc-dev libopenblas-dev libjansson-dev
      libplplot-dev libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libwebp-dev"
case "${1:-}" in
    --tests) pkgs="$pkgs python3 python3-numpy python3-torch python3-sentencepiece clang iproute2 ffmpeg webp
                   slurm-wlm slurmctld slurmd slurm-client munge" ;;
    --bench) pkgs="$pkgs libdnnl-dev" ;;
    "") ;;
    *) echo "usage: $0 [--tests|--bench]" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
echo "install-deps.sh: installing$missing" >&2
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
