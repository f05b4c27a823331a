#!/bin/bash
# start.sh WORK [NODES] — a Slurm cluster of NODES (default 3) nodes on this one machine.
#
#   head    a network namespace + UTS namespace (host name "head") holding the bridge br0
#           (10.214.0.254/24), munged and slurmctld;
#   nodeK   a network namespace + UTS namespace (host name "nodeK") + mount namespace (its own
#           /tmp: WORK/tmp-nodeK, so WORK must not be under /tmp; its own /dev/shm, a tmpfs)
#           with eth0 = 10.214.0.K/24,
#           the other end of its veth pair a port of br0; slurmd -N nodeK runs there, and so
#           does everything it starts (job scripts, srun steps, MPI ranks).
# The 10.214.0.0/24 addresses exist inside these namespaces only: nothing is added to this
# machine's own network namespace. Every node link is shaped with tc on both ends (node
# egress, bridge-port egress): 1 Gbit/s and CLUSTER_DELAY (default 0.25 ms) each, so 0.5 ms
# one way node to node; without netem in the kernel, a 1 Gbit/s token bucket (no delay).
# munge: one munged (its socket is a file: reachable from every network namespace) with a
# fresh key. Slurm: the same slurmd port on every node (each has its own network stack),
# proctrack/linuxproc (cgroups are not required), task/none, select/cons_tres, no
# accounting, JobRequeue=1, SlurmdTimeout CLUSTER_SLURMD_TIMEOUT (default 10 s) so a dead node
# goes DOWN quickly, cred_expire 10 s so a requeued job may start again soon.
#
# Written to WORK: slurm.conf, logs (slurmctld.log, slurmd-nodeK.log, munge/munged.log),
# env.sh (SLURM_CONF, CLUSTER_* names and the function in_head CMD...: run a command in the
# head namespace, where slurmctld can be reached), made.list (what teardown.sh removes).
# Exit 0 when all nodes are idle; 77 when namespaces, veth pairs or a bridge cannot be made
# here (the reason on stderr); 1 on any other failure. On failure, what was made is removed.
# Needs root, ip (iproute2), tc, unshare (util-linux), Debian's slurm-wlm and munge.
set -u
WORK=${1:?usage: start.sh WORK [NODES]}
NODES=${2:-3}
DELAY=${CLUSTER_DELAY:-0.25ms}
SLURMD_TIMEOUT=${CLUSTER_SLURMD_TIMEOUT:-10}
NET=10.214.0
SHM_SIZE=1g # each node's /dev/shm (a tmpfs: only what is written uses memory)
HERE=$(cd "$(dirname "$0")" && pwd)
PATH="$PATH:/usr/sbin:/sbin"

skip() { echo "cluster/start.sh: $*" >&2; "$HERE/teardown.sh" "$WORK" >/dev/null 2>&1; exit 77; }
die() {
    echo "cluster/start.sh: $*" >&2
    for f in "$WORK"/*.log "$WORK"/munge/*.log; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
    done
    "$HERE/teardown.sh" "$WORK" >/dev/null 2>&1
    exit 1
}
[ "$(id -u)" -eq 0 ] || skip "network namespaces and slurmd need root"
for p in ip tc unshare nsenter munged slurmctld slurmd sinfo; do
    command -v "$p" >/dev/null 2>&1 || skip "$p not found (build-aux/install-deps.sh --tests)"
done
mkdir -p "$WORK" && chmod 755 "$WORK" || exit 1
WORK=$(cd "$WORK" && pwd -P)
case "$WORK/" in
    /tmp/*) echo "cluster/start.sh: WORK ($WORK) must not be under /tmp: every node has a /tmp of its own" >&2
            exit 2 ;;
esac
: > "$WORK/made.list"
made() { echo "$*" >> "$WORK/made.list"; } # KIND NAME: for teardown.sh

# ------------------------------------------------------------------ network
ID=$$
HEAD=cpdit-c$ID-head
ip netns add "$HEAD" 2>"$WORK/err" || skip "cannot create a network namespace: $(cat "$WORK/err")"
made netns "$HEAD"
ip -n "$HEAD" link set lo up
ip -n "$HEAD" link add br0 type bridge 2>"$WORK/err" || skip "cannot create a bridge: $(cat "$WORK/err")"
ip -n "$HEAD" addr add "$NET.254/24" dev br0 && ip -n "$HEAD" link set br0 up || die "cannot configure br0"
shaping=netem
# shape DEV in NS: 1 Gbit/s with DELAY (netem), else a 1 Gbit/s token bucket
shape() {
    if [ $shaping = netem ] &&
        ip netns exec "$1" tc qdisc add dev "$2" root netem rate 1gbit delay "$DELAY" limit 10000 2>/dev/null; then
        return 0
    fi
    shaping=tbf
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate 1gbit burst 128kb latency 100ms
}
for k in $(seq 1 "$NODES"); do
    ns=cpdit-c$ID-node$k
    ip netns add "$ns" 2>"$WORK/err" || skip "cannot create a network namespace: $(cat "$WORK/err")"
    made netns "$ns"
    a=cpc${ID}n$k b=cpc${ID}b$k
    ip link add "$a" type veth peer name "$b" 2>"$WORK/err" || skip "cannot create a veth pair: $(cat "$WORK/err")"
    ip link set "$a" netns "$ns" name eth0 && ip link set "$b" netns "$HEAD" name "port$k" ||
        skip "cannot move veth ends into the namespaces"
    ip -n "$ns" link set lo up && ip -n "$ns" addr add "$NET.$k/24" dev eth0 &&
        ip -n "$ns" link set eth0 up || die "cannot configure eth0 of node$k"
    ip -n "$HEAD" link set "port$k" master br0 && ip -n "$HEAD" link set "port$k" up ||
        die "cannot attach port$k to br0"
    shape "$ns" eth0 || die "tc can shape neither with netem nor with tbf (node$k)"
    shape "$HEAD" "port$k" || die "tc can shape neither with netem nor with tbf (port$k)"
done
# reachable: from node1 a TCP connect to a closed port of the last node is refused
ip netns exec "cpdit-c$ID-node1" bash -c "exec 3<>/dev/tcp/$NET.$NODES/9" 2>"$WORK/err"
grep -q -i refused "$WORK/err" || die "the bridge does not carry traffic: $(cat "$WORK/err")"

# ------------------------------------------------------------------ munge
mkdir -p "$WORK/munge" "$WORK/state" && chmod 711 "$WORK/munge"
for k in $(seq 1 "$NODES"); do mkdir -p "$WORK/spool-node$k" "$WORK/tmp-node$k" && chmod 1777 "$WORK/tmp-node$k"; done
dd if=/dev/urandom of="$WORK/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$WORK/munge/munge.key"
ip netns exec "$HEAD" munged --force --key-file="$WORK/munge/munge.key" \
    --socket="$WORK/munge/munge.sock" --pid-file="$WORK/munge/munged.pid" \
    --log-file="$WORK/munge/munged.log" --seed-file="$WORK/munge/munged.seed" ||
    skip "munged does not start"
made pidfile "$WORK/munge/munged.pid"

# ------------------------------------------------------------------ Slurm
PORT=6817
cat > "$WORK/slurm.conf" <<EOF
ClusterName=cpditcluster
SlurmctldHost=head($NET.254)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$WORK/munge/munge.sock,cred_expire=10
CredType=cred/munge
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool-%n
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd-%n.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
JobRequeue=1
ReturnToService=0
SlurmdTimeout=$SLURMD_TIMEOUT
MessageTimeout=5
TCPTimeout=2
KillWait=5
MinJobAge=600
SlurmdParameters=config_overrides
NodeName=node[1-$NODES] NodeAddr=$NET.[1-$NODES] CPUs=4 RealMemory=4000 State=UNKNOWN
PartitionName=batch Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
export SLURM_CONF="$WORK/slurm.conf"
# in_ns NS CMD...: CMD in the network namespace NS. nsenter, not `ip netns exec`: that one
# mounts a sysfs of its own, without /sys/fs/cgroup, and slurmd will not start without it.
in_ns() { ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }
in_ns "$HEAD" unshare --uts sh -c 'hostname head && exec slurmctld -i' ||
    die "slurmctld does not start"
made pidfile "$WORK/slurmctld.pid"
for k in $(seq 1 "$NODES"); do
    ns=cpdit-c$ID-node$k
    made pidfile "$WORK/slurmd-node$k.pid"
    # a mount namespace too, for a /tmp and a /dev/shm of its own: Slurm's PMIx plugin and
    # Open MPI keep per-step folders in /tmp whose names are the same on every node, and Open
    # MPI's shared-memory segments in /dev/shm are named by host and job ("node2", job 1 step
    # 0 on every cluster this script makes)
    in_ns "$ns" unshare --uts --mount --propagation private sh -c \
        "hostname node$k && mount --bind '$WORK/tmp-node$k' /tmp &&
         mount -t tmpfs -o mode=1777,size=$SHM_SIZE cpdit-node$k-shm /dev/shm &&
         exec slurmd -N node$k" ||
        die "slurmd of node$k does not start"
done
cat > "$WORK/env.sh" <<EOF
# sourced by the tests: the cluster made by tests/cluster/start.sh
export SLURM_CONF='$WORK/slurm.conf'
CLUSTER_WORK='$WORK'
CLUSTER_HEAD='$HEAD'
CLUSTER_NODES=$NODES
CLUSTER_NET=$NET
CLUSTER_SHAPING=$shaping
CLUSTER_DELAY=$DELAY
# CLUSTER_NS_nodeK: the network namespace of node K
$(for k in $(seq 1 "$NODES"); do echo "CLUSTER_NS_node$k=cpdit-c$ID-node$k"; done)
in_head() { nsenter --net="/run/netns/\$CLUSTER_HEAD" "\$@"; }
EOF
i=0
until [ "$(ip netns exec "$HEAD" sinfo -h -o %T 2>/dev/null | sort -u)" = idle ]; do
    i=$((i + 1))
    [ $i -gt 200 ] && die "the nodes are not idle after 40 s: $(ip netns exec "$HEAD" sinfo -h -N -o '%N %T' 2>&1 | tr '\n' ' ')"
    sleep 0.2
done
echo "cluster: $NODES nodes idle after $((i / 5)) s; links 1 Gbit/s$([ $shaping = netem ] &&
    echo ", $DELAY delay per hop (netem)" || echo " (no netem: no delay)"); work $WORK"
