/* topology_hwloc.h — one node's hardware as the "hwloc" object of the topology file (format 1,
 * topology/README.md), and where this process runs in it.
 *
 * The summary (keys and units as in the file format):
 *   packages, numa_nodes, cores, pus          object counts
 *   caches        [{level, size_bytes, count}] data/unified caches, one entry per (level, size),
 *                 by level then size
 *   memory_bytes  total memory of all NUMA nodes
 *   gpus          [{index, name, pci, numa, package, memory_bytes, vendor}] PCI devices of class
 *                 3D controller (0x0302), or VGA/display (0x0300, 0x0380) from NVIDIA (10de),
 *                 AMD (1002) or Intel's data-centre line (8086, class 0x0380), in PCI bus order;
 *                 NVML's name and memory size when NVML knows the bus id, plus GPUs that only
 *                 NVML sees (numa -1). index = position in this list.
 *   nics          [{name, kind: "network"|"openfabrics", pci, numa, package}] hwloc's network
 *                 and OpenFabrics OS devices; pci "" when not on a PCI device
 *   nvlink        [[links i->j, ...], ...] GPU x GPU matrix from NVML (topology_nvml.h) over the
 *                 gpus list; [] when NVML reports no GPU
 *   nvml          NVML's status line ("ok: driver ...", or why it is absent)
 * numa / package of a device: logical index of the NUMA node / package its closest non-I/O
 * ancestor lies in, -1 when that ancestor spans several (or none).
 */
#ifndef CPDIT_TOPOLOGY_HWLOC_H
#define CPDIT_TOPOLOGY_HWLOC_H

#include <hwloc.h>
#include <jansson.h>

#include "lib/core/cpdit_error.h"
#include "topology/topology_nvml.h"

#ifdef __cplusplus
extern "C" {
#endif

/* This machine's topology; with io = 1 also PCI devices and OS devices (network,
 * OpenFabrics, GPUs: hwloc's "important" I/O filter). Errors: CPDIT_ERR_RUNTIME. */
cpdit_status topo_hwloc_load_local(hwloc_topology_t *out, int io, cpdit_error *err);

/* A topology exported as XML (lstopo foo.xml, or a test fixture), with every I/O object kept.
 * Errors: CPDIT_ERR_INPUT (missing or malformed file), where = path. */
cpdit_status topo_hwloc_load_xml(hwloc_topology_t *out, const char *path, cpdit_error *err);

/* The summary object described above; nvml may be NULL (= NVML absent). *out is a new
 * reference. Errors: CPDIT_ERR_RUNTIME (out of memory). */
cpdit_status topo_hwloc_summary(hwloc_topology_t topo, const topo_nvml_info *nvml, json_t **out,
                                cpdit_error *err);

/* Logical index of the package / NUMA node that contains all of cpus, -1 when cpus spans
 * several or is empty. */
void topo_hwloc_locality_of(hwloc_topology_t topo, hwloc_const_cpuset_t cpus, int *package,
                            int *numa);

/* Same for this process's CPU binding (the whole machine when it is not bound: then the
 * indices are -1 unless the machine has one package / one NUMA node). */
void topo_hwloc_locality(hwloc_topology_t topo, int *package, int *numa);

#ifdef __cplusplus
}
#endif
#endif
