#!/bin/bash
# teardown.sh WORK — remove the cluster that tests/cluster/start.sh made in WORK: only what
# WORK/made.list names. Every process inside the cluster's network namespaces (slurmd, job
# scripts, srun steps, MPI ranks) and the daemons of its pid files (slurmctld, munged) get
# TERM, then KILL after 3 s; then the namespaces are deleted (which removes the bridge and the
# veth pairs). WORK itself is left to the caller. Safe to run twice, or on a half-made cluster.
set -u
WORK=${1:?usage: teardown.sh WORK}
PATH="$PATH:/usr/sbin:/sbin"
[ -f "$WORK/made.list" ] || exit 0
pids() { # every process of our namespaces and pid files
    while read -r kind name; do
        case $kind in
            netns) ip netns pids "$name" 2>/dev/null ;;
            pidfile) [ -s "$name" ] && cat "$name" ;;
        esac
    done < "$WORK/made.list" | sort -un
}
for sig in TERM KILL; do
    p=$(pids)
    [ -n "$p" ] || break
    kill -s $sig $p 2>/dev/null
    i=0
    while [ $sig = TERM ] && [ $i -lt 30 ] && kill -0 $p 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
done
# the namespaces: nodes first, then head (its bridge ports are the nodes' peers)
grep '^netns ' "$WORK/made.list" | sort -r | while read -r _ name; do
    ip netns del "$name" 2>/dev/null
done
rm -f "$WORK/made.list"
exit 0
