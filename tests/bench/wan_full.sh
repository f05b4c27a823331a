#!/bin/sh
# wan_full.sh — `cpdit run` of one clip as a user would, on a Wan2.1-T2V-1.3B-sized pipeline
# folder with random bf16 weights, on 1 rank and then on 2 Ulysses ranks of this node (issue
# 25's full-size check; `make bench-wan-full`, not part of make check). A benchmark run by hand,
# not a test; it needs ~15 GB of disk in DIR and ~10 GB of memory:
#
#   tests/bench/wan_full.sh DIR [--quick] [--keep]
#
# The folder: tokenizer/, scheduler/ and model_index.json of builtin:wan-tiny (its UMT5
# tokenizer has 197 pieces: the prompt's ids, not its length, differ from the real one; the
# prompt is padded to 512 tokens as WanPipeline does), and random bf16 weights at the real
# checkpoint's sizes and layout:
#   transformer/   WanTransformer3DModel of Wan2.1-T2V-1.3B: 30 layers, 12 heads x 128
#                  (hidden 1536), ffn 8960, text_dim 4096, freq 256, patch 1x2x2, 16 -> 16
#                  channels; 2 shards + index (tests/wan_test_tool make-model, 1.42 G parameters)
#   text_encoder/  UMT5-XXL: 24 layers, d_model 4096, 64 heads, d_ff 10240, vocab 256384
#                  (tests/bench/wan_full_umt5.py, 5.7 G parameters, 2 shards)
#   vae/           AutoencoderKLWan of Wan 2.1 (base_dim 96, z_dim 16, dim_mult 1,2,4,4), the
#                  decoder's tensors (tests/reference/make_wan_vae.py)
# The run: 480x832, 17 frames (16 x 5 x 60 x 104 latents: 5 x 30 x 52 = 7800 tokens), 2 steps,
# guidance 1 (no CFG: one transformer forward per step; Wan's default 5.0 would double the
# step time), mp4 output, --weight-memory WEIGHT_MEMORY (default 6G; the UMT5's 11.4 GB then
# stream per layer). --quick: 1 transformer layer, 1 UMT5 layer with a 4096 vocabulary and a
# 64x64 clip, to try the script in a minute.
# Environment: THREADS (default 2: one rank with THREADS, two ranks with THREADS/2 each),
# STEPS (2), WIDTH/HEIGHT/FRAMES (832/480/17), UMT5_LAYERS (24), WEIGHT_MEMORY, RUNS ("1 2"),
# PYTHON3 (/usr/bin/python3, with numpy), CPDIT (default: a copy of ./cpdit and libcpdit taken at the start, so that rebuilding the
# tree while this runs changes nothing), MPI_RUN (tests/mpi-run.sh).
#
# Prints per run cpdit's lines with a time stamp, then a table: load (start to "model
# loaded"), text, each step, VAE decode (frames encoded into the mp4 as they come, included),
# write (finishing the file), whole run; peak RSS (VmHWM) and peak PSS per rank, sampled
# every second; with the load average before and after.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
MPI_RUN=${MPI_RUN:-$top_builddir/tests/mpi-run.sh}
TOOL=$top_builddir/tests/wan_test_tool
UMT5=$top_srcdir/tests/bench/wan_full_umt5.py
VAE=$top_srcdir/tests/reference/make_wan_vae.py
PY=${PYTHON3:-/usr/bin/python3}
WM=${WEIGHT_MEMORY:-6G}
P=${THREADS:-2}
STEPS=${STEPS:-2}
RUNS=${RUNS:-"1 2"}
CPDIT_MPI_TIMEOUT=${CPDIT_MPI_TIMEOUT:-14400}; export CPDIT_MPI_TIMEOUT
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
if [ $QUICK = 1 ]; then
    L=1 UL=1 VOCAB=4096 W=${WIDTH:-64} H=${HEIGHT:-64}
else
    L=30 UL=${UMT5_LAYERS:-24} VOCAB=256384 W=${WIDTH:-832} H=${HEIGHT:-480}
fi
F=${FRAMES:-17}
for f in "$top_builddir/cpdit" "$TOOL"; do
    [ -x "$f" ] || { echo "$0: $f is missing (make && make check TESTS=)" >&2; exit 2; }
done
"$PY" -c 'import numpy' 2>/dev/null || { echo "$0: needs python3 with numpy" >&2; exit 2; }
[ $KEEP = 1 ] || trap 'rm -rf "$DIR"' EXIT
mkdir -p "$DIR" || exit 1
if [ -z "${CPDIT:-}" ]; then # a snapshot of the binary: the tree may be rebuilt meanwhile
    rm -rf "$DIR/bin" && mkdir -p "$DIR/bin" || exit 1
    cp "$top_builddir/.libs/cpdit" "$top_builddir"/.libs/libcpdit.so* "$DIR/bin/" || exit 1
    LD_LIBRARY_PATH=$DIR/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; export LD_LIBRARY_PATH
    CPDIT=$DIR/bin/cpdit
fi
stamp() { # prefix each line with seconds since the epoch
    while IFS= read -r line; do echo "$(date +%s.%N | cut -c1-14) $line"; done
}

# ---- the folder
marker="$DIR/.wan_full-$L-$UL-$VOCAB"
M="$DIR/model"
if [ ! -f "$marker" ]; then
    rm -rf "$M" "$DIR/vae_tmp"
    t0=$(date +%s)
    "$CPDIT" builtin write "$M" --name wan-tiny >/dev/null || exit 1
    rm -rf "$M/transformer" "$M/text_encoder" "$M/vae"
    "$TOOL" make-model "$M/transformer" --heads 12 --head-dim 128 --layers $L --in 16 \
        --out 16 --text 4096 --freq 256 --ffn 8960 --patch 1,2,2 --dtype BF16 --shards 2 \
        --seed 7 || exit 1
    "$PY" "$UMT5" "$M/text_encoder" --layers $UL --vocab $VOCAB --shards 2 || exit 1
    "$PY" "$VAE" model "$DIR/vae_tmp" --base-dim 96 --z-dim 16 --dtype bf16 --seed 9 || exit 1
    mv "$DIR/vae_tmp/vae" "$M/vae" && rm -rf "$DIR/vae_tmp" || exit 1
    echo "# folder written in $(($(date +%s) - t0)) s: $(du -sh "$M" | cut -f1)" \
         "(transformer $(du -sh "$M/transformer" | cut -f1), text_encoder" \
         "$(du -sh "$M/text_encoder" | cut -f1), vae $(du -sh "$M/vae" | cut -f1))"
    touch "$marker"
fi
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GB;"\
     "transformer $L layers, UMT5 $UL layers; ${W}x$H, $F frames, $STEPS steps, guidance 1,"\
     "--weight-memory $WM, $P threads in all"

# descendants of this shell running the cpdit binary
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
monitor() { # one line per second: time, then rank-wise "pid:rss_kB:pss_kB:hwm_kB"
    while :; do
        t=$(date +%s.%N | cut -c1-14) mem=""
        for p in $(cpdit_pids); do
            rss=$(awk '/^VmRSS/ {print $2}' /proc/$p/status 2>/dev/null)
            hwm=$(awk '/^VmHWM/ {print $2}' /proc/$p/status 2>/dev/null)
            pss=$(awk '/^Pss:/ {print $2}' /proc/$p/smaps_rollup 2>/dev/null)
            [ -n "$rss" ] && mem="$mem $p:${rss:-0}:${pss:-0}:${hwm:-0}"
        done
        echo "$t$mem"
        sleep 1
    done
}

run_one() { # $1 = ranks
    n=$1 log="$DIR/run$1.log" mon="$DIR/mon$1.log"
    rm -rf "$DIR/out$n"
    echo
    echo "## $n rank(s): cpdit run (load before: $(cut -d' ' -f1-3 /proc/loadavg))"
    monitor >"$mon" &
    mpid=$!
    t_start=$(date +%s.%N | cut -c1-14)
    set -- --model "$M" --prompt "a red circle rolling over a blue floor" --seed 1 \
        --width $W --height $H --frames $F --steps $STEPS --guidance 1 --weight-memory $WM \
        --verbose --output "$DIR/out$n"
    if [ "$n" = 1 ]; then
        (OPENBLAS_NUM_THREADS=$P "$CPDIT" run "$@" --threads $P 2>&1; echo "exit status $?") |
            stamp | tee "$log"
    else
        T=$((P / n > 0 ? P / n : 1))
        (OPENBLAS_NUM_THREADS=$T "$MPI_RUN" -np $n -x LD_LIBRARY_PATH "$CPDIT" run "$@" \
            --ring 1 --ulysses $n --threads $T 2>&1; echo "exit status $?") | stamp | tee "$log"
    fi
    t_end=$(date +%s.%N | cut -c1-14)
    kill $mpid
    wait $mpid 2>/dev/null
    echo "## $n rank(s): load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    report "$n" "$t_start" "$t_end"
}

report() { # N T_START T_END: the table of run N from its stamped log and monitor samples
    n=$1 log="$DIR/run$1.log" mon="$DIR/mon$1.log"
    awk -v t0=$2 -v t1=$3 -v n=$n -v monf="$mon" '
        BEGIN {
            while ((getline line < monf) > 0) {
                k = split(line, f, " ")
                for (j = 2; j <= k; j++) { split(f[j], m, ":"); pid[m[1]] = 1
                    if (m[2] > rss[m[1]]) rss[m[1]] = m[2]; if (m[3] > pss[m[1]]) pss[m[1]] = m[3]
                    if (m[4] > hwm[m[1]]) hwm[m[1]] = m[4] }
            }
        }
        / cpdit: model loaded in / { tl = $1 }
        / step [0-9]+\/[0-9]+ [0-9.]+ s/ { for (i = 1; i < NF; i++) if ($i == "step") break
                                          split($(i + 1), a, "/"); dt[a[1]] = $(i + 2); nst = a[1] }
        / cpdit: times: / { for (i = 1; i < NF; i++) {
                                if ($i == "text") text = $(i + 1)
                                if ($i == "vae") vae = $(i + 1)
                                if ($i == "frames") enc = $(i + 1)
                                if ($i == "write") wr = $(i + 1) } }
        END {
            if (!nst || vae == "") { print "no step or times lines: the run failed"; exit 1 }
            printf "| stage (%d rank%s) | s |\n|---|---:|\n", n, n > 1 ? "s" : ""
            printf "| load (start to model loaded) | %.1f |\n", tl - t0
            printf "| text (UMT5, 512 tokens) | %.1f |\n", text
            for (k = 1; k <= nst; k++) printf "| transformer step %d | %.1f |\n", k, dt[k]
            printf "| VAE decode (incl. encoding frames %.1f s) | %.1f |\n", enc, vae
            printf "| write (finish the mp4) | %.2f |\n", wr
            printf "| whole run | %.1f |\n", t1 - t0
            for (p in pid) printf "rank pid %s: peak RSS %.0f MiB (VmHWM %.0f MiB), peak PSS %.0f MiB\n",
                                  p, rss[p] / 1024, hwm[p] / 1024, pss[p] / 1024
        }' "$log"
}

status=0
for n in $RUNS; do
    run_one "$n" || status=1
    grep -q "exit status 0" "$DIR/run$n.log" || status=1
done
exit $status
