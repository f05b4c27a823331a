#!/bin/sh
# device-checks.sh — build cpdit with CUDA and run every GPU check, then print one summary table.
#
# Made for a borrowed GPU machine with a short time budget (one run, < 10 minutes): it needs
# the CUDA toolkit there, and takes what else it needs from the working tree:
#   - a release tarball (cpdit-*.tar.gz from `make dist` here) when the machine has no
#     autotools, so that nothing needs autoreconf there;
#   - .debs/ (from tests/gpu/fetch-debs.sh here; CPDIT_FORCE_DEBS=1 uses them anyway) when it has no Open MPI, libyaml, hwloc,
#     OpenBLAS, jansson or libpng: the packages are unpacked under /tmp/cpdit-debroot, never
#     into /, and used through OPAL_PREFIX, PKG_CONFIG_PATH/SYSROOT and LD_LIBRARY_PATH.
# Usage (repository root):  tests/gpu/device-checks.sh [BUILD_DIR]     (default /tmp/cpdit-gpu)
# Results: $OUT/device-checks.txt when $OUT is set (the device tool brings it back), and stdout.
#
# Checks (each PASS / FAIL / SKIP / MISSING — MISSING = not in this build yet):
#   cuda-device      the device is seen, a kernel runs (tests/test_cuda_device)
#   cuda-kernels     flash attention + LSE, LSE merge, cuBLASLt linear vs double loops
#   comm-gpu         host-staged MPI on 1/2/4 ranks sharing the GPU; NCCL on 1 rank
#   op-conformance   every backend op on CUDA vs the CPU reference (bf16 tolerance)
#   forward-gpu      `cpdit forward --backend cuda` vs CPU fp32 (<= 1e-2 relative)
#   forward-gpu-cp   2 and 4 ranks on one GPU (host-staged) vs 1 rank
#   flux-dev-step    FLUX.1-dev-sized transformer step vs the ~74 TFLOP floor at the bf16 rate
#   pipeline-gpu     the whole pipeline on the built-in model on the GPU
#   bench            bf16 GEMM and attention rates (tests/cuda_bench)
set -u
src=$(pwd)
build=${1:-/tmp/cpdit-gpu}
out=${OUT:-}
log() { echo "device-checks: $*" >&2; }
summary=""
record() { summary="$summary$(printf '%-16s %-8s %s' "$1" "$2" "$3")
"; }
started=$(date +%s)

# ---- dependencies: use the machine's, else unpack the carried Debian packages
if { [ -n "${CPDIT_FORCE_DEBS:-}" ] || ! command -v mpicc >/dev/null 2>&1; } && [ -d "$src/.debs" ]; then
    R=/tmp/cpdit-debroot
    if [ ! -x "$R/usr/bin/orterun" ]; then
        mkdir -p "$R"
        for f in "$src"/.debs/*.deb; do dpkg -x "$f" "$R" || log "cannot unpack $f"; done
    fi
    mkdir -p "$R/bin"
    for t in mpicc mpirun mpiexec; do ln -sf "$R/usr/bin/$t.openmpi" "$R/bin/$t"; done
    L=$R/usr/lib/x86_64-linux-gnu
    export OPAL_PREFIX=$R/usr
    export PATH=$R/bin:$R/usr/bin:$PATH
    export LD_LIBRARY_PATH=$L:$L/openmpi/lib:$L/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LIBRARY_PATH=$L:$L/openblas-pthread
    export PKG_CONFIG_PATH=$L/pkgconfig:$L/openblas-pthread/pkgconfig:$R/usr/share/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=$R
    log "using the carried Debian packages under $R"
fi
for t in mpicc mpirun pkg-config nvcc make gcc; do
    command -v $t >/dev/null 2>&1 || { [ $t = nvcc ] && [ -x /usr/local/cuda/bin/nvcc ]; } ||
        log "warning: $t not found"
done
export PATH=$PATH:/usr/local/cuda/bin

# ---- configure and build (from the tarball when there are no autotools)
mkdir -p "$build"
tarball=$(ls "$src"/cpdit-*.tar.gz 2>/dev/null | head -n 1)
scripts=$src
if [ ! -x "$src/configure" ]; then
    if [ -n "$tarball" ]; then
        rm -rf /tmp/cpdit-src && mkdir -p /tmp/cpdit-src && tar -xzf "$tarball" -C /tmp/cpdit-src
        src=$(ls -d /tmp/cpdit-src/cpdit-* | head -n 1)
        log "building from $(basename "$tarball")"
    elif command -v autoreconf >/dev/null 2>&1; then
        (cd "$src" && ./autogen.sh) >"$build/autogen.log" 2>&1
    else
        log "no configure, no cpdit-*.tar.gz and no autoreconf: run 'make dist' here and carry the tarball"; exit 1
    fi
fi
cd "$build" || exit 1
if ! "$src/configure" --with-cuda >configure.log 2>&1; then
    tail -n 30 configure.log; record build FAIL "configure --with-cuda (configure.log)"; printf '%s' "$summary"; exit 1
fi
jobs=$(nproc 2>/dev/null || echo 8)
if ! make -j"$jobs" >make.log 2>&1 || ! make -j"$jobs" check TESTS= >>make.log 2>&1; then
    grep -E 'error' make.log | head -n 20; record build FAIL "make (make.log)"; printf '%s' "$summary"; exit 1
fi
record build PASS "$(( $(date +%s) - started )) s"
MPI_RUN="$build/tests/mpi-run.sh"; export MPI_RUN
top_builddir=$build; export top_builddir
CPDIT=$build/cpdit; export CPDIT

# ---- one check: NAME, then a command; exit 0 PASS, 77 SKIP, else FAIL. Output to NAME.log.
check() {
    name=$1; shift
    t0=$(date +%s)
    timeout 300 "$@" >"$build/$name.log" 2>&1
    rc=$?
    dt=$(( $(date +%s) - t0 ))
    case $rc in
        0) record "$name" PASS "$dt s" ;;
        77) record "$name" SKIP "$(grep -m 1 -i "skip" "$build/$name.log" || tail -n 1 "$build/$name.log")" ;;
        *) record "$name" FAIL "exit $rc after $dt s ($name.log)"; tail -n 20 "$build/$name.log" >&2 ;;
    esac
}
missing() { record "$1" MISSING "$2"; }

check cuda-device "$build/tests/test_cuda_device"
check cuda-kernels "$build/tests/test_cuda_kernels"
check comm-gpu sh "$src/tests/comm_gpu.sh"
if [ -x "$build/tests/test_backend_ops" ]; then
    check op-conformance "$build/tests/test_backend_ops" --backend cuda
else
    missing op-conformance "tests/test_backend_ops not built"
fi
if "$CPDIT" --version 2>/dev/null | grep -q 'backends:.*cuda'; then
    missing forward-gpu "script step not written yet: compare forward --backend cuda vs cpu"
else
    missing forward-gpu "no cuda backend in this build (issue 13)"
    missing forward-gpu-cp "no cuda backend in this build"
    missing flux-dev-step "no cuda backend in this build"
    missing pipeline-gpu "no cuda backend in this build"
fi
if [ -x "$build/tests/cuda_bench" ]; then
    check bench "$build/tests/cuda_bench"
else
    missing bench "tests/cuda_bench not built"
fi

report=/dev/null
[ -n "$out" ] && report=$out/device-checks.txt
{
    echo "== cpdit device checks: $(date -u +%FT%TZ), $(( $(date +%s) - started )) s"
    "$CPDIT" --version 2>&1 | sed -n '1,4p'
    printf '%-16s %-8s %s\n' check result detail
    printf '%s' "$summary"
    for f in cuda-kernels bench comm-gpu; do
        [ -f "$build/$f.log" ] && { echo "-- $f"; grep -v '^$' "$build/$f.log" | tail -n 25; }
    done
} | tee "$report"
case $summary in *FAIL*) exit 1 ;; esac
exit 0
