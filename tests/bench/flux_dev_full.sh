#!/bin/sh
# flux_dev_full.sh — `cpdit run` as a user would on a FLUX.1-dev-sized folder (random bf16
# weights, the real checkpoint's layout and sizes: transformer 11.9 G parameters in 3 shards,
# T5-XXL 4.8 G in 2, CLIP-L, FLUX.1's VAE; tokenizers and scheduler of builtin:tiny; see
# tests/bench/flux_dev_folder.c), on 1 rank and then on 2 Ulysses ranks of this node (weights
# shared). A benchmark run by hand, not a test; it needs ~34 GB of disk in DIR:
#
#   tests/bench/flux_dev_full.sh DIR [--quick] [--keep]
#
# DIR is created (and removed at the end unless --keep; a DIR already complete from a --keep
# run is reused). --quick: 1 double + 1 single block, 1 T5 and 1 CLIP layer (same widths),
# to try the script in a minute. Environment: WEIGHT_MEMORY (--weight-memory, default 6G:
# the machine may be shared; the 23.8 GB transformer then streams), THREADS (BLAS threads of
# the job, default 2: one rank with THREADS, or two ranks with THREADS/2 each), STEPS
# (default 2: the second shows the steady state), SIZE (default 256), CPDIT (./cpdit),
# MPI_RUN (tests/mpi-run.sh), RUNS ("1 2": the rank counts to run; REPORT_ONLY="1 2" prints
# the tables again from the logs a --keep run left in DIR, running nothing), T5_LAYERS and CLIP_LAYERS
# (default 24 and 12: T5-XXL's and CLIP-L's; 1 keeps the transformer at full size and makes
# the text encoding short, to measure the steps), SHARING (--no-weight-sharing to give each
# rank its own weights and streaming slots, for comparison).
#
# Prints, per run: cpdit's own lines with a time stamp, then a table of each step's time,
# GFLOP/s (real FLOPs of the step: every linear layer of the 57 blocks, embedders and final
# layer at 512 text + SIZE^2/256 image tokens, plus attention 4 S^2 H D per block) and the
# bytes the job read from disk during that step (/proc/PID/io read_bytes of all ranks,
# sampled every second), the summary's phase times, the time before the first step that the
# summary does not count (loading; --verbose also prints it as "cpdit: model loaded in X s"),
# and the peak RSS / PSS per rank (sampled every second or two). Before each run,
# the same-run rates: tests/flux_bench's SGEMM and bf16 GEMM (n 1024) and a resident forward
# of a 1 double + 1 single block model of the same widths and token counts.
set -u
top_builddir=${top_builddir:-.}
CPDIT=${CPDIT:-$top_builddir/cpdit}
MPI_RUN=${MPI_RUN:-$top_builddir/tests/mpi-run.sh}
FOLDER_TOOL=$top_builddir/tests/bench/flux_dev_folder
TOOL=$top_builddir/tests/flux_test_tool
BENCH=$top_builddir/tests/flux_bench
WM=${WEIGHT_MEMORY:-6G}
P=${THREADS:-2}
STEPS=${STEPS:-2}
SIZE=${SIZE:-256}
RUNS=${RUNS:-"1 2"}
CPDIT_MPI_TIMEOUT=${CPDIT_MPI_TIMEOUT:-7200}; export CPDIT_MPI_TIMEOUT
[ $# -ge 1 ] || { echo "usage: $0 DIR [--quick] [--keep]" >&2; exit 2; }
DIR=$1; shift
QUICK=0 KEEP=0
for a in "$@"; do
    case $a in
    --quick) QUICK=1 ;;
    --keep) KEEP=1 ;;
    *) echo "$0: unknown option $a" >&2; exit 2 ;;
    esac
done
for f in "$CPDIT" "$FOLDER_TOOL" "$TOOL" "$BENCH"; do
    [ -x "$f" ] || { echo "$0: $f is missing (make && make check TESTS=)" >&2; exit 2; }
done
if [ $QUICK = 1 ]; then L=1 S=1 T5L=1 CL=1; else L=19 S=38 T5L=${T5_LAYERS:-24} CL=${CLIP_LAYERS:-12}; fi
SHARING=${SHARING:-}
[ $KEEP = 1 ] || trap 'rm -rf "$DIR"' EXIT
stamp() { # prefix each line with seconds since the epoch
    while IFS= read -r line; do echo "$(date +%s.%N | cut -c1-14) $line"; done
}

# ---- the folder
marker="$DIR/.flux_dev_full-$L-$S-$T5L-$CL"
if [ ! -f "$marker" ]; then
    rm -rf "$DIR"
    mkdir -p "$DIR" || exit 1
    t0=$(date +%s)
    "$CPDIT" builtin write "$DIR/model" --name tiny >/dev/null || exit 1
    "$FOLDER_TOOL" "$DIR/model" --layers $L --single $S --t5-layers $T5L --clip-layers $CL || exit 1
    "$TOOL" make-model "$DIR/probe" --heads 24 --head-dim 128 --axes 16,56,56 --layers 1 \
        --single 1 --in 64 --joint 4096 --pooled 768 --guidance 1 --dtype BF16 --seed 3 || exit 1
    echo "# folder written in $(($(date +%s) - t0)) s: $(du -sh "$DIR/model" | cut -f1)"
    touch "$marker"
fi
M="$DIR/model"
SIDE=$((SIZE / 16)) # image tokens per side (8x VAE, 2x2 patches)
TXT=512             # T5 tokens: guidance-distilled models default to 512 (diffusers)
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GB,"\
     "load $(cut -d' ' -f1-3 /proc/loadavg); $L double + $S single blocks, $TXT text +"\
     "$((SIDE * SIDE)) image tokens, $STEPS steps at ${SIZE}x$SIZE, --weight-memory $WM"

# ---- FLOPs of one transformer forward (batch 1), from the config's sizes
E=3072 F=12288 N=$((TXT + SIDE * SIDE))
GFLOP=$(awk -v L=$L -v S=$S -v E=$E -v F=$F -v T=$TXT -v I=$((SIDE * SIDE)) -v N=$N 'BEGIN {
    dbl = 2 * N * (4 * E * E + 2 * E * F) + 2 * 2 * 6 * E * E + 4 * N * N * E
    sgl = 2 * N * (3 * E * E + E * F + (E + F) * E) + 2 * 3 * E * E + 4 * N * N * E
    emb = 2 * T * 4096 * E + 2 * I * 64 * E + 2 * (256 * E + E * E) * 2 + 2 * (768 * E + E * E)
    fin = 2 * 2 * E * E + 2 * I * E * 64
    printf "%.1f", (L * dbl + S * sgl + emb + fin) * 1e-9 }')
echo "# one step: $GFLOP GFLOP (linear layers + attention 4 S^2 H D per block)"

# descendants of this shell running the cpdit binary (the libtool wrapper execs .libs/cpdit)
cpdit_pids() {
    for p in $(ps -e -o pid=,ppid= | awk -v root=$$ '
        { pp[$1] = $2 }
        END { for (p in pp) { q = p; while (q in pp && q != root && q > 1) q = pp[q]
                              if (q == root) print p } }'); do
        case $(readlink "/proc/$p/exe" 2>/dev/null) in
        */cpdit | */lt-cpdit) echo "$p" ;;
        esac
    done
}
# one line per second: time, read_bytes of all ranks, then rank-wise "pid:rss_kB:pss_kB:hwm_kB"
monitor() {
    while :; do
        t=$(date +%s.%N | cut -c1-14) rd=0 mem=""
        for p in $(cpdit_pids); do
            r=$(awk '/^read_bytes/ {print $2}' /proc/$p/io 2>/dev/null) || continue
            [ -n "$r" ] || continue
            rd=$((rd + r))
            rss=$(awk '/^VmRSS/ {print $2}' /proc/$p/status 2>/dev/null)
            hwm=$(awk '/^VmHWM/ {print $2}' /proc/$p/status 2>/dev/null)
            pss=$(awk '/^Pss:/ {print $2}' /proc/$p/smaps_rollup 2>/dev/null)
            mem="$mem $p:${rss:-0}:${pss:-0}:${hwm:-0}"
        done
        echo "$t $rd$mem"
        sleep 1
    done
}

rates() { # same-run GEMM rates and a resident forward of the 2-block probe model
    OPENBLAS_NUM_THREADS=$P "$MPI_RUN" -np 1 "$BENCH" --model "$DIR/probe" --txt $TXT \
        --img-h $SIDE --img-w $SIDE --sgemm-threads $P --reps 2 --header
}

run_one() { # $1 = ranks
    n=$1 log="$DIR/run$1.log" mon="$DIR/mon$1.log"
    echo
    echo "## $n rank(s): same-run rates (flux_bench, $P threads; probe = 1+1 blocks resident)"
    rates | tee "$DIR/rates$n.log"
    echo "## $n rank(s): cpdit run (load $(cut -d' ' -f1-3 /proc/loadavg))"
    monitor >"$mon" &
    mpid=$!
    t_start=$(date +%s.%N | cut -c1-14)
    if [ "$n" = 1 ]; then
        (OPENBLAS_NUM_THREADS=$P "$CPDIT" run --model "$M" --prompt "a red circle on a blue background" \
            --width $SIZE --height $SIZE --steps $STEPS --weight-memory $WM --verbose \
            --output "$DIR/out$n" 2>&1; echo "exit status $?") | stamp | tee "$log"
    else
        (OPENBLAS_NUM_THREADS=$((P / n > 0 ? P / n : 1)) "$MPI_RUN" -np $n "$CPDIT" run --model "$M" \
            --prompt "a red circle on a blue background" --width $SIZE --height $SIZE \
            --steps $STEPS --ring 1 --ulysses $n --weight-memory $WM --verbose $SHARING \
            --output "$DIR/out$n" 2>&1; echo "exit status $?") | stamp | tee "$log"
    fi
    t_end=$(date +%s.%N | cut -c1-14)
    kill $mpid
    wait $mpid 2>/dev/null
    report "$n" "$t_start" "$t_end"
}

# the table of run N: steps from the stamped "step k/N T s" lines, reads and memory from the
# monitor samples between T_START and T_END
report() { # N T_START T_END
    n=$1 log="$DIR/run$1.log" mon="$DIR/mon$1.log"
    awk -v gf=$GFLOP -v t0=$2 -v t1=$3 -v n=$n -v monf="$mon" '
        function rd_at(t,   i, v) { v = 0; for (i = 1; i <= ns; i++) if (st[i] <= t) v = sr[i]; return v }
        BEGIN {
            while ((getline line < monf) > 0) {
                k = split(line, f, " "); ns++; st[ns] = f[1]; sr[ns] = f[2]; if (f[2] > rmax) rmax = f[2]
                sl[ns] = line
                for (j = 3; j <= k; j++) { split(f[j], m, ":"); pid[m[1]] = 1
                    if (m[2] > rss[m[1]]) rss[m[1]] = m[2]; if (m[3] > pss[m[1]]) pss[m[1]] = m[3]
                    if (m[4] > hwm[m[1]]) hwm[m[1]] = m[4] }
            }
        }
        / cpdit: step [0-9]+\/[0-9]+ / { split($4, a, "/"); k = a[1]; te[k] = $1; dt[k] = $5; nst = k }
        / cpdit: times: / { text = $5; sub(/^[0-9.]+ /, ""); summary = $0 }
        END {
            if (!nst) { print "no step lines: the run failed"; exit 1 }
            ts = te[1] - dt[1]
            printf "| step | s | GFLOP/s | disk read GB |\n|---:|---:|---:|---:|\n"
            prev = rd_at(ts)
            for (k = 1; k <= nst; k++) {
                r = rd_at(te[k]); printf "| %d | %.1f | %.1f | %.2f |\n", k, dt[k], gf / dt[k], (r - prev) * 1e-9; prev = r }
            printf "%s\n", summary
            printf "before step 1: %.1f s (loading, not in the summary: %.1f s); whole run: %.1f s;" \
                   " disk read before step 1: %.2f GB, in all: %.2f GB\n", ts - t0, ts - t0 - text,
                   t1 - t0, rd_at(ts) * 1e-9, rmax * 1e-9
            for (p in pid) printf "rank pid %s: peak RSS %.0f MiB (VmHWM %.0f MiB), peak PSS %.0f MiB\n",
                                  p, rss[p] / 1024, hwm[p] / 1024, pss[p] / 1024
            # during the steps only (text encoding and VAE decode left out), and all ranks together
            for (i = 1; i <= ns; i++) {
                if (st[i] < ts || st[i] > te[nst]) continue
                k = split(sl[i], f, " "); tot = 0
                for (j = 3; j <= k; j++) { split(f[j], m, ":"); tot += m[3]
                    if (m[2] > srss[m[1]]) srss[m[1]] = m[2]; if (m[3] > spss[m[1]]) spss[m[1]] = m[3] }
                if (tot > stot) stot = tot
            }
            for (i = 1; i <= ns; i++) { k = split(sl[i], f, " "); tot = 0
                for (j = 3; j <= k; j++) { split(f[j], m, ":"); tot += m[3] }
                if (tot > atot) atot = tot }
            for (p in srss) printf "rank pid %s during the steps: peak RSS %.0f MiB, peak PSS %.0f MiB\n",
                                   p, srss[p] / 1024, spss[p] / 1024
            printf "all ranks together: peak PSS %.0f MiB during the steps, %.0f MiB in the whole run\n",
                   stot / 1024, atot / 1024
        }' "$log"
}

if [ -n "${REPORT_ONLY:-}" ]; then # the tables again from the logs of a --keep run
    for n in $REPORT_ONLY; do
        echo "## $n rank(s)"
        report "$n" "$(head -1 "$DIR/mon$n.log" | cut -d' ' -f1)" \
            "$(tail -1 "$DIR/mon$n.log" | cut -d' ' -f1)"
    done
    trap - EXIT
    exit 0
fi

status=0
for n in $RUNS; do
    run_one "$n" || status=1
    grep -q "exit status 0" "$DIR/run$n.log" || status=1
done
exit $status
