#!/bin/bash
# slurm.sh — cpdit on a real Slurm: this test starts munged, slurmctld and slurmd (Debian's
# slurm-wlm and munge packages) for this one machine in a temporary folder (localhost,
# proctrack/linuxproc, task/none, select/cons_tres, no accounting, unprivileged ports),
# waits for the node to be idle, runs the cases and shuts everything down, also on failure.
# task/affinity binds srun's tasks (case 6 checks it); the node claims 8 CPUs on a machine that
# may have 2, so the cases keep to at most 2 CPUs in use at a time (the lowest ids).
# Cases (built-in tiny model, small images):
#  1. `cpdit submit` → the job COMPLETES with exactly the manifest's PNGs and index lines,
#     each line recording the job id.
#  2. `--array 2` → both tasks complete, their shares are disjoint and together complete.
#  3. a second submit on an output folder that a running job holds → that job exits 2 naming
#     the holder, nothing duplicated; then `scancel --signal=USR1 --batch` mid-run → the job
#     stops within a step, requeues itself, and finishes with exactly the right images (no
#     duplicates, no temporary files), the index lines of the second run saying restart 1.
#  4. `scancel --full --signal=TERM` mid-run (Slurm signals the batch shell's process group),
#     with the mpirun launcher (CPDIT_LAUNCHER=mpirun) and then with srun: the script's trap
#     passes the stop on as USR1 to the launcher (in a session of its own, so Slurm's TERM
#     does not reach it); the ranks stop after the current step, at most the 2 images in
#     flight (dp 2) finish after the signal, the launcher exits 3, the script requeues on it,
#     and the set completes with no duplicates and no marker left.
#  5. a bad manifest → refused by submit with FILE:LINE:COL (exit 2), nothing queued.
#  6. `--cpus-per-task 2` (1 task): inside the job the rank's affinity has 2 CPUs and cpdit
#     ran 2 BLAS threads (its placement line), srun got -c 2 (srun only: skipped without
#     PMIx);
#  7. `--array 3%1`: never more than one task running (squeue polled), all 3 complete;
#  8. `--max-requeues 1`: the first USR1 requeues (restart 1), the second does not: the job
#     ends FAILED with exit 3 and says why; the items left stay for a later run.
# Exit 77 (skip) only when the Slurm or munge programs are missing or will not start here.
: "${CPDIT:?CPDIT is set by make check}"
for p in munged slurmctld slurmd sbatch squeue scontrol scancel srun; do
    command -v "$p" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin"
    command -v "$p" >/dev/null 2>&1 || {
        echo "slurm.sh: $p not found (build-aux/install-deps.sh --tests installs slurm-wlm and munge); skipping"
        exit 77
    }
done
if [ "$(id -u)" -ne 0 ]; then
    echo "slurm.sh: slurmd must run as root to start jobs; skipping"
    exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-slurm-XXXXXX") || exit 1
chmod 755 "$work"
status=0
fail() { echo "FAIL: $*"; status=1; }
stop_daemons() {
    for f in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munge/munged.pid"; do
        [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    for f in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munge/munged.pid"; do
        i=0
        while [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && [ $i -lt 50 ]; do
            sleep 0.1; i=$((i + 1))
        done
        [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
    done
}
cleanup() {
    [ -n "${SLURM_CONF:-}" ] && scancel --full --signal=KILL -u root >/dev/null 2>&1
    stop_daemons
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
skip_start() {
    echo "slurm.sh: $1; skipping"
    for f in "$work"/*.log "$work"/munge/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done
    exit 77
}

# ---------------------------------------------------------------- start Slurm
port_free() { ! grep -qi ":$(printf '%04X' "$1") " /proc/net/tcp /proc/net/tcp6 2>/dev/null; }
base=$((20000 + ($$ * 7 + $(date +%N | sed 's/^0*//;s/^$/0/')) % 40000))
while ! port_free $base || ! port_free $((base + 1)); do base=$((base + 2)); done
mkdir -p "$work/munge" "$work/state" "$work/spool" && chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.sock" \
    --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" \
    --seed-file="$work/munge/munged.seed" || skip_start "munged does not start"
host=$(hostname -s)
cat > "$work/slurm.conf" <<EOF
ClusterName=cpditest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=5
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$work/slurm.conf"
slurmctld -i || skip_start "slurmctld does not start"
slurmd || skip_start "slurmd does not start"
i=0
until [ "$(sinfo -h -o %T 2>/dev/null)" = idle ]; do
    i=$((i + 1))
    [ $i -gt 150 ] && skip_start "the node did not become idle in 30 s ($(sinfo -h -o %T 2>&1))"
    sleep 0.2
done
echo "slurm.sh: Slurm up on ports $base/$((base + 1)) in $(( i / 5 )) s"

# what the jobs inherit (sbatch exports the environment): MPI as root in a container
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1

# ---------------------------------------------------------------- helpers
job_states() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 | sort | tr '\n' ' '; }
# release_requeued ID: Slurm holds a requeued job until its credential lifetime has passed
# (cred_expire, 2 min); bring its begin time forward to 3 s from now. Not to "now": slurmd
# refuses ("Job credential revoked") a launch credential made in the same second as the
# requeue revoked the old one, and the run would fail without starting.
release_requeued() {
    e=$(scontrol show job "$1" 2>/dev/null | grep 'Reason=BeginTime' >/dev/null &&
        scontrol show job "$1" | sed -n 's/.*EligibleTime=\([0-9T:-]*\).*/\1/p' | head -n 1)
    [ -n "$e" ] || return 0
    e=$(date -d "$e" +%s 2>/dev/null) || return 0
    [ $((e - $(date +%s))) -gt 10 ] && scontrol update jobid="$1" StartTime=now+3 >/dev/null 2>&1
    return 0
}
# wait_job ID SECONDS: until no task of the job is pending or running (requeued tasks
# released as above)
wait_job() {
    t=0
    while [ $t -lt $(($2 * 5)) ]; do
        s=$(job_states "$1")
        case "$s" in *PENDING*|*RUNNING*|*REQUEUE*|*COMPLETING*|*CONFIGURING*) ;; *) return 0 ;; esac
        release_requeued "$1"
        sleep 0.2; t=$((t + 1))
    done
    fail "job $1 still '$s' after $2 s"
    scontrol show job "$1"
    return 1
}
pngs() { ls "$1" 2>/dev/null | grep -c '\.png$'; }
# check_set DIR N: exactly N complete PNGs, N ok index lines over all index files, one per
# file, no failed lines, no temporary files
check_set() {
    "$CPDIT" status "$1" > "$work/status.out" 2>&1 || { fail "cpdit status $1"; cat "$work/status.out"; }
    grep -q "^total: $2 items, $2 done, 0 failed, 0 left" "$work/status.out" ||
        { fail "$1: not all $2 items done"; cat "$work/status.out"; }
    grep -q "^index: $2 ok lines, 0 failed lines, 0 duplicates" "$work/status.out" ||
        { fail "$1: index lines"; cat "$work/status.out"; }
    [ "$(pngs "$1")" -eq "$2" ] || fail "$1: $(pngs "$1") PNGs, expected $2"
    n=$(cat "$1"/index*.jsonl | wc -l)
    [ "$n" -eq "$2" ] || fail "$1: $n index lines, expected $2"
    u=$(cat "$1"/index*.jsonl | sed 's/.*"file":"\([^"]*\)".*/\1/' | sort -u | wc -l)
    [ "$u" -eq "$2" ] || fail "$1: $u distinct files in the index, expected $2"
    ls -a "$1" | grep -q '\.tmp\.' && fail "$1: temporary files left: $(ls -a "$1" | grep '\.tmp\.')"
    ls -a "$1" | grep -q '^\.cpdit-lock' && fail "$1: a lock was left: $(ls -a "$1" | grep lock)"
}

cd "$work" || exit 1
cat > small.yaml <<'EOF'
model: builtin:tiny
output: {dir: small}
defaults: {steps: 2, width: 32, height: 32}
seeds: [1, 2]
prompts: [a red fox, a blue bird]
EOF
cat > array.yaml <<'EOF'
model: builtin:tiny
output: {dir: array}
defaults: {steps: 2, width: 32, height: 32}
seeds: [1, 2, 3]
prompts: [a red fox, a blue bird]
EOF
# long enough to be signalled mid-run: an item of 60 steps at 96x96 takes seconds, a step
# a fraction of one
cat > long.yaml <<'EOF'
model: builtin:tiny
output: {dir: long}
defaults: {steps: 60, width: 96, height: 96}
seeds: [1, 2, 3, 4, 5, 6]   # 12 items: still running after the busy-folder check under load
prompts: [a red fox, a blue bird]
EOF
t0=$(date +%s)

# ---------------------------------------------------------------- 1. submit → COMPLETED
j1=$("$CPDIT" submit small.yaml --ntasks-per-node 2 2> submit1.err)
if [ $? -ne 0 ] || [ -z "$j1" ]; then
    fail "submit small.yaml"; cat submit1.err
else
    wait_job "$j1" 90
    s=$(job_states "$j1")
    [ "$s" = "COMPLETED " ] || { fail "job $j1: state '$s'"; cat small/slurm-*.out; }
    [ -f small/cpdit-job.sbatch ] || fail "no small/cpdit-job.sbatch"
    check_set small 4
    n=$(grep -c "\"slurm\":{\"job_id\":\"$j1\"" small/index.jsonl)
    [ "$n" -eq 4 ] || fail "$n of 4 index lines record job $j1"
    echo "case 1: job $j1 $s in $(( $(date +%s) - t0 )) s"
fi

# ---------------------------------------------------------------- 2. array of 2
t1=$(date +%s)
j2=$("$CPDIT" submit array.yaml --array 2 2> submit2.err)
if [ $? -ne 0 ] || [ -z "$j2" ]; then
    fail "submit --array 2"; cat submit2.err
else
    wait_job "$j2" 90
    s=$(job_states "$j2")
    [ "$s" = "COMPLETED COMPLETED " ] || { fail "array $j2: states '$s'"; cat array/slurm-*.out; }
    check_set array 6
    for k in 0 1; do
        f=array/index.task-$k-of-2.jsonl
        [ -f $f ] || { fail "no $f"; continue; }
        n=$(wc -l < $f)
        [ "$n" -eq 3 ] || fail "$f: $n lines, expected 3"
        # task k renders the items k, k+2, k+4
        bad=$(sed 's/^{"index":\([0-9]*\),.*/\1/' $f | awk -v k=$k '$1 % 2 != k' | wc -l)
        [ "$bad" -eq 0 ] || fail "$f: $bad items of the other task's share"
        grep -q "\"array_job_id\":\"$j2\",\"array_task_id\":$k,\"array_task_count\":2" $f ||
            fail "$f: the array ids are not recorded"
    done
    "$CPDIT" status array > status-array.out 2>&1
    for k in 0 1; do
        grep -q "^array task $k of 2: 3 items, 3 done, 0 failed, 0 left" status-array.out ||
            { fail "cpdit status array: the line of task $k"; cat status-array.out; }
    done
    grep -q '^array:    2 tasks' status-array.out || fail "cpdit status array: no array line"
    grep -q "6 items in the manifest" array/slurm-${j2}_0.out ||
        { fail "array task 0's summary does not name the manifest's count"; cat array/slurm-${j2}_0.out; }
    echo "case 2: array $j2 $s in $(( $(date +%s) - t1 )) s"
fi

# ---------------------------------------------------------------- 3. busy folder, USR1, requeue
lines() { cat "$1"/index*.jsonl 2>/dev/null | wc -l; }
# wait_lines DIR N SECONDS: until DIR's index has at least N lines
wait_lines() {
    i=0
    until [ "$(lines "$1")" -ge "$2" ] || [ $i -gt $(($3 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
    [ "$(lines "$1")" -ge "$2" ]
}
t1=$(date +%s)
j3=$("$CPDIT" submit long.yaml --ntasks-per-node 1 2> submit3.err)
if [ $? -ne 0 ] || [ -z "$j3" ]; then
    fail "submit long.yaml"; cat submit3.err
else
    wait_lines long 1 90 || fail "job $j3: no image after 90 s"
    # a second job on the same folder is refused, naming the job that holds it
    j4=$("$CPDIT" submit long.yaml --ntasks-per-node 1 2> submit4.err) || { fail "second submit"; cat submit4.err; }
    [ -n "$j4" ] && wait_job "$j4" 60
    s4=$(job_states "$j4")
    [ "$s4" = "FAILED " ] || fail "second job $j4 on a busy folder: state '$s4', expected FAILED"
    scontrol show job "$j4" | grep -q 'ExitCode=2:0' || fail "second job $j4: exit code is not 2"
    grep -q "in use by Slurm job $j3" "long/slurm-$j4.out" ||
        { fail "second job: no message naming job $j3"; cat "long/slurm-$j4.out"; }
    # signal right after an image was written: the next one has just begun
    before=$(lines long)
    [ "$(job_states "$j3")" = "RUNNING " ] || fail "job $j3 is not running any more: the signal case needs a longer run"
    wait_lines long $((before + 1)) 60
    # Slurm's warning signal, to the batch shell only (the script forwards it to the step)
    scancel --signal=USR1 --batch "$j3" || fail "scancel --signal=USR1 --batch $j3"
    before=$(lines long) # what was written before the signal (the query is after: on a loaded
                         # machine an image may end between the wait above and scancel)
    ts=$(date +%s)
    i=0
    until scontrol show job "$j3" | grep -q 'Restarts=1' || [ $i -gt 300 ]; do sleep 0.1; i=$((i + 1)); done
    stop_s=$(( $(date +%s) - ts ))
    scontrol show job "$j3" | grep -q 'Restarts=1' || fail "job $j3 did not requeue within 30 s of USR1"
    stopped_at=$(lines long)
    # stopped after a step of the item in progress, long before that item could end
    [ "$stopped_at" -eq "$before" ] || fail "$((stopped_at - before)) images finished after USR1"
    # the trap records the request in a file and signals srun; cpdit may see either first
    grep -Eq 'stopped by (SIGUSR1|a stop request)' "long/slurm-$j3.out" ||
        fail "job $j3's log: no 'stopped by SIGUSR1'"
    grep -q 'stopped early (exit 3); requeueing job' "long/slurm-$j3.out" ||
        { fail "job $j3's log does not say it requeues on exit 3"; cat "long/slurm-$j3.out"; }
    wait_job "$j3" 120
    s=$(job_states "$j3")
    [ "$s" = "COMPLETED " ] || { fail "job $j3 after the requeue: '$s'"; cat "long/slurm-$j3.out"; }
    check_set long 12
    grep -q '"restart_count":1' long/index.jsonl || fail "no index line from the requeued run (restart 1)"
    grep -q '"restart_count":0' long/index.jsonl || fail "no index line from the first run (restart 0)"
    ls -a long | grep -q '^\.cpdit-stop' && fail "a stop marker or request was left: $(ls -a long | grep stop)"
    echo "case 3: second job $j4 refused; job $j3: USR1 with $before images done, requeued" \
         "${stop_s} s later with $stopped_at, then $s in $(( $(date +%s) - t1 )) s"
fi

# ---------------------------------------------------------------- 4. scancel --full TERM
# term_case LAUNCHER DIR: scancel --full --signal=TERM while the job renders (dp 2)
term_case() {
    launcher=$1 dir=$2
    t1=$(date +%s)
    sed "s/dir: long/dir: $dir/; s/seeds: \[1, 2, 3, 4, 5, 6\]/seeds: [1, 2]/" long.yaml > "$dir.yaml"
    if [ "$launcher" = mpirun ]; then
        j5=$(CPDIT_LAUNCHER=mpirun "$CPDIT" submit "$dir.yaml" --ntasks-per-node 2 2> submit5.err)
    else
        j5=$("$CPDIT" submit "$dir.yaml" --ntasks-per-node 2 2> submit5.err)
    fi
    if [ $? -ne 0 ] || [ -z "$j5" ]; then
        fail "submit $dir.yaml"; cat submit5.err; return
    fi
    wait_lines "$dir" 1 90 || fail "job $j5: no image after 90 s"
    grep -q "starts: $launcher" "$dir/slurm-$j5.out" || { fail "job $j5 did not use $launcher"; return; }
    before=$(lines "$dir")
    scancel --signal=TERM --full "$j5" || fail "scancel --signal=TERM --full $j5"
    # mpirun ends 2 x odls_base_sigkill_timeout (10 s in the script) after a rank exits 3
    i=0
    until scontrol show job "$j5" | grep -q 'Restarts=1' || [ $i -gt 600 ]; do sleep 0.1; i=$((i + 1)); done
    stop_s=$(( $(date +%s) - t1 ))
    scontrol show job "$j5" | grep -q 'Restarts=1' ||
        { fail "job $j5 did not requeue within 60 s of SIGTERM"; cat "$dir/slurm-$j5.out"; }
    stopped_at=$(lines "$dir")
    # the ranks stop after the current step: only the image each of the 2 ranks had in
    # flight (and only if its last step had begun) may still be finished
    [ $((stopped_at - before)) -le 2 ] ||
        { fail "$launcher: $((stopped_at - before)) images finished after SIGTERM, at most 2 may"; cat "$dir/slurm-$j5.out"; }
    grep -q 'stopped early (exit 3); requeueing job' "$dir/slurm-$j5.out" ||
        { fail "$launcher: the script did not requeue on the launcher's exit 3"; cat "$dir/slurm-$j5.out"; }
    grep -Eq 'stopped by (SIGUSR1|a stop request)' "$dir/slurm-$j5.out" ||
        { fail "$launcher: the ranks did not stop on the forwarded request"; cat "$dir/slurm-$j5.out"; }
    wait_job "$j5" 120
    s=$(job_states "$j5")
    [ "$s" = "COMPLETED " ] || { fail "job $j5 after the requeue: '$s'"; cat "$dir/slurm-$j5.out"; }
    check_set "$dir" 4
    ls -a "$dir" | grep -q '^\.cpdit-stop' && fail "a stop marker or request was left: $(ls -a "$dir" | grep stop)"
    if [ "$stopped_at" -lt 4 ]; then
        grep -q '"restart_count":1' "$dir/index.jsonl" || fail "no index line from the requeued $launcher run"
    fi
    echo "case 4: $launcher job $j5: SIGTERM with $before images done, $stopped_at when it stopped" \
         "(requeued $stop_s s after submit), then $s in $(( $(date +%s) - t1 )) s"
}
term_case mpirun term
if srun --mpi=list 2>&1 | grep -qw pmix; then
    term_case srun term-srun
else
    echo "case 4: srun has no PMIx here: the srun half is skipped"
fi

# ---------------------------------------------------------------- 5. bad manifest
cat > bad.yaml <<'EOF'
model: builtin:tiny
output: {dir: bad}
defaults: {width: 100}
prompts: [a red fox]
EOF
before=$(squeue -h | wc -l)
last=$(scontrol show config | sed -n 's/^NEXT_JOB_ID *= *//p')
"$CPDIT" submit bad.yaml > bad.out 2> bad.err
rc=$?
[ $rc -eq 2 ] || fail "bad manifest: submit exit $rc, expected 2"
grep -q '^cpdit: bad.yaml:3:[0-9]*: ' bad.err || { fail "bad manifest: no FILE:LINE:COL"; cat bad.err; }
[ -s bad.out ] && fail "bad manifest: printed a job id: $(cat bad.out)"
[ -e bad ] && fail "bad manifest: the output folder was created"
[ "$(squeue -h | wc -l)" -eq "$before" ] || fail "bad manifest: something was queued"
[ "$(scontrol show config | sed -n 's/^NEXT_JOB_ID *= *//p')" = "$last" ] || fail "bad manifest: a job id was used"
echo "case 5: bad manifest refused: $(cat bad.err)"

# ---------------------------------------------------------------- 6. --cpus-per-task 2
if srun --mpi=list 2>&1 | grep -qw pmix; then
    t1=$(date +%s)
    sed 's/dir: small/dir: aff/' small.yaml > aff.yaml
    j6=$("$CPDIT" submit aff.yaml --ntasks-per-node 1 --cpus-per-task 2 2> submit6.err)
    if [ $? -ne 0 ] || [ -z "$j6" ]; then
        fail "submit --cpus-per-task 2"; cat submit6.err
    else
        wait_job "$j6" 90
        s=$(job_states "$j6")
        [ "$s" = "COMPLETED " ] || { fail "job $j6: state '$s'"; cat aff/slurm-*.out; }
        log="aff/slurm-$j6.out"
        grep -q 'starts: srun --mpi=pmix --kill-on-bad-exit=1 -c 2 --cpu-bind=cores' "$log" ||
            { fail "job $j6: srun without -c 2 --cpu-bind=cores"; grep starts "$log"; }
        grep -Eq '^placement: rank 0 on [^:]*: CPUs [0-9,-]* \(2\), 2 threads$' "$log" ||
            { fail "job $j6: the rank's affinity is not 2 CPUs with 2 threads"; grep placement "$log"; }
        grep -q 'placement: warning' "$log" && fail "job $j6: $(grep 'placement: warning' "$log")"
        echo "case 6: job $j6 $s: $(grep '^placement: rank 0' "$log") in $(( $(date +%s) - t1 )) s"
    fi
else
    echo "case 6: srun has no PMIx here: the --cpus-per-task case is skipped"
fi

# ---------------------------------------------------------------- 7. --array 3%1
t1=$(date +%s)
sed 's/dir: array/dir: thr/' array.yaml > thr.yaml
j7=$("$CPDIT" submit thr.yaml --array 3%1 2> submit7.err)
if [ $? -ne 0 ] || [ -z "$j7" ]; then
    fail "submit --array 3%1"; cat submit7.err
else
    most=0 i=0
    while [ $i -lt 900 ]; do
        r=$(squeue -h -j "$j7" -t RUNNING,COMPLETING 2>/dev/null | wc -l)
        [ "$r" -gt "$most" ] && most=$r
        s=$(job_states "$j7")
        case "$s" in *PENDING*|*RUNNING*|*COMPLETING*|*CONFIGURING*) ;; *) break ;; esac
        sleep 0.2; i=$((i + 1))
    done
    s=$(job_states "$j7")
    [ "$s" = "COMPLETED COMPLETED COMPLETED " ] || { fail "array $j7: states '$s'"; cat thr/slurm-*.out; }
    [ "$most" -le 1 ] || fail "array $j7 with %1: $most tasks ran at once"
    grep -q '^#SBATCH --array=0-2%1$' thr/cpdit-job.sbatch || fail "no --array=0-2%1 in the script"
    check_set thr 6
    echo "case 7: array $j7 %1: at most $most task running at a time, $s in $(( $(date +%s) - t1 )) s"
fi

# ---------------------------------------------------------------- 8. --max-requeues 1
t1=$(date +%s)
sed 's/dir: long/dir: capped/' long.yaml > capped.yaml
j8=$("$CPDIT" submit capped.yaml --ntasks-per-node 1 --max-requeues 1 2> submit8.err)
if [ $? -ne 0 ] || [ -z "$j8" ]; then
    fail "submit --max-requeues 1"; cat submit8.err
else
    wait_lines capped 1 90 || fail "job $j8: no image after 90 s"
    scancel --signal=USR1 --batch "$j8" || fail "scancel --signal=USR1 --batch $j8"
    i=0
    until scontrol show job "$j8" | grep -q 'Restarts=1' || [ $i -gt 300 ]; do sleep 0.1; i=$((i + 1)); done
    scontrol show job "$j8" | grep -q 'Restarts=1' || fail "job $j8 did not requeue on the first USR1"
    # the requeued run: wait until its step has started and written an image
    before=$(lines capped)
    i=0
    until grep -q '(restart 1) starts' "capped/slurm-$j8.out" 2>/dev/null && [ "$(lines capped)" -gt "$before" ] ||
        [ $i -gt 900 ]; do
        release_requeued "$j8"; sleep 0.2; i=$((i + 1))
    done
    [ "$(job_states "$j8")" = "RUNNING " ] || fail "job $j8: not running after the requeue ($(job_states "$j8"))"
    scancel --signal=USR1 --batch "$j8" || fail "second scancel --signal=USR1 --batch $j8"
    wait_job "$j8" 90
    s=$(job_states "$j8")
    [ "$s" = "FAILED " ] || { fail "job $j8 past its requeue cap: '$s', want FAILED"; cat "capped/slurm-$j8.out"; }
    scontrol show job "$j8" | grep -q 'ExitCode=3:0' || fail "job $j8: exit code is not 3"
    scontrol show job "$j8" | grep -q 'Restarts=1' || fail "job $j8 requeued again"
    grep -q 'not requeueing: restart 1 reached --max-requeues 1' "capped/slurm-$j8.out" ||
        { fail "job $j8: no message about the cap"; tail -n 5 "capped/slurm-$j8.out"; }
    left=$(( 12 - $(pngs capped) ))
    "$CPDIT" status capped > status-capped.out 2>&1
    rc=$?
    [ $left -gt 0 ] && [ $rc -ne 3 ] && fail "cpdit status with $left items left: exit $rc, want 3"
    echo "case 8: job $j8 requeued once, then stopped with $left items left: $s in $(( $(date +%s) - t1 )) s"
fi

echo "slurm.sh: all cases in $(( $(date +%s) - t0 )) s"
[ $status -ne 0 ] && { echo "--- slurmctld.log"; tail -n 30 "$work/slurmctld.log"; }
exit $status
