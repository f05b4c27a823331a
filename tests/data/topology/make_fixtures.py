#!/usr/bin/env python3
"""Writes the synthetic topology fixtures of tests/test_cost_model.c (format 1,
/work/wt/TOPOLOGY-FORMAT.md). Run from this folder; the JSON files are committed."""
import json


def doc(hosts, per_host, fits, sgemm, attn, gpus=0, gpu_mem=0, nics=1, coll=(), nvlink=None,
        packages=1, mem=512e9):
    ranks = hosts * per_host
    d = {"format": 1, "cpdit_version": "fixture", "created": "2026-12-01T10:00:00Z",
         "ranks": ranks, "hosts": [], "rank_map": [],
         "links": {"p2p": [], "collectives": list(coll), "fits": fits},
         "compute": {"sgemm_flops": sgemm, "attention_flops": attn, "per_rank": [],
                     "threads_per_rank": 1}}
    for h in range(hosts):
        d["hosts"].append({"name": "node%02d" % (h + 1),
                           "ranks": list(range(h * per_host, (h + 1) * per_host)),
                           "hwloc": {"packages": packages, "numa_nodes": packages,
                                     "cores": 64, "pus": 128, "caches": [],
                                     "memory_bytes": mem,
                                     "gpus": [{"index": g, "name": "GPU", "pci": "", "numa": 0,
                                               "memory_bytes": gpu_mem} for g in range(gpus)],
                                     "nics": [{"name": "mlx5_%d" % i, "kind": "openfabrics",
                                               "pci": "", "numa": 0} for i in range(nics)],
                                     "nvlink": nvlink or []}})
        for l in range(per_host):
            pkg = l * packages // per_host
            d["rank_map"].append({"rank": h * per_host + l, "host": h, "local_rank": l,
                                  "package": pkg, "numa": pkg, "gpu": l if gpus else -1})
    for cls, f in fits.items():
        for size in (1 << 10, 1 << 16, 1 << 20, 1 << 24):
            t = f["alpha_s"] + size / f["beta_Bps"]
            d["links"]["p2p"].append({"class": cls, "ranks": [0, 1], "bytes": size,
                                      "time_s_min": t, "time_s_avg": t, "time_s_max": t,
                                      "bw_Bps": size / t})
    return d


def write(name, d):
    with open(name, "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")


# 2 nodes x 8 GPUs: NVLink inside a node (150 GB/s), one 200 Gbit/s NIC per GPU across
write("two_nodes_8gpu.json",
      doc(2, 8, {"same_node": {"alpha_s": 1e-5, "beta_Bps": 1.5e11, "samples": 12},
                 "cross_node": {"alpha_s": 2e-5, "beta_Bps": 2.5e10, "samples": 12}},
          5e14, 4e14, gpus=8, gpu_mem=80e9, nics=8))
# one node of 8 PCIe GPUs, no NVLink: pairs run at 12 GB/s, but an all-to-all over all 8
# congests the host bridge (measured collectives: 2 GB/s algbw over 8, 6 over 4, 10 over 2)
pcie_coll = []
for n, algbw in ((2, 10e9), (4, 6e9), (8, 2e9)):
    for size in (1 << 20, 1 << 24):
        t = 1e-5 * (n - 1) + size / algbw
        pcie_coll.append({"op": "alltoall", "group_ranks": list(range(n)), "bytes": size,
                          "time_s_min": t, "time_s_avg": t, "time_s_max": t,
                          "algbw_Bps": size / t, "busbw_Bps": size / t * (n - 1) / n})
write("pcie_node.json",
      doc(1, 8, {"same_node": {"alpha_s": 1e-5, "beta_Bps": 1.2e10, "samples": 12}},
          5e14, 4e14, gpus=8, gpu_mem=48e9, nics=1, coll=pcie_coll))
# one CPU host, 4 ranks, 2 packages: shared memory
write("cpu_4ranks.json",
      doc(1, 4, {"same_numa": {"alpha_s": 2e-6, "beta_Bps": 8e9, "samples": 12},
                 "same_node": {"alpha_s": 4e-6, "beta_Bps": 5e9, "samples": 12}},
          1e11, 8e10, packages=2, mem=64e9))
d = doc(1, 2, {"same_node": {"alpha_s": 2e-6, "beta_Bps": 8e9, "samples": 12}}, 1e11, 8e10)
d["format"] = 2
write("format2.json", d)
