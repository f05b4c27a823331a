#!/bin/bash
# slurm_multinode.sh — cpdit jobs whose ranks span nodes, on a real 3-node Slurm cluster that
# this test starts on this machine (tests/cluster/start.sh: each node a network + UTS + mount
# namespace with its own host name and /tmp, veth links to a bridge shaped to 1 Gbit/s,
# Debian's slurmctld + one slurmd per node + munge) and removes at the end, also on failure.
# Open MPI runs over TCP on the nodes' eth0 (btl self,vader,tcp; btl_tcp_if_include and
# oob_tcp_if_include = the cluster's subnet): vader only between ranks of one node.
# Cases (builtin:shapes at 64x64, 4 steps, 4 images; `cpdit submit --nodes 2
# --ntasks-per-node 2` = 4 ranks):
#  1. parallel: auto, srun --mpi=pmix: COMPLETED, 4 PNGs equal to a 1-rank run's within
#     1/255, the run's placement line names 2 nodes x 2 ranks and no Ulysses group across
#     nodes; when the chosen grid has dp >= 2 the index lines name 2 distinct nodes.
#  2. explicit grid --dp 2 --ulysses 2, the mpirun fallback (CPDIT_LAUNCHER=mpirun; mpirun
#     starts its daemons through Slurm): Ulysses peers on one node, dp across: the placement
#     line says 0 of 2 ulysses groups across nodes, the index lines name node1 and node2
#     (node2's leader writes its node part, merged by `cpdit status`), PNGs as in 1.
#  3. explicit grid --ring 2 --ulysses 2 (srun): ring across nodes, Ulysses inside; PNGs as 1.
#  4. `cpdit probe --quick` under srun over 2 nodes x 2 ranks: the topology file has 2 hosts
#     (ranks 0,1 and 2,3), cross_node fitted slower than inside a node (topology_check.py) and
#     below 0.5 GB/s (the link is shaped to 0.125 GB/s); `cpdit plan` on it for one 256x256
#     image keeps Ulysses inside a node (U <= 2) and puts ring or dp across (R x DP >= 2).
#  5. `--array 3`, one whole node (--exclusive) of 2 ranks per task: the tasks run on the 3
#     nodes at once (their index lines name node1, node2, node3);
#     `cpdit status` counts each task's share (2 of 6 items each) and the total.
# The node failure case (a node dies mid-job, Slurm requeues, the rerun resumes exactly) is
# tests/slurm_node_failure.sh (make check-long). Exit 77 (skip) only where the Slurm or
# munge programs are missing, or network namespaces, veth pairs or bridges cannot be made.
. "${top_srcdir:-.}/tests/cluster/session.sh"
cluster_session multinode
cat > auto.yaml <<'EOF'
model: builtin:shapes
output: {dir: auto}
parallel: auto
defaults: {steps: 4, width: 64, height: 64, true_cfg: 1}  # no CFG: dp groups render their own items (CFG pairs would join them)
seeds: [1, 2]
prompts:
  - a large red circle in the center on a blue background
  - a small green square in the top left corner on a yellow background
EOF
sed 's/dir: auto/dir: ref/; /^parallel:/d' auto.yaml > ref.yaml
sed 's/dir: auto/dir: dpu/; /^parallel:/d' auto.yaml > dpu.yaml
sed 's/dir: auto/dir: ringu/; /^parallel:/d' auto.yaml > ringu.yaml
# the 1-rank reference, outside Slurm
"$CPDIT" run ref.yaml --weight-format fp32 > ref.log 2>&1 || { fail "the 1-rank reference run"; cat ref.log; }

# same_pngs DIR: DIR's 4 PNGs equal ref's within 1/255
same_pngs() {
    n=0
    for f in ref/*.png; do
        g=$1/$(basename "$f")
        [ -f "$g" ] || { fail "$1: no $(basename "$f")"; continue; }
        if d=$("$CMP" "$f" "$g" 1); then n=$((n + 1)); else fail "$1/$(basename "$f") vs the 1-rank image: $d"; fi
    done
    echo "  $1: $n PNGs within 1/255 of the 1-rank run's"
}
# placement DIR JOB: the placement line of the job's log
placement() { grep -h '^\[cpdit\] placement:' "$1/slurm-$2.out" | tail -n 1; }
# index_nodes DIR: the distinct slurm.node values of DIR's index lines
index_nodes() { cat "$1"/index*.jsonl | sed -n 's/.*"node":"\([^"]*\)".*/\1/p' | sort -u | tr '\n' ' '; }
# check_placement DIR JOB: 2 nodes of 2 ranks, no Ulysses group across nodes
check_placement() {
    p=$(placement "$1" "$2")
    echo "  $p"
    echo "$p" | grep -Eq 'node[0-9] ranks 0,1; node[0-9] ranks 2,3;' ||
        fail "$1: the ranks are not 2 per node on 2 nodes: '$p'"
    echo "$p" | grep -Eq 'ulysses groups [0-9]+ \(0 across nodes\)' ||
        fail "$1: a Ulysses group spans nodes: '$p'"
}

# ---------------------------------------------------------------- 1. parallel: auto, srun
t1=$(date +%s)
j=$(submit auto.yaml --weight-format fp32 --nodes 2 --ntasks-per-node 2) && wait_job "$j" 120
s=$(job_states "$j")
[ "$s" = "COMPLETED " ] || { fail "auto: job $j '$s'"; cat auto/slurm-*.out; }
grep -q 'starts: srun --mpi=pmix' "auto/slurm-$j.out" || fail "auto: the job did not use srun --mpi=pmix"
check_set auto 4
same_pngs auto
check_placement auto "$j"
grid=$(sed -n 's/^grid: \(dp [0-9]* ring [0-9]* ulysses [0-9]*\).*/\1/p' "auto/slurm-$j.out" | tail -n 1)
echo "  auto chose: $grid; index lines name: $(index_nodes auto)"
case "$grid" in
    "dp 1 "*|"") ;;
    *) [ "$(index_nodes auto)" = "node1 node2 " ] || fail "auto: index lines name '$(index_nodes auto)', not node1 and node2" ;;
esac
echo "case 1: parallel auto on 2 nodes x 2 ranks (srun): job $j $s in $(( $(date +%s) - t1 )) s"

# ---------------------------------------------------------------- 2. dp 2 x ulysses 2, mpirun
t1=$(date +%s)
j=$(CPDIT_LAUNCHER=mpirun submit dpu.yaml --weight-format fp32 --nodes 2 --ntasks-per-node 2 --dp 2 --ulysses 2) &&
    wait_job "$j" 120
s=$(job_states "$j")
[ "$s" = "COMPLETED " ] || { fail "dpu: job $j '$s'"; cat dpu/slurm-*.out; }
grep -q 'starts: mpirun' "dpu/slurm-$j.out" || fail "dpu: the job did not use mpirun"
check_set dpu 4
same_pngs dpu
check_placement dpu "$j"
placement dpu "$j" | grep -q 'cp groups 2 (0 across nodes)' || fail "dpu: a dp group spans nodes"
[ "$(index_nodes dpu)" = "node1 node2 " ] || fail "dpu: index lines name '$(index_nodes dpu)', not node1 and node2"
[ -f dpu/index.node-node2.jsonl ] || fail "dpu: no node part of node2's leader"
grep -q '"grid":{"dp":2,"ring":1,"ulysses":2' dpu/index.jsonl || fail "dpu: the index lines' grid"
echo "case 2: dp 2 x ulysses 2 on 2 nodes (mpirun): job $j $s in $(( $(date +%s) - t1 )) s"

# ---------------------------------------------------------------- 3. ring 2 x ulysses 2, srun
t1=$(date +%s)
j=$(submit ringu.yaml --weight-format fp32 --nodes 2 --ntasks-per-node 2 --ring 2 --ulysses 2) && wait_job "$j" 150
s=$(job_states "$j")
[ "$s" = "COMPLETED " ] || { fail "ringu: job $j '$s'"; cat ringu/slurm-*.out; }
check_set ringu 4
same_pngs ringu
check_placement ringu "$j"
placement ringu "$j" | grep -q 'ring groups 2 (2 across nodes)' || fail "ringu: the ring groups do not cross nodes"
echo "case 3: ring 2 x ulysses 2 on 2 nodes (srun): job $j $s in $(( $(date +%s) - t1 )) s"

# ---------------------------------------------------------------- 4. the probe inside a job
t1=$(date +%s)
PY=${PYTHON3:-python3}
in_head timeout 180 srun --mpi=pmix -N 2 --ntasks-per-node 2 "$CPDIT" probe --quick --no-compute \
    --output "$work/topology.json" > probe.log 2>&1 || { fail "cpdit probe over 2 nodes"; cat probe.log; }
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "case 4: no python3: the topology checks are not run"
elif [ -s topology.json ]; then
    # 2 hosts (ranks 0,1 and 2,3), every pair classified, cross_node slower than inside a node
    "$PY" "$top_srcdir/tests/topology_check.py" topology.json --ranks 4 --hosts-of 0,0,1,1 \
        --cross-slower $([ "$CLUSTER_SHAPING" = netem ] || echo --no-alpha) || fail "the probe's topology file"
    # the shaped rate: 1 Gbit/s = 0.125 GB/s; the quick probe's messages partly fit the token
    # bucket's burst (128 KiB), so the fit may come out above the rate, never far above
    beta=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["links"]["fits"]["cross_node"]["beta_Bps"] * 1e-9)' topology.json)
    awk -v b="$beta" 'BEGIN { exit !(b > 0 && b < 0.5) }' ||
        fail "cross_node fitted at $beta GB/s: not the 1 Gbit/s (0.125 GB/s) link"
    "$CPDIT" plan --topology topology.json --model builtin:shapes --width 256 --height 256 \
        --ranks 4 --images 1 > plan.out 2>&1 || { fail "cpdit plan"; cat plan.out; }
    set -- $(grep '^chosen: ' plan.out | tail -n 1) # chosen: dp D ring R ulysses U VARIANT
    if [ "$2" != dp ] || [ "$6" != ulysses ]; then
        fail "cpdit plan: no 'chosen: dp D ring R ulysses U' line"; cat plan.out
    elif [ "$7" -gt 2 ] || [ $(($3 * $5)) -lt 2 ]; then
        fail "the plan for one image puts Ulysses across nodes or nothing across them: $*"
    fi
    echo "case 4: probe over 2 nodes: cross_node $beta GB/s; plan for one 256x256 image: $* ($(( $(date +%s) - t1 )) s)"
fi

# ---------------------------------------------------------------- 5. an array over the nodes
t1=$(date +%s)
sed 's/dir: auto/dir: arr/; /^parallel:/d; s/seeds: \[1, 2\]/seeds: [1, 2, 3]/' auto.yaml > arr.yaml
j=$(submit arr.yaml --array 3 --nodes 1 --ntasks-per-node 2 -- --exclusive) && wait_job "$j" 120
s=$(job_states "$j")
[ "$s" = "COMPLETED COMPLETED COMPLETED " ] || { fail "array $j: states '$s'"; cat arr/slurm-*.out; }
"$CPDIT" status arr > status-arr.out 2>&1 || { fail "cpdit status arr"; cat status-arr.out; }
for k in 0 1 2; do
    grep -q "^array task $k of 3: 2 items, 2 done, 0 failed, 0 left" status-arr.out ||
        { fail "cpdit status arr: task $k"; cat status-arr.out; }
done
grep -q "^total: 6 items, 6 done, 0 failed, 0 left" status-arr.out || { fail "cpdit status arr: total"; cat status-arr.out; }
an=$(index_nodes arr)
echo "case 5: array of 3 one-node tasks: $s; index lines name: $an($(( $(date +%s) - t1 )) s)"
[ "$an" = "node1 node2 node3 " ] || fail "the array's 3 exclusive tasks ran on '$an', not node1-3"

echo "slurm_multinode.sh: all cases in $(( $(date +%s) - t0 )) s (cluster $CLUSTER_NODES nodes, shaping $CLUSTER_SHAPING)"
[ $status -ne 0 ] && { echo "--- slurmctld.log"; tail -n 30 "$work/cluster/slurmctld.log"; }
exit $status
