/* topology_nvml.h — GPUs and NVLink through NVIDIA's management library, loaded at run time.
 *
 * Debian's hwloc has no NVML backend, and cpdit must run where no NVIDIA driver is installed,
 * so libnvidia-ml.so.1 is opened with dlopen() and only these entry points are used:
 * nvmlInit_v2, nvmlShutdown, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
 * nvmlDeviceGetName, nvmlDeviceGetPciInfo_v3, nvmlDeviceGetMemoryInfo,
 * nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkRemotePciInfo_v2.
 * Without the library (or without GPUs) the query succeeds with n_gpus = 0 and `status`
 * says why ("libnvidia-ml.so.1 not found: ...").
 *
 * NVLink counting, per GPU pair (i, j), i != j: the number of active links of GPU i whose far
 * end is GPU j (direct links), plus, when both GPUs have links into NVSwitches (far end not a
 * GPU of this node), min(switch links of i, switch links of j) — every GPU reaches every other
 * through the switches at its own link count. The diagonal is 0. The matrix is symmetric on
 * real hardware; it is reported as measured.
 */
#ifndef CPDIT_TOPOLOGY_NVML_H
#define CPDIT_TOPOLOGY_NVML_H

#ifdef __cplusplus
extern "C" {
#endif

#define TOPO_NVML_MAX_GPUS 64
#define TOPO_NVML_NAME_MAX 96
#define TOPO_PCI_BUSID_MAX 16 /* "dddd:bb:dd.f" + NUL */

typedef struct topo_nvml_gpu {
    char name[TOPO_NVML_NAME_MAX];   /* "NVIDIA H200" */
    char pci[TOPO_PCI_BUSID_MAX];    /* "0000:17:00.0", lower case, 4-digit domain */
    unsigned long long memory_bytes; /* total device memory */
} topo_nvml_gpu;

typedef struct topo_nvml_info {
    int n_gpus;                                         /* 0 when NVML is absent */
    topo_nvml_gpu gpu[TOPO_NVML_MAX_GPUS];              /* in NVML's index order */
    int nvlink[TOPO_NVML_MAX_GPUS][TOPO_NVML_MAX_GPUS]; /* links per pair (see above) */
    char status[160]; /* "ok: driver 550.54.15", or why there is nothing */
} topo_nvml_info;

/* Fill info from NVML. Never fails: a missing library, a failing nvmlInit or any failing
 * call leaves what was found so far and a message in info->status. */
void topo_nvml_query(topo_nvml_info *info);

/* Normalise a PCI bus id ("00000000:17:00.0", "0000:17:00.0", upper or lower case) to
 * "dddd:bb:dd.f" lower case in out (TOPO_PCI_BUSID_MAX bytes). Returns 0, or -1 when text
 * is not a bus id. */
int topo_pci_busid_normalise(const char *text, char *out);

#ifdef __cplusplus
}
#endif
#endif
