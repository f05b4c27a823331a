#!/usr/bin/env python3
"""topology_check.py FILE [options] — assert that a topology file (format 1) written by
`cpdit probe` is complete and consistent. Exit 0 when every check passes, 1 otherwise.

  --ranks N          world size
  --hosts-of LIST    comma-separated host index of every rank (e.g. 0,0,1,1)
  --cross-slower     cross_node must be fitted slower than every intra-host class:
                     alpha larger, beta smaller, and the largest p2p message slower
  --no-alpha         with --cross-slower: do not compare alpha (no latency was emulated)
  --compute          compute rates must be present and positive
"""
import argparse
import json
import sys

CLASSES = ("same_numa", "same_socket", "same_node", "cross_node")
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)


def pair_class(a, b):
    if a["host"] != b["host"]:
        return "cross_node"
    if a["numa"] >= 0 and a["numa"] == b["numa"]:
        return "same_numa"
    if a["package"] >= 0 and a["package"] == b["package"]:
        return "same_socket"
    return "same_node"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int)
    ap.add_argument("--hosts-of")
    ap.add_argument("--cross-slower", action="store_true")
    ap.add_argument("--no-alpha", action="store_true")
    ap.add_argument("--compute", action="store_true")
    a = ap.parse_args()
    with open(a.file) as f:
        t = json.load(f)
    check(t.get("format") == 1, "format is %r, want 1" % t.get("format"))
    n = t.get("ranks")
    if a.ranks is not None:
        check(n == a.ranks, "ranks %r, want %d" % (n, a.ranks))
    rm = t.get("rank_map", [])
    check(len(rm) == n and [e["rank"] for e in rm] == list(range(n)), "rank_map must list ranks 0..n-1")
    hosts = t.get("hosts", [])
    seen = sorted(r for h in hosts for r in h["ranks"])
    check(seen == list(range(n)), "hosts' ranks must cover 0..n-1 once, got %r" % seen)
    for i, h in enumerate(hosts):
        hw = h.get("hwloc", {})
        for k in ("packages", "numa_nodes", "cores", "pus", "memory_bytes"):
            check(isinstance(hw.get(k), int) and hw[k] > 0, "host %d hwloc.%s = %r" % (i, k, hw.get(k)))
        for k in ("caches", "gpus", "nics", "nvlink"):
            check(isinstance(hw.get(k), list), "host %d hwloc.%s not a list" % (i, k))
        for r in h["ranks"]:
            check(rm[r]["host"] == i, "rank %d: rank_map host %d, listed under host %d" % (r, rm[r]["host"], i))
    firsts = [min(h["ranks"]) for h in hosts]
    check(firsts == sorted(firsts), "hosts must be in order of their first rank")
    if a.hosts_of:
        want = [int(x) for x in a.hosts_of.split(",")]
        check([e["host"] for e in rm] == want, "hosts of ranks %r, want %r" % ([e["host"] for e in rm], want))

    links = t.get("links", {})
    p2p = links.get("p2p", [])
    fits = links.get("fits", {})
    classes = set()
    for e in p2p:
        r0, r1 = e["ranks"]
        want = pair_class(rm[r0], rm[r1])
        check(e["class"] == want, "p2p %d-%d class %s, want %s" % (r0, r1, e["class"], want))
        check(0 < e["time_s_min"] <= e["time_s_avg"] <= e["time_s_max"], "p2p %d-%d %d B: min/avg/max %r" % (r0, r1, e["bytes"], (e["time_s_min"], e["time_s_avg"], e["time_s_max"])))
        check(e["bw_Bps"] > 0, "p2p bw must be positive")
        classes.add(e["class"])
    if n > 1:
        check(len(p2p) > 0, "no p2p measurements")
        possible = {pair_class(rm[i], rm[j]) for i in range(n) for j in range(i + 1, n)}
        check(classes == possible, "measured classes %r, pairs exist of %r" % (sorted(classes), sorted(possible)))
    for c in classes:
        f = fits.get(c)
        check(f is not None and f["alpha_s"] >= 0 and f["beta_Bps"] > 0 and f["samples"] >= 2, "fit of %s: %r" % (c, f))
    for e in links.get("collectives", []):
        check(e["op"] in ("alltoall", "allgather", "sendrecv_ring"), "collective op %r" % e["op"])
        check(0 < e["time_s_min"] <= e["time_s_avg"] <= e["time_s_max"], "collective %s %d B: times" % (e["op"], e["bytes"]))
        check(e["algbw_Bps"] > 0 and e["busbw_Bps"] > 0, "collective bandwidths")
    if n > 1:
        ops = {e["op"] for e in links.get("collectives", [])}
        check(ops == {"alltoall", "allgather", "sendrecv_ring"}, "collective ops measured: %r" % sorted(ops))

    if a.cross_slower:
        cross = fits.get("cross_node")
        intra = [c for c in CLASSES[:3] if c in fits]
        check(cross is not None and intra, "need cross_node and an intra-host fit, have %r" % sorted(fits))
        if cross and intra:
            for c in intra:
                check(a.no_alpha or cross["alpha_s"] > fits[c]["alpha_s"], "alpha cross_node %.3g <= %s %.3g" % (cross["alpha_s"], c, fits[c]["alpha_s"]))
                check(cross["beta_Bps"] < fits[c]["beta_Bps"], "beta cross_node %.3g >= %s %.3g" % (cross["beta_Bps"], c, fits[c]["beta_Bps"]))
            big = max(e["bytes"] for e in p2p)
            # best trials: a loaded machine slows the mean of any class, not the best of the slow link
            tc = min(e["time_s_min"] for e in p2p if e["bytes"] == big and e["class"] == "cross_node")
            ti = max(e["time_s_min"] for e in p2p if e["bytes"] == big and e["class"] != "cross_node")
            check(tc > ti, "largest message (%d B): cross_node %.3g s not slower than intra %.3g s" % (big, tc, ti))
    if a.compute:
        c = t.get("compute", {})
        check(c.get("sgemm_flops", 0) > 0 and c.get("attention_flops", 0) > 0, "compute rates %r" % c)
        check(len(c.get("per_rank", [])) == n, "compute.per_rank must have %d entries" % n)
    for m in fails:
        print("topology_check: %s: %s" % (a.file, m), file=sys.stderr)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
