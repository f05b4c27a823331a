/* topology_nvml.c — NVML through dlopen: GPU names, memory, PCI ids and NVLink per GPU pair
 * (see topology_nvml.h). The few NVML types used are declared here with NVML's layout
 * (nvml.h, API version 11+), so no NVIDIA header or library is needed to build. */
#include "topology/topology_nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define NVML_LIBRARY "libnvidia-ml.so.1"
#define NVML_SUCCESS 0
#define NVML_FEATURE_ENABLED 1
#define NVML_NVLINK_MAX_LINKS 18 /* NVML's NVML_NVLINK_MAX_LINKS (Hopper: 18 links) */

typedef int nvml_return;
typedef struct nvml_device_st *nvml_device;

/* nvmlPciInfo_t as of NVML 11 (nvmlDeviceGetPciInfo_v3, ...RemotePciInfo_v2). */
typedef struct nvml_pci_info {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci_info;

/* nvmlMemory_t */
typedef struct nvml_memory {
    unsigned long long total, free, used;
} nvml_memory;

typedef struct nvml_api {
    nvml_return (*init)(void);
    nvml_return (*shutdown)(void);
    const char *(*error_string)(nvml_return);
    nvml_return (*driver_version)(char *, unsigned int);
    nvml_return (*count)(unsigned int *);
    nvml_return (*handle)(unsigned int, nvml_device *);
    nvml_return (*name)(nvml_device, char *, unsigned int);
    nvml_return (*pci)(nvml_device, nvml_pci_info *);
    nvml_return (*memory)(nvml_device, nvml_memory *);
    nvml_return (*link_state)(nvml_device, unsigned int, int *);
    nvml_return (*link_remote_pci)(nvml_device, unsigned int, nvml_pci_info *);
} nvml_api;

int topo_pci_busid_normalise(const char *text, char *out)
{
    unsigned long domain = 0;
    unsigned bus, dev, func;
    int n = 0;
    if (text[strspn(text, "0123456789abcdefABCDEF:.")] != '\0')
        return -1; /* also keeps sscanf's %x from taking "0x" prefixes */
    /* with a domain of any width, or without one */
    if (sscanf(text, "%lx:%x:%x.%x%n", &domain, &bus, &dev, &func, &n) != 4) {
        domain = 0;
        if (sscanf(text, "%x:%x.%x%n", &bus, &dev, &func, &n) != 3)
            return -1;
    }
    if (text[n] != '\0' || domain > 0xffff || bus > 0xff || dev > 0x1f || func > 7)
        return -1;
    snprintf(out, TOPO_PCI_BUSID_MAX, "%04lx:%02x:%02x.%x", domain, bus, dev, func);
    return 0;
}

/* Resolve every symbol; returns the name of the first missing one, or NULL. */
static const char *nvml_resolve(void *lib, nvml_api *a)
{
#define NVML_SYM(field, sym)                                                                  \
    do {                                                                                      \
        *(void **)(&a->field) = dlsym(lib, sym);                                              \
        if (!a->field)                                                                        \
            return sym;                                                                       \
    } while (0)
    NVML_SYM(init, "nvmlInit_v2");
    NVML_SYM(shutdown, "nvmlShutdown");
    NVML_SYM(error_string, "nvmlErrorString");
    NVML_SYM(driver_version, "nvmlSystemGetDriverVersion");
    NVML_SYM(count, "nvmlDeviceGetCount_v2");
    NVML_SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
    NVML_SYM(name, "nvmlDeviceGetName");
    NVML_SYM(pci, "nvmlDeviceGetPciInfo_v3");
    NVML_SYM(memory, "nvmlDeviceGetMemoryInfo");
    NVML_SYM(link_state, "nvmlDeviceGetNvLinkState");
    NVML_SYM(link_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
#undef NVML_SYM
    return NULL;
}

static int gpu_by_pci(const topo_nvml_info *info, const char *pci)
{
    for (int i = 0; i < info->n_gpus; i++)
        if (strcmp(info->gpu[i].pci, pci) == 0)
            return i;
    return -1;
}

/* Links of GPU i: direct ones into info->nvlink[i][j], the number into switches into
 * *to_switch. */
static void nvml_links(const nvml_api *a, nvml_device dev, topo_nvml_info *info, int i,
                       int *to_switch)
{
    *to_switch = 0;
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
        int active = 0;
        nvml_pci_info remote;
        char pci[TOPO_PCI_BUSID_MAX];
        if (a->link_state(dev, link, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED)
            continue;
        memset(&remote, 0, sizeof remote);
        if (a->link_remote_pci(dev, link, &remote) != NVML_SUCCESS)
            continue;
        remote.bus_id[sizeof remote.bus_id - 1] = '\0';
        if (topo_pci_busid_normalise(remote.bus_id, pci) != 0)
            continue;
        const int j = gpu_by_pci(info, pci);
        if (j >= 0 && j != i)
            info->nvlink[i][j]++;
        else if (j < 0)
            (*to_switch)++;
    }
}

void topo_nvml_query(topo_nvml_info *info)
{
    memset(info, 0, sizeof *info);
    void *lib = dlopen(NVML_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(info->status, sizeof info->status, "%s not found: %s", NVML_LIBRARY,
                 why ? why : "dlopen failed");
        return;
    }
    nvml_api a;
    const char *missing = nvml_resolve(lib, &a);
    if (missing) {
        snprintf(info->status, sizeof info->status, "%s lacks %s", NVML_LIBRARY, missing);
        dlclose(lib);
        return;
    }
    nvml_return r = a.init();
    if (r != NVML_SUCCESS) {
        snprintf(info->status, sizeof info->status, "nvmlInit failed: %s", a.error_string(r));
        dlclose(lib);
        return;
    }
    unsigned count = 0;
    nvml_device devs[TOPO_NVML_MAX_GPUS];
    char driver[64] = "?";
    a.driver_version(driver, sizeof driver);
    if ((r = a.count(&count)) != NVML_SUCCESS) {
        snprintf(info->status, sizeof info->status, "nvmlDeviceGetCount failed: %s",
                 a.error_string(r));
        goto done;
    }
    if (count > TOPO_NVML_MAX_GPUS)
        count = TOPO_NVML_MAX_GPUS;
    for (unsigned d = 0; d < count; d++) {
        topo_nvml_gpu *g = &info->gpu[info->n_gpus];
        nvml_pci_info pci;
        nvml_memory mem;
        memset(&pci, 0, sizeof pci);
        if (a.handle(d, &devs[info->n_gpus]) != NVML_SUCCESS ||
            a.pci(devs[info->n_gpus], &pci) != NVML_SUCCESS)
            continue; /* a GPU NVML cannot talk to (lost, no permission): not usable */
        pci.bus_id[sizeof pci.bus_id - 1] = '\0';
        if (topo_pci_busid_normalise(pci.bus_id, g->pci) != 0)
            continue;
        if (a.name(devs[info->n_gpus], g->name, sizeof g->name) != NVML_SUCCESS)
            snprintf(g->name, sizeof g->name, "NVIDIA GPU");
        g->name[sizeof g->name - 1] = '\0';
        if (a.memory(devs[info->n_gpus], &mem) == NVML_SUCCESS)
            g->memory_bytes = mem.total;
        info->n_gpus++;
    }
    int to_switch[TOPO_NVML_MAX_GPUS];
    for (int i = 0; i < info->n_gpus; i++)
        nvml_links(&a, devs[i], info, i, &to_switch[i]);
    for (int i = 0; i < info->n_gpus; i++)
        for (int j = 0; j < info->n_gpus; j++)
            if (i != j && to_switch[i] > 0 && to_switch[j] > 0)
                info->nvlink[i][j] += to_switch[i] < to_switch[j] ? to_switch[i] : to_switch[j];
    snprintf(info->status, sizeof info->status, "ok: driver %s, %d GPU%s", driver,
             info->n_gpus, info->n_gpus == 1 ? "" : "s");
done:
    a.shutdown();
    dlclose(lib);
}
