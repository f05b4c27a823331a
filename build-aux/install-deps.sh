#!/bin/sh
# install-deps.sh — install the Debian 12 packages cpdit builds and tests with
# (idempotent: apt-get skips what is already installed). Needs root or sudo.
set -eu
pkgs="build-essential autoconf automake libtool pkg-config
      libopenmpi-dev openmpi-bin libyaml-dev libpng-dev libhwloc-dev libopenblas-dev libjansson-dev
      python3 python3-numpy"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
