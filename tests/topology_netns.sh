#!/bin/sh
# topology_netns.sh — a two-host cluster emulated on this machine, measured by `cpdit probe`.
#
# Two network namespaces ("hosts" h1 and h2) joined by a veth pair 10.213.77.1 <-> .2, its
# both ends shaped with tc to 1 Gbit/s plus 0.5 ms delay (netem; where the kernel has no
# netem, a 1 Gbit/s token bucket without the delay). mpirun runs inside h1 with 2 ranks per
# host; Open MPI's rsh agent is a script that enters the host's namespace
# (ip netns exec NS env CPDIT_HOSTNAME=hN sh -c ...), so each "host" has its own name. Only
# TCP is allowed (--mca btl tcp,self, on the veth subnet): no shared memory between hosts.
#
# Asserts (tests/topology_check.py): ranks 0,1 on h1 and 2,3 on h2; every pair classified
# right; cross_node fitted slower than the intra-host class: beta smaller and the largest
# message slower always, alpha larger when the delay could be emulated (netem).
# When `cpdit plan` exists: its choice for 4 ranks keeps Ulysses inside a host (U <= 2) and
# puts ring or data parallelism across (R x DP >= 2).
#
# For PERFORMANCE.md: TOPOLOGY_NETNS_FULL=1 runs the full probe sweep (about a minute) and
# TOPOLOGY_NETNS_OUTPUT=FILE keeps a copy of the topology file.
#
# Needs root, ip (iproute2) and tc; exits 77 (skip) only when namespaces cannot be made.
# Everything it creates is removed on exit, also on failure or interruption.
: "${MPI_RUN:?MPI_RUN is set by make check}" "${CPDIT:?CPDIT is set by make check}"
top_srcdir=${top_srcdir:-.}
PY=${PYTHON3:-python3}
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v ip >/dev/null 2>&1 || skip "no ip (iproute2)"
command -v tc >/dev/null 2>&1 || skip "no tc (iproute2)"
command -v "$PY" >/dev/null 2>&1 || skip "no python3 for the JSON checks"

NS1=cpdit-h1-$$
NS2=cpdit-h2-$$
VA=cpv$$a
VB=cpv$$b
NET=10.213.77
tmp=$(mktemp -d)
cleanup() {
    ip netns del "$NS1" 2>/dev/null
    ip netns del "$NS2" 2>/dev/null
    ip link del "$VA" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

ip netns add "$NS1" 2>"$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
ip netns add "$NS2" || skip "cannot create a second network namespace"
ip link add "$VA" type veth peer name "$VB" 2>"$tmp/err" || skip "cannot create a veth pair: $(cat "$tmp/err")"
ip link set "$VA" netns "$NS1" && ip link set "$VB" netns "$NS2" || skip "cannot move veth ends into the namespaces"
setup() { # ns dev addr
    ip -n "$1" link set lo up && ip -n "$1" addr add "$3/24" dev "$2" && ip -n "$1" link set "$2" up
}
setup "$NS1" "$VA" "$NET.1" && setup "$NS2" "$VB" "$NET.2" || { echo "FAIL: cannot configure the veth pair"; exit 1; }

# 1 Gbit/s and 0.5 ms each way; without netem a token bucket gives the rate only
shaping=netem
for pair in "$NS1 $VA" "$NS2 $VB"; do
    set -- $pair
    if ! ip netns exec "$1" tc qdisc add dev "$2" root netem rate 1gbit delay 0.5ms 2>/dev/null; then
        shaping=tbf
        ip netns exec "$1" tc qdisc add dev "$2" root tbf rate 1gbit burst 128kb latency 100ms ||
            { echo "FAIL: tc can shape neither with netem nor with tbf"; exit 1; }
    fi
done
echo "link: veth $NET.1 <-> $NET.2, 1 Gbit/s$([ $shaping = netem ] && echo ', 0.5 ms delay' || echo ' (no netem in this kernel: no delay)')"
# reachable: a TCP connect to a closed port is refused (not timed out)
ip netns exec "$NS1" "$PY" -c "
import socket, sys
s = socket.socket(); s.settimeout(3)
try:
    s.connect(('$NET.2', 9))
except ConnectionRefusedError:
    pass
except OSError as e:
    sys.exit('$NET.2 not reachable from $NS1: %s' % e)" || { echo "FAIL: veth pair does not carry traffic"; exit 1; }

cat > "$tmp/agent.sh" <<EOF
#!/bin/sh
# Open MPI rsh agent: agent.sh [ssh-style options] HOST COMMAND...
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in
    $NET.1|h1) ns=$NS1; name=h1 ;;
    $NET.2|h2) ns=$NS2; name=h2 ;;
    *) echo "agent.sh: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" env CPDIT_HOSTNAME="\$name" sh -c "\$*"
EOF
chmod +x "$tmp/agent.sh"

# mpirun runs in h1 (its own ranks may be started directly or through the agent: both enter h1)
mpi() {
    CPDIT_MPI_TIMEOUT=${CPDIT_MPI_TIMEOUT:-120} ip netns exec "$NS1" env CPDIT_HOSTNAME=h1 \
        "$MPI_RUN" -np 4 --host "$NET.1:2,$NET.2:2" --mca plm_rsh_agent "$tmp/agent.sh" \
        --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" \
        --mca oob_tcp_if_include "$NET.0/24" "$@"
}
start=$(date +%s)
quick=--quick
[ "${TOPOLOGY_NETNS_FULL:-0}" = 1 ] && quick=
mpi "$CPDIT" probe $quick --no-compute --output "$tmp/topology.json" > "$tmp/out" 2>&1
rc=$?
[ -n "${TOPOLOGY_NETNS_OUTPUT:-}" ] && cp "$tmp/topology.json" "$TOPOLOGY_NETNS_OUTPUT"
cat "$tmp/out"
[ $rc -eq 0 ] || { echo "FAIL: cpdit probe in the namespaces: exit $rc"; exit 1; }
status=0
alpha=""
[ $shaping = netem ] || alpha="--no-alpha"
# shellcheck disable=SC2086
"$PY" "$top_srcdir/tests/topology_check.py" "$tmp/topology.json" --ranks 4 --hosts-of 0,0,1,1 \
    --cross-slower $alpha || status=1
"$PY" - "$tmp/topology.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
for c, f in sorted(t["links"]["fits"].items()):
    print("fit %-11s alpha %8.1f us  beta %8.3f GB/s  (%d samples)" % (c, f["alpha_s"] * 1e6, f["beta_Bps"] * 1e-9, f["samples"]))
EOF

# the planner's choice, when this build has one
"$CPDIT" plan --topology "$tmp/topology.json" --model builtin:tiny --width 512 --height 512 \
    --ranks 4 > "$tmp/plan" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "does not include" "$tmp/plan"; then
    echo "note: this build has no 'cpdit plan'; the planner check is not run"
else
    cat "$tmp/plan"
    chosen=$(grep '^chosen: ' "$tmp/plan" | tail -n 1)
    set -- $chosen # chosen: dp D ring R ulysses U VARIANT
    if [ $rc -ne 0 ] || [ "$2" != dp ] || [ "$4" != ring ] || [ "$6" != ulysses ]; then
        echo "FAIL: cpdit plan: exit $rc, no 'chosen: dp D ring R ulysses U' line"; status=1
    elif [ "$7" -gt 2 ] || [ $(($3 * $5)) -lt 2 ]; then
        echo "FAIL: plan puts Ulysses across hosts or nothing across them: $chosen"; status=1
    else
        echo "ok: plan keeps Ulysses inside a host: $chosen"
    fi
fi
echo "time: $(( $(date +%s) - start )) s"
[ $status -eq 0 ] && echo "ok: two emulated hosts measured and classified"
exit $status
