/* topology_hwloc.c — hwloc 2.x node summary and process locality (see topology_hwloc.h). */
#include "topology/topology_hwloc.h"

#include <stdio.h>
#include <string.h>

#define WHERE_HWLOC "hwloc"

/* PCI class ids (class << 8 | subclass) and vendors used to recognise GPUs. */
#define PCI_CLASS_VGA 0x0300
#define PCI_CLASS_3D 0x0302
#define PCI_CLASS_DISPLAY_OTHER 0x0380
#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_VENDOR_AMD 0x1002
#define PCI_VENDOR_INTEL 0x8086

cpdit_status topo_hwloc_load_local(hwloc_topology_t *out, int io, cpdit_error *err)
{
    hwloc_topology_t t;
    *out = NULL;
    if (hwloc_topology_init(&t) != 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_HWLOC, "hwloc_topology_init failed");
    hwloc_topology_set_io_types_filter(t, io ? HWLOC_TYPE_FILTER_KEEP_IMPORTANT
                                             : HWLOC_TYPE_FILTER_KEEP_NONE);
    if (hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_HWLOC,
                               "cannot read this machine's topology (hwloc_topology_load)");
    }
    *out = t;
    return CPDIT_OK;
}

cpdit_status topo_hwloc_load_xml(hwloc_topology_t *out, const char *path, cpdit_error *err)
{
    hwloc_topology_t t;
    *out = NULL;
    if (hwloc_topology_init(&t) != 0)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_HWLOC, "hwloc_topology_init failed");
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (hwloc_topology_set_xml(t, path) != 0 || hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "not a readable hwloc XML topology");
    }
    *out = t;
    return CPDIT_OK;
}

/* Index of the one object of `type` whose set includes `set`, else -1. by_nodeset: compare
 * node sets instead of CPU sets. */
static int containing_index(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_const_bitmap_t set,
                            int by_nodeset)
{
    if (!set || hwloc_bitmap_iszero(set))
        return -1;
    int found = -1;
    const int n = hwloc_get_nbobjs_by_type(topo, type);
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, (unsigned)i);
        hwloc_const_bitmap_t os = by_nodeset ? o->nodeset : o->cpuset;
        if (os && hwloc_bitmap_isincluded(set, os)) {
            if (found >= 0)
                return -1; /* objects with overlapping sets: ambiguous */
            found = (int)o->logical_index;
        }
    }
    return found;
}

void topo_hwloc_locality_of(hwloc_topology_t topo, hwloc_const_cpuset_t cpus, int *package,
                            int *numa)
{
    *package = containing_index(topo, HWLOC_OBJ_PACKAGE, cpus, 0);
    *numa = containing_index(topo, HWLOC_OBJ_NUMANODE, cpus, 0);
}

void topo_hwloc_locality(hwloc_topology_t topo, int *package, int *numa)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    *package = *numa = -1;
    if (!set)
        return;
    if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0)
        hwloc_bitmap_copy(set, hwloc_topology_get_topology_cpuset(topo));
    /* only the CPUs this topology knows (a binding may name offline ones) */
    hwloc_bitmap_and(set, set, hwloc_topology_get_topology_cpuset(topo));
    topo_hwloc_locality_of(topo, set, package, numa);
    hwloc_bitmap_free(set);
}

/* NUMA node and package of an I/O object: through its closest non-I/O ancestor. */
static void io_locality(hwloc_topology_t topo, hwloc_obj_t io, int *package, int *numa)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, io);
    *package = *numa = -1;
    if (!anc)
        return;
    *package = containing_index(topo, HWLOC_OBJ_PACKAGE, anc->cpuset, 0);
    *numa = containing_index(topo, HWLOC_OBJ_NUMANODE, anc->nodeset, 1);
}

static void pci_busid(hwloc_obj_t pci, char *out)
{
    snprintf(out, TOPO_PCI_BUSID_MAX, "%04x:%02x:%02x.%x", (unsigned)pci->attr->pcidev.domain,
             pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

static int is_gpu(hwloc_obj_t pci)
{
    const unsigned cls = pci->attr->pcidev.class_id, vendor = pci->attr->pcidev.vendor_id;
    if (cls == PCI_CLASS_3D)
        return 1;
    if (cls == PCI_CLASS_VGA)
        return vendor == PCI_VENDOR_NVIDIA || vendor == PCI_VENDOR_AMD;
    if (cls == PCI_CLASS_DISPLAY_OTHER)
        return vendor == PCI_VENDOR_NVIDIA || vendor == PCI_VENDOR_AMD ||
               vendor == PCI_VENDOR_INTEL;
    return 0;
}

/* json_array_append_new / json_object_set_new with one failure flag. */
static int put(json_t *obj, const char *key, json_t *v)
{
    return v && json_object_set_new(obj, key, v) == 0 ? 0 : -1;
}

static int add_caches(hwloc_topology_t topo, json_t *caches)
{
    static const hwloc_obj_type_t types[] = {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L2CACHE,
                                             HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L4CACHE,
                                             HWLOC_OBJ_L5CACHE};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const int n = hwloc_get_nbobjs_by_type(topo, types[t]);
        unsigned long long sizes[64];
        int counts[64], n_sizes = 0;
        for (int i = 0; i < n; i++) {
            hwloc_obj_t o = hwloc_get_obj_by_type(topo, types[t], (unsigned)i);
            if (o->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION)
                continue;
            const unsigned long long size = o->attr->cache.size;
            int k = 0;
            while (k < n_sizes && sizes[k] != size)
                k++;
            if (k == n_sizes) {
                if (n_sizes == 64)
                    continue;
                /* keep sizes ascending */
                while (k > 0 && sizes[k - 1] > size) {
                    sizes[k] = sizes[k - 1];
                    counts[k] = counts[k - 1];
                    k--;
                }
                sizes[k] = size;
                counts[k] = 0;
                n_sizes++;
            }
            counts[k]++;
        }
        for (int k = 0; k < n_sizes; k++) {
            json_t *c = json_object();
            if (!c || json_array_append_new(caches, c) != 0 ||
                put(c, "level", json_integer((json_int_t)t + 1)) ||
                put(c, "size_bytes", json_integer((json_int_t)sizes[k])) ||
                put(c, "count", json_integer(counts[k])))
                return -1;
        }
    }
    return 0;
}

static int add_gpus(hwloc_topology_t topo, const topo_nvml_info *nvml, json_t *gpus,
                    char (*pcis)[TOPO_PCI_BUSID_MAX], int *n_pcis)
{
    int used[TOPO_NVML_MAX_GPUS] = {0};
    hwloc_obj_t o = NULL;
    *n_pcis = 0;
    while ((o = hwloc_get_next_pcidev(topo, o)) != NULL && *n_pcis < TOPO_NVML_MAX_GPUS) {
        if (!is_gpu(o))
            continue;
        char pci[TOPO_PCI_BUSID_MAX], vendor[8];
        int package, numa;
        pci_busid(o, pci);
        io_locality(topo, o, &package, &numa);
        snprintf(vendor, sizeof vendor, "%04x", o->attr->pcidev.vendor_id);
        const char *name = hwloc_obj_get_info_by_name(o, "PCIDevice");
        unsigned long long mem = 0;
        for (int k = 0; nvml && k < nvml->n_gpus; k++)
            if (strcmp(nvml->gpu[k].pci, pci) == 0) {
                name = nvml->gpu[k].name;
                mem = nvml->gpu[k].memory_bytes;
                used[k] = 1;
            }
        json_t *g = json_object();
        if (!g || json_array_append_new(gpus, g) != 0 ||
            put(g, "index", json_integer(*n_pcis)) ||
            put(g, "name", json_string(name ? name : "GPU")) || put(g, "pci", json_string(pci)) ||
            put(g, "numa", json_integer(numa)) || put(g, "package", json_integer(package)) ||
            put(g, "memory_bytes", json_integer((json_int_t)mem)) ||
            put(g, "vendor", json_string(vendor)))
            return -1;
        memcpy(pcis[(*n_pcis)++], pci, TOPO_PCI_BUSID_MAX);
    }
    /* GPUs NVML sees but hwloc does not (I/O discovery off or filtered) */
    for (int k = 0; nvml && k < nvml->n_gpus && *n_pcis < TOPO_NVML_MAX_GPUS; k++) {
        if (used[k])
            continue;
        json_t *g = json_object();
        if (!g || json_array_append_new(gpus, g) != 0 ||
            put(g, "index", json_integer(*n_pcis)) ||
            put(g, "name", json_string(nvml->gpu[k].name)) ||
            put(g, "pci", json_string(nvml->gpu[k].pci)) || put(g, "numa", json_integer(-1)) ||
            put(g, "package", json_integer(-1)) ||
            put(g, "memory_bytes", json_integer((json_int_t)nvml->gpu[k].memory_bytes)) ||
            put(g, "vendor", json_string("10de")))
            return -1;
        memcpy(pcis[(*n_pcis)++], nvml->gpu[k].pci, TOPO_PCI_BUSID_MAX);
    }
    return 0;
}

static int add_nics(hwloc_topology_t topo, json_t *nics)
{
    hwloc_obj_t o = NULL;
    while ((o = hwloc_get_next_osdev(topo, o)) != NULL) {
        const hwloc_obj_osdev_type_t t = o->attr->osdev.type;
        if (t != HWLOC_OBJ_OSDEV_NETWORK && t != HWLOC_OBJ_OSDEV_OPENFABRICS)
            continue;
        char pci[TOPO_PCI_BUSID_MAX] = "";
        int package, numa;
        if (o->parent && o->parent->type == HWLOC_OBJ_PCI_DEVICE)
            pci_busid(o->parent, pci);
        io_locality(topo, o, &package, &numa);
        json_t *n = json_object();
        if (!n || json_array_append_new(nics, n) != 0 ||
            put(n, "name", json_string(o->name ? o->name : "?")) ||
            put(n, "kind", json_string(t == HWLOC_OBJ_OSDEV_NETWORK ? "network" : "openfabrics")) ||
            put(n, "pci", json_string(pci)) || put(n, "numa", json_integer(numa)) ||
            put(n, "package", json_integer(package)))
            return -1;
    }
    return 0;
}

/* GPU x GPU link matrix over the gpus list (bus ids in pcis), from NVML's matrix. */
static json_t *nvlink_matrix(const topo_nvml_info *nvml, char (*pcis)[TOPO_PCI_BUSID_MAX], int n)
{
    json_t *m = json_array();
    if (!m || !nvml || nvml->n_gpus == 0)
        return m;
    int map[TOPO_NVML_MAX_GPUS];
    for (int i = 0; i < n; i++) {
        map[i] = -1;
        for (int k = 0; k < nvml->n_gpus; k++)
            if (strcmp(nvml->gpu[k].pci, pcis[i]) == 0)
                map[i] = k;
    }
    for (int i = 0; i < n; i++) {
        json_t *row = json_array();
        if (!row || json_array_append_new(m, row) != 0) {
            json_decref(m);
            return NULL;
        }
        for (int j = 0; j < n; j++) {
            const int links = map[i] >= 0 && map[j] >= 0 ? nvml->nvlink[map[i]][map[j]] : 0;
            if (json_array_append_new(row, json_integer(links)) != 0) {
                json_decref(m);
                return NULL;
            }
        }
    }
    return m;
}

cpdit_status topo_hwloc_summary(hwloc_topology_t topo, const topo_nvml_info *nvml, json_t **out,
                                cpdit_error *err)
{
    char pcis[TOPO_NVML_MAX_GPUS][TOPO_PCI_BUSID_MAX];
    int n_pcis = 0;
    json_t *s = json_object(), *caches = json_array(), *gpus = json_array(), *nics = json_array();
    hwloc_obj_t root = hwloc_get_root_obj(topo);
    *out = NULL;
    int bad = !s || put(s, "caches", caches) || put(s, "gpus", gpus) || put(s, "nics", nics);
    bad = bad || put(s, "packages", json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE)));
    bad = bad || put(s, "numa_nodes", json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE)));
    bad = bad || put(s, "cores", json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE)));
    bad = bad || put(s, "pus", json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU)));
    bad = bad || put(s, "memory_bytes", json_integer((json_int_t)root->total_memory));
    bad = bad || add_caches(topo, caches) || add_gpus(topo, nvml, gpus, pcis, &n_pcis) ||
          add_nics(topo, nics);
    bad = bad || put(s, "nvlink", nvlink_matrix(nvml, pcis, n_pcis));
    bad = bad || put(s, "nvml", json_string(nvml ? nvml->status : "not queried"));
    if (bad) {
        json_decref(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, WHERE_HWLOC, "out of memory");
    }
    *out = s;
    return CPDIT_OK;
}
