/* test_topology_hwloc.c — the probe's node summary and locality on hwloc XML fixtures
 * (tests/data/topology/), NVML merging with a synthetic NVML answer, PCI bus-id parsing and
 * pair classes. Every expected number is the fixture's known content. */
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"
#include "topology/probe.h"
#include "topology/topology_hwloc.h"

static const char *fixture(const char *name, char *buf, size_t n)
{
    const char *src = getenv("top_srcdir");
    snprintf(buf, n, "%s/tests/data/topology/%s", src && *src ? src : ".", name);
    return buf;
}

static long long geti(const json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

static const char *gets_(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "(none)";
}

/* caches[i] == {level, size, count} */
static void check_cache(const json_t *caches, size_t i, int level, long long size, int count)
{
    const json_t *c = json_array_get(caches, i);
    CHECK_MSG(c && geti(c, "level") == level && geti(c, "size_bytes") == size &&
                  geti(c, "count") == count,
              "cache %zu: got level %lld size %lld count %lld, want %d %lld %d", i,
              geti(c, "level"), geti(c, "size_bytes"), geti(c, "count"), level, size, count);
}

/* pack:2 numa:2 (64 GiB each) l3:1 (16 MiB) l2:4 (1 MiB) l1d:1 (48 KiB) core:1 pu:2 */
static void test_two_packages_two_numa(void)
{
    char path[4096];
    hwloc_topology_t t;
    cpdit_error err;
    json_t *s = NULL;
    CHECK(topo_hwloc_load_xml(&t, fixture("two_packages_two_numa.xml", path, sizeof path), &err) == CPDIT_OK);
    if (!t)
        return;
    CHECK(topo_hwloc_summary(t, NULL, &s, &err) == CPDIT_OK);
    CHECK(geti(s, "packages") == 2);
    CHECK(geti(s, "numa_nodes") == 4);
    CHECK(geti(s, "cores") == 16);
    CHECK(geti(s, "pus") == 32);
    CHECK(geti(s, "memory_bytes") == 4 * 68719476736LL);
    const json_t *caches = json_object_get(s, "caches");
    CHECK(json_array_size(caches) == 3);
    check_cache(caches, 0, 1, 49152, 16);
    check_cache(caches, 1, 2, 1048576, 16);
    check_cache(caches, 2, 3, 16777216, 4);
    CHECK(json_array_size(json_object_get(s, "gpus")) == 0);
    CHECK(json_array_size(json_object_get(s, "nics")) == 0);
    CHECK(json_array_size(json_object_get(s, "nvlink")) == 0);

    /* locality of CPU sets: PU 0; package 0 (= NUMA 0 + 1); NUMA 2; all; across packages */
    static const struct {
        const char *cpus;
        int package, numa;
    } cases[] = {{"0x1", 0, 0},         {"0x0000ffff", 0, -1}, {"0x00ff0000", 1, 2},
                 {"0xffffffff", -1, -1}, {"0x00018000", -1, -1}, {"0x0", -1, -1},
                 {"0xc0000000", 1, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hwloc_bitmap_t set = hwloc_bitmap_alloc();
        int pkg = -9, numa = -9;
        hwloc_bitmap_sscanf(set, cases[i].cpus);
        topo_hwloc_locality_of(t, set, &pkg, &numa);
        CHECK_MSG(pkg == cases[i].package && numa == cases[i].numa,
                  "cpus %s: package %d numa %d, want %d %d", cases[i].cpus, pkg, numa,
                  cases[i].package, cases[i].numa);
        hwloc_bitmap_free(set);
    }
    json_decref(s);
    hwloc_topology_destroy(t);
}

/* gpu_node.xml: 2 packages x 1 NUMA (256 GiB each); under package 0 an ASPEED VGA (not a
 * GPU), H200s at 17:00.0 and 2a:00.0, a ConnectX-7 (mlx5_0 + ibp26s0); under package 1 H200s
 * at 9a:00.0 and ab:00.0 and an E810 (ens1f0). */
static void test_gpu_node(void)
{
    static const char *pcis[] = {"0000:17:00.0", "0000:2a:00.0", "0000:9a:00.0", "0000:ab:00.0"};
    char path[4096];
    hwloc_topology_t t;
    cpdit_error err;
    json_t *s = NULL;
    CHECK(topo_hwloc_load_xml(&t, fixture("gpu_node.xml", path, sizeof path), &err) == CPDIT_OK);
    if (!t)
        return;
    CHECK(topo_hwloc_summary(t, NULL, &s, &err) == CPDIT_OK);
    CHECK(geti(s, "packages") == 2 && geti(s, "numa_nodes") == 2 && geti(s, "cores") == 16);
    CHECK(geti(s, "memory_bytes") == 2 * 274877906944LL);
    const json_t *gpus = json_object_get(s, "gpus");
    CHECK(json_array_size(gpus) == 4);
    for (size_t i = 0; i < 4 && i < json_array_size(gpus); i++) {
        const json_t *g = json_array_get(gpus, i);
        CHECK(geti(g, "index") == (long long)i);
        CHECK_MSG(strcmp(gets_(g, "pci"), pcis[i]) == 0, "gpu %zu pci %s", i, gets_(g, "pci"));
        CHECK(geti(g, "numa") == (i < 2 ? 0 : 1));
        CHECK(geti(g, "package") == (i < 2 ? 0 : 1));
        CHECK(strcmp(gets_(g, "name"), "GH100 [H200 SXM 141GB]") == 0);
        CHECK(strcmp(gets_(g, "vendor"), "10de") == 0);
        CHECK(geti(g, "memory_bytes") == 0);
    }
    const json_t *nics = json_object_get(s, "nics");
    CHECK(json_array_size(nics) == 3);
    static const struct {
        const char *name, *kind, *pci;
        int numa;
    } want[] = {{"mlx5_0", "openfabrics", "0000:1a:00.0", 0},
                {"ibp26s0", "network", "0000:1a:00.0", 0},
                {"ens1f0", "network", "0000:b1:00.0", 1}};
    for (size_t i = 0; i < 3 && i < json_array_size(nics); i++) {
        const json_t *n = json_array_get(nics, i);
        CHECK_MSG(strcmp(gets_(n, "name"), want[i].name) == 0 &&
                      strcmp(gets_(n, "kind"), want[i].kind) == 0 &&
                      strcmp(gets_(n, "pci"), want[i].pci) == 0 && geti(n, "numa") == want[i].numa,
                  "nic %zu: %s %s %s numa %lld", i, gets_(n, "name"), gets_(n, "kind"),
                  gets_(n, "pci"), geti(n, "numa"));
    }
    CHECK(json_array_size(json_object_get(s, "nvlink")) == 0);
    json_decref(s);

    /* NVML answer in another order (reversed), with an asymmetric link matrix, plus one GPU
     * hwloc does not see: the summary must map names, memory and links onto its own order. */
    topo_nvml_info *nv = calloc(1, sizeof *nv);
    nv->n_gpus = 5;
    for (int k = 0; k < 4; k++) {
        snprintf(nv->gpu[k].name, sizeof nv->gpu[k].name, "NVIDIA H200 #%d", k);
        snprintf(nv->gpu[k].pci, sizeof nv->gpu[k].pci, "%s", pcis[3 - k]);
        nv->gpu[k].memory_bytes = 150754820096ULL + (unsigned long long)k;
    }
    snprintf(nv->gpu[4].name, sizeof nv->gpu[4].name, "NVIDIA extra");
    snprintf(nv->gpu[4].pci, sizeof nv->gpu[4].pci, "0000:c1:00.0");
    for (int k = 0; k < 5; k++)
        for (int l = 0; l < 5; l++)
            nv->nvlink[k][l] = k == l ? 0 : 10 * k + l;
    snprintf(nv->status, sizeof nv->status, "ok: synthetic");
    CHECK(topo_hwloc_summary(t, nv, &s, &err) == CPDIT_OK);
    gpus = json_object_get(s, "gpus");
    CHECK(json_array_size(gpus) == 5);
    for (int i = 0; i < 4; i++) {
        const json_t *g = json_array_get(gpus, (size_t)i);
        char name[64];
        snprintf(name, sizeof name, "NVIDIA H200 #%d", 3 - i);
        CHECK_MSG(strcmp(gets_(g, "name"), name) == 0, "gpu %d name %s", i, gets_(g, "name"));
        CHECK(geti(g, "memory_bytes") == 150754820096LL + 3 - i);
    }
    const json_t *extra = json_array_get(gpus, 4);
    CHECK(strcmp(gets_(extra, "pci"), "0000:c1:00.0") == 0 && geti(extra, "numa") == -1);
    const json_t *m = json_object_get(s, "nvlink");
    CHECK(json_array_size(m) == 5);
    const int nvml_of[5] = {3, 2, 1, 0, 4};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            const long long got = json_integer_value(json_array_get(json_array_get(m, (size_t)i), (size_t)j));
            CHECK_MSG(got == nv->nvlink[nvml_of[i]][nvml_of[j]], "nvlink[%d][%d] = %lld", i, j, got);
        }
    CHECK(strcmp(gets_(s, "nvml"), "ok: synthetic") == 0);
    json_decref(s);
    free(nv);
    hwloc_topology_destroy(t);
}

static void test_busid_and_classes(void)
{
    char out[TOPO_PCI_BUSID_MAX];
    CHECK(topo_pci_busid_normalise("00000000:17:00.0", out) == 0 && strcmp(out, "0000:17:00.0") == 0);
    CHECK(topo_pci_busid_normalise("0000:AB:1F.7", out) == 0 && strcmp(out, "0000:ab:1f.7") == 0);
    CHECK(topo_pci_busid_normalise("9a:00.0", out) == 0 && strcmp(out, "0000:9a:00.0") == 0);
    CHECK(topo_pci_busid_normalise("0000:17:00", out) == -1);
    CHECK(topo_pci_busid_normalise("0000:17:00.0x", out) == -1);
    CHECK(topo_pci_busid_normalise("", out) == -1);

    const probe_place a = {0, 0, 0}, b = {0, 0, 1}, c = {0, 1, 2}, d = {1, 0, 0},
                      unbound = {0, -1, -1};
    CHECK(probe_pair_class(&a, &a) == PROBE_SAME_NUMA);
    CHECK(probe_pair_class(&a, &b) == PROBE_SAME_SOCKET);
    CHECK(probe_pair_class(&a, &c) == PROBE_SAME_NODE);
    CHECK(probe_pair_class(&a, &d) == PROBE_CROSS_NODE);
    CHECK(probe_pair_class(&unbound, &unbound) == PROBE_SAME_NODE);
    CHECK(strcmp(probe_class_name(PROBE_CROSS_NODE), "cross_node") == 0);

    hwloc_topology_t t;
    cpdit_error err;
    CHECK(topo_hwloc_load_xml(&t, "/nonexistent/topology.xml", &err) == CPDIT_ERR_INPUT);
    CHECK(t == NULL);
}

int main(void)
{
    test_two_packages_two_numa();
    test_gpu_node();
    test_busid_and_classes();
    TEST_MAIN_END();
}
