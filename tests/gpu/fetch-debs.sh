#!/bin/sh
# fetch-debs.sh [DIR] — download (here, where Debian's archive is reachable) the Debian 12
# packages that cpdit builds and runs with, and their library dependencies, into DIR (default
# .debs) so that tests/gpu/device-checks.sh can unpack them on a GPU machine that has the CUDA
# toolkit but no Open MPI, libyaml, hwloc, OpenBLAS, jansson or libpng and cannot download.
# Packages every Linux has (libc, libgcc, zlib, ...) are left out. About 30 MB.
set -eu
dir=${1:-.debs}
mkdir -p "$dir"
want="libopenmpi-dev openmpi-bin openmpi-common libopenmpi3 libyaml-dev libyaml-0-2 libpng-dev
      libpng16-16 libhwloc-dev libhwloc15 libopenblas-dev libopenblas0-pthread
      libopenblas-pthread-dev libopenblas0 libjansson-dev libjansson4 libgfortran5 libquadmath0
      libpmix2 libfabric1 libucx0 libevent-2.1-7 libevent-pthreads-2.1-7 libevent-core-2.1-7
      libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1
      libxnvctrl0 libnuma1 libudev1 libltdl7 libmunge2 libhwloc-plugins libpciaccess0
      libefa1 libcurl3-gnutls libnghttp2-14 librtmp1 libssh2-1 libpsl5 libbrotli1
      libldap-2.5-0 libsasl2-2 libgnutls30 libnettle8 libhogweed6 libtasn1-6 libp11-kit0
      libidn2-0 libunistring2 libgmp10 libffi8 libkrb5-3 libk5crypto3 libkrb5support0
      libgssapi-krb5-2 libkeyutils1 libcom-err2 libssl3 libsasl2-modules-db libdb5.3 libz3-4
      zlib1g-dev libhwloc-dev"
cd "$dir"
for p in $want; do
    ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -qq "$p" 2>/dev/null || echo "fetch-debs: no package $p (skipped)" >&2
done
du -sh .
