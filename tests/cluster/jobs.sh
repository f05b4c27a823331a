# jobs.sh — sourced by the multi-node tests after env.sh: the environment jobs inherit and
# helpers to submit and watch jobs on the cluster of tests/cluster/start.sh.
# Needs CPDIT and fail (the test's "FAIL: ..." reporter, which sets its status).

# what the jobs inherit (sbatch exports the submitting environment): MPI as root, Open MPI
# over TCP on the cluster's links only (vader, shared memory, between ranks of one node)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include="$CLUSTER_NET.0/24" OMPI_MCA_oob_tcp_if_include="$CLUSTER_NET.0/24"
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1 CPDIT_MPI_TIMEOUT=300
unset CPDIT_TOPOLOGY CPDIT_NODE_NAME CPDIT_HOSTNAME

# submit ARGS...: `cpdit submit ARGS` from the head node; prints the job id
submit() {
    in_head "$CPDIT" submit "$@" 2> submit.err
    r=$?
    [ $r -eq 0 ] || { fail "cpdit submit $*: exit $r"; cat submit.err >&2; }
    return $r
}
# job_field ID FIELD: the value of FIELD (a whole word: NodeList, not ReqNodeList)
job_field() {
    in_head scontrol show job "$1" 2>/dev/null | grep -oE "(^|[[:space:]])$2=[^[:space:]]*" |
        head -n 1 | sed 's/^[[:space:]]*//' | cut -d= -f2
}
job_states() { in_head scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 | sort | tr '\n' ' '; }
# wait_job ID SECONDS: until no task of the job is pending or running
wait_job() {
    t=0
    while [ $t -lt $(($2 * 5)) ]; do
        s=$(job_states "$1")
        case "$s" in *PENDING*|*RUNNING*|*REQUEUE*|*COMPLETING*|*CONFIGURING*) ;; *) return 0 ;; esac
        sleep 0.2; t=$((t + 1))
    done
    fail "job $1 still '$s' after $2 s"
    in_head scontrol show job "$1"
    return 1
}
pngs() { ls "$1" 2>/dev/null | grep -c '\.png$'; }
# check_set DIR N: exactly N complete PNGs, N ok index lines over all index files (the node
# parts too), one per file, no failed lines, no temporary files, no lock left
check_set() {
    "$CPDIT" status "$1" > status.out 2>&1 || { fail "cpdit status $1"; cat status.out; }
    grep -q "^total: $2 items, $2 done, 0 failed, 0 left" status.out ||
        { fail "$1: not all $2 items done"; cat status.out; }
    grep -q "^index: $2 ok lines, 0 failed lines, 0 duplicates" status.out ||
        { fail "$1: index lines"; cat status.out; }
    [ "$(pngs "$1")" -eq "$2" ] || fail "$1: $(pngs "$1") PNGs, expected $2"
    n=$(cat "$1"/index*.jsonl | wc -l)
    [ "$n" -eq "$2" ] || fail "$1: $n index lines, expected $2"
    u=$(cat "$1"/index*.jsonl | sed 's/.*"file":"\([^"]*\)".*/\1/' | sort -u | wc -l)
    [ "$u" -eq "$2" ] || fail "$1: $u distinct files in the index, expected $2"
    ls -a "$1" | grep -q '\.tmp' && fail "$1: temporary files left: $(ls -a "$1" | grep '\.tmp')"
    ls -a "$1" | grep -q '^\.cpdit-lock' && fail "$1: a lock was left: $(ls -a "$1" | grep lock)"
}
