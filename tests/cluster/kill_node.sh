#!/bin/bash
# kill_node.sh WORK NODE — NODE of the cluster in WORK dies as in a power cut: its link goes
# down first (so no FIN or RST reaches the other nodes: they learn of it only by timeouts),
# then its slurmd and every other process in its network namespace get KILL. The namespace
# stays (teardown.sh removes it). Prints the time of the kill (date +%s.%N).
set -u
WORK=${1:?usage: kill_node.sh WORK NODE}
NODE=${2:?usage: kill_node.sh WORK NODE}
PATH="$PATH:/usr/sbin:/sbin"
. "$WORK/env.sh" || exit 1
eval ns=\${CLUSTER_NS_$NODE:-}
[ -n "$ns" ] || { echo "kill_node.sh: no node $NODE in $WORK" >&2; exit 2; }
k=${NODE#node}
ip -n "$CLUSTER_HEAD" link set "port$k" down || exit 1
date +%s.%N
for round in 1 2 3; do
    p=$(ip netns pids "$ns")
    [ -n "$p" ] || break
    kill -9 $p 2>/dev/null
    sleep 0.2
done
p=$(ip netns pids "$ns")
[ -z "$p" ] || { echo "kill_node.sh: processes left in $ns: $p" >&2; exit 1; }
exit 0
