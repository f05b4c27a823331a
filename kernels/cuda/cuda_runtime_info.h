/* cuda_runtime_info.h — what CUDA sees on this machine (host-callable, C linkage).
 * Only compiled with --with-cuda. */
#ifndef CPDIT_CUDA_RUNTIME_INFO_H
#define CPDIT_CUDA_RUNTIME_INFO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no driver or no GPU (never fails). */
int cpdit_cuda_device_count(void);

/* "runtime 13.0, driver 12.8, cuBLAS 13.0.0, cuDNN 9.x.y, NCCL 2.x.y; 1 device: NVIDIA H200"
 * or "... no device: <reason>". */
void cpdit_cuda_describe(char *buf, size_t size);

/* Runs a small kernel on device 0 (y = a*x + y over n floats) and checks the result on the
 * host. Returns 0 when it matches to 1e-6, 1 on mismatch, -1 when no device is usable. */
int cpdit_cuda_self_test(int n);

#ifdef __cplusplus
}
#endif
#endif
