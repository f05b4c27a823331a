/* build_info.h — what this cpdit build contains and which libraries it runs on,
 * for `cpdit --version` and the header of every benchmark table. */
#ifndef CPDIT_BUILD_INFO_H
#define CPDIT_BUILD_INFO_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0" */
const char *cpdit_version_string(void);

/* 1 when the CUDA backend (with cuBLAS, cuDNN, NCCL) is compiled in. */
int cpdit_built_with_cuda(void);

/* Multi-line report: version, configure arguments, CUDA/NCCL/cuDNN compiled in (and their
 * versions when compiled in), MPI library version, hwloc version, BLAS library and the
 * kernel core it runs. Safe to call before MPI_Init. */
void cpdit_build_info_print(FILE *out);

/* One line for benchmark table headers: "cpdit 0.1.0 | BLAS ... | MPI ... | CUDA no". */
void cpdit_build_info_line(char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
