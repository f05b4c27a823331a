#!/bin/sh
# job_stop.sh — a stop request at a chosen moment of `cpdit run MANIFEST` (the real pipeline,
# built-in tiny model, 2 ranks as dp 2), made deterministic with the test hold points of
# jobs/job_run.h (CPDIT_TEST_HOLD=POINT:FILE: the ranks wait at POINT while FILE exists and
# print their pids):
#  A. SIGUSR1 to rank 0 ALONE while the model is being opened → both ranks stop before the
#     first item (they agree after the open): exit 3, the stop marker, no PNG, no index line,
#     no temporary file, no lock; the rerun renders every item once and removes the marker.
#  B. inside "Slurm" (SLURM_JOB_ID set, no signal at all): the sbatch script's stop-request
#     file .cpdit-stop-request-JOBID appears during the open → exit 3 and .cpdit-stopped-JOBID.
#  C. SIGUSR1 to both ranks while each writes the PNG of its first item → those two items
#     are finished (PNG and index line), nothing else: exit 3; the rerun renders exactly the
#     rest (one index line per item, no duplicates).
#  D. --vae-parallel world (the groups run in lockstep rounds): SIGUSR1 to rank 0 ALONE while
#     it writes its first item's PNG → rank 1's group, which saw no signal, stops at the same
#     round too (the world agrees before each round): round 0's two items finished, exit 3;
#     the rerun (world again) renders exactly the rest.
# The sbatch script of `cpdit submit` (mpirun launcher), run by bash without Slurm (SLURM_JOB_ID
# set, a stand-in `scontrol` that records the requeue), started as a process group leader as
# slurmstepd starts it:
#  E. SIGTERM to the script's whole process group, as `scancel --full --signal=TERM` sends it
#     (slurmstepd's killpg), while both ranks write their first PNG and stay there longer than
#     mpirun's TERM-then-KILL escalation (odls_base_sigkill_timeout 1 s here): the ranks must
#     not be killed; they finish those two items, begin no other (the script's USR1 reaches
#     every rank: "stopped by SIGUSR1"), write the stop marker and exit 3; mpirun returns 3;
#     the script requeues on it and leaves no marker or request; the requeued run (restart 1)
#     renders exactly the rest and the script exits 0 without requeueing.
#  F. a stop that does not end: the ranks stay at the PNG hold past the script's stop grace
#     (CPDIT_STOP_GRACE_S=2) → the script ends the step (TERM to mpirun, which kills the ranks),
#     requeues on its own record of the signal; no PNG, no marker; the requeued run takes the
#     killed run's lock over and completes the set, leaving no temporary file or lock.
# Exit 77 (skip) without mpirun.
: "${MPI_RUN:?MPI_RUN is set by make check}"
MPIRUN_PROG=$(sed -n 's/^MPIRUN="\(.*\)"$/\1/p' "$MPI_RUN")
: "${CPDIT:?CPDIT is set by make check}"
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-stop-XXXXXX") || exit 1
pids=
trap 'for p in $pids; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

cat > "$work/m.yaml" <<'YAML'
model: builtin:tiny
output: {dir: out}
defaults: {steps: 2, width: 32, height: 32}
seeds: [1, 2, 3]
prompts: [a red fox, a blue bird]
YAML
N=6
hold="$work/hold"
extra= # more run options (D)

# start POINT NAME [env...]: cpdit in the background, held at POINT
start() {
    point=$1 name=$2
    shift 2
    : > "$hold"
    "$MPI_RUN" -np 2 env CPDIT_TEST_HOLD="$point:$hold" "$@" "$CPDIT" run "$work/m.yaml" \
        --output "$work/out" --dp 2 $extra > "$work/$name.log" 2>&1 &
    run_pid=$!
    pids="$pids $run_pid"
}
# held_pid RANK SECONDS: the pid of a rank waiting at the hold point
held_pid() {
    i=0
    while [ $i -lt $(($2 * 10)) ]; do
        hp=$(sed -n "s/.*test hold at [a-z]*: rank $1 pid \([0-9]*\) .*/\1/p" "$work/$name.log" | head -n 1)
        [ -n "$hp" ] && { echo "$hp"; return 0; }
        kill -0 "$run_pid" 2>/dev/null || break
        sleep 0.1; i=$((i + 1))
    done
    return 1
}
pngs() { ls "$work/out" 2>/dev/null | grep -c '\.png$'; }
lines() { cat "$work/out"/index*.jsonl 2>/dev/null | wc -l; }
clean_folder() { # no temporary file, no lock, no stop request left
    ls -a "$work/out" | grep -q '\.tmp' && fail "$1: temporary files: $(ls -a "$work/out" | grep tmp)"
    ls -a "$work/out" | grep -q '^\.cpdit-lock' && fail "$1: a lock was left"
}
rerun() { # NAME: the rest of the items, each exactly once
    "$MPI_RUN" -np 2 "$CPDIT" run "$work/m.yaml" --output "$work/out" --dp 2 $extra > "$work/$1.log" 2>&1 ||
        { fail "$1: exit $?"; cat "$work/$1.log"; }
    [ "$(pngs)" -eq $N ] || fail "$1: $(pngs) PNGs, expected $N"
    [ "$(lines)" -eq $N ] || fail "$1: $(lines) index lines, expected $N"
    u=$(cat "$work/out"/index*.jsonl | sed 's/.*"file":"\([^"]*\)".*/\1/' | sort -u | wc -l)
    [ "$u" -eq $N ] || fail "$1: $u distinct files in the index, expected $N"
    ls -a "$work/out" | grep -q '^\.cpdit-stop' && fail "$1: a stop marker was left"
    clean_folder "$1"
}

# ---------------------------------------------------------------- A. USR1 to rank 0 during open
start open a
if p=$(held_pid 0 120); then
    held_pid 1 120 > /dev/null || fail "A: rank 1 did not reach the hold point"
    kill -USR1 "$p"
    rm -f "$hold"
    wait "$run_pid"
    rc=$?
    [ $rc -eq 3 ] || { fail "A: exit $rc, expected 3"; cat "$work/a.log"; }
    [ -f "$work/out/.cpdit-stopped" ] || fail "A: no stop marker: $(ls -a "$work/out")"
    [ "$(pngs)" -eq 0 ] || fail "A: $(pngs) PNGs after a stop during the open"
    [ "$(lines)" -eq 0 ] || fail "A: $(lines) index lines after a stop during the open"
    grep -q 'a stop was requested while the model was being opened' "$work/a.log" ||
        fail "A: the log does not say the stop came during the open"
    grep -q 'stopped by SIGUSR1: 6 items left' "$work/a.log" || { fail "A: summary"; cat "$work/a.log"; }
    clean_folder A
    rerun a-rerun
else
    fail "A: rank 0 did not reach the hold point"; cat "$work/a.log"
fi

# ---------------------------------------------------------------- B. stop-request file during open
rm -rf "$work/out"
mkdir -p "$work/out"
start open b SLURM_JOB_ID=4242
if held_pid 0 120 > /dev/null && held_pid 1 120 > /dev/null; then
    : > "$work/out/.cpdit-stop-request-4242"
    rm -f "$hold"
    wait "$run_pid"
    rc=$?
    [ $rc -eq 3 ] || { fail "B: exit $rc, expected 3"; cat "$work/b.log"; }
    [ -f "$work/out/.cpdit-stopped-4242" ] || fail "B: no stop marker: $(ls -a "$work/out")"
    [ "$(pngs)" -eq 0 ] || fail "B: $(pngs) PNGs"
    grep -q 'stopped by a stop request: 6 items left' "$work/b.log" || { fail "B: summary"; cat "$work/b.log"; }
    grep -q '^stopped by a stop request with 6 items left$' "$work/out/.cpdit-stopped-4242" ||
        fail "B: the marker's text: $(cat "$work/out/.cpdit-stopped-4242")"
    clean_folder B
else
    fail "B: the ranks did not reach the hold point"; cat "$work/b.log"
fi
rm -f "$work/out/.cpdit-stop-request-4242" "$work/out/.cpdit-stopped-4242"

# ---------------------------------------------------------------- C. USR1 while the PNGs are written
rm -rf "$work/out"
start write c
if p0=$(held_pid 0 120) && p1=$(held_pid 1 120); then
    kill -USR1 "$p0" "$p1"
    rm -f "$hold"
    wait "$run_pid"
    rc=$?
    [ $rc -eq 3 ] || { fail "C: exit $rc, expected 3"; cat "$work/c.log"; }
    [ -f "$work/out/.cpdit-stopped" ] || fail "C: no stop marker"
    [ "$(pngs)" -eq 2 ] || fail "C: $(pngs) PNGs, expected 2 (the item each rank was writing)"
    [ "$(lines)" -eq 2 ] || fail "C: $(lines) index lines, expected 2"
    grep -q 'stopped by SIGUSR1: 4 items left' "$work/c.log" || { fail "C: summary"; cat "$work/c.log"; }
    clean_folder C
    rerun c-rerun
else
    fail "C: the ranks did not reach the hold point"; cat "$work/c.log"
fi

# ---------------------------------------------------------------- D. world decode: lockstep stop
rm -rf "$work/out"
extra="--vae-parallel world"
start write d
if p0=$(held_pid 0 120) && held_pid 1 120 > /dev/null; then
    kill -USR1 "$p0"
    rm -f "$hold"
    wait "$run_pid"
    rc=$?
    [ $rc -eq 3 ] || { fail "D: exit $rc, expected 3"; cat "$work/d.log"; }
    [ "$(pngs)" -eq 2 ] || fail "D: $(pngs) PNGs, expected 2 (round 0 of both groups)"
    [ "$(lines)" -eq 2 ] || fail "D: $(lines) index lines, expected 2"
    grep -q 'stopped by SIGUSR1: 4 items left' "$work/d.log" || { fail "D: summary"; cat "$work/d.log"; }
    [ "$(grep -c '"vae":"world"' "$work/out/index.jsonl")" -eq 2 ] || fail "D: index lines without vae world"
    clean_folder D
    rerun d-rerun
else
    fail "D: the ranks did not reach the hold point"; cat "$work/d.log"
fi

# ---------------------------------------------------------------- E/F. the sbatch script
extra=
if [ -z "$MPIRUN_PROG" ] || [ ! -x "$MPIRUN_PROG" ] || ! command -v setsid > /dev/null; then
    echo "job_stop.sh: no mpirun or setsid: the sbatch script cases E and F are skipped"
    exit $status
fi
mkdir -p "$work/bin"
cat > "$work/bin/scontrol" <<EOF
#!/bin/sh
echo "\$*" >> "$work/scontrol.calls"
EOF
ln -s "$MPIRUN_PROG" "$work/bin/mpirun"
chmod +x "$work/bin/scontrol"
# script NAME RESTART [env...]: the sbatch script in the background, a process group leader
script() {
    name=$1 restart=$2
    shift 2
    env PATH="$work/bin:$PATH" SLURM_JOB_ID=4343 SLURM_RESTART_COUNT=$restart \
        CPDIT_LAUNCHER=mpirun OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 \
        OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1 OMPI_MCA_odls_base_sigkill_timeout=1 \
        CPDIT_TEST_HOLD="write:$hold" "$@" \
        setsid timeout --kill-after=10 300 bash "$work/out/cpdit-job.sbatch" > "$work/$name.log" 2>&1 &
    run_pid=$!
    pids="$pids $run_pid"
}
# after_stop NAME [killed]: the state after the stopped run, and the requeued run that
# completes it (killed: the ranks were ended hard, so their lock is left to be taken over)
after_stop() {
    grep -q '^requeue 4343$' "$work/scontrol.calls" 2>/dev/null || fail "$1: no requeue"
    ls -a "$work/out" | grep -q '^\.cpdit-stop' && fail "$1: a stop marker or request was left"
    [ -z "${2:-}" ] && clean_folder "$1"
    rm -f "$work/scontrol.calls" "$hold"
    script "$1-requeued" 1
    wait "$run_pid" || { fail "$1: the requeued run: exit $?"; cat "$work/$1-requeued.log"; }
    [ -e "$work/scontrol.calls" ] && fail "$1: the requeued run requeued again"
    [ "$(pngs)" -eq $N ] || fail "$1: $(pngs) PNGs after the requeued run, expected $N"
    [ "$(lines)" -eq $N ] || fail "$1: $(lines) index lines after the requeued run, expected $N"
    u=$(cat "$work/out"/index*.jsonl | sed 's/.*"file":"\([^"]*\)".*/\1/' | sort -u | wc -l)
    [ "$u" -eq $N ] || fail "$1: $u distinct files in the index, expected $N"
    grep -q '"restart_count":1' "$work/out/index.jsonl" || fail "$1: no line of the requeued run"
    ls -a "$work/out" | grep -q '^\.cpdit-stop' && fail "$1: a stop marker or request was left at the end"
    clean_folder "$1-requeued"
}
submit_script() {
    rm -rf "$work/out"
    mkdir -p "$work/out"
    "$CPDIT" submit "$work/m.yaml" --output "$work/out" --ntasks-per-node 2 --dp 2 --dry-run \
        > "$work/out/cpdit-job.sbatch" 2> "$work/submit.err" || { fail "submit --dry-run"; cat "$work/submit.err"; }
}

submit_script
: > "$hold"
script e 0
if held_pid 0 120 > /dev/null && held_pid 1 120 > /dev/null; then
    kill -TERM -- "-$run_pid" # the whole process group, as slurmstepd does for scancel --full
    sleep 4                   # twice mpirun's kill wait, and more: nothing may be killed
    rm -f "$hold"
    wait "$run_pid"
    rc=$?
    [ $rc -eq 0 ] || { fail "E: the script exited $rc"; cat "$work/e.log"; }
    grep -q 'stopped early (exit 3); requeueing job 4343' "$work/e.log" ||
        { fail "E: the script did not requeue on mpirun's exit 3"; cat "$work/e.log"; }
    grep -q 'stopped by SIGUSR1: 4 items left' "$work/e.log" || { fail "E: summary"; cat "$work/e.log"; }
    [ "$(pngs)" -eq 2 ] || fail "E: $(pngs) PNGs, expected 2 (the item each rank was writing)"
    [ "$(lines)" -eq 2 ] || fail "E: $(lines) index lines, expected 2"
    after_stop E
else
    fail "E: the ranks did not reach the hold point"; cat "$work/e.log"
fi

submit_script
: > "$hold"
script f 0 CPDIT_STOP_GRACE_S=2
if held_pid 0 120 > /dev/null && held_pid 1 120 > /dev/null; then
    kill -TERM -- "-$run_pid"
    wait "$run_pid"
    rc=$?
    [ $rc -eq 0 ] || { fail "F: the script exited $rc"; cat "$work/f.log"; }
    grep -q 'the job step did not stop within 2 s; ending it (TERM)' "$work/f.log" ||
        { fail "F: the script did not end the step"; cat "$work/f.log"; }
    grep -q 'the job step killed before it could finish (exit [0-9]*); requeueing job 4343' "$work/f.log" ||
        { fail "F: no requeue on the script's record"; cat "$work/f.log"; }
    [ "$(pngs)" -eq 0 ] || fail "F: $(pngs) PNGs, expected 0 (both ranks ended while writing)"
    after_stop F killed
else
    fail "F: the ranks did not reach the hold point"; cat "$work/f.log"
fi
exit $status
