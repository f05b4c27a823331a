# session.sh — sourced by the cluster tests (tests/slurm_multinode.sh, slurm_node_failure.sh):
# `cluster_session NAME` checks the environment make check sets, makes the work folder (the
# cluster's shared file system: not under /tmp, each node has its own), starts the 3-node
# cluster (start.sh), sources its env.sh and jobs.sh, sets fail(), the teardown trap and t0,
# and cd's into the work folder. Exit 77 where the cluster cannot be made, 1 if it fails.
cluster_session() {
    : "${CPDIT:?CPDIT is set by make check}"
    top_srcdir=$(cd "${top_srcdir:-.}" && pwd)
    top_builddir=$(cd "${top_builddir:-.}" && pwd)
    case "$CPDIT" in /*) ;; *) CPDIT=$PWD/$CPDIT ;; esac
    CMP=$top_builddir/tests/png_compare
    CLUSTER=$top_srcdir/tests/cluster
    base=${CLUSTER_TMPDIR:-/var/tmp}
    work=$(mktemp -d "$base/cpdit-$1-XXXXXX") || exit 1
    chmod 755 "$work"
    status=0
    trap cleanup EXIT
    trap 'exit 1' INT TERM
    t0=$(date +%s)
    "$CLUSTER/start.sh" "$work/cluster"
    rc=$?
    [ $rc -eq 77 ] && { echo "$(basename "$0"): the cluster cannot be made here (above); skipping"; exit 77; }
    [ $rc -eq 0 ] || { echo "FAIL: the cluster did not start"; exit 1; }
    . "$work/cluster/env.sh"
    . "$CLUSTER/jobs.sh"
    cd "$work" || exit 1
}
fail() { echo "FAIL: $*"; status=1; }
cleanup() {
    "$CLUSTER/teardown.sh" "$work/cluster"
    [ "${KEEP_WORK:-0}" = 1 ] && echo "kept $work" || rm -rf "$work"
}
