#!/bin/sh
# gpu-steps.sh — the model-level GPU checks of tests/gpu/device-checks.sh, one per call:
#
#   sh tests/gpu/gpu-steps.sh forward        cpdit forward on the GPU tables vs --backend cpu fp32
#   sh tests/gpu/gpu-steps.sh forward-cp     2 and 4 ranks sharing the GPU (host-staged) vs 1
#   sh tests/gpu/gpu-steps.sh flux-dev-step  FLUX.1-dev-width transformer step vs the GEMM floor
#   sh tests/gpu/gpu-steps.sh pipeline       the whole pipeline on builtin:shapes, GPU vs CPU
#
# Environment: CPDIT (the cpdit binary), top_builddir (the build folder: tests/flux_test_tool,
# tests/flux_bench, tests/png_compare), MPI_RUN (tests/mpi-run.sh), WORK (scratch folder),
# BENCH_LOG (tests/cuda_bench's output, for flux-dev-step's bf16 GEMM rate; run if absent),
# FLUX_DEV_FULL=1 (flux-dev-step on the full 19 + 38 blocks instead of 2 + 4 scaled by FLOPs),
# GPU_STEPS_BACKEND (default cuda: the backend under test, bf16 activations; "cpu" dry-runs the
# script's logic on a machine without a GPU, every comparison then being CPU vs CPU),
# GPU_STEPS_BACKEND_FP32 (default $G-fp32, i.e. cuda-fp32: the same kernels with fp32
# activations; for G = cpu, cpu itself; when the build does not list it, its checks are noted
# as not run and the fp32-weight comparisons fall back to $G at the bf16 bound).
# Every comparison prints "ok: ..." or "FAIL: ..."; the last line is "RESULT: <summary>".
# Exit 0 when every comparison holds, 1 otherwise (77: no usable cuda backend).
#
# Tolerances (max|gpu - ref| / max|ref|, flux_test_tool compare):
#   cuda-fp32 (fp32 activations) with fp32 weights (--weight-format fp32: cuBLASLt COMPUTE_32F,
#   fp32 attention and convolutions) vs the CPU fp32 path: 1e-4, as the CPU meets against
#   PyTorch: any excess is a kernel bug, not storage;
#   cuda (bf16 activations: every op's output rounded to bf16 once), fp32 or bf16 weights, and
#   cuda-fp32 with bf16 weights (weights and each linear's input rounded to bf16, fp32
#   accumulation) vs the CPU fp32 path: 1e-2 (issue 13; the CPU bf16-weight path sees 3e-3).
#   The VAE decode with bf16 activations: 3e-2 vs CPU fp32, and 3e-2 for 2 ranks vs 1 (its 20-odd
#   convolutions and group norms each round once, and a row split changes where the attention
#   rounds; cpu-bf16, the same storage on the host, measured 1.32e-2 vs fp32 and 1.34e-2 for
#   2 ranks vs 1 on the built-in VAE).
#   The forward step's RESULT gives the worst error of each table, so that the first GPU run
#   tells bf16 storage error (cuda minus cuda-fp32) from kernel error (cuda-fp32 at 1e-4).
#   N ranks vs 1 rank on the GPU, cuda-fp32 fp32 weights: 1e-4 (only summation order
#   differs); cuda (bf16): 1e-2.
#   Pipeline PNGs: cuda-fp32 fp32 weights vs CPU fp32 within 2/255 per channel; cuda (bf16
#   activations and weights) vs CPU bf16 weights (fp32 activations) within 64/255 (bf16
#   storage in the text encoders, every sampler step and the VAE drifts: cpu-bf16, the same
#   storage on the host, shows a largest pixel difference of 40/255 on builtin:shapes; with
#   bf16 weights only, the GPU was held to 24. A sanity bound that catches wrong images, not
#   a precision claim); 2 ranks vs 1 on the GPU within 1/255.
set -u
step=${1:-}
CPDIT=${CPDIT:?CPDIT: the cpdit binary}
B=${top_builddir:?top_builddir: the build folder}
MPI_RUN=${MPI_RUN:-$B/tests/mpi-run.sh}
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-steps.XXXXXX")}
T=$B/tests/flux_test_tool
mkdir -p "$WORK" || exit 1
G=${GPU_STEPS_BACKEND:-cuda}
fail=0
nok=0
nfail=0

usable() { "$CPDIT" --version 2>/dev/null | grep -A1 "^    $1 " | grep -q '^ *available:'; }
if ! usable "$G"; then
    echo "SKIP: the $G backend is not built in or has no device here"
    "$CPDIT" --version 2>&1 | grep -A1 "^    $G " || true
    exit 77
fi
# the fp32-activation table: "" when this build does not list it
G32=${GPU_STEPS_BACKEND_FP32:-$G-fp32}
usable "$G32" || { [ "$G" = cpu ] && G32=cpu; } || G32=""
[ -n "$G32" ] || echo "note: no ${GPU_STEPS_BACKEND_FP32:-$G-fp32} table in this build" \
    "(kernels/backend.c lists cpdit_backend_cuda_fp32()): fp32-activation checks not run"
# where fp32-weight runs go: the fp32 table (bound 1e-4), else the bf16 one (1e-2)
F32B=${G32:-$G} F32TOL=1e-4
[ -n "$G32" ] || F32TOL=1e-2

ok() { echo "ok: $*"; nok=$((nok + 1)); }
bad() { echo "FAIL: $*"; fail=1; nfail=$((nfail + 1)); }
# worst error per class of comparison (the number flux_test_tool compare prints)
worst=""
note_worst() { # CLASS "max|got-want|/max|want| = E (...)"
    e=$(echo "$2" | sed -n 's/.*= \([0-9.eE+-]*\) (.*/\1/p' | head -n 1)
    [ -n "$e" ] || return 0
    old=$(echo "$worst" | tr ';' '\n' | sed -n "s|^ *$1 \(.*\)$|\1|p")
    if [ -z "$old" ] || awk -v a="$e" -v b="$old" 'BEGIN { exit !(a + 0 > b + 0) }'; then
        worst=$(echo "$worst" | tr ';' '\n' | grep -v "^ *$1 " | grep -v '^$' | tr '\n' ';')
        worst="$worst $1 $e;"
    fi
}
# NAME GOT WANT TOL [CLASS]
cmp_out() {
    if r=$("$T" compare "$2" "$3" --tol "$4" 2>&1); then ok "$1: $r"; else bad "$1: $r"; fi
    [ -z "${5:-}" ] || note_worst "$5" "$r"
}
# RUNNER... -- forward arguments: run cpdit forward, FAIL (and return 1) when it fails
fwd() {
    if out=$("$@" 2>&1); then return 0; fi
    bad "cpdit forward failed: $* :: $(echo "$out" | tail -n 3)"
    return 1
}

# Two FLUX transformers: A with FLUX's head dim 128 (the flash kernel), B with head dim 40 (not
# a multiple of 32: the cuda-flash kernel hands it to the reference path), fp16 weights.
make_models() {
    [ -f "$WORK/A.in" ] && return 0
    "$T" make-model "$WORK/A" --heads 4 --head-dim 128 --axes 16,56,56 --layers 2 --single 2 \
        --in 64 --joint 64 --pooled 32 --guidance 1 --dtype BF16 --seed 11 &&
        "$T" make-inputs "$WORK/A.in" --model "$WORK/A" --batch 2 --txt 8 --img-h 6 --img-w 10 \
            --seed 11 &&
        "$T" make-model "$WORK/B" --heads 3 --head-dim 40 --axes 8,16,16 --layers 1 --single 2 \
            --in 16 --joint 32 --pooled 24 --guidance 0 --dtype F16 --seed 12 &&
        "$T" make-inputs "$WORK/B.in" --model "$WORK/B" --batch 1 --txt 5 --img-h 4 --img-w 7 \
            --seed 12
}
tf() { # MODEL OUT ARGS...: one-rank transformer forward
    m=$1 o=$2
    shift 2
    fwd "$CPDIT" forward --model "$WORK/$m" --component transformer --inputs "$WORK/$m.in" \
        --output "$WORK/$o" "$@"
}
make_vae() {
    [ -f "$WORK/z.in" ] && return 0
    "$CPDIT" builtin write "$WORK/bw" >/dev/null || return 1
    lc=$(tr -d ' \n' <"$WORK/bw/vae/config.json" | sed -n 's/.*"latent_channels":\([0-9]*\).*/\1/p')
    "$T" make-latent "$WORK/z.in" --channels "${lc:-16}" --h 9 --w 11 --seed 5
}
vf() { # OUT ARGS...: VAE decode
    o=$1
    shift
    fwd "$CPDIT" forward --model "$WORK/bw" --component vae --inputs "$WORK/z.in" \
        --output "$WORK/$o" "$@"
}

case $step in
forward)
    make_models || { echo "RESULT: cannot make the test models"; exit 1; }
    for m in A B; do
        tf $m $m.cpu32 --backend cpu --weight-format fp32 || continue
        # fp32 activations (cuda-fp32): the kernels alone, fp32 weights at 1e-4
        if [ -n "$G32" ]; then
            tf $m $m.f32w --backend $G32 --weight-format fp32 &&
                cmp_out "$m $G32 fp32 weights ($G32-flash) vs cpu fp32" "$WORK/$m.f32w" \
                    "$WORK/$m.cpu32" 1e-4 "$G32/fp32-weights"
            tf $m $m.f32wr --backend $G32 --weight-format fp32 --attention-backend $G32-reference &&
                cmp_out "$m $G32 fp32 weights ($G32-reference) vs cpu fp32" "$WORK/$m.f32wr" \
                    "$WORK/$m.cpu32" 1e-4 "$G32/fp32-weights"
            tf $m $m.f32b --backend $G32 &&
                cmp_out "$m $G32 bf16 weights vs cpu fp32" "$WORK/$m.f32b" "$WORK/$m.cpu32" 1e-2 \
                    "$G32/bf16-weights"
        fi
        # bf16 activations ($G): the same plus bf16 storage between ops
        tf $m $m.b16w32 --backend $G --weight-format fp32 &&
            cmp_out "$m $G (bf16 activations) fp32 weights vs cpu fp32" "$WORK/$m.b16w32" \
                "$WORK/$m.cpu32" 1e-2 "$G/fp32-weights"
        tf $m $m.gpu16 --backend $G &&
            cmp_out "$m $G (bf16 activations) bf16 weights vs cpu fp32" "$WORK/$m.gpu16" \
                "$WORK/$m.cpu32" 1e-2 "$G/bf16-weights"
        # cuDNN's fused attention (bf16 Q, K, V) and auto (the faster of cuda-flash and cudnn,
        # timed once per shape; --verbose prints the choice)
        if [ "$G" = cuda ]; then
            tf $m $m.gpucudnn --backend $G --attention-backend cudnn &&
                cmp_out "$m $G bf16 (cudnn attention) vs cpu fp32" "$WORK/$m.gpucudnn" \
                    "$WORK/$m.cpu32" 1e-2 "$G/bf16-weights"
        fi
        tf $m $m.gpuauto --backend $G --attention-backend auto --verbose &&
            cmp_out "$m $G bf16 (attention auto) vs cpu fp32" "$WORK/$m.gpuauto" \
                "$WORK/$m.cpu32" 1e-2 "$G/bf16-weights"
    done
    if make_vae; then
        vf z.cpu --backend cpu || true
        [ -z "$G32" ] || { vf z.gpu32 --backend $G32 &&
            cmp_out "vae decode $G32 vs cpu" "$WORK/z.gpu32" "$WORK/z.cpu" 1e-4 "$G32/vae"; }
        vf z.gpu --backend $G &&
            cmp_out "vae decode $G (bf16 activations) vs cpu" "$WORK/z.gpu" "$WORK/z.cpu" 3e-2 \
                "$G/vae"
    else
        bad "cannot write the built-in model / latent for the VAE check"
    fi
    echo "RESULT: worst vs cpu fp32:$worst $nok ok, $nfail failed"
    [ $fail -eq 0 ] || exit 1
    exit 0
    ;;
forward-cp)
    make_models || { echo "RESULT: cannot make the test models"; exit 1; }
    # fp32 weights on the fp32-activation table (1e-4; $G at 1e-2 when the build lacks it)
    tf A A.g1 --backend $F32B --weight-format fp32 &&
        tf A A.g1b --backend $G || { echo "RESULT: 1-rank GPU forward failed"; exit 1; }
    for grid in "2 --ulysses 2" "2 --ring 2" "4 --ring 2 --ulysses 2" "4 --ulysses 4"; do
        np=${grid%% *}
        flags=${grid#* }
        tag=$(echo "$grid" | tr -d ' -')
        # shellcheck disable=SC2086
        fwd "$MPI_RUN" -np "$np" "$CPDIT" forward --model "$WORK/A" --component transformer \
            --inputs "$WORK/A.in" --output "$WORK/A.$tag" --backend $F32B --weight-format fp32 \
            $flags &&
            cmp_out "$np ranks ($flags) $F32B fp32 vs 1 rank" "$WORK/A.$tag" "$WORK/A.g1" $F32TOL
    done
    fwd "$MPI_RUN" -np 2 "$CPDIT" forward --model "$WORK/A" --component transformer \
        --inputs "$WORK/A.in" --output "$WORK/A.u2b" --backend $G --ulysses 2 &&
        cmp_out "2 ranks (--ulysses 2) $G bf16 vs 1 rank" "$WORK/A.u2b" "$WORK/A.g1b" 1e-2
    # the ring merges partial results by their LSE: with cudnn that LSE is cuDNN's softmax
    # stats, so this checks the stats convention end to end
    if [ "$G" = cuda ]; then
        fwd "$MPI_RUN" -np 2 "$CPDIT" forward --model "$WORK/A" --component transformer \
            --inputs "$WORK/A.in" --output "$WORK/A.r2cudnn" --backend $G --ring 2 \
            --attention-backend cudnn &&
            cmp_out "2 ranks (--ring 2, cudnn attention) bf16 vs 1 rank" "$WORK/A.r2cudnn" \
                "$WORK/A.g1b" 1e-2
    fi
    fwd "$MPI_RUN" -np 2 "$CPDIT" forward --model "$WORK/A" --component transformer \
        --inputs "$WORK/A.in" --output "$WORK/A.r2auto" --backend $G --ring 2 \
        --attention-backend auto &&
        cmp_out "2 ranks (--ring 2, attention auto) bf16 vs 1 rank" "$WORK/A.r2auto" \
            "$WORK/A.g1b" 1e-2
    if make_vae && vf z.g1 --backend $F32B; then
        fwd "$MPI_RUN" -np 2 "$CPDIT" forward --model "$WORK/bw" --component vae \
            --inputs "$WORK/z.in" --output "$WORK/z.g2" --backend $F32B &&
            cmp_out "vae decode split over 2 ranks vs 1 rank ($F32B)" "$WORK/z.g2" "$WORK/z.g1" \
                $F32TOL
    fi
    if make_vae && vf z.g1b --backend $G; then
        fwd "$MPI_RUN" -np 2 "$CPDIT" forward --model "$WORK/bw" --component vae \
            --inputs "$WORK/z.in" --output "$WORK/z.g2b" --backend $G &&
            cmp_out "vae decode split over 2 ranks vs 1 rank ($G, bf16)" "$WORK/z.g2b" \
                "$WORK/z.g1b" 3e-2
    fi
    ;;
flux-dev-step)
    # FLUX.1-dev's width: 24 heads x 128 = 3072, joint 4096, pooled 768, guidance; 512 text +
    # 64 x 64 = 4096 image tokens. Its FLOPs per step: 57 blocks x (24 E^2 S + 4 S^2 E)
    # = 74.4 TFLOP (linear 59.5 + attention 14.9), E = 3072, S = 4608.
    L=2 SG=4
    [ "${FLUX_DEV_FULL:-0}" = 1 ] && L=19 SG=38
    BENCH_LOG=${BENCH_LOG:-$WORK/cuda_bench.log}
    [ -s "$BENCH_LOG" ] || "$B/tests/cuda_bench" >"$BENCH_LOG" 2>&1
    rate=$(awk '/^linear bf16/ { if ($NF + 0 > m) m = $NF + 0 } END { print m + 0 }' "$BENCH_LOG")
    t0=$(date +%s)
    "$T" make-model "$WORK/dev" --heads 24 --head-dim 128 --axes 16,56,56 --layers $L \
        --single $SG --in 64 --joint 4096 --pooled 768 --guidance 1 --dtype BF16 --seed 7 ||
        { echo "RESULT: make-model failed"; exit 1; }
    echo "model with $L + $SG blocks written in $(($(date +%s) - t0)) s"
    # the default attention kernel, then cudnn (cuda only): one step time each
    kernels=default
    [ "$G" = cuda ] && kernels="default cudnn"
    results=""
    for kern in $kernels; do
        kflag=""
        [ "$kern" = default ] || kflag="--attention-backend $kern"
        # shellcheck disable=SC2086
        row=$("$MPI_RUN" -np 1 "$B/tests/flux_bench" --backend $G --model "$WORK/dev" --txt 512 \
            --img-h 64 --img-w 64 --reps 3 --header $kflag 2>&1)
        echo "attention kernel: $kern"
        echo "$row"
        line=$(echo "$row" | awk '$1 ~ /^1x1x1/ { print; exit }')
        [ -n "$line" ] || { echo "RESULT: flux_bench on $G failed (attention $kern)"; exit 1; }
        r=$(echo "$line" | awk -v rate="$rate" -v L=$L -v SG=$SG -v kern="$kern" '{
            best_ms = $5; gflop = $7
            E = 3072; S = 4608
            full = 57 * (24 * E * E * S + 4 * S * S * E) / 1e9          # GFLOP of FLUX.1-dev
            step = best_ms / 1e3 * full / gflop                           # s, scaled by FLOPs
            floor = rate > 0 ? full / (rate * 1e3) : 0                    # s at the GEMM rate
            printf "measured %d+%d blocks: %.1f ms for %.0f GFLOP (%.1f TFLOP/s)\n", L, SG, best_ms, gflop, gflop / best_ms
            printf "step %.3f s with %s attention (%s) vs floor %.3f s (%.1f TFLOP at %.0f TFLOP/s bf16 GEMM): %.2fx\n", step, kern, (L == 19 ? "19+38 blocks" : "2+4 blocks scaled by FLOPs to 19+38"), floor, full / 1e3, rate, floor > 0 ? step / floor : 0
        }')
        echo "$r"
        results="$results${results:+; }$(echo "$r" | tail -n 1)"
    done
    echo "RESULT: $results"
    rm -rf "$WORK/dev"
    exit 0
    ;;
pipeline)
    PROMPT="a large red circle in the center on a blue background"
    run_img() { # DIR NP ARGS...
        d=$1 np=$2
        shift 2
        rm -rf "$WORK/$d"
        fwd "$MPI_RUN" -np "$np" "$CPDIT" run --model builtin:shapes --prompt "$PROMPT" --seed 3 \
            --output "$WORK/$d" "$@" || return 1
        ls "$WORK/$d"/*.png >/dev/null 2>&1 || { bad "$d: no PNG written"; return 1; }
    }
    png() { ls "$WORK/$1"/*.png | head -n 1; }
    pcmp() { # NAME A B TOL
        if r=$("$B/tests/png_compare" "$(png "$2")" "$(png "$3")" "$4" 2>&1); then
            ok "$1: $r"
        else
            bad "$1: $r"
        fi
    }
    # fp32: the fp32-activation table (2/255); without it $G, under the bf16 sanity bound
    P32TOL=2
    [ -n "$G32" ] || P32TOL=24
    run_img cpu32 1 --backend cpu --weight-format fp32 &&
        run_img gpu32 1 --backend $F32B --weight-format fp32 &&
        pcmp "pipeline $F32B fp32 vs cpu fp32 (max per-channel difference)" gpu32 cpu32 $P32TOL
    run_img cpu16 1 --backend cpu && run_img gpu16 1 --backend $G &&
        pcmp "pipeline $G bf16 vs cpu bf16 weights" gpu16 cpu16 64
    [ -d "$WORK/gpu32" ] && run_img gpu32r2 2 --backend $F32B --weight-format fp32 --ring 2 &&
        pcmp "pipeline on 2 GPU ranks (ring 2, host-staged) vs 1" gpu32r2 gpu32 1
    ;;
*)
    echo "usage: gpu-steps.sh forward|forward-cp|flux-dev-step|pipeline" >&2
    exit 2
    ;;
esac
echo "RESULT: $nok ok, $nfail failed"
[ $fail -eq 0 ] || exit 1
exit 0
