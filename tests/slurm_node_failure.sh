#!/bin/bash
# slurm_node_failure.sh — a node dies while a 2-node job renders; Slurm requeues the job, it
# restarts on the nodes left and the rerun resumes exactly. On the 3-node namespace cluster of
# tests/cluster/start.sh (SlurmdTimeout 10 s, cred_expire 10 s, KillWait 5 s), builtin:shapes
# at 256x256, 50 steps, 36 images, `cpdit submit --nodes 2 --ntasks-per-node 2 --dp 2
# --ulysses 2` (srun --mpi=pmix; one dp group per node, its leader writing that node's index
# part). Once node2's leader has written an image, tests/cluster/kill_node.sh cuts node2's link
# and KILLs its slurmd and every process in its namespace (a power cut: the other node gets no
# FIN or RST). Asserts:
#  - the job stops running on the nodes within 60 s of the kill (Slurm marks node2 DOWN after
#    SlurmdTimeout, cancels the step "due to node failure" and requeues the job: Restarts=1);
#  - it runs again on node1 + node3 and COMPLETES; node2 stays DOWN;
#  - every image once (36 PNGs, 36 ok index lines over the index and its node parts, no
#    duplicates, no temporary file, no lock left), every PNG readable, and a sample of them
#    (2 of the first run, 2 of the rerun) equal to 1-rank renders within 1/255;
#  - index lines consistent: those of the first run (restart 0) name node1 or node2, those of
#    the rerun (restart 1) node1 or node3, and their counts match the rerun's "already done" /
#    "to do" line.
# Prints the measured times: node DOWN, job requeued, job ended on the nodes, job running
# again, job completed (seconds after the kill). Exit 77 (skip) as slurm_multinode.sh.
. "${top_srcdir:-.}/tests/cluster/session.sh"
cluster_session nodefail

W=256 H=256 STEPS=50 N=36
cat > fail.yaml <<EOF
model: builtin:shapes
output: {dir: fail}
defaults: {steps: $STEPS, width: $W, height: $H, true_cfg: 1}
seeds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
prompts:
  - a large red circle in the center on a blue background
  - a small green square in the top left corner on a yellow background
  - a large blue triangle in the bottom right corner on a white background
EOF
lines() { cat "$1"/index*.jsonl 2>/dev/null | wc -l; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

j=$(submit fail.yaml --weight-format fp32 --nodes 2 --ntasks-per-node 2 --dp 2 --ulysses 2) || exit 1
# node2's leader appends to its node part: wait for its first image
i=0
until [ "$(cat fail/index.node-node2.jsonl 2>/dev/null | wc -l)" -ge 1 ] || [ $i -gt 1200 ]; do
    sleep 0.1; i=$((i + 1))
done
nodes=$(job_field "$j" NodeList)
[ "$nodes" = "node[1-2]" ] || fail "job $j runs on '$nodes', expected node[1-2]"
[ "$(job_states "$j")" = "RUNNING " ] || { fail "job $j is not running: '$(job_states "$j")'"; cat fail/slurm-*.out; exit 1; }
before=$(lines fail)
[ "$before" -lt "$N" ] || { fail "all $N images were done before the kill: the case needs a longer job"; exit 1; }
tk=$("$CLUSTER/kill_node.sh" "$work/cluster" node2) || fail "kill_node.sh node2"
echo "killed node2 at $before of $N images"

# watch: node2 DOWN, Restarts=1, the job off the nodes (PENDING), RUNNING again, COMPLETED
t_down= t_requeue= t_ended= t_again= t_done=
while :; do
    t=$(now)
    s=$(job_states "$j")
    r=$(job_field "$j" Restarts)
    [ -z "$t_down" ] && in_head sinfo -h -n node2 -o %T | grep -q '^down' && t_down=$t
    [ -z "$t_requeue" ] && [ "$r" = 1 ] && t_requeue=$t
    [ -z "$t_ended" ] && [ "$r" = 1 ] && [ "$s" = "PENDING " ] && t_ended=$t
    [ -z "$t_ended" ] && [ "$r" = 1 ] && [ "$s" = "RUNNING " ] && t_ended=$t
    [ -z "$t_again" ] && [ "$r" = 1 ] && [ "$s" = "RUNNING " ] && t_again=$t
    case "$s" in COMPLETED*|FAILED*|CANCELLED*|NODE_FAIL*|TIMEOUT*) t_done=$t; break ;; esac
    if [ "$(since "$tk" "$t" | cut -d. -f1)" -ge 240 ]; then
        fail "job $j not done 240 s after the kill: '$s', Restarts=$r"; break
    fi
    if [ -z "$t_ended" ] && [ "$(since "$tk" "$t" | cut -d. -f1)" -ge 60 ]; then
        fail "job $j still '$s' (Restarts=$r) 60 s after the node died: it hangs"
        t_ended=$t
    fi
    sleep 0.25
done
s=$(job_states "$j")
[ "$s" = "COMPLETED " ] || { fail "job $j ended '$s'"; cat fail/slurm-*.out; }
[ "$(job_field "$j" Restarts)" = 1 ] || fail "job $j: Restarts=$(job_field "$j" Restarts), expected 1"
nodes=$(job_field "$j" NodeList)
[ "$nodes" = "node[1,3]" ] || fail "the rerun ran on '$nodes', expected node[1,3]"
in_head sinfo -h -n node2 -o %T | grep -q '^down' || fail "node2 is not DOWN: $(in_head sinfo -h -n node2 -o %T)"
grep -q 'DUE TO NODE FAILURE' "fail/slurm-$j.out" || fail "the log does not say the step was cancelled for the node failure"

# every image once, readable, a sample equal to 1-rank renders
check_set fail "$N"
bad=0
for f in fail/*.png; do "$CMP" "$f" "$f" 0 >/dev/null 2>&1 || { bad=$((bad + 1)); fail "$f: not a readable PNG"; }; done
# the index lines of each run, and where they were rendered
cat fail/index*.jsonl > all.jsonl
r0=$(grep -c '"restart_count":0,' all.jsonl)
r1=$(grep -c '"restart_count":1,' all.jsonl)
n0=$(grep '"restart_count":0,' all.jsonl | sed -n 's/.*"node":"\([^"]*\)".*/\1/p' | sort -u | tr '\n' ' ')
n1=$(grep '"restart_count":1,' all.jsonl | sed -n 's/.*"node":"\([^"]*\)".*/\1/p' | sort -u | tr '\n' ' ')
[ $((r0 + r1)) -eq "$N" ] || fail "$r0 + $r1 index lines from the two runs, expected $N"
[ "$r1" -ge 1 ] || fail "no image from the rerun"
case "$n0" in "node1 node2 "|"node2 ") ;; *) fail "first-run lines name '$n0', expected node1 node2" ;; esac
case "$n1" in "node1 node3 "|"node3 "|"node1 ") ;; *) fail "rerun lines name '$n1', expected node1/node3" ;; esac
grep -q "^\[cpdit\] .*: $N items, $r0 already done, $r1 to do" "fail/slurm-$j.out" ||
    fail "the rerun's summary does not say $r0 already done, $r1 to do: $(grep 'already done' "fail/slurm-$j.out" | tail -n 1)"
grep -q '^\[cpdit\] placement: node1 ranks 0,1; node3 ranks 2,3;' "fail/slurm-$j.out" ||
    fail "the rerun's placement: $(grep placement "fail/slurm-$j.out" | tail -n 1)"
# sample: the first 2 lines of each run, rendered again on 1 rank
k=0
for run in 0 1; do
    grep "\"restart_count\":$run," all.jsonl | head -n 2 > sample.jsonl
    while read -r line; do
        p=$(echo "$line" | sed 's/.*"prompt":"\([^"]*\)".*/\1/')
        sd=$(echo "$line" | sed 's/.*"seed":\([0-9]*\).*/\1/')
        f=$(echo "$line" | sed 's/.*"file":"\([^"]*\)".*/\1/')
        k=$((k + 1))
        "$CPDIT" run --model builtin:shapes --prompt "$p" --seed "$sd" --width $W --height $H \
            --steps $STEPS --true-cfg 1 --weight-format fp32 --output "ref$k" > "ref$k.log" 2>&1 ||
            { fail "1-rank render of '$p' seed $sd"; cat "ref$k.log"; continue; }
        d=$("$CMP" ref$k/*.png "fail/$(basename "$f")" 1) ||
            fail "$(basename "$f") (restart $run) vs its 1-rank render: $d"
    done < sample.jsonl
done
echo "images: $N once each ($r0 by the first run on $n0, $r1 by the rerun on $n1); $k of them equal 1-rank renders within 1/255"
echo "times after the kill: node2 DOWN $(since "$tk" "${t_down:-$tk}") s, requeued (Restarts=1)" \
     "$(since "$tk" "${t_requeue:-$tk}") s, off the nodes $(since "$tk" "${t_ended:-$tk}") s," \
     "running again on $nodes $(since "$tk" "${t_again:-$tk}") s, completed $(since "$tk" "$t_done") s"
echo "slurm_node_failure.sh: $(( $(date +%s) - t0 )) s in all"
[ $status -ne 0 ] && { echo "--- slurmctld.log"; tail -n 30 "$work/cluster/slurmctld.log"; }
exit $status
